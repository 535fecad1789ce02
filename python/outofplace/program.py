"""The `Compiled` program `outofplace.compile` returns: `Compiled(signature, module, plan)`.

The signature (signature.py) relates main to the Python program, the module is the pure
StableHLO, and the `Plan` is what calls need besides (the io_map, main's types, the
traced layouts, the engine, the mesh, the bounds check). A call is checked by the one
predicate of call_checks.py, run on its engine looked up by name (backends/engines.py,
backends/spmd for a mesh), and its output built by call_outputs.py. Nothing here traces
or lowers: another layout is traced again through `Plan.retrace`.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch_mlir import ir

from . import bounds, call_checks
from .backends import (custom_calls, distributed, engines, export, foreign_targets,
                       hlo_proto, spmd, xla)
from .call_outputs import Outputs
from .ir_utils import all_operations, main_function
from .signature import ProgramSignature
from .transforms.specialize import specialize

# Programs specialized to static shapes kept per dynamic program (for XLA).
SHAPE_CACHE_SIZE = 16

TensorTypes = list[tuple[tuple[int, ...], torch.dtype]]  # (shape, dtype) each


@dataclass(frozen=True)
class Plan:
    """What calls of a compiled program need besides its signature and module, fixed
    when `compile` ends."""

    io_map: dict[int, int]  # mutated argument index -> index of the result with its value
    input_types: TensorTypes  # per argument of main
    result_types: TensorTypes  # per result of main (the bounds-check flags split off)
    layouts: list[tuple]  # per argument: the layout (`call_checks.layout`) it was traced with
    engine: str = "auto"  # "interpreter", "xla", "iree", or "auto": xla when jax is installed
    source: Any = None  # the nn.Module or ExportedProgram whose state is read, or None
    # The program compiled again for a call's arguments (another layout); None for an
    # ExportedProgram, which cannot be traced again.
    retrace: Callable[[tuple, dict], "Compiled"] | None = None
    mesh: dict[str, int] | None = None  # axis -> size over the first devices: runs sharded
    shardings: dict[str, tuple] = field(default_factory=dict)  # argument -> spec
    check_bounds: bool | None = None
    bounds_check: bounds.BoundsCheck | None = None  # run before main (bounds.py)
    cache: bool | None = None  # the compile cache (compile_cache.py); None: the environment


@dataclass
class Compiled:
    """A program compiled to value-semantic StableHLO, callable like the original."""

    signature: ProgramSignature
    module: ir.Module  # the StableHLO module; main's arguments are input_names
    plan: Plan
    # engine name -> its executable (backends/engines.py), compiled on first use
    _executables: dict = field(default_factory=dict, repr=False)
    _relaid: dict = field(default_factory=dict, repr=False)  # layouts -> Compiled
    _spmd: Any = field(default=None, repr=False)  # backends/spmd, compiled on first use
    _traced_strides: Any = field(default=None, repr=False)  # strides seen with `layouts`
    _static: dict = field(default_factory=dict, repr=False)  # shapes -> Compiled (for XLA)
    _planned: Any = field(default=None, repr=False)  # see `_make_plan`
    # Held while the XLA or sharded executable is made: threads calling the program for
    # the first time at once make one (another's would lack the state the first call left).
    _engines: Any = field(default_factory=threading.Lock, repr=False)

    # The plan's fields, as the public API names them (docs/api.md).
    io_map = property(lambda self: self.plan.io_map)
    input_types = property(lambda self: self.plan.input_types)
    result_types = property(lambda self: self.plan.result_types)
    engine = property(lambda self: self.plan.engine)
    mesh = property(lambda self: self.plan.mesh)
    shardings = property(lambda self: self.plan.shardings)
    check_bounds = property(lambda self: self.plan.check_bounds)
    bounds_check = property(lambda self: self.plan.bounds_check)
    cache = property(lambda self: self.plan.cache)

    @property
    def input_names(self) -> list[str]:
        """One per argument of main: parameters, buffers, user inputs."""
        return self.signature.input_names

    @functools.cached_property
    def _kernels(self) -> bool:
        """Whether the program calls custom ops' kernels (backends/custom_calls.py)."""
        return bool(custom_calls.kernel_calls(self.module))

    @functools.cached_property
    def _eager_kernels(self) -> bool:
        """Whether the program has convolutions, matrix products or ops kept whole, which
        the XLA engine may run through eager's kernels (transforms/
        convolutions_as_kernel_calls.py, dots_as_kernel_calls.py,
        composites_as_kernel_calls.py)."""
        return any(op.name in ("stablehlo.convolution", "stablehlo.dot_general",
                               "stablehlo.composite")
                   for op in all_operations(self.module.operation))

    @functools.cached_property
    def _outputs(self) -> Outputs:
        return Outputs(self.signature, self.io_map)

    @functools.cached_property
    def _unversioned(self) -> list[int]:
        """The written arguments the program writes only through `.data`
        (`signature.unversioned`)."""
        return [i for i, name in enumerate(self.input_names)
                if i in self.io_map and name in self.signature.unversioned]

    def _engine_call(self, run: Any, inputs: list[torch.Tensor]) -> Any:
        """`run(inputs)` (an engine or the planned call), an argument written only through
        `.data` handed to it as a `.data` of itself: the same memory with a version of
        its own, which the engine's write moves on, and the caller's stays as eager
        leaves it (frontend/tensor_data.py). The results name the caller's tensors."""
        if not self._unversioned:
            return run(inputs)
        given = list(inputs)
        for i in self._unversioned:
            given[i] = inputs[i].data
        results = run(given)
        if results is None:
            return None
        results = list(results)
        for i in self._unversioned:
            if results[self.io_map[i]] is given[i]:
                results[self.io_map[i]] = inputs[i]
        return results

    @functools.cached_property
    def dynamic(self) -> bool:
        """Whether the program has dynamic dimensions (`tensor<?x...>`, dynamic_shapes)."""
        return any(-1 in shape for shape, _ in self.input_types)

    def specialized(self, shapes: list[tuple[int, ...]]) -> "Compiled":
        """The program for arguments of `shapes` (one per argument of main), its dynamic
        dimensions made static (`stablehlo-refine-shapes`): what XLA runs, once per shape
        (docs/shapes.md). The last SHAPE_CACHE_SIZE are kept."""
        key = tuple(map(tuple, shapes))
        if key not in self._static:
            module = specialize(self.module, list(key))
            function_type = ir.FunctionType(main_function(module).type)

            def static(types: list[ir.Type], traced: list) -> list:
                return [(tuple(ir.RankedTensorType(t).shape), dtype)
                        for t, (_, dtype) in zip(types, traced)]

            self._static[key] = Compiled(self.signature, module, dataclasses.replace(
                self.plan, input_types=static(function_type.inputs, self.input_types),
                result_types=static(function_type.results, self.result_types),
                mesh=None, shardings={}, check_bounds=None, bounds_check=None))
            if len(self._static) > SHAPE_CACHE_SIZE:
                self._static.pop(next(iter(self._static)))
        return self._static[key]

    @property
    def result_dtypes(self) -> list[torch.dtype]:
        return [dtype for _, dtype in self.result_types]

    @property
    def in_place_report(self) -> dict[str, str]:
        """For each argument the program writes: "in place" when XLA:CPU updates it in the
        caller's own memory, else "copied N bytes per call: <why>" (docs/api.md). Filled
        by compiling for XLA:CPU and by the calls made so far."""
        return dict(self._xla_executable().report)

    def sharding_report(self) -> spmd.ShardingReport:
        """What the SPMD partitioner made of the sharded state (docs/sharding.md)."""
        return self._sharded().report

    def _sharded(self) -> spmd.ShardedExecutable:
        if self._spmd is None:
            with self._engines:
                if self._spmd is None:
                    specs = {self.input_names.index(n): s for n, s in self.shardings.items()}
                    self._spmd = spmd.compile(self.stablehlo, self.io_map, {
                        "mesh": self.mesh, "specs": specs, "names": self.input_names,
                        "inputs": self.input_types, "results": self.result_types,
                        "cache": self.cache})
        return self._spmd

    @property
    def stablehlo(self) -> str:
        """The StableHLO text, values named after the program (`%kv_cache_modified`)."""
        return self.module.operation.get_asm(use_name_loc_as_prefix=True)

    @property
    def _exported(self) -> str:
        """What the exports carry: `stablehlo`, with custom ops mapped to a foreign
        target called as that (outofplace.kernels)."""
        return foreign_targets.with_foreign_targets(self.module, self.stablehlo)

    def portable_artifact(self, target: str = export.DEFAULT_TARGET) -> bytes:
        """Versioned StableHLO bytecode; the default target is what jaxlib 0.10.2 reads."""
        return export.portable_artifact(self._exported, target)

    def _refuse_dynamic(self, what: str) -> None:
        if self.dynamic:
            raise ValueError(f"{what} needs static shapes and the program has dynamic "
                             "dimensions (dynamic_shapes): ask it of "
                             "`.specialized(shapes)`, one argument shape per argument")

    def hlo_module_proto(self) -> bytes:
        """The serialized `xla.HloModuleProto` (what the Neuron compiler ingests), with
        `input_output_alias` for every mutated argument. Needs the xla extra."""
        self._refuse_dynamic("an HLO module proto")
        return xla.hlo_module_proto(self._exported)

    def save(self, directory: str, target: str = export.DEFAULT_TARGET, *,
             hlo_proto: bool = True) -> list:
        """Writes main.mlir, main.mlirbc, main.hlo.pb (with jax, unless `hlo_proto` is
        False) and io_map.json. With jax, io_map.json says which consumers the artifacts
        were checked on (`"checked"`: a plain XLA:CPU client with default options and with
        `xla.CONSUMER_OPTION`, whether each keeps every written argument in place). A
        rank's program with collectives is written in `directory/rank<r>`, io_map.json
        saying its rank, the world and its process groups' replica groups."""
        if hlo_proto:
            self._refuse_dynamic("main.hlo.pb (save with hlo_proto=False for the rest)")
        names = export.io_map_json(self.input_names, len(self.result_dtypes), self.io_map)
        if self.mesh is not None:
            names["mesh"] = self.mesh
            names["shardings"] = {n: [list(axes) for axes in spec]
                                  for n, spec in self.shardings.items()}
        elif distributed.replicas(self.module) > 1:  # a rank's: in its own folder
            directory, names["collectives"] = distributed.rank_artifacts(self.module,
                                                                         directory)
        elif xla.available() and not self.dynamic:
            names["checked"] = xla.consumer_checks(self.stablehlo, self.io_map)
        return export.save(directory, self._exported, names, target, hlo_proto=hlo_proto)

    def alias_problems(self, backend: str) -> list[str]:
        """What `backend`'s compiled program does not prove of `io_map`; [] when every
        mutated argument is updated in place (docs/backends.md): "iree" (the stream-phase
        program), "xla" (XLA:CPU's optimized HLO) or "neuron" (the HLO module proto)."""
        if backend == "iree":
            return self._executable("iree").alias_problems
        if backend in ("xla", "neuron"):
            self._refuse_dynamic(f"the {backend} alias check")
        if backend == "xla":
            return xla.alias_problems(self.stablehlo, self.io_map)
        if backend == "neuron":
            return hlo_proto.alias_problems(self.hlo_module_proto(), self.io_map)
        raise ValueError(f"unknown backend '{backend}': use iree, xla or neuron")

    def _arguments(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The arguments of main for a call, checked (call_checks.arguments)."""
        return call_checks.arguments(self.signature, self.plan.source, self.io_map,
                                     self.input_types, args, kwargs)

    def _other_layout(self, args: tuple, kwargs: dict, inputs: list[torch.Tensor]
                      ) -> "Compiled | None":
        """The program compiled for the arguments' layouts, when they are not the traced
        ones (call_checks.relayout), else None."""
        strides = [(t.stride(), t.storage_offset()) for t in inputs]
        views = self.signature.shared_views(inputs)[0]
        if strides == self._traced_strides and views == self.signature.input_views:
            return None  # checked before: the traced layouts
        layouts = [call_checks.layout(t) for t in inputs]
        other = self._relaid.get((tuple(layouts), tuple(views.items())))
        if other is not None:
            return other
        key = call_checks.relayout(self.signature, self.plan.layouts, inputs,
                                   self.plan.retrace is not None)
        if key is None:
            self._traced_strides = strides
            return None
        other = self._relaid[key] = self.plan.retrace(args, kwargs)
        return other

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the program; mutated inputs and buffers are updated as eager would."""
        planned = self._planned
        if planned is not None:  # like the last checked call: to XLA
            given = args
            if kwargs:  # keyword tensors, in main's order
                keys = self.signature.flat_tensors[1]
                given = (*args, *(kwargs[k] for k in keys)) \
                    if len(kwargs) == len(keys) and all(k in kwargs for k in keys) else None
            if given is not None:
                for guard in self.signature.guards:
                    guard.check()
                inputs = [*call_checks.state_tensors(self.signature, self.plan.source),
                          *given] if self.signature.state_targets else given
                results = self._engine_call(planned, inputs)
                if results is not None:
                    return self._finish(inputs, results)
        return self.run(args, kwargs, self.engine)

    def _make_plan(self, inputs: list[torch.Tensor]) -> None:
        """After a call `run` checked and ran on XLA: the planned call (xla.planned_call;
        with a mesh, ShardedExecutable.planned_call) that takes the next calls straight to
        the executable while they are laid out as these (call_checks.planned says what it
        re-checks); it returns None for any other call, which `run` then checks (raises,
        or compiles for another layout). Not made for calls needing more than that (a
        bounds check, complex or non-tensor arguments, nested ones), nor for a program
        taking an argument from another it views (`signature.input_views`: the planned
        call does not check which argument views which)."""
        if self.engine in ("auto", "xla") and self.bounds_check is None and \
                self.signature.flat_tensors is not None and \
                not self.signature.complex_arguments and not self.signature.input_views:
            layouts, written = call_checks.planned(len(self.signature.state_targets),
                                                   self.io_map, inputs)
            self._planned = xla.planned_call(self._xla, layouts, written) \
                if self.mesh is None else \
                self._sharded().planned_call(layouts, written, len(self.result_types))

    @property
    def _xla(self) -> xla.CpuExecutable | None:
        """The XLA executable, once made (the planned call reads its plan)."""
        return self._executables.get("xla")

    def _xla_executable(self) -> xla.CpuExecutable:
        if self.dynamic:
            raise ValueError("XLA compiles static shapes: the program has dynamic dimensions "
                             "(dynamic_shapes); calls on XLA run it specialized to their "
                             "shapes, ask `.specialized(shapes)` for one of them")
        return self._executable("xla")

    def _executable(self, engine: str) -> engines.Executable:
        """The program compiled for `engine` (backends/engines.py), on first use; a
        program with collectives or kernels refused on another engine than xla."""
        if engine not in self._executables:
            if engine != "xla" and distributed.replicas(self.module) > 1:
                raise ValueError(f"a program with collectives runs on the xla engine, not "
                                 f"'{engine}' (docs/sharding.md)")
            if engine != "xla" and self._kernels:  # refused, by name
                custom_calls.refuse_engine(self.module, engine)
            with self._engines:
                if engine not in self._executables:
                    if engine == "xla":
                        distributed.prepare(self.module)  # collectives: join the job's ranks
                        if self._eager_kernels:  # (a cached executable calls them unlegalized)
                            custom_calls.register_eager()
                    self._executables[engine] = engines.compile(
                        engine, self.stablehlo, self.io_map, {
                            "names": self.input_names, "inputs": self.input_types,
                            "results": self.result_types, "cache": self.cache})
        return self._executables[engine]

    def run(self, args: tuple, kwargs: dict | None = None, engine: str = "auto") -> Any:
        """`__call__` on a chosen engine: "interpreter" (the StableHLO reference
        interpreter), "xla" (XLA:CPU through jaxlib, written arguments updated in their
        own memory), "iree" (IREE's llvm-cpu backend, mutated tensors written in place) or
        "auto"."""
        kwargs = kwargs or {}
        inputs = self._arguments(args, kwargs)
        other = self._other_layout(args, kwargs, inputs)
        if other is not None:
            return other.run(args, kwargs, engine)
        if engine == "auto":
            engine = "xla" if xla.available() else "interpreter"
        if engine not in engines.ENGINES:
            raise ValueError(f"unknown engine '{engine}': use interpreter, xla, iree or auto")
        if self.bounds_check is not None:  # raises before anything is written
            self.bounds_check(inputs, engine)
        if engine == "xla" and self.dynamic:  # XLA compiles static shapes: one per shape
            return self.specialized([tuple(t.shape) for t in inputs]).run(args, kwargs, engine)
        # each writes the written arguments' new values into them (engines.py)
        results = self._engine_call(self._sharded() if self.mesh is not None else
                                    self._executable(engine), inputs)
        if self._planned is None and (engine == "xla" or self.mesh is not None):
            self._make_plan(inputs)
        return self._finish(inputs, results)

    def _finish(self, inputs: list[torch.Tensor], results: list[Any]) -> Any:
        if self._kernels or self._eager_kernels:  # a kernel that raised inside XLA's run
            custom_calls.raise_failure()
        for parameter in self.signature.cleared_grads:
            parameter.grad = None
        return self._outputs(inputs, results)
