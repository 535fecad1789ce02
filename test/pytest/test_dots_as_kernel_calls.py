"""outofplace-dots-as-kernel-calls (transforms/dots_as_kernel_calls.py): the XLA engine
runs matrix products through eager's kernels (aten::linear, aten::matmul called by
backends/kernel_call.cpp inside the XLA program). Results against eager's, float32 and
float64, on both paths; each test checks the calls were made (the XLA module holds
them); a cache attention reads after writing it stays in place."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from differential import assert_sgd_steps_match_eager

import outofplace
from outofplace.backends import custom_calls
from outofplace.backends.xla import legalize_for_cpu

pytestmark = pytest.mark.skipif(
    not outofplace.xla.available() or custom_calls.extension() is None,
    reason="needs jax and the kernel handler (backends/kernel_call.cpp)")

DTYPES = [torch.float32, torch.float64]
CALL = 'stablehlo.custom_call @"aten::matmul"'


def tolerance(dtype: torch.dtype) -> dict:
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else \
        dict(rtol=1e-12, atol=1e-12)


def compiled_on(path: str, f, args):
    if path == "compile":
        compiled = outofplace.compile(f, args, cache=False)
        assert CALL in legalize_for_cpu(compiled.stablehlo)[0]
        return compiled
    torch._dynamo.reset()
    return torch.compile(f, backend="outofplace", options={"cache": False})


def linears(x, w1, b1, w2):
    """An `nn.Linear` with a bias (the weight [N, K]) over two rows, then `x @ w` ([K, N]).
    (A batch-1 one is XLA's dot, weight first: test_vector_dots_weight_first.py.)"""
    return torch.relu(F.linear(x, w1, b1)) @ w2


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_and_matmul_match_eager(path, dtype):
    args = (torch.randn(1, 2, 1536, dtype=dtype), torch.randn(1024, 1536, dtype=dtype) / 40,
            torch.randn(1024, dtype=dtype), torch.randn(1024, 1024, dtype=dtype) / 32)
    compiled = compiled_on(path, linears, args)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), linears(*args), **tolerance(dtype))


def attend(cache, pos, k, q, v):
    """A key cache written at a runtime position, then attention over it: the scores'
    `q @ cache.T` and the weights' `p @ v`, with the heads batched."""
    cache.index_copy_(1, pos, k)
    scores = q @ cache.transpose(-1, -2) / 8
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_attention_over_a_cache_written_in_place(path, dtype):
    """The cache read by the call through a transposed view of its buffer: values and
    the cache as eager's, the cache updated in its own memory, no copy warned of."""
    def args(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(12, 256, 64, dtype=dtype, generator=g), torch.tensor([seed]),
                torch.randn(12, 1, 64, dtype=dtype, generator=g),
                torch.randn(12, 16, 64, dtype=dtype, generator=g),
                torch.randn(12, 256, 48, dtype=dtype, generator=g))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        compiled = compiled_on(path, attend, args(3))
        for seed in (3, 100):
            got, expected = args(seed), args(seed)
            torch.testing.assert_close(compiled(*got), attend(*expected), **tolerance(dtype))
            torch.testing.assert_close(got[0], expected[0], **tolerance(dtype))
    if path == "compile":
        assert compiled.in_place_report == {"cache": "in place"}


