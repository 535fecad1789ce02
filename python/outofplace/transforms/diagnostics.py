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
    """A lowering that failed on an op torch-mlir cannot lower to StableHLO, as the
    refusal of the ops of the user's statement it came from (a leftover constant is named
    by the ops of its line), or None for any other failure."""
    diagnostic = error.diagnostic
    if diagnostic is None or _NOT_LEGALIZED not in diagnostic.message:
        return None
    line = source_line(diagnostic.location)
    named = re.search(r"failed to legalize operation '([\w.]+)'", diagnostic.message)
    if named and named.group(1).startswith(_ATEN):
        ops, which = [named.group(1)], "it"
    else:  # a leftover operand (a constant) of the op that was not lowered
        ops = sorted({aten_name(op) for op in all_operations(before)
                      if op.name.startswith((*_ATEN, "torch.operator"))
                      and source_line(op.location) == line}) if line else []
        which = "it" if len(ops) == 1 else "one of these ops of the statement"
    return UnsupportedMutationError(
        ", ".join(ops) or "torch-mlir's lowering", f"torch-mlir's lowering to StableHLO "
        f"has no pattern for {which} ({diagnostic.message.splitlines()[0][:200]})",
        location=line)
