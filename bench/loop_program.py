"""A greedy decode loop as one program (examples/decode_loop.py): N steps of a
transformers Llama with a static cache in a `while_loop`, N a runtime input, against N
calls of the compiled one-step program and eager's Python loop, per token
(docs/performance.md, "Decode loop in one program").

    .venv/bin/python bench/loop_program.py          # the section, markdown on stdout

The decoders are bench/real_models.py's (random weights, batch 1, a 256-position
cache). Each way decodes the same N tokens from the same cache state (a copy of the
model each), and the tokens must agree; the time is the median of a few runs of the N
steps, divided by N.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

ROWS = {"12.7M": 32, "148M": 16}  # decoder (real_models.DECODERS): tokens a run
RUNS = 5


def _median(run: Callable[[], Any], runs: int = RUNS) -> float:
    run()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, tokens: int) -> dict[str, Any]:
    import torch

    import outofplace
    from decode_loop import DecodeLoop, eager_loop
    from real_models import CACHE, _decoder

    _, wrapper = _decoder(name)
    start = CACHE // 2 - tokens  # the positions every way decodes (its cache reset to them)
    first = torch.tensor([[5]])
    row: dict[str, Any] = {"row": name, "tokens": tokens}
    models = {way: copy.deepcopy(wrapper) for way in ("loop", "steps", "eager")}
    out = torch.zeros(tokens, dtype=torch.int64)
    results: dict[str, torch.Tensor] = {}

    def run_eager() -> None:
        results["eager"] = torch.zeros(tokens, dtype=torch.int64)
        eager_loop(models["eager"], first, start, tokens, results["eager"])

    with torch.no_grad():  # (first, as real_models.py: before anything is compiled)
        row["eager"] = _median(run_eager) / tokens
    began = time.perf_counter()
    loop = outofplace.compile(DecodeLoop(models["loop"]),
                              (first, torch.tensor(start), torch.tensor(1), out))
    row["loop_compile_s"] = time.perf_counter() - began
    began = time.perf_counter()
    step = outofplace.compile(models["steps"], (first,),
                              {"cache_position": torch.tensor([start])})
    row["step_compile_s"] = time.perf_counter() - began
    row["loop_in_place"] = all(v == "in place" for v in loop.in_place_report.values())

    def run_loop() -> None:
        results["loop"] = torch.zeros(tokens, dtype=torch.int64)
        loop(first, torch.tensor(start), torch.tensor(tokens), results["loop"])

    def run_steps() -> None:
        got, token = torch.zeros(tokens, dtype=torch.int64), first
        for i in range(tokens):  # the host picks each token and feeds it back
            logits = step(token, cache_position=torch.tensor([start + i]))
            token = logits[:, -1].argmax(-1, keepdim=True)
            got[i] = token[0, 0]
        results["steps"] = got

    with torch.no_grad():
        for way, run in (("steps", run_steps), ("loop", run_loop)):
            row[way] = _median(run) / tokens
    row["same_tokens"] = torch.equal(results["loop"], results["eager"]) and \
        torch.equal(results["steps"], results["eager"])
    return row


def render(rows: list[dict[str, Any]], load: tuple) -> str:
    ms = lambda s: f"{s * 1e3:,.2f} ms"  # noqa: E731
    lines = [
        "## Decode loop in one program",
        "",
        "N greedy decode steps of a random-weight Llama (bench/real_models.py's decoders, "
        "batch 1, a 256-position static cache) as one `while_loop` compiled by "
        "outofplace, N a runtime input (examples/decode_loop.py; bench/loop_program.py), "
        "against N calls of the compiled one-step program (the host takes the argmax and "
        "feeds it back) and eager's Python loop. Time per token, the median of "
        f"{RUNS} runs of N steps. Load average over the run: "
        + " / ".join(f"{x:.1f}" for x in load) + ".",
        "",
        "| decoder | N | eager | N calls of the step | one loop program | loop / step calls "
        "| loop / eager | same tokens | caches in place | compile: loop / step |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['row']} | {r['tokens']} | {ms(r['eager'])} | {ms(r['steps'])} | "
            f"{ms(r['loop'])} | {r['loop'] / r['steps']:.2f}x | "
            f"{r['loop'] / r['eager']:.2f}x | {'yes' if r['same_tokens'] else 'NO'} | "
            f"{'yes' if r['loop_in_place'] else 'NO'} | "
            f"{r['loop_compile_s']:.1f} s / {r['step_compile_s']:.1f} s |")
    return "\n".join(lines) + "\n"


def run(log: Callable[[str], None] = print) -> str:
    """Each row in a process of its own (its eager loop timed before anything of
    another row compiled or ran), as bench/real_models.py does."""
    rows = []
    for name in ROWS:
        log(f"decode loop: {name}, {ROWS[name]} tokens")
        done = subprocess.run([sys.executable, __file__, "--only", name], check=True,
                              capture_output=True, text=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return render(rows, os.getloadavg())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=ROWS, help="one row, as JSON")
    arguments = parser.parse_args()
    if arguments.only:
        print(json.dumps(measure(arguments.only, ROWS[arguments.only])))
    else:
        print(run())
