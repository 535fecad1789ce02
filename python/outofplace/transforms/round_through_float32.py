"""The `outofplace-round-through-float32` pass: float64 to float16 or bfloat16 as eager
rounds it, through float32.

PyTorch's `c10::Half` and `c10::BFloat16` are built from a `float` only, so eager casts
a double to them in two roundings: to float32, then to the 16-bit type. StableHLO's
`convert` (and XLA's) rounds once. The two differ when the float32 rounding lands on a
tie of the 16-bit type: `b.add_(s, alpha=0.9)` of a float16 `b` and a float64 `s` is
computed in float64 by both, and eager's 3.4951171853 becomes float32 3.4951171875,
a float16 tie, rounded to even 3.49609375, where one rounding gives 3.494140625.

    %1 = stablehlo.convert %0 : (tensor<f64>) -> tensor<f16>
    =>
    %f = stablehlo.convert %0 : (tensor<f64>) -> tensor<f32>
    %1 = stablehlo.convert %f : (tensor<f32>) -> tensor<f16>
"""

from __future__ import annotations

from torch_mlir import ir

from ..ir_utils import all_operations, unnamed
from .registry import register_pass


def _element(value: ir.Value) -> ir.Type:
    return ir.ShapedType(value.type).element_type


@register_pass(
    "outofplace-round-through-float32",
    "Convert float64 to float16 and bfloat16 through float32, as eager rounds",
    "each `stablehlo.convert` from f64 to f16 or bf16 → a convert to f32, then to the "
    "16-bit type: PyTorch builds its 16-bit floats from a float, rounding twice where "
    "StableHLO rounds once (the two differ on ties of the 16-bit type)")
def round_through_float32(module: ir.Operation) -> None:
    for op in all_operations(module):
        if op.name != "stablehlo.convert" or \
                not isinstance(_element(op.operands[0]), ir.F64Type) or \
                not isinstance(_element(op.results[0]), (ir.F16Type, ir.BF16Type)):
            continue
        with ir.InsertionPoint(op), unnamed(op.location):
            f32 = ir.RankedTensorType.get(ir.RankedTensorType(op.operands[0].type).shape,
                                          ir.F32Type.get())
            op.operands[0] = ir.Operation.create("stablehlo.convert", results=[f32],
                                                 operands=[op.operands[0]]).result
