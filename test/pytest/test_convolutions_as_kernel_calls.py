"""outofplace-convolutions-as-kernel-calls (transforms/convolutions_as_kernel_calls.py):
the XLA engine runs large convolutions, forward and backward, through eager's kernel
(aten::convolution called by backends/kernel_call.cpp inside the XLA program). Results
against eager's, float32 and float64, on both paths; each test checks that the calls were
made (the XLA module holds them), and that exports keep XLA's convolutions.

Sizes are just above MIN_FLOPS, so the rewrite applies and the tests stay cheap; the
compile cache is off, so the pass runs on every compile.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from differential import squared_mean_step

import outofplace
from outofplace.backends import custom_calls
from outofplace.backends.xla import legalize_for_cpu
from outofplace.ir_utils import ranked_shape
from outofplace.transforms import convolutions_as_kernel_calls as pass_module

pytestmark = pytest.mark.skipif(
    not outofplace.xla.available() or custom_calls.extension() is None,
    reason="needs jax and the kernel handler (backends/kernel_call.cpp)")

DTYPES = [torch.float32, torch.float64]
CALL = 'stablehlo.custom_call @"aten::convolution"'


def tolerance(dtype: torch.dtype) -> dict:
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else \
        dict(rtol=1e-10, atol=1e-10)


@pytest.fixture
def rewritten(monkeypatch) -> list:
    """The convolutions the pass rewrites (each plan it makes) while the test runs."""
    plans = []
    plan = pass_module._plan

    def recording(op):
        found = plan(op)
        if found is not None:
            plans.append(found)
        return found
    monkeypatch.setattr(pass_module, "_plan", recording)
    return plans


FORWARD = [  # input shape, weight shape, stride, padding, dilation, groups
    ((4, 16, 24, 24), (32, 16, 3, 3), 1, 1, 1, 1),
    ((4, 16, 48, 48), (32, 16, 3, 3), 2, 1, 1, 1),
    ((4, 16, 48, 30), (32, 16, 3, 3), (2, 1), (0, 2), (2, 1), 1),
    ((8, 32, 24, 24), (32, 8, 3, 3), 1, 1, 1, 4),  # grouped
    ((8, 64, 32, 32), (64, 1, 5, 5), 1, 2, 1, 64),  # depthwise
    ((16, 32, 256), (32, 32, 7), 2, 3, 2, 1),  # 1-d
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", FORWARD, ids=[f"{c[0]} s{c[2]} g{c[5]}" for c in FORWARD])
def test_forward_matches_eager(case, dtype):
    x_shape, w_shape, stride, padding, dilation, groups = case
    conv = F.conv2d if len(x_shape) == 4 else F.conv1d
    torch.manual_seed(0)
    x, w = torch.randn(x_shape, dtype=dtype), torch.randn(w_shape, dtype=dtype)
    b = torch.randn(w_shape[0], dtype=dtype)

    def f(x, w, b):
        return torch.relu(conv(x, w, b, stride, padding, dilation, groups))

    compiled = outofplace.compile(f, (x, w, b), cache=False)
    assert CALL in legalize_for_cpu(compiled.stablehlo)[0]
    torch.testing.assert_close(compiled(x, w, b), f(x, w, b), **tolerance(dtype))


def test_asymmetric_padding_matches_eager(rewritten):
    """F.pad's asymmetric padding folded into the convolution: the excess is a pad."""
    torch.manual_seed(0)
    x, w = torch.randn(4, 16, 48, 48), torch.randn(32, 16, 3, 3)

    def f(x, w):
        return F.conv2d(F.pad(x, (0, 1, 2, 0)), w, stride=2)

    compiled = outofplace.compile(f, (x, w), cache=False)
    torch.testing.assert_close(compiled(x, w), f(x, w), **tolerance(torch.float32))
    assert len(rewritten) == 1


