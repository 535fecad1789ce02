"""A tensor-parallel decode step, each rank's program compiled by outofplace and run on
XLA:CPU, the collectives crossing the processes (docs/sharding.md, "Tensor-parallel
programs with collectives"). Run it with

    torchrun --nproc-per-node 2 examples/tensor_parallel_decode.py
"""

import torch
import torch.distributed as dist
from torch import nn

import outofplace


class Block(nn.Module):
    """One rank's shard: a column-parallel projection into this rank's heads, a
    rank-local KV cache written at the step's position, a row-parallel projection back
    whose partial sums an in-place all_reduce adds up."""

    def __init__(self, rank: int, world: int, hidden: int = 32, length: int = 16) -> None:
        super().__init__()
        full = torch.randn(2 * hidden, hidden, generator=torch.Generator().manual_seed(0))
        rows = hidden // world
        self.kv = nn.Parameter(torch.cat([full[:hidden][rank * rows:(rank + 1) * rows],
                                          full[hidden:][rank * rows:(rank + 1) * rows]]))
        self.out = nn.Parameter(full[:hidden, rank * rows:(rank + 1) * rows].clone())
        self.register_buffer("k_cache", torch.zeros(length, rows))
        self.register_buffer("v_cache", torch.zeros(length, rows))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        k, v = (self.kv @ x).chunk(2)
        self.k_cache.index_copy_(0, pos.view(1), k.view(1, -1))
        self.v_cache.index_copy_(0, pos.view(1), v.view(1, -1))
        weights = (self.k_cache @ k).masked_fill(torch.arange(16) > pos, -1e9).softmax(0)
        y = self.out @ (weights @ self.v_cache)
        dist.all_reduce(y)  # in place: the sum of every rank's partial result
        return x + y


def main() -> None:
    dist.init_process_group("gloo")  # torchrun's environment: rank, world, address
    rank, world = dist.get_rank(), dist.get_world_size()
    eager, ours = Block(rank, world), Block(rank, world)
    step = outofplace.compile(ours, (torch.zeros(32), torch.tensor(0)), check_bounds=False)
    if rank == 0:
        print(next(line.strip() for line in step.stablehlo.splitlines()
                   if "stablehlo.all_reduce" in line))
    for position in range(4):
        x = torch.randn(32, generator=torch.Generator().manual_seed(position))
        expected = eager(x, torch.tensor(position))
        got = step(x, torch.tensor(position))  # ours.k_cache / v_cache updated in place
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(ours.k_cache, eager.k_cache)
    print(f"rank {rank}: 4 decode steps match eager; caches {step.in_place_report}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
