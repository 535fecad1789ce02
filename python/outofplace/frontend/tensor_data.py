"""`x.data` while tracing: `x.detach()`.

Both are a tensor over x's memory that autograd does not track. torch.export cannot trace
`.data` (it lifts the result as a constant, and then fails on it), and older training
code writes parameters through it (`p.data.add_(g, alpha=-lr)`): as `detach()`, that
is a write through a view of x, which the pass lowers like any other.

They differ in version counters: `detach()` shares x's, `.data` has its own. So a write
through `.data` leaves x's version as it was, as eager's does: otherwise autograd, which
runs while tracing, refuses a view of x taken before it that it checks (a row of a
parameter taken by `unbind`: "Output 1 of Unbind is a view and its base ... has been
modified inplace"), where eager runs the program.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakTensorKeyDictionary


def _writes_its_first(func: Any) -> bool:
    """Whether `func` is an in-place method, which writes its first argument."""
    name = getattr(func, "__name__", "")
    return name == "__setitem__" or name.startswith("__i") and name.endswith("__") or \
        name.endswith("_") and not name.endswith("__")


class DataAsDetach(TorchFunctionMode):
    """While tracing: `x.data` is `x.detach()`, written without changing x's version."""

    def __init__(self) -> None:
        super().__init__()
        self._aliases = WeakTensorKeyDictionary()  # the tensors `.data` returned

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func == torch.Tensor.data.__get__:  # a new method-wrapper each time: ==, not is
            alias = args[0].detach()
            self._aliases[alias] = True
            return alias
        target = args[0] if args else None
        if isinstance(target, torch.Tensor) and _writes_its_first(func) and (
                target in self._aliases or
                (target._base is not None and target._base in self._aliases)):
            with torch.autograd.grad_mode._unsafe_preserve_version_counter(target):
                return func(*args, **kwargs)
        return func(*args, **kwargs)
