"""A KV-cache update sharded over 4 XLA:CPU devices: outofplace against JAX and one device.

    .venv/bin/python bench/sharded.py            # prints the markdown section
    (bench/run.py runs it in a subprocess: the device count is fixed when jax starts)

`c[:, :, pos] = k` on a cache [B, H, S, D] split over its heads on 4 devices. Each
program is stepped in a loop with the cache resident on the devices, its updated (donated)
cache fed back as the next step's: outofplace's program as `Compiled.__call__` runs it
(through `jax.jit`'s dispatch, backends/spmd), JAX's `jax.jit` with the same shardings
and `donate_argnums`, outofplace's program on one device, and `Compiled.__call__` itself
on torch tensors, in turns (a round each, five rounds: the machine is shared and its load
varies). Bytes per device are XLA's compiled memory stats.
"""

from __future__ import annotations

import itertools
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
ROUNDS = 5


def _median_us(step, state, seconds: float):
    """The median time of a step in a loop of `seconds`, and the state it left."""
    for _ in range(3):
        state = step(state)
    times, start = [], time.perf_counter()
    while len(times) < 20 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        state = step(state)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6, state


def _in_turns(programs: dict, rounds: int = ROUNDS, seconds: float = 0.5) -> dict:
    """Each program's time per step, the programs measured in turns, a round each, so
    that the load of this shared machine falls on all of them alike: per program, its
    rounds' medians."""
    states = {name: fresh() for name, (_, fresh) in programs.items()}
    found: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(rounds):
        for name, (step, _) in programs.items():
            median, states[name] = _median_us(step, states[name], seconds)
            found[name].append(median)
    return found


def run(shape: tuple[int, int, int, int]) -> dict:
    global jax
    jax = xla.load_jax()
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

    # Compiled.__call__ on torch tensors: the first call copies the cache in; the others
    # find it on the devices and copy the written row from them into the caller's tensor
    cache = torch.zeros(shape)
    t0 = time.perf_counter()
    sharded(cache, args[1], args[2])
    first_ms = (time.perf_counter() - t0) * 1e3
    positions, steps = [torch.tensor(p) for p in range(S)], itertools.count()

    def call(_):
        sharded(cache, args[1], positions[next(steps) % S])

    # the same calls with every call Python's (as without the C++ extension)
    python = outofplace.compile(write, args, mesh={"tp": DEVICES},
                                shardings={"cache": (None, "tp", None, None)})
    python_cache = torch.zeros(shape)
    python(python_cache, args[1], args[2])
    python._make_plan = lambda inputs: None
    python._planned = None

    def python_call(_):
        python(python_cache, args[1], positions[next(steps) % S])

    rounds = _in_turns({
        "outofplace, 4 devices": (ours, fresh),
        "JAX jit, 4 devices": (lambda c: jitted(c, k, pos), fresh),
        "outofplace, 1 device": (single_step, lambda: jax.device_put(
            np.zeros(shape, np.float32), device)),
        "Compiled.__call__": (call, lambda: None),
        "Compiled.__call__, Python": (python_call, lambda: None),
    })
    assert torch.equal(cache[:, :, :200], torch.ones(B, H, min(200, S), D))
    times = {name: statistics.median(found) for name, found in rounds.items()}
    ratios = [a / b for a, b in zip(rounds["outofplace, 4 devices"],
                                    rounds["JAX jit, 4 devices"])]
    stats = {
        "outofplace, 4 devices": engine._executable.get_compiled_memory_stats(),
        "JAX jit, 4 devices": compiled_jax.runtime_executable().get_compiled_memory_stats(),
        "outofplace, 1 device": one.get_compiled_memory_stats(),
    }
    return {"shape": shape, "times": times, "rounds": rounds, "ratios": ratios,
            "stats": stats, "report": report, "first_ms": first_ms,
            "load": os.getloadavg()}


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
        if name.startswith("Compiled.__call__"):
            continue
        s = stats.get(name) or stats.get("JAX jit, 4 devices")
        out.append(f"| {name} | {us:.1f} µs | {s.argument_size_in_bytes:,} | "
                   f"{s.alias_size_in_bytes:,} | {s.temp_size_in_bytes:,} |")
    ours, call = times["outofplace, 4 devices"], times["Compiled.__call__"]
    python, jax_us = times["Compiled.__call__, Python"], times["JAX jit, 4 devices"]
    out += ["", f"Each time is the median of {ROUNDS} rounds' medians, the programs "
            "(and `Compiled.__call__` below) measured in turns, a round each, so that the "
            "load of the shared machine falls on all alike (load average "
            f"{result['load'][0]:.2f} at the end).\n",
            "outofplace / JAX jit (both through jax.jit's C++ dispatch; the host "
            "computes the clamped position itself, backends/host_scalars.py): "
            f"{statistics.median(result['ratios']):.2f}x (per round: "
            f"{', '.join(f'{r:.2f}' for r in result['ratios'])}). The per-device bytes "
            "are the same: a quarter of the cache, aliased.\n",
            "`Compiled.__call__` on torch tensors, the cache resident on the devices "
            "and the written row copied from the devices into the caller's tensor "
            f"(docs/sharding.md, \"Running\"): {call:.1f} µs a step "
            f"({call / jax_us:.2f}x JAX's program stepped back to back, {ours:.1f} µs for "
            "ours: between calls the host checks the arguments, copies `k` and `pos` "
            "into buffers the 4 devices keep, and copies the written row from each "
            "device's shard, in C++ (backends/sharded_call.cpp); the devices' threads, "
            "idle meanwhile, then take longer to start the next step). The same calls "
            f"all in Python (without the C++ extension): {python:.1f} µs. Its first "
            "call, which copies the cache to the "
            f"devices: {result['first_ms']:.1f} ms. (Before the cache was resident, a "
            "call copied it in and out: 84.6 ms.)\n",
            "The sharding report:\n", "```", str(result["report"]), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    size = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "1,32,4096,128")
            .split(",")]
    print(markdown(run(tuple(size))))
