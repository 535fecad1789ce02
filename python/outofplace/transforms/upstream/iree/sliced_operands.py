"""`outofplace-iree-copy-sliced-operands`: a gather's, scatter's or sort's operand that is
a slice is copied out first.

A gather from a slice that is not contiguous (`x[:, -1:, idx]`): IREE 3.13 folds the
slice into the gather's load and fails to compile it (`LLVM Translation failed for
operation: builtin.unrealized_conversion_cast`); a scatter into a reshaped slice
(`x[1:2].view(1, 1).index_add_(0, i, w)`) fails the same way (`expected rank to be
smaller or equal to the other rank`); a sort of a slice of an argument (`topk(x[:, :8])`)
fails too (`write affecting operations on global resources are restricted to workgroup
distributed contexts`). No IREE issue was found for any. Such an
operand (a slice, through reshapes and transposes; for a scatter, a slice of part of its
operand: a barrier on all of a tensor written in place made IREE copy it onto itself)
is put behind a `stablehlo.optimization_barrier`. A scatter's is also computed into a
buffer of its own (`select(barrier(true), operand, zeros)`): behind a barrier alone,
IREE still updated the slice where a later read of the same slice found it. Canaries:
test_iree_canaries.test_gather_from_a_strided_slice_does_not_compile,
test_scatter_into_a_reshaped_slice_does_not_compile,
test_sort_of_a_sliced_argument_does_not_compile and
test_read_of_a_slice_sees_a_scatter_into_a_copy_of_it_behind_a_barrier.
"""

from __future__ import annotations

from torch_mlir import ir

from ...registry import register_pass
from .common import _behind_barrier, _copied, _defining_op, _elements, _main, _walk


@register_pass(
    "outofplace-iree-copy-sliced-operands",
    "Copy out a slice a gather or a sort reads or a scatter updates (IREE fails to "
    "compile it folded)",
    "the operand of a `stablehlo.gather` or `stablehlo.sort` that is a slice (through "
    "reshapes and "
    "transposes) → `stablehlo.optimization_barrier` of it; that of a "
    "`stablehlo.scatter` that is a slice of part of a tensor → the barrier, then "
    "`select(barrier(true), it, zeros)`: IREE 3.13 folds the slice into the access and "
    "fails to compile it, or updates the slice in place (a workaround, "
    "transforms/upstream/iree/)")
def copy_sliced_operands(module: ir.Operation) -> None:
    for op in _walk(_main(module)):
        if op.name not in ("stablehlo.gather", "stablehlo.scatter", "stablehlo.sort"):
            continue
        source = _defining_op(op.operands[0])
        while source is not None and source.name in ("stablehlo.reshape",
                                                     "stablehlo.transpose"):
            source = _defining_op(source.operands[0])
        if source is not None and source.name == "stablehlo.slice" and (
                op.name in ("stablehlo.gather", "stablehlo.sort") or
                _elements(source.results[0]) < _elements(source.operands[0])):
            _behind_barrier(op, 0)
            if op.name == "stablehlo.scatter":
                _copied(op, 0)
