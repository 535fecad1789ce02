"""Stages of `compile` with their IR dumps and, when one fails, a reproducer.

    outofplace-opt /tmp/outofplace-xxxx/2-before-outofplace-lower-to-stablehlo.mlir \\
        --pass-pipeline='builtin.module(outofplace-lower-to-stablehlo)'

reproduces a failing stage outside Python: the IR before it is written out and the
command printed with the error. A refused program (a `UserError`: UnsupportedMutationError,
an index out of range) is the user's to fix at the source line the error names, so it gets
no reproducer; any other failure is a bug of ours and says so.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from torch_mlir import ir

from .. import progress
from ..errors import UnsupportedMutationError, UserError, source_line
from ..ir_utils import all_operations
from ..op_registry import aten_name
from .pipelines import PipelineError, run_pipeline


def _write(module: ir.Operation, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(module.get_asm(enable_debug_info=True))
    return path


def run_stage(module: ir.Module, number: int, stage: str, dump_dir: str | None = None
              ) -> None:
    """Runs the pipeline element `stage` on `module`; dumps the IR after it when asked."""
    before = module.operation.clone()
    try:
        with progress.stage(stage):
            run_pipeline(module, f"builtin.module({stage})")
    except UserError:
        raise
    except Exception as error:
        refusal = _not_lowered(error, before) if isinstance(error, PipelineError) else None
        directory = Path(dump_dir) if dump_dir else Path(tempfile.mkdtemp(
            prefix="outofplace-"))
        path = _write(before, directory / f"{number}-before-{stage}.mlir")
        command = f"outofplace-opt {path} --pass-pipeline='builtin.module({stage})'"
        if refusal is not None:
            refusal.add_note(f"torch-mlir's diagnostic is reproduced by:\n  {command}")
            raise refusal from error
        error.add_note(f"internal error: stage '{stage}' failed, a bug of outofplace's "
                       "(please report it with the IR file below); reproduce with:\n"
                       f"  {command}")
        raise
    finally:
        before.erase()
    if dump_dir:
        _write(module.operation, Path(dump_dir) / f"{number}-after-{stage}.mlir")


# What torch-mlir's conversions say of an op they have no pattern for (its operand types).
_NOT_LEGALIZED = "failed to legalize operation"
_ATEN = ("torch.aten.", "torch.prims.")


def _not_lowered(error: PipelineError, before: ir.Operation
                 ) -> UnsupportedMutationError | None:
    """A torch-mlir pass that failed on the program (no pattern to lower an op, or a check
    of its own), as the refusal of the op at fault, or None for a failure that names no
    op. An op the diagnostic names is the op; a leftover operand (a constant) is named by
    the ops of its line, and one without a location (made by torch-mlir's decompositions)
    by the ops of the program, with their line when they have one."""
    diagnostic = error.diagnostic
    if diagnostic is None:
        return None
    message = diagnostic.message.splitlines()[0][:200]
    line = source_line(diagnostic.location)
    if not line and _NOT_LEGALIZED not in message:
        return None
    ops_at: dict[str, set[str]] = {}
    for op in all_operations(before):
        if op.name.startswith((*_ATEN, "torch.operator")):
            ops_at.setdefault(source_line(op.location), set()).add(aten_name(op))
    if not line and len(ops_at) == 1:
        line = next(iter(ops_at))
    named = re.search(r"failed to legalize operation '([\w.]+)'", message)
    ops = [named.group(1)] if named and named.group(1).startswith(_ATEN) else sorted(
        ops_at.get(line, set()) if line else set().union(*ops_at.values()))
    if _NOT_LEGALIZED in message:
        which = "it" if len(ops) == 1 else "one of these ops"
        reason = f"torch-mlir's lowering to StableHLO has no pattern for {which}"
    else:
        reason = "torch-mlir's lowering to StableHLO fails on this statement"
    return UnsupportedMutationError(", ".join(ops) or "torch-mlir's lowering",
                                    f"{reason} ({message})", location=line)
