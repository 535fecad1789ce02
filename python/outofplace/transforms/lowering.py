"""From value-semantic torch IR to pure StableHLO.

torch-mlir's backend pipelines do the bulk. Their output may still hold `arith.constant`
(seen for `aten.mul.Scalar`), which StableHLO consumers and the reference interpreter do
not accept; a rewrite pattern turns it into `stablehlo.constant`.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

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


def stablehlo_constants(module: ir.Operation) -> None:
    """Replaces tensor `arith.constant` ops with `stablehlo.constant`."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("arith.constant", _arith_constant_to_stablehlo)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())


def _shape_entries(shape: ir.Value) -> list[ir.Value] | None:
    """The 1-element tensors a shape operand concatenates (torch-mlir's shape of a
    dynamic tensor, after shape-legalize-to-stablehlo), or None."""
    if not isinstance(shape, ir.OpResult) or shape.owner.name != "stablehlo.concatenate":
        return [shape] if ir.RankedTensorType(shape.type).shape == [1] else None
    return list(shape.owner.operands)


def _is_size_of(entry: ir.Value, tensor: ir.Value, dim: int) -> bool:
    """`entry` (tensor<1xi32>) is the size of `tensor` at `dim`: a constant equal to a
    static size, or a reshape of get_dimension_size of that dimension."""
    size = ir.RankedTensorType(tensor.type).shape[dim]
    if not isinstance(entry, ir.OpResult):
        return False
    op = entry.owner
    if op.name == "stablehlo.constant":
        value = ir.DenseElementsAttr(op.attributes["value"])
        return not ir.ShapedType.is_dynamic_size(size) and value.is_splat and \
            ir.IntegerAttr(value.get_splat_value()).value == size
    if op.name == "stablehlo.reshape" and isinstance(op.operands[0], ir.OpResult):
        read = op.operands[0].owner
        return read.name == "stablehlo.get_dimension_size" and \
            read.operands[0] == tensor and \
            ir.IntegerAttr(read.attributes["dimension"]).value == dim
    return False


def _dynamic_broadcast(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """torch-mlir broadcasts each operand of an elementwise op of dynamic shape to the
    shape it computes: `dynamic_broadcast_in_dim %x, shape(%x)`. When every dynamic
    dimension of the operand is provably kept (its entry in the shape is the operand's
    own size), the broadcast is the operand itself if the types agree, else it is marked
    `known_nonexpanding_dimensions` (IREE compiles no broadcast of a dynamic operand
    without it)."""
    operand, shape = op.operands[0], op.operands[1]
    operand_type = ir.RankedTensorType(operand.type)
    if operand_type.has_static_shape or "known_nonexpanding_dimensions" in op.attributes:
        return True
    dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
    entries = _shape_entries(shape)
    if entries is None or len(entries) != ir.RankedTensorType(op.result.type).rank:
        return True
    kept = [i for i, d in enumerate(dims) if _is_size_of(entries[d], operand, i)]
    if any(operand_type.is_dynamic_dim(i) and i not in kept for i in range(len(dims))):
        return True  # a dynamic dimension that may expand: left as it is
    if operand.type == op.result.type and dims == list(range(len(dims))):
        rewriter.replace_op(op, [operand])
        return False
    op.attributes["known_nonexpanding_dimensions"] = ir.DenseI64ArrayAttr.get(kept)
    return False


def dynamic_broadcasts(module: ir.Operation) -> None:
    """Removes or marks the broadcasts of dynamic operands that keep their sizes."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.dynamic_broadcast_in_dim", _dynamic_broadcast)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())


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
