"""`outofplace.compile` and the `Compiled` program it returns."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch_mlir import ir

from .backends import export, hlo_proto, iree, xla
from .frontend import importer
from . import torch_types
from .context import make_context
from .transforms.diagnostics import run_stage
from .transforms.inplace_to_outofplace import io_map_of
from .ir_utils import main_function
from .transforms.pipelines import pipeline_elements
from .backends.interpreter import interpret


def _result_dtypes(module: ir.Module) -> list[torch.dtype]:
    results = ir.FunctionType(main_function(module).type).results
    return [torch_types.TensorType.of(t).dtype or torch.float32 for t in results]


def _state_tensor(owner: Any, target: str) -> torch.Tensor:
    """A parameter or buffer of the compiled program, by its state-dict name."""
    if isinstance(owner, ExportedProgram):
        if target in owner.state_dict:
            return owner.state_dict[target]
        return owner.constants[target]
    value = owner
    for part in target.split("."):
        value = getattr(value, part)
    return value


@dataclass
class Compiled:
    """A program compiled to value-semantic StableHLO, callable like the original."""

    module: ir.Module  # the StableHLO module; main's arguments are input_names
    io_map: dict[int, int]  # mutated argument index -> index of the result with its value
    input_names: list[str]  # one per argument of main: parameters, buffers, user inputs
    signature: importer.ProgramSignature
    source: Any  # the nn.Module or ExportedProgram whose state is read, or None
    result_dtypes: list[torch.dtype]
    engine: str = "auto"  # "interpreter", "xla", "iree", or "auto": xla when jax is installed
    _xla: Any = field(default=None, repr=False)  # the XLA executable, compiled on first use
    _iree: Any = field(default=None, repr=False)  # the IREE executable, compiled on first use

    @property
    def stablehlo(self) -> str:
        """The StableHLO text, values named after the program (`%kv_cache_modified`)."""
        return self.module.operation.get_asm(use_name_loc_as_prefix=True)

    def portable_artifact(self, target: str = export.DEFAULT_TARGET) -> bytes:
        """Versioned StableHLO bytecode; the default target is what jaxlib 0.10.2 reads."""
        return export.portable_artifact(self.stablehlo, target)

    def hlo_module_proto(self) -> bytes:
        """The serialized `xla.HloModuleProto` (what the Neuron compiler ingests), with
        `input_output_alias` for every mutated argument. Needs the xla extra."""
        return xla.hlo_module_proto(self.stablehlo)

    def save(self, directory: str, target: str = export.DEFAULT_TARGET, *,
             hlo_proto: bool = True) -> list:
        """Writes main.mlir, main.mlirbc, main.hlo.pb (with jax, unless `hlo_proto` is
        False) and io_map.json."""
        names = export.io_map_json(self.input_names, len(self.result_dtypes), self.io_map)
        return export.save(directory, self.stablehlo, names, target, hlo_proto=hlo_proto)

    def alias_problems(self, backend: str) -> list[str]:
        """What `backend`'s compiled program does not prove of `io_map`; [] when every
        mutated argument is updated in place (docs/backends.md): "iree" (the stream-phase
        program), "xla" (XLA:CPU's optimized HLO) or "neuron" (the HLO module proto)."""
        if backend == "iree":
            return self._iree_executable().alias_problems
        if backend == "xla":
            return xla.alias_problems(self.stablehlo, self.io_map)
        if backend == "neuron":
            return hlo_proto.alias_problems(self.hlo_module_proto(), self.io_map)
        raise ValueError(f"unknown backend '{backend}': use iree, xla or neuron")

    def _iree_executable(self) -> iree.Executable:
        if self._iree is None:
            self._iree = iree.Executable(self.stablehlo, self.io_map)
        return self._iree

    def _arguments(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        state = [_state_tensor(self.source, t) for t in self.signature.state_targets]
        user = self.signature.user_inputs(args, kwargs)
        for name, value in zip(self.input_names[len(state):], user):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"argument '{name}' must be a tensor, got {type(value)}")
        self.signature.refuse_written_inputs_sharing_memory(state + user)
        return state + user

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the program; mutated inputs and buffers are updated as eager would."""
        return self.run(args, kwargs, self.engine)

    def run(self, args: tuple, kwargs: dict | None = None, engine: str = "auto") -> Any:
        """`__call__` on a chosen engine: "interpreter" (the StableHLO reference
        interpreter), "xla" (XLA:CPU through jaxlib, aliased buffers donated), "iree"
        (IREE's llvm-cpu backend, mutated tensors written in place) or "auto"."""
        inputs = self._arguments(args, kwargs or {})
        if engine == "auto":
            engine = "xla" if xla.available() else "interpreter"
        if engine == "xla":
            if self._xla is None:
                self._xla = xla.CpuExecutable(self.stablehlo)
            results = self._xla(inputs, self.result_dtypes)
        elif engine == "interpreter":
            results = interpret(self.module, inputs, self.result_dtypes)
        elif engine == "iree":  # updates mutated inputs in place: the copy_ below skips them
            results = self._iree_executable()(inputs, self.result_dtypes)
        else:
            raise ValueError(f"unknown engine '{engine}': use interpreter, xla, iree or auto")
        with torch.no_grad():
            for arg, result in self.io_map.items():
                inputs[arg].copy_(results[result])
        leaves = [results[v] if kind == "result" else v
                  for kind, v in self.signature.output_leaves]
        if self.signature.out_spec is None:
            return leaves
        return pytree.tree_unflatten(leaves, self.signature.out_spec)


def import_torch(f: Any, args: tuple, kwargs: dict | None = None) -> ir.Module:
    """Traces `f(*args, **kwargs)` into mutable torch IR, mutations kept.

    Mutated tensors and their aliases are `!torch.tensor`, the rest `!torch.vtensor`;
    arguments carry the program's names. The first step of `compile`, for users who
    want to run the passes themselves.
    """
    module, _ = importer.compile_to_torch_ir(f, tuple(args), kwargs, make_context())
    return module


def compile(f: Any, args: tuple, kwargs: dict | None = None, *, engine: str = "auto",
            dump_ir: str | None = None, verify_each: bool | None = None) -> Compiled:
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
    """
    if verify_each is None:
        verify_each = os.environ.get("OUTOFPLACE_VERIFY_EACH") == "1"
    context = make_context()
    module, signature = importer.compile_to_torch_ir(f, tuple(args), kwargs, context)
    with context:
        if dump_ir:
            Path(dump_ir).mkdir(parents=True, exist_ok=True)
            (Path(dump_ir) / "0-torch-mutable.mlir").write_text(
                module.operation.get_asm(enable_debug_info=True))
        run_stage(module, 1, "inplace-to-outofplace", dump_ir)
        io_map = io_map_of(main_function(module))
        result_dtypes = _result_dtypes(module)
        lowering = "outofplace-lower-to-stablehlo"
        stages = pipeline_elements(f"builtin.module({lowering})") if verify_each \
            else [lowering]
        for number, stage in enumerate(stages, 2):
            run_stage(module, number, stage, dump_ir)
    source = f if isinstance(f, (torch.nn.Module, ExportedProgram)) else None
    return Compiled(module, io_map, signature.input_names, signature, source,
                    result_dtypes, engine)
