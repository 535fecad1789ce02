"""`outofplace-upstream-static-slices`: a slice with constant bounds as `stablehlo.slice`,
out of reach of torch-mlir's folder.

torch-mlir's folder of a slice of a constant with step > 1 reads out of bounds, a crash
(a segfault in `mlir::detail::readBits`):

    %0 = torch.vtensor.literal(dense<[[1.0, 2.0, 3.0]]> : tensor<1x3xf32>) : ...
    %1 = torch.aten.slice.Tensor %0, %int1, %int-1, %int9223372036854775807, %int3
    torch-mlir-opt --canonicalize: Stack dump

and the constant can appear only once torch-mlir canonicalises (`copy(x, literal)` is the
literal), so every slice with constant bounds is lowered here.
Canary: test_upstream_canaries.test_strided_slice_of_a_constant_crashes_the_folder.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from ... import torch_types
from ...indexing import clamp_slice, constant_bound, slice_length
from ...ir_utils import constant_int, from_builtin, to_builtin, unnamed
from ..lower_updates.common import _stablehlo, _static_tensor
from ..registry import register_pass


def _static_slice(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """A slice with constant bounds as `stablehlo.slice`, its bounds clamped as eager
    clamps them. torch-mlir's folder of a slice of a constant with step > 1 reads out of
    bounds (a crash), and the constant can appear only once torch-mlir canonicalises
    (`copy(x, literal)` is the literal):

        %r = torch.aten.slice.Tensor %x, %int1, %int-1, %int9223372036854775807, %int3
        =>  stablehlo.slice %x [0:1, 2:3]
    """
    self, dim_value, start_value, end_value, step_value = op.operands
    self_t, result_t = _static_tensor(self), _static_tensor(op.result)
    dim, step = constant_int(dim_value), constant_int(step_value)
    if self_t is None or result_t is None or dim is None or step is None or step < 1 or \
            not self_t.sizes:
        return True
    rank = len(self_t.sizes)
    dim %= rank
    size = self_t.sizes[dim]
    start, end = constant_bound(start_value, 0), constant_bound(end_value, size)
    if start is None or end is None:
        return True
    start, end = clamp_slice(start, end, size)
    if slice_length(start, end, step) != result_t.sizes[dim]:
        return True
    if result_t.sizes[dim] <= 1:  # no step between one element: IREE rejects [0:1:2]
        end, step = start + result_t.sizes[dim], 1
    starts, limits, strides = [0] * rank, list(self_t.sizes), [1] * rank
    starts[dim], limits[dim], strides[dim] = start, end, step
    with rewriter.ip, unnamed(op.location):
        result_type = ir.RankedTensorType.get(
            list(result_t.sizes), torch_types.element_type(result_t.dtype, signless=True))
        sliced = _stablehlo("slice", result_type, to_builtin(self),
                            start_indices=ir.DenseI64ArrayAttr.get(starts),
                            limit_indices=ir.DenseI64ArrayAttr.get(limits),
                            strides=ir.DenseI64ArrayAttr.get(strides), loc=op.location)
        result = from_builtin(sliced, op.result.type)
    rewriter.replace_op(op, [result])
    return False


@register_pass(
    "outofplace-upstream-static-slices",
    "Lower slices with constant bounds to stablehlo.slice (torch-mlir's folder crashes)",
    "a slice with constant bounds → `stablehlo.slice`, bounds clamped as eager clamps "
    "them: torch-mlir's folder of a strided slice of a constant reads out of bounds, a "
    "crash (a workaround, transforms/upstream/)")
def lower_static_slices(module: ir.Operation) -> None:
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("torch.aten.slice.Tensor", _static_slice)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
