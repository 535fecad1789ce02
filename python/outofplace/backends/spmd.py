"""Sharded programs on XLA's SPMD partitioner: one program, N devices, state in shards.

The StableHLO carries `mhlo.sharding` on every argument and result and
`mhlo.num_partitions` (transforms/sharding.py). XLA partitions it with Shardy (jaxlib
0.10.2's partitioner; it imports the HloShardings) into the program each device runs on
its shard.

State stays on the devices between calls. A written argument's shards are copied to the
devices on its first call (or after torch has written the tensor since), and donated to
every call after: each device updates its shard in place. The caller's tensor is kept
equal to the state by copying in only what the call wrote: the engine's module also
returns where each `dynamic_update_slice` or `scatter` of the state wrote, and the host
copies those regions from the devices' new shards into the caller's tensor; a state
whose new value is not such a chain of writes is copied back whole, a shard per device
(docs/sharding.md, "Running"). Small read-only arguments are copied into buffers the
devices keep (`_Stage`): a call makes no device arrays for them.

The report reads the partitioned module (converted back to MLIR by jaxlib): each device's
buffer of sharded state, whether the alias survived, and which collective or copy reads
an aliased buffer. `docs/sharding.md` shows one.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from . import host_scalars, xla
from .. import compile_cache, progress

# Ops that move or duplicate a whole buffer, as jaxlib's HLO -> MLIR translation names them.
MOVES = {"stablehlo.all_gather", "stablehlo.all_to_all", "stablehlo.collective_permute",
         "stablehlo.all_reduce", "stablehlo.reduce_scatter", "mhlo.copy",
         "mhlo.all_gather", "mhlo.all_to_all", "mhlo.collective_permute", "mhlo.all_reduce",
         "mhlo.copy_start", "mhlo.async_start"}
# Ops that pass a buffer on unchanged.
PASS_THROUGH = {"mhlo.bitcast", "stablehlo.get_tuple_element", "stablehlo.bitcast_convert"}


@dataclass
class StateReport:
    """One aliased argument after partitioning."""

    name: str
    spec: tuple  # per dimension, the mesh axes it is split over
    shards: int  # how many parts the spec splits it into
    shape: list[int]  # the whole tensor
    device_shape: list[int]  # what each device holds
    aliased: bool  # the device program updates its shard in place (input_output_alias)
    moved_by: list[str] = field(default_factory=list)  # collectives/copies reading it
    written_by: str = ""  # the op that makes its new value on each device
    host: str = ""  # how the caller's tensor gets it: "its writes repeated" or "copied back"

    @property
    def fraction(self) -> float:
        """The share of the tensor each device holds."""
        return math.prod(self.device_shape) / max(1, math.prod(self.shape))

    @property
    def ok(self) -> bool:
        """1/shards of it per device, updated in place, read by no collective or copy,
        and its new value not made by one (a copy into the aliased buffer)."""
        return (self.aliased and not self.moved_by and self.written_by not in MOVES
                and math.prod(self.device_shape) * self.shards == math.prod(self.shape))


@dataclass
class ShardingReport:
    """What XLA's SPMD partitioner made of a program's aliased state."""

    devices: int
    state: list[StateReport]
    alias_bytes_per_device: int  # XLA's compiled memory stats

    @property
    def ok(self) -> bool:
        """Every piece of state is split as its spec says, aliased, and not moved."""
        return all(s.ok for s in self.state)

    def __str__(self) -> str:
        lines = [f"{self.devices} devices, {self.alias_bytes_per_device} aliased bytes "
                 "per device"]
        for s in self.state:
            lines.append(
                f"  {s.name}: {s.shape} -> {s.device_shape} per device "
                f"({s.fraction:.3g}), {'aliased' if s.aliased else 'NOT aliased'}, "
                f"written by {s.written_by or '?'}, "
                f"{s.host + ' on the host, ' if s.host else ''}"
                f"{'moved by ' + ', '.join(s.moved_by) if s.moved_by else 'not moved'}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ShardedPlan:
    """Everything a sharded planned call reads of a ShardedExecutable, built once by
    Python (`ShardedExecutable.planned_call`): sharded_call.cpp reads these fields by
    name and nothing else of outofplace's (test_sharding.py checks each name it reads
    is a field here)."""

    layouts: tuple  # per argument, (dtype, shape, strides, storage offset) of the plan
    written: tuple[int, ...]  # the caller's written arguments: none may require grad
    results: int  # how many results the program has (the engine's module may return more)
    regions: dict  # per written argument, its writes' regions (`_regions`), or None
    compiled: Any  # the jax executable
    order: tuple[int, ...]  # the arguments in the order the executable takes them
    io_map: dict[int, int]  # written argument -> result
    state: dict[int, int]  # result -> the written argument whose state it returns
    viewers: dict  # result -> its xla._Viewer (`shape`, `dtype`), for those a call made
    stages: dict  # small read-only argument -> its _Stage (kept buffers on the devices)
    placements: dict  # written argument -> its _Placement (`distinct`, `boxes`)
    resident: dict  # (argument, id(tensor)) -> _Resident: the state a call left
    on_devices: Callable[..., Any]  # a large read-only argument, put on the devices
    keep: Callable[..., None]  # after a call: the written arguments' new state kept
    lock: Any  # held for a call


class ShardedExecutable:
    """A StableHLO module with shardings, compiled once for the mesh's devices; written
    arguments stay on the devices between calls (the module docstring)."""

    def __init__(self, stablehlo: str, mesh: dict[str, int], specs: dict[int, tuple],
                 io_map: dict[int, int], state: dict[int, int], input_names: list[str],
                 shapes: list[list[int]], cache: bool | None = None) -> None:
        jax = xla._jax()
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
        self._state = state
        self._shapes, self._axes = shapes, mesh
        self._cache = cache  # the compile cache (compile_cache.py); None: the environment
        text, self._writes = shardy_module(stablehlo, mesh, specs, state, io_map)
        self._placements: dict[int, _Placement] = {}
        self._compiled, self._order = self._jit(text)
        self._executable = xla._executable_of(self._compiled)
        self._report: ShardingReport | None = None
        # (argument, id of the caller's tensor) -> its state on the devices
        self._resident: dict[tuple[int, int], _Resident] = {}
        self._lock = threading.Lock()
        # small read-only arguments: kept buffers on the devices each call copies into
        self._stages: dict[int, _Stage] = {}
        self._viewers: dict[int, xla._Viewer] = {}  # result -> its viewer

    def _jit(self, text: str) -> tuple[Any, list[int]]:
        """The module as a jax `Compiled` for the mesh, whose call is jax's C++ dispatch:
        wrapped in a `jax.export.Exported` (one exported from a stand-in of the same
        signature and shardings, holding our module instead; the devices are jax's, so
        the mesh runs on jax's client, not backends/xla.py's), called under `jax.jit` with the written arguments donated. jax pairs
        each donated argument with the first result of its shape, dtype and sharding:
        the aliased results come first, in their arguments' order (the returned order)."""
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
        """The jax `Compiled` of `lowered`, safe from xla.py's misfusion; or, when the
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
            compiled = xla._without_misfusion(
                lambda o: lowered.compile(compiler_options=o), xla.COMPILE_OPTIONS)
        if entry is not None:
            compile_cache.write("spmd", entry, {},
                                serialize_executable.serialize(compiled)[0])
        return compiled

    def _placement(self, index: int) -> _Placement:
        if index not in self._placements:
            spec = self._specs.get(index, ())
            self._placements[index] = _Placement(self._jax.sharding.NamedSharding(
                self._mesh, self._jax.sharding.PartitionSpec(*(axes or None for axes in spec))),
                tuple(self._shapes[index]))
        return self._placements[index]

    def __call__(self, inputs: list[torch.Tensor], result_dtypes: list[torch.dtype]
                 ) -> list[torch.Tensor]:
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
                    for i, dtype in enumerate(result_dtypes)]

    def _viewer(self, index: int, result: Any, dtype: torch.dtype) -> xla._Viewer:
        """What makes a result a tensor over its first device's buffer, made once."""
        if index not in self._viewers:
            self._viewers[index] = xla._Viewer(tuple(result.shape), dtype)
        return self._viewers[index]

    def _on_devices(self, index: int, tensor: torch.Tensor) -> Any:
        """An argument as a jax Array on the mesh: a written one the state left on the
        devices by the last call, while the caller's tensor is as that call left it."""
        if index not in self._io_map:
            stage = self._stages.get(index)
            if stage is None and 0 < tensor.nbytes <= xla.STAGED_BYTES:
                stage = self._stages[index] = _Stage(self._placement(index), tensor.dtype)
            if stage is not None:  # copied into the devices' kept buffers
                return stage(tensor)
            # lent: XLA reads the tensor's memory
            return self._placement(index).put(xla._host(tensor.contiguous()), owned=False)
        resident = self._resident.pop((index, id(tensor)), None)
        if resident is not None and resident.holds(tensor):
            return resident.array
        # XLA updates a donated buffer in place only when it owns it (host memory it was
        # lent is copied whole by each call that donates it): one copy of each shard
        return self._placement(index).put(xla._host(tensor.contiguous()), owned=True)

    def _keep(self, index: int, inputs: list[torch.Tensor], results: list[Any]) -> None:
        """Makes the caller's tensor the argument's new value, and keeps that value on the
        devices for the next call."""
        tensor = inputs[index]
        array = results[self._io_map[index]]
        writes = self._writes.get(index)
        regions = None if writes is None else _written(tensor, writes, results, inputs)
        if regions is None:  # all of it
            regions = [(tensor, tuple(slice(0, n) for n in tensor.shape), None)]
        self._placement(index).copy_in(tensor, array._arrays, regions)
        if _tracked(tensor):
            key = (index, id(tensor))
            self._resident[key] = _Resident(tensor, array, self._resident, key)

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
            self._report = _report(self)
        return self._report


