"""`outofplace-iree-sort-behind-barrier`: a sort of values and their 64-bit indices whose
results are sliced (topk) reaches its slices through a `stablehlo.optimization_barrier`.

torch-mlir lowers `topk` as a sort of the values and an `iota` of their indices, then
slices of the first k. IREE 3.13 matches that form to its own `chlo.top_k`, whose
indices it infers as 32-bit, and fails to compile the 64-bit indices the program
returns ("'chlo.top_k' op inferred type(s) ... 'tensor<3x2xi32>' are incompatible with
return type(s) ... 'tensor<3x2xi64>'"): every topk refused on IREE. Behind the barrier
the slices are no top_k to match: the whole sort runs, then the slices. No IREE issue
was found. Canary: test_iree_canaries.test_topk_with_64_bit_indices_does_not_compile.
"""

from __future__ import annotations

from torch_mlir import ir

from ...registry import register_pass
from .common import _walk


def _sliced_with_64_bit_indices(op: ir.Operation) -> bool:
    if op.name != "stablehlo.sort" or len(op.results) < 2:
        return False
    wide = any(str(ir.RankedTensorType(r.type).element_type) == "i64" for r in op.results)
    return wide and any(use.owner.name == "stablehlo.slice"
                        for r in op.results for use in r.uses)


@register_pass(
    "outofplace-iree-sort-behind-barrier",
    "Slices of a sort of 64-bit indices read it through an optimization barrier",
    "a `stablehlo.sort` with a 64-bit result (an `iota` of indices) whose results are "
    "sliced (topk) → its results through `stablehlo.optimization_barrier`: IREE 3.13 "
    "matches the sort and slices to a top_k of 32-bit indices and fails to compile (a "
    "workaround, transforms/upstream/iree/)")
def sort_behind_barrier(module: ir.Operation) -> None:
    for sort in [op for op in _walk(module) if _sliced_with_64_bit_indices(op)]:
        users = [(use.owner, use.operand_number, i)
                 for i, r in enumerate(sort.results) for use in r.uses]
        barrier = ir.Operation.create(
            "stablehlo.optimization_barrier", results=[r.type for r in sort.results],
            operands=list(sort.results), loc=sort.location,
            ip=ir.InsertionPoint.after(sort))
        for owner, operand, i in users:
            owner.operands[operand] = barrier.results[i]
