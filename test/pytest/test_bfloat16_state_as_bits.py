"""outofplace-bfloat16-state-as-bits (transforms/bfloat16_state_as_bits.py): the XLA engine
passes a bfloat16 cache that is updated in place as its 16-bit integers, so XLA:CPU
updates it in the caller's memory instead of converting the whole cache to float32 and
back, copied, on every call. Values against eager's on every engine and on both paths
(`outofplace.compile`, `torch.compile`), the types XLA takes (a float16 cache, which
XLA:CPU updates in place as it is, keeps its type), in place with no warning, a cache a
loop carries, and a call that fails after XLA took the bits."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch._dynamo
from torch._higher_order_ops import while_loop

import outofplace
from outofplace.backends import xla

from differential import assert_matches_eager, assert_same, \
    engine_failing_after_taking_buffers

pytestmark = pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax")

HALVES = [torch.bfloat16, torch.float16]


def write_then_attend(c, pos, q, u):
    """A KV cache's step: the new row written at a runtime position, then attention's
    scores over the whole cache."""
    c.index_copy_(2, pos, u)
    return q @ c.transpose(-1, -2)


def read_then_write(c, pos, q, u):
    """The scores of the cache before the write, then a slice write."""
    scores = q @ c.transpose(-1, -2)
    c[:, :, pos] = u
    return scores


def args_of(dtype: torch.dtype, batch: int, position: int = 2) -> tuple:
    """A cache of 8 KB or more (so a copy would warn), small integers: every product and
    sum is exact in float32 and in the 16-bit type, so eager and XLA agree bit for bit."""
    def ints(*shape):
        return torch.randint(-4, 4, shape).to(dtype)
    return ints(batch, 4, 128, 8), torch.tensor([position]), ints(batch, 4, 1, 8), \
        ints(batch, 4, 1, 8)


@pytest.mark.parametrize("f", [write_then_attend, read_then_write])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("dtype", HALVES)
def test_16_bit_float_cache_matches_eager_in_place(dtype, batch, f) -> None:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        compiled = assert_matches_eager(f, *args_of(dtype, batch))
        cache, pos, q, u = args_of(dtype, batch)
        eager = cache.clone()
        for position in (5, 0, 127):
            pos = torch.tensor([position])
            assert_same(compiled(cache, pos, q, u), f(eager, pos, q, u), f"at {position}")
            assert torch.equal(cache, eager), f"cache after the write at {position}"
    assert compiled.in_place_report == {"c": "in place"}
    # XLA takes a bfloat16 cache as its bits, an i16 parameter; a float16 one as it is
    _, inputs, _, _, _ = xla.compiler.legalized(compiled.stablehlo)
    assert inputs[compiled.input_names.index("c")][1] == \
        {torch.bfloat16: "i16", torch.float16: "f16"}[dtype]


@pytest.mark.parametrize("dtype", HALVES)
def test_16_bit_float_cache_through_torch_compile_in_place(dtype) -> None:
    """The torch.compile path: the same values as eager over several calls, no copy."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    run = torch.compile(write_then_attend, backend="outofplace", dynamic=False)
    cache, _, q, u = args_of(dtype, 1)
    eager = cache.clone()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        for position in (3, 64, 3):
            pos = torch.tensor([position])
            assert_same(run(cache, pos, q, u), write_then_attend(eager, pos, q, u),
                        f"scores at {position}")
            assert torch.equal(cache, eager), f"cache after the write at {position}"


def test_call_failing_after_xla_took_the_bits_leaves_zeros() -> None:
    """A failure after XLA took a cache passed as bits: the cache reads zeros of its own
    dtype and the next call runs (its buffer is the int16 XLA takes)."""
    cache, pos, q, u = args_of(torch.bfloat16, 1)
    compiled = outofplace.compile(write_then_attend, args_of(torch.bfloat16, 1))
    compiled(cache, pos, q, u)
    with engine_failing_after_taking_buffers(compiled), \
            pytest.raises(xla.CallFailed, match="arguments 'c': their values are lost"):
        compiled(cache, pos, q, u)
    assert cache.dtype == torch.bfloat16 and bool((cache == 0).all())
    expected = torch.zeros_like(cache)
    assert_same(compiled(cache, pos, q, u), write_then_attend(expected, pos, q, u),
                "the next call")
    assert torch.equal(cache, expected)


def fill_rows(cache, h, start, n):
    """A decode loop's cache: each iteration writes its row at start + i and reads the
    cache back."""
    def cond_fn(i, h):
        return i < n

    def body_fn(i, h):
        cache.index_copy_(0, (start + i).reshape(1), h[None])
        return i + 1, h + cache[start]

    return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))[1]


def fill_rows_eager(cache, h, start, n):
    """fill_rows as the Python loop `while_loop` is documented to equal."""
    for i in range(int(n)):
        cache[int(start) + i] = h
        h = h + cache[int(start)]
    return h


@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_cache_a_loop_carries_is_bits_and_in_place(path) -> None:
    """The while carries the cache as bits: XLA:CPU's optimized program copies it
    nowhere (its float normalization converted and copied it at every iteration), and
    every call over runtime trip counts gives eager's values (small integers: exact)."""
    cache, h = torch.zeros(512, 16, dtype=torch.bfloat16), torch.ones(16, dtype=torch.bfloat16)
    example = (cache.clone(), h, torch.tensor(1), torch.tensor(2))
    if path == "outofplace.compile":
        compiled = outofplace.compile(fill_rows, example)
        assert compiled.in_place_report == {"cache": "in place"}
        hlo = "\n".join(m.to_string() for m in xla.compile_for_cpu(
            xla.legalize_for_cpu(compiled.stablehlo)[0]).hlo_modules())
        assert " while(" in hlo and "s16[512,16]" in hlo
        # no copy of the cache, no float32 cache materialized (a fusion's result)
        assert not re.search(r"\[512,16\]\{1,0\} copy\(", hlo)
        assert not re.search(r"f32\[512,16\]\{1,0\} fusion\(", hlo)
        run = compiled
    else:
        torch._dynamo.reset()
        dynamo = torch.compile(fill_rows, backend="outofplace")

        def run(*args):
            with torch.no_grad():  # dynamo takes writes in regions without gradients only
                return dynamo(*args)
    expected = cache.clone()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        for start, n in ((3, 4), (0, 0), (100, 3)):
            args = (torch.tensor(start), torch.tensor(n))
            assert_same(run(cache, h, *args), fill_rows_eager(expected, h, *args),
                        f"h from {start}")
            assert torch.equal(cache, expected), f"cache after {n} rows from {start}"