class _Resident:
    """A written argument's value on the devices, for the caller's tensor as the call
    that made it left the tensor: the same tensor, memory and version counter (torch
    counts every in-place write to a tensor and its views there)."""

    __slots__ = ("tensor", "array", "version", "pointer")

    def __init__(self, tensor: torch.Tensor, array: Any, table: dict, key: tuple) -> None:
        self.tensor = weakref.ref(tensor, lambda _: table.pop(key, None))
        self.array, self.version, self.pointer = array, _version(tensor), tensor.data_ptr()

    def holds(self, tensor: torch.Tensor) -> bool:
        return (self.tensor() is tensor and not self.array.is_deleted()
                and self.version == _version(tensor) and self.pointer == tensor.data_ptr())


def _tracked(tensor: torch.Tensor) -> bool:
    """Whether every write to the tensor's memory counts in its version: not when NumPy,
    DLPack or a memory map shares the memory (its storage is then not resizable), another
    process (shared memory), or when it is an inference tensor (no version counter). Such
    a tensor is copied to the devices on every call."""
    storage = tensor.untyped_storage()
    return _version(tensor) is not None and storage.resizable() and not storage.is_shared()


def _version(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # an inference tensor counts no versions
        return None


class _Placement:
    """How an argument lies on the mesh: its sharding, and each device's slice."""

    def __init__(self, sharding: Any, shape: tuple[int, ...]) -> None:
        self.sharding, self.shape = sharding, shape
        indices = sharding.devices_indices_map(shape)
        self.devices = list(indices)
        self.slices = [tuple(slice(*s.indices(n)[:2]) for s, n in zip(indices[d], shape))
                       for d in self.devices]
        # A jax Array's per-device arrays (`_arrays`) are in the sharding's device order:
        # each one's slice, and the positions of the distinct ones (a replicated axis
        # holds the same shard twice)
        held = dict(zip(self.devices, self.slices))
        self.held = [held[d] for d in sharding._addressable_device_assignment]
        first: dict[tuple, int] = {}
        for position, slices in enumerate(self.held):
            first.setdefault(tuple((s.start, s.stop) for s in slices), position)
        self.distinct = sorted(first.values())
        self.boxes = [[(s.start, s.stop) for s in slices] for slices in self.held]
        self._views: dict[int, tuple[int, np.ndarray]] = {}  # position -> (address, view)

    def put(self, host: np.ndarray, owned: bool) -> Any:
        """The array on the devices, a shard each: in buffers XLA owns (copies), or over
        `host` where XLA can read it in place (aligned, contiguous pieces)."""
        jax = xla._jax()
        from jax._src.lib import xla_client

        semantics = xla_client.HostBufferSemantics
        pieces, seen = [], set()
        for where in self.slices:
            piece = _contiguous(host[where + (...,)])
            key = tuple((s.start, s.stop) for s in where)
            if owned and key in seen and piece.size != host.size:
                # jaxlib 0.10.2 copying one piece of host memory that is not a whole
                # array to two devices fails with "bad_function_call" (a state
                # replicated over a mesh axis, split on its first dimension over
                # another): each device after the first gets a copy of its own
                piece = piece.copy()
            seen.add(key)
            pieces.append(piece)
        array = xla_client.batched_device_put(
            jax.core.ShapedArray(self.shape, host.dtype), self.sharding, pieces,
            self.devices, True, owned, semantics.IMMUTABLE_ONLY_DURING_CALL if owned
            else semantics.ZERO_COPY)
        if owned:
            array.block_until_ready()
        return array

    def copy_in(self, tensor: torch.Tensor, shards: list[Any], regions: list[Region]
                ) -> None:
        """Writes each region into the caller's tensor, in order: its value, or (a region
        of the tensor itself) the part of each device's new shard (`shards`: an array's
        `_arrays`) that holds it, copied by NumPy (a few µs a piece, a third of torch's
        indexing and copy); torch counts the write in the tensor's version."""
        host = None  # the caller's tensor as NumPy sees it, made when first needed
        for target, where, value in regions:
            if value is not None:
                with torch.no_grad():
                    target[where].copy_(value)
                continue
            if host is None:
                if tensor.numel() == 0:
                    continue
                host = _array(tensor.data_ptr(), tuple(tensor.shape), tensor.dtype,
                              tuple(s * tensor.element_size() for s in tensor.stride()))
            for position in self.distinct:
                box = self.boxes[position]
                common = [(max(w.start, a), min(w.stop, b)) for w, (a, b) in zip(where, box)]
                if all(lo < hi for lo, hi in common):
                    values = self._view(position, shards[position], tensor.dtype)[tuple(
                        slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(common, box))]
                    # a lazily negated tensor's bytes are its values negated
                    host[tuple(slice(lo, hi) for lo, hi in common)] = \
                        -values if tensor.is_neg() else values
        torch.autograd.graph.increment_version(tensor)

    def _view(self, position: int, shard: Any, dtype: torch.dtype) -> np.ndarray:
        """A NumPy view of a device's shard, made once per address: a donated state's new
        shard is the old one's buffer. The view owns nothing: it is read only while the
        shard at its address is alive (during the call that returned it)."""
        address = shard.unsafe_buffer_pointer()
        kept = self._views.get(position)
        if kept is None or kept[0] != address:
            shape = tuple(b - a for a, b in self.boxes[position])
            kept = self._views[position] = (address, _array(address, shape, dtype))
        return kept[1]


class _Stage:
    """A small read-only argument's kept buffers on the devices, XLA's own (a shard
    each), which each call copies the caller's tensor into: no new device arrays per
    call (as xla._Stage on one device). Calls hold the engine's lock and wait for the
    program, so no call reads them while the next one writes."""

    def __init__(self, placement: _Placement, dtype: torch.dtype) -> None:
        self.array = placement.put(np.zeros(placement.shape, xla._numpy_dtype(dtype)),
                                   owned=True)
        shards = self.array._arrays
        self.whole = all(tuple(s.stop - s.start for s in slices) == placement.shape
                         for slices in placement.held)  # replicated: every device all
        self.addresses = [a.unsafe_buffer_pointer() for a in shards]
        self.nbytes = math.prod(placement.shape) * dtype.itemsize
        # tensors over each device's buffer (they keep the array), and its slice
        self.views = [(xla._tensor_over(a, dtype), slices)
                      for a, slices in zip(shards, placement.held)]

    def __call__(self, tensor: torch.Tensor) -> Any:
        if self.whole and tensor.is_contiguous() and not tensor.is_neg() \
                and not tensor.is_conj():  # its bytes are its values
            source = tensor.data_ptr()
            for address in self.addresses:
                ctypes.memmove(address, source, self.nbytes)
        else:
            with torch.no_grad():
                for view, slices in self.views:
                    view.copy_(tensor[slices])
        return self.array


def _array(address: int, shape: tuple[int, ...], dtype: torch.dtype,
           strides: tuple[int, ...] | None = None) -> np.ndarray:
    """A NumPy view of memory at an address, which it does not own (bfloat16 as its
    bits)."""
    return np.asarray(_Address(address, shape, _typestr(dtype), strides))


@functools.cache
def _typestr(dtype: torch.dtype) -> str:
    return "<u2" if dtype == torch.bfloat16 else xla._numpy_dtype(dtype).str


class _Address:
    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, shape: tuple[int, ...], typestr: str,
                 strides: tuple[int, ...] | None = None) -> None:
        self.__array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                    "data": (address, False), "version": 3}


