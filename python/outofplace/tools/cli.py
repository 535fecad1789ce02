"""The `outofplace` command line.

    outofplace export path/to/model.py:factory -o out/

`factory()` returns `(model_or_function, example_args)` or `(model, args, kwargs)`. The
export writes main.mlir, main.mlirbc, main.hlo.pb (with jax) and io_map.json. Errors are
one line (plus a reproducer command for a failing stage), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any, Sequence

from ..backends.export import DEFAULT_TARGET


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(1, f"outofplace: error: {message}\n")


def _arguments() -> argparse.ArgumentParser:
    parser = _Parser(prog="outofplace",
                     description="Compile PyTorch programs with in-place mutation to "
                                 "value-semantic StableHLO.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    export = commands.add_parser(
        "export", help="compile a model and write StableHLO, bytecode, HLO proto, io_map",
        description="Compile the program a factory function returns and write main.mlir "
                    "(StableHLO text), main.mlirbc (portable artifact), main.hlo.pb "
                    "(HloModuleProto, when jax is installed) and io_map.json. Exporting "
                    "never runs the program: no execution engine is needed.")
    export.add_argument("source", metavar="FILE.py:FACTORY",
                        help="a Python file and a function in it returning "
                             "(model_or_function, example_args[, example_kwargs])")
    export.add_argument("-o", "--output", default="out", help="output directory (out/)")
    export.add_argument("--target", default=DEFAULT_TARGET,
                        help=f"StableHLO version of main.mlirbc (default {DEFAULT_TARGET}, "
                             "what jaxlib 0.10.2 reads)")
    export.add_argument("--dump-ir", metavar="DIR",
                        help="write the IR before and after every stage to DIR")
    export.add_argument("--no-hlo", action="store_true",
                        help="skip main.hlo.pb, the one output that needs jaxlib (XLA): "
                             "an export with the StableHLO formats only")
    export.add_argument("--print-names", action="store_true",
                        help="print the StableHLO with SSA values named after the program "
                             "(%%kv_cache_modified)")
    return parser


class _CliError(Exception):
    pass


def _load_factory(source: str) -> Any:
    path_text, _, name = source.rpartition(":")
    if not path_text or not name:
        raise _CliError(f"expected FILE.py:FACTORY, got '{source}'")
    path = Path(path_text)
    if not path.is_file():
        raise _CliError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as error:
        raise _CliError(f"cannot import {path}: {type(error).__name__}: {error}") from None
    finally:
        sys.path.pop(0)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise _CliError(f"{path} has no function '{name}'")
    return factory


def _export(options: argparse.Namespace) -> None:
    import outofplace

    made = _load_factory(options.source)()
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise _CliError("the factory must return (model_or_function, example_args) or "
                        "(model, args, kwargs)")
    program, args, *rest = made
    compiled = outofplace.compile(program, tuple(args), rest[0] if rest else None,
                                  dump_ir=options.dump_ir)
    written = compiled.save(options.output, options.target,
                            hlo_proto=not options.no_hlo)
    if options.print_names:
        print(compiled.stablehlo)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    aliases = ", ".join(f"{compiled.input_names[a]} -> result {r}"
                        for a, r in sorted(compiled.io_map.items())) or "none"
    print(f"aliases: {aliases}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    options = _arguments().parse_args(argv)
    try:
        _export(options)
    except _CliError as error:
        print(f"outofplace: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # the program's own errors, and ours, as one line each
        print(f"outofplace: error: {type(error).__name__}: {error}", file=sys.stderr)
        for note in getattr(error, "__notes__", []):
            print(note, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
