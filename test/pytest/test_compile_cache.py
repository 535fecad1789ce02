"""The persistent compile cache (compile_cache.py): a second process compiling the same
program skips outofplace's passes and XLA's compile; anything that changes the StableHLO
misses; off, it writes nothing; a damaged entry is compiled again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import outofplace
from outofplace import compile_cache

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]

# A program with a written buffer, a written input and an inlined constant (a plain tensor
# attribute), compiled and called once; prints the cache's counts, the stages that ran
# (logging) and whether the call matched eager.
SCRIPT = textwrap.dedent("""
    import copy, json, logging, sys
    import torch
    import outofplace
    from outofplace import compile_cache

    started = []
    class Stages(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if message.endswith(": started"):
                started.append(message.removesuffix(": started"))
    logging.getLogger("outofplace").addHandler(Stages())
    logging.getLogger("outofplace").setLevel(logging.INFO)

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(4, 8))
            self.scale = torch.arange(8.0) / 8  # a constant of the trace
        def forward(self, pos, k, x):
            self.cache[pos] = k * self.scale
            x.mul_(2)
            return self.cache.sum(0) + x

    torch.manual_seed(0)
    model = Step()
    eager = copy.deepcopy(model)
    args = (torch.tensor(2), torch.randn(8), torch.randn(8))
    compiled = outofplace.compile(model, args)
    mine, theirs = copy.deepcopy(args), copy.deepcopy(args)
    with torch.no_grad():
        out = compiled(*mine)
        expected = eager(*theirs)
    same = torch.equal(out, expected) and torch.equal(mine[2], theirs[2]) and \\
        torch.equal(model.cache, eager.cache)
    print(json.dumps({"stats": dict(compile_cache.stats), "started": started,
                      "same": same, "report": compiled.in_place_report}))
""")


def _run(tmp_path: Path, **env: str) -> dict:
    script = tmp_path / "program.py"
    script.write_text(SCRIPT)
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python"),
                   "OUTOFPLACE_CACHE_DIR": str(tmp_path / "cache"), "OUTOFPLACE_CACHE": "1",
                   **env}
    done = subprocess.run([sys.executable, str(script)], env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _entries(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) \
        if directory.exists() else []


def test_a_second_process_reads_the_cache(tmp_path):
    first = _run(tmp_path)
    assert first["same"]
    assert first["stats"] == {"lowered miss": 1, "lowered write": 1,
                              "xla miss": 1, "xla write": 1}
    assert first["started"] == ["compile", "trace", "import", "inplace-to-outofplace",
                                "outofplace-lower-to-stablehlo", "xla compile"]
    assert len(_entries(tmp_path / "cache")) == 2
    second = _run(tmp_path)
    assert second["same"]
    assert second["stats"] == {"lowered hit": 1, "xla hit": 1}
    # traced and imported again (the key, the signature); no pass, no XLA compile
    assert second["started"] == ["compile", "trace", "import"]
    assert second["report"] == first["report"] == {"cache": "in place", "x": "in place"}


def test_off_writes_nothing(tmp_path):
    result = _run(tmp_path, OUTOFPLACE_CACHE="0")
    assert result["same"]
    assert result["stats"] == {}
    assert "inplace-to-outofplace" in result["started"]
    assert _entries(tmp_path / "cache") == []


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTOFPLACE_CACHE", "1")
    monkeypatch.setenv("OUTOFPLACE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


class Scaled(torch.nn.Module):
    """x.mul_(w) with w a constant of the trace (a plain tensor attribute)."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(self.w)
        return x.sum()


def _compile_and_call(model: torch.nn.Module, **options) -> tuple[dict, torch.Tensor]:
    """The cache's counts during a compile and a call of `model` on a fresh x, and x."""
    before = compile_cache.stats.copy()
    x = torch.ones(32, 32)
    outofplace.compile(model, (torch.ones(32, 32),), **options)(x)
    return dict(compile_cache.stats - before), x


