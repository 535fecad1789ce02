"""Average pooling's gradient, and its windows past the input (`ceil_mode=True`), as
convolutions by a window of ones.

torch-mlir's StableHLO lowering of `avg_pool2d_backward` fails to legalize (every
configuration: no layer with `nn.AvgPool2d` trained), and of `avg_pool2d` with
`ceil_mode=True` builds a reduce_window of the wrong result type (an MLIR verifier
error, not a refusal; `avg_pool3d` alike). Both follow eager's CPU kernel: a window starts at
`o * stride - padding`, ends `kernel` later but not past the padded input; its divisor
is that length (`count_include_pad`), or the length of the part inside the input, or
`divisor_override`. The gradient is each window's gradient divided by its divisor,
spread over the window: a transposed convolution by ones, one group a channel (as
convolution_backward.py computes a convolution's input gradient). The forward with
`ceil_mode` is the sum of each window (a convolution by ones of the input padded with
zeros to the last window's end) divided by its divisor.

Upstream: no issue found.
Canaries: test/pytest/test_fx_upstream_canaries.py::test_avg_pool_backward_does_not_lower,
::test_avg_pool_with_ceil_mode_fails_to_verify.
Tests: test/pytest/test_avg_pool.py.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx
import torch.nn.functional as F

from ..inline import inline_call
from .convolution_backward import _convolution_gradients


def _divisors(x: torch.Tensor, out: tuple[int, ...], kernel: list[int], stride: list[int],
              padding: list[int], count_include_pad: bool,
              divisor_override: int | None) -> torch.Tensor:
    """Each window's divisor, of shape `out` (the pooled dimensions), as eager's
    kernel computes it."""
    size = x.shape[-len(out):]
    lengths = []
    for d, o in enumerate(out):
        start = torch.arange(o) * stride[d] - padding[d]
        end = torch.clamp(start + kernel[d], max=size[d] + padding[d])
        if not count_include_pad:
            start, end = torch.clamp(start, min=0), torch.clamp(end, max=size[d])
        lengths.append(end - start)
    divisors = lengths[0]
    for length in lengths[1:]:
        divisors = divisors[..., None] * length
    if divisor_override:
        divisors = torch.full_like(divisors, divisor_override)
    return divisors.to(x.dtype)


def _window_of_ones(x: torch.Tensor, kernel: list[int]) -> torch.Tensor:
    """The depthwise weight of a window's sum: [channels, 1, *kernel] of ones."""
    return x.new_ones((x.shape[-len(kernel) - 1], 1, *kernel))


def _batched(x: torch.Tensor, spatial: int) -> torch.Tensor:
    """x with a batch dimension (avg_pool takes an unbatched input too)."""
    return x if x.dim() == spatial + 2 else x.unsqueeze(0)


def _gradient(grad: torch.Tensor, x: torch.Tensor, kernel: list[int], stride: list[int],
              padding: list[int], count_include_pad: bool,
              divisor_override: int | None) -> torch.Tensor:
    """avg_pool{2,3}d_backward(grad, x, ...): each window's gradient over its divisor,
    added over the window's positions inside x."""
    spatial = len(kernel)
    divisors = _divisors(x, tuple(grad.shape[-spatial:]), kernel, stride, padding,
                         count_include_pad, divisor_override)
    batched = _batched(x, spatial)
    gradient = _convolution_gradients(
        _batched(grad / divisors, spatial), batched, _window_of_ones(batched, kernel),
        stride, padding, [1] * spatial, batched.shape[1], [True, False, False])[0]
    return gradient.view(x.shape)


def _pooled(x: torch.Tensor, out: tuple[int, ...], kernel: list[int], stride: list[int],
            padding: list[int], count_include_pad: bool,
            divisor_override: int | None) -> torch.Tensor:
    """avg_pool{2,3}d(x, ...) with windows past the padded input (ceil_mode)."""
    spatial = len(kernel)
    batched = _batched(x, spatial)
    size = batched.shape[-spatial:]
    # zeros to the padding, then to the last window's end
    pads = []
    for d in reversed(range(spatial)):
        pads += [padding[d], max(padding[d], (out[d] - 1) * stride[d] + kernel[d]
                                 - padding[d] - size[d])]
    sums = torch.ops.aten.convolution(
        F.pad(batched, pads), _window_of_ones(batched, kernel), None, stride,
        [0] * spatial, [1] * spatial, False, [0] * spatial, batched.shape[1])
    sums = sums[(..., *(slice(0, o) for o in out))]
    divisors = _divisors(x, out, kernel, stride, padding, count_include_pad,
                         divisor_override)
    return (sums / divisors).view(*x.shape[:-spatial], *out)


def _window(kernel: Any, stride: Any, padding: Any, spatial: int) -> tuple | None:
    """(kernel, stride, padding) as lists of `spatial` ints (an empty stride is the
    kernel's, one int is every dimension's), or None."""
    def listed(value: Any) -> list | None:
        values = [value] if isinstance(value, int) else list(value)
        values = values * spatial if len(values) == 1 else values
        return values if len(values) == spatial and \
            all(isinstance(v, int) for v in values) else None
    kernel = listed(kernel)
    stride = kernel if stride is None or list(stride) == [] else listed(stride)
    padding = listed(padding)
    return None if None in (kernel, stride, padding) else (kernel, stride, padding)


_BACKWARDS = {torch.ops.aten.avg_pool2d_backward.default: 2,
              torch.ops.aten.avg_pool3d_backward.default: 3}
_FORWARDS = {torch.ops.aten.avg_pool2d.default: 2, torch.ops.aten.avg_pool3d.default: 3}


def _avg_pool_backward(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """avg_pool{2,3}d_backward(grad, x, kernel, stride, padding, ceil_mode,
    count_include_pad, divisor_override)  =>  `_gradient`"""
    grad, x, kernel, stride, padding, _, count_include_pad, divisor_override = \
        (list(node.args) + [None])[:8]
    window = _window(kernel, stride, padding, _BACKWARDS[node.target])
    if window is None or not x.meta["val"].dtype.is_floating_point:
        return None
    return inline_call(graph, node, _gradient, grad, x, *window, bool(count_include_pad),
                       divisor_override)


def _avg_pool_ceil_mode(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """avg_pool{2,3}d(x, kernel, stride, padding, ceil_mode=True, ...)  =>  `_pooled`"""
    names = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
             "divisor_override")
    defaults = (None, [], 0, False, True, None)
    x = node.args[0]
    kernel, stride, padding, ceil_mode, count_include_pad, divisor_override = [
        node.args[i + 1] if i + 1 < len(node.args) else node.kwargs.get(name, default)
        for i, (name, default) in enumerate(zip(names, defaults))]
    spatial = _FORWARDS[node.target]
    window = _window(kernel, stride, padding, spatial)
    if not ceil_mode or window is None or not x.meta["val"].dtype.is_floating_point:
        return None
    out = tuple(node.meta["val"].shape[-spatial:])
    return inline_call(graph, node, _pooled, x, out, *window, bool(count_include_pad),
                       divisor_override)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    **{op: _avg_pool_backward for op in _BACKWARDS},
    **{op: _avg_pool_ceil_mode for op in _FORWARDS},
}
