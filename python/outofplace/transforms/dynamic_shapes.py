"""The `outofplace-dynamic-shapes` pass: what torch-mlir leaves of a program's shape
computations when it has dynamic dimensions, made ready for
`shape-legalize-to-stablehlo` (transforms/dynamic_broadcasts.py shares its clean-up).
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from ..ir_utils import all_operations, erase_unused
from .registry import register_pass


_ARITH_TO_STABLEHLO = {"arith.addi": "add", "arith.subi": "subtract",
                       "arith.muli": "multiply", "arith.maxsi": "maximum",
                       "arith.minsi": "minimum"}
_CMPI = {0: "EQ", 1: "NE", 2: "LT", 3: "LE", 4: "GT", 5: "GE"}  # arith.cmpi's signed ones


def _scalar_tensor(value: ir.Value, done: dict) -> ir.Value | None:
    """A 0-d StableHLO tensor (i64, or i1 for a comparison) computing an integer scalar
    torch-mlir computes from sizes with arith and tensor.dim (the clamped end of
    `c[:, :L]`); None for anything else. Created before the op being rewritten."""
    if value in done:
        return done[value]
    op = value.owner if isinstance(value, ir.OpResult) else None
    if op is None:
        return None
    i64, i1 = ir.IntegerType.get_signless(64), ir.IntegerType.get_signless(1)
    scalar = ir.RankedTensorType.get([], i64)

    def create(name: str, result: ir.Type, *operands: ir.Value, **attributes) -> ir.Value:
        return ir.Operation.create(f"stablehlo.{name}", results=[result],
                                   operands=list(operands), attributes=attributes).result

    operands = [_scalar_tensor(v, done) for v in op.operands] \
        if op.name not in ("arith.constant", "tensor.dim") else []
    if any(o is None for o in operands):
        return None
    result = None
    if op.name == "arith.constant" and isinstance(op.attributes["value"], ir.IntegerAttr):
        result = create("constant", scalar, value=ir.DenseElementsAttr.get_splat(
            scalar, ir.IntegerAttr.get(i64, ir.IntegerAttr(op.attributes["value"]).value)))
    elif op.name == "tensor.dim":
        index = op.operands[1]
        if isinstance(index, ir.OpResult) and index.owner.name == "arith.constant":
            size = create("get_dimension_size", ir.RankedTensorType.get(
                [], ir.IntegerType.get_signless(32)), op.operands[0],
                dimension=ir.IntegerAttr.get(i64, ir.IntegerAttr(
                    index.owner.attributes["value"]).value))
            result = create("convert", scalar, size)
    elif op.name == "arith.index_cast":
        result = operands[0]
    elif op.name in _ARITH_TO_STABLEHLO:
        result = create(_ARITH_TO_STABLEHLO[op.name], scalar, *operands)
    elif op.name == "arith.cmpi" and \
            ir.IntegerAttr(op.attributes["predicate"]).value in _CMPI:
        direction = _CMPI[ir.IntegerAttr(op.attributes["predicate"]).value]
        result = create("compare", ir.RankedTensorType.get([], i1), *operands,
                        comparison_direction=ir.Attribute.parse(
                            f"#stablehlo<comparison_direction {direction}>"))
    elif op.name == "arith.select":
        result = create("select", ir.RankedTensorType(operands[1].type), *operands)
    done[value] = result
    return result


def _sizes_from_elements(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """tensor.from_elements of i64 scalars computed from sizes (`x.mean(0)` divides by
    one, `c[:, :L]` clamps its end) as StableHLO on 0-d tensors, then reshape and
    concatenate. Others are left to fail the purity check."""
    i64 = ir.IntegerType.get_signless(64)
    if ir.RankedTensorType(op.result.type).element_type != i64:
        return True
    with rewriter.ip, op.location:
        entries = [_scalar_tensor(v, {}) for v in op.operands]
        if any(e is None for e in entries):
            return True  # (the ops made for the others are left unused, then erased)
        vector = ir.RankedTensorType.get([1], i64)
        entries = [ir.Operation.create("stablehlo.reshape", results=[vector],
                                       operands=[e]).result for e in entries]
        new = entries[0] if len(entries) == 1 else ir.Operation.create(
            "stablehlo.concatenate", results=[op.result.type], operands=entries,
            attributes={"dimension": ir.IntegerAttr.get(i64, 0)}).result
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


@register_pass(
    "outofplace-dynamic-shapes",
    "Inline broadcast assumptions and make size tensors StableHLO (dynamic shapes)",
    "what torch-mlir leaves of a dynamic program's shape computations: `shape.assuming` "
    "regions inlined, sizes gathered by `tensor.from_elements` → StableHLO, for "
    "`shape-legalize-to-stablehlo`; unused size computations erased")
def dynamic_shapes(module: ir.Operation) -> None:
    """What torch-mlir leaves of the shape computations of a program with dynamic
    dimensions, for shape-legalize-to-stablehlo: shape.assuming regions of broadcasts
    inlined, sizes gathered into tensors made StableHLO."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("shape.assuming", _assume_broadcastable)
    patterns.add("tensor.from_elements", _sizes_from_elements)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
    _erase_unused_shape_ops(module)


_PURE_SIZE_OPS = frozenset({"stablehlo.constant", "stablehlo.get_dimension_size",
                            "stablehlo.convert", "stablehlo.reshape", "stablehlo.compare",
                            "stablehlo.select", "shape.cstr_broadcastable", "tensor.dim",
                            *_ARITH_TO_STABLEHLO, "arith.constant", "arith.index_cast",
                            "arith.cmpi", "arith.select"})


def _erase_unused_shape_ops(module: ir.Operation) -> None:
    """The size computations the shape lowering left unused, in a program with dynamic
    dimensions (static programs are left as they are)."""
    ops = all_operations(module)
    types = [r.type for op in ops for r in op.results] + [
        t for op in ops if op.name == "func.func"
        for t in ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value).inputs]
    if not any(isinstance(t, ir.ShapedType) and not ir.ShapedType(t).has_static_shape
               for t in types):  # (only an argument may be dynamic: `x[pos]` of it)
        return
    erase_unused(ops, lambda op: op.name in _PURE_SIZE_OPS)
