"""`x.data` while tracing: `x.detach()`.

Both are a tensor over x's memory that autograd does not track; they differ only in
version counters, which the compiled program does not have. torch.export cannot trace
`.data` (it lifts the result as a constant, and then fails on it), and older training
code writes parameters through it (`p.data.add_(g, alpha=-lr)`): as `detach()`, that
is a write through a view of x, which the pass lowers like any other.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode


class DataAsDetach(TorchFunctionMode):
    """While tracing: `x.data` is `x.detach()`."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if func == torch.Tensor.data.__get__:  # a new method-wrapper each time: ==, not is
            return args[0].detach()
        return func(*args, **(kwargs or {}))
