"""`outofplace-float32-power-in-float64`: a float32 `stablehlo.power` computed in float64
and rounded to float32, as eager's `pow` rounds it.

XLA:CPU's float32 power is not correctly rounded: `x ** 0.75` over 10,001 values near 1
differed from eager's in 8 (a unit in the last place), where the float64 power rounded to
float32 equals eager's in all. ASGD's float32 learning-rate state (`lr / (1 + lambd * lr
* step) ** alpha`) then moved a float64 model's parameters by 7e-9 of their value a step.
Part of the XLA engine's legalization (backends/xla.py); canary in test_xla_canaries.py.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from .registry import register_pass


def _rewrite(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    kind = ir.RankedTensorType(op.result.type)
    if not isinstance(kind.element_type, ir.F32Type):
        return True
    with rewriter.ip, op.location:
        wide = ir.RankedTensorType.get(kind.shape, ir.F64Type.get())
        operands = [ir.Operation.create("stablehlo.convert", results=[wide],
                                        operands=[v]).result for v in op.operands]
        power = ir.Operation.create("stablehlo.power", results=[wide], operands=operands)
        narrow = ir.Operation.create("stablehlo.convert", results=[op.result.type],
                                     operands=[power.result])
    rewriter.replace_op(op, [narrow.result])
    return False


@register_pass(
    "outofplace-float32-power-in-float64",
    "float32 `stablehlo.power` computed in float64 and rounded, as eager rounds it",
    "float32 `stablehlo.power` → `convert` of both operands to float64, the power, "
    "`convert` back: XLA:CPU's float32 power is a unit in the last place off eager's "
    "(correctly rounded) one for some inputs (the XLA engine's legalization, "
    "backends/xla.py)")
def float32_power_in_float64(module: ir.Operation) -> None:
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.power", _rewrite)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
