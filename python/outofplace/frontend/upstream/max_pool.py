"""Max pooling as torch-mlir's StableHLO lowering takes it.

- `max_pool2d_with_indices` with an empty stride (what autograd saves for
  `F.max_pool2d`'s backward): the stride is the kernel's, which the lowering of the op
  with its indices reads as stride 1 (a window result of the wrong shape, which fails
  to verify). Upstream: llvm/torch-mlir#2932 (open).
- `ceil_mode=True` with a partial last window: the lowering of `max_pool2d` pads the
  input at both ends, its windows starting early (silently wrong values), and of
  `max_pool2d_with_indices` sizes its reduce_window without the partial windows (a
  result type it does not infer: a verifier error). The input is padded with -inf at its end to the last
  window's, then pooled without ceil_mode (only where a window is partial: the
  lowering is right otherwise); the indices, of the padded rows, are made indices of
  the input's (no window's maximum is in the padding: each window
  starts inside the input or its padding, and the padding's -inf come after).
  Upstream: no issue found.

Canaries: test/pytest/test_fx_upstream_canaries.py::
test_max_pool_with_indices_reads_an_empty_stride_as_1,
::test_max_pool_with_ceil_mode_pads_both_ends.
Tests: test/pytest/test_max_pool_gradient.py.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx
import torch.nn.functional as F

from ..inline import inline_call

_WITH_INDICES = torch.ops.aten.max_pool2d_with_indices.default
# A node's meta: the indices it holds are those of max_pool2d_with_indices(x, *args,
# **kwargs), the value (a ceil_mode pooling rewritten here)
INDICES_OF = "outofplace.max_pool_indices_of"
_NAMES = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
_DEFAULTS = (None, [], 0, 1, False)


def _pair(value: Any) -> list[int] | None:
    values = [value] if isinstance(value, int) else list(value)
    values = values * 2 if len(values) == 1 else values
    return values if len(values) == 2 and all(isinstance(v, int) for v in values) else None


def _ceil_mode_pool(x: torch.Tensor, kernel: list[int], stride: list[int],
                    padding: list[int], dilation: list[int], out: list[int],
                    with_indices: bool) -> Any:
    """max_pool2d[_with_indices](x, ..., ceil_mode=True), whose result is `out` (its
    last two sizes): of x padded with -inf to its last window's end."""
    size = x.shape[-2:]
    extra = [max(0, (out[d] - 1) * stride[d] + dilation[d] * (kernel[d] - 1) + 1
                 - size[d] - 2 * padding[d]) for d in range(2)]
    padded = F.pad(x, [0, extra[1], 0, extra[0]], value=float("-inf"))
    if not with_indices:
        return torch.ops.aten.max_pool2d(padded, kernel, stride, padding, dilation, False)
    values, indices = _WITH_INDICES(padded, kernel, stride, padding, dilation, False)
    width = size[1] + extra[1]
    return values, indices // width * size[1] + indices % width


def _max_pool(graph: torch.fx.Graph, node: torch.fx.Node) -> Any:
    """max_pool2d_with_indices(x, k, stride=[])  =>  (x, k, stride=k); max_pool2d and
    max_pool2d_with_indices with ceil_mode  =>  `_ceil_mode_pool`"""
    x = node.args[0]
    kernel, stride, padding, dilation, ceil_mode = [
        node.args[i + 1] if i + 1 < len(node.args) else node.kwargs.get(name, default)
        for i, (name, default) in enumerate(zip(_NAMES, _DEFAULTS))]
    with_indices = node.target is _WITH_INDICES
    if ceil_mode:
        window = [_pair(kernel), _pair(stride) if list(stride) else _pair(kernel),
                  _pair(padding), _pair(dilation)]
        value = x.meta["val"]
        if None in window or not value.dtype.is_floating_point:
            return None
        out = list(node.meta["val"][0].shape[-2:] if with_indices else
                   node.meta["val"].shape[-2:])
        size = value.shape[-2:]
        if all((out[d] - 1) * window[1][d] + window[3][d] * (window[0][d] - 1) + 1 <=
               size[d] + 2 * window[2][d] for d in range(2)):
            return None  # no partial window: lowered as it is
        result = inline_call(graph, node, _ceil_mode_pool, x, *window, out, with_indices)
        if not with_indices:
            return result
        # (max_pool_gradient.py's gradient takes these indices as the pooling's)
        result[1].meta[INDICES_OF] = (x, node.args[1:], node.kwargs)
        return tuple(result)
    if not with_indices or list(stride):
        return None
    kwargs = {k: v for k, v in node.kwargs.items() if k != "stride"}
    return graph.call_function(node.target, (x, list(kernel), list(kernel),
                                             *node.args[3:]), kwargs)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    _WITH_INDICES: _max_pool,
    torch.ops.aten.max_pool2d.default: _max_pool,
}
