"""The sharding report: what XLA's SPMD partitioner made of a program's aliased state,
read from the partitioned module (converted back to MLIR by jaxlib): each device's buffer
of sharded state, whether the alias survived, and which collective or copy reads an
aliased buffer (docs/sharding.md shows one)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

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



def report_of(sharded: Any) -> ShardingReport:
    """The report of a ShardedExecutable (executable.py), read from its compiled program."""
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
