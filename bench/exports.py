"""The exported StableHLO (`Compiled.stablehlo`, what `.save()` writes) run by a plain
XLA:CPU client, beside JAX's own program and outofplace's engine, per KV pattern
(docs/performance.md, "Exports on a plain consumer").

    .venv/bin/python bench/exports.py              # markdown on stdout
    .venv/bin/python bench/exports.py --mib 64     # a smaller cache

Each pattern writes the cache and then reads it (`c[:, :, 0].sum()`). A plain consumer
compiles the text as it is, the cache donated (its `input_output_alias`), first with
XLA's default options, then with `xla_cpu_copy_insertion_use_region_analysis` (the option
outofplace's engine compiles with; `outofplace.backends.xla.CONSUMER_OPTION`). "in place"
is what `xla.consumer_checks` reads in that consumer's optimized HLO. The floor is a
donated program that reads the update and writes nothing, on the same client.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings
from typing import Any, Callable

from real_models import _times

warnings.filterwarnings("ignore")


def _patterns(rows: int) -> dict[str, tuple[Callable[..., Any], Callable[..., Any], Any]]:
    """name -> (torch program, JAX's program of it, extra arguments' maker)."""
    import jax.numpy as jnp
    import torch

    at = rows // 2

    def position(c, n):
        c[:, :, at] = n
        return c[:, :, 0].sum()

    def slice16(c, n):
        c[:, :, at:at + 16] = n
        return c[:, :, 0].sum()

    def runtime_position(c, n, p):
        c[:, :, p] = n
        return c[:, :, 0].sum()

    def index_copy(c, n, i):
        c.index_copy_(2, i, n)
        return c[:, :, 0].sum()

    def j_position(c, n):
        c = c.at[:, :, at].set(n)
        return c[:, :, 0].sum(), c

    def j_slice16(c, n):
        c = c.at[:, :, at:at + 16].set(n)
        return c[:, :, 0].sum(), c

    def j_runtime_position(c, n, p):
        c = c.at[:, :, p].set(n)
        return c[:, :, 0].sum(), c

    def j_index_copy(c, n, i):
        c = c.at[:, :, i].set(n)
        return c[:, :, 0].sum(), c

    return {
        "position `c[:, :, k] = n`": (position, j_position, lambda: (torch.ones(8, 8, 128),)),
        "slice `c[:, :, k:k+16] = n`": (slice16, j_slice16,
                                        lambda: (torch.ones(8, 8, 16, 128),)),
        "runtime position `c[:, :, p] = n`": (
            runtime_position, j_runtime_position,
            lambda: (torch.ones(8, 8, 128), torch.tensor(at))),
        "`index_copy_(2, i, n)`": (index_copy, j_index_copy,
                                   lambda: (torch.ones(8, 8, 1, 128), torch.tensor([at]))),
    }


def measure(name: str, program: Any, jax_program: Any, extra: Any, rows: int,
            calls: int, budget: float) -> dict[str, Any]:
    import jax
    import numpy as np
    import torch
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    import outofplace
    from outofplace.backends import xla

    cache = torch.zeros(8, 8, rows, 128)
    args = extra()
    compiled = outofplace.compile(program, (cache, *args))
    row: dict[str, Any] = {"row": name, "bytes": cache.nbytes}
    checks = xla.consumer_checks(compiled.stablehlo, compiled.io_map)
    client = xla_bridge.get_backend("cpu")
    devices = xla_client.DeviceList((client.local_devices()[0],))
    host = [a.numpy() for a in args]
    for key, options in (("default", {}), ("option", {xla.CONSUMER_OPTION: True})):
        co = xla_client.CompileOptions()
        co.env_option_overrides = list(options.items())
        executable = client.compile_and_load(compiled.stablehlo, devices, co)
        state = {"c": jax.device_put(np.zeros(cache.shape, np.float32))}
        rest = [jax.device_put(a) for a in host]

        def step() -> None:
            out = executable.execute_sharded([state["c"], *rest])
            total, state["c"] = [a[0] for a in out.disassemble_into_single_device_arrays()]
            total.block_until_ready()

        row[key] = statistics.median(_times(step, calls, budget))
        row[f"{key} in place"] = next(c["in_place"] for c in checks if c["options"] == options)
        del state
    jitted = jax.jit(jax_program, donate_argnums=0)
    state = {"c": jax.device_put(np.zeros(cache.shape, np.float32))}
    rest = [jax.device_put(a) for a in host]

    def jax_step() -> None:
        total, state["c"] = jitted(state["c"], *rest)
        total.block_until_ready()

    row["jax"] = statistics.median(_times(jax_step, calls, budget))
    del state
    row["engine"] = statistics.median(_times(lambda: compiled(cache, *args), calls, budget))
    row["engine in place"] = all(v == "in place" for v in compiled.in_place_report.values())
    floor = jax.jit(lambda c, *a: (a[0].sum(), c), donate_argnums=0)
    state = {"c": jax.device_put(np.zeros(cache.shape, np.float32))}

    def floor_step() -> None:
        total, state["c"] = floor(state["c"], *rest)
        total.block_until_ready()

    row["floor"] = statistics.median(_times(floor_step, calls, budget))
    row["update"] = args[0].nbytes
    return row


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"


def render(rows: list[dict[str, Any]], load: tuple) -> str:
    size = rows[0]["bytes"] >> 20 if rows and "bytes" in rows[0] else 0
    lines = ["## Exports on a plain consumer", "",
             f"The exported StableHLO of each KV pattern (a {size} MiB cache "
             "`[8, 8, rows, 128]`, written then read: `c[:, :, 0].sum()`) compiled by a "
             "plain XLA:CPU client as it is, the cache donated, with XLA's default options "
             "and with `xla_cpu_copy_insertion_use_region_analysis=true`; JAX's own program "
             "(`c.at[...].set(n)`, donated, default options); outofplace's engine "
             "(`compiled(cache, ...)`); the floor, a donated program that writes nothing "
             "(bench/exports.py). Medians a call. \"in place\": no copy of the donated "
             "cache in that consumer's optimized HLO (`xla.consumer_checks`). Load "
             f"average over the run: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.", "",
             "| pattern | plain, default options | plain, region analysis | JAX, default | "
             "outofplace engine | floor |",
             "|---|---:|---:|---:|---:|---:|"]

    def cell(r: dict, key: str) -> str:
        flag = r.get(f"{key} in place")
        return _ms(r[key]) + ("" if flag is None else " in place" if flag else " copies")

    for r in rows:
        if "error" in r:
            lines.append(f"| {r['row']} | failed: {r['error'][:120]} | | | | |")
            continue
        lines.append(f"| {r['row']} | {cell(r, 'default')} | {cell(r, 'option')} | "
                     f"{_ms(r['jax'])} | {cell(r, 'engine')} | {_ms(r['floor'])} |")
    return "\n".join(lines) + "\n"


def run(mib: int = 256, calls: int = 10, budget: float = 5.0,
        log: Callable[[str], None] = lambda m: None) -> str:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    rows_of_cache = (mib << 20) // (8 * 8 * 128 * 4)
    rows = []
    for name, (program, jax_program, extra) in _patterns(rows_of_cache).items():
        log(f"exports: {name}")
        try:
            rows.append(measure(name, program, jax_program, extra, rows_of_cache, calls,
                                budget))
        except Exception as error:  # a row says why it failed; the others still run
            rows.append({"row": name, "error": f"{type(error).__name__}: {error}"})
    return render(rows, os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    sys.stdout.write(run(args.mib, args.calls,
                         log=lambda m: print(m, file=sys.stderr, flush=True)))


if __name__ == "__main__":
    main()
