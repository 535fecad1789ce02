"""Per-step time of each KV-cache update on XLA:CPU, the cache donated step after step.

Four columns per pattern and cache size:
- outofplace: `outofplace.compile(f, args).stablehlo` compiled with jaxlib's CPU client
  by `outofplace.backends.xla.compile_for_cpu` (as `outofplace.backends.xla.CpuExecutable` does) and
  executed in a loop, each step's aliased result buffer fed back as the next step's
  cache, never copied through numpy;
- torch-mlir: `torch_mlir.fx.export_and_import(..., output_type="stablehlo")` compiled and
  run the same way (no aliases: every step makes a new cache);
- JAX: `jax.jit(update, donate_argnums=0)` of JAX's own `c.at[...].set(...)`, and the
  same lowered program through the same `execute` loop as outofplace's;
- limit: a numpy copy of the update's bytes (what any in-place update must move).

outofplace, both JAX columns and the per-call floors (a 16-element cache) are stepped in
turn, round after round, so that on a shared machine they all see the same load.
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

import hlo_bytes
import patterns as pat


def _jax() -> Any:
    import jax

    jax.config.update("jax_enable_x64", True)  # int64 positions stay int64
    return jax


@dataclass
class Timing:
    median: float  # seconds per step
    steps: int  # steps measured (after warm-up)


@dataclass
class Cell:
    """One column of one row: a time, or why there is none."""

    timing: Timing | None = None
    error: str | None = None
    correct: bool | None = None  # final cache equals eager PyTorch's
    note: str = ""


@dataclass
class Row:
    pattern: str
    cache_bytes: int
    limit_bytes: int
    cells: dict[str, Cell] = field(default_factory=dict)
    ours_cost: hlo_bytes.UpdateCost | None = None
    torch_mlir_cost: hlo_bytes.UpdateCost | None = None
    jax_cost: hlo_bytes.UpdateCost | None = None
    floor: float | None = None  # per-call floor through execute, measured with this row
    compile_seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Settings:
    warmup: int = 2
    min_steps: int = 5
    max_steps: int = 300
    seconds_per_cell: float = 1.5  # stop after this once min_steps are measured
    slow: float = 0.5  # seconds: a first warm-up step slower than this marks a slow cell
    slow_min_steps: int = 3


def time_steps(step: Callable[[Any], Any], state: Any, settings: Settings
               ) -> tuple[Timing, Any]:
    """Median wall time of `state = step(state)`; step blocks until its result is ready.

    A step slower than `slow` seconds (a whole-cache copy at 1 GiB) gets one warm-up
    step and `slow_min_steps` measured steps, to keep the run within its time budget."""
    warmup, min_steps = settings.warmup, settings.min_steps
    for i in range(warmup):
        t0 = time.perf_counter()
        state = step(state)
        if i == 0 and time.perf_counter() - t0 > settings.slow:
            warmup, min_steps = 1, settings.slow_min_steps
            break
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < settings.max_steps and (
            len(times) < min_steps or
            time.perf_counter() - start < settings.seconds_per_cell):
        t0 = time.perf_counter()
        state = step(state)
        times.append(time.perf_counter() - t0)
    return Timing(statistics.median(times), len(times)), state


def memcpy_seconds(nbytes: int, repeats: int = 200) -> float:
    """Median time of a numpy copy of `nbytes` (as float32) into a preallocated array."""
    n = max(1, nbytes // 4)
    src = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    dst = np.empty_like(src)
    inner = max(1, min(1000, (1 << 24) // max(nbytes, 1)))  # batches of >= ~16 MiB
    times = []
    for _ in range(max(5, repeats // inner if inner > 1 else 20)):
        t0 = time.perf_counter()
        for _ in range(inner):
            np.copyto(dst, src)
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


@contextlib.contextmanager
def captured_stderr():
    """Captures fd 2 (MLIR diagnostics are printed there, not put in exceptions)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        box: dict[str, str] = {}
        try:
            yield box
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box["text"] = tmp.read().decode(errors="replace")


def failure_text(error: BaseException, stderr: str) -> str:
    """A one-line reason: the first MLIR `error:` diagnostic, else the exception's
    first meaningful line."""
    for line in stderr.splitlines():
        if "error:" in line:
            return line.split("error:", 1)[1].strip()[:160]
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    for ln in lines:
        if "Could not" in ln or "failed" in ln.lower():
            return f"{type(error).__name__}: {ln}"[:200]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:200]


