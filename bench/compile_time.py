"""Compile time as programs grow: N mutations through varied views into a few buffers.

outofplace is timed per stage (torch.export, import, the inplace-to-outofplace pass,
lowering to StableHLO); torch-mlir's default path (`export_and_import(...,
output_type="stablehlo")`, which functionalizes) is timed in total on the same program.

outofplace runs in a worker process (`python bench/compile_time.py outofplace N1,N2,...
DEADLINE`) that is stopped at the run's deadline; torch-mlir in one worker process per N
(`python bench/compile_time.py torch-mlir N`), stopped past 5 minutes. Both are single
threaded Python and run at the same time, one per core.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

SKIP_AFTER = 300.0  # seconds: torch-mlir programs projected to take longer are skipped


PROGRAM_SOURCE = """\
# a: [16, 64], b: [8, 16, 16], c: [64], x: [16, 64]; N writes, j = i % 8
a[j] = x[j]                              # i % 5 == 0: select, copy_
b[j, 2:6].add_(1.0)                      # i % 5 == 1: slice of select, add_
c[4*j:4*j+4].mul_(0.5)                   # i % 5 == 2: slice, mul_
a.view(-1)[8*j:8*j+8] = x[0, :8]         # i % 5 == 3: slice of view, copy_
b[:, j].select(0, 1).sub_(x[1, :16])     # i % 5 == 4: select of select, sub_
return a.sum() + b.sum() + c.sum()"""


def program(n: int) -> Callable:
    """A step with `n` in-place writes, cycling through five kinds of view
    (PROGRAM_SOURCE)."""

    def step(a, b, c, x):
        for i in range(n):
            j = i % 8
            kind = i % 5
            if kind == 0:
                a[j] = x[j]
            elif kind == 1:
                b[j, 2:6].add_(1.0)
            elif kind == 2:
                c[j * 4:(j + 1) * 4].mul_(0.5)
            elif kind == 3:
                a.view(-1)[j * 8:(j + 1) * 8] = x[0, :8]
            else:
                b[:, j].select(0, 1).sub_(x[1, :16])
        return a.sum() + b.sum() + c.sum()

    step.__name__ = f"step_{n}"
    return step


def inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (torch.zeros(16, 64), torch.zeros(8, 16, 16), torch.zeros(64),
            torch.randn(16, 64, generator=g))


def check_program(n: int) -> bool:
    """outofplace's result (reference interpreter) equals eager's on the program."""
    import outofplace

    eager = [t.clone() for t in inputs()]
    out = program(n)(*eager)
    ours = [t.clone() for t in inputs()]
    got = outofplace.compile(program(n), tuple(t.clone() for t in inputs()),
                             engine="interpreter")(*ours)
    return bool(torch.allclose(out, got[0] if isinstance(got, list) else got, rtol=1e-4)
                and all(torch.allclose(e, o) for e, o in zip(eager, ours)))


@dataclass
class Stages:
    n: int
    seconds: dict[str, float] = field(default_factory=dict)  # stage -> wall seconds
    cpu: dict[str, float] = field(default_factory=dict)  # stage -> CPU seconds (process)
    ops: int = 0  # ops in the StableHLO
    error: str | None = None


def time_outofplace(n: int) -> Stages:
    import outofplace
    from outofplace.frontend import importer as frontend, tracing

    f = program(n)
    args = inputs()
    result = Stages(n)
    marks = [(time.perf_counter(), time.process_time())]
    ep = tracing.export(f, args)
    marks.append((time.perf_counter(), time.process_time()))
    context = outofplace.make_context()
    module, _ = frontend.import_program(ep, context)
    marks.append((time.perf_counter(), time.process_time()))
    with context:
        outofplace.inplace_to_outofplace(module)
        marks.append((time.perf_counter(), time.process_time()))
        outofplace.lower_to_stablehlo(module)
        marks.append((time.perf_counter(), time.process_time()))
        result.ops = sum(1 for _ in module.body.operations[0].regions[0].blocks[0]
                         .operations)
    for clock, into in ((0, result.seconds), (1, result.cpu)):
        for stage, a, b in zip(("export", "import", "pass", "lower"), marks, marks[1:]):
            into[stage] = b[clock] - a[clock]
        into["total"] = marks[-1][clock] - marks[0][clock]
    del module, ep, context
    gc.collect()
    return result


def warm_up_outofplace() -> None:
    """First compile of a process pays for lazy imports and registrations; not timed."""
    time_outofplace(5)


# -------------------------------------------------------------- torch-mlir worker side
def _torch_mlir_once(n: int) -> tuple[float, float]:
    """(wall, CPU) seconds of torch-mlir's default path on the N-write program."""
    import torch_mlir.fx

    f = program(n)
    module = type(f.__name__, (torch.nn.Module,),
                  {"forward": lambda self, *a: f(*a)})()
    t0, c0 = time.perf_counter(), time.process_time()
    torch_mlir.fx.export_and_import(module, *inputs(), output_type="stablehlo")
    return time.perf_counter() - t0, time.process_time() - c0


def worker(n: int) -> None:
    """Prints {"n", "seconds", "cpu"} for torch-mlir's default path."""
    _torch_mlir_once(5)  # warm-up, not timed
    wall, cpu = _torch_mlir_once(n)
    print(json.dumps({"n": n, "seconds": wall, "cpu": cpu}), flush=True)