def _contiguous(array: np.ndarray) -> np.ndarray:
    return array if array.flags.c_contiguous else array.copy(order="C")


@dataclass(frozen=True)
class _Write:
    """A write of an aliased argument in the program, which tells the host where the
    caller's tensor changes: a `dynamic_update_slice` (results: a start per dimension),
    a `scatter` that replaces elements (results: the indices), or a `reshape` of the state
    between them (`dimensions`: the new shape). After a reshape the host cannot read the
    region from the devices' shards (they are in the state's own shape): the results
    then also hold the update, and the host writes it through a view of that shape.

    A scatter at one index the host computes (`c.index_copy_(2, pos, k)` with one
    position) is one window, given as a dynamic_update_slice is: `starts` and its shape
    (`update`); it is not clamped (out of bounds XLA skips it: the host then copies the
    state whole)."""

    op: str
    results: tuple[int, ...]  # the engine module's results that say what it wrote
    # scatter: update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims,
    # index_vector_dim; reshape: the shape
    dimensions: tuple = ()
    # the update's shape (scatter: the updates'; at one host-computed index, its window's)
    update: tuple[int, ...] = ()
    with_update: bool = False  # the last result is the update (after a reshape)
    # per dimension, a constant start, a function of the call's arguments
    # (host_scalars.py), or None: one of `results`; a scatter's only at one host index
    starts: tuple[int | host_scalars.Scalar | None, ...] = ()


