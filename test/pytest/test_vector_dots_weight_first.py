"""outofplace-vector-dots-weight-first (transforms/vector_dots_weight_first.py): the XLA
engine computes a vector-weight product (a batch-1 `nn.Linear`) as XLA's dot with the
weight first, not as eager's kernel. Values against eager's, float32 and float64, on
both paths; which dots the legalized program holds; a decode step's cache in place."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import outofplace
from outofplace.backends.xla import legalize_for_cpu

pytestmark = pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax")

DTYPES = [torch.float32, torch.float64]
CALL = 'stablehlo.custom_call @"aten::matmul"'


def tolerance(dtype: torch.dtype) -> dict:
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else \
        dict(rtol=1e-12, atol=1e-12)


def compiled_on(path: str, f, args):
    if path == "compile":
        return outofplace.compile(f, args, cache=False)
    torch._dynamo.reset()
    return torch.compile(f, backend="outofplace", options={"cache": False})


def linears(x, w1, b1, w2):
    """A batch-1 `nn.Linear` of 4096 columns with a bias (the weight [N, K]: XLA would
    copy it transposed at every call, vector first), then `x @ w` ([K, N])."""
    return torch.relu(F.linear(x, w1, b1)) @ w2


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batch_one_linear_and_matmul_match_eager(path, dtype):
    args = (torch.randn(1, 1, 4096, dtype=dtype), torch.randn(512, 4096, dtype=dtype) / 64,
            torch.randn(512, dtype=dtype), torch.randn(512, 1024, dtype=dtype) / 32)
    compiled = compiled_on(path, linears, args)
    if path == "compile":
        legal = legalize_for_cpu(compiled.stablehlo)[0]
        assert CALL not in legal
        assert "(tensor<512x4096xf" in legal and "(tensor<512x1024xf" in legal, legal
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), linears(*args), **tolerance(dtype))


def test_bfloat16_stays_a_kernel_call():
    """XLA:CPU's bfloat16 dot is slower than eager's: a call of eager's kernel (when the
    handler is built), and values as eager's."""
    args = (torch.randn(1, 1, 2048).bfloat16(), torch.randn(1024, 2048).bfloat16() / 45,
            torch.randn(1024).bfloat16(), torch.randn(1024, 512).bfloat16() / 32)
    compiled = outofplace.compile(linears, args, cache=False)
    if outofplace.backends.custom_calls.extension() is not None:
        assert CALL in legalize_for_cpu(compiled.stablehlo)[0]
    torch.testing.assert_close(compiled(*args), linears(*args), rtol=2e-2, atol=2e-2)


def decode(cache, pos, k, x, wq, v, wo):
    """A batch-1 decode step: the query's projection, a key cache [1, heads, positions,
    head dim] written at a runtime position, attention over it, the output projection."""
    q = F.linear(x, wq).view(1, 12, 1, 64)
    cache.index_copy_(2, pos, k)
    scores = q @ cache.transpose(-1, -2) / 8
    return F.linear((torch.softmax(scores, -1) @ v).reshape(1, 1, 768), wo)


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_step_keeps_its_cache_in_place(path, dtype):
    """No kernel call left in the program: values and the cache as eager's, the cache
    updated in its own memory, no copy warned of."""
    def args(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(1, 12, 256, 64, dtype=dtype, generator=g), torch.tensor([seed]),
                torch.randn(1, 12, 1, 64, dtype=dtype, generator=g),
                torch.randn(1, 1, 768, dtype=dtype, generator=g),
                torch.randn(768, 768, dtype=dtype, generator=g) / 28,
                torch.randn(1, 12, 256, 64, dtype=dtype, generator=g),
                torch.randn(768, 768, dtype=dtype, generator=g) / 28)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        compiled = compiled_on(path, decode, args(3))
        if path == "compile":
            assert CALL not in legalize_for_cpu(compiled.stablehlo)[0]
        for seed in (3, 100):
            got, expected = args(seed), args(seed)
            torch.testing.assert_close(compiled(*got), decode(*expected), **tolerance(dtype))
            torch.testing.assert_close(got[0], expected[0], **tolerance(dtype))
    if path == "compile":
        assert compiled.in_place_report == {"cache": "in place"}


FORMS = {
    "linear of a 1-d vector": (lambda x, w, v: F.linear(v, w), (1024, 2048)),
    "mv": (lambda x, w, v: torch.mv(w, v), (1024, 2048)),
    "a 1-d vector @ [K, N]": (lambda x, w, v: v @ w.T.contiguous(), (1024, 2048)),
    "a row @ [K, N]": (lambda x, w, v: x @ w.T.contiguous(), (1024, 2048)),
    "a row @ w.T, a tall weight": (lambda x, w, v: x @ w.T, (4096, 512)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", FORMS, ids=list(FORMS))
def test_each_form_of_a_vector_dot_matches_eager(form, dtype):
    """The vector as a row, as a 1-d tensor, on either side, the weight [N, K] or [K, N]:
    values as eager's, and no kernel call left (the dot is XLA's, weight first)."""
    f, (n, k) = FORMS[form]
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(1, k, dtype=dtype, generator=g),
            torch.randn(n, k, dtype=dtype, generator=g) / k ** 0.5,
            torch.randn(k, dtype=dtype, generator=g))
    compiled = outofplace.compile(f, args, cache=False)
    assert CALL not in legalize_for_cpu(compiled.stablehlo)[0]
    torch.testing.assert_close(compiled(*args), f(*args), **tolerance(dtype))


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batch_one_training_step_matches_eager(path, dtype):
    """An MLP trained on one example a step: the forward's products and the input's
    gradient (`g @ w`) are vector-weight dots; the weights' gradients are outer
    products. Loss and parameters after three steps as eager's."""
    from differential import assert_sgd_steps_match_eager

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 512)).to(dtype)
    assert_sgd_steps_match_eager(model, torch.randn(1, 2048, dtype=dtype),
                                 lambda step, args: compiled_on(path, step, args),
                                 tolerance(dtype))
