"""outofplace-small-convolutions-as-dots (transforms/small_convolutions.py) on programs:
convolutions whose window is larger than their input (and their gradients), as the XLA
engine runs them, against eager in float32 and float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import outofplace
from outofplace.backends.xla import legalize_for_cpu

pytest.importorskip("jax")

CASES = [  # input, weight, stride, padding, dilation
    ((4, 6, 2, 2), (5, 6, 3, 3), 1, 1, 1),  # ResNet's last stage
    ((2, 3, 1, 1), (4, 3, 3, 3), 1, 1, 1),
    ((2, 3, 3, 2), (4, 3, 3, 3), 2, 1, 1),
    ((2, 3, 4, 4), (4, 3, 3, 3), 1, 2, 2),  # a dilated window of 5 over 4
    ((3, 2, 3), (4, 2, 5), 1, 2, 1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=[str(c[:2]) for c in CASES])
def test_convolution_and_gradients_match_eager(case, dtype):
    x_shape, w_shape, stride, padding, dilation = case
    conv = F.conv2d if len(x_shape) == 4 else F.conv1d
    torch.manual_seed(0)
    x = torch.randn(x_shape, dtype=dtype, requires_grad=True)
    w = torch.randn(w_shape, dtype=dtype, requires_grad=True)

    def forward_and_gradients(x, w):
        y = conv(x, w, stride=stride, padding=padding, dilation=dilation)
        return (y.detach(), *torch.autograd.grad((y * y).sum(), [x, w]))

    compiled = outofplace.compile(forward_and_gradients, (x, w))
    tolerance = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else \
        dict(rtol=1e-12, atol=1e-11)
    for got, expected in zip(compiled(x, w), forward_and_gradients(x, w)):
        torch.testing.assert_close(got, expected, **tolerance)


def test_forward_convolution_becomes_a_dot():
    """The engine's module holds a dot where the window is larger than the input, and
    the convolution where it fits."""
    small = outofplace.compile(lambda x, w: F.conv2d(x, w, padding=1),
                               (torch.randn(8, 16, 2, 2), torch.randn(16, 16, 3, 3)))
    engine = legalize_for_cpu(small.stablehlo)[0]
    assert "stablehlo.convolution" in small.stablehlo
    assert "stablehlo.convolution" not in engine and "stablehlo.dot_general" in engine
    large = outofplace.compile(lambda x, w: F.conv2d(x, w, padding=1),
                               (torch.randn(8, 16, 8, 8), torch.randn(16, 16, 3, 3)))
    assert "stablehlo.convolution" in legalize_for_cpu(large.stablehlo)[0]


def test_a_mesh_runs_the_convolution_as_a_dot():
    """The mesh engine runs the pass too (`spmd.LEGALIZE_FOR_MESH`): a batch-split
    convolution over a 2x2 feature map matches eager, and the partitioned program each
    device runs holds no convolution."""
    torch.manual_seed(0)
    x, w = torch.randn(8, 16, 2, 2), torch.randn(16, 16, 3, 3)

    def conv(x, w):
        return F.conv2d(x, w, padding=1)

    compiled = outofplace.compile(conv, (x, w), mesh={"x": 2},
                                  shardings={"x": ("x", None, None, None)})
    torch.testing.assert_close(compiled(x, w), conv(x, w), rtol=1e-5, atol=1e-4)
    (partitioned,) = compiled._sharded()._executable.hlo_modules()
    text = partitioned.to_string()
    assert " convolution(" not in text and " dot(" in text
