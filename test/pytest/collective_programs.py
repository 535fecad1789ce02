"""Rank-local tensor-parallel programs for test_collectives.py (each rank's shard of one
model, built from one seed), and the rank process those tests spawn."""

from __future__ import annotations

import math
import os

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
        return self.step(x, pos, self.q, self.k, self.v, self.o, self.up, self.down)

    def step(self, x: torch.Tensor, pos: torch.Tensor, wq, wk, wv, wo, wup, wdown
             ) -> torch.Tensor:
        # x: [hidden] (one token), pos: 0-d int64
        q = (wq @ x).view(self.heads, self.hd)
        at = pos.view(1)  # (written as HF's StaticCache writes, which dynamo traces)
        self.k_cache.index_copy_(1, at, (wk @ x).view(self.heads, 1, self.hd))
        self.v_cache.index_copy_(1, at, (wv @ x).view(self.heads, 1, self.hd))
        scores = (self.k_cache @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(self.hd)
        visible = torch.arange(self.k_cache.shape[1]) <= pos
        scores = scores.masked_fill(~visible, float("-inf"))
        attention = (scores.softmax(-1).unsqueeze(-1) * self.v_cache).sum(1)
        y = wo @ attention.reshape(-1)
        dist.all_reduce(y, group=self.group)  # row-parallel: partial sums
        x = x + y
        h = wdown @ torch.nn.functional.gelu(wup @ x)
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
                              "channel": str(op.attributes["channel_handle"])
                              if "channel_handle" in op.attributes else None})
    return found


