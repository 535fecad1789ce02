"""Sharded programs on XLA's SPMD partitioner: one program, N devices, state in shards.

The StableHLO carries `mhlo.sharding` on every argument and result and
`mhlo.num_partitions` (transforms/sharding.py). The engine runs its legalization
(`LEGALIZE_FOR_MESH`), places the arguments and results by the same specs as jax
`NamedSharding`s, and XLA partitions the program with Shardy (jaxlib 0.10.2's
partitioner) into the program each device runs on its shard (executable.py).

State stays on the devices between calls. A written argument's shards are copied to the
devices on its first call (or after torch has written the tensor since), and donated to
every call after: each device updates its shard in place. The caller's tensor is kept
equal to the state by copying in only what the call wrote: the engine's module also
returns where each `dynamic_update_slice` or `scatter` of the state wrote, and the host
copies those regions from the devices' new shards into the caller's tensor; a state
whose new value is not such a chain of writes is copied back whole, a shard per device
(docs/sharding.md, "Running"). Small read-only arguments are copied into buffers the
devices keep (`Stage`): a call makes no device arrays for them.

The report reads the partitioned module (converted back to MLIR by jaxlib): each device's
buffer of sharded state, whether the alias survived, and which collective or copy reads
an aliased buffer. `docs/sharding.md` shows one.

The package, by concern:

- executable.py: `compile`, the engine's entry, and `ShardedExecutable`: the
  legalization, the jax compile (and the compile cache), a call, the planned call's
  frozen `ShardedPlan` (what sharded_call.cpp reads, and nothing else);
- writes.py: where a call writes its state (`expose_writes` on the module, `written`
  after the call), so the host repeats the writes instead of copying the state back;
- placement.py: how an argument lies on the mesh and moves between the host and the
  devices (`Placement`, `Stage`, `Resident`);
- report.py: the sharding report, read from the partitioned module.
"""

from .executable import (LEGALIZE_FOR_MESH, ShardedExecutable, ShardedPlan,  # noqa: F401
                         compile)
from .report import ShardingReport, StateReport  # noqa: F401
