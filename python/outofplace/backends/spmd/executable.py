"""The mesh engine's executable: a program with shardings compiled once for the mesh's
devices by XLA's SPMD partitioner (through jax), called on torch tensors, its written
arguments' state kept on the devices between calls; and `compile`, the engine contract."""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from ... import compile_cache, progress
from .. import xla
from ..xla import misfusion
from .placement import Placement, Resident, Stage, tracked
from .report import ShardingReport, report_of
from .writes import engine_module, written

# The passes the mesh engine runs on the program before jax compiles it: the XLA engine's
# (`xla.LEGALIZE_FOR_CPU`) that keep a sharded state in place, and the workaround of
# openxla/xla#49121 (transforms/scatter_barriers.py). Left out: `outofplace-squeeze-state`
# (it changes the written arguments' shapes, which the specs, the placements and the
# host's repeated writes are in) and `outofplace-fold-transposes-into-dots` (on a mesh,
# XLA then copies the batch-1 key cache of test_sharding.py's Llama decode every call).
LEGALIZE_FOR_MESH = ("builtin.module(outofplace-small-convolutions-as-dots, "
                     "outofplace-barrier-scatter-operands)")


def compile(stablehlo: str, io_map: dict[int, int], options: dict[str, Any]
            ) -> "ShardedExecutable":
    """The engine contract: `stablehlo` (with shardings, transforms/sharding.py) compiled
    for the mesh's devices, its call running main on a list of tensors and writing each
    written argument's new value into the caller's tensor itself (`io_map`: written
    argument -> its result). `options`: "mesh" (axis -> size), "specs" (argument ->
    spec), "names" (one per argument), "inputs" and "results" ((shape, dtype) each), and
    optionally "cache" (the compile cache, compile_cache.py). A call returns one tensor
    per result: the caller's tensor for a result that is a written argument's new value."""
    return ShardedExecutable(stablehlo, io_map, options["mesh"], options["specs"],
                             options["names"], options["inputs"], options["results"],
                             options.get("cache"))


@dataclass(frozen=True)
class ShardedPlan:
    """Everything a sharded planned call reads of a ShardedExecutable, built once by
    Python (`ShardedExecutable.planned_call`): sharded_call.cpp reads these fields by
    name and nothing else of outofplace's (test_in_place_calls.py checks each name it reads
    is a field here)."""

    # From call_checks.planned (the one predicate of a refusal): per argument, (dtype,
    # shape, strides, storage offset) of a call it accepted, and the caller's written
    # arguments, none of which may require grad; any other call is handed back (None).
    layouts: tuple
    written: tuple[int, ...]
    results: int  # how many results the program has (the engine's module may return more)
    regions: dict  # per written argument, its writes' regions (`_regions`), or None
    compiled: Any  # the jax executable
    order: tuple[int, ...]  # the arguments in the order the executable takes them
    io_map: dict[int, int]  # written argument -> result
    state: dict[int, int]  # result -> the written argument whose state it returns
    viewers: dict  # result -> its xla.buffers.Viewer (`shape`, `dtype`), once made
    stages: dict  # small read-only argument -> its Stage (kept buffers on the devices)
    placements: dict  # written argument -> its Placement (`distinct`, `boxes`)
    resident: dict  # (argument, id(tensor)) -> Resident: the state a call left
    on_devices: Callable[..., Any]  # a large read-only argument, put on the devices
    keep: Callable[..., None]  # after a call: the written arguments' new state kept
    lock: Any  # held for a call


