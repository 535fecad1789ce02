"""Rank-local tensor-parallel programs for test_collectives.py (each rank's shard of one
model, built from one seed), and the rank process those tests spawn."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn


class MegatronBlock(nn.Module):
    """One rank's shard of a decoder block, Megatron-style: column-parallel q/k/v and
    up projections, row-parallel o and down projections followed by an in-place
    `dist.all_reduce`, a rank-local KV cache written at a runtime position."""

    def __init__(self, hidden: int, heads: int, ffn: int, max_len: int, rank: int,
                 world: int, group=None, dtype=torch.float32, seed: int = 0) -> None:
        super().__init__()
        assert heads % world == 0 and ffn % world == 0
        g = torch.Generator().manual_seed(seed)
        hd = hidden // heads
        full = {n: torch.randn(shape, generator=g, dtype=dtype) / math.sqrt(shape[1])
                for n, shape in (("q", (hidden, hidden)), ("k", (hidden, hidden)),
                                 ("v", (hidden, hidden)), ("o", (hidden, hidden)),
                                 ("up", (ffn, hidden)), ("down", (hidden, ffn)))}
        local = heads // world
        rows = slice(rank * local * hd, (rank + 1) * local * hd)
        cols = slice(rank * ffn // world, (rank + 1) * ffn // world)
        self.q = nn.Parameter(full["q"][rows].clone())
        self.k = nn.Parameter(full["k"][rows].clone())
        self.v = nn.Parameter(full["v"][rows].clone())
        self.o = nn.Parameter(full["o"][:, rows].clone())
        self.up = nn.Parameter(full["up"][cols].clone())
        self.down = nn.Parameter(full["down"][:, cols].clone())
        self.heads, self.hd, self.group = local, hd, group
        self.register_buffer("k_cache", torch.zeros(local, max_len, hd, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(local, max_len, hd, dtype=dtype))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x: [hidden] (one token), pos: 0-d int64
        q = (self.q @ x).view(self.heads, self.hd)
        at = pos.view(1)  # (written as HF's StaticCache writes, which dynamo traces)
        self.k_cache.index_copy_(1, at, (self.k @ x).view(self.heads, 1, self.hd))
        self.v_cache.index_copy_(1, at, (self.v @ x).view(self.heads, 1, self.hd))
        scores = (self.k_cache @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(self.hd)
        visible = torch.arange(self.k_cache.shape[1]) <= pos
        scores = scores.masked_fill(~visible, float("-inf"))
        attention = (scores.softmax(-1).unsqueeze(-1) * self.v_cache).sum(1)
        y = self.o @ attention.reshape(-1)
        dist.all_reduce(y, group=self.group)  # row-parallel: partial sums
        x = x + y
        h = self.down @ torch.nn.functional.gelu(self.up @ x)
        dist.all_reduce(h, group=self.group)
        return x + h


def _megatron(rank: int, world: int, dtype: torch.dtype, steps: int, path: str) -> dict:
    """Eager and compiled (`path`: "compile" or "dynamo") runs of this rank's block over
    `steps` decode steps: the largest difference of outputs and caches, and whether the
    compiled caches stayed in place."""
    import copy

    import outofplace

    eager = MegatronBlock(32, 4, 64, 8, rank, world, dtype=dtype)
    ours = copy.deepcopy(eager)
    k_cache, v_cache = ours.k_cache, ours.v_cache
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(32, generator=g, dtype=dtype) for _ in range(steps)]
    compiled = outofplace.compile(ours, (xs[0], torch.tensor(0)), check_bounds=False) \
        if path == "compile" else torch.compile(ours, backend="outofplace", fullgraph=True)
    worst, addresses = 0.0, set()
    for step, x in enumerate(xs):
        pos = torch.tensor(step)
        expected = eager(x, pos)
        got = compiled(x, pos)
        if step:  # (the first call adopts the caches' memory: XLA's from then on)
            addresses.add((ours.k_cache.data_ptr(), ours.v_cache.data_ptr()))
        worst = max(worst, (got - expected).abs().max().item(),
                    (ours.k_cache - eager.k_cache).abs().max().item(),
                    (ours.v_cache - eager.v_cache).abs().max().item())
    scale = max(expected.abs().max().item(), 1.0)
    in_place = len(addresses) == 1 and ours.k_cache is k_cache and ours.v_cache is v_cache
    if path == "compile":
        in_place = in_place and all(compiled.in_place_report[n] == "in place"
                                    for n in ("k_cache", "v_cache"))
    return {"worst": worst / scale, "in_place": in_place,
            "collectives": collectives(compiled.stablehlo) if path == "compile" else None}


def collectives(stablehlo: str) -> list[dict]:
    """Each collective of a module: its op, replica groups and channel id."""
    from torch_mlir import ir

    from outofplace.context import make_context
    from outofplace.ir_utils import all_operations

    found = []
    with make_context():
        module = ir.Module.parse(stablehlo)
        for op in all_operations(module.operation):
            if op.name in ("stablehlo.all_reduce", "stablehlo.all_gather",
                           "stablehlo.reduce_scatter", "stablehlo.all_to_all"):
                groups = ir.DenseIntElementsAttr(op.attributes["replica_groups"])
                shape = ir.ShapedType(groups.type).shape
                values = [groups[i] for i in range(len(groups))]
                found.append({"op": op.name, "groups": [values[r * shape[1]:(r + 1) * shape[1]]
                                                        for r in range(shape[0])],
                              "channel": str(op.attributes["channel_handle"])})
    return found


CASES = {"megatron": _megatron}


def main(argv: list[str]) -> None:
    """A rank process: `rank world port cases`, cases a JSON list of [case, dtype,
    steps, path]; prints each result as a JSON line."""
    import json
    import os

    rank, world, port, cases = argv
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=int(rank), world_size=int(world))
    try:
        for case, dtype, steps, path in json.loads(cases):
            result = CASES[case](int(rank), int(world), getattr(torch, dtype), steps, path)
            print("RESULT " + json.dumps([case, dtype, path, result]), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
