"""frontend/upstream/convolution_backward.py: a convolution's gradients as
convolutions (the weight's over the batch, JAX's transpose rule), on every stride,
padding, dilation and rank, against eager's, in float32 and float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import outofplace

CASES = [  # (input shape, weight shape, stride, padding, dilation, bias[, groups])
    ((2, 3, 9, 9), (4, 3, 3, 3), 1, 1, 1, True),
    ((2, 3, 9, 8), (4, 3, 3, 3), 2, 1, 1, False),
    ((2, 3, 16, 16), (5, 3, 7, 7), 2, 3, 1, False),
    ((1, 2, 11, 10), (3, 2, 3, 2), (3, 2), (0, 1), (2, 1), True),
    ((3, 2, 12), (4, 2, 5), 2, 2, 1, True),
    ((1, 2, 5, 6, 7), (2, 2, 3, 3, 3), 2, 1, 1, True),
    ((2, 4, 8, 8), (4, 4, 1, 1), 2, 0, 1, False),
    ((3, 4, 9, 9), (6, 2, 3, 3), 2, 1, 1, True, 2),
    ((2, 6, 8, 7), (6, 1, 3, 3), 1, 1, 2, False, 6),  # depthwise
]


def conv(x, w, b, stride, padding, dilation, groups=1):
    return torch.ops.aten.convolution(x, w, b, *(
        [v] * (x.dim() - 2) if isinstance(v, int) else list(v)
        for v in (stride, padding, dilation)), False, [0] * (x.dim() - 2), groups)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=[str(c[:2]) + f" s{c[2]}" for c in CASES])
def test_gradients_match_eager(case, dtype):
    x_shape, w_shape, stride, padding, dilation, bias, *groups = case
    torch.manual_seed(0)
    x = torch.randn(x_shape, dtype=dtype, requires_grad=True)
    w = torch.randn(w_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(w_shape[0], dtype=dtype, requires_grad=True) if bias else None
    wrt = [t for t in (x, w, b) if t is not None]

    def gradients(x, w, b, g):
        out = conv(x, w, b, stride, padding, dilation, *groups)
        return torch.autograd.grad(out, [t for t in (x, w, b) if t is not None], g)

    g = torch.randn(conv(x, w, b, stride, padding, dilation, *groups).shape, dtype=dtype)
    expected = gradients(x, w, b, g)
    compiled = outofplace.compile(gradients, (x, w, b, g))
    got = compiled(x, w, b, g)
    assert len(got) == len(wrt)
    for e, r in zip(expected, got):
        torch.testing.assert_close(r, e, rtol=1e-5 if dtype == torch.float32 else 1e-12,
                                   atol=1e-4 if dtype == torch.float32 else 1e-11)


TRANSPOSED = [  # (input shape, weight shape, stride, padding, dilation, output_padding,
    # bias, groups)
    ((2, 3, 8, 8), (3, 4, 2, 2), 2, 0, 1, 0, True, 1),
    ((2, 4, 5, 6), (4, 3, 3, 3), 2, 1, 1, 1, False, 1),
    ((1, 4, 6, 5), (4, 2, 3, 2), (2, 1), (1, 0), (1, 2), (1, 0), True, 2),
    ((2, 2, 7), (2, 3, 4), 3, 1, 1, 2, True, 1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", TRANSPOSED,
                         ids=[str(c[:2]) + f" s{c[2]} op{c[5]}" for c in TRANSPOSED])
def test_transposed_gradients_match_eager(case, dtype):
    """A transposed convolution's gradients (ConvTranspose2d in training)."""
    x_shape, w_shape, stride, padding, dilation, output_padding, bias, groups = case
    torch.manual_seed(0)
    x = torch.randn(x_shape, dtype=dtype, requires_grad=True)
    w = torch.randn(w_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(w_shape[1] * groups, dtype=dtype, requires_grad=True) if bias else None
    wrt = [t for t in (x, w, b) if t is not None]
    transpose = {1: F.conv_transpose1d, 2: F.conv_transpose2d}[x.dim() - 2]

    def forward(x, w, b):
        return transpose(x, w, b, stride, padding, output_padding, groups, dilation)

    def gradients(x, w, b, g):
        return torch.autograd.grad(forward(x, w, b), [t for t in (x, w, b) if t is not None],
                                   g)

    g = torch.randn(forward(x, w, b).shape, dtype=dtype)
    expected = gradients(x, w, b, g)
    got = outofplace.compile(gradients, (x, w, b, g))(x, w, b, g)
    assert len(got) == len(wrt)
    for e, r in zip(expected, got):
        torch.testing.assert_close(r, e, rtol=1e-5 if dtype == torch.float32 else 1e-12,
                                   atol=1e-4 if dtype == torch.float32 else 1e-11)


def test_weight_gradient_is_one_ungrouped_convolution():
    """The weight's gradient is a convolution over the batch, not one grouped by it."""
    x = torch.randn(8, 4, 12, 12, requires_grad=True)
    w = torch.randn(6, 4, 3, 3, requires_grad=True)

    def weight_gradient(x, w):
        return torch.autograd.grad(F.conv2d(x, w, stride=2, padding=1).sum(), [w])

    text = outofplace.compile(weight_gradient, (x, w)).stablehlo
    assert text.count("stablehlo.convolution") == 1
    assert "feature_group_count = 1" in text and "feature_group_count = 8" not in text
