"""`outofplace-upstream-fmod`: `aten.fmod.Tensor` as `stablehlo.remainder` (C's fmod).

torch-mlir lowers `fmod.Tensor` as a quotient formula, `a - sign(a/b) * floor(|a/b|) *
b`: NaN for a finite dividend by an infinite divisor (C's fmod gives the dividend),
wrong wherever the quotient is past the float's integers (`fmod(1e10, 3.0)` gave 256,
eager 1), and for integers through the float division. `stablehlo.remainder` is C's
fmod, exact, for floats and integers. frontend/upstream/remainder.py gives every fmod
operands of the result's shape and dtype (broadcast and promoted at the FX graph), so
the op here is elementwise over like operands:

    %r = torch.aten.fmod.Tensor %a, %b : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>
  =>
    %r = torch_c.from_builtin_tensor (stablehlo.remainder (torch_c.to_builtin_tensor %a),
                                                         (torch_c.to_builtin_tensor %b))

An fmod of other operands is left to torch-mlir. Upstream: no issue found. Canary:
test_fx_upstream_canaries.test_fmod_is_a_quotient_formula.
"""

from __future__ import annotations

from torch_mlir import ir

from ... import torch_types
from ...ir_utils import all_operations, from_builtin, to_builtin
from ..registry import register_pass


def _like_operands(op: ir.Operation) -> bool:
    if op.name != "torch.aten.fmod.Tensor":
        return False
    types = [torch_types.TensorType.of(v.type) for v in (*op.operands, op.result)]
    result = types[-1]
    return result.sizes is not None and -1 not in result.sizes and \
        result.dtype is not None and all(t == result for t in types)


@register_pass(
    "outofplace-upstream-fmod",
    "aten.fmod.Tensor of like operands as stablehlo.remainder, C's fmod (torch-mlir "
    "lowers a quotient formula)",
    "`torch.aten.fmod.Tensor` whose operands have the result's shape and dtype → "
    "`stablehlo.remainder` between torch_c casts: torch-mlir's quotient formula is NaN "
    "by an infinite divisor and wrong past the float's integers (a workaround, "
    "transforms/upstream/)")
def fmod_as_remainder(module: ir.Operation) -> None:
    for op in [op for op in all_operations(module) if _like_operands(op)]:
        with op.location, ir.InsertionPoint(op):
            a, b = (to_builtin(v) for v in op.operands)
            remainder = ir.Operation.create("stablehlo.remainder", results=[a.type],
                                            operands=[a, b]).result
            op.result.replace_all_uses_with(from_builtin(remainder, op.result.type))
        op.erase()