class Collectives(nn.Module):
    """The in-place c10d calls into preallocated outputs: a gathered buffer (module
    state, written by all_gather_into_tensor), a reduce_scatter_tensor and an
    all_to_all_single into locals, all_reduce with max and avg."""

    def __init__(self, world: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("gathered", torch.zeros(2 * world, 3, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        world = dist.get_world_size()
        dist.all_gather_into_tensor(self.gathered, x)
        scattered = torch.empty(2, 3, dtype=x.dtype)
        dist.reduce_scatter_tensor(scattered, self.gathered * 2)
        exchanged = torch.empty(2 * world, 3, dtype=x.dtype)
        dist.all_to_all_single(exchanged, self.gathered + x.sum())
        peak = x.clone()
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        mean = x * 3
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        return scattered + peak + mean + exchanged[:2]


def _collectives(rank: int, world: int, dtype: torch.dtype, steps: int, path: str) -> dict:
    import outofplace

    eager, ours = Collectives(world, dtype), Collectives(world, dtype)
    xs = [torch.randn(2, 3, generator=torch.Generator().manual_seed(10 * step + rank),
                      dtype=dtype) for step in range(steps)]
    compiled = outofplace.compile(ours, (xs[0],)) if path == "compile" \
        else torch.compile(ours, backend="outofplace", fullgraph=True)
    worst, gathered = 0.0, ours.gathered
    for x in xs:
        expected, got = eager(x), compiled(x)
        worst = max(worst, (got - expected).abs().max().item(),
                    (ours.gathered - eager.gathered).abs().max().item())
    return {"worst": worst, "in_place": ours.gathered is gathered and (
        path != "compile" or compiled.in_place_report["gathered"] == "in place"),
        "collectives": collectives(compiled.stablehlo) if path == "compile" else None}


class OneProgram(MegatronBlock):
    """The Megatron block as one program for every rank (the vllm-neuron pattern): the
    whole weights, and a rank input that picks this rank's shard of each."""

    def __init__(self, world: int, dtype: torch.dtype) -> None:
        super().__init__(32, 4, 64, 8, 0, 1, dtype=dtype)  # (rank 0 of 1: every head)
        self.heads //= world
        for name in ("k_cache", "v_cache"):
            setattr(self, name, getattr(self, name)[:self.heads].clone())

    def forward(self, x: torch.Tensor, pos: torch.Tensor, rank: torch.Tensor
                ) -> torch.Tensor:
        n = self.heads * self.hd
        rows = rank * n + torch.arange(n)
        cols = rank * (self.up.shape[0] // (self.q.shape[0] // n)) + \
            torch.arange(self.up.shape[0] // (self.q.shape[0] // n))
        return self.step(x, pos, self.q.index_select(0, rows), self.k.index_select(0, rows),
                         self.v.index_select(0, rows), self.o.index_select(1, rows),
                         self.up.index_select(0, cols), self.down.index_select(1, cols))


def _one_program(rank: int, world: int, dtype: torch.dtype, steps: int, path: str) -> dict:
    """OneProgram against the per-rank MegatronBlock run eagerly; the program's digest
    (the same on every rank)."""
    import hashlib

    import outofplace

    eager, ours = MegatronBlock(32, 4, 64, 8, rank, world, dtype=dtype), \
        OneProgram(world, dtype)
    xs = [torch.randn(32, generator=torch.Generator().manual_seed(step), dtype=dtype)
          for step in range(steps)]
    me = torch.tensor(rank)
    compiled = outofplace.compile(ours, (xs[0], torch.tensor(0), me)) \
        if path == "compile" else torch.compile(ours, backend="outofplace", fullgraph=True)
    worst = 0.0
    for step, x in enumerate(xs):
        expected, got = eager(x, torch.tensor(step)), compiled(x, torch.tensor(step), me)
        worst = max(worst, (got - expected).abs().max().item(),
                    (ours.k_cache - eager.k_cache).abs().max().item())
    result = {"worst": worst, "in_place": path != "compile" or all(
        compiled.in_place_report[n] == "in place" for n in ("k_cache", "v_cache")),
        "collectives": collectives(compiled.stablehlo) if path == "compile" else None}
    if path == "compile":
        result["digest"] = hashlib.sha256(compiled.stablehlo.encode()).hexdigest()
        if os.environ.get("OUTOFPLACE_TEST_SAVE"):
            compiled.save(os.environ["OUTOFPLACE_TEST_SAVE"])
    return result


class DataTimesTensor(nn.Module):
    """A data x tensor layout (a 2-D DeviceMesh): the Megatron block over the mesh's
    "tp" groups, its output averaged over the "dp" groups."""

    def __init__(self, mesh, dtype: torch.dtype) -> None:
        super().__init__()
        self.block = MegatronBlock(32, 4, 64, 8, mesh.get_local_rank("tp"),
                                   mesh.size(1), group=mesh.get_group("tp"), dtype=dtype)
        self.dp = mesh.get_group("dp")

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        y = self.block(x, pos)
        dist.all_reduce(y, op=dist.ReduceOp.AVG, group=self.dp)
        return y


def _mesh(rank: int, world: int, dtype: torch.dtype, steps: int, path: str) -> dict:
    """The Megatron block on the "tp" dimension of a 2 x (world / 2) DeviceMesh."""
    import outofplace
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    eager, ours = DataTimesTensor(mesh, dtype), DataTimesTensor(mesh, dtype)  # (one seed)
    g = torch.Generator().manual_seed(2 + mesh.get_local_rank("dp"))  # a batch per dp rank
    xs = [torch.randn(32, generator=g, dtype=dtype) for _ in range(steps)]
    compiled = outofplace.compile(ours, (xs[0], torch.tensor(0))) if path == "compile" \
        else torch.compile(ours, backend="outofplace", fullgraph=True)
    worst = 0.0
    for step, x in enumerate(xs):
        expected, got = eager(x, torch.tensor(step)), compiled(x, torch.tensor(step))
        worst = max(worst, (got - expected).abs().max().item(),
                    (ours.block.k_cache - eager.block.k_cache).abs().max().item())
    return {"worst": worst, "in_place": path != "compile" or all(
        compiled.in_place_report[n] == "in place" for n in ("block.k_cache", "block.v_cache")),
        "collectives": collectives(compiled.stablehlo) if path == "compile" else None}


def _tensor_parallel_llama(world: int, dtype: torch.dtype) -> nn.Module:
    """A tiny random transformers Llama, its decoder layers made tensor-parallel by
    parallelize_module (ColwiseParallel q/k/v/gate/up, RowwiseParallel o/down), in
    transformers' static-cache export wrapper whose caches hold this rank's heads."""
    import transformers
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from transformers.integrations import executorch

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, head_dim=16, vocab_size=96, max_position_embeddings=32,
        attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config).eval().to(dtype)
    plan = {}
    for layer in range(config.num_hidden_layers):
        for name, style in (("self_attn.q_proj", ColwiseParallel), ("self_attn.k_proj",
                            ColwiseParallel), ("self_attn.v_proj", ColwiseParallel),
                            ("self_attn.o_proj", RowwiseParallel), ("mlp.gate_proj",
                            ColwiseParallel), ("mlp.up_proj", ColwiseParallel),
                            ("mlp.down_proj", RowwiseParallel)):
            plan[f"model.layers.{layer}.{name}"] = style()
    parallelize_module(model, init_device_mesh("cpu", (world,)), plan)
    config.num_attention_heads //= world  # this rank's heads (the cache's)
    config.num_key_value_heads //= world
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static")
    return executorch.TorchExportableModuleWithStaticCache(model, batch_size=1,
                                                           max_cache_len=8)


def _llama(rank: int, world: int, dtype: torch.dtype, steps: int, path: str) -> dict:
    """The parallelized Llama run eagerly (DTensors) against its rank-local program
    (`outofplace.rank_local`) compiled, over `steps` decode steps."""
    import outofplace

    eager = _tensor_parallel_llama(world, dtype)
    ours = outofplace.rank_local(_tensor_parallel_llama(world, dtype))
    tokens = [5, 17, 3, 42, 9, 60][:steps]
    example = (torch.tensor([[tokens[0]]]),), {"cache_position": torch.tensor([0])}
    compiled = outofplace.compile(ours, *example) if path == "compile" \
        else torch.compile(ours, backend="outofplace", fullgraph=True)
    worst = 0.0
    for step, token in enumerate(tokens):
        ids, at = torch.tensor([[token]]), torch.tensor([step])
        with torch.no_grad():
            expected = eager(ids, cache_position=at)
            got = compiled(ids, cache_position=at)
        worst = max(worst, (got - expected).abs().max().item())
        mine, theirs = dict(ours.named_buffers()), dict(eager.named_buffers())
        worst = max(worst, *((mine[n] - theirs[n]).abs().max().item() for n in mine
                             if "cache" in n))
    # (the second layer's counter is copied, 8 bytes: the program gives it the first's
    # value, as on one device)
    return {"worst": worst, "in_place": path != "compile" or all(
        compiled.in_place_report[f"{kind}_cache_{layer}"] == "in place"
        for kind in ("key", "value") for layer in range(2)),
        "collectives": collectives(compiled.stablehlo) if path == "compile" else None}


CASES = {"llama": _llama, "megatron": _megatron, "collectives": _collectives, "mesh": _mesh,
         "one_program": _one_program}


def main(argv: list[str]) -> None:
    """A rank process: `rank world port cases`, cases a JSON list of [case, dtype,
    steps, path]; prints each result as a JSON line."""
    import json

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
