"""`outofplace.compile` and the `Compiled` program it returns."""

from __future__ import annotations

import functools
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch_mlir import ir

from . import bounds, compile_cache, progress
from .backends import (custom_calls, distributed, engines, export, foreign_targets,
                       hlo_proto, iree, spmd, xla)
from .frontend import device_mesh, importer
from . import torch_types
from .context import make_context
from .signature import Input, ProgramSignature, Result, io_map_of, state_tensor
from .errors import EngineUnavailableError, OutOfBoundsPolicyWarning
from .transforms.diagnostics import run_stage
from .ir_utils import all_operations, main_function
from .transforms.pipelines import PIPELINES, pipeline_elements
from .transforms.specialize import specialize

# Programs specialized to static shapes kept per dynamic program (for XLA).
SHAPE_CACHE_SIZE = 16


def _tensor_types(types: list[ir.Type]) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of each tensor type of main's arguments or results."""
    return [(tuple(t.sizes or ()), t.dtype or torch.float32)
            for t in map(torch_types.TensorType.of, types)]


def _fits(shape: torch.Size, compiled: tuple[int, ...]) -> bool:
    """A tensor's shape is one the program takes: -1 (a dynamic dimension) takes any size."""
    return len(shape) == len(compiled) and all(n in (size, -1)
                                               for size, n in zip(shape, compiled))


def _layout(tensor: torch.Tensor) -> tuple:
    """What a traced program may depend on beyond shape and dtype (a `reshape` that
    views or copies, an `as_strided`): the strides of dimensions longer than 1, and the
    storage offset."""
    if tensor.numel() == 0:
        return ()
    return (tuple(st for size, st in zip(tensor.shape, tensor.stride()) if size > 1),
            tensor.storage_offset())


def _describe_layout(layout: tuple) -> str:
    if not layout:
        return "empty"
    return f"strides {list(layout[0])} (dimensions longer than 1) at storage offset {layout[1]}"


def _as_complex(pairs: torch.Tensor) -> torch.Tensor:
    """The complex tensor of real pairs [..., 2]: the caller's own tensor when `pairs` is
    its `view_as_real`, else a complex view of the pairs (a copy where they cannot be
    viewed so)."""
    base = pairs._base
    if base is not None and base.is_complex() and base.shape == pairs.shape[:-1] and \
            base.data_ptr() == pairs.data_ptr() and \
            torch.view_as_real(base).stride() == pairs.stride():
        return base
    try:
        return torch.view_as_complex(pairs)
    except RuntimeError:
        return torch.view_as_complex(pairs.contiguous())


def _laid_out(result: torch.Tensor, strides: tuple, offset: int, storage: int
              ) -> torch.Tensor:
    """A result of main (contiguous) in the layout eager gives that output."""
    tensor = torch.empty(storage, dtype=result.dtype, device=result.device)
    return tensor.as_strided(result.shape, strides, offset).copy_(result)


def _take_views(tensor: torch.Tensor, views: tuple, inputs: list[torch.Tensor],
                results: list[Any]) -> torch.Tensor:
    """The view of `tensor` that `views` take ((view op, its other arguments, kwargs),
    innermost first), a position tensor among them given as the call's `signature.Input`
    or main's `signature.Result`."""
    for view, view_args, view_kwargs in views:
        view_args = [inputs[a.index] if type(a) is Input else
                     results[a.index] if type(a) is Result else a
                     for a in view_args]
        tensor = view(tensor, *view_args, **view_kwargs)
    return tensor


def _state_tensors(signature: ProgramSignature, owner: Any) -> list[torch.Tensor]:
    """The program's parameters and buffers, and the state it reaches through Python
    objects (optimizer state, `.grad`), as they are now."""
    held = signature.held
    return [held[t]() if t in held else state_tensor(owner, t)
            for t in signature.state_targets]


