"""The `outofplace-verify-stablehlo` pass, the lowering's last: fails unless only
StableHLO (and func/module structure) remains; the reference interpreter checks its
input with it too.
"""

from __future__ import annotations

from torch_mlir import ir

from ..ir_utils import all_operations
from .registry import register_pass


# Ops a pure StableHLO module may hold besides the stablehlo dialect's own.
_STRUCTURAL_OPS = frozenset({"builtin.module", "func.func", "func.return"})


def foreign_ops(module: ir.Operation) -> list[ir.Operation]:
    """The ops of `module` that are neither StableHLO nor module/function structure."""
    return [op for op in all_operations(module)
            if op.name not in _STRUCTURAL_OPS and not op.name.startswith("stablehlo.")]


class NotStableHLOError(Exception):
    """The lowered module still holds ops outside StableHLO."""


@register_pass(
    "outofplace-verify-stablehlo", "Fail unless the module is pure StableHLO",
    'fails unless only StableHLO (and func/module) ops remain')
def check_pure_stablehlo(module: ir.Operation) -> None:
    """Raises NotStableHLOError naming the first foreign ops, if any."""
    foreign = foreign_ops(module)
    if foreign:
        names = sorted({op.name for op in foreign})
        raise NotStableHLOError(
            f"lowering left {len(foreign)} non-StableHLO op(s): {', '.join(names)} "
            f"(first at {foreign[0].location})")
