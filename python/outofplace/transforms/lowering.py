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


def _i64_size(value: ir.Value) -> ir.Value | None:
    """A tensor<1xi64> StableHLO value for an i64 scalar torch-mlir computes from a size:
    `arith.index_cast(tensor.dim %t, %c)` or an integer constant; None for others."""
    i64 = ir.IntegerType.get_signless(64)
    vector = ir.RankedTensorType.get([1], i64)
    op = value.owner if isinstance(value, ir.OpResult) else None
    if op is not None and op.name == "arith.constant":
        return ir.Operation.create("stablehlo.constant", results=[vector], attributes={
            "value": ir.DenseElementsAttr.get_splat(vector, ir.IntegerAttr.get(
                i64, ir.IntegerAttr(op.attributes["value"]).value))}).result
    if op is None or op.name != "arith.index_cast" or \
            not isinstance(op.operands[0], ir.OpResult) or \
            op.operands[0].owner.name != "tensor.dim":
        return None
    tensor, index = op.operands[0].owner.operands
    if not isinstance(index, ir.OpResult) or index.owner.name != "arith.constant":
        return None
    dim = ir.IntegerAttr(index.owner.attributes["value"]).value
    size = ir.Operation.create(
        "stablehlo.get_dimension_size",
        results=[ir.RankedTensorType.get([], ir.IntegerType.get_signless(32))],
        operands=[tensor], attributes={"dimension": ir.IntegerAttr.get(i64, dim)}).result
    size = ir.Operation.create("stablehlo.convert", results=[ir.RankedTensorType.get(
        [], i64)], operands=[size]).result
    return ir.Operation.create("stablehlo.reshape", results=[vector], operands=[size]).result


def _sizes_from_elements(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """tensor.from_elements of sizes (`x.mean(0)` divides by one) as StableHLO:
    get_dimension_size, convert, concatenate. Others are left to fail the purity check."""
    with rewriter.ip, op.location:
        entries = [_i64_size(v) for v in op.operands]
        if any(e is None for e in entries) or \
                ir.RankedTensorType(op.result.type).element_type != \
                ir.IntegerType.get_signless(64):
            for e in entries:
                if e is not None:
                    rewriter.erase_op(e.owner)
            return True
        new = entries[0] if len(entries) == 1 else ir.Operation.create(
            "stablehlo.concatenate", results=[op.result.type], operands=entries,
            attributes={"dimension": ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), 0)}).result
    rewriter.replace_op(op, [new])
    return False


def _assume_broadcastable(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`shape.assuming (cstr_broadcastable %a, %b) { ... }` => its body: torch.export
    traced the program with these shapes broadcasting (it guards its symbols, and the
    call checks them), so the check holds."""
    witness = op.operands[0]
    if not isinstance(witness, ir.OpResult) or \
            witness.owner.name != "shape.cstr_broadcastable":
        return True
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    for inner in body[:-1]:
        inner.move_before(op)
    rewriter.replace_op(op, list(body[-1].operands))
    return False


def _dynamic_broadcast(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """torch-mlir broadcasts each operand of an elementwise op of dynamic shape to the
    shape it computes (`dynamic_broadcast_in_dim %x, shape`). A dynamic dimension of a
    program torch.export traced is never broadcast from 1: export assumes its symbols
    are not 1 (and refuses a program that needs it). So every operand dimension but a
    static 1 keeps its size: marked `known_nonexpanding_dimensions` (IREE compiles no
    broadcast of a dynamic operand without it), and a broadcast to the operand's own type
    is the operand."""
    operand_type = ir.RankedTensorType(op.operands[0].type)
    if operand_type.has_static_shape or "known_nonexpanding_dimensions" in op.attributes:
        return True
    dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
    if op.operands[0].type == op.result.type and dims == list(range(len(dims))):
        rewriter.replace_op(op, [op.operands[0]])
        return False
    op.attributes["known_nonexpanding_dimensions"] = ir.DenseI64ArrayAttr.get(
        [i for i, n in enumerate(operand_type.shape) if n != 1])
    return False


def dynamic_shapes(module: ir.Operation) -> None:
    """What torch-mlir leaves of the shape computations of a program with dynamic
    dimensions, for shape-legalize-to-stablehlo: shape.assuming regions of broadcasts
    inlined, sizes gathered into tensors made StableHLO."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("shape.assuming", _assume_broadcastable)
    patterns.add("tensor.from_elements", _sizes_from_elements)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
    _erase_unused_shape_ops(module)


def _erase_unused_shape_ops(module: ir.Operation) -> None:
    """The constraints, size reads and scalar constants the shape lowering left unused."""
    for op in reversed(all_operations(module)):
        if op.name in ("shape.cstr_broadcastable", "arith.index_cast", "tensor.dim",
                       "arith.constant") and all(not list(r.uses) for r in op.results):
            op.erase()


def dynamic_broadcasts(module: ir.Operation) -> None:
    """Removes or marks as non-expanding the broadcasts of dynamic operands."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.dynamic_broadcast_in_dim", _dynamic_broadcast)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
    _erase_unused_shape_ops(module)


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
