"""`outofplace.compile`: the stages run in order, once each, ending in the `Compiled`
program (program.py): options checked → trace and import (frontend/) → the pipeline
(transforms/, `inplace-to-stablehlo-pipeline`) → `Compiled(signature, module, plan)`."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram
from torch_mlir import ir

from . import bounds, call_checks, compile_cache, progress, torch_types
from .backends import custom_calls, iree, xla
from .context import make_context
from .errors import EngineUnavailableError, OutOfBoundsPolicyWarning
from .frontend import device_mesh, importer
from .ir_utils import main_function
from .program import Compiled, Plan
from .signature import ProgramSignature, io_map_of
from .transforms.diagnostics import run_stage
from .transforms.pipelines import PIPELINES, pipeline_elements

__all__ = ["Compiled", "compile", "import_torch"]


def _tensor_types(types: list[ir.Type]) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of each tensor type of main's arguments or results."""
    return [(tuple(t.sizes or ()), t.dtype or torch.float32)
            for t in map(torch_types.TensorType.of, types)]


def import_torch(f: Any, args: tuple, kwargs: dict | None = None) -> ir.Module:
    """Traces `f(*args, **kwargs)` into mutable torch IR, mutations kept.

    Mutated tensors and their aliases are `!torch.tensor`, the rest `!torch.vtensor`;
    arguments carry the program's names. The first step of `compile`, for users who
    want to run the passes themselves.
    """
    module, _ = importer.compile_to_torch_ir(f, tuple(args), kwargs, make_context())
    return module


def _check_engine(engine: str, mesh: Any) -> None:
    """The engine named exists and can run here (its extra installed): else
    EngineUnavailableError saying what to install or pass, at compile time."""
    engines = ("auto", "xla", "iree", "interpreter")
    if engine not in engines:
        raise EngineUnavailableError(f"unknown engine '{engine}': use one of "
                                     f"{', '.join(engines)}")
    for extra, backend, needed in (("xla", xla, engine == "xla" or mesh is not None),
                                   ("iree", iree, engine == "iree")):
        if needed and not backend.available():
            what = "a mesh" if extra == "xla" and mesh is not None else f"engine='{extra}'"
            raise EngineUnavailableError(
                f"{what} needs the {extra} extra, which is not installed: pip install "
                f"'outofplace[{extra}]' (or compile for engine='interpreter')")


def _lower(module: ir.Module, signature: ProgramSignature, dump_ir: str | None,
           verify_each: bool) -> tuple:
    """Runs inplace-to-stablehlo-pipeline on an imported module, each element a stage
    (with `verify_each`, each pass of the lowering too): (module, io_map, input_types,
    result_types); the part of `compile` the compile cache can skip."""
    pipeline = "inplace-to-stablehlo-pipeline"
    stages = pipeline_elements(f"builtin.module({pipeline})") if verify_each \
        else PIPELINES[pipeline].elements
    input_types = result_types = []
    with warnings.catch_warnings():
        if signature.bounds_result is not None:  # checked, not clamped
            warnings.simplefilter("ignore", OutOfBoundsPolicyWarning)
        for number, stage in enumerate(stages, 1):
            run_stage(module, number, stage, dump_ir)
            if stage == "inplace-to-outofplace":  # main's types, as torch types
                function_type = ir.FunctionType(main_function(module).type)
                input_types = _tensor_types(function_type.inputs)
                result_types = _tensor_types(function_type.results)
    if signature.bounds_result is not None:  # split off main (split_bounds_check.py)
        del result_types[signature.bounds_result]
    return module, io_map_of(main_function(module)), input_types, result_types


