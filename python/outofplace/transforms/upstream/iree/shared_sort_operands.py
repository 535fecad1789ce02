"""`outofplace-iree-copy-shared-sort-operands`: a sort's operand that another op reads too
is computed into a buffer of the sort's own.

Two sorts of one program that share an operand (torch-mlir gives every sort of a row
the same `iota` of indices: `torch.sort(x)` beside `torch.argsort(x, descending=True)`,
or beside a sort of `2 * x`) came out wrong on IREE 3.13, silently: the first sort's
indices reversed, the second's all zeros. IREE sorts in place, in its operands' buffers,
and the shared one is sorted by the first before the second reads it. Each such operand
becomes `select(barrier(true), operand, zeros)`, a buffer of the sort's own (a barrier
alone IREE can still share). No IREE issue was found. Canary:
test_iree_canaries.test_sorts_sharing_an_iota_are_wrong.
"""

from __future__ import annotations

from torch_mlir import ir

from ...registry import register_pass
from .common import _copied, _main, _walk


@register_pass(
    "outofplace-iree-copy-shared-sort-operands",
    "A sort's operand that another op reads too is copied into a buffer of its own "
    "(IREE sorts it in place under the other's feet)",
    "an operand of a `stablehlo.sort` with another use (the `iota` of indices two sorts "
    "share) → `select(barrier(true), operand, zeros)`: IREE 3.13 sorts in the shared "
    "buffer, and the other sort reads it sorted (a workaround, "
    "transforms/upstream/iree/)")
def copy_shared_sort_operands(module: ir.Operation) -> None:
    for op in [op for op in _walk(_main(module)) if op.name == "stablehlo.sort"]:
        for i, value in enumerate(list(op.operands)):
            if sum(1 for _ in value.uses) > 1:
                _copied(op, i)
