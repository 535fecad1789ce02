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
from ..max_pool_gradient import INDICES_OF, pooling_window

_WITH_INDICES = torch.ops.aten.max_pool2d_with_indices.default


def _ceil_mode_pool(x: torch.Tensor, kernel: tuple, stride: tuple, padding: tuple,
                    dilation: tuple, extra: list[int], with_indices: bool) -> Any:
    """max_pool2d[_with_indices](x, ..., ceil_mode=True): of x padded with -inf by
    `extra` rows and columns at its end (to its last window's)."""
    padded = F.pad(x, [0, extra[1], 0, extra[0]], value=float("-inf"))
    if not with_indices:
        return torch.ops.aten.max_pool2d(padded, kernel, stride, padding, dilation, False)
    values, indices = _WITH_INDICES(padded, kernel, stride, padding, dilation, False)
    width = x.shape[-1] + extra[1]
    return values, indices // width * x.shape[-1] + indices % width


def _max_pool(graph: torch.fx.Graph, node: torch.fx.Node) -> Any:
    """max_pool2d_with_indices(x, k, stride=[])  =>  (x, k, stride=k); max_pool2d and
    max_pool2d_with_indices with ceil_mode and a partial window  =>  `_ceil_mode_pool`"""
    x = node.args[0]
    with_indices = node.target is _WITH_INDICES
    window = pooling_window(node.args[1:], node.kwargs)
    if window is not None and window[4]:
        kernel, stride, padding, dilation, _ = window
        value = x.meta["val"]
        out = (node.meta["val"][0] if with_indices else node.meta["val"]).shape[-2:]
        # the rows and columns the last window reaches past the padded input
        extra = [max(0, (out[d] - 1) * stride[d] + dilation[d] * (kernel[d] - 1) + 1
                     - value.shape[-2 + d] - 2 * padding[d]) for d in range(2)]
        if not any(extra) or not value.dtype.is_floating_point:
            return None  # no partial window: lowered as it is
        result = inline_call(graph, node, _ceil_mode_pool, x, *window[:4], extra,
                             with_indices)
        if not with_indices:
            return result
        # (max_pool_gradient.py's gradient takes these indices as the pooling's)
        result[1].meta[INDICES_OF] = (x, node.args[1:], node.kwargs)
        return tuple(result)
    stride = node.args[2] if len(node.args) > 2 else node.kwargs.get("stride", [])
    if not with_indices or list(stride):
        return None
    kernel = list(node.args[1])
    kwargs = {k: v for k, v in node.kwargs.items() if k != "stride"}
    return graph.call_function(node.target, (x, kernel, kernel, *node.args[3:]), kwargs)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    _WITH_INDICES: _max_pool,
    torch.ops.aten.max_pool2d.default: _max_pool,
}