def test_a_changed_constant_or_option_misses(cache_dir):
    w = torch.randn(32, 32)
    first, x = _compile_and_call(Scaled(w))
    assert first == {"lowered miss": 1, "lowered write": 1, "xla miss": 1, "xla write": 1}
    assert torch.equal(x, w)
    again, x = _compile_and_call(Scaled(w))
    assert again == {"lowered hit": 1, "xla hit": 1}
    assert torch.equal(x, w)
    other = w.clone()
    other[5, 7] += 1  # one element of a 32x32 literal
    changed, x = _compile_and_call(Scaled(other))
    assert changed["lowered miss"] == 1 and changed["xla miss"] == 1
    assert torch.equal(x, other)
    for options in ({"check_bounds": True}, {"engine": "xla"}):
        stats, x = _compile_and_call(Scaled(w), **options)
        assert stats["lowered miss"] == 1, options
        assert torch.equal(x, w)
    assert len(_entries(cache_dir / "lowered")) == 4


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores to run on one")
def test_fewer_cores_miss_the_xla_entry(cache_dir):
    """XLA:CPU splits a loop into as many parts as the process may use cores when it
    compiles: an executable compiled on one core is not read on two."""
    w = torch.randn(32, 32)
    _compile_and_call(Scaled(w))
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        stats, x = _compile_and_call(Scaled(w))
    finally:
        os.sched_setaffinity(0, cores)
    assert stats["lowered hit"] == 1 and stats["xla miss"] == 1, stats
    assert torch.equal(x, w)


def test_cache_false_writes_nothing(cache_dir):
    stats, x = _compile_and_call(Scaled(torch.full((32, 32), 3.0)), cache=False)
    assert stats == {}
    assert torch.equal(x, torch.full((32, 32), 3.0))
    assert _entries(cache_dir) == []


def test_a_damaged_entry_is_compiled_again(cache_dir):
    w = torch.randn(32, 32)
    _compile_and_call(Scaled(w))
    entries = _entries(cache_dir)
    assert len(entries) == 2
    for path in entries:  # cut short, as by a crash without the atomic rename
        path.write_bytes(path.read_bytes()[:100])
    stats, x = _compile_and_call(Scaled(w))
    assert stats == {"lowered corrupt": 1, "lowered write": 1,
                     "xla corrupt": 1, "xla write": 1}
    assert torch.equal(x, w)
    for path in _entries(cache_dir / "xla"):  # whole, yet no executable PJRT reads
        compile_cache.write("xla", path.name, {"inputs": [], "results": []}, b"junk")
    stats, x = _compile_and_call(Scaled(w))
    assert stats == {"lowered hit": 1, "xla hit": 1, "xla corrupt": 1, "xla write": 1}
    assert torch.equal(x, w)
    stats, x = _compile_and_call(Scaled(w))
    assert stats == {"lowered hit": 1, "xla hit": 1}
    assert torch.equal(x, w)


def test_the_passes_warnings_are_warned_on_a_hit(cache_dir):
    def step(cache, pos, k):
        cache[:, pos] = k  # clamped out of bounds: OutOfBoundsPolicyWarning
        return cache.sum()

    args = (torch.zeros(2, 8), torch.tensor(3), torch.ones(2))
    for expected in ({"lowered miss": 1, "lowered write": 1}, {"lowered hit": 1}):
        before = compile_cache.stats.copy()
        with pytest.warns(outofplace.OutOfBoundsPolicyWarning, match="clamped") as caught:
            outofplace.compile(step, args)
        assert dict(compile_cache.stats - before) == expected
        assert any(Path(w.filename).name == "test_compile_cache.py" for w in caught)


def test_a_sharded_program_reads_the_cache(cache_dir):
    def step(cache, pos, k):
        cache[:, pos] = k
        return cache.sum(0)

    k = torch.randn(4)
    for expected in ({"lowered miss": 1, "lowered write": 1, "spmd miss": 1, "spmd write": 1},
                     {"lowered hit": 1, "spmd hit": 1}):
        before = compile_cache.stats.copy()
        cache, eager = torch.zeros(4, 8), torch.zeros(4, 8)
        compiled = outofplace.compile(step, (torch.zeros(4, 8), torch.tensor(3), k),
                                      mesh={"x": 2}, shardings={"cache": ("x", None)})
        out = compiled(cache, torch.tensor(5), k)
        assert torch.equal(out, step(eager, torch.tensor(5), k))
        assert torch.equal(cache, eager)
        assert dict(compile_cache.stats - before) == expected
    assert len(_entries(cache_dir / "spmd")) == 1


