"""The user's path (issue 14): what one call of a compiled KV-cache step costs.

`step(cache, pos, k)` (`cache[:, pos] = k; return k.sum()`, float32 cache [4, seq, 8, 128])
called as a user calls it, per call, beside eager PyTorch:
- `compiled(cache, pos, k)` (`outofplace.compile`, engine "xla");
- `torch.compile(step, backend="outofplace")`;
- the executable alone: the same XLA executable's `execute`, the cache fed back;
- `jax.jit(lambda c, p, k: (c.at[:, p].set(k), k.sum()), donate_argnums=0)`, the same
  program in JAX, called as a JAX user does, and without `k.sum()` (the update alone);
- `torch.compile(step, backend="eager")`: what dynamo's frame and guards cost alone.
Then the peak resident memory of a call against the cache's size, update patterns that
also read the cache (a slice before or after the write, the whole cache, attention), the
cost of the checked mode (`check_bounds=True`: the flags program run before the step), and
a call with `pos` given by keyword (as transformers' decoders take `cache_position`).
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

import patterns as pat

SEQ_BYTES = pat.B * pat.H * pat.D * 4  # bytes of one position of the cache


def step(cache, pos, k):
    cache[:, pos] = k
    return k.sum()


def keyword_step(cache, k, *, pos):
    cache[:, pos] = k
    return k.sum()


def write_then_read_slice(cache, pos, k):
    cache[:, pos] = k
    return cache[:, 0].sum()


def read_slice_then_write(cache, pos, k):
    s = cache[:, 0].sum()
    cache[:, pos] = k
    return s


def write_then_read_all(cache, pos, k):
    cache[:, pos] = k
    return cache.sum()


def write_then_attend(cache, pos, k, q):
    cache[:, pos] = k
    return torch.einsum("bhd,bshd->bhs", q, cache)


READERS = {
    "write, then read a slice": (write_then_read_slice,
                                 "cache[:, pos] = k; return cache[:, 0].sum()"),
    "read a slice, then write": (read_slice_then_write,
                                 "s = cache[:, 0].sum(); cache[:, pos] = k; return s"),
    "write, then read it all": (write_then_read_all,
                                "cache[:, pos] = k; return cache.sum()"),
    "write, then attention": (write_then_attend,
                              "cache[:, pos] = k; return einsum('bhd,bshd->bhs', q, cache)"),
}


@dataclass
class SizeRow:
    cache_bytes: int
    times: dict[str, float] = field(default_factory=dict)  # column -> seconds per call
    first_call: float | None = None  # compiled(...)'s first call (adoption: one copy)
    rss_call: int | None = None  # peak RSS growth of one call after the first
    rss_first: int | None = None  # peak RSS growth of the first call
    report: dict[str, str] = field(default_factory=dict)
    correct: bool | None = None


@dataclass
class ReaderRow:
    pattern: str
    source: str
    cache_bytes: int
    times: dict[str, float] = field(default_factory=dict)
    report: dict[str, str] = field(default_factory=dict)
    correct: bool | None = None


@dataclass
class CheckedRow:
    cache_bytes: int
    times: dict[str, float] = field(default_factory=dict)
    correct: bool | None = None  # in range: eager's cache; out of range: IndexError, kept


@dataclass
class KeywordRow:
    cache_bytes: int
    times: dict[str, float] = field(default_factory=dict)
    correct: bool | None = None  # the cache after a keyword call is eager's


def median_time(fn: Callable[[], Any], seconds: float = 1.0, warmup: int = 2,
                max_steps: int = 500) -> float:
    for _ in range(warmup):
        fn()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while (len(times) < 5 or time.perf_counter() < end) and len(times) < max_steps:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _status(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field_name)


def peak_growth(fn: Callable[[], Any]) -> int | None:
    """Peak resident memory during `fn()` above the resident memory before it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak (VmHWM) to the current RSS
    except OSError:
        return None
    before = _status("VmRSS")
    fn()
    return _status("VmHWM") - before


