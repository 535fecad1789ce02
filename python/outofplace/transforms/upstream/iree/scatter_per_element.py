"""`outofplace-iree-scatter-per-element`: a scatter of whole windows along a dimension
other than the leading ones becomes a scatter of single elements.

Not a wrong result but a slow one: IREE 3.13 updates the windowed form (`c[:, 0:64:8] =
k`, `c.index_copy_(1, idx, k)`) in a second buffer and copies it back (0.1 s a step on a
64 MiB cache; the stream-phase program allocates a buffer as large as the operand), the
per-element form in place. No IREE issue was found for it. The windowed form stays what
outofplace emits: XLA runs it 5-20x faster. Canary:
test_iree_canaries.test_scatter_of_windows_off_the_lead_is_not_in_place.
"""

from __future__ import annotations

from typing import Any

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from ....ir_utils import all_operations
from ...registry import register_pass


@register_pass(
    "outofplace-iree-scatter-per-element",
    "Rewrite a scatter of windows off the leading dimensions as one of single elements "
    "(IREE copies the operand for it)",
    "a `stablehlo.scatter` of static shape with windows whose indexed dimensions are not "
    "the leading ones → the same scatter with one full index per update element (an iota "
    "along each window dimension): IREE 3.13 updates the windowed form in a copy of the "
    "operand, the per-element one in place (a workaround, transforms/upstream/iree/)")
def scatter_per_element(module: ir.Operation) -> None:
    for scatter in [op for op in all_operations(module)
                    if op.name == "stablehlo.scatter" and _windows_off_the_lead(op)]:
        with scatter.location, ir.InsertionPoint(scatter):
            _one_index_per_element(scatter)


def _windows_off_the_lead(scatter: Any) -> bool:
    """A scatter of one operand, with windows, whose indexed dimensions are not the
    leading ones and each a single element of its window (so a window is in bounds
    exactly when each of its elements is)."""
    if not all(ir.RankedTensorType(v.type).has_static_shape for v in scatter.operands):
        return False  # a dynamic program: its indices would need an iota of runtime size
    numbers = _stablehlo.ScatterDimensionNumbers(
        scatter.attributes["scatter_dimension_numbers"])
    indexed = list(numbers.scattered_dims_to_operand_dims)
    return len(scatter.operands) == 3 and bool(list(numbers.update_window_dims)) and \
        not list(numbers.input_batching_dims) and \
        sorted(indexed) != list(range(len(indexed))) and \
        set(indexed) <= set(numbers.inserted_window_dims)


def _one_index_per_element(scatter: Any) -> None:
    """Rewrites a windowed `scatter` (`_windows_off_the_lead`) in place: its indices
    become one full index per update element (the update's shape, then the operand's
    rank), the operand dimension's index or an iota along the window dimension."""
    numbers = _stablehlo.ScatterDimensionNumbers(
        scatter.attributes["scatter_dimension_numbers"])
    window, inserted = list(numbers.update_window_dims), list(numbers.inserted_window_dims)
    indexed, vector = list(numbers.scattered_dims_to_operand_dims), numbers.index_vector_dim
    operand, indices, updates = scatter.operands
    rank = ir.RankedTensorType(operand.type).rank
    shape = list(ir.RankedTensorType(updates.type).shape)
    indices_t = ir.RankedTensorType(indices.type)
    element = indices_t.element_type
    batch = [d for d in range(len(shape)) if d not in window]  # the updates' indexed dims
    windowed = [d for d in range(rank) if d not in inserted]  # operand dims of a window

    def op(name: str, result_shape: list[int], *operands: Any, **attributes: Any) -> Any:
        return ir.Operation.create(
            f"stablehlo.{name}", results=[ir.RankedTensorType.get(result_shape, element)],
            operands=list(operands), attributes=attributes).result

    def dims(values: list[int]) -> Any:
        return ir.DenseI64ArrayAttr.get(values)

    columns = []
    for d in range(rank):
        if d in indexed:
            column = indices
            if vector < indices_t.rank:  # the d-th entry of each index vector
                starts, limits = [0] * indices_t.rank, list(indices_t.shape)
                starts[vector], limits[vector] = indexed.index(d), indexed.index(d) + 1
                column = op("slice", [n if i != vector else 1 for i, n in enumerate(limits)],
                            column, start_indices=dims(starts), limit_indices=dims(limits),
                            strides=dims([1] * indices_t.rank))
                column = op("reshape", [n for i, n in enumerate(indices_t.shape)
                                        if i != vector], column)
            column = op("broadcast_in_dim", shape, column, broadcast_dimensions=dims(batch))
        elif d in windowed:
            column = op("iota", shape, iota_dimension=ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), window[windowed.index(d)]))
        else:  # a dimension of size-one windows no index names: always 0
            zero = ir.Operation.create("stablehlo.constant", results=[
                ir.RankedTensorType.get([], element)], attributes={
                "value": ir.DenseElementsAttr.get_splat(
                    ir.RankedTensorType.get([], element), ir.IntegerAttr.get(element, 0))
            }).result
            column = op("broadcast_in_dim", shape, zero, broadcast_dimensions=dims([]))
        columns.append(op("reshape", shape + [1], column))
    scatter.operands[1] = op("concatenate", shape + [rank], *columns,
                             dimension=ir.IntegerAttr.get(
                                 ir.IntegerType.get_signless(64), len(shape)))
    scatter.attributes["scatter_dimension_numbers"] = _stablehlo.ScatterDimensionNumbers.get(
        update_window_dims=[], inserted_window_dims=list(range(rank)),
        input_batching_dims=[], scatter_indices_batching_dims=[],
        scattered_dims_to_operand_dims=list(range(rank)), index_vector_dim=len(shape))
    scatter.attributes["indices_are_sorted"] = ir.BoolAttr.get(False)

