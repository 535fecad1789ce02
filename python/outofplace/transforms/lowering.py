"""From value-semantic torch IR to pure StableHLO.

torch-mlir's backend pipelines do the bulk. Their output may still hold `arith.constant`
(seen for `aten.mul.Scalar`), which StableHLO consumers and the reference interpreter do
not accept; a rewrite pattern turns it into `stablehlo.constant`.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from .. import torch_types
from ..errors import UnsupportedMutationError
from ..ir_utils import all_operations

TORCH_TO_STABLEHLO = ("torchdynamo-export-to-torch-backend-pipeline",
                      "torch-backend-to-stablehlo-backend-pipeline")

# Ops a pure StableHLO module may hold besides the stablehlo dialect's own.
_STRUCTURAL_OPS = frozenset({"builtin.module", "func.func", "func.return"})


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


def stablehlo_constants(module: ir.Operation) -> None:
    """Replaces tensor `arith.constant` ops with `stablehlo.constant`, and `tensor.empty`
    (what torch-mlir makes of `torch.empty`) with zeros."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("arith.constant", _arith_constant_to_stablehlo)
    patterns.add("tensor.empty", _empty_as_zeros)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())


def refuse_unknown_shapes(module: ir.Operation) -> None:
    """Refuses the first op whose result has no known rank or size after torch-mlir's
    decompositions (its einsum and cross_entropy_loss patterns have left unranked
    tensors): its StableHLO conversion crashes the process on them."""
    for op in all_operations(module):
        for result in op.results:
            if not torch_types.is_tensor(result.type):
                continue
            sizes = torch_types.TensorType.of(result.type).sizes
            if sizes is None or any(d < 0 for d in sizes):
                raise UnsupportedMutationError.at(
                    op, "torch-mlir's decompositions left a tensor of unknown shape "
                    f"({result.type}), which its lowering to StableHLO cannot take")


def foreign_ops(module: ir.Operation) -> list[ir.Operation]:
    """The ops of `module` that are neither StableHLO nor module/function structure."""
    return [op for op in all_operations(module)
            if op.name not in _STRUCTURAL_OPS and not op.name.startswith("stablehlo.")]


class NotStableHLOError(Exception):
    """The lowered module still holds ops outside StableHLO."""


def check_pure_stablehlo(module: ir.Operation) -> None:
    """Raises NotStableHLOError naming the first foreign ops, if any."""
    foreign = foreign_ops(module)
    if foreign:
        names = sorted({op.name for op in foreign})
        raise NotStableHLOError(
            f"lowering left {len(foreign)} non-StableHLO op(s): {', '.join(names)} "
            f"(first at {foreign[0].location})")
