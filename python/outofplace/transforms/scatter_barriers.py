"""outofplace-barrier-scatter-operands: each scatter's operand behind an
`optimization_barrier` (the mesh engine's legalization, backends/spmd), the workaround
of openxla/xla#49121 (open; jaxlib 0.10.2).

XLA's AlgebraicSimplifier folds a `dynamic-slice` of a `dynamic-slice` into one
`dynamic-slice` whose start is the outer start plus the inner one clamped with the wrong
size, not the two clamps the ops mean. On a mesh the SPMD partitioner makes exactly that
pair of a scatter into a sharded state: `s[:] = v; s.scatter_(0, i, w);
s.index_fill_(0, j, -5)` on s split over 2 devices (probe fuzzer seed 2,812) becomes a
`dynamic_update_slice` of each device's shard at the local index (clamped into the shard)
of select(owned, -5, dynamic_slice(shard, local index)), the shard a `dynamic_slice` of
the replicated operand at the device's offset, and the fold clamps offset + local index
into the whole operand, not the shard: where j is on another device, the element at j
was written at the shard's edge. Likewise a scatter after a `dynamic_update_slice`, then
writes through a reshape, on 8 devices (seed 2,322), and a scatter between a slice write
and a `masked_fill_` on 2 (seed 3,274). A barrier on the scatter's operand keeps the two
slices apart (one on a `dynamic_update_slice`'s operand did not matter); on
test_sharding.py's four-write cache step it costs nothing measurable.

Its canary, test_xla_canaries.py
`test_sharded_scatter_after_a_write_is_wrong_without_a_barrier`, fails when XLA fixes
the fold: then drop this pass from `spmd.LEGALIZE_FOR_MESH` and delete it.
"""

from __future__ import annotations

from torch_mlir import ir

from ..ir_utils import operations
from .registry import register_pass


@register_pass(
    "outofplace-barrier-scatter-operands",
    "Put each scatter's operand in main behind an optimization_barrier (XLA on a mesh)",
    "a `stablehlo.scatter` in main whose operand is not an argument reads it through "
    "`stablehlo.optimization_barrier`: XLA otherwise folds the two `dynamic_slice`s the "
    "SPMD partitioner makes of a scatter into a sharded state into one clamped into the "
    "whole operand, not the shard, and writes elements at the shard's edge "
    "(openxla/xla#49121; the mesh engine's legalization, backends/spmd)")
def barrier_scatter_operands(module: ir.Operation) -> None:
    (main,) = [op for op in operations(module.regions[0].blocks[0]) if op.name == "func.func"
               and ir.StringAttr(op.attributes["sym_name"]).value == "main"]
    for scatter in operations(main.regions[0].blocks[0]):
        if scatter.name != "stablehlo.scatter" or len(scatter.results) != 1:
            continue
        operand = scatter.operands[0]
        if isinstance(operand.owner, ir.Block):  # an argument
            continue
        barrier = ir.Operation.create("stablehlo.optimization_barrier",
                                      results=[operand.type], operands=[operand],
                                      loc=scatter.location, ip=ir.InsertionPoint(scatter))
        scatter.operands[0] = barrier.results[0]
