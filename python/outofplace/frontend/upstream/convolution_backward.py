"""`convolution_backward` as JAX's transpose rules compute it.

torch-mlir computes the weight's gradient as a convolution grouped by the batch
(feature_group_count = N) over a window one row and column too big, which XLA:CPU runs
3x slower than JAX's program (a stride-2 3x3 convolution's backward, bench/op_classes.py).
Not wrong, slow: the rewrite is a performance workaround. A transposed convolution's
gradients, which torch-mlir's lowering refused ("failed to legalize operation
'torch.constant.bool'"), are convolutions too (`_transposed_gradients`).

Upstream: no issue found.
Canaries: test/pytest/test_fx_upstream_canaries.py::test_weight_gradient_is_grouped_by_the_batch,
::test_transposed_convolution_backward_does_not_lower.
Tests: test/pytest/test_convolution_backward.py.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..inline import inline_call


def _convolution_gradients(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                           stride: list[int], padding: list[int], dilation: list[int],
                           groups: int, mask: list[bool]) -> tuple[torch.Tensor | None, ...]:
    """The gradients of `convolution(x, w, stride, padding, dilation, groups)` as
    convolutions, as JAX's transpose rules compute them: the input's a transposed
    convolution of the output's gradient, the weight's a convolution of the input by the
    output's gradient over the batch (strides and dilations swapped), cut to the kernel."""
    spatial = range(2, x.dim())
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        # the full transposed convolution, then the input's rows of it: (rows past the
        # last window, read by no output, have gradient 0). torch-mlir applies an
        # output_padding to the dimensions in reverse order, so none is asked of it.
        full = torch.ops.aten.convolution(grad, w, None, stride, [0] * len(stride),
                                          dilation, True, [0] * len(stride), groups)
        grad_input = full
        for d in spatial:
            grad_input = grad_input.narrow(d, padding[d - 2], min(
                x.shape[d], full.shape[d] - padding[d - 2]))
        extra = [x.shape[d] - grad_input.shape[d] for d in spatial]
        if any(extra):
            grad_input = torch.constant_pad_nd(
                grad_input, [p for e in reversed(extra) for p in (0, e)])
    if mask[1]:
        # the batch contracted as the convolution's features: in groups, the input's
        # channels [N, g * c, ...] as [c, g * N, ...], group-major, the gradient's
        # [g * o, N, ...] (its transpose)
        n, c = x.shape[0], x.shape[1] // groups
        by_group = x.reshape(n, groups, c, *x.shape[2:]).permute(
            2, 1, 0, *range(3, x.dim() + 1)).reshape(c, groups * n, *x.shape[2:])
        by_batch = torch.ops.aten.convolution(
            by_group, grad.transpose(0, 1), None, dilation, padding, stride,
            False, [0] * len(stride), groups)
        for d in spatial:
            by_batch = by_batch.narrow(d, 0, w.shape[d])
        grad_weight = by_batch.transpose(0, 1)
    if mask[2]:
        grad_bias = grad.sum([0, *spatial])
    return grad_input, grad_weight, grad_bias


def _transposed_gradients(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                          stride: list[int], padding: list[int], dilation: list[int],
                          groups: int, mask: list[bool]) -> tuple[torch.Tensor | None, ...]:
    """The gradients of the transposed convolution `conv_transpose(x, w, stride, padding,
    dilation, output_padding, groups)`, the adjoint of `convolution(·, w, stride,
    padding, dilation, groups)`: the input's that convolution of the output's gradient
    (rows an output_padding added are read by no window), the weight's that
    convolution's weight gradient with the output's gradient as its input and x as its
    output's gradient."""
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        grad_input = torch.ops.aten.convolution(grad, w, None, stride, padding, dilation,
                                                False, [0] * len(stride), groups)
    if mask[1]:
        grad_weight = _convolution_gradients(x, grad, w, stride, padding, dilation,
                                             groups, [False, True, False])[1]
    if mask[2]:
        grad_bias = grad.sum([0, *range(2, grad.dim())])
    return grad_input, grad_weight, grad_bias


def _convolution_backward(graph: torch.fx.Graph, node: torch.fx.Node
                          ) -> tuple[torch.fx.Node | None, ...] | None:
    """convolution_backward  =>  `_convolution_gradients`, or `_transposed_gradients` of
    a transposed convolution (which torch-mlir's lowering refused)"""
    (grad, x, w, _, stride, padding, dilation, transposed, output_padding, groups,
     mask) = node.args
    if not transposed and any(output_padding):
        return None
    return inline_call(graph, node, _transposed_gradients if transposed else
                       _convolution_gradients, grad, x, w, list(stride), list(padding),
                       list(dilation), groups, list(mask))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.convolution_backward.default: _convolution_backward,
}
