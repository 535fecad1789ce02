"""Rank-local programs with collectives, run across the job's processes on XLA:CPU.

Each rank of a job started the usual way (torchrun, or processes that called
`torch.distributed.init_process_group`) compiles its own program; its StableHLO holds
`stablehlo.all_reduce` and the other collectives with the replica groups of the process
groups it ran with (transforms/collectives.py) and `mhlo.num_replicas` = the world's
size. `join` makes this process one replica of XLA's: `jax.distributed` (a coordinator
on rank 0's address, its port chosen by rank 0 and sent over torch.distributed's default
group) and a synchronous XLA:CPU client over it whose collectives are XLA:CPU's own over
gloo (`make_gloo_tcp_collectives`). That client becomes the XLA engine's
(`xla.client.COLLECTIVES`): xla.CpuExecutable compiles each program for every rank's device, a
replica each, and runs this rank's replica on this rank's tensors, written arguments (the
rank's KV cache) updated in place as on one device. No collective is run in Python.

torch.distributed's own process group (gloo, for eager and for the group names) and
jax.distributed's coordinator run side by side on different ports.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from . import xla

_LOCK = threading.Lock()
TIMEOUT_S = int(os.environ.get("OUTOFPLACE_COLLECTIVES_TIMEOUT", "120"))


@dataclass(frozen=True)
class Runtime:
    """This rank's place among the job's replicas (what `xla.client.COLLECTIVES` reads)."""
    client: Any
    device: Any
    sharding: Any
    devices: Any  # an xla_client.DeviceList, in rank order
    ids: tuple[int, ...]  # the devices' ids, in rank order
    rank: int
    world: int

    def place(self, compile_options: Any) -> None:
        """A replica per rank, rank r's on rank r's device."""
        import numpy as np
        from jax._src.lib import xla_client

        compile_options.num_replicas = self.world
        compile_options.num_partitions = 1
        compile_options.device_assignment = xla_client.DeviceAssignment.create(
            np.array([[i] for i in self.ids]))


def replicas(module: Any) -> int:
    """The `mhlo.num_replicas` of a lowered module: 1 for a program without collectives."""
    from torch_mlir import ir

    attributes = module.operation.attributes
    return ir.IntegerAttr(attributes["mhlo.num_replicas"]).value \
        if "mhlo.num_replicas" in attributes else 1


def prepare(module: Any) -> None:
    """Before the XLA engine compiles `module`: this process joins the job's replicas
    when its collectives span several ranks."""
    world = replicas(module)
    if world > 1:
        join(world)


def _coordinator() -> str:
    """The address of jax.distributed's coordinator: OUTOFPLACE_COORDINATOR, or a free
    port of rank 0's (MASTER_ADDR, else loopback) sent to every rank."""
    import torch.distributed as dist

    given = os.environ.get("OUTOFPLACE_COORDINATOR")
    if given:
        return given
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    chosen = [None]
    if dist.get_rank() == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            chosen[0] = f"{host}:{s.getsockname()[1]}"
    dist.broadcast_object_list(chosen, src=0)
    return chosen[0]


def join(world: int) -> Runtime:
    """This process as rank `torch.distributed.get_rank()` of `world` XLA replicas (once
    per process; every rank calls it, as every rank compiles its program)."""
    import torch.distributed as dist

    with _LOCK:
        runtime = xla.client.COLLECTIVES
        if runtime is not None:
            if runtime.world != world:
                raise ValueError(f"this process runs collectives among {runtime.world} "
                                 f"ranks; the program was traced among {world}")
            return runtime
        if not dist.is_initialized() or dist.get_world_size() != world:
            raise ValueError(f"a program with collectives among {world} ranks runs in a "
                             "job of as many processes with torch.distributed initialised")
        xla.load_jax()
        import jax
        from jax._src import distributed as jax_distributed
        from jax._src.lib import _jax, xla_client

        rank = dist.get_rank()
        jax.distributed.initialize(_coordinator(), world, rank,
                                   initialization_timeout=TIMEOUT_S)
        state = jax_distributed.global_state
        client = xla.client.make_cpu_client(
            distributed_client=state.client, node_id=rank, num_nodes=world,
            collectives=_jax.make_gloo_tcp_collectives(distributed_client=state.client))
        ordered = sorted(client.devices(), key=lambda d: (d.process_index, d.id))
        device = client.local_devices()[0]
        runtime = Runtime(client, device, jax.sharding.SingleDeviceSharding(device),
                          xla_client.DeviceList(tuple(ordered)),
                          tuple(d.id for d in ordered), rank, world)
        xla.client.COLLECTIVES = runtime
        return runtime


def rank_artifacts(module: Any, directory: str) -> tuple[str, dict]:
    """Where `Compiled.save` writes this rank's artifacts (`directory/rank<r>`), and what
    its io_map.json says of the collectives: the rank, the world, each process group's
    replica groups (also in main.mlir, on each collective)."""
    import torch.distributed as dist
    from torch_mlir import ir

    from ..frontend.collectives import GROUPS

    rank = dist.get_rank() if dist.is_initialized() else 0
    groups = {named.name: [list(ir.DenseI64ArrayAttr(g)) for g in ir.ArrayAttr(named.attr)]
              for named in ir.DictAttr(module.operation.attributes[GROUPS])}
    return os.path.join(str(directory), f"rank{rank}"), \
        {"rank": rank, "world": replicas(module), "process_groups": groups}
