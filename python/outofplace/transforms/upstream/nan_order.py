"""`outofplace-upstream-nan-order`: sorts and arg-reductions of floats in eager's order, NaN
the greatest value of a sort and the winner of a max or min.

torch-mlir builds their comparisons from one float `compare`, which a NaN fails both
ways, so both were silently wrong on NaN:

- `sort`, `argsort`, `msort`, `topk` lower to a `stablehlo.sort` whose comparator is

      ^bb0(%a: tensor<f32>, %b: tensor<f32>, %ia: tensor<i64>, %ib: tensor<i64>):
        %0 = stablehlo.compare LT, %a, %b, FLOAT      (GT: descending, topk)
        stablehlo.return %0

  no strict weak order with a NaN: `torch.sort([3, nan, 1, 2, 1])` gave
  `[1, 3, nan, 1, 2]`. Eager orders NaN above every number (last ascending, first
  descending); the comparator becomes `a < b or (b is NaN and a is not)` (descending:
  `a > b or (a is NaN and b is not)`). Equal numbers stay unordered among themselves,
  as eager's unstable sort leaves them (`is_stable` is kept).
- `argmax`, `argmin`, `max.dim`, `min.dim` lower to a `stablehlo.reduce` of the values
  and an iota whose body keeps the greater (`GE`; `LE`: lesser) value and, of equal
  values, the lesser index:

      %ge = compare GE, %a, %b;  %v = select %ge, %a, %b
      %eq = compare EQ, %a, %b;  %i = select %eq, (minimum %ia, %ib), (select %ge, %ia, %ib)

  which drops a NaN (`max([3, nan, 5], 0)` gave (5, 2)); eager's gives the first NaN and
  its index. The body becomes the order in which NaN beats every number, two NaNs or
  equal numbers go to the lesser index, and the value is the chosen index's (of 0.0 and
  -0.0, the first's, as eager).

Integer sorts and reductions are left as they are.

Upstream: no issue found (TorchToStablehlo builds these comparators from `compare`
alone). Canaries: test_upstream_canaries.test_sort_comparator_ignores_nan,
::test_arg_reduction_ignores_nan.
"""

from __future__ import annotations

from torch_mlir import ir

from ...ir_utils import all_operations, stablehlo_compare
from ..registry import register_pass
from .max_pool_indices import arg_body_direction

_DIRECTIONS = {"#stablehlo<comparison_direction LT>": "LT",
               "#stablehlo<comparison_direction GT>": "GT"}


def _sort_direction(op: ir.Operation) -> str | None:
    """LT or GT for a sort of floats whose comparator is torch-mlir's one comparison of
    the first operand's pair; None for any other sort."""
    if op.name != "stablehlo.sort":
        return None
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if [o.name for o in ops] != ["stablehlo.compare", "stablehlo.return"]:
        return None
    compare = ops[0]
    a, b = block.arguments[0], block.arguments[1]
    if list(compare.operands) != [a, b] or \
            not isinstance(ir.RankedTensorType(a.type).element_type, ir.FloatType):
        return None
    if "compare_type" in compare.attributes and \
            str(compare.attributes["compare_type"]) != "#stablehlo<comparison_type FLOAT>":
        return None
    return _DIRECTIONS.get(str(compare.attributes["comparison_direction"]))


def _reduction_direction(op: ir.Operation) -> str | None:
    """GT (a max) or LT (a min) for a `stablehlo.reduce` of float values and integer
    indices with torch-mlir's arg-reduction body; None for any other op."""
    return {"GE": "GT", "LE": "LT"}.get(arg_body_direction(op, "stablehlo.reduce"))


def _logical(name: str, *operands: ir.Value) -> ir.Value:
    return ir.Operation.create(name, results=[operands[0].type],
                               operands=list(operands)).results[0]


def _nan_greatest(op: ir.Operation, direction: str) -> None:
    """The comparator of `op` rebuilt as `direction` with NaN the greatest value."""
    block = op.regions[0].blocks[0]
    compare, returned = list(block.operations)
    a, b = block.arguments[0], block.arguments[1]
    # ascending: the NaN on the right goes after; descending: the NaN on the left first
    nan_side, other = (b, a) if direction == "LT" else (a, b)
    with ir.InsertionPoint(returned), compare.location:
        ordered = stablehlo_compare(direction, a, b)
        nan = stablehlo_compare("NE", nan_side, nan_side)
        other_number = stablehlo_compare("EQ", other, other)
        result = _logical("stablehlo.or", ordered,
                          _logical("stablehlo.and", nan, other_number))
        ir.Operation.create("stablehlo.return", operands=[result])
    returned.erase()
    compare.erase()


def _beats(direction: str, a: ir.Value, b: ir.Value, a_nan: ir.Value,
           b_number: ir.Value) -> ir.Value:
    """a strictly before b in the reduction's order: greater (`direction` GT) or lesser
    (LT), or a NaN beside a number."""
    return _logical("stablehlo.or", stablehlo_compare(direction, a, b),
                    _logical("stablehlo.and", a_nan, b_number))


def _nan_wins(op: ir.Operation, direction: str) -> None:
    """The body of `op` rebuilt: the value beating the other (NaN beats every number),
    of two NaNs or equal values the lesser index; the value always the index's."""
    block = op.regions[0].blocks[0]
    a, ia, b, ib = block.arguments
    body = list(block.operations)
    with ir.InsertionPoint(body[-1]), body[0].location:
        a_nan, b_nan = (stablehlo_compare("NE", v, v) for v in (a, b))
        a_number, b_number = (stablehlo_compare("EQ", v, v) for v in (a, b))
        a_first = _beats(direction, a, b, a_nan, b_number)
        b_first = _beats(direction, b, a, b_nan, a_number)
        tie = _logical("stablehlo.and", _logical("stablehlo.not", a_first),
                       _logical("stablehlo.not", b_first))
        take_a = _logical("stablehlo.or", a_first,
                          _logical("stablehlo.and", tie,
                                   stablehlo_compare("LT", ia, ib, "SIGNED")))
        value = ir.Operation.create("stablehlo.select", results=[a.type],
                                    operands=[take_a, a, b]).results[0]
        index = ir.Operation.create("stablehlo.select", results=[ia.type],
                                    operands=[take_a, ia, ib]).results[0]
        ir.Operation.create("stablehlo.return", operands=[value, index])
    for old in reversed(body):
        old.erase()


@register_pass(
    "outofplace-upstream-nan-order",
    "Sorts and arg-reductions of floats in eager's order: NaN the greatest in a sort, "
    "the winner of a max or min (torch-mlir's comparisons ignore NaN)",
    "torch-mlir's `stablehlo.sort` comparator `compare LT|GT, a, b, FLOAT` → the same "
    "`or` (the NaN side is NaN `and` the other is not): NaN last ascending, first "
    "descending; its arg-reduction body (argmax, max.dim: GE select, EQ min of the "
    "indices) → NaN beats every number, ties to the lesser index, the value the index's: "
    "eager's first NaN (a workaround, transforms/upstream/)")
def nan_order(module: ir.Operation) -> None:
    for op in all_operations(module):
        direction = _sort_direction(op)
        if direction is not None:
            _nan_greatest(op, direction)
            continue
        direction = _reduction_direction(op)
        if direction is not None:
            _nan_wins(op, direction)
