"""Per-step time of each KV-cache update on IREE (llvm-cpu), the cache device-resident.

IREE's local device reads and writes host memory, and `engine="iree"` imports the
caller's tensors without a copy: the cache stays in the caller's tensor, and every step is
`compiled(cache, *rest)`, the call a user makes (argument checks, import, invoke, results
back through DLPack). Each row also says whether IREE's alias check
(`Compiled.alias_problems("iree")`) proves the update in place, whether the cache's
memory stayed the same every step, and whether the final cache equals eager PyTorch's.

    .venv/bin/python bench/iree_kv.py --sizes 64,256     # prints the markdown section
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore")

import patterns as pat  # noqa: E402


@dataclass
class IreeRow:
    pattern: str
    cache_bytes: int
    step_seconds: float | None = None
    steps: int = 0
    compile_seconds: float = 0.0
    problems: list[str] | None = None
    same_memory: bool | None = None
    correct: bool | None = None
    error: str | None = None


def _time(step: Callable[[], object], warmup: int = 3, min_steps: int = 20,
          seconds: float = 1.0) -> tuple[float, int]:
    for _ in range(warmup):
        step()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_steps or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if len(times) >= 2000:
            break
    return statistics.median(times), len(times)


def run(sizes: list[int], log: Callable[[str], None],
        only: list[str] | None = None) -> list[IreeRow]:
    import outofplace

    rows = []
    for pattern in pat.patterns():
        if only and pattern.name not in only:
            continue
        for size in sizes:
            args = pattern.make_args(size)
            row = IreeRow(pattern.name, args[0].numel() * 4)
            try:
                t0 = time.perf_counter()
                compiled = outofplace.compile(pattern.fn, args, engine="iree")
                row.problems = compiled.alias_problems("iree")
                row.compile_seconds = time.perf_counter() - t0
                expected = args[0].clone()
                pattern.fn(expected, *args[1:])
                cache, rest = torch.zeros_like(args[0]), args[1:]
                address = cache.data_ptr()
                same = []

                def step() -> None:
                    compiled(cache, *rest)
                    same.append(cache.data_ptr() == address)

                row.step_seconds, row.steps = _time(step)
                row.same_memory = all(same)
                row.correct = bool(torch.equal(cache, expected))
                del compiled, cache, expected
            except Exception as error:  # noqa: BLE001 - reported, not hidden
                row.error = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            del args
            gc.collect()
            rows.append(row)
            log(f"iree {row.pattern:17s} {row.cache_bytes >> 20:5d} MiB "
                + (f"{row.step_seconds * 1e3:.3f} ms/step, alias check "
                   f"{'proved' if not row.problems else row.problems}, "
                   f"same memory {row.same_memory}, correct {row.correct}"
                   if row.error is None else row.error))
    return rows


def render(rows: list[IreeRow]) -> str:
    """The IREE section of docs/performance.md."""
    import importlib.metadata as metadata

    sizes = sorted({r.cache_bytes for r in rows})
    by = {(r.pattern, r.cache_bytes): r for r in rows}
    out = ["## KV-cache updates on IREE\n",
           f"iree-base-compiler {metadata.version('iree-base-compiler')}, llvm-cpu for the "
           "host CPU, the `local-sync` driver (`bench/iree_kv.py`). The cache is the "
           "caller's tensor, imported without a copy every step: it is the device memory, "
           "so it stays resident. A step is the user's call `compiled(cache, *rest)` "
           "(median ms). \"in place\": `alias_problems(\"iree\")` finds nothing in IREE's "
           "stream-phase program and the cache's memory was the same after every step; "
           "\"correct\": the final cache equals eager PyTorch's.\n",
           "| pattern | " + " | ".join(f"{s >> 20} MiB" for s in sizes) +
           " | in place | correct | compile (s) |",
           "|---|" + "---:|" * len(sizes) + "---|---|---:|"]
    for name in dict.fromkeys(r.pattern for r in rows):
        cells, in_place, correct, compile_s = [], [], [], []
        for size in sizes:
            r = by.get((name, size))
            if r is None or r.error:
                cells.append("FAIL" if r else "")
                continue
            cells.append(f"{r.step_seconds * 1e3:.3f}")
            in_place.append(not r.problems and r.same_memory)
            correct.append(r.correct)
            compile_s.append(r.compile_seconds)
        out.append(f"| {name} | " + " | ".join(cells) +
                   f" | {'yes' if in_place and all(in_place) else 'NO'} | "
                   f"{'yes' if correct and all(correct) else 'NO'} | "
                   f"{statistics.median(compile_s) if compile_s else 0:.1f} |")
    failures = [r for r in rows if r.error or r.problems]
    for r in failures:
        out.append(f"\n- {r.pattern} at {r.cache_bytes >> 20} MiB: "
                   f"{r.error or '; '.join(r.problems)}")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--patterns", type=lambda s: s.split(","), default=None)
    args = parser.parse_args()
    rows = run([int(s) << 20 for s in args.sizes.split(",")],
               lambda m: print(m, file=sys.stderr, flush=True), args.patterns)
    print(render(rows))


if __name__ == "__main__":
    main()
