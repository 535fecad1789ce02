"""`outofplace-upstream-fill-tensor`: `aten.fill.Tensor` as the `aten.copy` it equals.

torch-mlir has no StableHLO lowering for `aten.fill.Tensor` (`b[3] = 0` traces to
`fill_.Tensor` with a 0-d value, whose twin inplace-to-outofplace emits):

    %0 = torch.aten.fill.Tensor %x, %v : !torch.vtensor<[4],f32>, !torch.vtensor<[],f32>
           -> !torch.vtensor<[4],f32>
    torch-backend-to-stablehlo-backend-pipeline: failed to legalize operation
    'torch.aten.fill.Tensor' (it lowers fill.Scalar, llvm/torch-mlir#2108, not this one)

`aten.copy(self, value, false)` means the same: the value broadcast to self's shape and
cast to its dtype. Canary: test_upstream_canaries.test_fill_tensor_has_no_lowering.
"""

from __future__ import annotations

from torch_mlir import ir

from ...ir_utils import all_operations, torch_constant
from ..registry import register_pass


@register_pass(
    "outofplace-upstream-fill-tensor",
    "Rewrite aten.fill.Tensor as aten.copy (torch-mlir cannot lower it)",
    "`torch.aten.fill.Tensor %x, %v` → `torch.aten.copy %x, %v, false`: torch-mlir has no "
    "StableHLO lowering of `fill.Tensor` (a workaround, transforms/upstream/)")
def fill_as_copy(module: ir.Operation) -> None:
    for op in all_operations(module):
        if op.name != "torch.aten.fill.Tensor":
            continue
        ip = ir.InsertionPoint(op)
        copy = ir.Operation.create(
            "torch.aten.copy", results=[op.result.type], loc=op.location, ip=ip,
            operands=[*op.operands, torch_constant("bool", False, op.location, ip)])
        op.result.replace_all_uses_with(copy.result)
        op.erase()
