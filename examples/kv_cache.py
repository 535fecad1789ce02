"""A decode step that writes its KV cache at a position, compiled by outofplace: `make demo`
runs this file.

The cache is a module buffer written at the step's position (`kv_cache[:, pos] = k`) and
read by attention right after. outofplace turns the write into value semantics, returns the
new cache as an extra result and marks the argument as aliasing it, so XLA updates the
buffer in place: a step costs the update and the attention, never a copy of the cache.
"""

import copy
import statistics
import time
import warnings

import torch

import outofplace


class DecodeStep(torch.nn.Module):
    def __init__(self, heads: int = 8, positions: int = 4096, dim: int = 64) -> None:
        super().__init__()
        self.register_buffer("kv_cache", torch.zeros(heads, positions, dim))
        self.register_buffer("step", torch.zeros((), dtype=torch.int64))

    def forward(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.kv_cache[:, pos] = k  # one row per head, in place
        self.step.add_(1)
        scores = torch.einsum("hd,hsd->hs", q, self.kv_cache) / 8.0
        return torch.einsum("hs,hsd->hd", scores.softmax(-1), self.kv_cache)


def _per_call(step, *args) -> float:
    step(*args)
    times = []
    for _ in range(50):
        start = time.perf_counter()
        step(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    torch.manual_seed(0)
    model = DecodeStep()
    eager = copy.deepcopy(model)
    q, k = torch.randn(8, 64), torch.randn(8, 64)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the demo's cache is updated in place: no warning
        # check_bounds: a position out of range raises IndexError, as in eager
        compiled = outofplace.compile(model, (q, k, torch.tensor(0)), check_bounds=True)
        print(compiled.stablehlo)
        print("inputs:", compiled.input_names)
        print("io_map:", compiled.io_map, "(input index -> result index)")

        agree = True
        for pos in range(3):
            q, k = torch.randn(8, 64), torch.randn(8, 64)
            agree &= torch.allclose(compiled(q, k, torch.tensor(pos)),
                                    eager(q, k, torch.tensor(pos)), atol=1e-5)
        agree &= torch.equal(model.kv_cache, eager.kv_cache)
        agree &= torch.equal(model.step, eager.step)
        print("eager and compiled agree after 3 steps (outputs, kv_cache, step):", bool(agree))
        print("in place:", compiled.in_place_report)
        pos = torch.tensor(3)
        print(f"a step, {model.kv_cache.nbytes >> 20} MiB cache: compiled "
              f"{_per_call(compiled, q, k, pos) * 1e6:.0f} µs, eager "
              f"{_per_call(eager, q, k, pos) * 1e6:.0f} µs")
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