class XlaCpu:
    """jaxlib's CPU client, as outofplace.backends.xla.CpuExecutable uses it."""

    def __init__(self) -> None:
        jax = _jax()
        from jax._src import xla_bridge

        self.jax = jax
        self.backend = xla_bridge.get_backend("cpu")
        self.device = self.backend.local_devices()[0]

    def compile(self, stablehlo: str) -> Any:
        from outofplace.backends.xla import compile_for_cpu

        return compile_for_cpu(stablehlo)

    def put(self, array: np.ndarray) -> Any:
        return self.jax.device_put(array, self.device)

    def zeros_like(self, t: torch.Tensor) -> Any:
        """A device-owned zero buffer (not a view of host memory), donatable."""
        import jax.numpy as jnp

        out = jnp.zeros(tuple(t.shape), dtype=np.dtype(str(t.dtype).removeprefix("torch.")),
                        device=self.device)
        out.block_until_ready()
        return out


def _device_args(xla: XlaCpu, args: tuple) -> list[Any]:
    return [xla.buffers.put(pat.to_numpy(a)) for a in args[1:]]


def _check(result: Any, expected: np.ndarray) -> bool:
    return bool(np.array_equal(np.asarray(result), expected))


@dataclass
class Runner:
    """One column being measured: its step, its current cache, what to check after."""

    name: str
    step: Callable[[Any], Any]
    state: Any
    donated: list[bool] = field(default_factory=list)  # per step: input buffer deleted
    check: bool = True  # compare the final cache with eager PyTorch's
    times: list[float] = field(default_factory=list)


def _execute_step(executable: Any, rest: list[Any], donated: list[bool] | None = None
                  ) -> Callable[[Any], Any]:
    def step(c: Any) -> Any:
        out = executable.execute([c, *rest])[0]
        out.block_until_ready()
        if donated is not None:
            donated.append(c.is_deleted())
        return out

    return step


def time_interleaved(runners: list[Runner], settings: Settings) -> None:
    """Steps every runner in turn, round after round, so that all columns of a row see
    the same load on a shared machine; fills each runner's times."""
    rounds = settings.min_steps
    for _ in range(settings.warmup):
        for r in runners:
            t0 = time.perf_counter()
            r.state = r.step(r.state)
            if time.perf_counter() - t0 > settings.slow:
                rounds = settings.slow_min_steps
    start = time.perf_counter()
    done = 0
    while done < settings.max_steps and (
            done < rounds or time.perf_counter() - start < settings.seconds_per_cell):
        order = runners if done % 2 == 0 else runners[::-1]
        for r in order:
            t0 = time.perf_counter()
            r.state = r.step(r.state)
            r.times.append(time.perf_counter() - t0)
        done += 1


def prepare_ours(xla: XlaCpu, pattern: pat.Pattern, args: tuple, rest: list[Any],
                 row: Row) -> Runner:
    import outofplace

    t0 = time.perf_counter()
    compiled = outofplace.compile(pattern.fn, args)
    text = compiled.stablehlo
    row.compile_seconds["outofplace"] = time.perf_counter() - t0
    row.ours_cost = hlo_bytes.update_costs(text)[0]
    if compiled.io_map != {0: 0}:
        raise RuntimeError(f"unexpected io_map {compiled.io_map}")
    donated: list[bool] = []
    return Runner("outofplace", _execute_step(xla.compile(text), rest, donated),
                  xla.zeros_like(args[0]), donated)


def prepare_jax(xla: XlaCpu, pattern: pat.Pattern, args: tuple, rest: list[Any],
                row: Row) -> list[Runner]:
    """JAX's program under jax.jit, and the same program through `execute`: against the
    latter the difference to outofplace is the emitted code alone, not jax.jit's
    dispatch."""
    jax = xla.jax
    t0 = time.perf_counter()
    update = jax.jit(pattern.jax_fn, donate_argnums=0)
    cache = update(xla.zeros_like(args[0]), *rest)  # compiles
    cache.block_until_ready()
    row.compile_seconds["jax"] = time.perf_counter() - t0
    lowered = update.lower(jax.ShapeDtypeStruct(cache.shape, cache.dtype), *rest)
    # JAX's text holds sdy (Shardy) ops our bindings do not know; their generic form parses
    generic = lowered.compiler_ir("stablehlo").operation.get_asm(print_generic_op_form=True)
    try:
        row.jax_cost = hlo_bytes.update_costs(generic)[0]
    except Exception:  # noqa: BLE001 - only a label in the report
        row.jax_cost = None

    def step(c: Any) -> Any:
        out = update(c, *rest)
        out.block_until_ready()
        return out

    return [Runner("jax", step, cache),
            Runner("jax-execute", _execute_step(xla.compile(lowered.as_text()), rest),
                   xla.zeros_like(args[0]))]


class Floor:
    """A near-empty donated update (a 16-element cache): the fixed cost of one call,
    through `execute` and through a jitted JAX function."""

    def __init__(self, xla: XlaCpu) -> None:
        import outofplace

        def tiny(c, k):
            c[:, 1] = k

        args = (torch.zeros(4, 4), torch.ones(4))
        rest = _device_args(xla, args)
        self.execute = Runner("floor-execute", _execute_step(
            xla.compile(outofplace.compile(tiny, args).stablehlo), rest),
            xla.zeros_like(args[0]), check=False)
        update = xla.jax.jit(lambda c, k: c.at[:, 1].set(k), donate_argnums=0)

        def step(c: Any) -> Any:
            out = update(c, *rest)
            out.block_until_ready()
            return out

        self.jit = Runner("floor-jax", step, xla.zeros_like(args[0]), check=False)

    def runners(self) -> list[Runner]:
        for r in (self.execute, self.jit):
            r.times = []
        return [self.execute, self.jit]


