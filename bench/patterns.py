"""The KV-cache update patterns the emitted-code benchmark measures.

Each pattern is one decode step's write into a cache, given three ways: the PyTorch
function outofplace and torch-mlir compile (an in-place write), JAX's own program for the
same update (`c.at[...].set(...)`, or `jnp.where` for a mask, which `.at` cannot take under
jit), and the inputs. Contiguous caches are [batch, seq, heads, head_dim] float32 with
batch 4, 8 heads of 128; the cache size sets the sequence length. The paged cache is
vLLM's [blocks, block_size 16, heads, head_dim].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

B, H, D = 4, 8, 128  # batch, heads, head_dim
BLOCK = 16  # tokens per block of the paged cache
ELEMENT = 4  # float32
POSITION = 100  # where a decode step writes
INDEX_COPY_POSITIONS = [5, 77, 200, 1000]  # index_copy_ of a few positions
EVICTED = 8  # positions per batch row the mask selects


@dataclass
class Pattern:
    name: str
    source: str  # the PyTorch line, for the report
    jax_source: str  # JAX's program, for the report
    fn: Callable  # the PyTorch step (mutates its first argument)
    make_args: Callable[[int], tuple]  # cache bytes -> PyTorch inputs, cache first
    jax_fn: Callable  # (cache, *rest) -> new cache
    unit_stride: bool  # a unit-stride box write: the memcpy target applies
    limit_bytes: Callable[[tuple], int]  # bytes the update writes (the memcpy limit)


def _seq(cache_bytes: int) -> int:
    return cache_bytes // (B * H * D * ELEMENT)


def _cache(cache_bytes: int) -> torch.Tensor:
    return torch.zeros(B, _seq(cache_bytes), H, D)  # calloc: pages not touched yet


def _paged(cache_bytes: int) -> torch.Tensor:
    return torch.zeros(cache_bytes // (BLOCK * H * D * ELEMENT), BLOCK, H, D)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _k_bytes(args: tuple) -> int:
    return args[1].numel() * args[1].element_size()


# ------------------------------------------------------------------ PyTorch programs
def int_position(c, k):
    c[:, 100] = k


def runtime_position(c, k, pos):
    c[:, pos] = k


def unit_slice(c, k):
    c[:, 96:104] = k


def strided_slice(c, k):
    c[:, 0:64:8] = k


def tuple_of_slices(c, k):
    c[1:3, 96:104] = k


def index_copy(c, k, idx):
    c.index_copy_(1, idx, k)


def slot_mapping(cache, k, slots):
    cache.view(-1, H, D)[slots] = k


def bool_mask(c, v, mask):
    c[mask] = v


# ---------------------------------------------------------------------- JAX programs
def _jax_fns() -> dict[str, Callable]:
    import jax.numpy as jnp

    return {
        "int_position": lambda c, k: c.at[:, 100].set(k),
        "runtime_position": lambda c, k, pos: c.at[:, pos].set(k),
        "unit_slice": lambda c, k: c.at[:, 96:104].set(k),
        "strided_slice": lambda c, k: c.at[:, 0:64:8].set(k),
        "tuple_of_slices": lambda c, k: c.at[1:3, 96:104].set(k),
        "index_copy": lambda c, k, idx: c.at[:, idx].set(k),
        "slot_mapping": lambda c, k, slots: c.reshape(-1, H, D).at[slots].set(k)
        .reshape(c.shape),
        "bool_mask": lambda c, v, mask: jnp.where(mask[:, :, None, None], v, c),
    }


def _mask(cache_bytes: int) -> torch.Tensor:
    mask = torch.zeros(B, _seq(cache_bytes), dtype=torch.bool)
    mask[:, 40:40 + EVICTED] = True
    return mask


def patterns() -> list[Pattern]:
    jax_fns = _jax_fns()
    rows = [
        ("int_position", "c[:, 100] = k", "c.at[:, 100].set(k)", int_position,
         lambda n: (_cache(n), _randn(B, H, D)), True, _k_bytes),
        ("runtime_position", "c[:, pos] = k  (pos: 0-d int64 tensor)",
         "c.at[:, pos].set(k)", runtime_position,
         lambda n: (_cache(n), _randn(B, H, D), torch.tensor(POSITION)), True, _k_bytes),
        ("unit_slice", "c[:, 96:104] = k", "c.at[:, 96:104].set(k)", unit_slice,
         lambda n: (_cache(n), _randn(B, 8, H, D)), True, _k_bytes),
        ("strided_slice", "c[:, 0:64:8] = k", "c.at[:, 0:64:8].set(k)", strided_slice,
         lambda n: (_cache(n), _randn(B, 8, H, D)), False, _k_bytes),
        ("tuple_of_slices", "c[1:3, 96:104] = k", "c.at[1:3, 96:104].set(k)",
         tuple_of_slices, lambda n: (_cache(n), _randn(2, 8, H, D)), True, _k_bytes),
        ("index_copy", f"c.index_copy_(1, idx, k)  (idx: {len(INDEX_COPY_POSITIONS)} "
         "positions)", "c.at[:, idx].set(k)", index_copy,
         lambda n: (_cache(n), _randn(B, len(INDEX_COPY_POSITIONS), H, D),
                    torch.tensor(INDEX_COPY_POSITIONS)), False, _k_bytes),
        ("slot_mapping", f"cache.view(-1, H, D)[slots] = k  ({B} slots, paged "
         f"[blocks, {BLOCK}, H, D])",
         "c.reshape(-1, H, D).at[slots].set(k).reshape(c.shape)", slot_mapping,
         lambda n: (_paged(n), _randn(B, H, D),
                    torch.tensor([3, 17 * BLOCK + 5, 40 * BLOCK + 15, 63 * BLOCK])),
         False, _k_bytes),
        ("bool_mask", f"c[mask] = v  (mask: [batch, seq] bool, {EVICTED} positions a row;"
         " v: 0-d)", "jnp.where(mask[:, :, None, None], v, c)", bool_mask,
         lambda n: (_cache(n), torch.tensor(0.5), _mask(n)), False,
         lambda args: int(args[2].sum()) * H * D * ELEMENT),
    ]
    return [Pattern(name, source, jax_source, fn, make_args, jax_fns[name], unit, limit)
            for name, source, jax_source, fn, make_args, unit, limit in rows]


def torch_module(fn: Callable) -> torch.nn.Module:
    """The step as a module for torch-mlir's export_and_import. It returns `()`: the
    mutated input is then the one result (returning None breaks the StableHLO lowering
    on a `!torch.none` result; returning the cache would make it two results)."""

    def forward(self, *args):
        fn(*args)
        return ()

    return type(fn.__name__, (torch.nn.Module,), {"forward": forward})()


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()
