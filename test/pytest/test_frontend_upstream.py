"""frontend/upstream/: the FX rewrites that work around torch-mlir's gaps, each against
eager on both paths (`outofplace.compile` on every engine, and
`torch.compile(backend="outofplace")`), in float32 and float64. Their canaries, which
pin torch-mlir's faults, are in test_fx_upstream_canaries.py; unlowered_ops.py is
tested by test_lowering_gaps.py, convolution_backward.py by test_convolution_backward.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import outofplace
from outofplace.backends.xla.compiler import legalize_for_cpu
from differential import assert_matches_eager, assert_sgd_steps_match_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def both_paths(f, *args):
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def undefined_ops(x):  # undefined_ops.py
    x.mT.mul_(2)
    return x.ravel() + x.swapaxes(0, 1).reshape(-1) + x.unsqueeze(0).squeeze((0,)).sum()


def attention(q, k, v, mask):  # attention.py
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) + \
        F.scaled_dot_product_attention(q, k, v, is_causal=True)


def attention_without_keys(q, k, v, keep, bias):  # attention.py: a query every key of
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep) + \
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # which is masked: zeros


def _without_keys(d):
    """A padding query's row (0) masked whole, as a left-padded prefill's is."""
    keep = torch.ones(1, 1, 4, 6, dtype=torch.bool)
    keep[..., 0, :] = False
    keep[..., 1:, 0] = False
    bias = torch.zeros(1, 1, 4, 6, dtype=d).masked_fill(~keep, float("-inf"))
    return (torch.randn(1, 2, 4, 8, dtype=d), torch.randn(1, 2, 6, 8, dtype=d),
            torch.randn(1, 2, 6, 8, dtype=d), keep, bias)


def remainder(a, b):  # remainder.py
    exact = torch.fmod(a, b), a // b, torch.div(b, a, rounding_mode="floor"), \
        torch.floor_divide(a, -2.5), a.fmod(-0.75)
    a.remainder_(b)
    return torch.remainder(b, -1.5) + torch.fmod(a, 0.75), exact


def _remainder_inputs(d):
    inf = float("inf")  # infinite divisors and dividends, a quotient past 2**24, zeros
    return (torch.tensor([1e10, 88.8, -104.0, 5.0, -2.5, inf, 3.0, 7.5, -7.5, 0.0], dtype=d),
            torch.tensor([3.0, -inf, inf, 3.0, -0.5, 2.0, 0.0, -2.0, 2.0, -4.0], dtype=d))


def float_equality(x, flags):  # float_equality.py: x == x is False at NaN
    flags.eq_(flags)
    return x == x, torch.eq(x, x.clone()), x == x.flip(0), x.long() == x.long()


def rms_norm(x, w):  # rms_norm.py: eps=None is eager's machine epsilon (a row of zeros)
    return F.rms_norm(x, (4,)), F.rms_norm(x, (4,), w), F.rms_norm(x, (4,), eps=1e-3)


def integer_floor_division(a):  # remainder.py: int64 past 2**53, exact
    return a // 7, torch.div(a, -7, rounding_mode="floor"), torch.floor_divide(a, a.flip(0))


def index_reduce(s, index, source, columns):  # index_reduce.py: each reduction, NaN
    s.index_reduce_(0, index, source, "amax")
    return [s.index_reduce(1, columns, source, reduce, include_self=include_self)
            for reduce in ("prod", "mean", "amax", "amin") for include_self in (True, False)]


def _index_reduce_inputs(d):
    source = torch.tensor([[1.0, float("nan"), 3.0, -2.0], [5.0, float("-inf"), 0.5, 2.0],
                           [float("nan"), 7.0, -1.0, 4.0]], dtype=d)
    return (torch.full((3, 4), 2.0, dtype=d), torch.tensor([0, 2, 0]), source,
            torch.tensor([3, 0, 3, 1]))


def bool_extremes(b):  # bool_extremes.py: a row of False alone, the first True
    return torch.max(b, 1, keepdim=True), torch.min(b, 0), torch.max(b.t(), 0)


def nan_keeping_activations(x):  # unlowered_ops.py: NOT_LOWERED at the edges
    return F.logsigmoid(x), F.threshold(x, 0.5, -7.0), F.hardshrink(x, 0.5), \
        F.hardshrink(x.clone(), 0.5).sum()


def scans(x, s):  # scans.py
    s.cumsum_(0)
    extremes = torch.cummax(x, 1), torch.cummin(x, 0), torch.cummax(x.long(), 0)
    x[1:].cumprod_(1)  # a noise schedule's cumprod, in place through a view
    return x.logcumsumexp(1) + s, x.cumprod(0, dtype=torch.float64), extremes


def extreme_scans(x):  # scans.py: cummax/cummin with NaN (sticks), ties (the later)
    small = (x.nan_to_num(0.0, 0.0, 0.0) * 90).to(torch.int16)  # cumprod: int64 (eager's)
    return torch.cummax(x, 1), torch.cummin(x, 1), torch.cummin(x, 0), small.cumprod(1)


def _extreme_inputs(d):
    nan, inf = float("nan"), float("inf")
    return (torch.tensor([[3.0, 1.0, 3.0, nan, 5.0, nan, 2.0, 7.0],
                          [-inf, -inf, 0.0, -0.0, 0.0, 1.0, 1.0, -1.0],
                          [2.0, 2.0, -5.0, inf, inf, 0.5, -5.0, 9.0]], dtype=d),)


def scatters(x, v):  # scatters.py (the scatters AOTAutograd writes, called directly)
    y = torch.select_scatter(x, v[0], 0, -1)
    y = torch.slice_scatter(y, v, 0, 2, 2 ** 63 - 1)
    return torch.as_strided_scatter(y, v[0, :2], (2,), (3,), 1)


def max_pool_with_indices(x):  # max_pool.py
    values, indices = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [])
    return values * 2, indices


def scalar_operands(x, mask):  # scalar_operands.py
    x.mul_(0.9)  # a float operand where the schema takes a tensor
    mask &= True  # a bool operand: mask stays bool
    return x, mask.bitwise_xor(True)


def activations(x, w, w1):  # activations.py
    # x [2, 4, 4]: as many channels as elements in the last dimension, where prelu's
    # lowering read its weights along the last dimension (wrong values)
    return (F.softshrink(x, 0.5), F.prelu(x, w), F.prelu(x, w1), F.prelu(x[0, 0], w1),
            F.prelu(x.unsqueeze(-1), w))


def _activation_inputs(d):
    x = torch.randn(2, 4, 4, dtype=d)
    x[0, 0, :3] = torch.tensor([0.5, -0.5, float("nan")], dtype=d)  # at ±λ and NaN
    return x, torch.tensor([0.1, -0.2, 0.3, 0.4], dtype=d), torch.tensor([0.25], dtype=d)


def histc(x, counts):  # histc.py: elements at the edges, outside them, NaN
    counts.add_(torch.histc(x, bins=7, min=-1.5, max=2.0))
    return torch.histc(x * 3, bins=3, min=0, max=2)


def _histc_inputs(d):
    x = torch.cat([torch.randn(40, dtype=d), torch.linspace(-1.5, 2.0, 15, dtype=d),
                   torch.tensor([float("nan"), 1e9, -2.0], dtype=d)])
    return x.view(2, -1), torch.ones(7, dtype=d)


def unsorted_topk(x, w):  # unsorted_topk.py
    values, indices = torch.topk(x, 2, dim=-1, sorted=False)  # k * 64 <= n: eager sorts
    chosen = torch.topk(x[:, :8], 3, dim=-1, sorted=False)[1]  # any order: read as a set
    return values, indices, w.gather(1, chosen).sum(-1)


def special_functions(x, y, out):  # special_functions.py: in place, out of place
    out.copy_(torch.lgamma(x) + torch.digamma(x) + torch.polygamma(1, x))
    y.erfinv_()
    x.erfc_()
    return torch.mvlgamma(out.abs() + 1, 2), torch.erfc(y * 2), torch.polygamma(0, y)


def _special_inputs(d):
    # poles (0, negative integers), reflections (x < 1/2), the tails of erfinv and erfc
    x = torch.cat([torch.linspace(-3.7, 6.3, 23, dtype=d),
                   torch.tensor([0.0, -2.0, 0.5, 1.0, 2.0, 12.5], dtype=d)])
    y = torch.cat([torch.linspace(-0.98, 0.98, 25, dtype=d),
                   torch.tensor([1.0, -1.0, 0.0, 0.9999], dtype=d)])
    return x, y, torch.zeros_like(x)


def bessel_and_hypot(x, y):  # special_functions.py: each side of |x| = 8, x < 0
    scaled = (torch.special.i0e(x), torch.special.i1(x), torch.special.i1e(x))
    x.i0_()
    return scaled, torch.hypot(y, y.flip(0) * 3), y.hypot_(torch.ones_like(y))


def _bessel_inputs(d):
    x = torch.cat([torch.linspace(-20.0, 20.0, 17, dtype=d),
                   torch.tensor([0.0, 8.0, -8.0, 1e-6], dtype=d)])
    y = torch.tensor([0.0, -3.0, 4.0, 1e30, float("inf"), float("nan"), -1e-30, 2.5],
                     dtype=d)
    return x, y


def order_statistics(x, out):  # order_statistics.py: NaN rows, ties, keepdim, all
    out.copy_(torch.median(x, 1).values)
    # (of a row of NaN alone, nanmedian's index is whichever eager's partition ends on)
    return (torch.median(x, 0, keepdim=True), torch.nanmedian(x, 1).values,
            torch.nanmedian(x[[0, 2, 3]], 1), torch.median(x[2:]),
            torch.nanmedian(x), torch.kthvalue(x[3:], 3, 1), torch.kthvalue(x, 7, 1).values,
            torch.median(x[2:].long(), 1))


def _order_inputs(d):
    x = torch.randn(6, 9, dtype=d)
    x[0, 3] = x[0, 6] = float("nan")  # two NaNs: median's first, kthvalue's last
    x[1, :] = float("nan")  # NaN alone: nanmedian's NaN
    x[2, 1] = x[2, 5] = x[2, 7]  # equal values: median's lesser index (kthvalue's: any)
    return x, torch.zeros(6, dtype=d)


def searchsorted(seq, x, rows, sorter, out):  # searchsorted.py
    out.copy_(torch.searchsorted(seq, x, right=True))
    return (torch.searchsorted(seq, x), torch.searchsorted(rows, x[:, :5], side="right"),
            torch.searchsorted(rows.flip(-1), x[:, :5], sorter=sorter, out_int32=True),
            torch.searchsorted(seq[:4], 2.5))


def _searchsorted_inputs(d):
    nan, inf = float("nan"), float("inf")
    seq = torch.tensor([-1.0, 2.0, 2.0, 3.0, nan], dtype=d)  # ties; NaN sorted last
    x = torch.tensor([[nan, 2.0, -3.0, 5.0, -inf, inf], [1.0, 2.5, 3.0, -1.0, 0.0, 2.0]],
                     dtype=d)
    rows = torch.sort(torch.randn(2, 7, dtype=d), dim=-1).values
    sorter = torch.arange(6, -1, -1).expand(2, 7).contiguous()  # rows.flip(-1) reversed
    return seq, x, rows, sorter, torch.zeros(2, 6, dtype=torch.int64)


def distances(x, y, many):  # distances.py: each p, a pair at distance 0, the product
    return ([torch.cdist(x, y, p=p) for p in (0.0, 1.0, 1.5, 2.0, 3.0, float("inf"))],
            torch.cdist(many, many[:3] + 0.5),  # (of a point and itself, the product form
            # gives the root of a rounding error, eager's and XLA's alike but not equal:
            # so the product form of the batch without that pair, x[1] and y[1]; with it,
            # 0 against 6.9e-4 on an AVX2 machine, where another's roundings agreed)
            torch.cdist(x[1], y[1], compute_mode="use_mm_for_euclid_dist"),
            [torch.pdist(y[0], p=p) for p in (0.0, 1.0, 1.5, 2.0, 3.0, float("inf"))])


def _distance_inputs(d):
    x, y = torch.randn(2, 5, 3, dtype=d), torch.randn(2, 4, 3, dtype=d)
    y[0, 1] = x[0, 2]
    y[0, 3] = y[0, 1]  # (a pair of rows at distance 0 for pdist)
    return x, y, torch.randn(30, 3, dtype=d)  # more than 25 rows: eager's product form


def embedding_bags(weight, indices, offsets, scales):  # embedding_bag.py: bags of
    # several rows, an empty one, a padding index; the last offset, the indices' count
    last = torch.cat([offsets, torch.tensor([indices.shape[0]])])
    return (F.embedding_bag(indices, weight, offsets, mode="sum"),
            F.embedding_bag(indices, weight, offsets, mode="mean", padding_idx=2),
            F.embedding_bag(indices, weight, offsets, mode="sum", per_sample_weights=scales,
                            padding_idx=4),
            F.embedding_bag(indices, weight, last, mode="mean", include_last_offset=True),
            F.embedding_bag(indices.view(2, 4), weight, mode="sum"),  # bags of 4
            torch.ops.aten._embedding_bag(weight, indices, offsets, False, 1, False, None,
                                          False, 2)[1:])  # eager's other results


def _embedding_bag_inputs(d):
    return (torch.randn(10, 3, dtype=d), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]),
            torch.tensor([0, 3, 3, 6]), torch.rand(8, dtype=d))


def bicubic(x):  # unlowered_ops.py: PyTorch's decomposition of interpolate's .vec form
    return (F.interpolate(x, scale_factor=2, mode="bicubic"),  # records .default's
            F.interpolate(x, size=(3, 7), mode="bicubic", align_corners=True))


def next_floats(x, y):  # nextafter.py: each result's bits (its NaNs' as 0), a zero's sign
    def bits(r):
        integer = torch.int64 if r.dtype == torch.float64 else torch.int32
        return torch.where(r.isnan(), 0, r.view(integer))
    return [bits(torch.nextafter(a, b)) for a, b in ((x, y), (y, x), (x, torch.zeros_like(x)))]


def _next_float_inputs(d):
    inf, nan, least = float("inf"), float("nan"), torch.finfo(d).smallest_normal / 2 ** 10
    return (torch.tensor([1.0, -2.5, 0.0, -0.0, 0.0, 3e38, inf, -inf, nan, 1.0, least, -1.0],
                         dtype=d),
            torch.tensor([2.0, 0.0, 1.0, -1.0, -0.0, inf, 0.0, 0.0, 1.0, 1.0, 0.0, -2.0],
                         dtype=d))


def unsigned_abs(b):  # unsigned_abs.py (dtype-independent: uint8)
    b.abs_()
    return b.abs() + 1, torch.abs(b[1:]) * 2


def same_padding(x, w, image, kernel, bias):  # same_padding.py: even windows
    y = F.conv1d(x, w, padding="same")
    x.mul_(2)
    return y, F.conv2d(image, kernel, bias, padding="same", dilation=(1, 2)), \
        F.conv3d(image[..., None].expand(-1, -1, -1, -1, 4),
                 kernel[..., None].expand(-1, -1, -1, -1, 2), padding="same")


def bool_clamp(mask, low):  # bool_clamp.py (dtype-independent: bools)
    return mask.clamp(min=low)


CASES = [
    (undefined_ops, lambda d: (torch.randn(3, 3, dtype=d),)),
    (attention, lambda d: (torch.randn(1, 2, 3, 4, dtype=d), torch.randn(1, 2, 3, 4, dtype=d),
                           torch.randn(1, 2, 3, 4, dtype=d),
                           torch.tensor([[True, False, True]]).expand(3, 3))),
    (attention_without_keys, _without_keys),
    (remainder, _remainder_inputs),
    (float_equality, lambda d: (torch.tensor([1.0, float("nan"), float("inf"), -0.0], dtype=d),
                                torch.tensor([float("nan"), 2.0], dtype=d))),
    (rms_norm, lambda d: (torch.cat([torch.zeros(1, 4, dtype=d), torch.randn(2, 4, dtype=d)]),
                          torch.randn(4, dtype=d))),
    (index_reduce, _index_reduce_inputs),
    (bool_extremes, lambda d: (torch.tensor([[False, False, True, True], [True, False, True, False],
                                             [False, False, False, False]]),)),
    (integer_floor_division, lambda d: (torch.tensor([2**62 + 12345, -(2**62) - 999, 7, -7, 1],
                                                     dtype=torch.int64),)),
    (nan_keeping_activations, lambda d: (torch.tensor(
        [float("nan"), -100.0, -104.0, 0.3, -0.3, 0.5, 2.0, float("-inf")], dtype=d),)),
    (scans, lambda d: (torch.tensor([[1e4, 1.0, -3.0], [0.5, 2.0, 1e3], [0.9, -0.5, 0.0]],
                                    dtype=d), torch.tensor(2.5, dtype=d))),
    (scatters, lambda d: (torch.randn(4, 3, dtype=d), torch.randn(2, 3, dtype=d))),
    (max_pool_with_indices, lambda d: (torch.randn(1, 2, 4, 6, dtype=d),)),
    (scalar_operands, lambda d: (torch.randn(4, dtype=d), torch.rand(4) > 0.5)),
    (activations, _activation_inputs),
    (histc, _histc_inputs),
    (unsorted_topk, lambda d: (torch.randn(3, 130, dtype=d), torch.randn(3, 8, dtype=d))),
    (special_functions, _special_inputs),
    (bessel_and_hypot, _bessel_inputs),
    (order_statistics, _order_inputs),
    (extreme_scans, _extreme_inputs),
    (searchsorted, _searchsorted_inputs),
    (distances, _distance_inputs),
    (unsigned_abs, lambda d: (torch.tensor([0, 1, 127, 128, 200, 255], dtype=torch.uint8),)),
    (embedding_bags, _embedding_bag_inputs),
    (bicubic, lambda d: (torch.randn(1, 2, 4, 5, dtype=d),)),
    (next_floats, _next_float_inputs),
    (same_padding, lambda d: (torch.randn(2, 3, 7, dtype=d), torch.randn(4, 3, 4, dtype=d),
                              torch.randn(1, 2, 5, 6, dtype=d),
                              torch.randn(3, 2, 2, 3, dtype=d), torch.randn(3, dtype=d))),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f, make", CASES, ids=[f.__name__ for f, _ in CASES])
def test_matches_eager_on_both_paths(f, make, dtype):
    torch.manual_seed(0)
    both_paths(f, *make(dtype))


def experts(x, w, experts):  # grouped_mm.py: transformers' grouped experts' forward
    experts, order = torch.sort(experts)  # (ties in any order: rows go back below)
    counts = torch.histc(experts.float(), bins=w.shape[0], min=0, max=w.shape[0] - 1)
    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
    out = torch.empty(x.shape[0], w.shape[1], dtype=x.dtype)
    # the weights [G, N, K] read transposed, as transformers' experts do (the XLA engine
    # calls eager's kernel on a view of them, outofplace-transposed-kernel-operands; the
    # decomposition gathers a few rows' matrices as the weights hold them)
    out[order] = F.grouped_mm(x[order], w.transpose(-2, -1), offs=offsets)
    return out


def grouped_forms(a3, b2, a2, b3, offsets):  # grouped_mm.py: 3-d x 2-d, 2-d x 2-d, 3-d x 3-d
    return (F.grouped_mm(a3, b2, offs=offsets), F.grouped_mm(a2, b2.T, offs=offsets),
            F.grouped_mm(a3, b3))


@pytest.mark.parametrize("tokens", [2, 9], ids=["fewer-rows-than-groups", "more"])
def test_grouped_mm_matches_eager_on_both_paths(tokens):
    """`F.grouped_mm` (bfloat16: PyTorch traces no other dtype), its groups cut at offsets
    the program computes: each row's group read at run time, an expert with no row
    among them. The interpreter and IREE run the decomposition, the XLA engine eager's
    kernel."""
    torch.manual_seed(0)
    d = torch.bfloat16
    args = (torch.randn(tokens, 8, dtype=d), torch.randn(4, 16, 8, dtype=d),
            torch.tensor([0, 3, 3, 1, 0, 3, 1, 1, 0][:tokens]))
    both_paths(experts, *args)
    # kept whole: the XLA engine calls eager's kernel on the weights as they are (a view
    # of them transposed), no transpose of them left
    legal = legalize_for_cpu(outofplace.compile(experts, args).stablehlo)[0]
    assert legal.count('outofplace.op = "aten::_grouped_mm"') == 1
    assert "stablehlo.transpose" not in legal and "outofplace.view.1" in legal
    both_paths(grouped_forms, torch.randn(4, 8, 8, dtype=d), torch.randn(8, 16, dtype=d),
               torch.randn(8, 16, dtype=d), torch.randn(4, 8, 8, dtype=d),
               torch.tensor([2, 5, 5, 16], dtype=torch.int32))


def test_bool_clamp_matches_eager_on_both_paths():
    both_paths(bool_clamp, torch.tensor([True, False, False, True]),
               torch.tensor([False, True, False, True]))


class _Attention(torch.nn.Module):
    """Self-attention of 4 query heads over `kv_heads` key heads, with `mask` or causal."""

    def __init__(self, kv_heads: int, mask: torch.Tensor | None, causal: bool) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(16, h * 8) for h in (4, kv_heads, kv_heads))
        self.register_buffer("mask", mask)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (p(x).view(b, n, -1, 8).transpose(1, 2) for p in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask,
                                             is_causal=self.causal, enable_gqa=True)
        return out.transpose(1, 2).reshape(b, n, -1)


_PADDED = torch.ones(2, 1, 6, 6, dtype=torch.bool)
_PADDED[0, :, :2] = False  # batch 0's two padding queries read no key
ATTENTION_STEPS = {"padding-mask": (4, _PADDED), "causal": (4, None),
                   "grouped-float-mask": (2, torch.randn(2, 1, 6, 6))}


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(ATTENTION_STEPS))
def test_attention_training_steps_match_eager(case, dtype, path):
    """Autograd's graphs call eager's CPU attention kernel and its backward, the
    kernel's second result a logsumexp the backward reads (attention.py; PyTorch's own
    decomposition gave the attention weights there: a transformers model's training step
    with sdpa attention failed on the torch.compile path). Three SGD steps against
    eager's: losses, then parameters."""
    torch.manual_seed(0)
    kv_heads, mask = ATTENTION_STEPS[case]
    model = _Attention(kv_heads, None if mask is None else mask.to(
        dtype if mask.is_floating_point() else torch.bool), mask is None).to(dtype)
    _assert_steps_match_eager(model, torch.randn(2, 6, 16, dtype=dtype), dtype, path)