Region = tuple[torch.Tensor, tuple[slice, ...], "torch.Tensor | None"]


def _written(tensor: torch.Tensor, writes: list[_Write], results: list[Any],
             inputs: list[torch.Tensor]) -> list[Region] | None:
    """Where the call wrote the state, in order: (the caller's tensor or a view of it,
    the region, its new value, or None to read it from the devices' shards). None when a
    scatter's writes are not plain (`_scatter_windows`) or the tensor's layout does not
    view as a shape the program reshapes the state to: the host then copies it all."""
    regions: list[Region] = []
    current = tensor
    for write in writes:
        if write.op == "reshape":  # a paged cache's pages and slots merged, or split
            try:
                current = current.view(write.dimensions)
            except RuntimeError:
                return None
            continue
        # replicated: one device's (`_fully_replicated_shard`: one array, not one a device)
        values = [results[r]._fully_replicated_shard() for r in write.results]
        update = xla._tensor_over(values.pop(), tensor.dtype) if write.with_update else None
        if write.starts:  # a dynamic_update_slice, or a scatter's one window
            given = iter(values)
            starts = [int(_read(next(given))) if s is None else
                      s if isinstance(s, int) else s(inputs) for s in write.starts]
            bounds = list(zip(starts, write.update, current.shape))
            if write.op == "scatter":  # out of bounds, skipped: all of it
                if any(s < 0 or s + u > n for s, u, n in bounds):
                    return None
            else:  # the op clamps its starts
                starts = [min(max(s, 0), n - u) for s, u, n in bounds]
            regions.append((current, tuple(slice(s, s + u)
                                           for s, u in zip(starts, write.update)), update))
            continue
        windows = _scatter_windows(tuple(current.shape), _read(values[0]),
                                   write.update, write.dimensions)
        if windows is None:
            return None
        rows: list[Any] = [None] * len(windows)
        if update is not None and windows:
            window_dims = write.dimensions[0]
            scattered = [d for d in range(update.dim()) if d not in window_dims]
            rows = list(update.permute(*scattered, *window_dims).reshape(
                len(windows), *[w.stop - w.start for w in windows[0]]))
        regions += [(current, where, row) for where, row in zip(windows, rows)]
    return regions


