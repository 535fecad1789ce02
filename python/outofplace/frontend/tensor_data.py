"""`x.data` while tracing: `x.detach()`.

Both are a tensor over x's memory that autograd does not track. torch.export cannot trace
`.data` (it lifts the result as a constant, and then fails on it), and older training
code writes parameters through it (`p.data.add_(g, alpha=-lr)`): as `detach()`, that
is a write through a view of x, which the pass lowers like any other.

They differ in version counters: `detach()` shares x's, `.data` has its own. So a write
through `.data` leaves x's version as it was, as eager's does: otherwise autograd, which
runs while tracing, refuses a view of x taken before it that it checks (a row of a
parameter taken by `unbind`: "Output 1 of Unbind is a view and its base ... has been
modified inplace"), where eager runs the program. And so at a call: a parameter or
buffer the program writes only through `.data` keeps its version
(`ProgramSignature.unversioned`, which `DataAsDetach.unversioned` names), as in eager,
where a view of it taken by autograd (a row of it from `chunk`, registered as a buffer)
stays readable; a parameter written otherwise too has its version moved on, as eager's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakTensorKeyDictionary


def _writes_its_first(func: Any) -> bool:
    """Whether `func` is an in-place method, which writes its first argument."""
    if isinstance(func, torch._ops.OpOverload):  # (`torch.ops.aten.mul_.Tensor`)
        first = func._schema.arguments[:1]
        return bool(first) and first[0].alias_info is not None and first[0].alias_info.is_write
    name = getattr(func, "__name__", "")
    return name == "__setitem__" or name.startswith("__i") and name.endswith("__") or \
        name.endswith("_") and not name.endswith("__")


class DataAsDetach(TorchFunctionMode):
    """While tracing: `x.data` is `x.detach()`, written without changing x's version."""

    def __init__(self) -> None:
        super().__init__()
        # the tensors `.data` returned -> the tensor whose memory each is
        self._aliases = WeakTensorKeyDictionary()
        # the tensors (roots of views) written through `.data`, and written otherwise
        self._through_data: dict[int, torch.Tensor] = {}
        self._otherwise: dict[int, torch.Tensor] = {}
        self.unversioned: set[str] = set()  # see `name_unversioned`

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func == torch.Tensor.data.__get__:  # a new method-wrapper each time: ==, not is
            alias = args[0].detach()
            self._aliases[alias] = args[0]
            return alias
        target = args[0] if args else None
        for out in pytree.tree_leaves(kwargs.get("out")):  # (`torch.add(a, b, out=x)`)
            if isinstance(out, torch.Tensor):
                _mark(self._otherwise, out)
        if isinstance(target, torch.Tensor) and _writes_its_first(func):
            aliased = self._aliases.get(target)
            if aliased is None and target._base is not None:
                aliased = self._aliases.get(target._base)
            if aliased is not None:
                _mark(self._through_data, aliased)
                with torch.autograd.grad_mode._unsafe_preserve_version_counter(target):
                    return func(*args, **kwargs)
            _mark(self._otherwise, target)
        return func(*args, **kwargs)

    def name_unversioned(self, module: torch.nn.Module) -> None:
        """Inside the trace (the module holds the traced state): `unversioned` is the
        state-dict names of the parameters and buffers whose memory the program wrote
        only through `.data`."""
        only = {key for key in self._through_data if key not in self._otherwise}
        self.unversioned = {
            name for name, t in (*module.named_parameters(remove_duplicate=False),
                                 *module.named_buffers(remove_duplicate=False))
            if id(_root(t)) in only}
        self._through_data.clear()
        self._otherwise.clear()


def _root(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor `tensor` views (autograd's base), or itself."""
    return tensor._base if tensor._base is not None else tensor


def _mark(written: dict[int, torch.Tensor], tensor: torch.Tensor) -> None:
    """Records `tensor`'s root in `written` (by id; the root kept alive while tracing)."""
    root = _root(tensor)
    written[id(root)] = root


class RealTensorsMet(TorchFunctionMode):
    """While tracing: the real tensors the program's ops take (not the trace's fake ones),
    by their memory. torch.export lifts a tensor the program reaches other than as its
    module's state (a module held by a class attribute, a module of the user's) as a
    constant over the same memory but with a version of its own: `held_by` gives back
    the caller's tensor, whose version says whether it was written since."""

    def __init__(self) -> None:
        super().__init__()
        self._met: dict[int, list[torch.Tensor]] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        for leaf in pytree.tree_leaves((args, kwargs or {})):
            if type(leaf) in (torch.Tensor, torch.nn.Parameter) and not leaf.is_meta and \
                    leaf.layout == torch.strided and leaf.numel():
                met = self._met.setdefault(leaf.data_ptr(), [])
                if all(t is not leaf for t in met):
                    met.append(leaf)
        return func(*args, **(kwargs or {}))

    def held_by(self, constant: torch.Tensor) -> torch.Tensor | None:
        """The real tensor met over `constant`'s memory, shape, strides and dtype that is
        not `constant` itself, or None."""
        return next((t for t in self._met.get(constant.data_ptr(), ())
                     if t is not constant and t.shape == constant.shape and
                     t.stride() == constant.stride() and t.dtype == constant.dtype), None)