def _args(seq: int) -> tuple:
    g = torch.Generator().manual_seed(0)
    return (torch.zeros(pat.B, seq, pat.H, pat.D), torch.tensor(seq // 2),
            torch.randn(pat.B, pat.H, pat.D, generator=g))


def measure_size(cache_bytes: int, log: Callable[[str], None]) -> SizeRow:
    import jax
    import outofplace
    from outofplace.backends import xla

    seq = cache_bytes // SEQ_BYTES
    row = SizeRow(cache_bytes)
    cache, pos, k = _args(seq)
    compiled = outofplace.compile(step, _args(seq))
    compiled._xla_executable()
    view = cache[:, seq // 2]
    start = time.perf_counter()
    row.rss_first = peak_growth(lambda: compiled(cache, pos, k))
    row.first_call = time.perf_counter() - start
    row.rss_call = peak_growth(lambda: compiled(cache, pos, k))
    row.times["compiled(...)"] = median_time(lambda: compiled(cache, pos, k))
    row.correct = bool(torch.equal(view, k)) and compiled(cache, pos, k) is not None
    row.report = compiled.in_place_report
    log(f"  compiled(...) at {cache_bytes >> 20} MiB: {row.times['compiled(...)'] * 1e6:.1f} µs")

    holder = xla.buffers.holder_of(cache)
    executable, written = compiled._xla, compiled.io_map[0]
    small = [xla.buffers.put(np.asarray(pos)), xla.buffers.put(k.numpy())]

    def execute() -> None:  # the same executable on the same XLA client, arrays ready
        holder.array = executable.execute([holder.array, *small])[written]
    row.times["executable alone"] = median_time(execute)

    torch._dynamo.reset()
    run = torch.compile(step, backend="outofplace", dynamic=False)
    run(cache, pos, k)
    row.times["torch.compile backend"] = median_time(lambda: run(cache, pos, k))
    torch._dynamo.reset()
    run = torch.compile(step, backend="eager", dynamic=False)  # dynamo's own cost
    run(cache, pos, k)
    row.times["torch.compile, eager backend"] = median_time(lambda: run(cache, pos, k))
    row.times["eager"] = median_time(lambda: step(cache, pos, k))
    del holder, executable, view, cache, run, compiled
    torch._dynamo.reset()

    # the same program in JAX: the cache donated and updated, and k.sum()
    update = jax.jit(lambda c, p, kk: (c.at[:, p].set(kk), kk.sum()), donate_argnums=0)
    state = {"c": jax.numpy.zeros((pat.B, seq, pat.H, pat.D), jax.numpy.float32)}
    p, kj = jax.numpy.asarray(seq // 2), jax.numpy.asarray(k.numpy())

    def jit_call() -> None:
        state["c"], total = update(state["c"], p, kj)
        total.block_until_ready()  # one execution makes both
    row.times["jax.jit, donated"] = median_time(jit_call)
    update_only = jax.jit(lambda c, p, kk: c.at[:, p].set(kk), donate_argnums=0)

    def jit_update_only() -> None:  # a smaller program: the update without k.sum()
        state["c"] = update_only(state["c"], p, kj)
        state["c"].block_until_ready()
    row.times["jax.jit, update only"] = median_time(jit_update_only)
    del state
    return row


def measure_reader(name: str, cache_bytes: int, floor: float, log: Callable[[str], None]
                   ) -> ReaderRow:
    import jax
    import outofplace

    f, source = READERS[name]
    seq = cache_bytes // SEQ_BYTES
    row = ReaderRow(name, source, cache_bytes)
    args = list(_args(seq))
    args[0] = torch.randint(-4, 4, args[0].shape).float()
    if f is write_then_attend:
        args.append(torch.randn(pat.B, pat.H, pat.D))
    expected_cache = args[0].clone()
    expected = f(expected_cache, *args[1:])
    compiled = outofplace.compile(f, tuple(a.clone() for a in args))
    cache = args[0].clone()
    out = compiled(cache, *args[1:])
    row.correct = bool(torch.equal(cache, expected_cache)) and \
        bool(torch.allclose(out, expected, rtol=1e-4, atol=1e-2))
    row.times["compiled(...)"] = median_time(lambda: compiled(cache, *args[1:]),
                                             max_steps=200)
    row.times["eager"] = median_time(lambda: f(cache, *args[1:]), max_steps=200)
    row.report = compiled.in_place_report
    update_bytes = args[2].numel() * 4
    update_source = np.ones(update_bytes // 4, np.float32)
    update_target = np.empty(update_bytes // 4, np.float32)
    row.times["memcpy of the update"] = median_time(
        lambda: np.copyto(update_target, update_source))
    row.times["floor"] = floor
    log(f"  {name} at {cache_bytes >> 20} MiB: {row.times['compiled(...)'] * 1e6:.1f} µs")
    del cache, compiled

    jnp = jax.numpy

    def jax_program(c, p, k, *q):
        c = c.at[:, p].set(k)
        if f is write_then_read_slice:
            return c, c[:, 0].sum()
        if f is write_then_read_all:
            return c, c.sum()
        if f is write_then_attend:
            return c, jnp.einsum("bhd,bshd->bhs", q[0], c)
        return c, None

    def jax_read_first(c, p, k):
        s = c[:, 0].sum()
        return c.at[:, p].set(k), s

    program = jax_read_first if f is read_slice_then_write else jax_program
    jitted = jax.jit(program, donate_argnums=0)
    state = {"c": jnp.asarray(args[0].numpy())}
    rest = [jnp.asarray(a.numpy()) for a in args[1:]]

    def jit_call() -> None:
        state["c"], _ = jitted(state["c"], *rest)
        state["c"].block_until_ready()
    row.times["jax.jit, donated"] = median_time(jit_call, max_steps=50)
    del state
    return row


def measure_checked(cache_bytes: int, log: Callable[[str], None]) -> CheckedRow:
    """`step` compiled with and without check_bounds=True, called alternately on the
    same cache, and the flags program alone (bounds.py)."""
    import outofplace

    seq = cache_bytes // SEQ_BYTES
    row = CheckedRow(cache_bytes)
    cache, pos, k = _args(seq)
    plain = outofplace.compile(step, _args(seq))
    checked = outofplace.compile(step, _args(seq), check_bounds=True)
    checked(cache, pos, k)
    ok = bool(torch.equal(cache[:, seq // 2], k))
    before = cache[:, :2].clone()
    try:
        checked(cache, torch.tensor(seq), torch.zeros_like(k))
        ok = False
    except IndexError:
        ok = ok and bool(torch.equal(cache[:, :2], before)) and \
            bool(torch.equal(cache[:, seq // 2], k))
    row.correct = ok
    inputs = [cache, pos, k]
    for _ in range(3):  # alternated, so that load on the machine falls on both alike
        for name, call in (("compiled(...)", lambda: plain(cache, pos, k)),
                           ("check_bounds=True", lambda: checked(cache, pos, k)),
                           ("flags program alone",
                            lambda: checked.bounds_check.flags(inputs, "xla"))):
            row.times.setdefault(name, []).append(median_time(call, seconds=0.3))
    row.times = {name: statistics.median(t) for name, t in row.times.items()}
    log(f"  check_bounds at {cache_bytes >> 20} MiB: {row.times['check_bounds=True'] * 1e6:.1f}"
        f" µs against {row.times['compiled(...)'] * 1e6:.1f} µs")
    return row


def measure_keywords(cache_bytes: int, log: Callable[[str], None]) -> KeywordRow:
    """`step` with `pos` passed by keyword, called as `compiled(cache, k, pos=pos)` (the
    planned call takes keyword tensors) and through `run` (the checked path, which every
    keyword call took before), beside the positional step; alternated, three rounds."""
    import outofplace

    seq = cache_bytes // SEQ_BYTES
    row = KeywordRow(cache_bytes)
    cache, pos, k = _args(seq)
    positional = outofplace.compile(step, _args(seq))
    keyword = outofplace.compile(keyword_step, (_args(seq)[0], k), {"pos": pos})
    expected = cache.clone()
    expected[:, pos] = k
    keyword(cache, k, pos=pos)
    row.correct = bool(torch.equal(cache, expected))
    for _ in range(3):
        for name, call in (("positional", lambda: positional(cache, pos, k)),
                           ("keyword", lambda: keyword(cache, k, pos=pos)),
                           ("keyword, checked path",
                            lambda: keyword.run((cache, k), {"pos": pos}))):
            row.times.setdefault(name, []).append(median_time(call, seconds=0.3))
    row.times = {name: statistics.median(t) for name, t in row.times.items()}
    log(f"  keyword call at {cache_bytes >> 20} MiB: {row.times['keyword'] * 1e6:.1f} µs "
        f"against {row.times['positional'] * 1e6:.1f} µs positional")
    return row


def floor_time() -> float:
    """The per-call floor of `compiled(...)`: the same step on a 1-position cache."""
    import outofplace

    args = _args(1)
    args = (args[0], torch.tensor(0), args[2])
    compiled = outofplace.compile(step, args)
    return median_time(lambda: compiled(*args))


def run(sizes: list[int], log: Callable[[str], None]
        ) -> tuple[list[SizeRow], list[ReaderRow], float, list[CheckedRow],
                   list[KeywordRow]]:
    warnings.filterwarnings("ignore")
    floor = floor_time()
    log(f"calls: per-call floor {floor * 1e6:.1f} µs")
    rows = [measure_size(s, log) for s in sizes]
    readers = [measure_reader(name, s, floor, log) for name in READERS for s in sizes
               if s <= 256 << 20]
    checked = [measure_checked(s, log) for s in sizes]
    keywords = [measure_keywords(min(sizes), log)]
    return rows, readers, floor, checked, keywords