def cnn(dtype: torch.dtype) -> nn.Module:
    """A small CNN: strided, grouped, depthwise and dilated convolutions, batch norm."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, 1, 1, groups=2), nn.ReLU(),
        nn.Conv2d(32, 32, 3, 1, 2, dilation=2, groups=32), nn.ReLU(),
        nn.Conv2d(32, 32, 1, 2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(dtype)


def training_step(model: nn.Module):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_training_step_matches_eager(path, dtype, rewritten, monkeypatch):
    """loss.backward() of a CNN: its convolutions' gradients (a transposed convolution
    for the input's, one over the batch for the weight's) through aten::convolution
    too; the losses and the parameters after each step as eager's. Every convolution
    rewritten (MIN_FLOPS 0), the model small."""
    monkeypatch.setattr(pass_module, "MIN_FLOPS", 0)
    torch.manual_seed(0)
    model = cnn(dtype)
    x, y = torch.randn(4, 3, 32, 32, dtype=dtype), torch.randint(10, (4,))
    eager_model, compiled_model = copy.deepcopy(model), copy.deepcopy(model)
    eager, step = training_step(eager_model), training_step(compiled_model)
    eager(x, y), step(x, y)  # the gradients and momenta the compiled step updates
    if path == "compile":
        compiled = outofplace.compile(step, (x, y), cache=False)
    else:
        compiled = torch.compile(step, backend="outofplace", options={"cache": False})
    lent = []
    for _ in range(4):
        lent.append(custom_calls.extension().lent_results())
        torch.testing.assert_close(compiled(x, y), eager(x, y), **tolerance(dtype))
    for got, expected in zip(compiled_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(got, expected, **tolerance(dtype))
    # 4 forward, 4 weight gradients, 3 input gradients (the first layer's input needs
    # none), the strided ones transposed convolutions
    assert len(rewritten) == 11, len(rewritten)
    # Once two calls found the same allocation become each result, each kernel
    # computes its result in XLA's buffer, not in one of its own copied there
    # (kernel_call.cpp's `Lender`; oneDNN's NCHW result is its second allocation of
    # that size, after the blocked one it reorders), checked by the last call's results:
    # the 9 convolutions' results not written permuted (the two grouped convolutions'
    # weight gradients are, copied there) and batch norm's backward's 3
    lent.append(custom_calls.extension().lent_results())
    assert lent[4] - lent[3] == 12, lent
    assert any(plan["transposed"] for plan in rewritten)
    assert any(plan["backward"] for plan in rewritten)  # the 16x16 and 8x8 windows


def test_exports_and_other_engines_keep_xla_convolutions():
    """The pass runs in the XLA engine's legalization only: the StableHLO the exports,
    the interpreter and IREE take has XLA's convolutions."""
    torch.manual_seed(0)
    x, w = torch.randn(4, 16, 24, 24), torch.randn(32, 16, 3, 3)
    compiled = outofplace.compile(lambda x, w: F.conv2d(x, w, padding=1), (x, w),
                                  cache=False)
    assert "stablehlo.convolution" in compiled.stablehlo
    assert "aten::convolution" not in compiled.stablehlo
    assert b"aten::convolution" not in compiled.hlo_module_proto()
    assert b"aten::convolution" not in compiled.portable_artifact()
    assert CALL in legalize_for_cpu(compiled.stablehlo)[0]


def test_small_convolutions_stay_xla():
    """Below MIN_FLOPS: XLA's convolution (a call would cost more than it saves)."""
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 4, 3, 3)
    compiled = outofplace.compile(lambda x, w: F.conv2d(x, w, padding=1), (x, w),
                                  cache=False)
    engine = legalize_for_cpu(compiled.stablehlo)[0]
    assert "stablehlo.convolution" in engine and "aten::convolution" not in engine
    torch.testing.assert_close(compiled(x, w), F.conv2d(x, w, padding=1))


def test_bfloat16_is_eagers_kernel():
    """bf16: the call is eager's kernel on the same operands, so the same bits."""
    torch.manual_seed(0)
    x = torch.randn(4, 16, 48, 48, dtype=torch.bfloat16)
    w = torch.randn(32, 16, 3, 3, dtype=torch.bfloat16)

    def f(x, w):
        return F.conv2d(x, w, stride=2, padding=1)

    compiled = outofplace.compile(f, (x, w), cache=False)
    assert CALL in legalize_for_cpu(compiled.stablehlo)[0]
    torch.testing.assert_close(compiled(x, w), f(x, w), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_transposed_convolutions_match_eager(dtype, rewritten, monkeypatch):
    """Input dilations as aten's transposed convolution: a user's conv_transpose2d
    (grouped, padding and output padding) and a grouped strided convolution's input
    gradient (JAX's transpose rule)."""
    monkeypatch.setattr(pass_module, "MIN_FLOPS", 0)
    torch.manual_seed(0)
    x = torch.randn(2, 8, 7, 9, dtype=dtype, requires_grad=True)
    w = torch.randn(8, 3, 3, 3, dtype=dtype, requires_grad=True)  # [in, out / groups, ...]
    v = torch.randn(6, 4, 3, 3, dtype=dtype, requires_grad=True)  # [out, in / groups, ...]

    def f(x, w, v):
        up = F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2)
        down = F.conv2d(x, v, stride=2, padding=1, groups=2)
        return up, torch.autograd.grad(down.square().sum(), x)[0]

    compiled = outofplace.compile(f, (x, w, v), cache=False)
    for got, expected in zip(compiled(x, w, v), f(x, w, v)):
        torch.testing.assert_close(got, expected, **tolerance(dtype))
    transposed = [plan for plan in rewritten if plan["transposed"]]
    assert len(transposed) == 2 and all(plan["groups"] == 2 for plan in transposed)
    assert sorted(plan["output_padding"] for plan in transposed) == [[0, 0], [1, 1]]


