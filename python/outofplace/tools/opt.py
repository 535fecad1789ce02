"""outofplace-opt: an mlir-opt-style driver for our passes mixed with MLIR's.

    outofplace-opt in.mlir --pass-pipeline='builtin.module(inplace-to-outofplace)'
    outofplace-opt - --pass-pipeline='builtin.module(inplace-to-stablehlo-pipeline)' -o out.mlir

Bad input gives one line on stderr and exit code 1, never a traceback. A refusal (a
`UserError`) or a pass's diagnostic is the input's to fix; any other exception is a bug of
ours, reported as an internal error with the command that reproduces it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Callable, Sequence

from torch_mlir import ir

from .. import op_registry, torch_types
from ..context import make_context
from ..errors import UserError
from ..ir_utils import all_operations, constant_int
from ..transforms.verify_stablehlo import NotStableHLOError
from ..transforms.pipelines import (PipelineError, build_pass_manager, in_pipeline_order,
                                    run_pipeline)

SPLIT_MARKER = "// -----"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(1, f"outofplace-opt: error: {message}\n")


def _arguments() -> argparse.ArgumentParser:
    passes = "\n".join(f"  {entry.argument:42} {entry.summary}"
                       for entry in in_pipeline_order())
    parser = _Parser(
        prog="outofplace-opt",
        description="Run outofplace, torch-mlir and MLIR passes on an MLIR file.",
        epilog=f"outofplace passes and pipelines:\n{passes}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?", default="-", help="input file, or - for stdin")
    parser.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    parser.add_argument("--pass-pipeline", default="builtin.module()",
                        help="textual pipeline, e.g. 'builtin.module(inplace-to-outofplace)'")
    parser.add_argument("--split-input-file", action="store_true",
                        help="process each chunk between '// -----' lines on its own")
    parser.add_argument("--mlir-print-ir-after-all", action="store_true",
                        help="print the IR after every pass, to stderr")
    parser.add_argument("--use-name-loc-as-prefix", action="store_true",
                        help="name SSA values after their NameLoc (%%kv_cache_modified)")
    parser.add_argument("--mlir-print-debuginfo", action="store_true",
                        help="print locations")
    return parser


class _ChunkError(Exception):
    """An error in one chunk of input, already phrased for the user."""


def _run_chunk(text: str, options: argparse.Namespace, first_line: int) -> str:
    context = make_context()
    with context:
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as error:
            details = getattr(error, "error_diagnostics", None)
            if not details:
                raise _ChunkError(f"cannot parse input: {str(error).splitlines()[0]}"
                                  ) from None
            where = _input_position(details[0].location, options.input, first_line)
            raise _ChunkError(f"cannot parse input: {where}: {details[0].message}"
                              ) from None
        _check_dimensions(module, lambda loc: _input_position(loc, options.input,
                                                              first_line))
        try:
            run_pipeline(module, options.pass_pipeline, options.mlir_print_ir_after_all)
        except (PipelineError, UserError, NotStableHLOError) as error:
            raise _ChunkError(str(error)) from None
        except Exception as error:  # a bug of ours: still one line, never a traceback
            raise _ChunkError(_internal_error(error, text, options.pass_pipeline)
                              ) from None
        return module.operation.get_asm(
            use_name_loc_as_prefix=options.use_name_loc_as_prefix,
            enable_debug_info=options.mlir_print_debuginfo)


def _internal_error(error: Exception, text: str, pipeline: str) -> str:
    """One line for a bug of ours (any exception but a UserError or a pass's diagnostic):
    the input chunk is written out and the command that reproduces the failure named."""
    with tempfile.NamedTemporaryFile("w", prefix="outofplace-opt-", suffix=".mlir",
                                     delete=False, encoding="utf-8") as file:
        file.write(text)
    return (f"internal error ({type(error).__name__}): {error}; a bug of outofplace's, "
            f"please report it with the input; reproduce with: outofplace-opt "
            f"{file.name} --pass-pipeline='{pipeline}'")


_DIM_ARGUMENTS = ("dim", "dim0", "dim1", "dim2")


def _check_dimensions(module: ir.Module, where: Callable[[ir.Location], str]) -> None:
    """Refuses ATen ops whose constant dimension is out of range for their tensor: the
    verifier lets them through and torch-mlir's decompositions crash on them."""
    for op in all_operations(module.operation):
        effects = op_registry.effects(op_registry.aten_name(op)) \
            if op.name.startswith("torch.") else None
        tensors = [v for v in op.operands if torch_types.is_tensor(v.type)]
        if effects is None or not tensors:
            continue
        sizes = torch_types.TensorType.of(tensors[0].type).sizes
        if sizes is None:
            continue
        schema = effects.overload._schema
        limit = max(len(sizes), 1) + (schema.name == "aten::unsqueeze")
        for position, argument in enumerate(schema.arguments[:len(op.operands)]):
            dim = constant_int(op.operands[position]) \
                if argument.name in _DIM_ARGUMENTS else None
            if dim is not None and not -limit <= dim < limit:
                raise _ChunkError(f"{where(op.location)}: {op_registry.aten_name(op)}: "
                                  f"dimension {dim} "
                                  f"is out of range for a tensor of rank {len(sizes)}")


def _input_position(loc: ir.Location, path: str, first_line: int) -> str:
    """`file:line:col` in the user's file for a location in a parsed chunk."""
    if loc.typeid != ir.FileLineColLoc.static_typeid:
        return str(loc)
    file_loc = ir.FileLineColLoc(loc)
    name = "<stdin>" if path == "-" else path
    return f"{name}:{file_loc.start_line + first_line - 1}:{file_loc.start_col}"


def _chunks(text: str, split: bool) -> list[tuple[str, int]]:
    if not split:
        return [(text, 1)]
    chunks, current, start = [], [], 1
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if line.strip() == SPLIT_MARKER:
            chunks.append(("".join(current), start))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append(("".join(current), start))
    return chunks


def main(argv: Sequence[str] | None = None) -> int:
    options = _arguments().parse_args(argv)
    try:  # a bad pipeline is reported before any input is read, as mlir-opt does
        build_pass_manager(options.pass_pipeline, make_context(), [])
    except PipelineError as error:
        print(f"outofplace-opt: error: {error}", file=sys.stderr)
        return 1
    try:
        if options.input == "-":
            text = sys.stdin.read()
        else:
            with open(options.input, encoding="utf-8") as file:
                text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        print(f"outofplace-opt: error: cannot read '{options.input}': {error}",
              file=sys.stderr)
        return 1
    outputs, failed = [], False
    for chunk, first_line in _chunks(text, options.split_input_file):
        try:
            outputs.append(_run_chunk(chunk, options, first_line))
        except _ChunkError as error:
            print(f"outofplace-opt: error: {error}", file=sys.stderr)
            failed = True
            if not options.split_input_file:
                return 1
    result = f"\n{SPLIT_MARKER}\n".join(outputs)
    try:
        if options.output == "-":
            sys.stdout.write(result)
        else:
            with open(options.output, "w", encoding="utf-8") as file:
                file.write(result)
    except OSError as error:
        print(f"outofplace-opt: error: cannot write '{options.output}': {error}",
              file=sys.stderr)
        return 1
    return 1 if failed else 0


def run() -> None:
    """The `outofplace-opt` command: `main`, then the process ends without tearing down
    the interpreter (torch's and MLIR's modules: half a second at every exit, as mlir-opt
    skips freeing its own memory), its output flushed first."""
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    run()