def run_torch_mlir(xla: XlaCpu, pattern: pat.Pattern, args: tuple,
                   expected: np.ndarray | None, settings: Settings, row: Row) -> Cell:
    import torch_mlir.fx

    t0 = time.perf_counter()
    try:
        with captured_stderr() as err:
            module = torch_mlir.fx.export_and_import(
                pat.torch_module(pattern.fn), *args, output_type="stablehlo")
    except Exception as error:  # noqa: BLE001 - the failure is the measurement
        return Cell(error=failure_text(error, err.get("text", "")))
    text = str(module)
    row.compile_seconds["torch-mlir"] = time.perf_counter() - t0
    row.torch_mlir_cost = hlo_bytes.update_costs(text).get(0)
    executable = xla.compile(text)
    rest = _device_args(xla, args)
    cache = xla.zeros_like(args[0])
    # no aliasing: each step makes a new buffer, the old one is dropped
    timing, cache = time_steps(_execute_step(executable, rest), cache, settings)
    cell = Cell(timing)
    if expected is not None:
        cell.correct = _check(cache, expected)
    del cache, executable
    return cell


def expected_cache(pattern: pat.Pattern, args: tuple) -> np.ndarray:
    cache = args[0].clone()
    pattern.fn(cache, *args[1:])
    return cache.numpy()


def run(sizes: list[int], settings: Settings, log: Callable[[str], None],
        only: list[str] | None = None) -> tuple[list[Row], dict[str, float]]:
    """Every pattern at every size. outofplace, JAX (jit and execute) and the per-call
    floors are measured interleaved; torch-mlir (100-1000x slower) on its own after."""
    xla = XlaCpu()
    floor = Floor(xla)
    rows: list[Row] = []
    floors: dict[str, list[float]] = {"execute": [], "jax_jit": []}
    for pattern in pat.patterns():
        if only and pattern.name not in only:
            continue
        for size in sizes:
            args = pattern.make_args(size)
            row = Row(pattern.name, args[0].numel() * 4, pattern.limit_bytes(args))
            expected = expected_cache(pattern, args)
            rest = _device_args(xla, args)
            runners: list[Runner] = []
            for column, prepare in (("outofplace", prepare_ours), ("jax", prepare_jax)):
                try:
                    made = prepare(xla, pattern, args, rest, row)
                    runners += made if isinstance(made, list) else [made]
                except Exception as error:  # noqa: BLE001 - reported, not hidden
                    row.cells[column] = Cell(error=failure_text(error, ""))
            runners += floor.runners()
            try:
                time_interleaved(runners, settings)
            except Exception as error:  # noqa: BLE001 - reported, not hidden
                for r in runners:
                    row.cells[r.name] = Cell(error=failure_text(error, ""))
            for r in runners:
                if not r.times:
                    continue
                if r.name == "floor-execute":
                    row.floor = statistics.median(r.times)
                    floors["execute"].append(row.floor)
                    continue
                if r.name == "floor-jax":
                    floors["jax_jit"].append(statistics.median(r.times))
                    continue
                cell = Cell(Timing(statistics.median(r.times), len(r.times)))
                if r.donated and not all(r.donated):
                    cell.note = "cache NOT donated"
                cell.correct = _check(r.state, expected)
                row.cells[r.name] = cell
            del runners
            gc.collect()
            try:
                row.cells["torch-mlir"] = run_torch_mlir(xla, pattern, args, expected,
                                                         settings, row)
            except Exception as error:  # noqa: BLE001 - reported, not hidden
                row.cells["torch-mlir"] = Cell(error=failure_text(error, ""))
            gc.collect()
            row.cells["limit"] = Cell(Timing(memcpy_seconds(row.limit_bytes), 0))
            del expected, args, rest
            gc.collect()
            rows.append(row)
            log(_summary(row))
    summary = {k: statistics.median(v) for k, v in floors.items() if v}
    return rows, summary


def _summary(row: Row) -> str:
    def fmt(cell: Cell) -> str:
        if cell.timing is None:
            return "FAIL"
        ok = "" if cell.correct in (None, True) else " WRONG"
        return f"{cell.timing.median * 1e3:.3f}ms{ok}"

    cells = " ".join(f"{k}={fmt(v)}" for k, v in row.cells.items())
    floor = f" floor={row.floor * 1e3:.3f}ms" if row.floor else ""
    return f"{row.pattern:17s} {row.cache_bytes >> 20:5d} MiB  {cells}{floor}"
