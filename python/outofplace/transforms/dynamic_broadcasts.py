"""The `outofplace-dynamic-broadcasts` pass: the broadcasts of dynamic operands torch-mlir
leaves, removed where they broadcast nothing or marked as non-expanding.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from .dynamic_shapes import _erase_unused_shape_ops
from .registry import register_pass


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


@register_pass(
    "outofplace-dynamic-broadcasts",
    "Remove or mark as non-expanding the broadcasts of dynamic operands",
    "`stablehlo.dynamic_broadcast_in_dim` to the operand's own shape → its operand; "
    "others gain `known_nonexpanding_dimensions` (IREE and XLA then need no runtime "
    "broadcast check)")
def dynamic_broadcasts(module: ir.Operation) -> None:
    """Removes or marks as non-expanding the broadcasts of dynamic operands."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.dynamic_broadcast_in_dim", _dynamic_broadcast)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
    _erase_unused_shape_ops(module)
