"""The compile cache on a small Llama decoder: compile time of a first process (empty
cache) against a second one (the cache the first wrote), each a fresh Python process.

    PYTHONPATH=python python bench/compile_cache.py [--runs 2] [--program writes:500]

The model: transformers' LlamaForCausalLM with random weights (hidden 256, 6 layers, 8
heads, 4 KV heads, vocabulary 4096) in `TorchExportableModuleWithStaticCache` (batch 1,
cache 256 positions), one decode step; or `--program writes:N`, compile_time.py's step of N
writes through views. Each process times `outofplace.compile` and the
first call (where XLA:CPU compiles; it also imports jax), wall and CPU time
(`time.process_time`, all threads), per stage (wall) from the `outofplace` logger, and
checks the call's logits against eager.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def llama() -> tuple:
    """The decoder, eager's copy, its arguments and keyword arguments."""
    import copy

    import torch
    import transformers
    from transformers.integrations import executorch

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=688, num_hidden_layers=6,
        num_attention_heads=8, num_key_value_heads=4, vocab_size=4096,
        max_position_embeddings=512, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static")
    wrapped = executorch.TorchExportableModuleWithStaticCache(
        model, batch_size=1, max_cache_len=256)
    return wrapped, copy.deepcopy(wrapped), (torch.tensor([[7]]),), \
        {"cache_position": torch.tensor([0])}


def writes(n: int) -> tuple:
    """compile_time.py's program of n writes through views (docs/performance.md)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import compile_time

    step = compile_time.program(n)
    return step, step, compile_time.inputs(), {}


def child(which: str) -> None:
    import copy
    import logging

    import torch

    import outofplace
    from outofplace import compile_cache

    stages: dict[str, float] = {}

    class Times(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            name, _, rest = record.getMessage().partition(": done in ")
            if rest:
                stages[name] = stages.get(name, 0.0) + float(rest.split()[0])

    logging.getLogger("outofplace").addHandler(Times())
    logging.getLogger("outofplace").setLevel(logging.INFO)
    model, eager, args, kwargs = llama() if which == "llama" else \
        writes(int(which.removeprefix("writes:")))
    eager_args, eager_kwargs = copy.deepcopy((args, kwargs))
    start, cpu = time.perf_counter(), time.process_time()
    compiled = outofplace.compile(model, copy.deepcopy(args), copy.deepcopy(kwargs))
    compile_seconds = time.perf_counter() - start
    compile_cpu = time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = compiled(*args, **kwargs)
    first_call = time.perf_counter() - start
    first_call_cpu = time.process_time() - cpu
    with torch.no_grad():
        expected = eager(*eager_args, **eager_kwargs)
    print(json.dumps({
        "compile": compile_seconds, "first_call": first_call, "compile_cpu": compile_cpu,
        "first_call_cpu": first_call_cpu, "stages": stages,
        "stats": dict(compile_cache.stats),
        "max_abs_difference": max(float((a - b).abs().max()) for a, b in zip(
            [out, *args, *kwargs.values()], [expected, *eager_args, *eager_kwargs.values()])),
        "entry_bytes": sum(p.stat().st_size for p in compile_cache.directory().rglob("*")
                           if p.is_file())}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2, help="first/second pairs")
    parser.add_argument("--program", default="llama", help="llama or writes:N")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OUTOFPLACE_CACHE": "1"}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="outofplace-cache-") as directory:
            env["OUTOFPLACE_CACHE_DIR"] = directory
            for which in ("first", "second"):
                done = subprocess.run([sys.executable, __file__, "--child", args.program], env=env,
                                      capture_output=True, text=True, check=True)
                result = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"run {run} {which}: " + json.dumps(result), flush=True)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1])
    else:
        main()
