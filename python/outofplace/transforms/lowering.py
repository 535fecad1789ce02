"""From value-semantic torch IR to pure StableHLO.

torch-mlir's backend pipelines do the bulk. Their output may still hold `arith.constant`
(seen for `aten.mul.Scalar`), which StableHLO consumers and the reference interpreter do
not accept; a rewrite pattern turns it into `stablehlo.constant`.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from ..ir_utils import all_operations
from .registry import register_pass

TORCH_TO_STABLEHLO = ("torchdynamo-export-to-torch-backend-pipeline",
                      "torch-backend-to-stablehlo-backend-pipeline")

# Ops a pure StableHLO module may hold besides the stablehlo dialect's own.
_STRUCTURAL_OPS = frozenset({"builtin.module", "func.func", "func.return"})


def _arith_constant_to_stablehlo(op: ir.Operation, rewriter: rewrite.PatternRewriter
                                 ) -> bool:
    """arith.constant dense<2> : tensor<1xi64>  =>  stablehlo.constant dense<2> : ..."""
    value = op.attributes["value"]
    if not isinstance(op.result.type, ir.RankedTensorType):
        return True  # not matched: a scalar constant has no StableHLO form
    with rewriter.ip:
        new = ir.Operation.create("stablehlo.constant", results=[op.result.type],
                                  attributes={"value": value}, loc=op.location)
    rewriter.replace_op(op, new)
    return False


@register_pass(
    "outofplace-stablehlo-constants", "Turn tensor arith.constant into stablehlo.constant",
    'tensor `arith.constant` → `stablehlo.constant`')
def stablehlo_constants(module: ir.Operation) -> None:
    """Replaces tensor `arith.constant` ops with `stablehlo.constant`."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("arith.constant", _arith_constant_to_stablehlo)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())


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