def _read(array: Any) -> np.ndarray:
    """A copy of a one-device array's values, read at its address (the call is over)."""
    if array.size == 0:
        return np.empty(array.shape, array.dtype)
    return np.array(_Address(array.unsafe_buffer_pointer(), array.shape, array.dtype.str))


def _scatter_windows(shape: tuple[int, ...], indices: np.ndarray, updates: tuple[int, ...],
                     dimensions: tuple) -> list[tuple[slice, ...]] | None:
    """The windows a replacing scatter writes, in the order of its updates, or None when
    one is out of bounds (XLA skips it) or two are at one place (which XLA writes last is
    its choice). The scattered dimensions are inserted ones (`_replaces`): one start,
    one window."""
    window_dims, inserted, to_operand, vector_dim = dimensions
    if vector_dim == indices.ndim:
        indices = indices[..., None]
    indices = np.moveaxis(indices, vector_dim, -1)
    starts = indices.reshape(-1, indices.shape[-1]).tolist()
    sizes = iter(updates[d] for d in window_dims)
    window = [1 if d in inserted else next(sizes) for d in range(len(shape))]
    if len({tuple(s) for s in starts}) != len(starts):
        return None
    windows = []
    for start in starts:
        corner = [0] * len(shape)
        for k, d in enumerate(to_operand):
            corner[d] = start[k]
        if any(c < 0 or c + w > n for c, w, n in zip(corner, window, shape)):
            return None
        windows.append(tuple(slice(c, c + w) for c, w in zip(corner, window)))
    return windows


