"""`outofplace-upstream-max-pool-indices`: max pooling's indices (and values) as eager
computes them, where a window holds only -inf, or a NaN.

torch-mlir lowers `max_pool2d_with_indices` (and its 1-d and 3-d kin) to a
`reduce_window` over the values and an iota of their flat positions, from the init
(-inf, 0), whose body takes the greater value and, between equal values, the lesser
index:

    ^bb0(%a: tensor<f32>, %ia: tensor<i64>, %b: tensor<f32>, %ib: tensor<i64>):
      %ge = stablehlo.compare GE, %a, %b, FLOAT
      %v = stablehlo.select %ge, %a, %b
      %eq = stablehlo.compare EQ, %a, %b, FLOAT
      %i = stablehlo.select %eq, (minimum %ia, %ib), (select %ge, %ia, %ib)
      stablehlo.return %v, %i

A window of -inf elements equals the init: its index is the init's 0, wherever the
window is (eager: its first element), and its gradient lands on element 0. A NaN is
never greater nor equal: the value and index are whichever the reduction order leaves
(eager's kernel takes `val > max || isnan(val)`: the window's value is NaN and its index
the last NaN's). The body becomes eager's order, which is associative: a NaN above every
number and, between NaNs, the greater index; between equal numbers, the lesser index;
the init's index is the greatest int64 (so any element's index beats it, and padding,
which takes the init, is never picked). Canary:
test_upstream_canaries.test_max_pool_indices_from_index_0_and_without_nan.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from ...ir_utils import all_operations, stablehlo_splat
from ..registry import register_pass

# torch-mlir's body, op by op (TorchToStablehlo's max pooling with indices)
_BODY = ["stablehlo.compare", "stablehlo.select", "stablehlo.compare",
         "stablehlo.minimum", "stablehlo.select", "stablehlo.select", "stablehlo.return"]


def _is_max_pool_with_indices(op: ir.Operation) -> bool:
    if op.name != "stablehlo.reduce_window" or len(op.operands) != 4:
        return False
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if [o.name for o in ops] != _BODY or len(block.arguments) != 4:
        return False
    first = ops[0]
    return str(first.attributes["comparison_direction"]) == \
        "#stablehlo<comparison_direction GE>" and \
        isinstance(ir.ShapedType(op.operands[0].type).element_type, ir.FloatType) and \
        isinstance(ir.ShapedType(op.operands[1].type).element_type, ir.IntegerType)


def _eager_body(block: ir.Block, location: ir.Location) -> None:
    """Replaces the body's ops: (a, ia) and (b, ib) combined in eager's order."""
    for old in reversed(list(block.operations)):
        old.erase()
    a, ia, b, ib = block.arguments
    flag = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1), loc=location)

    def op(name: str, operands: list, result: ir.Type | None = None, **attributes):
        return ir.Operation.create(name, results=[result or operands[-1].type],
                                   operands=operands, attributes=attributes,
                                   loc=location).results[0]

    def compare(direction: str, x: ir.Value, y: ir.Value) -> ir.Value:
        return op("stablehlo.compare", [x, y], flag,
                  comparison_direction=_stablehlo.ComparisonDirectionAttr.get(direction),
                  compare_type=_stablehlo.ComparisonTypeAttr.get("FLOAT"))

    with ir.InsertionPoint(block):
        a_nan, b_nan = compare("NE", a, a), compare("NE", b, b)
        greater, equal = compare("GT", a, b), compare("EQ", a, b)
        only_a_nan = op("stablehlo.and", [a_nan, op("stablehlo.not", [b_nan])])
        pick_a = op("stablehlo.or", [greater, only_a_nan])
        both_nan = op("stablehlo.and", [a_nan, b_nan])
        value = op("stablehlo.select", [pick_a, a, b])
        index = op("stablehlo.select", [
            both_nan, op("stablehlo.maximum", [ia, ib]),
            op("stablehlo.select", [equal, op("stablehlo.minimum", [ia, ib]),
                                    op("stablehlo.select", [pick_a, ia, ib])])])
        ir.Operation.create("stablehlo.return", operands=[value, index], loc=location)


@register_pass(
    "outofplace-upstream-max-pool-indices",
    "Max pooling with indices as eager computes it (torch-mlir: index 0 for a window of "
    "-inf, NaN ignored)",
    "torch-mlir's `reduce_window` of max pooling with indices (its body: GE select, EQ "
    "min of the indices) → a body in eager's order (NaN above every number, the last "
    "NaN's index; the first maximal element's index) and the init's index the greatest "
    "int64, so padding and the init are never picked (a workaround, "
    "transforms/upstream/)")
def max_pool_indices(module: ir.Operation) -> None:
    for op in list(all_operations(module)):
        if not _is_max_pool_with_indices(op):
            continue
        _eager_body(op.regions[0].blocks[0], op.location)
        init = op.operands[3]
        width = ir.IntegerType(ir.ShapedType(init.type).element_type).width
        with ir.InsertionPoint(op):
            op.operands[3] = stablehlo_splat(init.type, (1 << (width - 1)) - 1, op.location)
        if isinstance(init, ir.OpResult) and not list(init.uses):
            init.owner.operation.erase()