@dataclass
class Compiled:
    """A program compiled to value-semantic StableHLO, callable like the original."""

    module: ir.Module  # the StableHLO module; main's arguments are input_names
    io_map: dict[int, int]  # mutated argument index -> index of the result with its value
    input_names: list[str]  # one per argument of main: parameters, buffers, user inputs
    signature: ProgramSignature
    source: Any  # the nn.Module or ExportedProgram whose state is read, or None
    input_types: list[tuple[tuple[int, ...], torch.dtype]]  # (shape, dtype) per argument
    result_types: list[tuple[tuple[int, ...], torch.dtype]]  # (shape, dtype) per result
    layouts: list[tuple]  # per argument: the layout (`_layout`) it was traced with
    program: Any = None  # what was compiled, to trace again for another layout (or None)
    engine: str = "auto"  # "interpreter", "xla", "iree", or "auto": xla when jax is installed
    # engine name -> its executable (backends/engines.py), compiled on first use
    _executables: dict = field(default_factory=dict, repr=False)
    _relaid: dict = field(default_factory=dict, repr=False)  # layouts -> Compiled
    mesh: dict[str, int] | None = None  # axis -> size over the first devices: runs sharded
    shardings: dict[str, device_mesh.Spec] = field(default_factory=dict)  # argument -> spec
    _spmd: Any = field(default=None, repr=False)  # backends/spmd, compiled on first use
    check_bounds: bool | None = None
    bounds_check: bounds.BoundsCheck | None = None  # run before main (bounds.py)
    _traced_strides: Any = field(default=None, repr=False)  # strides seen with `layouts`
    _static: dict = field(default_factory=dict, repr=False)  # shapes -> Compiled (for XLA)
    _plan: Any = field(default=None, repr=False)  # see `_make_plan`
    cache: bool | None = None  # the compile cache (compile_cache.py); None: the environment
    # Held while the XLA or sharded executable is made: threads calling the program for
    # the first time at once make one (another's would lack the state the first call left).
    _engines: Any = field(default_factory=threading.Lock, repr=False)

    @functools.cached_property
    def _kernels(self) -> bool:
        """Whether the program calls custom ops' kernels (backends/custom_calls.py)."""
        return bool(custom_calls.kernel_calls(self.module))

    @functools.cached_property
    def _convolutions(self) -> bool:
        """Whether the program has convolutions, which the XLA engine may run through
        eager's kernel (transforms/convolutions_as_kernel_calls.py)."""
        return any(op.name == "stablehlo.convolution" for op in all_operations(self.module.operation))

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

            self._static[key] = Compiled(
                module, self.io_map, self.input_names, self.signature, self.source,
                static(function_type.inputs, self.input_types),
                static(function_type.results, self.result_types),
                self.layouts, self.program, self.engine, cache=self.cache)
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
        """The arguments of main for a call, checked against what was compiled before
        anything runs: a wrong count, type, shape, dtype, device, a written leaf that
        requires grad or a constant of the trace the caller changed since
        (`signature.guards`) raises TypeError or ValueError naming the argument."""
        signature = self.signature
        if kwargs or len(args) != signature.positional_tensors:
            self._check_count(args, kwargs)
        for guard in signature.guards:
            guard.check()
        state = _state_tensors(signature, self.source) if signature.state_targets else []
        given = state + signature.user_inputs(args, kwargs)
        inputs = signature.real_views(given)  # complex tensors as their real pairs
        for i, (name, value, (shape, dtype)) in enumerate(
                zip(self.input_names, inputs, self.input_types)):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"argument '{name}' was compiled as a tensor, got "
                                f"{type(value).__name__}")
            if value.dtype != dtype or (value.shape != shape and
                                        not _fits(value.shape, shape)):
                want, got = (dtype, list(shape)), (value.dtype, list(value.shape))
                if i in signature.complex_arguments:  # shown as the caller's tensors
                    complex_dtype = signature.complex_arguments[i]
                    want, got = (complex_dtype, want[1][:-1]), (complex_dtype, got[1][:-1])
                raise ValueError(f"argument '{name}' was compiled for a {want[0]} "
                                 f"{want[1]} tensor, got {got[0]} {got[1]}")
            if not value.is_cpu:
                raise ValueError(f"argument '{name}' is on {value.device}; outofplace runs "
                                 "on CPU tensors" + (": load the weights of a module "
                                 "compiled on meta before calling it (docs/models.md)"
                                 if value.is_meta else ""))
            if i in self.io_map:
                self._check_writable(name, value, given[i], i >= len(state))
        signature.symbolic_sizes.check(self.input_names, inputs)
        signature.refuse_written_inputs_sharing_memory(inputs)
        return inputs

    @staticmethod
    def _check_writable(name: str, value: torch.Tensor, given: torch.Tensor,
                        user_input: bool) -> None:
        """Raises ValueError for a tensor the program writes that a call cannot write as
        eager would: one that requires grad with grad enabled (eager refuses a leaf; for
        another, eager records the write in its autograd history, which a compiled call
        cannot: its gradients would be silently wrong), one whose elements share memory
        (expanded), an inference tensor outside inference mode (eager refuses it)."""
        if user_input and value.requires_grad and torch.is_grad_enabled():
            if given.is_leaf:
                raise ValueError(f"argument '{name}' is a leaf tensor that requires grad, "
                                 "and the program writes it in place, which eager refuses: "
                                 "call under torch.no_grad() or pass a tensor that does "
                                 "not require grad")
            raise ValueError(f"argument '{name}' requires grad and the program writes it "
                             "in place: eager records the write in its autograd history, "
                             "a compiled call cannot (gradients through it would be "
                             "wrong): call under torch.no_grad() or pass a detached tensor")
        if torch._debug_has_internal_overlap(value) == 1:  # 1: it does (2: unknown)
            raise ValueError(f"argument '{name}' has elements that share memory (an "
                             "expanded tensor) and the program writes it, which eager "
                             "refuses for most writes and a call cannot write back: pass "
                             "a tensor whose elements do not overlap (a clone)")
        if value.is_inference() and not torch.is_inference_mode_enabled():
            raise ValueError(f"argument '{name}' is an inference tensor and the program "
                             "writes it in place, which eager refuses outside inference "
                             "mode: call under torch.inference_mode() or pass a clone")

    def _check_count(self, args: tuple, kwargs: dict) -> None:
        """Raises TypeError for a call with another number of positional arguments,
        without a keyword argument or with one the program was not compiled with."""
        spec = self.signature.in_spec
        if spec is not None and spec.num_children == 2:
            expected = spec.child(0).num_children
            missing = [k for k in spec.child(1).context if k not in kwargs]
            unknown = [k for k in kwargs if k not in spec.child(1).context]
            if unknown:  # the traced program ignores them: a default it may not have
                raise TypeError(f"keyword arguments {unknown} were not given when the "
                                "program was compiled, which was traced without them: "
                                "compile with them to pass them")
            if len(args) != expected or missing:
                user_names = self.input_names[len(self.signature.state_targets):]
                got = f"{len(args)} positional" + (f", without {missing}" if missing else "")
                raise TypeError(f"the program was compiled for {expected} positional "
                                f"arguments (tensors: {', '.join(user_names)}), got {got}")

    def _other_layout(self, args: tuple, kwargs: dict, inputs: list[torch.Tensor]
                      ) -> "Compiled | None":
        """The program compiled for the arguments' layouts, when they are not the traced
        ones: eager's `reshape`, `contiguous` and `as_strided` may alias for one layout and
        copy for another, so a program traced for one is not run on another."""
        strides = [(t.stride(), t.storage_offset()) for t in inputs]
        if strides == self._traced_strides:  # checked before: the traced layouts
            return None
        layouts = [_layout(t) for t in inputs]
        if layouts == self.layouts:
            self._traced_strides = strides
            return None
        other = self._relaid.get(tuple(layouts))
        if other is not None:
            return other
        i, name = next((i, n) for i, n in enumerate(self.input_names)
                       if layouts[i] != self.layouts[i])
        what = (f"argument '{name}' has {_describe_layout(layouts[i])}; the program was "
                f"traced with {_describe_layout(self.layouts[i])}")
        if self.program is None:
            raise ValueError(f"{what}, and an ExportedProgram cannot be traced again: pass "
                             "tensors with the traced layout (for example .contiguous())")
        warnings.warn(f"{what}: compiling it again for this layout", stacklevel=4)
        other = compile(self.program, args, kwargs, engine=self.engine, mesh=self.mesh,
                        shardings=self.shardings or None, check_bounds=self.check_bounds,
                        cache=self.cache)
        self._relaid[tuple(layouts)] = other
        return other

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the program; mutated inputs and buffers are updated as eager would."""
        plan = self._plan
        if plan is not None:  # like the last checked call: to XLA
            given = args
            if kwargs:  # keyword tensors, in main's order
                keys = self.signature.flat_tensors[1]
                given = (*args, *(kwargs[k] for k in keys)) \
                    if len(kwargs) == len(keys) and all(k in kwargs for k in keys) else None
            if given is not None:
                for guard in self.signature.guards:
                    guard.check()
                inputs = [*_state_tensors(self.signature, self.source), *given] \
                    if self.signature.state_targets else given
                results = plan(inputs)
                if results is not None:
                    return self._finish(inputs, results)
        return self.run(args, kwargs, self.engine)

    def _make_plan(self, inputs: list[torch.Tensor]) -> None:
        """After a call `run` checked and ran on XLA: the planned call (xla.planned_call;
        with a mesh, ShardedExecutable.planned_call) that takes the next calls straight to
        the executable while their arguments look
        like these (dtype, shape, strides, storage offset; no written one requiring grad,
        none an inference tensor outside inference mode), which passed `_arguments` and
        `_other_layout`; it returns None for any other call, which `run` then checks
        (raises, or compiles for another layout). Not made for calls needing more than
        that (a bounds check, complex or non-tensor arguments, nested ones)."""
        if self.engine in ("auto", "xla") and self.bounds_check is None and \
                self.signature.flat_tensors is not None and \
                not self.signature.complex_arguments:
            state = len(self.signature.state_targets)
            layouts = [(t.dtype, tuple(t.shape), t.stride(), t.storage_offset())
                       for t in inputs]
            written = [i for i in self.io_map if i >= state]
            self._plan = xla.planned_call(self._xla, layouts, written) \
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
        """The program compiled for `engine` (backends/engines.py), on first use."""
        if engine not in self._executables:
            with self._engines:
                if engine not in self._executables:
                    if engine == "xla":
                        distributed.prepare(self.module)  # collectives: join the job's ranks
                        if self._convolutions:  # (a cached executable calls it unlegalized)
                            custom_calls.register(custom_calls.CONVOLUTION)
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
        if self.mesh is not None:  # aliased shards are written into the caller's tensors
            results = self._sharded()(inputs)
        elif engine != "xla" and distributed.replicas(self.module) > 1:
            raise ValueError(f"a program with collectives runs on the xla engine, not "
                             f"'{engine}' (docs/sharding.md)")
        elif engine != "xla" and self._kernels:  # refused, by name
            custom_calls.refuse_engine(self.module, engine)
        else:  # each writes the written arguments' new values into them
            results = self._executable(engine)(inputs)
        if self._plan is None and (engine == "xla" or self.mesh is not None):
            self._make_plan(inputs)
        return self._finish(inputs, results)

    def _finish(self, inputs: list[torch.Tensor], results: list[Any]) -> Any:
        if self._kernels or self._convolutions:  # a kernel that raised inside XLA's run
            custom_calls.raise_failure()
        for parameter in self.signature.cleared_grads:
            parameter.grad = None
        return self._outputs(inputs, results)

    def _outputs(self, inputs: list[torch.Tensor], results: list[Any]) -> Any:
        """The program's output: a result of main, the caller's own tensor where main's
        result is aliased with it, or a view of an argument, taken of the caller's tensor
        as eager takes it."""
        written = self._written_results
        complex_results = self.signature.complex_results
        leaves: list[Any] = []
        output_views = []
        laid_out: dict[int, torch.Tensor] = {}  # a result given twice is one tensor
        for kind, value, *views in self.signature.output_leaves:
            if kind == "result":
                leaves.append(inputs[written[value]] if value in written else results[value])
                if value in complex_results:
                    leaves[-1] = _as_complex(leaves[-1])
                elif views[0] is not None and value not in written:
                    if value not in laid_out:
                        laid_out[value] = _laid_out(leaves[-1], *views[0])
                    leaves[-1] = laid_out[value]
            elif kind == "argument":
                tensor = inputs[value]
                if value in self.signature.complex_arguments:
                    tensor = _as_complex(tensor)
                leaves.append(_take_views(tensor, views[0], inputs, results))
            elif kind == "output":  # a view of another leaf, taken once that one is
                output_views.append((len(leaves), value, views[0]))
                leaves.append(None)
            else:
                leaves.append(value)
        while output_views:  # bases first: a leaf's base may be a view of a third
            index, base, views = output_views.pop(0)
            if leaves[base] is None:
                output_views.append((index, base, views))
                continue
            leaves[index] = _take_views(leaves[base], views, inputs, results)
        spec = self.signature.out_spec
        if spec is None:
            return leaves
        if self._flat_output is not None:
            return self._flat_output(leaves)
        return pytree.tree_unflatten(leaves, spec)

    @functools.cached_property
    def _flat_output(self) -> Callable[[list], Any] | None:
        """How leaves become the output without pytree when the output is one tensor or
        a flat tuple or list of them (a torch.compile graph's tuple), else None."""
        spec = self.signature.out_spec
        if spec.is_leaf():
            return lambda leaves: leaves[0]
        if spec.type in (tuple, list) and \
                all(spec.child(i).is_leaf() for i in range(spec.num_children)):
            return spec.type
        return None

    @functools.cached_property
    def _written_results(self) -> dict[int, int]:
        """Result index -> the argument it is the new value of."""
        return {result: arg for arg, result in self.io_map.items()}


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
    state = _state_tensors(signature, source)
    layouts = [_layout(t) for t in signature.real_views(
        state + signature.user_inputs(args, kwargs or {}))]
    program = None if isinstance(f, ExportedProgram) else f
    return Compiled(module, io_map, signature.input_names, signature, source,
                    input_types, result_types, layouts, program, engine, mesh=mesh,
                    shardings={signature.input_names[i]: s for i, s in specs.items()},
                    check_bounds=check_bounds, bounds_check=bounds_check, cache=cache)
