"""Average pooling's gradient, and its windows past the input (`ceil_mode=True`), as
convolutions by a window of ones; adaptive average pooling of uneven windows as
products by matrices of ones.

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

Adaptive average pooling whose windows differ in length or overlap (a size no multiple
of the output's) fails torch-mlir's lowering ("condition must be true"), and its
gradient does not lower at all: each window's sum is a product by a [output, input]
matrix of ones, one dimension at a time, divided by its length in each dimension in
turn (as eager divides); the gradient, each window's gradient so divided, is spread by
the transposed products.

Upstream: no issue found.
Canaries: test/pytest/test_fx_upstream_canaries.py::test_avg_pool_backward_does_not_lower,
::test_avg_pool_with_ceil_mode_fails_to_verify, ::test_uneven_adaptive_avg_pool_does_not_lower.
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


def _adaptive_windows(size: int, out: int, dtype: torch.dtype
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Adaptive pooling's windows along one dimension, as eager's kernel places them
    (output i from floor(i * size / out) to ceil((i + 1) * size / out)): a [out, size]
    matrix of ones in each window, and each window's length."""
    i = torch.arange(out)
    start, end = i * size // out, ((i + 1) * size + out - 1) // out
    position = torch.arange(size)
    ones = (position >= start[:, None]) & (position < end[:, None])
    return ones.to(dtype), end - start


def _adaptive_average(x: torch.Tensor, out: tuple[int, ...]) -> torch.Tensor:
    """adaptive_avg_pool{2,3}d(x, out): each window's sum (a product by its matrix of
    ones, one dimension at a time) divided by its length in each dimension in turn,
    as eager divides it."""
    spatial = len(out)
    result, lengths = x, []
    for d in range(spatial):
        dim = x.dim() - spatial + d
        ones, length = _adaptive_windows(x.shape[dim], out[d], x.dtype)
        result = torch.movedim(torch.movedim(result, dim, -1) @ ones.T, -1, dim)
        lengths.append(length.to(x.dtype).view(-1, *[1] * (spatial - d - 1)))
    for length in lengths:
        result = result / length
    return result


def _adaptive_gradient(grad: torch.Tensor, x: torch.Tensor, spatial: int) -> torch.Tensor:
    """_adaptive_avg_pool{2,3}d_backward(grad, x): each window's gradient divided by
    its length in each dimension, added over the window's positions (a product by its
    matrix of ones), one dimension at a time."""
    result = grad
    for d in range(spatial):
        dim = x.dim() - spatial + d
        ones, length = _adaptive_windows(x.shape[dim], grad.shape[dim], x.dtype)
        result = result / length.to(x.dtype).view(-1, *[1] * (spatial - d - 1))
        result = torch.movedim(torch.movedim(result, dim, -1) @ ones, -1, dim)
    return result


_ADAPTIVE = {torch.ops.aten.adaptive_avg_pool2d.default: 2,
             torch.ops.aten._adaptive_avg_pool2d.default: 2,
             torch.ops.aten.adaptive_avg_pool3d.default: 3,
             torch.ops.aten._adaptive_avg_pool3d.default: 3}
_ADAPTIVE_BACKWARDS = {torch.ops.aten._adaptive_avg_pool2d_backward.default: 2,
                       torch.ops.aten._adaptive_avg_pool3d_backward.default: 3}


def _uneven(x: torch.fx.Node, out: tuple[int, ...]) -> bool:
    """Whether some dimension's windows differ in length or overlap (its size no
    multiple of its output's), which torch-mlir's lowering refuses."""
    size = x.meta["val"].shape[-len(out):]
    return any(s % o for s, o in zip(size, out)) and \
        x.meta["val"].dtype.is_floating_point


def _adaptive_avg_pool(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """adaptive_avg_pool{2,3}d(x, out) of uneven windows  =>  `_adaptive_average`"""
    x = node.args[0]
    out = tuple(node.meta["val"].shape[-_ADAPTIVE[node.target]:])
    if not _uneven(x, out):
        return None
    return inline_call(graph, node, _adaptive_average, x, out)


def _adaptive_avg_pool_backward(graph: torch.fx.Graph, node: torch.fx.Node
                                ) -> torch.fx.Node | None:
    """_adaptive_avg_pool{2,3}d_backward(grad, x)  =>  `_adaptive_gradient`"""
    grad, x = node.args[:2]
    if not x.meta["val"].dtype.is_floating_point:
        return None
    return inline_call(graph, node, _adaptive_gradient, grad, x,
                       _ADAPTIVE_BACKWARDS[node.target])


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    **{op: _adaptive_avg_pool for op in _ADAPTIVE},
    **{op: _adaptive_avg_pool_backward for op in _ADAPTIVE_BACKWARDS},
    **{op: _avg_pool_backward for op in _BACKWARDS},
    **{op: _avg_pool_ceil_mode for op in _FORWARDS},
}
