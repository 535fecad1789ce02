"""Sharded programs on XLA's SPMD partitioner: one program, N devices, state in shards.

The StableHLO carries `mhlo.sharding` on every argument and result and
`mhlo.num_partitions` (transforms/sharding.py). XLA partitions it with Shardy (jaxlib
0.10.2's partitioner; it imports the HloShardings) into the program each device runs on
its shard. A call copies each shard of an argument to its device once, and each shard of
an updated argument back into the caller's tensor once; the donated shards are updated in
place on the devices.

The report reads the partitioned module (converted back to MLIR by jaxlib): each device's
buffer of sharded state, whether the alias survived, and which collective or copy reads
an aliased buffer. `docs/sharding.md` shows one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from . import xla

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

    @property
    def fraction(self) -> float:
        """The share of the tensor each device holds."""
        return math.prod(self.device_shape) / max(1, math.prod(self.shape))

    @property
    def ok(self) -> bool:
        """1/shards of it per device, updated in place, read by no collective or copy."""
        return (self.aliased and not self.moved_by
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
                f"{'moved by ' + ', '.join(s.moved_by) if s.moved_by else 'not moved'}")
        return "\n".join(lines)


class ShardedExecutable:
    """A StableHLO module with shardings, compiled once for the mesh's devices."""

    def __init__(self, stablehlo: str, mesh: dict[str, int], specs: dict[int, tuple],
                 io_map: dict[int, int], state: dict[int, int], input_names: list[str],
                 shapes: list[list[int]]) -> None:
        jax = xla._jax()
        from jax._src import xla_bridge
        from jax._src.lib import xla_client

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
        options = xla_client.CompileOptions()
        options.num_replicas, options.num_partitions = 1, count
        build = options.executable_build_options
        build.use_spmd_partitioning = True
        build.use_shardy_partitioner = True
        # Copy insertion that sees the in-place update's regions: without it XLA:CPU
        # copies a buffer that is read after the update that writes it.
        options.env_option_overrides = [("xla_cpu_copy_insertion_use_region_analysis", True)]
        options.device_assignment = xla_client.DeviceAssignment.create(
            np.array([[d.id for d in self._devices]]))
        backend = xla_bridge.get_backend("cpu")
        device_list = xla_client.DeviceList(tuple(self._devices))
        text = shardy_module(stablehlo, mesh, specs, state)
        self._executable = backend.compile_and_load(text, device_list, options)
        if any(xla._reads_updated_buffer_through_another_alias(m)
               for m in self._executable.hlo_modules()):  # see backends/xla.py
            options.env_option_overrides += [("xla_disable_hlo_passes", "fusion")]
            self._executable = backend.compile_and_load(text, device_list, options)
        self._report: ShardingReport | None = None

    def _sharding(self, index: int) -> Any:
        spec = self._specs.get(index, ())
        return self._jax.sharding.NamedSharding(self._mesh, self._jax.sharding.PartitionSpec(
            *(axes or None for axes in spec)))

    def __call__(self, inputs: list[torch.Tensor], result_dtypes: list[torch.dtype]
                 ) -> list[torch.Tensor]:
        """Runs on the devices; writes each updated shard into the caller's tensor and
        returns that tensor for every result that is its new value."""
        arrays = [self._jax.device_put(_to_numpy(t), self._sharding(i))
                  for i, t in enumerate(inputs)]
        outputs = self._executable.execute_sharded(arrays)
        per_device = outputs.disassemble_into_single_device_arrays()
        for arg, result in self._io_map.items():
            target = inputs[arg]
            host = _host_view(target)
            slices = self._sharding(arg).devices_indices_map(tuple(target.shape))
            written = set()
            for shard in per_device[result]:
                where = slices[next(iter(shard.devices()))]
                key = tuple((s.start, s.stop) for s in where)
                if key not in written:  # a replicated axis holds the same shard twice
                    written.add(key)
                    host[where] = np.asarray(shard).view(host.dtype)
        # a result that is state is the caller's tensor, as eager returns it; the others
        # are replicated: any device holds all of it
        return [inputs[self._state[i]] if i in self._state
                else _from_numpy(np.asarray(shards[0]), dtype)
                for i, (shards, dtype) in enumerate(zip(per_device, result_dtypes))]

    @property
    def report(self) -> ShardingReport:
        if self._report is None:
            self._report = _report(self)
        return self._report


def shardy_module(stablehlo: str, mesh: dict[str, int], specs: dict[int, tuple],
                  state: dict[int, int]) -> str:
    """The module with Shardy's `sdy.sharding` in place of every `mhlo.sharding`.

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
        axes = sdy.MeshAttr.get([sdy.MeshAxisAttr.get(n, s) for n, s in mesh.items()])

        def sharding(spec: tuple, rank: int) -> ir.Attribute:
            return sdy.TensorShardingAttr.get(axes, [
                sdy.DimensionShardingAttr.get([sdy.AxisRefAttr.get(a) for a in dim],
                                              is_closed=True)
                for dim in spec or [()] * rank])

        function = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        for kind, types in (("arg_attrs", function.inputs), ("res_attrs", function.results)):
            entries = []
            for index, (entry, type) in enumerate(zip(ir.ArrayAttr(main.attributes[kind]),
                                                      types)):
                entry = ir.DictAttr(entry)
                fields = {entry[i].name: entry[i].attr for i in range(len(entry))
                          if entry[i].name != "mhlo.sharding"}
                spec = specs.get(index if kind == "arg_attrs" else state.get(index, -1))
                fields["sdy.sharding"] = sharding(spec, len(ir.RankedTensorType(type).shape))
                entries.append(ir.DictAttr.get(fields))
            main.attributes[kind] = ir.ArrayAttr.get(entries)
        return module.operation.get_asm()


def _host_view(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's own memory as a NumPy array (bfloat16 as int16)."""
    data = tensor.detach()
    if data.dtype == torch.bfloat16:
        data = data.view(torch.int16)
    return data.numpy()


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
            value = block.arguments[arg]
            spec = specs.get(arg, ())
            state.append(StateReport(
                sharded._names[arg], spec,
                math.prod(sharded._axes[a] for axes in spec for a in axes),
                list(sharded._shapes[arg]), list(ir.RankedTensorType(value.type).shape),
                aliases.get(arg) == result, sorted(_moves(value)),
                _writer(returned[result], ir)))
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


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A host copy of a tensor for device_put (bfloat16 as ml_dtypes')."""
    data = tensor.detach().contiguous().cpu()
    if data.dtype == torch.bfloat16:
        import ml_dtypes  # a dependency of jax

        return data.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return data.numpy()


def _from_numpy(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bfloat16:
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy()).to(dtype)
