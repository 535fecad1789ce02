"""frontend/fused_multiply_adds.py: eager's one-rounding `add`/`sub` with alpha, `addcmul`,
`lerp` (and `addcdiv`, rounded after each op) computed bit for bit as eager computes
them, alone and after a `mul_` whose product XLA would otherwise contract in their place
(`b.mul_(0.9).addcmul_(g, g, value=0.1)`: Adam's second moment), on both paths, in
float32, float64 and (computed in float32 as eager does) bfloat16."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import outofplace

N = 4099  # a vectorized body and a remainder


OPS = {
    "add_alpha": lambda b, x, y, w: b.add_(x, alpha=0.1),
    "sub_alpha": lambda b, x, y, w: b.sub_(x, alpha=0.3),
    "torch_add": lambda b, x, y, w: b.copy_(torch.add(b, x, alpha=-0.7)),
    "addcmul": lambda b, x, y, w: b.addcmul_(x, y, value=0.1),
    "addcmul_negative": lambda b, x, y, w: b.addcmul_(x, y, value=-0.2),
    "addcmul_of_self": lambda b, x, y, w: b.addcmul_(b, b, value=0.01),
    "addcdiv": lambda b, x, y, w: b.addcdiv_(x, y.abs() + 1, value=-0.3),
    "lerp_small": lambda b, x, y, w: b.lerp_(x, 0.1),
    "lerp_large": lambda b, x, y, w: b.lerp_(x, 0.7),
    "lerp_tensor": lambda b, x, y, w: b.lerp_(x, w),
}
# eager rounds b * 0.9 before these, XLA contracts it into them (addcdiv, lerp's y - b)
# or folds it into a product of constants ((b * 0.9) * 0.01): one rounding from eager's,
# the module's docstring says
CONTRACTED_AFTER_MUL = {"addcdiv", "lerp_large", "lerp_tensor", "addcmul_of_self"}


def _module(op, before: bool, start: torch.Tensor) -> torch.nn.Module:
    class Update(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("b", start.clone())

        def forward(self, x, y, w):
            if before:
                self.b.mul_(0.9)
            op(self.b, x, y, w)
            return self.b * 2

    return Update()


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple((torch.randn(N) * 4).to(dtype) for _ in range(3)) + (
        torch.rand(N).to(dtype),)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name, before", [(name, before) for name in OPS
                                           for before in (False, True)
                                           if not (before and name in CONTRACTED_AFTER_MUL)])
def test_bit_for_bit_as_eager_on_both_paths(name: str, before: bool, dtype) -> None:
    start, x, y, w = _inputs(dtype)
    eager = _module(OPS[name], before, start)
    expected = eager(x, y, w)
    compiled = _module(OPS[name], before, start)
    out = outofplace.compile(compiled, (x, y, w))(x, y, w)
    torch._dynamo.reset()
    dynamo = _module(OPS[name], before, start)
    out_dynamo = torch.compile(dynamo, backend="outofplace")(x, y, w)
    for what, model, result in (("outofplace.compile", compiled, out),
                                ("torch.compile", dynamo, out_dynamo)):
        differ = (model.b != eager.b).sum().item()
        assert differ == 0, f"{what}: {differ} of {N} elements one rounding off eager's"
        assert torch.equal(result, expected), what


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_adam_moments_bit_for_bit(dtype) -> None:
    """Adam's moments as torch.optim.Adam's single-tensor step writes them."""
    def moments(m, v, g):
        m.lerp_(g, 1 - 0.9)
        v.mul_(0.999).addcmul_(g, g, value=1 - 0.999)
        return m, v

    start_m, start_v, g, _ = _inputs(dtype)
    start_v = start_v.abs()
    expected = moments(start_m.clone(), start_v.clone(), g)
    m, v = start_m.clone(), start_v.clone()
    outofplace.compile(moments, (m, v, g))(m, v, g)
    torch._dynamo.reset()
    m_d, v_d = start_m.clone(), start_v.clone()
    torch.compile(moments, backend="outofplace")(m_d, v_d, g)
    for actual in ((m, v), (m_d, v_d)):
        assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])


@pytest.mark.parametrize("foreach", [False, True], ids=["single_tensor", "foreach"])
def test_adam_moments_of_multidimensional_parameters(foreach: bool) -> None:
    """torch.optim.Adam's moments of a convolution's weight and a matrix, bit for bit on
    both paths: the XLA engine computes written state flat (transforms/flatten_state.py),
    the gradient read in its own shape, and XLA's reshape mover (off in COMPILE_OPTIONS)
    made the gradient's square a product of that shape, which XLA's fusion emitter did
    not contract as eager does."""
    shapes = [(16, 8, 3, 3), (12, 20), (7,)]

    def make():
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
        grads = [torch.randn(s) for s in shapes]
        opt = torch.optim.Adam(params, lr=1e-2, foreach=foreach)

        def step(*gs):
            for p, g in zip(params, gs):
                p.grad = g
            opt.step()
        step(*grads)  # the state exists before compiling
        return params, opt, step, grads

    eager_params, eager_opt, eager_step, grads = make()
    for _ in range(2):
        eager_step(*grads)
    for compiled_by in ("outofplace.compile", "torch.compile"):
        params, opt, step, _ = make()
        torch._dynamo.reset()
        run = outofplace.compile(step, grads) if compiled_by == "outofplace.compile" \
            else torch.compile(step, backend="outofplace")
        for _ in range(2):
            run(*grads)
        for p, q in zip(params, eager_params):
            for key in ("exp_avg", "exp_avg_sq"):
                differ = (opt.state[p][key] != eager_opt.state[q][key]).sum().item()
                assert differ == 0, f"{compiled_by}: {key} of {tuple(p.shape)}: {differ}"


def test_tensor_alpha_of_a_narrower_operand_multiplies_in_the_result_dtype() -> None:
    """`x.add_(y, alpha=t)` with a tensor t, which dynamo writes as inductor's fma: a
    float32 y into a float64 x multiplies in float64, as eager's add does."""
    def update(x, y, t):
        x.add_(y, alpha=t[0])
        return x

    torch.manual_seed(0)
    x, y, t = torch.randn(N, dtype=torch.float64), torch.randn(N), torch.rand(1) + 0.1
    expected = update(x.clone(), y, t)
    for compiled_by in ("outofplace.compile", "torch.compile"):
        torch._dynamo.reset()
        actual = x.clone()
        run = outofplace.compile(update, (actual, y, t)) \
            if compiled_by == "outofplace.compile" else torch.compile(update, backend="outofplace")
        run(actual, y, t)
        assert torch.equal(actual, expected), compiled_by