def test_threads_calling_a_program_read_from_the_cache_at_once(cache_dir):
    """Each thread's first call finds no executable: one is made (from the cache, so
    quickly) and every call runs on it."""
    import threading

    def step(cache, pos, k):
        cache[:, pos] = k
        return cache.sum(0)

    args = (torch.zeros(4, 8), torch.tensor(3), torch.ones(4))
    for mesh in ({"x": 2}, None):
        options = {"mesh": mesh, "shardings": {"cache": ("x", None)}} if mesh else {}
        outofplace.compile(step, args, **options)(torch.zeros(4, 8), *args[1:])  # written
        for attempt in range(3):
            compiled = outofplace.compile(step, args, **options)
            caches = [torch.zeros(4, 8) for _ in range(4)]
            failures = []

            def calls(t):
                try:
                    for p in range(t, 8, 2):
                        compiled(caches[t], torch.tensor(p), torch.full((4,), float(p)))
                except Exception as error:  # noqa: BLE001 (reported below)
                    failures.append(error)

            threads = [threading.Thread(target=calls, args=(t,)) for t in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not failures, (mesh, failures)
            for t, cache in enumerate(caches):
                expected = torch.zeros(4, 8)
                for p in range(t, 8, 2):
                    step(expected, torch.tensor(p), torch.full((4,), float(p)))
                assert torch.equal(cache, expected), (mesh, t)


def test_processes_compiling_at_once(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(SCRIPT)
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python"),
                   "OUTOFPLACE_CACHE_DIR": str(tmp_path / "cache"), "OUTOFPLACE_CACHE": "1"}
    runs = [subprocess.Popen([sys.executable, str(script)], env=environment, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)]
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["same"]
    assert len(_entries(tmp_path / "cache")) == 2  # no temporary file left
    third = _run(tmp_path)
    assert third["same"] and third["stats"] == {"lowered hit": 1, "xla hit": 1}


def test_another_version_misses(cache_dir, monkeypatch):
    w = torch.randn(32, 32)
    _compile_and_call(Scaled(w))
    versions = compile_cache.versions()
    monkeypatch.setattr(compile_cache, "versions",
                        lambda: versions.replace("jaxlib ", "jaxlib 0.0.1+"))
    stats, x = _compile_and_call(Scaled(w))
    assert stats == {"lowered miss": 1, "lowered write": 1, "xla miss": 1, "xla write": 1}
    assert torch.equal(x, w)


def test_the_versions_name_each_distribution(monkeypatch):
    import importlib.metadata

    real = importlib.metadata.version
    before = compile_cache.versions()
    compile_cache.versions.cache_clear()
    try:
        monkeypatch.setattr(importlib.metadata, "version",
                            lambda name: "9.9" if name == "torch-mlir" else real(name))
        assert compile_cache.versions() != before
        assert "torch-mlir 9.9" in compile_cache.versions()
    finally:
        compile_cache.versions.cache_clear()


def test_the_warnings_before_a_refusal_are_warned():
    import warnings

    def lower():
        warnings.warn("from a pass", UserWarning)
        raise outofplace.UnsupportedMutationError("aten.x", "refused")

    with pytest.warns(UserWarning, match="from a pass"), \
            pytest.raises(outofplace.UnsupportedMutationError):
        compile_cache.lowered(None, None, lower)


def test_the_key_covers_versions_and_parts():
    assert compile_cache.key("xla", "a", "bc") != compile_cache.key("xla", "ab", "c")
    assert compile_cache.key("xla", "a") != compile_cache.key("lowered", "a")
    versions = compile_cache.versions()
    for name in ("torch ", "torch-mlir ", "jax ", "jaxlib ", "iree-base-compiler ",
                 "outofplace "):
        assert name in versions


def test_a_program_with_regions_compiled_again_in_the_process_hits(cache_dir):
    """Batch norm's composite is a region: its functions are named by their number in
    the module, not by how many regions the process traced before, so a second compile
    of the same program is the same text and reads the cache."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    x = torch.randn(2, 3, 8, 8)
    before = compile_cache.stats.copy()
    outofplace.compile(model, (x,))
    outofplace.compile(model, (x,))
    assert dict(compile_cache.stats - before) == {
        "lowered miss": 1, "lowered write": 1, "lowered hit": 1}