def _assert_steps_match_eager(model, x, dtype, path):
    """Three SGD steps of `model` on `x` through `path` against eager's."""
    torch._dynamo.reset()
    tolerance = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else \
        dict(rtol=1e-10, atol=1e-12)
    assert_sgd_steps_match_eager(
        model, x, outofplace.compile if path == "compile" else
        lambda step, args: torch.compile(step, backend="outofplace", dynamic=False),
        tolerance)


class _SpecialFunctions(torch.nn.Module):
    """A layer through lgamma, digamma, erfinv, erfc, i0, i1e and hypot, whose gradients
    are digamma, trigamma (polygamma(1, x)), erfinv's own, a Gaussian, i1, i0e and i1e,
    and quotients; and through median, kthvalue, cummax and cummin, whose gradients go
    to the elements they picked."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        positive = F.softplus(h) + 0.2
        return torch.lgamma(positive) + torch.digamma(positive + 0.5) + \
            torch.erfinv(torch.tanh(h) * 0.9) + torch.erfc(h) + torch.i0(h) + \
            torch.special.i1e(h) + torch.hypot(h, positive) + \
            torch.median(h, 1, keepdim=True).values + torch.kthvalue(h, 2, 0).values + \
            torch.cummax(h, 1).values * torch.cummin(h, 0).values


class _Distances(torch.nn.Module):
    """Distances between a layer's rows (pairs at distance 0 among them), by each p,
    cdist's and pdist's."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        pairs = torch.cat([h, h[:1]])  # (rows 0 and 5 at distance 0)
        return torch.cdist(h, h) + torch.cdist(h, h.flip(0), p=1.5) + \
            torch.cdist(h, 2 * h, p=float("inf")) + torch.cdist(h, h[:1], p=3.0) + \
            0.1 * sum(torch.pdist(pairs, p=p).mean() for p in (1.0, 1.5, 2.0, 3.0,
                                                                float("inf")))


