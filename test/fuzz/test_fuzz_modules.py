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
import torch
from hypothesis import HealthCheck, assume, given, seed, settings

import outofplace
from fuzz_modules import ModuleProgram, module_programs
from fuzz_modules_check import (SplitByDynamo, UpstreamDivergence,
                                assert_module_matches_eager, eager_rejects)
from test_fuzz import BASE_SEED, BUDGET, FIXED, Reports, _Stats

FIXED_PROGRAMS = 6  # about 2 s each on the three paths: 6 s on two workers
PROGRAMS_PER_SHARD = 3
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
                (outofplace.UnsupportedMutationError, UpstreamDivergence, SplitByDynamo))


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


# ------------------------------------------------------- the float64 reference's judgement
def _ema_three_ways(n: int = 4096) -> tuple:
    """`0.9 * e + 0.1 * b` of float32 state kept in a float64 buffer: eager's (two rounded
    products), XLA's (the first product contracted into the add: one rounding less) and
    the program's in float64."""
    g = torch.Generator().manual_seed(0)
    e, b = torch.randn(n, generator=g) * 10, torch.randn(n, generator=g) * 10
    eager = (0.9 * e + 0.1 * b).double()
    contracted = (0.9 * e.double() + (0.1 * b).double()).float().double()
    reference = 0.9 * e.double() + 0.1 * b.double()
    return eager, contracted, reference


EPS_FLOAT32 = torch.finfo(torch.float32).eps


def test_a_contracted_product_is_within_eager_rounding() -> None:
    from differential import assert_same
    from fuzz_modules_check import _within_eager_rounding

    eager, contracted, reference = _ema_three_ways()
    with pytest.raises(AssertionError):  # float64's tolerance tells them apart
        assert_same(contracted, eager, "the buffer")
    assert _within_eager_rounding(contracted, eager, reference, EPS_FLOAT32)


def test_a_wrong_value_is_not_within_eager_rounding() -> None:
    from fuzz_modules_check import _within_eager_rounding

    eager, contracted, reference = _ema_three_ways()
    # 1e-3 off in one element (under the reference's 3.4e-4 relative), 1e-6 relative off
    # in all, a swapped pair
    off = contracted.clone()
    off[7] += 1e-3
    assert not _within_eager_rounding(off, eager, reference, EPS_FLOAT32)
    assert not _within_eager_rounding(contracted * (1 + 1e-6), eager, reference,
                                      EPS_FLOAT32)
    swapped = contracted.clone()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert not _within_eager_rounding(swapped, eager, reference, EPS_FLOAT32)
    # NaN where eager has a number; another dtype or shape
    nan = contracted.clone()
    nan[3] = math.nan
    assert not _within_eager_rounding(nan, eager, reference, EPS_FLOAT32)
    assert not _within_eager_rounding(contracted.float(), eager, reference, EPS_FLOAT32)
    assert not _within_eager_rounding(contracted[1:], eager[1:], reference, EPS_FLOAT32)


def test_a_reference_that_took_another_branch_says_nothing() -> None:
    from fuzz_modules_check import _within_eager_rounding

    eager, contracted, reference = _ema_three_ways()
    other = reference.clone()
    other[5] += 1.0  # a comparison or a cast the float64 program took another way
    assert not _within_eager_rounding(contracted, eager, other, EPS_FLOAT32)


def test_eager_overflow_is_judged_without_the_reference() -> None:
    """Where eager's float32 overflowed and float64 did not (the module fuzzer's program
    1483, seed 63000000: a buffer squared on every call), the reference says nothing of
    that element: ours must be eager's infinity, and the others within rounding; where the
    reference overflowed alone, ours must be eager's to half the digits."""
    from fuzz_modules_check import _within_eager_rounding

    eager, contracted, reference = _ema_three_ways()
    eager, contracted, reference = eager.clone(), contracted.clone(), reference.clone()
    eager[2] = contracted[2] = math.inf
    reference[2] = 1e43
    assert _within_eager_rounding(contracted, eager, reference, EPS_FLOAT32)
    finite_instead = contracted.clone()
    finite_instead[2] = 3e38
    assert not _within_eager_rounding(finite_instead, eager, reference, EPS_FLOAT32)
    reference[9] = math.inf
    assert _within_eager_rounding(contracted, eager, reference, EPS_FLOAT32)
    off = contracted.clone()
    off[9] = eager[9] * (1 + 1e-3)
    assert not _within_eager_rounding(off, eager, reference, EPS_FLOAT32)


