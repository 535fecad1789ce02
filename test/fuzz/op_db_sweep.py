"""PyTorch's own op database through outofplace: which ops compile, which are refused with a
reason, which fail with a raw error (a torch-mlir lowering that fails, an abort).

    python test/fuzz/op_db_sweep.py --out test/Output/op_db [--ops add,cat] [--timeout 120]

For each OpInfo of `torch.testing._internal.common_methods_invocations.op_db`, its first
float32 sample on the CPU is one program, `op(*sample)`, and with an in-place variant a
second, `clone.op_(*sample)`: compiled, run on the StableHLO interpreter (no backend
compile: the sweep is about compiling) and compared with eager (random ops differ). One JSON line per program goes to results.jsonl; a worker that dies (an abort in
native code) or hangs is replaced, and the program logged as "abort" or "timeout". The
counts by outcome and the raw errors grouped by message go to summary.txt.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path


def _programs(only: set[str] | None):
    """(name, variant, op) for every OpInfo and variant, in op_db's order."""
    if "expecttest" not in sys.modules:  # imported by torch's test utilities, unused here
        import types
        import unittest

        sys.modules["expecttest"] = types.ModuleType("expecttest")
        sys.modules["expecttest"].TestCase = unittest.TestCase
    from torch.testing._internal.common_methods_invocations import op_db

    for info in op_db:
        name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        if only and info.name not in only and name not in only:
            continue
        yield name, "functional", info
        if info.inplace_variant is not None:
            yield name, "inplace", info


def _check(info, variant: str) -> dict:
    import torch
    import torch.utils._pytree as pytree

    import outofplace
    from outofplace.errors import UserError

    samples = iter(info.sample_inputs("cpu", torch.float32, requires_grad=False))
    sample = next(samples, None)
    if sample is None:
        return {"outcome": "no sample"}
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    op = info.op if variant == "functional" else info.inplace_variant

    def program(*tensors):
        values = list(leaves)
        for i, tensor in zip(positions, tensors):
            values[i] = tensor
        first, args, kwargs = pytree.tree_unflatten(values, spec)
        if variant == "inplace":
            first = first.clone()
            op(first, *args, **kwargs)
            return first
        return op(first, *args, **kwargs)

    tensors = [leaves[i] for i in positions]
    try:
        expected = program(*[t.clone() for t in tensors])
    except Exception as error:  # eager refuses the sample: nothing to compare
        return {"outcome": "eager fails", "error": f"{type(error).__name__}: {error}"[:300]}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = outofplace.compile(program, tuple(t.clone() for t in tensors))
    except UserError as error:
        return {"outcome": "refused", "error": f"{type(error).__name__}: {error}"[:500]}
    except Exception as error:
        return {"outcome": "raw error", "error": f"{type(error).__name__}: {error}"[:2000],
                "where": traceback.format_exc().splitlines()[-3][:300]}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            actual = compiled.run([t.clone() for t in tensors], {}, "interpreter")
    except Exception as error:
        return {"outcome": "run error", "error": f"{type(error).__name__}: {error}"[:1000]}
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, atol=1e-3, rtol=1e-3,
                                   check_dtype=False)
    except Exception as error:
        return {"outcome": "differs", "error": str(error)[:500]}
    return {"outcome": "passed"}


def worker(start: int, only: set[str] | None) -> None:
    """Checks programs from number `start` on, one JSON line each on stdout."""
    for number, (name, variant, info) in enumerate(_programs(only)):
        if number < start:
            continue
        print(json.dumps({"number": number, "name": name, "variant": variant,
                          "started": True}), flush=True)
        try:
            record = _check(info, variant)
        except Exception as error:
            record = {"outcome": "harness error", "error": repr(error)[:300]}
        print(json.dumps({"number": number, "name": name, "variant": variant, **record}),
              flush=True)


def _group(error: str) -> str:
    """A raw error's kind: the op torch-mlir failed to legalize, or the message's start."""
    found = re.search(r"failed to legalize operation '([^']+)'", error)
    if found:
        return f"failed to legalize {found.group(1)}"
    return re.sub(r"0x[0-9a-f]+|\d+", "N", error.split("\n")[0])[:120]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="test/Output/op_db")
    parser.add_argument("--ops", default="", help="only these OpInfo names, comma-separated")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per program")
    parser.add_argument("--start", type=int, default=0, help="from program number N on")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    only = set(args.ops.split(",")) if args.ops else None
    if args.worker is not None:
        worker(args.worker, only)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    records: dict[int, dict] = {}
    start = args.start
    while True:
        log = out / "worker.jsonl"
        log.write_text("")
        with log.open("w") as sink:
            process = subprocess.Popen(
                [sys.executable, __file__, "--worker", str(start), "--ops", args.ops],
                stdout=sink, stderr=subprocess.DEVNULL)
        started, seen, last = None, 0, time.time()
        while True:
            finished = process.poll() is not None
            lines = log.read_text().split("\n")
            complete = lines[:-1]
            for line in complete[seen:]:
                record = json.loads(line)
                last = time.time()
                if record.pop("started", False):
                    started = record
                    continue
                started = None
                records[record["number"]] = record
                with results.open("a") as f:
                    f.write(json.dumps(record) + "\n")
            seen = len(complete)
            if finished:
                break
            if started is not None and time.time() - last > args.timeout:
                process.kill()
                process.wait()
                break
            time.sleep(0.2)
        if started is None:
            break  # the worker finished
        outcome = "timeout" if process.returncode == -9 else "abort"
        records[started["number"]] = {**started, "outcome": outcome}
        with results.open("a") as f:
            f.write(json.dumps(records[started["number"]]) + "\n")
        start = started["number"] + 1
    counts = collections.Counter(r["outcome"] for r in records.values())
    groups = collections.defaultdict(list)
    for r in records.values():
        if r["outcome"] in ("raw error", "abort", "timeout", "run error", "harness error"):
            groups[_group(r.get("error", r["outcome"]))].append(f"{r['name']} ({r['variant']})")
    lines = [f"{len(records)} programs: " + ", ".join(f"{k} {v}" for k, v in counts.most_common())]
    for group, names in sorted(groups.items(), key=lambda g: -len(g[1])):
        lines.append(f"{len(names):4d}  {group}: {', '.join(names)}")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:40]))


if __name__ == "__main__":
    main()
