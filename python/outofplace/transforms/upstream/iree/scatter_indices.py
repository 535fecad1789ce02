"""`outofplace-iree-separate-scatter-indices`: each scatter after the first that takes the
same index tensor takes it through a barrier of its own.

Two scatters with one index tensor (`x.index_add_(0, i, v); y.index_add_(0, i, v)`):
IREE 3.13 narrows the indices to i32 for each and fails to compile (`failed to legalize
unresolved source materialization from ('tensor<3x1xi64>') to ('tensor<3x1xi32>')`).
No IREE issue was found. Canary:
test_iree_canaries.test_two_scatters_with_one_index_tensor_do_not_compile.
"""

from __future__ import annotations

from typing import Any

from torch_mlir import ir

from ...registry import register_pass
from .common import _behind_barrier, _main, _walk


@register_pass(
    "outofplace-iree-separate-scatter-indices",
    "Give each scatter after the first on one index tensor a barrier of its own (IREE "
    "fails to compile them)",
    "the indices of each `stablehlo.scatter` in `main` that an earlier scatter takes too "
    "→ `stablehlo.optimization_barrier` of them: IREE 3.13 narrows shared indices to i32 "
    "once per scatter and fails to compile (a workaround, transforms/upstream/iree/)")
def separate_scatter_indices(module: ir.Operation) -> None:
    scattered_at: list[Any] = []  # the index tensors of the scatters so far
    for op in _walk(_main(module)):
        if op.name != "stablehlo.scatter":
            continue
        if any(op.operands[1] == indices for indices in scattered_at):
            _behind_barrier(op, 1)
        else:
            scattered_at.append(op.operands[1])
