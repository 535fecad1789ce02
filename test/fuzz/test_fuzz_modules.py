"""Differential fuzzing of nn.Modules with state, called several times, on both paths.

Each program (fuzz_modules.py) runs through `outofplace.compile` (XLA) and through
`torch.compile(backend="outofplace")` with dynamic=False and with the default, 3 or 4
calls each, compared with eager after every call (fuzz_modules.assert_module_matches_eager).
A refusal by every path is counted by reason; a mismatch, a raw error, a crash or a
program one path compiles and another refuses fails, and hypothesis shrinks it to a
runnable reproducer. A program eager rejects is not a test case.

Budget: FIXED_PROGRAMS programs from fixed seeds when OUTOFPLACE_FUZZ_EXAMPLES is unset (in
`make test`); `OUTOFPLACE_FUZZ_EXAMPLES=N` runs N from a fresh seed (OUTOFPLACE_FUZZ_SEED
repeats one). Counts go to test/Output/fuzz/modules-summary.txt after every shard.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import warnings

import pytest
from hypothesis import HealthCheck, assume, given, seed, settings

import fuzz_modules
import outofplace
from fuzz_modules import ModuleProgram, module_programs
from fuzz_modules_check import UpstreamDivergence, assert_module_matches_eager, eager_rejects
from test_fuzz import BASE_SEED, BUDGET, FIXED, REPORT_DIR, _merge, _Stats

FIXED_PROGRAMS = 48  # about 2 s each on the three paths: under a minute on two workers
PROGRAMS_PER_SHARD = 6
LONG_PROGRAMS_PER_SHARD = 50
TOTAL = FIXED_PROGRAMS if FIXED else BUDGET
PER_SHARD = PROGRAMS_PER_SHARD if FIXED else LONG_PROGRAMS_PER_SHARD
SHARDS = max(1, math.ceil(TOTAL / PER_SHARD))
SEED_OFFSET = 3_000_000  # seeds of their own, apart from test_fuzz.py's shards

STATS = _Stats()


def check_module_program(program: ModuleProgram) -> None:
    cls, held, calls = program.build()
    if eager_rejects(cls, held, calls):
        if not STATS.shrinking:
            STATS.eager_rejects += 1
        assume(False)

    def run() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_module_matches_eager(cls, held, calls)

    STATS.count(run, program.reproducer,
                (outofplace.UnsupportedMutationError, UpstreamDivergence))


@pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax (the xla extra)")
@pytest.mark.parametrize("shard", range(SHARDS))
def test_fuzzed_module_matches_eager_on_both_paths(shard: int) -> None:
    count = min(PER_SHARD, TOTAL - shard * PER_SHARD)
    STATS.shrinking = False

    @seed(BASE_SEED + SEED_OFFSET + shard)
    @settings(max_examples=count, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(program=module_programs())
    def fuzz(program: ModuleProgram) -> None:
        check_module_program(program)

    try:
        fuzz()
    finally:
        _write_reports()


def summary_text(report: dict, title: str) -> str:
    refused = sum(report["refused"].values())
    total = report["passed"] + refused + report["failed"]
    per_program = report["seconds"] / total if total else 0.0
    lines = [f"{title}: {total} module programs, {report['passed']} match eager on every "
             f"path, {refused} refused by every path, {report['failed']} failed "
             f"({report['eager_rejects']} rejected by eager first, "
             f"{report['shrink_runs']} runs shrinking failures); {per_program:.2f} s per "
             f"program (seeds {BASE_SEED + SEED_OFFSET}..{BASE_SEED + SEED_OFFSET + SHARDS - 1})"]
    for reason, count in sorted(report["refused"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {count:5d} refused  {reason}")
    return "\n".join(lines)


def _write_reports() -> str:
    """This process's counts to REPORT_DIR, then the merged summary of the run."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    with open(REPORT_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in REPORT_DIR.glob("modules-run-*.json"):
            if not stale.name.startswith(f"modules-run-{run}-"):
                stale.unlink()
        (REPORT_DIR / f"modules-run-{run}-{worker}.json").write_text(
            json.dumps(STATS.as_json()))
        merged = _merge([json.loads(p.read_text())
                         for p in sorted(REPORT_DIR.glob(f"modules-run-{run}-*.json"))])
        text = summary_text(merged, "module fuzz (all workers so far)")
        refusals = [f"--- {reason}\n{source}"
                    for reason, source in merged["refusal_example"].items()]
        (REPORT_DIR / "modules-summary.txt").write_text(
            text + "\n\nShortest program per refusal:\n" + "\n".join(refusals))
    return text


@pytest.fixture(scope="module", autouse=True)
def _fuzz_summary(request: pytest.FixtureRequest):
    yield
    if not STATS.programs and not STATS.eager_rejects:
        return
    merged = _write_reports()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if os.environ.get("PYTEST_XDIST_WORKER") is None and reporter is not None and \
            capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(merged)
    else:
        warnings.warn(f"{summary_text(STATS.as_json(), 'module fuzz (this process)')}\n"
                      f"{merged}\n(summary: {REPORT_DIR / 'modules-summary.txt'})",
                      stacklevel=1)