class _TiedHalf(torch.nn.Module):
    """The shape of the module fuzzer's program 4188 (seed 63000000): a float16 buffer and
    its transpose, registered as another buffer, updated through the transpose (eager's
    float16 `add` with alpha rounds the product in its scalar loop), the first returned."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.register_buffer("b", (torch.randn(3, 6, generator=g) * 8).round().half())
        self.register_buffer("v", self.b.t())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.v.mul_(1 - 0.9).add_(self.v, alpha=0.9)
        return self.b.unsqueeze(0) + x


def test_the_float64_reference_keeps_buffers_that_view_each_other() -> None:
    """The reference's buffers share memory where the program's do (`Module.double()`
    converted each apart: the transpose's writes no longer reached the buffer, and the
    reference said nothing of program 4188's float16 rounding)."""
    from fuzz_modules_check import _float64_reference

    reference, _ = _float64_reference(_TiedHalf, lambda m: [])
    assert reference.b.dtype == reference.v.dtype == torch.float64
    reference.v.mul_(2)
    assert torch.equal(reference.b, reference.v.t())
    assert torch.equal(reference.b, _TiedHalf().b.double() * 2)


class _Ema(torch.nn.Module):
    """The shape of the fuzzer's program 1696 (seed 61006000): an EMA of float32 state
    kept in a float64 buffer, which the output reads."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.register_buffer("b", torch.randn(64, generator=g) * 10)
        self.register_buffer("slow", torch.randn(64, generator=g) * 10)
        self.register_buffer("ema", torch.zeros(64, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.b.add_(x)
            self.slow.copy_(0.9 * self.slow + (1 - 0.9) * self.b)
            self.ema.copy_(self.slow)
        return x.sum() - self.ema


@pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax (the xla extra)")
def test_float32_rounding_in_a_float64_buffer_is_judged_against_float64() -> None:
    from differential import assert_same

    g = torch.Generator().manual_seed(2)
    calls = [[(torch.randn(64, generator=g), "contiguous")] for _ in range(3)]
    # eager's own float32 rounding is what float64's tolerance sees in the buffer: the
    # program run in float64 is not eager's to it
    eager, wide = _Ema(), _Ema().double()
    for call in calls:
        eager(call[0][0]), wide(call[0][0].double())
    with pytest.raises(AssertionError):
        assert_same(eager.ema, wide.ema, "eager's float64 buffer against float64's")
    # XLA contracts `0.9 * slow` into the add (one rounding less than eager): within
    # eager's own rounding, judged against that program in float64
    rounded: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_module_matches_eager(_Ema, lambda m: [m.ema[:8]], calls, rounded=rounded)
    assert rounded and all("'ema'" in r or "'slow'" in r or "output" in r or "views" in r
                           for r in rounded), rounded


@pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax (the xla extra)")
def test_float16_rounding_through_a_tied_buffer_is_judged_against_float64() -> None:
    """Program 4188's shape on every path: eager's float16 `add` with alpha through the
    transpose (its scalar loop rounds the product; ours rounds once) is one rounding
    from ours, within eager's own rounding of the program in float64 once the
    reference's buffers view each other as the program's do."""
    g = torch.Generator().manual_seed(3)
    calls = [[(torch.randn(6, generator=g).half(), "contiguous")] for _ in range(3)]
    rounded: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_module_matches_eager(_TiedHalf, lambda m: [m.v[:2]], calls, rounded=rounded)
    assert rounded, "eager's float16 scalar loop and ours agreed: the case tests nothing"


class _ColumnFromRow(torch.nn.Module):
    """Program 180's shape (seed 96000000): a column written from a row of the same
    buffer, at a position a 0-d tensor holds. The row's element at that column is read
    and written, so eager's result depends on the order it writes in: outofplace.compile
    refuses the statement; dynamo reads the position as a Python int and runs the
    statement eagerly between two graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("position", torch.tensor(4))
        self.register_buffer("b", torch.arange(16.0).reshape(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.position += 1
        self.b[:, self.position % 4] = self.b[0]
        return x + 1


@pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax (the xla extra)")
def test_a_refusal_torch_compile_runs_eagerly_is_split_not_failed() -> None:
    calls = [[(torch.randn(3), "contiguous")] for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(SplitByDynamo) as split:
            assert_module_matches_eager(_ColumnFromRow, lambda m: [], calls)
    assert isinstance(split.value.refusal, outofplace.UnsupportedMutationError)
    assert "shares memory with the tensor it writes" in split.value.reason
    # on outofplace.compile alone: the refusal itself
    with pytest.raises(outofplace.UnsupportedMutationError, match="index_put_"):
        assert_module_matches_eager(_ColumnFromRow, lambda m: [], calls, paths=("xla",))