class _EmbeddingBags(torch.nn.Module):
    """Bags of embeddings summed (a padding index among them) and averaged, of the rows
    of a layer's input taken as indices."""

    def __init__(self) -> None:
        super().__init__()
        self.sums = torch.nn.EmbeddingBag(10, 4, mode="sum", padding_idx=0)
        self.means = torch.nn.EmbeddingBag(10, 4, mode="mean")
        self.linear = torch.nn.Linear(4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bags = (x.abs() * 3).long().clamp(max=9)  # [5, 6]: five bags of six indices
        return self.linear(self.sums(bags) + self.means(bags.flip(1)))


class _Bicubic(torch.nn.Module):
    """A layer's output as an image, upsampled bicubically (unlowered_ops.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image = self.linear(x).view(1, 1, 5, 4)
        return F.interpolate(image, scale_factor=(1.5, 2), mode="bicubic").view(-1, 4)


class _ProductsAndNorms(torch.nn.Module):
    """A cumulative product over exact zeros (autograd's gradient takes the first zero's
    position with a max of bools: bool_extremes.py), `torch.dist` and `linalg.norm`
    (unlowered_ops.py's NOT_LOWERED)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        h = h * (h.abs() > 0.3)
        return torch.cumprod(h, 1) + torch.dist(h, h.flip(0)) + \
            torch.linalg.norm(h, dim=1, keepdim=True) + h.norm(3)


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layer", [_SpecialFunctions, _Distances, _ProductsAndNorms,
                                   _EmbeddingBags, _Bicubic], ids=lambda c: c.__name__)
def test_special_functions_training_steps_match_eager(layer, dtype, path):
    """special_functions.py, order_statistics.py, scans.py, distances.py and
    embedding_bag.py in a training step: three SGD steps against eager's."""
    torch.manual_seed(0)
    _assert_steps_match_eager(layer().to(dtype), torch.randn(5, 6, dtype=dtype), dtype, path)
