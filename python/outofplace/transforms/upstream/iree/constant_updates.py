"""`outofplace-iree-shield-constant-updates`: a constant update of a dynamic_update_slice
is put behind a barrier.

Two dynamic_update_slices of the same constant, the second just before the first (`x[5]
= 0; x[4] = 0`): IREE 3.13 merges the two fills at a wrong offset and fails to compile
(`invalid Write access range`). No IREE issue was found. Canary:
test_iree_canaries.test_adjacent_fills_of_one_constant_are_merged_wrongly.
"""

from __future__ import annotations

from torch_mlir import ir

from ...registry import register_pass
from .common import _behind_barrier, _is_constant, _main, _walk


@register_pass(
    "outofplace-iree-shield-constant-updates",
    "Put a dynamic_update_slice's constant update behind a barrier (IREE merges adjacent "
    "fills wrongly)",
    "the update of a `stablehlo.dynamic_update_slice` that is a constant → "
    "`stablehlo.optimization_barrier` of it: IREE 3.13 merges two fills of one constant "
    "at a wrong offset (a workaround, transforms/upstream/iree/)")
def shield_constant_updates(module: ir.Operation) -> None:
    for op in _walk(_main(module)):
        if op.name == "stablehlo.dynamic_update_slice" and _is_constant(op.operands[1]):
            _behind_barrier(op, 1)