class ShardedExecutable:
    """A StableHLO module with shardings, compiled once for the mesh's devices; written
    arguments stay on the devices between calls (the module docstring)."""

    def __init__(self, stablehlo: str, io_map: dict[int, int], mesh: dict[str, int],
                 specs: dict[int, tuple], input_names: list[str],
                 inputs: list[tuple[tuple[int, ...], torch.dtype]],
                 results: list[tuple[tuple[int, ...], torch.dtype]],
                 cache: bool | None = None) -> None:
        jax = xla.load_jax()
        from jax._src import xla_bridge

        count = math.prod(mesh.values())
        devices = xla_bridge.get_backend("cpu").local_devices()
        if len(devices) < count:
            raise RuntimeError(
                f"the mesh {mesh} needs {count} devices, XLA:CPU has {len(devices)}: set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={count} before jax "
                "starts (docs/sharding.md)")
        self._jax = jax
        self._devices = devices[:count]
        self._mesh = jax.sharding.Mesh(np.array(self._devices).reshape(
            tuple(mesh.values())), tuple(mesh))
        self._specs, self._io_map, self._names = specs, io_map, input_names
        self._shapes, self._axes = [list(s) for s, _ in inputs], mesh
        self._result_dtypes = [d for _, d in results]
        self._cache = cache  # the compile cache (compile_cache.py); None: the environment
        legalized, _, _, same, _ = xla.compiler.legalized(stablehlo, LEGALIZE_FOR_MESH)
        # result -> the written argument whose new value it is: the aliased results, and
        # any other result returning the same value (`return cache` after `cache[...] = k`)
        first = {r: same.get(r, r) for r in range(len(results))}
        self._state = {r: a for a, aliased in io_map.items() for r in first
                       if first[r] == first[aliased]}
        text, self._writes = engine_module(legalized, io_map)
        self._placements: dict[int, Placement] = {}
        self._compiled, self._order = self._jit(text)
        self._executable = misfusion.executable_of(self._compiled)
        self._report: ShardingReport | None = None
        # (argument, id of the caller's tensor) -> its state on the devices
        self._resident: dict[tuple[int, int], Resident] = {}
        self._lock = threading.Lock()
        # small read-only arguments: kept buffers on the devices each call copies into
        self._stages: dict[int, Stage] = {}
        self._viewers: dict[int, xla.buffers.Viewer] = {}  # result -> its viewer

    def _jit(self, text: str) -> tuple[Any, list[int]]:
        """The module as a jax `Compiled` for the mesh, whose call is jax's C++ dispatch:
        wrapped in a `jax.export.Exported` (one exported from a stand-in of the same
        signature and shardings, holding our module instead; the devices are jax's, so
        the mesh runs on jax's client, not backends/xla's), called under `jax.jit` with
        the written arguments donated. jax pairs each donated argument with the first
        result of its shape, dtype and sharding: the aliased results come first, in their
        arguments' order (the returned order)."""
        jax = self._jax
        from jax import export as jax_export
        from jax._src.interpreters import mlir as jax_mlir
        from jax._src.lib.mlir import ir

        with jax_mlir.make_ir_context():
            module = ir.Module.parse(text)
            module.operation.attributes["sym_name"] = ir.StringAttr.get("outofplace")
            main = next(op for op in module.body.operations
                        if ir.StringAttr(op.attributes["sym_name"]).value == "main")
            function = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
            inputs, results = ([_aval(ir.RankedTensorType(t)) for t in types]
                               for types in (function.inputs, function.results))
            bytecode = jax_mlir.module_to_bytecode(module)
        replicated = jax.sharding.NamedSharding(self._mesh, jax.sharding.PartitionSpec())
        in_shardings = [self._placement(i).sharding for i in range(len(inputs))]
        out_shardings = [self._placement(self._state[r]).sharding if r in self._state
                         else replicated for r in range(len(results))]
        in_avals = [jax.ShapeDtypeStruct(s, d, sharding=h)
                    for (s, d), h in zip(inputs, in_shardings)]
        stand_in = jax_export.export(jax.jit(
            lambda *_: tuple(jax.numpy.zeros(s, d) for s, d in results),
            in_shardings=in_shardings, out_shardings=tuple(out_shardings)))(*in_avals)
        exported = dataclasses.replace(stand_in, mlir_module_serialized=bytecode,
                                       module_kept_var_idx=tuple(range(len(inputs))))
        donated = sorted(self._io_map)
        order = [self._io_map[a] for a in donated]
        order += [r for r in range(len(results)) if r not in order]

        def call(*args: Any) -> tuple:
            values = exported.call(*args)
            return tuple(values[r] for r in order)

        lowered = jax.jit(call, donate_argnums=tuple(donated), keep_unused=True,
                          in_shardings=tuple(in_shardings),
                          out_shardings=tuple(out_shardings[r] for r in order)
                          ).lower(*in_avals)
        return self._compile(lowered), order

    def _compile(self, lowered: Any) -> Any:
        """The jax `Compiled` of `lowered`, safe from XLA's misfusion (xla/misfusion.py); or, when the
        compile cache holds it (compile_cache.py, keyed by jax's lowered module, the
        devices, the options, XLA_FLAGS and the CPU), the executable jax serialized
        then (`jax.experimental.serialize_executable`), loaded on the mesh's devices."""
        import os

        from jax.experimental import serialize_executable

        client = self._devices[0].client
        entry = compile_cache.key(
            "spmd", lowered.as_text(), repr(sorted(xla.COMPILE_OPTIONS.items())),
            repr([d.id for d in self._devices]), os.environ.get("XLA_FLAGS", ""),
            client.platform_version, compile_cache.cpu()
        ) if compile_cache.enabled(self._cache) else None
        found = compile_cache.read("spmd", entry) if entry is not None else None
        if found is not None:
            try:
                return serialize_executable.deserialize_and_load(
                    found[1], lowered.in_tree, lowered.out_tree, backend=client,
                    execution_devices=self._devices)
            except Exception as error:  # read back whole, yet not loadable: compile
                compile_cache.stats["spmd corrupt"] += 1
                compile_cache.logger.warning("outofplace compile cache: ignoring the "
                                             "entry %s (%s)", entry, error)
        with progress.stage("xla compile"):
            compiled = misfusion.without_misfusion(
                lambda o: lowered.compile(compiler_options=o), xla.COMPILE_OPTIONS)
        if entry is not None:
            compile_cache.write("spmd", entry, {},
                                serialize_executable.serialize(compiled)[0])
        return compiled

    def _placement(self, index: int) -> Placement:
        if index not in self._placements:
            spec = self._specs.get(index, ())
            self._placements[index] = Placement(self._jax.sharding.NamedSharding(
                self._mesh, self._jax.sharding.PartitionSpec(*(axes or None for axes in spec))),
                tuple(self._shapes[index]))
        return self._placements[index]

    def __call__(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Runs on the devices, the written arguments' shards donated; leaves each written
        argument's tensor with its new value and returns that tensor for every result
        that is its new value."""
        with self._lock:
            # the written arguments' resident arrays leave the table here: should the call
            # fail, the caller's tensors, not yet written, are the state again
            arrays = [self._on_devices(i, t) for i, t in enumerate(inputs)]
            returned = self._jax.block_until_ready(self._compiled(*arrays))
            results = [None] * len(returned)
            for position, r in enumerate(self._order):
                results[r] = returned[position]
            for arg in self._io_map:
                self._keep(arg, inputs, results)
            # a result that is state is the caller's tensor, as eager returns it; the
            # others are replicated: any device holds all of it
            return [inputs[self._state[i]] if i in self._state
                    else self._viewer(i, results[i], dtype)(
                        results[i]._fully_replicated_shard())
                    for i, dtype in enumerate(self._result_dtypes)]

    def _viewer(self, index: int, result: Any, dtype: torch.dtype) -> xla.buffers.Viewer:
        """What makes a result a tensor over its first device's buffer, made once."""
        if index not in self._viewers:
            self._viewers[index] = xla.buffers.Viewer(tuple(result.shape), dtype)
        return self._viewers[index]

    def _on_devices(self, index: int, tensor: torch.Tensor) -> Any:
        """An argument as a jax Array on the mesh: a written one the state left on the
        devices by the last call, while the caller's tensor is as that call left it."""
        if index not in self._io_map:
            stage = self._stages.get(index)
            if stage is None and 0 < tensor.nbytes <= xla.STAGED_BYTES:
                stage = self._stages[index] = Stage(self._placement(index), tensor.dtype)
            if stage is not None:  # copied into the devices' kept buffers
                return stage(tensor)
            # lent: XLA reads the tensor's memory
            return self._placement(index).put(xla.buffers.host(tensor.contiguous()), owned=False)
        resident = self._resident.pop((index, id(tensor)), None)
        if resident is not None and resident.holds(tensor):
            return resident.array
        # XLA updates a donated buffer in place only when it owns it (host memory it was
        # lent is copied whole by each call that donates it): one copy of each shard
        return self._placement(index).put(xla.buffers.host(tensor.contiguous()), owned=True)

    def _keep(self, index: int, inputs: list[torch.Tensor], results: list[Any]) -> None:
        """Makes the caller's tensor the argument's new value, and keeps that value on the
        devices for the next call."""
        tensor = inputs[index]
        array = results[self._io_map[index]]
        writes = self._writes.get(index)
        regions = None if writes is None else written(tensor, writes, results, inputs)
        if regions is None:  # all of it
            regions = [(tensor, tuple(slice(0, n) for n in tensor.shape), None)]
        self._placement(index).copy_in(tensor, array._arrays, regions)
        if tracked(tensor):
            key = (index, id(tensor))
            self._resident[key] = Resident(tensor, array, self._resident, key)

    def planned_call(self, layouts: list[tuple], written: list[int], results: int
                     ) -> Callable[[Any], list[torch.Tensor] | None] | None:
        """After a call: a call of this program in C++ (sharded_call.cpp) for arguments in
        `layouts` ((dtype, shape, strides, storage offset) each), the `written` ones not
        requiring grad, each the tensor whose state the last call left on the devices:
        it returns the program's `results` as a call does, or None, having changed
        nothing, for any other call. None when the extension is not built: every call is
        then Python's."""
        built = xla.extension()
        if built is None:
            return None
        return built.ShardedCall(ShardedPlan(
            layouts=tuple(layouts), written=tuple(written), results=results,
            regions={index: self._regions(index) for index in self._io_map},
            compiled=self._compiled, order=tuple(self._order), io_map=dict(self._io_map),
            state=dict(self._state), viewers=dict(self._viewers), stages=dict(self._stages),
            placements={index: self._placement(index) for index in self._io_map},
            resident=self._resident, on_devices=self._on_devices, keep=self._keep,
            lock=self._lock))

    def _regions(self, index: int) -> list[list[tuple]] | None:
        """Where a call writes a state, for the planned call: per write, (start: an int or
        a host_scalars.Scalar, update size, dimension size, whether the start is clamped
        (else out of bounds the write is skipped, and all of it copied)) per dimension;
        all of it for a state copied back; None when its writes are not such regions (a
        scatter at indices the program returns, a reshape): `_keep` then takes it."""
        shape = self._shapes[index]
        writes = self._writes.get(index)
        if writes is None:
            return [[(0, n, n, True) for n in shape]]
        if any(not w.starts or w.with_update or None in w.starts for w in writes):
            return None
        return [[(s, u, n, w.op == "dynamic_update_slice")
                 for s, u, n in zip(w.starts, w.update, shape)] for w in writes]

    @property
    def host_sync(self) -> dict[str, str]:
        """How each written argument's tensor gets its new value after a call."""
        return {self._names[a]: "copied back" if self._writes.get(a) is None
                else "its writes repeated" for a in sorted(self._io_map)}

    @property
    def report(self) -> ShardingReport:
        if self._report is None:
            self._report = report_of(self)
        return self._report



def _aval(type: Any) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and NumPy dtype of a ranked tensor type."""
    element = str(type.element_type)
    if element == "bf16":
        import ml_dtypes  # a dependency of jax

        dtype = np.dtype(ml_dtypes.bfloat16)
    elif element == "i1":
        dtype = np.dtype(bool)
    elif element.startswith("complex<"):
        dtype = np.dtype(f"complex{2 * int(element[len('complex<f'):-1])}")
    else:  # f16, f32, f64, iN, uiN
        kind = {"f": "float", "i": "int", "ui": "uint"}[element.rstrip("0123456789")]
        dtype = np.dtype(f"{kind}{element.lstrip('fiu')}")
    return tuple(type.shape), dtype

