"""outofplace-narrow-indices: scatters and gathers index with 32 bits where torch's are 64
(the sharding annotation, transforms/sharding.py, runs it on a program for a mesh).

Gives each scatter and gather 32-bit indices where they are 64-bit (torch's int64)
and every dimension of the operand fits in 31 bits: clamped to [-1, the largest
dimension] first, so an index out of bounds stays out of bounds (a scatter skips its
window, a gather clamps it as before), then converted.

The SPMD partitioner pads a scatter's indices, when it shards them unevenly, with a
32-bit constant whatever their type, and with 64-bit indices aborts the process
(`Check failed: ShapeUtil::IsScalarWithElementType` in spmd_partitioner_util.h,
jaxlib 0.10.2): `x.diagonal().add_(1)` on a [4, 1, 4] state split over its first
dimension. JAX's own programs index with 32 bits.

No upstream issue found for it (the search for openxla/xla issues on the partitioner's
index padding found openxla/xla#24371, a closed pull request fixing the same element
type mismatch for a `dynamic-update-slice`'s indices, not for scatters). It stays in the
exported program with the shardings: any XLA consumer partitioning it would abort the
same way. Its canary, test_xla_canaries.py
`test_partitioner_aborts_on_64_bit_scatter_indices_sharded_unevenly`, fails when XLA
fixes it: then delete this pass and its call in transforms/sharding.py.
"""

from __future__ import annotations

from torch_mlir import ir

from ..ir_utils import all_operations, stablehlo_splat, unnamed
from .registry import register_pass


@register_pass(
    "outofplace-narrow-indices",
    "Index scatters and gathers with 32 bits (XLA's SPMD partitioner)",
    "each `stablehlo.scatter` and `stablehlo.gather` with 64-bit indices, whose operand's "
    "every dimension fits in 31 bits, gets them clamped to [-1, its largest dimension] "
    "(an index out of bounds stays out of bounds) and converted to i32: the SPMD "
    "partitioner pads indices it shards unevenly with a 32-bit constant and aborts the "
    "process on 64-bit ones (the sharding annotation, transforms/sharding.py)")
def narrow_indices(module: ir.Operation) -> None:
    for op in [o for o in all_operations(module)
               if o.name in ("stablehlo.scatter", "stablehlo.gather")]:
        indices = op.operands[1]
        indices_t = ir.RankedTensorType(indices.type)
        element = indices_t.element_type
        operand = ir.RankedTensorType(op.operands[0].type)
        if not (isinstance(element, ir.IntegerType) and element.width == 64
                and operand.has_static_shape and max(operand.shape, default=0) < 2**31 - 1):
            continue
        with ir.InsertionPoint(op), unnamed(op.location):
            narrow = ir.RankedTensorType.get(indices_t.shape, ir.IntegerType.get_signless(32))
            low, high = (stablehlo_splat(indices_t, bound)
                         for bound in (-1, max(operand.shape, default=0)))
            clamped = ir.Operation.create("stablehlo.clamp", results=[indices_t],
                                          operands=[low, indices, high]).result
            op.operands[1] = ir.Operation.create("stablehlo.convert", results=[narrow],
                                                 operands=[clamped]).result