def shardy_module(stablehlo: str, mesh: dict[str, int], specs: dict[int, tuple],
                  state: dict[int, int], io_map: dict[int, int]
                  ) -> tuple[str, dict[int, list[_Write] | None]]:
    """The module the engine compiles: Shardy's `sdy.sharding` in place of every
    `mhlo.sharding`, and what the program writes into its state as results after its own
    (`_expose_writes`); with, per written argument, those writes (None: not a chain of
    writes the host can repeat).

    jaxlib 0.10.2 partitions a module with `mhlo.sharding` attributes with GSPMD (it
    warns that GSPMD propagation is deprecated and falls back from Shardy); with
    `sdy.sharding` it uses Shardy, as `jax.jit` does. A result in `state` (result ->
    argument: aliased, or the same value) has its argument's spec, other results are
    replicated, as in transforms/sharding.py.
    """
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import sdy

    with jax_mlir.make_ir_context():
        module = ir.Module.parse(stablehlo)
        main = next(op for op in module.body.operations
                    if ir.StringAttr(op.attributes["sym_name"]).value == "main")
        writes = _expose_writes(main, io_map)
        axes = sdy.MeshAttr.get([sdy.MeshAxisAttr.get(n, s) for n, s in mesh.items()])

        def sharding(spec: tuple, rank: int) -> ir.Attribute:
            return sdy.TensorShardingAttr.get(axes, [
                sdy.DimensionShardingAttr.get([sdy.AxisRefAttr.get(a) for a in dim],
                                              is_closed=True)
                for dim in spec or [()] * rank])

        _barrier_scatter_operands(main)
        function = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        for kind, types in (("arg_attrs", function.inputs), ("res_attrs", function.results)):
            entries = []
            # (a main without results, or arguments, has no attributes for them)
            given = list(ir.ArrayAttr(main.attributes[kind])) if kind in main.attributes \
                else [ir.DictAttr.get({})] * len(types)
            for index, (entry, type) in enumerate(zip(given, types)):
                entry = ir.DictAttr(entry)
                fields = {entry[i].name: entry[i].attr for i in range(len(entry))
                          if entry[i].name != "mhlo.sharding"}
                spec = specs.get(index if kind == "arg_attrs" else state.get(index, -1))
                fields["sdy.sharding"] = sharding(spec, len(ir.RankedTensorType(type).shape))
                entries.append(ir.DictAttr.get(fields))
            main.attributes[kind] = ir.ArrayAttr.get(entries)
        return module.operation.get_asm(), writes


