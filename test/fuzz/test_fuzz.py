"""Differential fuzzing: random programs with in-place mutation against eager PyTorch.

Each program (fuzz_programs.py) is compiled and run on every engine of
differential.ENGINES; outputs and mutated inputs must equal eager's. A program that raises
UnsupportedMutationError is a refusal: counted by reason, never a failure; so is a program
IREE's compiler rejects (IreeCompileError, after the other engines matched eager). A
mismatch, any other exception or a crash fails; hypothesis shrinks it and prints the
shortest program it finds as a runnable reproducer. A refused program goes through
torch.compile(backend="outofplace") too: compiled there alone it fails, unless
dynamo runs the refused statement eagerly between two graphs; a difference torch's own
backends make too is PyTorch's, counted apart (both_paths.py).

Budget: a fixed-seed run of FIXED_PROGRAMS programs when OUTOFPLACE_FUZZ_EXAMPLES is unset;
`OUTOFPLACE_FUZZ_EXAMPLES=N` (`make fuzz N=...`) runs N programs from fresh seeds. The work
is split into shards (separate tests) so pytest-xdist spreads it over its workers.

After each shard, each process writes its counts to test/Output/fuzz/ and a merged
summary.txt there (programs, refusals by reason, seconds per program); the summary is also
printed (without xdist) or given as a warning (with xdist, one per worker).
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import json
import math
import os
import random
import re
import time
import warnings
from pathlib import Path
from typing import Callable
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis.internal.conjecture import engine as hypothesis_engine

import outofplace
from outofplace.backends.iree import IreeCompileError
import both_paths
from fuzz_programs import Program, assert_program_matches_eager, programs

FIXED_PROGRAMS = 24  # the fixed-seed budget of `make test`: about half a second each
PROGRAMS_PER_SHARD = 6
LONG_PROGRAMS_PER_SHARD = 100
BUDGET = int(os.environ.get("OUTOFPLACE_FUZZ_EXAMPLES", "0") or 0)
FIXED = BUDGET <= 0
TOTAL = FIXED_PROGRAMS if FIXED else BUDGET
PER_SHARD = PROGRAMS_PER_SHARD if FIXED else LONG_PROGRAMS_PER_SHARD
SHARDS = max(1, math.ceil(TOTAL / PER_SHARD))
# Fixed seeds by default; a long run draws a fresh one, the same in every xdist worker
# (from the run's id), printed in the summary so OUTOFPLACE_FUZZ_SEED repeats the run.
if FIXED or os.environ.get("OUTOFPLACE_FUZZ_SEED"):
    BASE_SEED = int(os.environ.get("OUTOFPLACE_FUZZ_SEED", "0") or 0)
elif os.environ.get("PYTEST_XDIST_TESTRUNUID"):
    BASE_SEED = int(hashlib.sha256(
        os.environ["PYTEST_XDIST_TESTRUNUID"].encode()).hexdigest()[:8], 16)
else:
    BASE_SEED = random.randrange(2**31)
REPORT_DIR = Path(__file__).resolve().parents[1] / "Output" / "fuzz"
# Each shrink step compiles a program (about a second): bound the time hypothesis spends
# minimising one failure (its own limit, an internal constant, is five minutes).
SHRINK_SECONDS = 60 if FIXED else 120
hypothesis_engine.MAX_SHRINKING_SECONDS = SHRINK_SECONDS


class _Stats:
    """What this process ran: programs passed, refusals by reason, time per program."""

    def __init__(self) -> None:
        self.passed = 0
        self.refused: collections.Counter[str] = collections.Counter()
        self.refusal_example: dict[str, str] = {}
        self.eager_rejects = 0
        self.failed = 0
        self.shrink_runs = 0  # runs while hypothesis minimises a failure, not counted above
        self.seconds = 0.0
        self.shrinking = False  # this shard has failed: further runs are shrink attempts

    @property
    def programs(self) -> int:
        return self.passed + sum(self.refused.values()) + self.failed

    def count(self, run: Callable[[], None], source: Callable[[], str],
              refusals: tuple[type[BaseException], ...]) -> None:
        """Runs one program's check and counts its outcome: passed, refused (`refusals`,
        by reason, keeping the shortest `source()` of each), or failed (re-raised, and
        the shard's later runs are hypothesis shrinking it)."""
        shrinking = self.shrinking
        start = time.perf_counter()
        try:
            run()
        except refusals as error:
            if shrinking:
                return
            reason = refusal_reason(error)
            self.refused[reason] += 1
            example = source()
            if reason not in self.refusal_example or \
                    len(example) < len(self.refusal_example[reason]):
                self.refusal_example[reason] = example
            return
        except BaseException:
            if not shrinking:
                self.failed += 1
                self.shrinking = True
            raise
        finally:
            if shrinking:
                self.shrink_runs += 1
            else:
                self.seconds += time.perf_counter() - start
        if not shrinking:
            self.passed += 1

    def as_json(self) -> dict:
        return {"passed": self.passed, "refused": dict(self.refused),
                "refusal_example": self.refusal_example, "failed": self.failed,
                "eager_rejects": self.eager_rejects, "shrink_runs": self.shrink_runs,
                "seconds": self.seconds}


STATS = _Stats()


def refusal_reason(error: outofplace.UnsupportedMutationError | IreeCompileError) -> str:
    """The op and reason of a refusal, without the source line and index. IREE rejecting
    a program (after the other engines ran it like eager) is loud, as a refusal is: its
    first error line is the reason."""
    if isinstance(error, IreeCompileError):
        errors = [line for line in str(error).splitlines() if line.startswith("error:")]
        return "IREE: " + (errors[0] if errors else str(error).splitlines()[0])[:200]
    reason = re.sub(r"<fuzzed(-module)?-[\d-]+>:\d+", "<line>", error.reason)
    return f"{error.op}: {reason}"


def check_program(program: Program) -> None:
    """Compiled against eager on every engine; refusals counted, anything else fails."""
    f, args, kwargs = program.build()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f(*args, **kwargs)
    except Exception:  # noqa: BLE001 - not a valid eager program: not a test case
        if not STATS.shrinking:
            STATS.eager_rejects += 1
        assume(False)

    def run() -> None:
        # Every pass of the lowering its own stage: a pass that breaks the IR is named.
        with warnings.catch_warnings(), \
                mock.patch.dict(os.environ, {"OUTOFPLACE_VERIFY_EACH": "1"}):
            warnings.simplefilter("ignore", UserWarning)
            assert_program_matches_eager(program)

    def both() -> None:  # a refusal goes through torch.compile too (both_paths.py)
        both_paths.check_both_paths(run, f, args, kwargs, program.reproducer)

    STATS.count(both, program.function_source,
                (outofplace.UnsupportedMutationError, IreeCompileError,
                 both_paths.PyTorchDivergence))


@pytest.mark.parametrize("shard", range(SHARDS))
def test_fuzzed_program_matches_eager(shard: int) -> None:
    count = min(PER_SHARD, TOTAL - shard * PER_SHARD)
    STATS.shrinking = False

    @seed(BASE_SEED + shard)
    @settings(max_examples=count, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(program=programs())
    def fuzz(program: Program) -> None:
        check_program(program)

    try:
        fuzz()
    finally:  # after every shard: a long run that is cut short still has its counts
        REPORTS.write()


MESH_SHARDS = 1  # of PROGRAMS_PER_SHARD programs, also compiled on a mesh


def _fuzz_on(engines: list[str], first_seed: int, monkeypatch) -> None:
    """PROGRAMS_PER_SHARD programs from `first_seed` on `engines` (differential.ENGINES)."""
    import differential

    monkeypatch.setattr(differential, "ENGINES", engines)
    STATS.shrinking = False

    @seed(first_seed)
    @settings(max_examples=PROGRAMS_PER_SHARD, deadline=None, database=None,
              derandomize=False, suppress_health_check=list(HealthCheck), print_blob=False)
    @given(program=programs())
    def fuzz(program: Program) -> None:
        check_program(program)

    try:
        fuzz()
    finally:
        REPORTS.write()


@pytest.mark.parametrize("shard", range(MESH_SHARDS))
def test_fuzzed_program_matches_eager_on_a_mesh(shard: int, monkeypatch) -> None:
    """Programs compiled again on a mesh of 2 or 4 XLA:CPU devices, their written
    arguments (some programs' read ones too) split (differential.on_a_mesh), against
    eager on a first call and a second through the sharded planned call; from seeds of
    their own."""
    _fuzz_on(["mesh"], BASE_SEED + 1_000_000 + shard, monkeypatch)


DYNAMO_SHARDS = 2  # of PROGRAMS_PER_SHARD programs, also through torch.compile


@pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax (the xla extra)")
@pytest.mark.parametrize("shard", range(DYNAMO_SHARDS))
def test_fuzzed_program_matches_eager_on_both_paths(shard: int, monkeypatch) -> None:
    """Programs through `outofplace.compile` on XLA and through
    `torch.compile(backend="outofplace", dynamic=False)` (differential.by_dynamo), two
    calls each, against eager; a program the first path compiles and the second refuses
    fails. From seeds of their own."""
    _fuzz_on(["xla", "dynamo"], BASE_SEED + 2_000_000 + shard, monkeypatch)


# ----------------------------------------------------------------------------- summary
def _merge(reports: list[dict]) -> dict:
    total = {"passed": 0, "refused": collections.Counter(), "refusal_example": {},
             "failed": 0, "eager_rejects": 0, "shrink_runs": 0, "seconds": 0.0}
    for report in reports:
        for key in ("passed", "failed", "eager_rejects", "shrink_runs", "seconds"):
            total[key] += report[key]
        total["refused"].update(report["refused"])
        for reason, source in report["refusal_example"].items():
            known = total["refusal_example"].get(reason)
            if known is None or len(source) < len(known):
                total["refusal_example"][reason] = source
    return total


def summary_text(report: dict, title: str) -> str:
    refused = sum(report["refused"].values())
    programs_run = report["passed"] + refused + report["failed"]
    per_program = report["seconds"] / programs_run if programs_run else 0.0
    lines = [f"{title}: {programs_run} programs, {report['passed']} match eager, "
             f"{refused} refused, {report['failed']} failed "
             f"({report['eager_rejects']} rejected by eager first, "
             f"{report['shrink_runs']} runs shrinking failures); "
             f"{per_program:.2f} s per program (seed {BASE_SEED})"]
    for reason, count in collections.Counter(report["refused"]).most_common():
        lines.append(f"  {count:5d} refused  {reason}")
    return "\n".join(lines)


class Reports:
    """One fuzzer's counts, written by each process to REPORT_DIR as `<prefix>-<run>-
    <worker>.json` and merged into `<prefix>-summary.txt` (with the shortest program of
    each refusal); `summarize(report, title)` is the fuzzer's summary text."""

    def __init__(self, stats: _Stats, prefix: str, summary: str,
                 summarize: Callable[[dict, str], str], title: str) -> None:
        self.stats, self.prefix, self.summary = stats, prefix, summary
        self.summarize, self.title = summarize, title

    def write(self) -> str:
        """This process's counts to REPORT_DIR, then the merged summary of the run."""
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        REPORT_DIR.mkdir(parents=True, exist_ok=True)
        with open(REPORT_DIR / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for stale in REPORT_DIR.glob(f"{self.prefix}-*.json"):
                if not stale.name.startswith(f"{self.prefix}-{run}-"):
                    stale.unlink()
            (REPORT_DIR / f"{self.prefix}-{run}-{worker}.json").write_text(
                json.dumps(self.stats.as_json()))
            merged = _merge([json.loads(p.read_text()) for p in
                             sorted(REPORT_DIR.glob(f"{self.prefix}-{run}-*.json"))])
            text = self.summarize(merged, f"{self.title} (all workers so far)")
            refusals = [f"--- {reason}\n{source}"
                        for reason, source in merged["refusal_example"].items()]
            (REPORT_DIR / self.summary).write_text(
                text + "\n\nShortest program per refusal:\n" + "\n".join(refusals))
        return text

    def show(self, request: pytest.FixtureRequest) -> None:
        """At the end of the test module: the merged summary on the terminal (a warning
        under xdist, whose workers' output pytest does not show)."""
        if not self.stats.programs and not self.stats.eager_rejects:
            return
        mine = self.summarize(self.stats.as_json(), f"{self.title} (this process)")
        merged = self.write()
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        if os.environ.get("PYTEST_XDIST_WORKER") is None and reporter is not None and \
                capture is not None:
            with capture.global_and_fixture_disabled():  # printed, not captured
                reporter.write_line("")
                reporter.write_line(merged)
        else:
            warnings.warn(f"{mine}\n{merged}\n(summary: {REPORT_DIR / self.summary})",
                          stacklevel=1)


REPORTS = Reports(STATS, "run", "summary.txt", summary_text, "fuzz")


@pytest.fixture(scope="module", autouse=True)
def _fuzz_summary(request: pytest.FixtureRequest):
    yield
    REPORTS.show(request)
