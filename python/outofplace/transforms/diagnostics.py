"""Stages of `compile` with their IR dumps and, when one fails, a reproducer.

    outofplace-opt /tmp/outofplace-xxxx/2-before-outofplace-lower-to-stablehlo.mlir \\
        --pass-pipeline='builtin.module(outofplace-lower-to-stablehlo)'

reproduces a failing stage outside Python: the IR before it is written out and the
command printed with the error. A refused program (a `UserError`: UnsupportedMutationError,
an index out of range) is the user's to fix at the source line the error names, so it gets
no reproducer; any other failure is a bug of ours and says so.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from torch_mlir import ir

from ..errors import UserError
from .pipelines import run_pipeline


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
        directory = Path(dump_dir) if dump_dir else Path(tempfile.mkdtemp(
            prefix="outofplace-"))
        path = _write(before, directory / f"{number}-before-{stage}.mlir")
        error.add_note(f"internal error: stage '{stage}' failed, a bug of outofplace's "
                       "(please report it with the IR file below); reproduce with:\n"
                       f"  outofplace-opt {path} --pass-pipeline='builtin.module({stage})'")
        raise
    finally:
        before.erase()
    if dump_dir:
        _write(module.operation, Path(dump_dir) / f"{number}-after-{stage}.mlir")