def decode(cache, pos, k, x, w, v):
    """Batch-1 attention in a program that calls eager's kernels anyway: a projection of
    two rows (1.2M multiply-adds, a call, so the program runs at home; a batch-1 one is
    XLA's dot, test_vector_dots_weight_first.py, as in bfloat16 it is a call), a key
    cache [1, heads, positions, head dim] written at a runtime position, the query's
    scores over it and the weights' product with v."""
    q = F.linear(x, w).view(1, 12, 1, 64)
    cache.index_copy_(2, pos, k)
    scores = q @ cache.transpose(-1, -2) / 8
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batch_one_attention_reads_the_cache_in_place(path, dtype):
    """outofplace-squeeze-state leaves the query and the weights without a free
    dimension: their dots are calls too (with a unit one), the cache in place."""
    def args(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(1, 12, 256, 64, dtype=dtype, generator=g), torch.tensor([seed]),
                torch.randn(1, 12, 1, 64, dtype=dtype, generator=g),
                torch.randn(2, 1536, dtype=dtype, generator=g),
                torch.randn(384, 1536, dtype=dtype, generator=g) / 40,
                torch.randn(1, 12, 256, 64, dtype=dtype, generator=g))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        compiled = compiled_on(path, decode, args(3))
        if path == "compile":
            assert legalize_for_cpu(compiled.stablehlo)[0].count(CALL) == 3
            assert "dot_general" not in legalize_for_cpu(compiled.stablehlo)[0]
        for seed in (3, 100):
            got, expected = args(seed), args(seed)
            torch.testing.assert_close(compiled(*got), decode(*expected), **tolerance(dtype))
            torch.testing.assert_close(got[0], expected[0], **tolerance(dtype))
    if path == "compile":
        assert compiled.in_place_report == {"cache": "in place"}


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_training_step_matches_eager(path, dtype):
    """An MLP's SGD step: the forward's products, the inputs' gradients (`g @ w`) and the
    weights' (`g.T @ x`, g read transposed through a view) are eager's kernels; the loss
    and parameters after three steps as eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(768, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 512)).to(dtype)
    x = torch.randn(4, 768, dtype=dtype)  # (3.1M and 2.1M multiply-adds a product)

    def compile(step, args):
        compiled = compiled_on(path, step, args)
        if path == "compile":
            assert legalize_for_cpu(compiled.stablehlo)[0].count(CALL) == 5  # 2 + 2 + 1
        return compiled
    assert_sgd_steps_match_eager(model, x, compile, tolerance(dtype))


def grouped(k_cache, v_cache, pos, k, v, x, w):
    """Grouped-query decoding as transformers writes it: 8 query heads over 2 key-value
    heads, each cache written at a runtime position, then repeated to every query head
    (`repeat_kv`: expand and reshape) for attention."""
    q = F.linear(x, w).view(1, 8, 1, 64)  # (two rows: a call, so the program runs at home)
    k_cache.index_copy_(2, pos, k)
    v_cache.index_copy_(2, pos, v)
    keys = k_cache[:, :, None].expand(1, 2, 4, 256, 64).reshape(1, 8, 256, 64)
    values = v_cache[:, :, None].expand(1, 2, 4, 256, 64).reshape(1, 8, 256, 64)
    return torch.softmax(q @ keys.transpose(-1, -2) / 8, -1) @ values


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_grouped_query_attention_reads_the_repeated_caches_where_they_are(path, dtype):
    """The calls read each cache through a stride-0 view (no repeated copy in the
    program): values and caches as eager's, both caches in place."""
    def args(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(1, 2, 256, 64, dtype=dtype, generator=g),
                torch.randn(1, 2, 256, 64, dtype=dtype, generator=g), torch.tensor([seed]),
                torch.randn(1, 2, 1, 64, dtype=dtype, generator=g),
                torch.randn(1, 2, 1, 64, dtype=dtype, generator=g),
                torch.randn(2, 2048, dtype=dtype, generator=g),
                torch.randn(256, 2048, dtype=dtype, generator=g) / 45)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        compiled = compiled_on(path, grouped, args(3))
        if path == "compile":
            legal = legalize_for_cpu(compiled.stablehlo)[0]
            assert legal.count(CALL) == 3 and "4x256x64x" not in legal  # (no repeat)
        for seed in (3, 200):
            got, expected = args(seed), args(seed)
            torch.testing.assert_close(compiled(*got), grouped(*expected), **tolerance(dtype))
            torch.testing.assert_close(got[0], expected[0], **tolerance(dtype))
            torch.testing.assert_close(got[1], expected[1], **tolerance(dtype))
    if path == "compile":
        assert compiled.in_place_report == {"k_cache": "in place", "v_cache": "in place"}
