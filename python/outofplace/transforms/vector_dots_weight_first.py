"""`outofplace-vector-dots-weight-first`: a product of a vector and a weight (a batch-1
`nn.Linear`: each projection of a decoder's token) is XLA:CPU's dot with the weight as
its first operand, the form XLA:CPU reads the weight in as it is.

    %y = stablehlo.dot_general %x, %w, contracting_dims = [2] x [1]
           : (tensor<1x1x2048xf32>, tensor<5632x2048xf32>) -> tensor<1x1x5632xf32>
  =>
    %d = stablehlo.dot_general %w, %x, contracting_dims = [1] x [2]
           : (tensor<5632x2048xf32>, tensor<1x1x2048xf32>) -> tensor<5632x1x1xf32>
    %y = stablehlo.reshape %d : (tensor<5632x1x1xf32>) -> tensor<1x1x5632xf32>

With the vector first, XLA:CPU's layout assignment copies a weight of 4096 columns or
more transposed at every call; with the weight first it streams it once, on both
threads. Measured on the AMD EPYC of docs/performance.md ("Session 53"), weights read
from memory, GB/s: [2048, 5632] eager's `F.linear` 19-23, XLA's `x @ w.T` 2.2, the same
dot weight first 33; [2048, 2048] 19, 26, 34; [32000, 2048] 19, 26, 30; float64 alike.
So these dots stay XLA's (outofplace-dots-as-kernel-calls leaves them, `weight_first`).
bfloat16 is not rewritten: XLA:CPU's bfloat16 dot reads 1.5 GB/s, eager's 17-20, so it
stays eager's kernel call.

A dot counts when it has no batch dimension, one contracting dimension, a weight of rank
2 and, on the other side, a vector (each free dimension of size 1), in float32 or
float64, static shapes, default precision. Only the XLA engine runs it (its legalization,
backends/xla); the program a user exports keeps its dots as they were.
"""

from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from ..ir_utils import all_operations, plain_dot, ranked_shape
from .registry import register_pass

ELEMENT_TYPES = ("f32", "f64")


def _vector_and_weight(op: ir.Operation) -> tuple[int, int] | None:
    """(the vector's operand index, the weight's) of a dot this pass is about, or None."""
    if op.name != "stablehlo.dot_general" or not plain_dot(op, ELEMENT_TYPES):
        return None
    numbers = _stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    if list(numbers.lhs_batching_dimensions) or \
            len(numbers.lhs_contracting_dimensions) != 1:
        return None
    contracting = [numbers.lhs_contracting_dimensions[0],
                   numbers.rhs_contracting_dimensions[0]]
    for vector, weight in ((0, 1), (1, 0)):
        shape = ranked_shape(op.operands[vector])
        free = [n for d, n in enumerate(shape) if d != contracting[vector]]
        if len(ranked_shape(op.operands[weight])) == 2 and math.prod(free) == 1 and \
                ranked_shape(op.operands[weight])[1 - contracting[weight]] > 1:
            return vector, weight
    return None


def weight_first(op: ir.Operation) -> bool:
    """Whether `op` is a vector-weight dot already in the form XLA:CPU computes fast
    (the weight its first operand): outofplace-dots-as-kernel-calls leaves it."""
    found = _vector_and_weight(op)
    return found is not None and found[1] == 0


def _rewrite(op: ir.Operation) -> None:
    vector, weight = _vector_and_weight(op)
    numbers = _stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    contracting = [numbers.lhs_contracting_dimensions[0],
                   numbers.rhs_contracting_dimensions[0]]
    w, v = op.operands[weight], op.operands[vector]
    wshape, vshape = ranked_shape(w), ranked_shape(v)
    element = ir.RankedTensorType(op.result.type).element_type
    shape = [n for d, n in enumerate(wshape) if d != contracting[weight]] + \
        [n for d, n in enumerate(vshape) if d != contracting[vector]]
    with ir.InsertionPoint(op), op.location:
        dot = ir.Operation.create(
            "stablehlo.dot_general", results=[ir.RankedTensorType.get(shape, element)],
            operands=[w, v], attributes={
                "dot_dimension_numbers": _stablehlo.DotDimensionNumbers.get(
                    [], [], [contracting[weight]], [contracting[vector]],
                    context=op.context)})
        result = ir.Operation.create("stablehlo.reshape", results=[op.result.type],
                                     operands=[dot.result]).result
    op.result.replace_all_uses_with(result)
    op.erase()


@register_pass(
    "outofplace-vector-dots-weight-first",
    "Vector-weight dots with the weight first (XLA:CPU streams it instead of copying it)",
    "a `stablehlo.dot_general` of a vector (free dimensions of size 1) and a rank-2 "
    "weight, no batch dimension, float32 or float64, becomes the dot of the weight and "
    "the vector, reshaped to the result: XLA:CPU copies a weight of 4096 columns or more "
    "transposed at each call of `x @ w.T`, and reads it once, on both threads, "
    "weight first (the XLA engine's legalization, backends/xla)")
def vector_dots_weight_first(module: ir.Operation) -> None:
    for op in all_operations(module):
        found = _vector_and_weight(op)
        if found is not None and found[1] != 0:
            _rewrite(op)
