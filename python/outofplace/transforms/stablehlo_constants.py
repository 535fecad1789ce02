"""The `outofplace-stablehlo-constants` pass: what torch-mlir's backend pipelines leave
outside StableHLO, made StableHLO. Their output may still hold `arith.constant` (seen for
`aten.mul.Scalar`) and `tensor.empty`, which StableHLO consumers and the reference
interpreter do not accept.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from .registry import register_pass


def _arith_constant_to_stablehlo(op: ir.Operation, rewriter: rewrite.PatternRewriter
                                 ) -> bool:
    """arith.constant dense<2> : tensor<1xi64>  =>  stablehlo.constant dense<2> : ..."""
    value = op.attributes["value"]
    if not isinstance(op.result.type, ir.RankedTensorType):
        return True  # not matched: a scalar constant has no StableHLO form
    with rewriter.ip:
        new = ir.Operation.create("stablehlo.constant", results=[op.result.type],
                                  attributes={"value": value}, loc=op.location)
    rewriter.replace_op(op, new)
    return False


def _empty_as_zeros(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """tensor.empty() : tensor<2x3xf32>  =>  stablehlo.constant dense<0.0> : tensor<2x3xf32>
    (`torch.empty` and its kind: eager leaves the values unspecified, zeros are some)."""
    tensor_type = ir.RankedTensorType(op.result.type)
    if not tensor_type.has_static_shape:
        return True
    element = tensor_type.element_type
    zero = ir.FloatAttr.get(element, 0.0, loc=op.location) \
        if isinstance(element, ir.FloatType) else ir.IntegerAttr.get(element, 0)
    with rewriter.ip:
        new = ir.Operation.create(
            "stablehlo.constant", results=[tensor_type], loc=op.location,
            attributes={"value": ir.DenseElementsAttr.get_splat(tensor_type, zero)})
    rewriter.replace_op(op, new)
    return False


@register_pass(
    "outofplace-stablehlo-constants", "Turn tensor arith.constant into stablehlo.constant",
    'tensor `arith.constant` → `stablehlo.constant`; `tensor.empty` of static shape (what '
    'torch-mlir makes of `torch.empty`) → zeros')
def stablehlo_constants(module: ir.Operation) -> None:
    """Replaces tensor `arith.constant` ops with `stablehlo.constant`, and `tensor.empty`
    (what torch-mlir makes of `torch.empty`) with zeros."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("arith.constant", _arith_constant_to_stablehlo)
    patterns.add("tensor.empty", _empty_as_zeros)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
