"""A rolling KV cache compiled by outofplace: `make demo` runs this file.

The cache is a module buffer updated in place every step. outofplace turns the update into
value semantics, returns the new cache as an extra result and marks the argument as
aliasing it, so an XLA backend updates the buffer in place instead of copying it.
"""

import copy

import torch

import outofplace


class RollingKVCache(torch.nn.Module):
    def __init__(self, layers: int = 2, steps: int = 6, dim: int = 4) -> None:
        super().__init__()
        self.register_buffer("kv_cache", torch.zeros(layers, steps, dim))
        self.register_buffer("step", torch.zeros((), dtype=torch.int64))

    def forward(self, k: torch.Tensor) -> torch.Tensor:
        rolled = torch.cat([self.kv_cache[:, 1:], k], dim=1)  # drop the oldest entry
        self.kv_cache.copy_(rolled)
        self.step.add_(1)
        return (self.kv_cache * k).sum(-1)


def main() -> None:
    torch.manual_seed(0)
    model = RollingKVCache()
    eager = copy.deepcopy(model)
    k = torch.randn(2, 1, 4)

    compiled = outofplace.compile(model, (k,))
    print(compiled.stablehlo)
    print("inputs:", compiled.input_names)
    print("io_map:", compiled.io_map, "(input index -> result index)")

    agree = True
    for _ in range(3):
        k = torch.randn(2, 1, 4)
        agree &= torch.allclose(compiled(k), eager(k))
    agree &= torch.equal(model.kv_cache, eager.kv_cache)
    agree &= torch.equal(model.step, eager.step)
    print("eager and compiled results agree after 3 steps (outputs, kv_cache, step):",
          bool(agree))
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
