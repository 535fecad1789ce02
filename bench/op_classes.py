"""The op classes a decoder and a training step are made of, one program each, through
the user's path (`outofplace.compile(...)` then `compiled(...)`) against eager and JAX's
own program of the same op (`jax.jit`, written with jax.numpy / jax.lax) in one run
(docs/performance.md, "Op classes").

    .venv/bin/python bench/op_classes.py                  # every row, markdown on stdout
    .venv/bin/python bench/op_classes.py --only conv      # rows whose name has "conv"

JAX's column is XLA:CPU's own time for the op: where outofplace is slower than eager and
JAX is too, the limit is XLA:CPU, not outofplace's path to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from real_models import _times  # seconds per call, after a warm-up call

warnings.filterwarnings("ignore")


@dataclass
class Case:
    name: str
    torch_fn: Callable[..., Any]  # the program, eager and compiled
    make: Callable[[], tuple]  # its arguments (float32)
    jax_fn: Callable[..., Any]  # the same op written in JAX, on numpy copies of them


def cases() -> list[Case]:
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    def randn(*shape: int) -> Any:
        return torch.randn(*shape)

    def grads(f: Callable[..., Any], *wrt: int) -> Callable[..., Any]:
        """The program computing f's gradients w.r.t. the arguments `wrt`, which require
        them (a backward pass, as a training step runs it)."""
        def program(*args: Any) -> Any:
            return torch.autograd.grad(f(*args).sum(), [args[i] for i in wrt])
        return program

    def needing_grad(make: Callable[[], tuple], *wrt: int) -> Callable[[], tuple]:
        return lambda: tuple(a.requires_grad_(i in wrt) for i, a in enumerate(make()))

    def jgrads(f: Callable[..., Any], *wrt: int) -> Callable[..., Any]:
        return jax.grad(lambda *a: f(*a).sum(), argnums=wrt)

    def conv_t(x: Any, w: Any) -> Any:
        return F.conv2d(x, w, padding=1)

    def conv_j(x: Any, w: Any) -> Any:
        return jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def conv7_t(x: Any, w: Any) -> Any:
        return F.conv2d(x, w, stride=2, padding=3)

    def conv7_j(x: Any, w: Any) -> Any:
        return jax.lax.conv_general_dilated(x, w, (2, 2), ((3, 3), (3, 3)),
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def conv_s2_t(x: Any, w: Any) -> Any:
        return F.conv2d(x, w, stride=2, padding=1)

    def conv_s2_j(x: Any, w: Any) -> Any:
        return jax.lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)),
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def bn_t(x: Any, w: Any, b: Any) -> Any:
        return F.batch_norm(x, None, None, w, b, training=True)

    def bn_j(x: Any, w: Any, b: Any) -> Any:
        mean = x.mean((0, 2, 3), keepdims=True)
        var = x.var((0, 2, 3), keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * w[:, None, None] + b[:, None, None]

    def rms_t(x: Any, w: Any) -> Any:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def rms_j(x: Any, w: Any) -> Any:
        return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w

    def sdpa_j(q: Any, k: Any, v: Any) -> Any:
        s = q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(q.shape[-1])
        return jax.nn.softmax(s, -1) @ v

    def sgd_t(*tensors: Any) -> None:  # parameters, gradients, momentum buffers
        n = len(tensors) // 3
        params, grads_, bufs = tensors[:n], tensors[n:2 * n], tensors[2 * n:]
        torch._foreach_mul_(bufs, 0.9)
        torch._foreach_add_(bufs, grads_)
        torch._foreach_add_(params, bufs, alpha=-0.01)

    def sgd_j(*arrays: Any) -> Any:
        n = len(arrays) // 3
        params, grads_, bufs = arrays[:n], arrays[n:2 * n], arrays[2 * n:]
        bufs = [0.9 * b + g for b, g in zip(bufs, grads_)]
        return [p - 0.01 * b for p, b in zip(params, bufs)], bufs

    def resnet18_tensors() -> tuple:
        from real_models import resnet18

        shapes = [p.shape for p in resnet18().parameters()]
        return tuple(torch.randn(s) for _ in range(3) for s in shapes)

    def pool_t(x: Any) -> Any:
        return F.max_pool2d(x, 3, 2, 1)

    def pool_j(x: Any) -> Any:
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2),
                                     ((0, 0), (0, 0), (1, 1), (1, 1)))

    return [
        Case("linear 2048→5632, batch 1", lambda x, w, b: F.linear(x, w, b),
             lambda: (randn(1, 1, 2048), randn(5632, 2048), randn(5632)),
             lambda x, w, b: x @ w.T + b),
        Case("linear 2048→5632, batch 64", lambda x, w, b: F.linear(x, w, b),
             lambda: (randn(64, 1, 2048), randn(5632, 2048), randn(5632)),
             lambda x, w, b: x @ w.T + b),
        Case("matmul [8, 256, 256] @ [8, 256, 256]", lambda a, b: torch.bmm(a, b),
             lambda: (randn(8, 256, 256), randn(8, 256, 256)), jnp.matmul),
        Case("embedding 32000x2048, 1 token", lambda i, w: F.embedding(i, w),
             lambda: (torch.tensor([[7]]), randn(32000, 2048)), lambda i, w: w[i]),
        Case("rms norm [1, 1, 2048]", rms_t, lambda: (randn(1, 1, 2048), randn(2048)), rms_j),
        Case("layer norm [64, 128, 768]",
             lambda x, w, b: F.layer_norm(x, (768,), w, b),
             lambda: (randn(64, 128, 768), randn(768), randn(768)),
             lambda x, w, b: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(
                 x.var(-1, keepdims=True) + 1e-5) * w + b),
        Case("SDPA decode [1, 32, 1|256, 64]",
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
             lambda: (randn(1, 32, 1, 64), randn(1, 32, 256, 64), randn(1, 32, 256, 64)),
             sdpa_j),
        Case("SDPA prefill [1, 12, 256, 64]",
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
             lambda: (randn(1, 12, 256, 64), randn(1, 12, 256, 64), randn(1, 12, 256, 64)),
             sdpa_j),
        Case("conv 3x3 64→64 [8, 64, 56, 56]", conv_t,
             lambda: (randn(8, 64, 56, 56), randn(64, 64, 3, 3)), conv_j),
        Case("conv 3x3 backward [8, 64, 56, 56]", grads(conv_t, 0, 1),
             needing_grad(lambda: (randn(8, 64, 56, 56), randn(64, 64, 3, 3)), 0, 1),
             jgrads(conv_j, 0, 1)),
        Case("conv 3x3 512→512 [8, 512, 2, 2] (window larger than the input)", conv_t,
             lambda: (randn(8, 512, 2, 2), randn(512, 512, 3, 3)), conv_j),
        Case("conv 7x7/2 3→64 [8, 3, 224, 224]", conv7_t,
             lambda: (randn(8, 3, 224, 224), randn(64, 3, 7, 7)), conv7_j),
        Case("conv 7x7/2 backward [8, 3, 224, 224]", grads(conv7_t, 0, 1),
             needing_grad(lambda: (randn(8, 3, 224, 224), randn(64, 3, 7, 7)), 0, 1),
             jgrads(conv7_j, 0, 1)),
        Case("conv 3x3/2 64→128 backward [8, 64, 56, 56]", grads(conv_s2_t, 0, 1),
             needing_grad(lambda: (randn(8, 64, 56, 56), randn(128, 64, 3, 3)), 0, 1),
             jgrads(conv_s2_j, 0, 1)),
        Case("batch norm (training) [8, 64, 56, 56]", bn_t,
             lambda: (randn(8, 64, 56, 56), randn(64), randn(64)), bn_j),
        Case("batch norm backward [8, 64, 56, 56]", grads(bn_t, 0, 1, 2),
             needing_grad(lambda: (randn(8, 64, 56, 56), randn(64), randn(64)), 0, 1, 2),
             jgrads(bn_j, 0, 1, 2)),
        Case("max pool 3x3/2 [8, 64, 112, 112]", pool_t,
             lambda: (randn(8, 64, 112, 112),), pool_j),
        Case("max pool backward [8, 64, 112, 112]", grads(pool_t, 0),
             needing_grad(lambda: (randn(8, 64, 112, 112),), 0), jgrads(pool_j, 0)),
        Case("SGD with momentum, ResNet-18's 62 parameters (11.7M)", sgd_t,
             resnet18_tensors, sgd_j),
    ]


def measure(case: Case, calls: int, budget: float) -> dict[str, Any]:
    import jax
    import numpy as np
    import torch

    import outofplace

    torch.manual_seed(0)
    args = case.make()
    row: dict[str, Any] = {"row": case.name}
    with torch.no_grad() if "backward" not in case.name else torch.enable_grad():
        row["eager"] = statistics.median(_times(lambda: case.torch_fn(*args), calls, budget))
        compiled = outofplace.compile(case.torch_fn, args)
        row["outofplace"] = statistics.median(_times(lambda: compiled(*args), calls, budget))
    host = [a.detach().numpy() for a in args]
    jitted = jax.jit(case.jax_fn)
    device = [jax.device_put(a) for a in host]

    def jax_step() -> Any:
        return jax.block_until_ready(jitted(*device))

    row["jax"] = statistics.median(_times(jax_step, calls, budget))
    return row


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"


def render(rows: list[dict[str, Any]], load: tuple) -> str:
    lines = ["## Op classes", "",
             "Each op class a decoder and a training step use, as its own program "
             "(bench/op_classes.py): eager, `outofplace.compile` called as a user calls "
             "it, and JAX's own program of the op (`jax.jit`, jax.numpy/jax.lax, arguments "
             "already on the device) on the same XLA:CPU, medians. Where outofplace / eager "
             "is above 1 and JAX / eager is too, XLA:CPU is the slower one, not outofplace's "
             f"path to it. Load average over the run: {load[0]:.1f} / {load[1]:.1f} / "
             f"{load[2]:.1f}.", "",
             "| op class | eager | outofplace | JAX | outofplace / eager | JAX / eager |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['row']} | — | — | — | failed: {r['error'][:120]} | |")
            continue
        lines.append(f"| {r['row']} | {_ms(r['eager'])} | {_ms(r['outofplace'])} | "
                     f"{_ms(r['jax'])} | {r['outofplace'] / r['eager']:.2f}x | "
                     f"{r['jax'] / r['eager']:.2f}x |")
    return "\n".join(lines) + "\n"


def run(only: str | None = None, calls: int = 20, budget: float = 5.0,
        log: Callable[[str], None] = lambda m: None) -> str:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    rows = []
    for case in cases():
        if only and only not in case.name:
            continue
        log(f"op classes: {case.name}")
        try:
            rows.append(measure(case, calls, budget))
        except Exception as error:  # a row says why it failed; the others still run
            rows.append({"row": case.name, "error": f"{type(error).__name__}: {error}"})
    return render(rows, os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="rows whose name contains this")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    sys.stdout.write(run(args.only, args.calls,
                         log=lambda m: print(m, file=sys.stderr, flush=True)))


if __name__ == "__main__":
    main()