def test_a_kernel_allocating_otherwise_still_matches_eager():
    """A convolution whose kernel changes between calls of one program (oneDNN's, then
    aten's own with oneDNN off: other allocations) gives eager's results throughout:
    where the allocation lent XLA's buffer no longer becomes the result (another took
    it, or none of its size came), the result is copied there as before and the
    allocation learned again (kernel_call.cpp's `Lender`)."""
    torch.manual_seed(0)
    x, w = torch.randn(4, 32, 24, 24), torch.randn(32, 32, 3, 3)  # 42 MFLOP: a call

    def f(x, w):
        return F.conv2d(x, w, padding=1)
    compiled = outofplace.compile(f, (x, w), cache=False)
    lent = []
    for mkldnn in (True, False, True):
        with torch.backends.mkldnn.flags(enabled=mkldnn):
            for _ in range(4):
                torch.testing.assert_close(compiled(x, w), f(x, w), **tolerance(x.dtype))
                lent.append(custom_calls.extension().lent_results())
    assert lent[3] - lent[2] == 1 and lent[11] - lent[10] == 1, lent  # lent again


def block(dtype: torch.dtype) -> nn.Module:
    """A ResNet basic block at 16x16 (stride 2, then stride 1) and a 1x1 shortcut."""
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(16, 32, 3, 2, 1, bias=False)
            self.conv2 = nn.Conv2d(32, 32, 3, 1, 1, bias=False)
            self.down = nn.Conv2d(16, 32, 1, 2, bias=False)

        def forward(self, x):
            return torch.relu(self.conv2(torch.relu(self.conv1(x))) + self.down(x))
    return Block().to(dtype)


def legalized_calls(compiled) -> list:
    """The legalized XLA module (parsed) and its kernel calls, through the bindings."""
    from torch_mlir import ir

    from outofplace.context import make_context

    module = ir.Module.parse(legalize_for_cpu(compiled.stablehlo)[0], context=make_context())
    return module, custom_calls.kernel_calls(module)


def live_ops(module, name: str) -> list:
    """The ops named `name` that main's results depend on (the pass leaves dead ones for
    XLA to drop)."""
    from torch_mlir import ir

    from outofplace.ir_utils import main_function

    block = main_function(module).regions[0].blocks[0]
    pending, live = [list(block.operations)[-1]], []
    while pending:
        op = pending.pop()
        if any(op == seen for seen in live):
            continue
        live.append(op)
        pending += [v.owner.operation for v in op.operands
                    if not isinstance(v.owner, ir.Block)]
    return [op for op in live if op.name == name]


