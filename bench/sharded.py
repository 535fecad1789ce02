"""A KV-cache update sharded over 4 XLA:CPU devices: outofplace against JAX and one device.

    .venv/bin/python bench/sharded.py            # prints the markdown section
    (bench/run.py runs it in a subprocess: the device count is fixed when jax starts)

`c[:, :, pos] = k` on a cache [B, H, S, D] split over its heads on 4 devices. Each
program is stepped in a loop with the cache resident on the devices, its updated (donated)
cache fed back as the next step's: outofplace's program as `Compiled.__call__` runs it
(through `jax.jit`'s dispatch, backends/spmd.py), JAX's `jax.jit` with the same shardings
and `donate_argnums`, and outofplace's program on one device. Then `Compiled.__call__`
itself on torch tensors. Bytes per device are XLA's compiled memory stats.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=4").strip()
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import outofplace  # noqa: E402
from outofplace.backends import xla  # noqa: E402

warnings.filterwarnings("ignore")
DEVICES = 4


def _median_us(step, state, seconds: float = 1.5) -> float:
    for _ in range(3):
        state = step(state)
    times, start = [], time.perf_counter()
    while len(times) < 20 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        state = step(state)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def run(shape: tuple[int, int, int, int]) -> dict:
    global jax
    jax = xla._jax()
    B, H, S, D = shape

    def write(cache, k, pos):
        cache[:, :, pos] = k

    args = (torch.zeros(shape), torch.ones(B, H, D), torch.tensor(S // 2 + 1))
    sharded = outofplace.compile(write, args, mesh={"tp": DEVICES},
                                 shardings={"cache": (None, "tp", None, None)})
    single = outofplace.compile(write, args)
    engine = sharded._sharded()
    report = sharded.sharding_report()
    spec = jax.sharding.PartitionSpec(None, "tp", None, None)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:DEVICES]), ("tp",))
    cache_sharding = jax.sharding.NamedSharding(mesh, spec)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    k = jax.device_put(np.ones((B, H, D), np.float32), replicated)
    pos = jax.device_put(np.int64(S // 2 + 1), replicated)

    def fresh():
        return jax.device_put(np.zeros(shape, np.float32), cache_sharding)

    def ours(c):  # the aliased result comes first
        return engine._compiled(c, k, pos)[0]

    def jax_write(c, k, pos):
        return c.at[:, :, pos].set(k)

    jitted = jax.jit(jax_write, in_shardings=(cache_sharding, replicated, replicated),
                     out_shardings=cache_sharding, donate_argnums=0)
    lowered = jitted.lower(fresh(), k, pos)
    compiled_jax = lowered.compile()
    one = xla.compile_for_cpu(single.stablehlo)
    device = one.local_devices()[0]  # outofplace's own CPU client
    k1, pos1 = jax.device_put(np.ones((B, H, D), np.float32), device), \
        jax.device_put(np.int64(S // 2 + 1), device)

    def single_step(c):
        return one.execute([c, k1, pos1])[single.io_map[0]]

    times = {
        "outofplace, 4 devices": _median_us(ours, fresh()),
        "JAX jit, 4 devices": _median_us(lambda c: jitted(c, k, pos), fresh()),
        "outofplace, 1 device": _median_us(
            single_step, jax.device_put(np.zeros(shape, np.float32), device)),
    }
    # Compiled.__call__ on torch tensors: the first call copies the cache in; the others
    # find it on the devices and copy the written row from them into the caller's tensor
    cache = torch.zeros(shape)
    t0 = time.perf_counter()
    sharded(cache, args[1], args[2])
    first_ms = (time.perf_counter() - t0) * 1e3
    calls = []
    for step in range(200):
        position = torch.tensor(step % S)
        t0 = time.perf_counter()
        sharded(cache, args[1], position)
        calls.append(time.perf_counter() - t0)
    assert torch.equal(cache[:, :, :200], torch.ones(B, H, min(200, S), D))
    call_us = statistics.median(calls) * 1e6
    stats = {
        "outofplace, 4 devices": engine._executable.get_compiled_memory_stats(),
        "JAX jit, 4 devices": compiled_jax.runtime_executable().get_compiled_memory_stats(),
        "outofplace, 1 device": one.get_compiled_memory_stats(),
    }
    return {"shape": shape, "times": times, "stats": stats, "report": report,
            "call_us": call_us, "first_ms": first_ms}


def markdown(result: dict) -> str:
    shape, times, stats = result["shape"], result["times"], result["stats"]
    mib = np.prod(shape) * 4 / (1 << 20)
    out = ["## Sharded KV-cache update on 4 XLA:CPU devices\n",
           f"`c[:, :, pos] = k` on a float32 cache {list(shape)} ({mib:.0f} MiB) split over "
           "its heads (`shardings={'cache': (None, 'tp', None, None)}`, mesh "
           "`{'tp': 4}`), the cache resident on the devices and donated every step "
           "(bench/sharded.py; `--xla_force_host_platform_device_count=4`: the 4 "
           "devices share this machine's cores).\n",
           "| program | time per step | argument bytes per device | aliased bytes per "
           "device | temp bytes per device |", "|---|---|---|---|---|"]
    for name, us in times.items():
        s = stats.get(name) or stats.get("JAX jit, 4 devices")
        out.append(f"| {name} | {us:.1f} µs | {s.argument_size_in_bytes:,} | "
                   f"{s.alias_size_in_bytes:,} | {s.temp_size_in_bytes:,} |")
    ours, jit = times["outofplace, 4 devices"], times["JAX jit, 4 devices"]
    out += ["", f"outofplace / JAX jit (both through jax.jit's C++ dispatch; ours also "
            f"returns the clamped position, for the host): {ours / jit:.2f}x. The "
            "per-device bytes are the same: a quarter of the cache, aliased.\n",
            f"`Compiled.__call__` on torch tensors, the cache resident on the devices "
            "and the written row copied from the devices into the caller's tensor "
            "(docs/sharding.md, "
            f"\"Running\"): {result['call_us']:.1f} µs a step (median of 200); its first "
            f"call, which copies the cache to the devices: {result['first_ms']:.1f} ms. "
            "Each call also puts `k` and `pos` on the 4 devices and wraps the results. "
            "(Before the cache was resident, a call copied it in and out: 84.6 ms.)\n",
            "The sharding report:\n", "```", str(result["report"]), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    size = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "1,32,4096,128")
            .split(",")]
    print(markdown(run(tuple(size))))