def _barrier_scatter_operands(main: Any) -> None:
    """Puts the operand of each scatter in main behind an `optimization_barrier`, unless
    it is an argument.

    Without it, XLA:CPU computed wrong elements of a sharded state on some devices:
    `s[:] = v; s.scatter_(0, i, w); s.index_fill_(0, j, -5)` on s split over 2 devices
    (probe fuzzer seed 2,812): the SPMD partitioner makes the last scatter a
    dynamic_update_slice of each device's shard at the local index (clamped into the
    shard) of select(owned, -5, dynamic_slice(shard, local index)), the shard a
    dynamic_slice of the replicated operand at the device's offset, and the two
    dynamic_slices were folded into one of the whole operand at offset + local index,
    clamped into the whole operand, not the shard: where j is on another device, the
    element at j was written at the shard's edge. Likewise a scatter after a
    dynamic_update_slice, then writes through a reshape, on 8 devices (seed 2,322), and
    a scatter between a slice write and a masked_fill_ on 2 (seed 3,274). A barrier on
    the scatter's operand made each right (one on a dynamic_update_slice's did not
    matter); on the test's four-write cache step it costs nothing measurable."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    block = main.regions[0].blocks[0]
    for update in list(block.operations):
        if update.name != "stablehlo.scatter" or len(update.results) != 1:
            continue
        operand = update.operands[0]
        if isinstance(operand.owner, ir.Block):
            continue
        with ir.InsertionPoint(update), update.location:
            barrier = hlo.OptimizationBarrierOp([operand])
        update.operands[0] = barrier.results[0]


def _expose_writes(main: Any, io_map: dict[int, int]) -> dict[int, list[_Write] | None]:
    """For each written argument whose new value is a chain of `dynamic_update_slice`s,
    replacing `scatter`s and `reshape`s of it, returns where each write is (its starts or
    indices, and after a reshape its update) as replicated results after main's own; the
    chains by argument, None for the others."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import func, hlo

    block = main.regions[0].blocks[0]
    read_only = set(range(len(block.arguments))) - set(io_map)
    ret = block.operations[len(block.operations) - 1]
    returned = list(ret.operands)
    exposed: list[Any] = []
    chains: dict[int, list[_Write] | None] = {}
    for arg, result in sorted(io_map.items()):
        ops, value = [], returned[result]
        while value != block.arguments[arg]:
            owner = value.owner
            if isinstance(owner, ir.Block):  # another argument
                break
            if owner.name in ("stablehlo.dynamic_update_slice", "stablehlo.reshape") or (
                    owner.name == "stablehlo.scatter" and _replaces(owner)):
                ops.append(owner)
                value = owner.operands[0]
            else:
                break
        if value != block.arguments[arg]:
            chains[arg] = None
            continue
        chains[arg], reshaped = [], False
        for op in reversed(ops):
            first = len(returned) + len(exposed)
            if op.name == "stablehlo.reshape":
                shape = tuple(ir.RankedTensorType(op.results[0].type).shape)
                chains[arg].append(_Write("reshape", (), shape))
                reshaped = True
                continue
            starts: tuple[int | host_scalars.Scalar | None, ...] = ()
            if op.name == "stablehlo.dynamic_update_slice":
                update, dimensions = op.operands[1], ()
                # each start a constant, else computed on the host when it can be
                # (host_scalars.py), else returned
                given = list(op.operands)[2:]
                starts = tuple(host_scalars.host_scalar(v, read_only) if c is None else c
                               for v, c in zip(given, map(_constant, given)))
                values = [v for v, c in zip(given, starts) if c is None]
            else:
                numbers = hlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
                update, values = op.operands[2], [op.operands[1]]
                dimensions = (tuple(numbers.update_window_dims),
                              tuple(numbers.inserted_window_dims),
                              tuple(numbers.scattered_dims_to_operand_dims),
                              numbers.index_vector_dim)
                window = _one_window(op, dimensions, read_only) if not reshaped else None
                if window is not None:  # its index computed on the host
                    starts, window_shape = window
                    values = []
            shape = tuple(ir.RankedTensorType(update.type).shape)
            if starts and op.name == "stablehlo.scatter":
                shape = window_shape
            values += [update] if reshaped else []
            chains[arg].append(_Write(
                op.name[len("stablehlo."):], tuple(range(first, first + len(values))),
                dimensions, shape, reshaped, starts))
            exposed += values
    if exposed:
        with ir.InsertionPoint(ret):
            func.ReturnOp(returned + exposed, loc=ret.location)
        ret.erase()
        function = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            function.inputs, list(function.results) + [v.type for v in exposed]))
        main.attributes["res_attrs"] = ir.ArrayAttr.get(
            list(ir.ArrayAttr(main.attributes["res_attrs"]))
            + [ir.DictAttr.get({})] * len(exposed))
    return chains


