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

import math
import warnings

import pytest
from hypothesis import HealthCheck, assume, given, seed, settings

import fuzz_modules
import outofplace
from fuzz_modules import ModuleProgram, module_programs
from fuzz_modules_check import UpstreamDivergence, assert_module_matches_eager, eager_rejects
from test_fuzz import BASE_SEED, BUDGET, FIXED, Reports, _Stats

FIXED_PROGRAMS = 36  # about 2 s each on the three paths: under a minute on two workers
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
        REPORTS.write()


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


REPORTS = Reports(STATS, "modules-run", "modules-summary.txt", summary_text, "module fuzz")


@pytest.fixture(scope="module", autouse=True)
def _fuzz_summary(request: pytest.FixtureRequest):
    yield
    REPORTS.show(request)
