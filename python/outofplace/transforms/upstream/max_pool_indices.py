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
the last NaN's). The pooling is made again over keys in which torch-mlir's body computes
eager's order: a NaN becomes +inf with the index `-index - 2**30` (below every index,
so it beats an equal +inf, and the least of two is the later NaN's), the init's index
the greatest (padding, which takes the init, is never picked); the results are read back
(a negative index: a NaN window). The indices are int32 inside (the input's elements
below 2**30; else int64 and 2**62), widened after: a body testing for NaN itself made XLA:CPU's
reduce_window 2.5x slower, and its int64 positions were most of its time. Canary:
test_upstream_canaries.test_max_pool_indices_from_index_0_and_without_nan.
"""

from __future__ import annotations

import math

from torch_mlir import ir

from ...ir_utils import all_operations, stablehlo_compare, stablehlo_splat
from ..registry import register_pass

# torch-mlir's body of a max (min) with indices, op by op (TorchToStablehlo's max pooling
# with indices, argmax, max.dim: outofplace-upstream-nan-order reads it too)
ARG_BODY = ["stablehlo.compare", "stablehlo.select", "stablehlo.compare",
            "stablehlo.minimum", "stablehlo.select", "stablehlo.select", "stablehlo.return"]
_ARG_DIRECTIONS = {"#stablehlo<comparison_direction GE>": "GE",
                   "#stablehlo<comparison_direction LE>": "LE"}


def arg_body_direction(op: ir.Operation, name: str) -> str | None:
    """"GE" (a max) or "LE" (a min) for a `name` op (`stablehlo.reduce`,
    `stablehlo.reduce_window`) of float values and integer indices whose body is
    torch-mlir's `ARG_BODY` comparing the two values; None for any other op."""
    if op.name != name or len(op.operands) != 4:
        return None
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if [o.name for o in ops] != ARG_BODY or len(block.arguments) != 4:
        return None
    a, ia, b, _ = block.arguments
    if not isinstance(ir.RankedTensorType(a.type).element_type, ir.FloatType) or \
            not isinstance(ir.RankedTensorType(ia.type).element_type, ir.IntegerType) or \
            list(ops[0].operands) != [a, b]:
        return None
    return _ARG_DIRECTIONS.get(str(ops[0].attributes["comparison_direction"]))


def _is_max_pool_with_indices(op: ir.Operation) -> bool:
    return arg_body_direction(op, "stablehlo.reduce_window") == "GE"


def _op(name: str, operands: list, result: ir.Type, location: ir.Location,
        **attributes) -> ir.Value:
    return ir.Operation.create(name, results=[result], operands=operands,
                               attributes=attributes, loc=location).results[0]


def _body(block: ir.Block, location: ir.Location) -> None:
    """torch-mlir's body: the greater value, between equal values the lesser index (a
    max then a min: associative, for values without NaN)."""
    a, ia, b, ib = block.arguments
    with ir.InsertionPoint(block):
        greater = stablehlo_compare("GE", a, b, "FLOAT", location)
        equal = stablehlo_compare("EQ", a, b, "FLOAT", location)
        value = _op("stablehlo.select", [greater, a, b], a.type, location)
        index = _op("stablehlo.select", [
            equal, _op("stablehlo.minimum", [ia, ib], ia.type, location),
            _op("stablehlo.select", [greater, ia, ib], ia.type, location)],
            ia.type, location)
        ir.Operation.create("stablehlo.return", operands=[value, index], loc=location)


def _in_eager_order(op: ir.Operation) -> None:
    """`op` again, over values and indices made such that its body computes eager's
    order: a NaN becomes +inf with the index `-index - offset` (below any index: it
    beats an equal +inf, and the lesser of two is the later NaN's), the init's index
    the greatest (padding and the init never picked); the results read back (a negative
    index: the window's value is NaN, its index `-index - offset`). The indices are
    int32 inside when the input has fewer than 2**30 elements (XLA:CPU's reduce_window
    over int64 positions was most of its time), converted to int64 after. (A body that
    tested for NaN itself made XLA:CPU's reduce_window 2.5x slower.)"""
    location = op.location
    x, positions = op.operands[0], op.operands[1]
    values, indices = op.results[0], op.results[1]
    x_type = ir.RankedTensorType(x.type)
    width = 32 if math.prod(x_type.shape) < 1 << 30 else 64
    integer = ir.IntegerType.get_signless(width)
    offset = 1 << (width - 2)
    inner = ir.RankedTensorType.get(x_type.shape, integer)
    inner_out = ir.RankedTensorType.get(ir.RankedTensorType(indices.type).shape, integer)
    scalar = ir.RankedTensorType.get([], integer)
    with ir.InsertionPoint(op):
        nan = stablehlo_compare("NE", x, x, "FLOAT", location)
        inf = stablehlo_splat(x.type, float("inf"), location)
        positions = _op("stablehlo.convert", [positions], inner, location)
        bottom = stablehlo_splat(inner, -offset, location)
        key = _op("stablehlo.select", [
            nan, _op("stablehlo.subtract", [bottom, positions], inner, location),
            positions], inner, location)
        last = stablehlo_splat(scalar, (1 << (width - 1)) - 1, location)
        pooled = ir.Operation.create(
            "stablehlo.reduce_window", results=[values.type, inner_out],
            operands=[_op("stablehlo.select", [nan, inf, x], x.type, location), key,
                      op.operands[2], last],
            attributes={name: op.attributes[name] for name in op.attributes}, regions=1,
            loc=location)
        element = ir.RankedTensorType(values.type).element_type
        block = pooled.regions[0].blocks.append(
            ir.RankedTensorType.get([], element), scalar,
            ir.RankedTensorType.get([], element), scalar)
        _body(block, location)
        found, where = pooled.results
        was_nan = stablehlo_compare("LT", where, stablehlo_splat(inner_out, 0, location),
                                    "SIGNED", location)
        where = _op("stablehlo.select", [
            was_nan, _op("stablehlo.subtract", [stablehlo_splat(inner_out, -offset,
                                                                location), where],
                         inner_out, location), where], inner_out, location)
        index = _op("stablehlo.convert", [where], indices.type, location)
        value = _op("stablehlo.select", [
            was_nan, stablehlo_splat(values.type, float("nan"), location), found],
            values.type, location)
    values.replace_all_uses_with(value)
    indices.replace_all_uses_with(index)
    init = op.operands[3]
    op.erase()
    if isinstance(init, ir.OpResult) and not list(init.uses):
        init.owner.operation.erase()


@register_pass(
    "outofplace-upstream-max-pool-indices",
    "Max pooling with indices as eager computes it (torch-mlir: index 0 for a window of "
    "-inf, NaN ignored)",
    "torch-mlir's `reduce_window` of max pooling with indices (its body: GE select, EQ "
    "min of the indices; init index 0) → the same body over a NaN made +inf with the "
    "index `-index - 2**30` and int32 positions, from the greatest index, the results "
    "read back: eager's first maximal element, the last NaN, never padding (a "
    "workaround, transforms/upstream/)")
def max_pool_indices(module: ir.Operation) -> None:
    # (found first: each is erased with its body)
    for op in [op for op in all_operations(module) if _is_max_pool_with_indices(op)]:
        with op.location:
            _in_eager_order(op)