def _one_window(scatter: Any, dimensions: tuple, read_only: set[int]
                ) -> tuple[tuple, tuple[int, ...]] | None:
    """A replacing scatter at one index of one dimension that the host can compute from
    the call's arguments (host_scalars.py): the window's starts and shape, else None."""
    from jax._src.lib.mlir import ir

    window_dims, inserted, to_operand, _ = dimensions
    indices = ir.RankedTensorType(scatter.operands[1].type)
    if math.prod(indices.shape) != 1 or len(to_operand) != 1:
        return None
    index = host_scalars.host_scalar(scatter.operands[1], read_only)
    if index is None:
        return None
    operand = ir.RankedTensorType(scatter.operands[0].type).shape
    updates = ir.RankedTensorType(scatter.operands[2].type).shape
    sizes = iter(updates[d] for d in window_dims)
    shape = tuple(1 if d in inserted else next(sizes) for d in range(len(operand)))
    return tuple(index if d == to_operand[0] else 0 for d in range(len(operand))), shape


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


def _constant(value: Any) -> int | None:
    """A start index's value when it is a constant."""
    from jax._src.lib.mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "stablehlo.constant":
        return None
    return int(ir.DenseIntElementsAttr(owner.attributes["value"])[0])


def _replaces(scatter: Any) -> bool:
    """A scatter of one operand that writes its updates (no combining) with no batching
    dimensions, each scattered dimension an inserted one: one window per index."""
    from jax._src.lib.mlir.dialects import hlo

    if len(scatter.operands) != 3:
        return False
    numbers = hlo.ScatterDimensionNumbers(scatter.attributes["scatter_dimension_numbers"])
    if list(numbers.input_batching_dims) or \
            not set(numbers.scattered_dims_to_operand_dims) <= set(numbers.inserted_window_dims):
        return False
    body = scatter.regions[0].blocks[0]
    (ret, *rest) = list(body.operations)
    return not rest and len(ret.operands) == 1 and ret.operands[0] == body.arguments[1]



def _report(sharded: ShardedExecutable) -> ShardingReport:
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir

    executable, specs = sharded._executable, sharded._specs
    (partitioned,) = executable.hlo_modules()
    stats = executable.get_compiled_memory_stats()
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(_jax.mlir.hlo_to_stablehlo(
            partitioned.as_serialized_hlo_module_proto()))
        attributes = module.operation.attributes
        aliases = {}
        if "mhlo.input_output_alias" in attributes:
            for entry in ir.ArrayAttr(attributes["mhlo.input_output_alias"]):
                entry = ir.DictAttr(entry)
                alias = ir.DictAttr(entry["alias"])
                output = list(ir.DenseI64ArrayAttr(entry["output_index"]))
                aliases[ir.IntegerAttr(alias["parameter_number"]).value] = \
                    output[0] if output else 0
        main = next(op for op in module.body.operations
                    if ir.StringAttr(op.attributes["sym_name"]).value == "main")
        block = main.regions[0].blocks[0]
        returned = list(block.operations[len(block.operations) - 1].operands)
        state = []
        for arg, result in sorted(sharded._io_map.items()):
            result = sharded._order.index(result)  # the compiled program's result
            value = block.arguments[arg]
            spec = specs.get(arg, ())
            state.append(StateReport(
                sharded._names[arg], spec,
                math.prod(sharded._axes[a] for axes in spec for a in axes),
                list(sharded._shapes[arg]), list(ir.RankedTensorType(value.type).shape),
                aliases.get(arg) == result, sorted(_moves(value)),
                _writer(returned[result], ir), sharded.host_sync[sharded._names[arg]]))
    return ShardingReport(len(sharded._devices), state, stats.alias_size_in_bytes)


def _moves(value: Any) -> set[str]:
    """The collectives and copies that read `value`, through bitcasts and into fusions."""
    found, pending = set(), [value]
    while pending:
        current = pending.pop()
        for use in current.uses:
            owner = use.owner
            name = owner.name
            if name in MOVES:
                found.add(name)
            elif name in PASS_THROUGH:
                pending.extend(owner.results)
            elif name == "mhlo.fusion":
                pending.append(owner.regions[0].blocks[0].arguments[use.operand_number])
    return found


def _writer(value: Any, ir: Any) -> str:
    """The op that computes a returned value, looking through bitcasts and fusions."""
    while isinstance(value, ir.OpResult):
        owner = value.owner
        if owner.name in PASS_THROUGH:
            value = owner.operands[0]
        elif owner.name == "mhlo.fusion":
            body = owner.regions[0].blocks[0]
            value = body.operations[len(body.operations) - 1].operands[value.result_number]
        else:
            return owner.name
    return "parameter"