@progress.staged("compile")
def compile(f: Any, args: tuple, kwargs: dict | None = None, *, engine: str = "auto",
            dump_ir: str | None = None, verify_each: bool | None = None,
            mesh: Any = None,
            shardings: dict[str, Any] | None = None,
            dynamic_shapes: Any = None, check_bounds: bool | None = None,
            cache: bool | None = None) -> Compiled:
    """Compiles `f(*args, **kwargs)` to value-semantic StableHLO.

    `f` is an `nn.Module`, a plain function, a `torch.export.ExportedProgram` or the
    `torch.fx.GraphModule` a `torch.compile` backend receives. `engine` is what calling
    the result runs on: "xla" (XLA:CPU, needs the xla extra), "iree" (IREE for the CPU, needs
    the iree extra), "interpreter" (the StableHLO reference interpreter) or "auto" (xla
    when jax is installed). `dump_ir` names a
    directory to write the IR of every stage to.

    A stage that fails writes the IR before it and names the `outofplace-opt` command
    that reproduces the failure. `verify_each` (default: the environment variable
    OUTOFPLACE_VERIFY_EACH=1) is a debug mode: every pass of the lowering is its own
    stage, so the MLIR verifier, which runs after each, names the pass that broke the IR.

    `mesh` (axis name -> size, `{"dp": 2, "tp": 4}`) runs the program on that many XLA
    devices through the SPMD partitioner; `shardings` maps an argument name (as in
    `input_names`) to one entry per dimension: a mesh axis, a tuple of axes or None.
    Arguments not named are replicated. `mesh` may be torch's `DeviceMesh`, and a sharding
    a list of DTensor placements (`[Shard(1)]`), `(DeviceMesh, placements)` or a DTensor
    (docs/sharding.md).

    `check_bounds=True` makes a call whose runtime index tensors are out of range raise
    IndexError naming the statement, before anything is written (bounds.py); otherwise
    such indices are clamped or dropped (docs/api.md), which compiling says with an
    `OutOfBoundsPolicyWarning` at each such statement unless `check_bounds=False` asks
    for that policy.

    `cache` (default: on unless OUTOFPLACE_CACHE=0) reads and writes the persistent
    compile cache (compile_cache.py, folder OUTOFPLACE_CACHE_DIR or ~/.cache/outofplace):
    a program compiled before, by any process, skips outofplace's passes and XLA's
    compile. `dump_ir` and `verify_each` run every pass.
    """
    if verify_each is None:
        verify_each = os.environ.get("OUTOFPLACE_VERIFY_EACH") == "1"
    _check_engine(engine, mesh)
    device_mesh.refuse_dtensors(f, args, kwargs)
    context = make_context()
    module, signature = importer.compile_to_torch_ir(f, tuple(args), kwargs, context,
                                                     dynamic_shapes, bool(check_bounds))
    with context:
        mesh, specs = device_mesh.place(module, signature.input_names, mesh, shardings)
        if dump_ir:
            Path(dump_ir).mkdir(parents=True, exist_ok=True)
            (Path(dump_ir) / "0-torch-mutable.mlir").write_text(
                module.operation.get_asm(enable_debug_info=True))
        entry = compile_cache.lowered_key(module, dict(
            engine=engine, mesh=mesh, shardings=shardings, dynamic_shapes=dynamic_shapes,
            check_bounds=bool(check_bounds), bounds_result=signature.bounds_result)) \
            if compile_cache.enabled(cache) and not (dump_ir or verify_each) else None
        with warnings.catch_warnings():
            if check_bounds is False:  # the clamping policy asked for: nothing to warn
                warnings.simplefilter("ignore", OutOfBoundsPolicyWarning)
            module, io_map, input_types, result_types = compile_cache.lowered(
                module, entry, lambda: _lower(module, signature, dump_ir, verify_each))
        bounds_check = bounds.BoundsCheck.take(module, signature.bounds_checks,
                                               signature.input_names, input_types, cache)
        custom_calls.prepare(module, engine, mesh)  # kernels: XLA:CPU's handler, or refused
    source = f if isinstance(f, (torch.nn.Module, ExportedProgram)) else None
    state = call_checks.state_tensors(signature, source)
    layouts = [call_checks.layout(t) for t in signature.real_views(
        signature.with_spans(state + signature.user_inputs(args, kwargs or {})))]
    shardings = {signature.input_names[i]: s for i, s in specs.items()}

    def retrace(args: tuple, kwargs: dict) -> Compiled:  # for another layout
        return compile(f, args, kwargs, engine=engine, mesh=mesh,
                       shardings=shardings or None, check_bounds=check_bounds, cache=cache)

    return Compiled(signature, module, Plan(
        io_map, input_types, result_types, layouts, engine, source,
        None if isinstance(f, ExportedProgram) else retrace, mesh, shardings,
        check_bounds, bounds_check, cache))