STARTUP = 40.0  # seconds a worker may take to import and warm up, beyond SKIP_AFTER


class TorchMlirWorker:
    """Runs torch-mlir's default path on each N in turn, one process per N, in a thread.

    A process that runs past 5 minutes (plus its start-up) is killed and the N marked
    skipped; an N projected (linearly, from the nearest N done) past the run's deadline
    is not started.
    """

    def __init__(self, ns: list[int], deadline: float) -> None:
        self.ns = ns
        self.deadline = deadline
        self.found: dict[int, dict[str, Any]] = {}
        self.current: subprocess.Popen | None = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        for n in self.ns:
            done = [(m, e["seconds"]) for m, e in self.found.items() if "seconds" in e]
            projected = 0.0
            if done:
                near = min(done, key=lambda d: abs(d[0] - n))
                projected = near[1] * n / near[0]
            left = self.deadline - time.time()
            if self.stopped.is_set() or projected + STARTUP > left:
                self.found[n] = {"n": n, "skipped": f"projected {projected:.0f} s, "
                                 f"{max(left, 0):.0f} s of the time budget left"}
                continue
            timeout = min(SKIP_AFTER + STARTUP, left)
            self.current = subprocess.Popen(
                [sys.executable, __file__, "torch-mlir", str(n)], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, env=env)
            try:
                out, _ = self.current.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.current.kill()  # our own child, by its handle
                self.current.communicate()
                why = "ran past 5 minutes, stopped" if timeout < left else \
                    "stopped at the time budget's end"
                self.found[n] = {"n": n, "skipped": why}
                continue
            for line in out.splitlines():
                try:
                    self.found[n] = json.loads(line)
                except json.JSONDecodeError:
                    continue
            self.found.setdefault(n, {"n": n, "skipped": "the worker failed"})

    def results(self) -> dict[int, dict[str, Any]]:
        """Waits for the thread (it stops itself at the deadline)."""
        self.thread.join(timeout=max(1.0, self.deadline - time.time() + 5))
        self.kill()
        return dict(self.found)

    def kill(self) -> None:
        self.stopped.set()
        if self.current is not None and self.current.poll() is None:
            self.current.kill()  # our own child, by its handle


def outofplace_worker(ns: list[int], deadline: float) -> None:
    """Prints one JSON line for the program check, then one per N (see `Stages`); an N
    projected past the deadline is skipped."""
    print(json.dumps({"check": check_program(40)}), flush=True)
    warm_up_outofplace()
    last: Stages | None = None
    for n in ns:
        if last is not None:
            projected = last.seconds["total"] * (n / last.n) * 1.3
            left = deadline - time.time()
            if projected > left:
                print(json.dumps({"n": n, "error": f"skipped: projected {projected:.0f} s, "
                                  f"{max(left, 0):.0f} s of the time budget left"}),
                      flush=True)
                continue
        last = time_outofplace(n)
        print(json.dumps({"n": n, "seconds": last.seconds, "cpu": last.cpu,
                          "ops": last.ops}), flush=True)


def run(ns: list[int], torch_mlir_ns: list[int], deadline: float,
        log: Callable[[str], None]) -> tuple[list[Stages], dict[int, dict[str, Any]], bool]:
    """outofplace in one worker process (stopped at the deadline, whatever it is doing),
    torch-mlir in another, one per N, both at once."""
    theirs = TorchMlirWorker(torch_mlir_ns, deadline) if torch_mlir_ns else None
    rows: dict[int, Stages] = {}
    check: list[bool] = []
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    ours = subprocess.Popen(
        [sys.executable, __file__, "outofplace", ",".join(map(str, ns)), str(deadline)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

    def read() -> None:
        for line in ours.stdout:  # type: ignore[union-attr]
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "check" in entry:
                check.append(entry["check"])
                continue
            stages = Stages(entry["n"], entry.get("seconds", {}), entry.get("cpu", {}),
                            entry.get("ops", 0), entry.get("error"))
            rows[stages.n] = stages
            log(f"compile N={stages.n}: " + (stages.error or " ".join(
                f"{k}={v:.2f}s" for k, v in stages.seconds.items()) +
                f" (CPU total {stages.cpu['total']:.2f}s)"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stopped = False
    try:
        ours.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        ours.kill()  # our own child, by its handle
        ours.wait()
        stopped = True
    reader.join(timeout=5)
    found = theirs.results() if theirs else {}
    if theirs:
        theirs.kill()
    missing = [n for n in ns if n not in rows]
    for i, n in enumerate(missing):
        if not stopped:
            why = f"the worker failed (exit code {ours.returncode})"
        else:
            why = "stopped at the time budget's end" if i == 0 else \
                "not started: the time budget ran out"
        rows[n] = Stages(n, error=why)
    for n, entry in sorted(found.items()):
        log(f"torch-mlir N={n}: {entry}")
    return [rows[n] for n in ns], found, (check[0] if check else None)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "torch-mlir":
        worker(int(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "outofplace":
        outofplace_worker([int(n) for n in sys.argv[2].split(",")], float(sys.argv[3]))
    else:
        sys.exit("usage: compile_time.py torch-mlir N | outofplace N1,N2,... DEADLINE")
