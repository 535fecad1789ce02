"""outofplace-flatten-state (transforms/flatten_state.py): the XLA engine passes, updates
and returns a written argument computed elementwise (an optimizer's parameters and
momentum) as one flat dimension. Values against eager's, float32 and float64, on both
paths; which arguments XLA takes flat; in place on every call."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from differential import squared_mean_step

import outofplace
from outofplace.backends.xla import legalize_for_cpu

pytestmark = pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax")

DTYPES = [torch.float32, torch.float64]


def tolerance(dtype: torch.dtype) -> dict:
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else \
        dict(rtol=1e-12, atol=1e-12)


def net(dtype: torch.dtype) -> nn.Module:
    """A 3x3 and a 1x1 convolution (whose weight outofplace-squeeze-state passes without
    its unit dimensions), batch norm and a linear layer."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.ReLU(), nn.Conv2d(8, 8, 1), nn.Flatten(),
                         nn.Linear(8 * 6 * 6, 5)).to(dtype)


def steps(model: nn.Module, optimizer, **options):
    """Two copies of `model` and a training step of each (loss, backward, the optimizer's
    step), each run once so the optimizer's state exists."""
    models = copy.deepcopy(model), copy.deepcopy(model)

    def step_of(m):
        opt = optimizer(m.parameters(), **options)
        step = squared_mean_step(m, opt)
        step(x_of(model))
        return step, opt
    return models, [step_of(m) for m in models]


def x_of(model: nn.Module) -> torch.Tensor:
    return torch.randn(4, 3, 6, 6, dtype=model[0].weight.dtype,
                       generator=torch.Generator().manual_seed(1))


SGD = (torch.optim.SGD, dict(lr=0.05, momentum=0.9))
NESTEROV = (torch.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=1e-2, nesterov=True))
ADAM = (torch.optim.Adam, dict(lr=1e-3))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path, optimizer, options", [
    ("compile", *SGD), ("torch.compile", *SGD), ("compile", *NESTEROV),
    ("torch.compile", *NESTEROV), ("compile", *ADAM),
], ids=["sgd-compile", "sgd-torch.compile", "nesterov-decay-compile",
        "nesterov-decay-torch.compile", "adam-compile"])
def test_training_step_matches_eager_in_place(path, dtype, optimizer, options):
    """The parameters and the optimizer's state after three steps as eager's; no
    argument copied, and each updated in its own memory from the second call on. (Not
    Adam under torch.compile: dynamo's graph of it computes its bias corrections from
    the float32 step tensor, where eager reads the step as a Python float, so in float64
    even `backend="eager"` is off from eager by 2e-8.)"""
    torch._dynamo.reset()  # each case compiled afresh, its floats as constants
    torch.manual_seed(0)
    (eager_model, model), ((eager, eager_opt), (step, opt)) = \
        steps(net(dtype), optimizer, **options)
    x = x_of(model)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        compiled = outofplace.compile(step, (x,)) if path == "compile" else \
            torch.compile(step, backend="outofplace")
        torch.testing.assert_close(compiled(x), eager(x), **tolerance(dtype))
        addresses = [p.data_ptr() for p in model.parameters()]
        for _ in range(2):
            torch.testing.assert_close(compiled(x), eager(x), **tolerance(dtype))
        assert [p.data_ptr() for p in model.parameters()] == addresses
    for got, expected in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(got, expected, **tolerance(dtype))
    for p, q in zip(model.parameters(), eager_model.parameters()):
        for name, value in eager_opt.state[q].items():
            torch.testing.assert_close(opt.state[p][name], value, **tolerance(dtype))
    if path == "compile":
        assert set(compiled.in_place_report.values()) == {"in place"}


def test_weights_and_momentum_are_taken_flat():
    """XLA takes the convolution's and the linear layer's weights and their momentum flat
    (rank 2 and more, updated elementwise), the input as it is."""
    torch.manual_seed(0)
    _, ((_, _), (step, _)) = steps(net(torch.float32), torch.optim.SGD, lr=0.05,
                                   momentum=0.9)
    x = torch.randn(4, 3, 6, 6)
    compiled = outofplace.compile(step, (x,))
    inputs = legalize_for_cpu(compiled.stablehlo)[1]
    shapes = dict(zip(compiled.input_names, inputs))
    assert shapes["x"] == (4, 3, 6, 6)
    for name in ("0.weight", "3.weight", "5.weight"):
        [weight] = [n for n in shapes if n.endswith(name) and "momentum" not in n]
        [momentum] = [n for n in shapes if n.endswith(name + ".momentum_buffer")]
        assert len(shapes[weight]) == 1 and len(shapes[momentum]) == 1, shapes


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_state_written_elementwise_then_at_a_position(dtype):
    """A state scaled, then written at a runtime position (the new value a
    dynamic_update_slice: left as it is), beside one only scaled (flattened) and read
    after: values and the caller's memory as eager's."""
    def f(a, b, pos, v):
        a.mul_(0.5)
        a[pos] = v
        b.mul_(2).add_(1)
        return (a * b).sum(dim=0)

    def args(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(6, 5, dtype=dtype, generator=g),
                torch.randn(6, 5, dtype=dtype, generator=g), torch.tensor(seed),
                torch.randn(5, dtype=dtype, generator=g))
    compiled = outofplace.compile(f, args(3))
    shapes = dict(zip(compiled.input_names, legalize_for_cpu(compiled.stablehlo)[1]))
    assert shapes["a"] == (6, 5) and shapes["b"] == (30,)
    for seed in (3, 1):
        got, expected = args(seed), args(seed)
        torch.testing.assert_close(compiled(*got), f(*expected), **tolerance(dtype))
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, **tolerance(dtype))