def _sgd_steps(model: nn.Module, x: torch.Tensor) -> tuple:
    """Two copies of `model` and an SGD step (momentum) of each on a squared-mean loss,
    each run once (the state a compiled step updates): (eager's model, the model to
    compile the step of, eager's step, that step)."""
    models = copy.deepcopy(model), copy.deepcopy(model)

    def step_of(m):
        step = squared_mean_step(m, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
        step(x)
        return step
    return (*models, *(step_of(m) for m in models))


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients_as_eagers_kernels_match_eager(path, dtype, rewritten, monkeypatch):
    """A training step of a ResNet block: the weights' gradients with windows of 64
    elements or more are aten::convolution_backward's (its weight only sizes, its first
    and last returns not computed), the stride-1 input gradient is a transposed
    convolution of the weight as the program holds it, the strided one's slice is folded
    into its padding; the losses and parameters as eager's."""
    monkeypatch.setattr(pass_module, "MIN_FLOPS", 0)
    torch.manual_seed(0)
    model = block(dtype)
    x = torch.randn(4, 16, 16, 16, dtype=dtype)
    eager_model, compiled_model, eager, step = _sgd_steps(model, x)
    compiled = outofplace.compile(step, (x,), cache=False) if path == "compile" else \
        torch.compile(step, backend="outofplace", options={"cache": False})
    for _ in range(2):
        torch.testing.assert_close(compiled(x), eager(x), **tolerance(dtype))
    for got, expected in zip(compiled_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(got, expected, **tolerance(dtype))
    # forward 3, weight gradients 3 (8x8 windows: every one), input gradients 2 (conv2's
    # at stride 1, conv1's... and the shortcut's, summed: x needs none)
    backward = [plan for plan in rewritten if plan["backward"]]
    assert len(backward) == 3, rewritten
    assert any(plan["transposed"] and plan["stride"] == [1, 1] for plan in rewritten)


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("stride,permutes", [(1, []), (2, [[1, 0, 2, 3]])])
def test_small_window_weight_gradient_is_written_in_the_weights_layout(
        path, dtype, stride, permutes, monkeypatch):
    """A weight's gradient over a 2x2 output (a ResNet's last layer at 64x64) stays a
    convolution over the batch, aten's result [I, O, ...], which the program transposes
    to the weight's [O, I, ...]. At stride 1 the convolution with its operands swapped
    and reversed computes [O, I, ...] itself (no permuted result); at stride 2 the
    handler writes aten's result permuted (`outofplace.permute.0`). Either way no
    transpose is left for XLA to copy, and the step's loss and parameters are eager's,
    call after call."""
    from torch_mlir import ir

    monkeypatch.setattr(pass_module, "MIN_FLOPS", 0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(32, 64, 3, stride, 1, bias=False), nn.ReLU()).to(dtype)
    x = torch.randn(4, 32, 2 * stride, 2 * stride, dtype=dtype)
    eager_model, compiled_model, eager, step = _sgd_steps(model, x)
    if path == "compile":
        compiled = outofplace.compile(step, (x,), cache=False)
        module, calls = legalized_calls(compiled)
        [gradient] = [op for op in calls if ranked_shape(op.result) == [64, 32, 3, 3]]
        config = ir.DictAttr(gradient.attributes["backend_config"])
        assert [list(ir.DenseI64ArrayAttr(config[name])) for name in
                ["outofplace.permute.0"] if name in config] == permutes
        assert not [op for op in live_ops(module, "stablehlo.transpose")
                    if op.operands[0].owner.operation == gradient.operation]
    else:
        compiled = torch.compile(step, backend="outofplace", options={"cache": False})
    for _ in range(3):
        torch.testing.assert_close(compiled(x), eager(x), **tolerance(dtype))
        for got, expected in zip(compiled_model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(got, expected, **tolerance(dtype))
            torch.testing.assert_close(got.grad, expected.grad, **tolerance(dtype))


SWAPPED_GRADIENTS = {  # a weight's gradient larger than its operands, over small maps
    "conv1d 5": (nn.Conv1d(64, 128, 5, padding=2, bias=False), (4, 64, 2)),
    "conv2d 4 same (asymmetric)": (nn.Conv2d(32, 64, 4, padding="same", bias=False),
                                   (4, 32, 2, 2)),
    "conv3d 3": (nn.Conv3d(16, 32, 3, padding=1, bias=False), (4, 16, 2, 2, 2)),
}


class Convolved(nn.Module):
    """Each of SWAPPED_GRADIENTS' convolutions on its own input, in one program."""

    def __init__(self, dtype) -> None:
        super().__init__()
        self.convs = nn.ModuleList(copy.deepcopy(conv).to(dtype)
                                   for conv, _ in SWAPPED_GRADIENTS.values())

    def forward(self, xs):
        return torch.cat([torch.tanh(conv(x)).flatten() for conv, x in zip(self.convs, xs)])


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_swapped_weight_gradients_match_eager(path, dtype, monkeypatch):
    """Weights' gradients computed by the convolution with its operands swapped (1, 2
    and 3 spatial dimensions, an asymmetric padding): none written permuted, the step's
    loss, parameters and gradients eager's."""
    from torch_mlir import ir

    monkeypatch.setattr(pass_module, "MIN_FLOPS", 0)
    torch.manual_seed(0)
    model = Convolved(dtype)
    xs = [torch.randn(*shape, dtype=dtype) for _, shape in SWAPPED_GRADIENTS.values()]
    eager_model, compiled_model, eager, step = _sgd_steps(model, xs)
    if path == "compile":
        compiled = outofplace.compile(step, (xs,), cache=False)
        _, calls = legalized_calls(compiled)
        for conv in compiled_model.convs:
            gradients = [op for op in calls
                         if ranked_shape(op.result) == list(conv.weight.shape)]
            assert gradients and not [op for op in gradients if "outofplace.permute.0" in
                                      ir.DictAttr(op.attributes["backend_config"])]
    else:
        compiled = torch.compile(step, backend="outofplace", options={"cache": False})
    for _ in range(2):
        torch.testing.assert_close(compiled(xs), eager(xs), **tolerance(dtype))
        for got, expected in zip(compiled_model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(got, expected, **tolerance(dtype))
            torch.testing.assert_close(got.grad, expected.grad, **tolerance(dtype))


def _gradient_calls(of_weight: bool) -> tuple:
    """A 3x3 convolution's gradient of its weight (or its input), compiled and checked
    against eager; the legalized module and its kernel calls."""
    torch.manual_seed(0)
    x = torch.randn(8, 32, 16, 16, requires_grad=True)
    w = torch.randn(32, 32, 3, 3, requires_grad=True)

    def f(x, w):
        return torch.autograd.grad(F.conv2d(x, w, padding=1).square().sum(),
                                   w if of_weight else x)[0]

    compiled = outofplace.compile(f, (x, w), cache=False)
    torch.testing.assert_close(compiled(x, w), f(x, w), rtol=1e-4, atol=1e-3)
    return legalized_calls(compiled)


def test_weight_gradient_call_and_its_attributes():
    """The weight gradient's call, read through the bindings: aten::convolution_backward
    on (gradient, input) only, the weight given as sizes, one result (return 1)."""
    from torch_mlir import ir

    module, calls = _gradient_calls(of_weight=True)
    config = [ir.DictAttr(op.attributes["backend_config"]) for op in calls]
    gradients = [c for c in config if ir.StringAttr(c["outofplace.op"]).value ==
                 pass_module.BACKWARD]
    assert len(gradients) == 1
    (c,) = gradients
    assert list(ir.DenseI64ArrayAttr(c["outofplace.unread.2"])) == [32, 32, 3, 3]
    assert list(ir.DenseI64ArrayAttr(c["outofplace.returns"])) == [1]
    assert list(ir.DenseI64ArrayAttr(c["output_mask"])) == [0, 1, 0]


def test_weight_of_a_stride_1_input_gradient_is_not_copied():
    """The input's gradient at stride 1: the call reads the weight argument itself (JAX's
    rule transposes and reverses it; aten's transposed convolution takes it as it is), so
    no transpose or reverse of it is left for XLA to compute."""
    from torch_mlir import ir

    module, calls = _gradient_calls(of_weight=False)
    transposed = [op for op in calls if ir.BoolAttr(
        ir.DictAttr(op.attributes["backend_config"])["transposed"]).value]
    assert len(transposed) == 1
    weight = transposed[0].operands[1]
    assert isinstance(weight.owner, ir.Block), weight.owner  # the argument w itself
    assert live_ops(module, "stablehlo.reverse") == []


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_slices_of_convolutions_fold_into_their_padding(dtype, monkeypatch):
    """A slice of a convolution's spatial outputs is the convolution with less padding
    (no slice of its result left); one that would need a negative padding cuts the
    input instead (a slice of the input: the 2 rows before the first window kept),
    unless the windows kept read the padding alone (the slice stays). All as eager's."""
    from torch_mlir import ir

    monkeypatch.setattr(pass_module, "MIN_FLOPS", 0)
    torch.manual_seed(0)
    x = torch.randn(2, 16, 24, 24, dtype=dtype)
    w = torch.randn(32, 16, 3, 3, dtype=dtype)

    def folded(x, w):
        return F.conv2d(x, w, stride=2, padding=2)[:, :, 1:-1, 1:]

    def cut(x, w):  # starts 5 outputs in: the low padding, 3, would be -2
        return F.conv2d(x, w, padding=3)[:, :, 5:, :]

    def padding_alone(x, w):  # the last output's window: the high padding alone
        return F.conv2d(x, w, padding=3)[:, :, 27:, :]

    for f, cut_input, slices in ((folded, None, 0), (cut, [2, 16, 22, 24], 1),
                                 (padding_alone, None, 1)):
        compiled = outofplace.compile(f, (x, w), cache=False)
        torch.testing.assert_close(compiled(x, w), f(x, w), **tolerance(dtype))
        module, calls = legalized_calls(compiled)
        assert len(calls) == 1
        kept = live_ops(module, "stablehlo.slice")
        assert len(kept) == slices, f.__name__
        of_input = [list(ir.RankedTensorType(op.result.type).shape) for op in kept
                    if op.operands[0].owner != calls[0]]
        assert of_input == ([cut_input] if cut_input else []), f.__name__


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_1x1_weight_gradient_computes_only_the_gradient(path, dtype, monkeypatch):
    """A strided 1x1 convolution's weight gradient, which JAX's rule takes as the first
    output of a 2x2 one (a window of the gradient dilated by the stride, over the whole
    input), is aten's backward-weights kernel over the input as it is (no copy of it
    cut to the last window's end): aten's result is the [O, I, 1, 1] gradient itself,
    not a 2x2 one sliced and written permuted. As eager's (a ResNet's downsampling
    shortcut)."""
    from torch_mlir import ir

    monkeypatch.setattr(pass_module, "MIN_FLOPS", 0)
    torch.manual_seed(0)
    x = torch.randn(2, 16, 8, 8, dtype=dtype)
    w = torch.randn(32, 16, 1, 1, dtype=dtype, requires_grad=True)
    g = torch.randn(2, 32, 4, 4, dtype=dtype)

    def f(x, g):
        return torch.autograd.grad(F.conv2d(x, w, stride=2), w, g)[0]

    compiled = outofplace.compile(f, (x, g), cache=False) if path == "compile" else \
        torch.compile(f, backend="outofplace", options={"cache": False})
    torch.testing.assert_close(compiled(x, g), f(x, g), **tolerance(dtype))
    if path == "compile":
        module, calls = legalized_calls(compiled)
        shapes = [list(ir.RankedTensorType(call.results[0].type).shape) for call in calls]
        assert [1, 1] in [shape[2:] for shape in shapes], shapes
        assert not any("outofplace.permute.0" in ir.DictAttr(call.attributes[
            "backend_config"]) for call in calls)
        # aten's gradient reads the input whole: no copy of its first 7 rows and columns
        assert not live_ops(module, "stablehlo.slice")


def test_cache_key_says_whether_the_handler_is_registered(tmp_path, monkeypatch):
    """An executable compiled with the handler calls it: a process without the handler
    (the extension absent or not loading) must not load it from the cache, and compiles
    XLA's convolutions instead."""
    from outofplace import compile_cache

    monkeypatch.setenv("OUTOFPLACE_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    x, w = torch.randn(4, 16, 24, 24), torch.randn(32, 16, 3, 3)

    def f(x, w):
        return F.conv2d(x, w, padding=1)

    assert "aten::convolution" in legalize_for_cpu(
        outofplace.compile(f, (x, w), cache=False).stablehlo)[0]  # (with the handler)
    outofplace.compile(f, (x, w), cache=True)(x, w)
    monkeypatch.setattr(custom_calls, "extension", lambda: None)
    before = compile_cache.stats["xla hit"]
    compiled = outofplace.compile(f, (x, w), cache=True)
    torch.testing.assert_close(compiled(x, w), f(x, w), rtol=1e-4, atol=1e-4)
    assert compile_cache.stats["xla hit"] == before
    assert "aten::convolution" not in legalize_for_cpu(compiled.stablehlo)[0]


@torch.library.custom_op("oop_conv_test::channel_sums", mutates_args=())
def channel_sums(x: torch.Tensor) -> torch.Tensor:
    """A Python kernel (it needs the GIL, which the handler does not hold)."""
    return x.sum((2, 3))


@channel_sums.register_fake
def _(x):
    return x.new_empty(x.shape[:2])


def test_python_kernels_beside_convolutions_on_xlas_threads():
    """The handler calls kernels without the GIL: Python ones (which take it themselves)
    beside eager's convolutions, independent of each other, so XLA's two threads may run
    them at once; every call as eager's."""
    torch.manual_seed(0)
    x, w = torch.randn(8, 32, 32, 32), torch.randn(32, 32, 3, 3)

    def f(x, w):
        ys = [F.conv2d(x * (i + 1), w, padding=1) for i in range(3)]
        return [channel_sums(x * (i + 1)) for i in range(3)] + ys

    compiled = outofplace.compile(f, (x, w), cache=False)
    assert len(custom_calls.kernel_calls(legalized_calls(compiled)[0])) == 6
    for _ in range(5):
        for got, expected in zip(compiled(x, w), f(x, w)):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-3)
