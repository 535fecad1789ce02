"""A tensor-parallel decode step per call on 2 ranks: each rank's program compiled by
outofplace, run on XLA:CPU with its all_reduces crossing the processes (jax.distributed,
gloo), against eager with torch.distributed's gloo (docs/performance.md, "Tensor-parallel
decode step"; docs/sharding.md, "Tensor-parallel programs with collectives").

    .venv/bin/python bench/tensor_parallel.py            # the section, markdown on stdout
    .venv/bin/python bench/tensor_parallel.py --tiny     # a quick check at a tiny size

Each rank holds its shard of a Megatron-style decoder (column-parallel q/k/v and up,
row-parallel o and down each followed by an in-place `dist.all_reduce`, a rank-local KV
cache written at the step's position): the compiled step and eager decode the same
tokens from the same cache state (a model each), outputs compared at every step; the
time is the median over a few runs of N steps, divided by N, on rank 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

warnings.filterwarnings("ignore")

SIZES = {"full": dict(hidden=1024, heads=16, ffn=4096, layers=4, cache=512, tokens=32),
         "tiny": dict(hidden=64, heads=4, ffn=128, layers=2, cache=16, tokens=4)}
WORLD = 2
RUNS = 5


def _decoder(rank: int, world: int, hidden: int, heads: int, ffn: int, layers: int,
             cache: int, **_: Any) -> Any:
    import torch
    import torch.distributed as dist
    from torch import nn

    class Layer(nn.Module):
        def __init__(self, seed: int) -> None:
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            local, hd = heads // world, hidden // heads
            n, f = local * hd, ffn // world

            def shard(rows: int, cols: int) -> nn.Parameter:
                return nn.Parameter(torch.randn(rows, cols, generator=g) / math.sqrt(cols))
            self.qkv, self.o = shard(3 * n, hidden), shard(hidden, n)
            self.up, self.down = shard(f, hidden), shard(hidden, f)
            self.local, self.hd = local, hd
            self.register_buffer("k_cache", torch.zeros(local, cache, hd))
            self.register_buffer("v_cache", torch.zeros(local, cache, hd))

        def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            q, k, v = (self.qkv @ x).view(3, self.local, 1, self.hd).unbind(0)
            self.k_cache.index_copy_(1, pos.view(1), k)
            self.v_cache.index_copy_(1, pos.view(1), v)
            scores = (self.k_cache @ q.transpose(1, 2)).squeeze(-1) / math.sqrt(self.hd)
            scores = scores.masked_fill(torch.arange(cache) > pos, float("-inf"))
            y = self.o @ (scores.softmax(-1).unsqueeze(-1) * self.v_cache).sum(1).reshape(-1)
            dist.all_reduce(y)
            x = x + y
            h = self.down @ torch.nn.functional.silu(self.up @ x)
            dist.all_reduce(h)
            return x + h

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Layer(1000 * i + rank) for i in range(layers))

        def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x, pos)
            return x

    return Decoder()


def _median(run: Callable[[], Any]) -> float:
    run()  # warm-up
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(rank: int, size: str) -> dict[str, Any]:
    """This rank's row: eager and compiled per step, compile time, agreement."""
    import torch
    import torch.distributed as dist

    import outofplace

    shape = SIZES[size]
    eager, ours = (_decoder(rank, WORLD, **shape) for _ in range(2))
    tokens = shape["tokens"]
    xs = [torch.randn(shape["hidden"], generator=torch.Generator().manual_seed(i)) * 0.1
          for i in range(tokens)]
    row: dict[str, Any] = {"size": size, **shape}
    began = time.perf_counter()
    step = outofplace.compile(ours, (xs[0], torch.tensor(0)), check_bounds=False)
    step(xs[0], torch.tensor(0))  # (XLA's compile, and joining the job's replicas)
    row["compile_s"] = time.perf_counter() - began
    worst = [0.0]

    def run(model: Callable, check: bool = False) -> Callable[[], None]:
        def steps() -> None:
            dist.barrier()
            for i, x in enumerate(xs):
                out = model(x, torch.tensor(i))
                if check:
                    worst[0] = max(worst[0], (out - eager(x, torch.tensor(i))).abs().max()
                                   .item())
        return steps

    with torch.no_grad():
        run(step, check=True)()  # outputs against eager, the same cache positions
        row["eager"] = _median(run(eager)) / tokens
        row["compiled"] = _median(run(step)) / tokens
    row["worst"] = worst[0]
    row["in_place"] = all(v == "in place" for v in step.in_place_report.values())
    return row


def _rank(rank: int, port: str, size: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    row = measure(rank, size)
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(row), flush=True)


def render(row: dict[str, Any], load: tuple) -> str:
    ms = lambda s: f"{s * 1e3:,.2f} ms"  # noqa: E731
    return "\n".join([
        "## Tensor-parallel decode step",
        "",
        f"A Megatron-style decoder ({row['layers']} layers, hidden {row['hidden']}, "
        f"{row['heads']} heads, FFN {row['ffn']}, a {row['cache']}-position KV cache per "
        f"layer) split over {WORLD} rank processes on this machine: each rank's step "
        "compiled by outofplace (its in-place all_reduces StableHLO collectives, run on "
        "XLA:CPU over jax.distributed's gloo collectives) against eager with "
        "torch.distributed's gloo, one token a call (bench/tensor_parallel.py). Rank 0's "
        f"time per step, the median of {RUNS} runs of {row['tokens']} steps. Load average "
        "over the run: " + " / ".join(f"{x:.1f}" for x in load) + ".",
        "",
        "| ranks | eager (gloo) | outofplace (XLA:CPU, gloo) | outofplace / eager | "
        "largest difference | caches in place | compile |",
        "|---:|---:|---:|---:|---:|---|---:|",
        f"| {WORLD} | {ms(row['eager'])} | {ms(row['compiled'])} | "
        f"{row['compiled'] / row['eager']:.2f}x | {row['worst']:.1e} | "
        f"{'yes' if row['in_place'] else 'NO'} | {row['compile_s']:.1f} s |",
    ]) + "\n"


def run(log: Callable[[str], None] = print, size: str = "full") -> str:
    """The section: WORLD rank processes of this file, rank 0's row."""
    log(f"tensor-parallel decode step on {WORLD} ranks ({size})")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = dict(os.environ, OUTOFPLACE_CACHE="0", PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "python"),
         os.environ.get("PYTHONPATH", "")]))
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--port", port,
                               "--size", size], env=env, stdout=subprocess.PIPE,
                              text=True) for r in range(WORLD)]
    try:
        outputs = [p.communicate(timeout=1800)[0] for p in ranks]
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
    if any(p.returncode for p in ranks):
        raise RuntimeError("a rank of the tensor-parallel benchmark failed")
    return render(json.loads(outputs[0].strip().splitlines()[-1]), os.getloadavg())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--port")
    parser.add_argument("--size", choices=SIZES, default="full")
    parser.add_argument("--tiny", action="store_true", help="--size tiny")
    arguments = parser.parse_args()
    if arguments.rank is not None:
        _rank(arguments.rank, arguments.port, arguments.size)
    else:
        print(run(size="tiny" if arguments.tiny else arguments.size))
