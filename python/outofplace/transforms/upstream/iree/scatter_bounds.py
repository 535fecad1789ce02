"""`outofplace-iree-scatter-windows-in-bounds`: a combining scatter at indices computed at
run time writes only windows in bounds.

StableHLO's scatter skips a window out of bounds (the policy outofplace documents:
"drops"); IREE 3.13 writes it anyway, out of the operand's buffer (iree-org/iree#13580):
another element's value, or memory past the buffer (heap corruption, the process aborts):

    %r = "stablehlo.scatter"(%x, %i, %v) ({add}) : (tensor<4xf32>, tensor<1x1xi64>, ...)
    with %i = [[1000]]: XLA and the interpreter return x; IREE writes x[1000]

Each index vector out of bounds is replaced by an in-bounds one whose write changes
nothing: its clamped index and the combining op's identity (add, multiply, ...). Not a
scatter that replaces: making its indices harmless reads the operand, and IREE 3.13 then
computed valid programs wrongly (test_views.py, `position_beside_index_tensors`).
Canary (in a subprocess: the write past the buffer may abort it):
test_iree_canaries.test_scatter_writes_a_window_out_of_bounds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from ....ir_utils import all_operations, stablehlo_splat
from ...registry import register_pass
from .common import _reads_arguments


@register_pass(
    "outofplace-iree-scatter-windows-in-bounds",
    "Make a combining scatter at runtime indices write only in bounds (IREE writes out of "
    "its buffer)",
    "each combining `stablehlo.scatter` (add, or, multiply, and, max, min) of static shape "
    "whose indices are computed from arguments → the same scatter of [N, K] index rows, "
    "each row out of bounds replaced by its clamped row and the update by the op's "
    "identity: IREE 3.13 writes a window out of bounds out of the operand's buffer "
    "(iree-org/iree#13580; a workaround, transforms/upstream/iree/)")
def scatter_windows_in_bounds(module: ir.Operation) -> None:
    for scatter in [op for op in all_operations(module)
                    if op.name == "stablehlo.scatter" and _unguarded(op)]:
        with scatter.location, ir.InsertionPoint(scatter):
            _windows_in_bounds(scatter)


# A scatter body of one op combining the old value and the update: the update that
# leaves the old value as it is.
_IDENTITIES = {"stablehlo.add": 0, "stablehlo.or": 0, "stablehlo.multiply": 1,
               "stablehlo.and": 1, "stablehlo.maximum": "lowest", "stablehlo.minimum": "highest"}


def _body(scatter: Any) -> str | None:
    """"replace" when the scatter writes its updates, the combining op's name when it
    is one op of the old value and the update, else None."""
    body = scatter.regions[0].blocks[0]
    ops = list(body.operations)
    old, new = body.arguments[0], body.arguments[1]
    if len(ops) == 1 and ops[0].operands[0] == new:
        return "replace"
    if len(ops) == 2 and ops[0].name in _IDENTITIES and \
            {v for v in ops[0].operands} == {old, new} and ops[1].operands[0] == ops[0].result:
        return ops[0].name
    return None


def _unguarded(scatter: Any) -> bool:
    """A scatter of one operand, static shapes, no batching dimensions, whose indices are
    not constants, and whose body combines (`index_add_`: `_windows_in_bounds` makes an
    index out of bounds harmless with the op's identity). Not one that replaces: making
    its indices harmless reads the operand, and IREE 3.13 then computed valid programs
    wrongly (test_views.py, `position_beside_index_tensors`)."""
    if len(scatter.operands) != 3 or not all(
            ir.RankedTensorType(v.type).has_static_shape for v in scatter.operands):
        return False
    numbers = _stablehlo.ScatterDimensionNumbers(
        scatter.attributes["scatter_dimension_numbers"])
    updates = ir.RankedTensorType(scatter.operands[2].type)
    return not list(numbers.input_batching_dims) and _reads_arguments(scatter.operands[1]) \
        and _body(scatter) not in (None, "replace") and math.prod(updates.shape) > 0 and \
        isinstance(updates.element_type, (ir.IntegerType, ir.FloatType))


def _windows_in_bounds(scatter: Any) -> None:
    """Rewrites a scatter (`_unguarded`) so that every window it writes is in bounds.
    StableHLO skips a window out of bounds (the policy outofplace documents: "drops");
    IREE 3.13 writes it anyway, out of the operand's buffer (iree-org/iree#13580):
    another element's value, or memory past the buffer (heap corruption, the process
    aborts). Each index vector out of bounds is replaced by an in-bounds one whose write
    changes nothing: its clamped index and the combining op's identity (add, multiply,
    ...). The indices and updates become [N, K] and [N, window...]."""
    operand, indices, updates = scatter.operands
    numbers = _stablehlo.ScatterDimensionNumbers(
        scatter.attributes["scatter_dimension_numbers"])
    window, inserted = list(numbers.update_window_dims), list(numbers.inserted_window_dims)
    indexed, vector = list(numbers.scattered_dims_to_operand_dims), numbers.index_vector_dim
    operand_t = ir.RankedTensorType(operand.type)
    indices_t = ir.RankedTensorType(indices.type)
    updates_t = ir.RankedTensorType(updates.type)
    shape, index, element = list(operand_t.shape), indices_t.element_type, \
        updates_t.element_type
    i1 = ir.IntegerType.get_signless(1)

    def op(name: str, result_shape: list[int], type: Any, *operands: Any,
           **attributes: Any) -> Any:
        return ir.Operation.create(
            f"stablehlo.{name}", results=[ir.RankedTensorType.get(result_shape, type)],
            operands=list(operands), attributes=attributes).result

    def dims(values: list[int]) -> Any:
        return ir.DenseI64ArrayAttr.get(values)

    def splat(result_shape: list[int], type: Any, value: Any) -> Any:
        return stablehlo_splat(ir.RankedTensorType.get(result_shape, type), value)

    def compare(direction: str, a: Any, b: Any, result_shape: list[int]) -> Any:
        return op("compare", result_shape, i1, a, b, comparison_direction=ir.Attribute.parse(
            f"#stablehlo<comparison_direction {direction}>"))

    # the index vectors as rows: [N, K]
    ishape = list(indices_t.shape)
    if vector == len(ishape):
        ishape.append(1)
        indices = op("reshape", ishape, index, indices)
    batch = [d for d in range(len(ishape)) if d != vector]
    k = ishape[vector]
    n = math.prod(ishape[d] for d in batch)
    indices = op("transpose", [ishape[d] for d in batch] + [k], index, indices,
                 permutation=dims(batch + [vector]))
    rows = op("reshape", [n, k], index, indices)
    # the updates as one window a row: [N, window...]
    ushape = list(updates_t.shape)
    scattered = [d for d in range(len(ushape)) if d not in window]
    sizes = [ushape[d] for d in window]
    updates = op("transpose", [ushape[d] for d in scattered + window], element, updates,
                 permutation=dims(scattered + window))
    windows = op("reshape", [n] + sizes, element, updates)
    # each row in bounds: 0 <= start <= size - window, for each of its K entries
    extent = iter(sizes)
    window_size = [1 if d in inserted else next(extent) for d in range(len(shape))]
    highest = ir.DenseElementsAttr.get(
        np.array([[shape[d] - window_size[d] for d in indexed]],
                 dtype=np.int64 if ir.IntegerType(index).width == 64 else np.int32),
        type=ir.RankedTensorType.get([1, k], index))
    high = ir.Operation.create("stablehlo.constant", results=[highest.type],
                                 attributes={"value": highest}).result
    high = op("broadcast_in_dim", [n, k], index, high, broadcast_dimensions=dims([0, 1]))
    clamped = op("clamp", [n, k], index, splat([n, k], index, 0), rows, high)
    fits = compare("EQ", clamped, rows, [n, k])
    inside = None
    for column in range(k):
        part = op("slice", [n, 1], i1, fits, start_indices=dims([0, column]),
                  limit_indices=dims([n, column + 1]), strides=dims([1, 1]))
        part = op("reshape", [n], i1, part)
        inside = part if inside is None else op("and", [n], i1, inside, part)
    body = _body(scatter)
    row_mask = op("broadcast_in_dim", [n, k], i1, inside, broadcast_dimensions=dims([0]))
    window_mask = op("broadcast_in_dim", [n] + sizes, i1, inside,
                     broadcast_dimensions=dims([0]))
    identity = _IDENTITIES[body]
    if identity in ("lowest", "highest"):
        if isinstance(element, ir.IntegerType):
            width = ir.IntegerType(element).width
            unsigned = ir.IntegerType(element).is_unsigned
            identity = (0 if unsigned else -(1 << (width - 1))) if identity == "lowest" \
                else ((1 << width) - 1 if unsigned else (1 << (width - 1)) - 1)
        else:
            identity = float("-inf") if identity == "lowest" else float("inf")
    instead = splat([n] + sizes, element, identity)
    rows = op("select", [n, k], index, row_mask, rows, clamped)
    windows = op("select", [n] + sizes, element, window_mask, windows, instead)
    scatter.operands[1] = rows
    scatter.operands[2] = windows
    scatter.attributes["scatter_dimension_numbers"] = _stablehlo.ScatterDimensionNumbers.get(
        update_window_dims=list(range(1, len(sizes) + 1)), inserted_window_dims=inserted,
        input_batching_dims=[], scatter_indices_batching_dims=[],
        scattered_dims_to_operand_dims=indexed, index_vector_dim=1)
    scatter.attributes["indices_are_sorted"] = ir.BoolAttr.get(False)
    scatter.attributes["unique_indices"] = ir.BoolAttr.get(False)

