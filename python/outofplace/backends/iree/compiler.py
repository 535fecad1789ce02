"""Compiling StableHLO for IREE's llvm-cpu backend in the process: `compile`.

`iree.compiler.compile_str` runs the `iree-compile` binary in a subprocess; this module
drives libIREECompiler in the process instead (iree.compiler.api), in two halves split at
IREE's `stream` phase. First the `legalize-for-iree` pipeline (transforms/upstream/iree/)
rewrites the forms IREE 3.13 compiles wrongly or not at all; between the halves
`alias_check.alias_problems` reads the stream-phase program, where IREE has decided
which buffer each value lives in, and the second half compiles that same module to the
vmfb. `tf.aliasing_output` arrives as IREE's `iree.abi.output`: the argument's buffer is
consumed and the result is written into it.
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from typing import Any

import torch

from .alias_check import alias_problems
from .errors import IreeCompileError
from .executable import Executable

FLAGS = [
    "--iree-input-type=stablehlo",
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
    "--iree-input-demote-f64-to-f32=false",  # IREE computes float64 in float32 by default
]
LEGALIZE_FOR_IREE = "builtin.module(legalize-for-iree)"


def available() -> bool:
    try:
        import iree.compiler.api  # noqa: F401
        import iree.runtime  # noqa: F401
    except ImportError:
        return False
    return True


_DIAGNOSTIC = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                               ctypes.c_void_p)


_SEVERITY = {0: "note", 1: "warning", 2: "error", 3: "remark"}


@functools.cache
def _compiler() -> Any:
    """libIREECompiler, with the entry points iree.compiler.api does not wrap."""
    try:
        from iree.compiler.api import ctypes_dl
    except ImportError as error:
        raise RuntimeError("the IREE engine needs the 'iree' extra: "
                           "pip install 'outofplace[iree]'") from error
    library = ctypes_dl._dylib  # loaded when iree.compiler.api is imported
    for name in ("ireeCompilerInvocationSetCompileToPhase",
                 "ireeCompilerInvocationSetCompileFromPhase"):
        function = getattr(library, name)
        function.restype, function.argtypes = ctypes.c_bool, [ctypes.c_void_p, ctypes.c_char_p]
    function = library.ireeCompilerInvocationEnableCallbackDiagnostics
    function.restype = None
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, _DIAGNOSTIC, ctypes.c_void_p]
    return library


@functools.cache
def _warn_experimental() -> None:
    warnings.warn(
        "the IREE engine is experimental: IREE 3.13 computes some forms wrongly, which "
        "the engine rewrites (docs/backends.md); each new fuzzer run on IREE found more "
        "until the last ones (850 programs, none wrong; docs/reliability.md), which are "
        "short beside the 10,000 on XLA; check results against engine='xla'",
        UserWarning, stacklevel=4)



def compile(stablehlo: str, io_map: dict[int, int], options: dict[str, Any]
            ) -> Executable:
    """The engine contract: `stablehlo` compiled for IREE, as an `Executable` whose call
    runs `main` on a list of tensors and leaves each written argument's new value in the
    caller's tensor. `io_map` is the module's `tf.aliasing_output`s ({argument: result});
    `options["results"]` the (shape, dtype) of each result of main (backends/engines.py).

    A written argument the legalization leaves without its alias (IREE 3.13 would update
    it wrongly in place) is updated by a copy, and `Executable.alias_problems` says so,
    with what the stream-phase program does not prove of the others."""
    _warn_experimental()
    legalized, passthrough, copied, aliased = legalize_for_iree(stablehlo, io_map)
    vmfb, problems = _compile_in_halves(legalized, aliased)
    problems = [f"argument {argument}: compiled without its alias (IREE 3.13 would "
                "update it wrongly in place)"
                for argument in sorted(io_map.keys() - aliased.keys())] + problems
    dtypes = [dtype for _, dtype in options["results"]]
    return Executable(vmfb, io_map, dtypes, problems, passthrough, copied)


def legalize_for_iree(stablehlo: str, io_map: dict[int, int]
                      ) -> tuple[str, dict[int, tuple[int, list[int]]], set[int],
                                 dict[int, int]]:
    """`LEGALIZE_FOR_IREE` run on `stablehlo`: (the module IREE compiles, the results of
    main it no longer returns as {result: (argument, shape)}, the arguments to pass as
    copies, the aliases left: {argument: its result in the module}). The passes' marks
    (`common.COPIED`, `common.RETURNED`) are read and removed."""
    from torch_mlir import ir

    from ...context import make_context
    from ...transforms.pipelines import run_pipeline
    from ...transforms.upstream.iree.common import (COPIED, RETURNED, _main, aliases,
                                                    set_argument_attributes)

    with make_context():
        module = ir.Module.parse(stablehlo)
        given = aliases(_main(module.operation))
        if given != dict(io_map):
            raise ValueError(f"io_map {io_map} is not the module's aliases {given}")
        run_pipeline(module, LEGALIZE_FOR_IREE)
        main = _main(module.operation)
        passthrough = {}
        if RETURNED in main.attributes:
            for entry in ir.ArrayAttr(main.attributes[RETURNED]):
                result, argument, *shape = ir.DenseI64ArrayAttr(entry)
                passthrough[result] = (argument, shape)
            del main.attributes[RETURNED]
        copied = set()
        if "arg_attrs" in main.attributes:
            copied = {number for number, attrs in
                      enumerate(ir.ArrayAttr(main.attributes["arg_attrs"]))
                      if COPIED in ir.DictAttr(attrs)}
        set_argument_attributes(main, {number: {COPIED: None} for number in copied})
        return str(module), passthrough, copied, aliases(main)


def _compile_in_halves(stablehlo: str, io_map: dict[int, int]) -> tuple[bytes, list[str]]:
    """The vmfb of the legalized module, and `alias_problems` of its stream-phase program
    for `io_map`."""
    from iree.compiler import ir
    from iree.compiler.api import Output, Session

    library = _compiler()
    session = Session()
    try:
        session.set_flags(*FLAGS)
        messages: list[str] = []

        @_DIAGNOSTIC
        def diagnostic(severity: int, message: bytes, size: int, _: Any) -> None:
            text = ctypes.string_at(message, size).decode(errors="replace")
            messages.append(f"{_SEVERITY.get(severity, severity)}: {text}")

        def run(module: Any, phase_setter: str) -> Any:
            invocation = session.invocation()
            library.ireeCompilerInvocationEnableCallbackDiagnostics(
                invocation._inv_p, 0, diagnostic, None)
            getattr(library, phase_setter)(invocation._inv_p, b"stream")
            invocation.import_module(module)
            if not invocation.execute():
                raise IreeCompileError("IREE could not compile the module:\n" +
                                       "\n".join(messages))
            return invocation

        module = ir.Module.parse(stablehlo, session.context)
        run(module.operation, "ireeCompilerInvocationSetCompileToPhase")
        problems = alias_problems(module.operation, io_map)
        output = Output.open_membuffer()
        run(module.operation, "ireeCompilerInvocationSetCompileFromPhase"
            ).output_vm_bytecode(output)
        vmfb = bytes(output.map_memory())
        output.close()
        return vmfb, problems
    finally:
        session.close()
