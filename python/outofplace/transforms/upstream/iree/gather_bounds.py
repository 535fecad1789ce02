"""`outofplace-iree-clamp-gather-starts`: a gather's start indices computed at run time
are clamped as StableHLO's gather clamps them.

StableHLO clamps each start index into [0, size - slice size]; IREE 3.13 reads out of
the operand's buffer instead when an index is out of range (`s[i]`, `torch.take`;
iree-org/iree#24881), garbage or another element:

    %r = "stablehlo.gather"(%x, %i) ... : (tensor<4xf32>, tensor<1xi64>) -> tensor<1xf32>
    with %i = [5]: XLA and the interpreter read x[3]; IREE reads past x

The rewrite makes the clamp explicit: `clamp(0, indices, broadcast(size - slice))`.
Canary (in a subprocess: the read past the buffer): test_iree_canaries.
test_gather_reads_out_of_bounds.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from ....ir_utils import all_operations, stablehlo_splat
from ...registry import register_pass
from .common import _reads_arguments


@register_pass(
    "outofplace-iree-clamp-gather-starts",
    "Clamp a gather's runtime start indices as StableHLO does (IREE reads out of bounds)",
    "the start indices of each `stablehlo.gather` of static shape computed from arguments "
    "→ `clamp(0, indices, size - slice size)`: StableHLO's gather clamps them, IREE 3.13 "
    "reads out of the operand's buffer (iree-org/iree#24881; a workaround, "
    "transforms/upstream/iree/)")
def clamp_gather_starts(module: ir.Operation) -> None:
    gathers = [op for op in all_operations(module) if op.name == "stablehlo.gather" and
               _reads_arguments(op.operands[1]) and all(
                   ir.RankedTensorType(v.type).has_static_shape for v in op.operands)]
    for gather in gathers:
        with gather.location, ir.InsertionPoint(gather):
            _gather_starts_clamped(gather)


def _gather_starts_clamped(gather: Any) -> None:
    """Clamps a gather's start indices into [0, size - slice size], as StableHLO's gather
    does itself: IREE 3.13 read out of the operand's buffer instead when an index is out
    of range (`s[i]`, `torch.take`; iree-org/iree#24881), garbage or another element."""
    operand, indices = gather.operands[0], gather.operands[1]
    numbers = _stablehlo.GatherDimensionNumbers(gather.attributes["dimension_numbers"])
    if list(numbers.operand_batching_dims):
        return
    starts, vector = list(numbers.start_index_map), numbers.index_vector_dim
    sizes = list(ir.DenseI64ArrayAttr(gather.attributes["slice_sizes"]))
    shape = list(ir.RankedTensorType(operand.type).shape)
    indices_t = ir.RankedTensorType(indices.type)
    index = indices_t.element_type
    numpy_type = np.int64 if ir.IntegerType(index).width == 64 else np.int32
    highest = np.array([shape[d] - sizes[d] for d in starts], dtype=numpy_type)
    vector_t = ir.RankedTensorType.get([len(starts)], index)
    high = ir.Operation.create("stablehlo.constant", results=[vector_t], attributes={
        "value": ir.DenseElementsAttr.get(highest, type=vector_t)}).result
    if vector == indices_t.rank:  # one start an index: a [1] broadcast to the indices
        along = []
        high = ir.Operation.create("stablehlo.reshape", results=[
            ir.RankedTensorType.get([], index)], operands=[high]).result
    else:
        along = [vector]
    high = ir.Operation.create("stablehlo.broadcast_in_dim", results=[indices_t],
                                 operands=[high], attributes={
                                     "broadcast_dimensions": ir.DenseI64ArrayAttr.get(along)
                                 }).result
    clamped = ir.Operation.create("stablehlo.clamp", results=[indices_t], operands=[
        stablehlo_splat(indices_t, 0), indices, high]).result
    gather.operands[1] = clamped

