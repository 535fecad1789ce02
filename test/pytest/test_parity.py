"""Programs eager runs, through both entry points (`outofplace.compile` and
`torch.compile(backend="outofplace")`), against eager (issue 32): float64 training steps
to eager's own rounding, runtime-position views, optimizer forms, writes through `.data`.
"""

import copy
import warnings

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import outofplace
from differential import run_on_path

STEPS = 3


def assert_close64(actual: torch.Tensor, expected: torch.Tensor, what: str,
                   rtol: float = 1e-12) -> None:
    """Equal to eager's rounding: a float64 value computed anywhere at float32 precision
    is off by 1e-9 or more. A float32 value (an optimizer's step counters, NAdam's
    mu_product, ASGD's eta: torch.optim keeps them in float32) to float32's rounding,
    where XLA's float32 `pow` and eager's vectorized one may differ in the last place."""
    assert actual.dtype == expected.dtype, f"{what}: {actual.dtype}, eager {expected.dtype}"
    tight = actual.dtype == torch.float64
    torch.testing.assert_close(actual, expected, rtol=rtol if tight else 3e-7,
                               atol=1e-15 if tight else 1e-12,
                               msg=lambda m: f"{what}: {m}")


def _mlp(dtype: torch.dtype) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 3)).to(dtype)


def _train(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


_OPTIMIZERS = {
    "SGD": [dict(lr=0.1, momentum=0.9, weight_decay=0.01),
            dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, maximize=True)],
    "Adam": [dict(lr=0.01, weight_decay=0.01), dict(lr=0.01, amsgrad=True)],
    "AdamW": [dict(lr=0.01), dict(lr=0.01, amsgrad=True, weight_decay=0.1)],
    "RMSprop": [dict(lr=0.01, momentum=0.9, weight_decay=0.01),
                dict(lr=0.01, centered=True)],
    "Adagrad": [dict(lr=0.01, lr_decay=0.01, weight_decay=0.01)],
    "Adadelta": [dict(lr=1.0, weight_decay=0.01)],
    "Adamax": [dict(lr=0.01, weight_decay=0.01)],
    "NAdam": [dict(lr=0.01, weight_decay=0.01),
              dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)],
    "Rprop": [dict(lr=0.01)],
    "Adafactor": [dict(lr=0.01)],
    "ASGD": [dict(lr=0.01, t0=1)],
}
_FUSED = ("SGD", "Adam", "AdamW", "Adagrad")  # the optimizers with a fused CPU step


def _forms(kind: str) -> list[dict]:
    if kind == "ASGD":  # its single-tensor step branches on the step: refused, below
        return [dict(foreach=True)]
    forms = [dict(foreach=False), dict(foreach=True)]
    if kind in _FUSED:
        forms.append(dict(fused=True))
    return forms


OPTIMIZER_CASES = [
    pytest.param(kind, {**options, **form},
                 id=f"{kind}-{'-'.join(f'{k}={v}' for k, v in {**options, **form}.items())}")
    for kind, variants in _OPTIMIZERS.items() for options in variants
    for form in _forms(kind)]


def _assert_training_matches(model, opt, eager, eager_opt, what: str) -> None:
    # ASGD's float32 learning rate comes from a float32 pow (XLA's and eager's differ in
    # the last place for some inputs): its float64 parameters follow to float32's rounding
    rtol = 1e-7 if isinstance(opt, torch.optim.ASGD) else 1e-12
    for (name, a), e in zip(model.named_parameters(), eager.parameters()):
        assert_close64(a.detach(), e.detach(), f"{what} '{name}'", rtol)
        assert_close64(a.grad, e.grad, f"{what} '{name}.grad'", rtol)
    assert len(opt.state) == len(eager_opt.state)
    for (_, a), (_, e) in zip(opt.state.items(), eager_opt.state.items()):
        assert a.keys() == e.keys()
        for key in e:
            assert_close64(a[key], e[key], f"{what} state '{key}'", rtol)


@pytest.mark.parametrize("kind,options", OPTIMIZER_CASES)
def test_float64_training_step_matches_eager_to_its_rounding(kind, options):
    """forward, backward, `opt.step()` in float64 through `outofplace.compile`: Python
    floats at tensor operands (`buf.mul_(momentum)`) were float32 tensors, and the step's
    bias corrections float32 tensors (torch.optim's traced path) where eager computes
    Python floats: parameters off by 4e-9 (SGD) to 2e-7 (Adam)."""
    torch.manual_seed(0)
    model = _mlp(torch.float64)
    eager = copy.deepcopy(model)
    opt = getattr(torch.optim, kind)(model.parameters(), **options)
    eager_opt = getattr(torch.optim, kind)(eager.parameters(), **options)
    step, eager_step = _train(model, opt), _train(eager, eager_opt)
    x, y = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    step(x, y)  # the first step creates the state and the .grad tensors
    eager_step(x, y)
    compiled = outofplace.compile(step, (x, y))
    for i in range(STEPS):
        x, y = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
        assert_close64(compiled(x, y), eager_step(x, y), f"step {i} loss",
                       1e-7 if kind == "ASGD" else 1e-12)
        _assert_training_matches(model, opt, eager, eager_opt, f"step {i}")


@pytest.mark.parametrize("kind,options,default_dtype", [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01), torch.float32),
    ("Adam", dict(lr=0.01, weight_decay=0.01), torch.float64),
    ("AdamW", dict(lr=0.01, amsgrad=True), torch.float64),
    ("RMSprop", dict(lr=0.01, momentum=0.9, weight_decay=0.01), torch.float64),
    ("Adagrad", dict(lr=0.01, lr_decay=0.01), torch.float64),
])
def test_float64_training_step_under_torch_compile_matches_eager(kind, options,
                                                                   default_dtype):
    """The whole step under `torch.compile(backend="outofplace")`: dynamo writes
    `addcmul_(..., value=)` as inductor's `prims.fma` (refused before), and a Python
    float operand of a tensor op was a float32 tensor (SGD off by 3e-9). torch.optim's
    traced step keeps its step counts as tensors of the default dtype: its bias
    corrections are float64 with a float64 default (docs/training.md)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(default_dtype)
    try:
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = _mlp(torch.float64)
        eager = copy.deepcopy(model)
        opt = getattr(torch.optim, kind)(model.parameters(), **options)
        eager_opt = getattr(torch.optim, kind)(eager.parameters(), **options)
        step = torch.compile(_train(model, opt), backend="outofplace")
        eager_step = _train(eager, eager_opt)
        for i in range(STEPS):
            x = torch.randn(4, 6, dtype=torch.float64)
            y = torch.randn(4, 3, dtype=torch.float64)
            assert_close64(step(x, y), eager_step(x, y), f"step {i} loss")
            _assert_training_matches(model, opt, eager, eager_opt, f"step {i}")
    finally:
        torch.set_default_dtype(previous)
        torch._dynamo.reset()


def _addcmul_value(x, y, z):
    x.addcmul_(y, z, value=0.5)
    return x + 1


def _addcdiv_value(x, y, z):
    x.addcdiv_(y, z.abs() + 1, value=-0.25)
    return x * 2


def _add_tensor_alpha(x, y, z):
    x.add_(y, alpha=z[0])
    return x


def _assert_close(actual, expected, what):
    if expected.dtype == torch.float64:
        assert_close64(actual, expected, what)
    else:
        torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
@pytest.mark.parametrize("program", [_addcmul_value, _addcdiv_value, _add_tensor_alpha])
def test_fused_multiply_add_of_dynamo_matches_eager(program, path, dtype):
    """Dynamo writes `addcmul_(..., value=)`, `addcdiv_(..., value=)` and `add_` with a
    tensor `alpha` as inductor's `prims.fma`, which torch-mlir does not define: it was
    refused under torch.compile (and with it Adam's step)."""
    torch.manual_seed(0)
    args = [torch.randn(5, dtype=dtype) for _ in range(3)]
    expected = [a.clone() for a in args]
    if path == "torch.compile":
        torch._dynamo.reset()
        compiled = torch.compile(program, backend="outofplace")
    else:
        compiled = outofplace.compile(program, tuple(a.clone() for a in args))
    try:
        result = compiled(*args)
    finally:
        torch._dynamo.reset()
    eager = program(*expected)
    _assert_close(result, eager, "result")
    _assert_close(args[0], expected[0], "written x")


T = 4


class RingBuffer(torch.nn.Module):
    """Its write index lives in a buffer: `p = ptr % T`, computed by the program."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kv", torch.zeros(T, 3))
        self.register_buffer("ptr", torch.tensor(0))

    def forward(self, v):
        p = self.ptr % T
        self.kv[p] = v
        self.ptr += 1
        return self.kv[p]


class RingAtArgument(torch.nn.Module):
    """`pos % T` of an argument."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kv", torch.zeros(T, 3))

    def forward(self, v, pos):
        p = pos % T
        self.kv[p] = v
        return self.kv[p]


class ReadBeforeAdvance(torch.nn.Module):
    """The view read at the pointer, then the pointer advanced: eager's view is of the
    row the pointer named when it was read."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kv", torch.zeros(T, 3))
        self.register_buffer("ptr", torch.tensor(0))

    def forward(self, v):
        self.kv[self.ptr] = v
        row = self.kv[self.ptr]
        self.ptr.add_(1).remainder_(T)
        return row


def _ring_calls(model_type):
    calls = [(torch.full((3,), float(i)),) for i in range(1, 7)]
    if model_type is RingAtArgument:
        calls = [(v, torch.tensor(i)) for i, (v,) in enumerate(calls)]
    return calls


@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
@pytest.mark.parametrize("model_type", [RingBuffer, RingAtArgument, ReadBeforeAdvance])
def test_ring_buffer_row_returned_is_a_view_of_the_buffer(model_type, path):
    """`return self.kv[p]` with a position the program computes is eager's view of the
    buffer: an output kept from an earlier call sees the later writes to its row (it
    was a copy)."""
    torch.manual_seed(0)
    model, eager = model_type(), model_type()
    calls = _ring_calls(model_type)
    if path == "torch.compile":
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="outofplace")
    else:
        compiled = outofplace.compile(model, calls[0])
    try:
        outputs = [compiled(*args) for args in calls]
    finally:
        torch._dynamo.reset()
    expected = [eager(*args) for args in calls]
    for i, (out, exp) in enumerate(zip(outputs, expected)):
        assert torch.equal(out, exp), f"output of call {i}: {out}, eager {exp}"
        assert out._base is not None and out.untyped_storage().data_ptr() == \
            model.kv.untyped_storage().data_ptr(), f"output of call {i} is no view of kv"
    assert torch.equal(model.kv, eager.kv)


class WritesThroughData(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3))
        self.scale = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        self.total.data[0] = x.sum()
        self.total.data.add_(x)
        self.scale.data.mul_(0.5)
        return x * self.scale


def _calls_match_eager(model, eager, xs, path: str, grad: bool) -> None:
    """`model` compiled on `path` ("outofplace.compile" or "torch.compile") and called on
    each of `xs` with gradients enabled or not: each output as `eager`'s."""
    torch._dynamo.reset()
    try:
        with torch.set_grad_enabled(grad):
            compiled = torch.compile(model, backend="outofplace") \
                if path == "torch.compile" else outofplace.compile(model, (xs[0],))
            outputs = [compiled(x) for x in xs]
            expected = [eager(x) for x in xs]
    finally:
        torch._dynamo.reset()
    for out, exp in zip(outputs, expected):
        torch.testing.assert_close(out, exp)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_write_through_data_of_a_buffer_and_a_parameter(path, grad):
    """`.data` reaches the torch.compile backend as `_get_data_attr`, which torch.export
    lifted as a fake constant ("Cannot access data pointer of Tensor")."""
    model, eager = WritesThroughData(), WritesThroughData()
    _calls_match_eager(model, eager, [torch.randn(3) for _ in range(3)], path, grad)
    assert torch.equal(model.total, eager.total)
    assert torch.equal(model.scale, eager.scale)


class DataWriteBesideAnUnbindOfIt(torch.nn.Module):
    """A row of a parameter that requires grad, taken by unbind (a view eager does not
    allow to see an in-place write of its base), then the parameter overwritten through
    `.data` (which autograd does not see)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([[1.0, 0.0], [2.0, -1.0]], dtype=dtype))

    def forward(self, x):
        self.w.data.clamp_(-3, 1)
        row = self.w.unbind(0)[-1]
        self.w.data.copy_(x)
        return row * 2, self.w.t()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_data_write_beside_an_unbind_view_of_a_parameter_with_gradients(path, dtype):
    """The backend turned `.data` into `detach()` for AOTAutograd's trace too, whose
    write then bumped the version an unbind view checks ("Output 1 of Unbind is a view
    and its base ... has been modified inplace"); AOTAutograd traces `.data` itself."""
    model, eager = DataWriteBesideAnUnbindOfIt(dtype), DataWriteBesideAnUnbindOfIt(dtype)
    _calls_match_eager(model, eager, [torch.randn(2, 2, dtype=dtype) for _ in range(3)],
                       path, True)
    assert torch.equal(model.w, eager.w)


class DataWriteBesideAChunkBuffer(torch.nn.Module):
    """A buffer that is a `chunk` of a parameter requiring grad (a view autograd lets no
    write of its base reach), the parameter clamped through `.data` (module fuzz seed
    63000000, program 3033), and another parameter written through `.data` and directly."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([[-3.0, -1.0], [1.0, 3.0], [-2.0, 2.0],
                                                  [4.0, 0.0]], dtype=dtype))
        self.register_buffer("top", self.w.chunk(2)[0])
        self.u = torch.nn.Parameter(torch.ones(2, dtype=dtype))

    def forward(self, x):
        self.w.data.clamp_(-2, 1)
        self.u.data.add_(x[0])
        with torch.no_grad():
            self.u.mul_(0.5)
        return x * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_data_write_leaves_the_version_as_eager(path, dtype):
    """A parameter written only through `.data` keeps its version, as in eager, so the
    buffer viewing it stays readable, here and when a call of another layout traces the
    program again (it raised "Output 0 of Split is a view and its base ... has been
    modified inplace"); one written otherwise too has its version moved on. (Under
    torch.compile, AOTAutograd's own write moves the version on, as backend="aot_eager"
    does: values only.)"""
    model, eager = DataWriteBesideAChunkBuffer(dtype), DataWriteBesideAChunkBuffer(dtype)
    inputs = [torch.randn(2, dtype=dtype), torch.randn(2, 2, dtype=dtype)[:, 0],
              torch.randn(2, dtype=dtype)]
    _calls_match_eager(model, eager, inputs, path, True)
    assert torch.equal(model.w, eager.w) and torch.equal(model.u, eager.u)
    if path == "outofplace.compile":
        assert model.w._version == eager.w._version == 0
        assert model.u._version > 0 and eager.u._version > 0
        torch.testing.assert_close(model.top * 1, eager.top * 1)


def test_set_to_a_storage_is_refused_at_its_line():
    def program(x, y):
        x.set_(y.untyped_storage())
        return x + 1

    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=r"set_\.source_Storage.*storage") as error:
        outofplace.compile(program, (torch.randn(6), torch.randn(6)))
    assert error.value.location.endswith(
        f"test_parity.py:{program.__code__.co_firstlineno + 1}")


def test_set_to_a_storage_under_torch_compile_matches_eager():
    """Dynamo runs `x.set_(storage)` eagerly (a graph break): eager's aliasing."""
    def program(x, y):
        x.set_(y.untyped_storage())
        x.add_(1)
        return x * 2

    x, y = torch.randn(6), torch.randn(6)
    ex, ey = x.clone(), y.clone()
    torch._dynamo.reset()
    try:
        result = torch.compile(program, backend="outofplace")(x, y)
    finally:
        torch._dynamo.reset()
    assert torch.equal(result, program(ex, ey))
    assert torch.equal(y, ey) and torch.equal(x, ex)
    assert x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


class SlidingWindow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("win", torch.zeros(T, 3))
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        hv = self.lin(x)
        self.win[:-1] = self.win[1:].clone()
        self.win[-1] = hv
        return self.win.mean(0)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_last_row_written_with_gradients_enabled(path, grad):
    """`self.win[-1] = hv` with gradients enabled: AOTAutograd writes it as
    `select_scatter(win, hv, 0, -1)`, whose negative index torch-mlir's lowering failed
    on."""
    torch.manual_seed(0)
    model = SlidingWindow()
    eager = copy.deepcopy(model)
    _calls_match_eager(model, eager, [torch.randn(3) for _ in range(5)], path, grad)
    torch.testing.assert_close(model.win, eager.win)


def _column_from_position(x0, pos):
    x0[:, 0] = x0[:, pos].reshape(-1)  # `x0[:, pos]`, a 0-d int32 position: a graph break
    return x0 * 2


def _add_through_row_at_position(x1, pos):
    x1[pos, :].select(0, 0)[...] += 1
    x1[:, :] = 2 * x1
    return x1.sum()


_LAYOUTS = {"contiguous": lambda x: x.clone(),
            "transposed": lambda x: x.t().clone().t(),
            "sliced from a bigger tensor": lambda x: torch.cat([x, x], 1)[:, ::2]}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("program", [_column_from_position, _add_through_row_at_position])
def test_graph_break_passing_a_view_beside_its_base(program, dtype, layout):
    """Dynamo breaks the graph at the int32 position and hands the next graph the view it
    computed eagerly (`stack0`) beside the tensor it views: the backend takes the view
    again inside the graph (as indexing of that tensor, whatever its layout), so the
    write shows through it as in eager (it refused the pair as arguments sharing
    memory)."""
    torch._dynamo.reset()
    compiled = torch.compile(program, backend="outofplace", dynamic=False)
    x = torch.arange(20, dtype=dtype).reshape(4, 5)
    for position in (1, 3, 2):
        pos = torch.tensor(position, dtype=torch.int32)
        eager, ours = _LAYOUTS[layout](x), _LAYOUTS[layout](x)
        expected = program(eager, pos)
        result = compiled(ours, pos)
        torch.testing.assert_close(result, expected, rtol=0, atol=0)
        torch.testing.assert_close(ours, eager, rtol=0, atol=0)
        x = x + 1


def test_graph_with_an_input_no_longer_a_view_of_another():
    """The graph compiled for a view beside its base, called with tensors of their own
    (or another view of the base): the graph as it came runs, matching eager."""
    from outofplace.dynamo import ViewsOfInputs, backend

    def step(x, v):
        x.mul_(2)
        return v + 1

    gm = torch.fx.symbolic_trace(step)
    x = torch.arange(12.).reshape(3, 4)
    runner = backend(gm, [x, x[1]])
    assert isinstance(runner, ViewsOfInputs)
    for make in (lambda x: (x, x[1]), lambda x: (x, x[2]), lambda x: (x, x[1].clone())):
        eager, ours = make(x.clone()), make(x.clone())
        expected = step(*eager)
        result = runner(*ours)
        result = result[0] if isinstance(result, (tuple, list)) else result
        torch.testing.assert_close(result, expected, rtol=0, atol=0)
        torch.testing.assert_close(ours[0], eager[0], rtol=0, atol=0)


class _CacheAtPosition(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 8, 4, dtype=dtype))

    def forward(self, k, pos):
        self.cache[:, pos] = k
        return self.cache.sum(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dynamic", [None, False])
def test_position_as_a_0d_tensor_compiles_once_under_torch_compile(dtype, dynamic,
                                                                   monkeypatch):
    """Dynamo guards a write at a 0-d int64 tensor position on the position's value, for
    every backend, and traces the frame again for each new one into the same graph: its
    program is compiled once, as `outofplace.compile` compiles it once."""
    import outofplace.dynamo

    compiles = []
    compile_program = outofplace.dynamo.compile_program
    monkeypatch.setattr(outofplace.dynamo, "compile_program",
                        lambda gm, args: compiles.append(gm) or compile_program(gm, args))
    monkeypatch.setattr(outofplace.dynamo, "_PROGRAMS", {})  # none from earlier tests
    torch._dynamo.reset()
    model, eager = _CacheAtPosition(dtype), _CacheAtPosition(dtype)
    compiled = torch.compile(model, backend="outofplace", dynamic=dynamic)
    for position in (0, 5, 2, 7, 3):
        k = torch.randn(2, 4, dtype=dtype)
        pos = torch.tensor(position)
        torch.testing.assert_close(compiled(k, pos), eager(k, pos))
        torch.testing.assert_close(model.cache, eager.cache, rtol=0, atol=0)
    assert len(compiles) == 1, f"compiled {len(compiles)} times for 5 positions"


@pytest.mark.parametrize("kind,options", [
    ("RAdam", dict(lr=0.01)), ("ASGD", dict(lr=0.01, t0=1, foreach=False))])
def test_optimizer_branching_on_its_step_is_refused_at_its_line(kind, options):
    """RAdam (`if rho_t > 5`) and ASGD's single-tensor step (`max(1, step - t0)`) decide
    with Python on the step counter's value, which the compiled step could not read at
    run time: refused, naming the step's line, not compiled with this step's branch."""
    model = _mlp(torch.float64)
    opt = getattr(torch.optim, kind)(model.parameters(), **options)
    step = _train(model, opt)
    x, y = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    step(x, y)
    with pytest.raises(outofplace.UnsupportedMutationError) as error:
        outofplace.compile(step, (x, y))
    assert "a value read from a tensor's data decides" in str(error.value)
    assert __file__ in str(error.value)
    # and eager code runs as eager after it: an Adamax step reads its step count with
    # .item() (it failed in _foreach_addcdiv_ when the refusal left torch compiling)
    assert not torch.compiler.is_compiling()
    torch.optim.Adamax(model.parameters(), foreach=True).step()


def _write_through_a_made_view(x, pos):
    t = torch.zeros(2, 3, dtype=x.dtype)
    t.select(-1, 0)[pos] = x[0]  # an int32 position: dynamo breaks the graph here
    c = torch.arange(6, dtype=x.dtype).reshape(2, 3)
    c[:, -1][pos] += 2
    return t * 1, c + x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_write_after_a_graph_break_into_a_view_of_a_tensor_the_graph_made(dtype):
    """Dynamo ends the graph at the int32 position with the tensor it made and its view
    as outputs, then writes into the view: the view must be one of the other output, as
    eager's is (the backend returned two tensors, and the write was lost)."""
    torch._dynamo.reset()
    compiled = torch.compile(_write_through_a_made_view, backend="outofplace",
                             dynamic=False)
    for position in (1, 0):
        x, pos = torch.randn(3, dtype=dtype), torch.tensor(position, dtype=torch.int32)
        torch.testing.assert_close(compiled(x, pos), _write_through_a_made_view(x, pos),
                                   rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_outputs_viewing_another_output_are_its_views(path, dtype):
    """A program returning a tensor it made and views of it returns views, as eager does:
    a write into one output shows in the others."""
    def program(x):
        t = x * 2
        return t, t[1], t.t()[0], t.view(-1)[2:4]

    x = torch.randn(3, 2, dtype=dtype)
    run = outofplace.compile(program, (x,)) if path == "outofplace.compile" else \
        torch.compile(program, backend="outofplace", dynamic=False)
    torch._dynamo.reset()
    ours, eager = run(x), program(x)
    for out in (ours, eager):
        out[1].fill_(7)
        out[2].add_(1)
        out[3].mul_(3)
    for a, e in zip(ours, eager):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    assert ours[1].data_ptr() == ours[0][1].data_ptr()


def _contiguous_of_a_transposed_clone(x, pos):
    t = x.clone()
    t.transpose_(0, 1)
    x[pos] += 1  # an int32 position: dynamo breaks the graph here, t an output
    t.contiguous().relu_()  # eager's contiguous() copies the transposed t
    return t, x.clone()[:, ::2], x.t().clone(memory_format=torch.preserve_format)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_outputs_keep_eager_strides(path, dtype):
    """An output the program makes has eager's strides and storage offset: a transposed
    clone returned contiguous made a later `contiguous()` (after a graph break) the
    tensor itself, which `relu_` then wrote."""
    torch._dynamo.reset()
    x = torch.randn(4, 6, dtype=dtype)
    pos = torch.tensor(2, dtype=torch.int32)
    run = outofplace.compile(_contiguous_of_a_transposed_clone, (x.clone(), pos)) \
        if path == "outofplace.compile" else \
        torch.compile(_contiguous_of_a_transposed_clone, backend="outofplace", dynamic=False)
    for _ in range(2):
        ours, eager = run(x.clone(), pos), _contiguous_of_a_transposed_clone(x.clone(), pos)
        for a, e in zip(ours, eager):
            torch.testing.assert_close(a, e, rtol=0, atol=0)
            assert (a.stride(), a.storage_offset()) == (e.stride(), e.storage_offset())


def _out_into_a_view_of_the_argument(x, w, pos):
    v = x.unsqueeze(-1)
    r = torch.add(w, 1, out=v)  # returns v: a view of x
    v[pos, torch.tensor([2, 0])] = -w[0, :2]  # an int32 position: a graph break first
    return r, x * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_output_of_an_out_op_is_the_view_it_wrote(path, dtype):
    """An `out=` op returns the tensor it writes: returned (or handed to the next graph
    after a graph break), it is the view of the caller's tensor, as in eager, not a copy
    (the write after the graph break was lost)."""
    torch._dynamo.reset()
    def arguments():
        return (torch.zeros(2, 4, dtype=dtype), torch.arange(-4, 4, dtype=dtype).view(2, 4, 1),
                torch.tensor(-2, dtype=torch.int32))
    run = outofplace.compile(_out_into_a_view_of_the_argument, arguments()) \
        if path == "outofplace.compile" else \
        torch.compile(_out_into_a_view_of_the_argument, backend="outofplace", dynamic=False)
    ours, eager = arguments(), arguments()
    out, expected = run(*ours), _out_into_a_view_of_the_argument(*eager)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(ours[0], eager[0], rtol=0, atol=0)
    assert out[0].data_ptr() == ours[0].data_ptr()


def _view_of_a_tensor_written_after_it(i, pos, w):
    c = torch.tensor([[1.0, 0.0]], dtype=w.dtype)
    c.neg_()
    v = c.narrow(-1, 0, 2)
    c[torch.tensor([0]), i] = v[0, None, -2] * 2  # the graph's c is this write's result
    v.view(-1)[pos] = w  # an int32 position: the graph ends with v.view(-1) and c
    return c, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_output_viewing_an_output_written_in_place_is_its_view(path, dtype):
    """A graph returning a view of a tensor it made and, after it, that tensor as an
    in-place op's result: the view is still the tensor's (the write into the view after
    the graph break was lost)."""
    torch._dynamo.reset()
    def arguments():
        return torch.tensor([0]), torch.tensor(1, dtype=torch.int32), \
            torch.tensor(3.0, dtype=dtype)
    run = outofplace.compile(_view_of_a_tensor_written_after_it, arguments()) \
        if path == "outofplace.compile" else \
        torch.compile(_view_of_a_tensor_written_after_it, backend="outofplace", dynamic=False)
    for _ in range(2):
        out, expected = run(*arguments()), _view_of_a_tensor_written_after_it(*arguments())
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        assert out[1].data_ptr() == out[0].data_ptr()


def _copies_one_element_of_itself(x, pos, j):
    x[pos] = x[j]  # 0-d positions: x[j] is a view of one element of x
    x.unsqueeze(1)[pos + 2, ::1] = x[j + 1]
    x[2:5].copy_(x[1])
    x.masked_scatter_(torch.tensor([0, 0, 0, 1, 0, 0]).bool(), x[4:5])
    return x * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_one_element_copied_within_a_tensor(path, dtype):
    """Writing one element of a tensor into it (`x[pos] = x[j]`) is the same in any
    order: compiled on both paths (torch.compile's trace keeps x[j] a view, and the
    write was refused as reading memory it writes)."""
    torch._dynamo.reset()
    def arguments():
        return (torch.arange(6, dtype=dtype), torch.tensor(1),
                torch.tensor(-2, dtype=torch.int32))
    run = outofplace.compile(_copies_one_element_of_itself, arguments()) \
        if path == "outofplace.compile" else \
        torch.compile(_copies_one_element_of_itself, backend="outofplace", dynamic=False)
    ours, eager = arguments(), arguments()
    torch.testing.assert_close(run(*ours), _copies_one_element_of_itself(*eager),
                               rtol=0, atol=0)
    torch.testing.assert_close(ours[0], eager[0], rtol=0, atol=0)



def _detached_clone_read_after_a_graph_break(x):
    t = x.clone()
    r = t.detach().to(x.dtype)  # t itself, as eager gives it
    k = t.to(x.dtype).mean().item()  # a graph break; torch.export returns `t.to(...)` for t
    t.reshape(6).mul_(1 - 0.5 ** (k + 1))
    return r, t


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_output_that_is_another_in_all_but_name_is_its_view(path, dtype):
    """Two outputs that are one tensor (`t`, exported as `t.to(its dtype)`, and
    `t.detach().to(its dtype)`) are returned as one: the write after the graph break shows in
    both (the second was a copy)."""
    torch._dynamo.reset()
    x = torch.arange(-3.0, 3.0, dtype=dtype).view(2, 3)
    program = _detached_clone_read_after_a_graph_break
    run = outofplace.compile(program, (x,)) if path == "outofplace.compile" else \
        torch.compile(program, backend="outofplace", dynamic=False)
    out, expected = run(x), program(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert out[0].data_ptr() == out[1].data_ptr()


def _view_before_a_transpose_in_place(x):
    c = x * 3
    v = c.mT  # taken before c's own layout changes
    c.transpose_(0, 1)
    return v, c


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_view_taken_before_an_in_place_transpose_keeps_its_shape(path, dtype):
    """An output viewing a tensor whose own shape an in-place op changed later
    (`transpose_`) is a view of it as it was: it was taken again of the transposed
    tensor, with the other shape (fuzz 10k run program 4509)."""
    torch._dynamo.reset()
    x = torch.arange(6.0, dtype=dtype).view(6, 1)
    program = _view_before_a_transpose_in_place
    run = outofplace.compile(program, (x,)) if path == "outofplace.compile" else \
        torch.compile(program, backend="outofplace", dynamic=False)
    out, expected = run(x), program(x)
    for a, e in zip(out, expected):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
        steps = [[s for n, s in zip(t.shape, t.stride()) if n > 1] for t in (a, e)]
        assert steps[0] == steps[1]


def _masked_read_returned(x):
    # a mask computed from constants: dynamo knows its values (no graph break), tracing
    # does not (no mask the program spells)
    return x[None, :, :3][~torch.tensor([True]), -4:3, 1].clone()  # eager: shape (0, 2)


def _refusal(program, path, *args) -> outofplace.UnsupportedMutationError:
    """The refusal compiling `program(*args)` on `path` and calling it raised."""
    torch._dynamo.reset()
    try:
        if path == "outofplace.compile":
            outofplace.compile(program, args)(*args)
        else:
            torch.compile(program, backend="outofplace", dynamic=False)(*args)
    except outofplace.UnsupportedMutationError as error:
        return error
    except torch._dynamo.exc.BackendCompilerFailed as error:
        assert isinstance(error.inner_exception, outofplace.UnsupportedMutationError), error
        return error.inner_exception
    raise AssertionError(f"{path} compiled {program.__name__}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_masked_read_returned_is_refused_inside_an_except_block(path, dtype):
    """A read at a bool mask returned has a shape the mask's values decide: refused at its
    line on both paths, also when the caller compiles inside an `except` block (tracing
    took the exception being handled for one its forward raised and let the full-shape
    stand-in out: shape (1, 2), eager's (0, 2); fuzz run programs 1044 and 3754, whose
    spelled masks now compile)."""
    x = torch.arange(20, dtype=dtype).view(5, 4)
    assert _masked_read_returned(x).shape == (0, 2)
    try:
        raise KeyError("handled while compiling")
    except KeyError:
        error = _refusal(_masked_read_returned, path, x)
    assert "the masked values are returned" in str(error)
    line = _masked_read_returned.__code__.co_firstlineno + 3
    assert f"{__file__}:{line}:" in str(error)


def _write_into_an_expansion_after_a_break(x):
    v = x.expand(2, -1)
    o = torch.empty(0, dtype=x.dtype)
    torch.mul(x, 2, out=o)  # resizes o: dynamo breaks the graph, passing v alone
    v[1, 2::2] = -1  # eager writes x[2], x[4]
    return o


def _write_into_an_expansion_beside_its_base(x):
    t = x.clone()
    t.expand(3, -1)[2::2, torch.tensor([False, True, True])] += 2.5  # a break at the mask
    return t


def _write_into_a_column_of_an_expansion(x):
    x.expand(2, -1, -1).select(2, 1)[-1, torch.tensor([True, False, True])] += 2
    return x * 1


def _assert_path_matches_eager(path, program, *args):
    """`program(*args)` compiled on `path` against eager's on copies of the arguments:
    its output and every argument after the call, exactly."""
    expected = [a.clone() for a in args]
    eager = program(*expected)
    result = run_on_path(path, program, tuple(a.clone() for a in args), args)
    torch.testing.assert_close(result, eager, rtol=0, atol=0)
    for got, want in zip(args, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
@pytest.mark.parametrize("program", [_write_into_an_expansion_after_a_break,
                                     _write_into_an_expansion_beside_its_base,
                                     _write_into_a_column_of_an_expansion])
def test_write_into_one_copy_of_an_expansion_matches_eager(program, path, dtype):
    """A write into one index of each dimension an expand broadcasts writes each element
    of the expanded tensor once, in eager: both paths write it there
    (frontend/expanded_positions.py), also where a graph break passes the expansion
    alone (taken from a tensor of the memory it spans, memory.py) or beside the tensor it
    expands (taken from it). Refused at their lines before (fuzz run programs 718, 2049,
    2646, 561, 1081)."""
    x = torch.arange(12, dtype=dtype)
    x = {_write_into_an_expansion_after_a_break: x[:7], _write_into_an_expansion_beside_its_base:
         x[:3], _write_into_a_column_of_an_expansion: x.view(3, 4)}[program]
    _assert_path_matches_eager(path, program, x)


def _slices_from_slices_at_positions(x, pos, j):
    x[:, pos] += x[:, j]  # an int32 position: a graph break, x[:, j] passed as a view
    x[pos - 1, :] = x[j]
    x[pos, 1:][0] = x[j, 1:][1]
    return x * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_slice_written_from_a_slice_at_runtime_positions(path, dtype):
    """A slice at runtime positions written from the slice of the same dimensions at
    others (`x[:, pos] += x[:, j]`) is that slice or shares no element with it: order-free,
    compiled on both paths with eager's values (torch.compile's trace keeps `x[:, j]` a view
    of x, and the write was refused as reading memory it writes; fuzz run programs 4434,
    8286, 8761)."""
    torch._dynamo.reset()
    program = _slices_from_slices_at_positions

    def arguments(pos, j):
        return (torch.arange(12, dtype=dtype).view(3, 4) ** 2,
                torch.tensor(pos), torch.tensor(j, dtype=torch.int32))
    run = outofplace.compile(program, arguments(2, 0)) if path == "outofplace.compile" \
        else torch.compile(program, backend="outofplace", dynamic=False)
    for pos, j in [(2, 0), (1, 1), (2, 1)]:
        ours, eager = arguments(pos, j), arguments(pos, j)
        torch.testing.assert_close(run(*ours), program(*eager), rtol=0, atol=0)
        torch.testing.assert_close(ours[0], eager[0], rtol=0, atol=0)


def _row_from_elements_across_rows(x, pos):
    x[pos, :] = x.view(-1)[1:4]  # the end of row pos and the start of the next
    return x * 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_row_written_from_part_of_itself_is_refused(path, dtype):
    """Where the slice read is no slice of the same dimensions (here it overlaps row pos in
    part), eager's result depends on the order it copies elements in: refused."""
    x = torch.arange(12, dtype=dtype).view(4, 3)
    error = _refusal(_row_from_elements_across_rows, path, x, torch.tensor(0))
    assert "shares memory with the tensor it writes" in str(error), error


def _writes_at_no_index(x):
    x.clamp_(1, 1)
    x.view(-1)[-2, None, None][:1, torch.tensor([False])] = 2.5  # a spelled mask, no true
    x.index_copy_(1, torch.tensor([], dtype=torch.long), torch.ones(1, 0, dtype=x.dtype))
    x.index_put_((torch.tensor([], dtype=torch.long),), torch.tensor(3, dtype=x.dtype),
                 accumulate=True)
    return x * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_writes_at_no_index_write_nothing(path, dtype):
    """Index tensors without elements (the positions of a spelled mask's trues, none)
    write no element: the writes are dropped, as a scatter of no updates made IREE's
    compiler divide by zero (SIGFPE, the whole process)."""
    x = torch.tensor([[2.0, -1.0, 1.0, -2.0, 0.0]], dtype=dtype)
    expected = x.clone()
    eager = _writes_at_no_index(expected)
    result = run_on_path(path, _writes_at_no_index, (x.clone(),), (x,))
    torch.testing.assert_close(result, eager, rtol=0, atol=0)
    torch.testing.assert_close(x, expected, rtol=0, atol=0)


def _masked_values_beside_no_element(x, m, n, w):
    x[m] += w  # eager: valid when m selects none
    y = x[:, n] * w.view(1, 0)  # a new tensor of no element
    x[:, n] = y
    return x * 2, x[m] - w


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_masked_values_paired_with_no_element_match_eager(path, dtype):
    """Values at a runtime mask paired with an operand of no element (`x[m] += w`, w of
    shape [0]), which eager runs only when the mask selects none: the op changes nothing
    in place and makes eager's empty tensor out of place, on both paths (outofplace.compile
    refused it as a shape from values; fuzz slice 0 of make test, programs 572 and 881)."""
    x = torch.arange(12, dtype=dtype).view(3, 4)
    args = (x, torch.zeros(3, 4, dtype=torch.bool), torch.zeros(4, dtype=torch.bool),
            torch.empty(0, dtype=dtype))
    program = _masked_values_beside_no_element
    expected_x = x.clone()
    eager = program(expected_x, *args[1:])
    result = run_on_path(path, program, (x.clone(), *args[1:]), args)
    for a, e in zip(result, eager):
        assert a.shape == e.shape
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    torch.testing.assert_close(x, expected_x, rtol=0, atol=0)


def _masked_values_beside_rows(x, m, w, y, n, e):
    x[:, m] *= w  # w [3, 1]: a value per row, one for every masked column
    y.permute(1, 2, 0)[::3, n, 0:-4] -= e  # e [2, 1, 0]: no element of y selected
    return x + 1, y * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_masked_values_beside_an_operand_of_the_dimensions_before_the_mask(path, dtype):
    """An operand whose dimensions before the one meeting the masked values' count meet
    the dimensions before the mask (`x[:, m] *= w`, w [3, 1]) broadcasts as in eager: it
    was refused unless those were 1 (fuzz run program 881)."""
    x = torch.arange(12, dtype=dtype).view(3, 4)
    m = torch.tensor([True, False, True, True])
    y = torch.arange(36, dtype=dtype).view(3, 4, 3)
    args = (x, m, torch.tensor([[2.0], [-1.0], [0.5]], dtype=dtype), y,
            torch.tensor([False, False, True]), torch.empty(2, 1, 0, dtype=dtype))
    program = _masked_values_beside_rows
    expected_x, expected_y = x.clone(), y.clone()
    eager = program(expected_x, m, args[2], expected_y, *args[4:])
    result = run_on_path(path, program,
                         (x.clone(), m, args[2], y.clone(), *args[4:]), args)
    torch.testing.assert_close(result, eager, rtol=0, atol=0)
    torch.testing.assert_close(x, expected_x, rtol=0, atol=0)
    torch.testing.assert_close(y, expected_y, rtol=0, atol=0)


def _masked_values_beside_one_per_element(x, m, n, w, v, q, u):
    x[m] *= x.flatten() * 2  # as many values as m has elements: eager needs m all true
    x[:, n] += v  # v [2, 3] beside x[:, n], n all true
    x[q] -= u  # the k-th true of q takes u[k]: eager needs as many trues as values
    x[q] = x[q] * u + 1
    return x + w


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_masked_values_beside_one_value_per_true_match_eager(path, dtype):
    """An operand with a value for each true of the mask where it meets the masked
    values' count, which eager pairs in order (only when there are as many): compiled on
    both paths, the k-th value gathered to the k-th true's place; refused by
    outofplace.compile before (fuzz run programs 167, 1964, 2267 of seed 949494)."""
    x = torch.arange(6, dtype=dtype).view(2, 3)
    args = (x, torch.ones(2, 3, dtype=torch.bool), torch.ones(3, dtype=torch.bool),
            torch.tensor(0.5, dtype=dtype), torch.arange(6, dtype=dtype).view(2, 3) - 2,
            torch.tensor([[False, True, False], [False, False, True]]),
            torch.tensor([3.0, -0.5], dtype=dtype))
    program = _masked_values_beside_one_per_element
    expected_x = x.clone()
    eager = program(expected_x, *args[1:])
    result = run_on_path(path, program, (x.clone(), *args[1:]), args)
    torch.testing.assert_close(result, eager, rtol=0, atol=0)
    torch.testing.assert_close(x, expected_x, rtol=0, atol=0)


def _as_strided_of_a_constant_beside_a_repeated_argument(x0, x1):
    c = torch.tensor([[6.0, -6.0], [0.0, -1.0]], dtype=x0.dtype)
    c[:, 1:] = c.as_strided((1,), (1,))
    return c, x0 + x1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_as_strided_of_a_constant_beside_a_repeated_argument(path, dtype):
    """One tensor passed twice (a view of the other, taken from it, so fake values are
    made again): the constant's fake was tracing's, its lift_fresh_copy's storage, and
    torch-mlir's as_strided rewrite read the constant itself, whose get_attr the
    importer then bound twice (AssertionError "Node already has a value"; fuzz run
    program 749 of seed 949494)."""
    x = torch.arange(2, dtype=dtype)
    program = _as_strided_of_a_constant_beside_a_repeated_argument
    eager = program(x, x)
    result = run_on_path(path, program, (x, x), (x, x,))
    for a, e in zip(result, eager):
        torch.testing.assert_close(a, e, rtol=0, atol=0)


def _empty_list_beside_a_runtime_position(x, pos, w):
    x[[], -2, pos] = w  # an empty list indexes as an empty int64 tensor: writes nothing
    x[1, [], pos] += 1
    return x * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_empty_list_index_beside_a_runtime_position(path, dtype):
    """`x[[], -2, pos] = w`: the empty list was made `torch.tensor([])`, a float tensor,
    and the write refused as a position beside a non-index tensor (fuzz run program 2213
    of seed 949494); it writes nothing on both paths."""
    x = torch.arange(24, dtype=dtype).view(2, 3, 4)
    args = (x, torch.tensor(1), torch.tensor(5.0, dtype=dtype))
    expected = x.clone()
    eager = _empty_list_beside_a_runtime_position(expected, *args[1:])
    result = run_on_path(path, _empty_list_beside_a_runtime_position,
                         (x.clone(), *args[1:]), args)
    torch.testing.assert_close(result, eager, rtol=0, atol=0)
    torch.testing.assert_close(x, expected, rtol=0, atol=0)


def _shape_changed_in_place_beside_a_view_taken_before(x):
    c = x * 2
    r = c.squeeze()  # a view of c before the change, of c's shape then
    c.unsqueeze_(-1)
    t = x + 1
    s = t.t()
    t.t_()
    return r, c, s, t


def _assert_laid_out_as_eager(result, eager) -> None:
    """Each output eager's values in eager's shape and strides."""
    for a, e in zip(result, eager):
        assert a.shape == e.shape and a.stride() == e.stride()
        torch.testing.assert_close(a, e, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_output_whose_shape_changed_in_place_after_a_view_of_it(path, dtype):
    """`c.unsqueeze_(-1)` returned beside `c.squeeze()` taken before: the in-place op was
    followed to the tensor it writes, whose view (of the old shape) was the first output,
    and `c` returned as that output, shape (4, 3) where eager's is (4, 3, 1) (fuzz run
    program 3735 of seed 949494); it is that output's view by the op's view twin now."""
    x = torch.arange(12, dtype=dtype).view(4, 3)
    program = _shape_changed_in_place_beside_a_view_taken_before
    eager = program(x.clone())
    result = run_on_path(path, program, (x.clone(),), (x.clone(),))
    _assert_laid_out_as_eager(result, eager)
    result[1].add_(1)  # c's elements are r's, as in eager
    torch.testing.assert_close(result[0], eager[0] + 1, rtol=0, atol=0)


def _slice_of_a_local_updated_from_a_runtime_position(x0, pos3, pos4):
    c2 = torch.zeros_like(x0)
    c2[:, :, 0, -3:1:2, ...] -= x0[1, pos3, :, pos4]  # an int32 position: a graph break
    return c2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_slice_updated_and_stored_back_after_a_graph_break(path, dtype):
    """After the break, dynamo stores `c2[...] -= v`'s result, a view of c2 passed beside
    it, back into the same slice: a copy of elements onto themselves, refused as an
    overlap because a dimension of size 1 had another stride in the view taken again
    (fuzz run program 4877 of seed 949494)."""
    x = torch.tensor([[[[0.0, -2.0]]], [[[1.0, -1.0]]]], dtype=dtype)
    args = (x, torch.tensor(0), torch.tensor(-2, dtype=torch.int32))
    program = _slice_of_a_local_updated_from_a_runtime_position
    eager = program(*args)
    result = run_on_path(path, program, args, args)
    torch.testing.assert_close(result, eager, rtol=0, atol=0)


def _strided_slice_updated_from_a_runtime_position(x1, pos8, pos9):
    t2 = x1.clone()
    c3 = x1.new_full((2, 2), 1)
    t2[pos8, -2:1, :4:2] -= c3[pos9, 0] * 2  # an int32 position: a graph break
    return t2, c3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_strided_slice_stored_back_after_a_graph_break(path, dtype):
    """As above, the slice every other element (`:4:2`, not contiguous), stored back
    at its runtime position: torch's own overlap test gives up on a tensor that is not
    contiguous, and the store was refused as an overlap under torch.compile alone (fuzz
    run program 650 of seed 4404)."""
    x = torch.tensor([[[-4.0, 0.0, 3.0, -2.0]], [[-1.0, 2.0, 1.0, -3.0]]], dtype=dtype)
    for pos in (0, 1, -1):
        args = (x, torch.tensor(pos), torch.tensor(1, dtype=torch.int32))
        program = _strided_slice_updated_from_a_runtime_position
        eager = program(*args)
        result = run_on_path(path, program, args, args)
        torch.testing.assert_close(result, eager, rtol=0, atol=0)


def _updated_by_itself_broadcast(x, w):
    x.unsqueeze(-2).addcmul_(w, x, value=2)  # tensor2 is x, broadcast to [1, n]
    x.view(1, -1).mul_(x)
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_elementwise_op_reading_what_it_writes_broadcast(path, dtype):
    """An elementwise op reading exactly the elements it writes, through a view of
    another shape that broadcasts to it (each element reads itself), has one meaning:
    it was refused as an overlap by outofplace.compile alone (fuzz run program 2978 of
    seed 4404). (x every other element of a buffer: eager's overlap check, which
    raises for a contiguous x, gives up on it.)"""
    base, w = torch.arange(14, dtype=dtype) - 7, torch.tensor([[1.5]], dtype=dtype)
    program = _updated_by_itself_broadcast
    eager = program(base.clone()[::2], w)
    mine = base.clone()
    result = run_on_path(path, program, (base.clone()[::2], w), (mine[::2], w))
    torch.testing.assert_close(result, eager, rtol=0, atol=0)
    torch.testing.assert_close(mine[::2], eager, rtol=0, atol=0)
    torch.testing.assert_close(mine[1::2], base[1::2], rtol=0, atol=0)


def _updated_by_its_own_row_broadcast(x):
    x.add_(x[0])  # each row reads row 0, which the first row's update writes
    return x


@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_elementwise_op_reading_a_part_of_what_it_writes_broadcast_is_refused(path):
    """A broadcast operand that is a part of what the op writes, not each element's own
    (`x.add_(x[0])`: eager's result depends on whether row 0 is written first), stays
    refused on both paths."""
    x = torch.arange(12.0).view(3, 4)[:, ::2]
    refusal = _refusal(_updated_by_its_own_row_broadcast, path, x)
    assert "`other` shares memory with the tensor it writes" in str(refusal)


def _two_views_of_a_local_one_rebound(x0, x1):
    t3 = x0.clone()
    r4 = t3.permute(1, 0)
    t3.transpose_(0, 1)  # t3 is a view of its own data now, as r4 is
    k = x1.float().mean().item()  # a graph break
    t3.mul_(1 - 0.5 ** (k + 1))
    return r4, t3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_outputs_viewing_one_tensor_one_through_an_in_place_view_op(path, dtype):
    """As above, one of the two views taken by `transpose_` (a view op in place): they
    were separate results, and the next graph's `mul_` did not show in `r4` (fuzz run
    program 7204 of seed 4404, a wrong value under torch.compile)."""
    x = torch.arange(12, dtype=dtype).view(4, 3)
    args = (x, torch.ones(2, dtype=dtype))
    program = _two_views_of_a_local_one_rebound
    eager = program(*args)
    result = run_on_path(path, program, args, args)
    _assert_laid_out_as_eager(result, eager)
    result[1].add_(100)  # r4 and t3 share elements, as in eager
    torch.testing.assert_close(result[0], result[1], rtol=0, atol=0)


def _foreach_reading_a_part_of_its_own_element(x, w):
    v = x[0:2].unbind(-1)[1][1:, None, :]
    torch._foreach_addcmul_([x.contiguous(), v.unsqueeze(2)], [v.diagonal(), w],
                            [v.diagonal(), w], value=1)


def _foreach_reading_other_elements(x, y):
    torch._foreach_add_([x, y], [y, x])  # x += y, then y += the new x, one at a time
    return x, y


@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_foreach_op_reading_a_part_of_what_an_element_writes_is_refused(path):
    """A `_foreach_*_` op whose element reads memory it writes through another view (x
    contiguous: `x.contiguous()` is x; the diagonal a part of it) depends on eager's
    order of writes: refused on the per-tensor ops it becomes, as the op alone is (fuzz
    run program 5378 of seed 4404: a wrong value, the list's operands unchecked)."""
    x = torch.arange(32.0).view(4, 4, 2)
    refusal = _refusal(_foreach_reading_a_part_of_its_own_element, path, x,
                       torch.ones(1, 1, 1, 1))
    assert "`tensor1` shares memory with the tensor it writes" in str(refusal)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_foreach_op_reading_another_element_it_writes(path, dtype):
    """Elements of a list op run one after another in eager (on CPU): the second reads
    the first's result, as the per-tensor ops do."""
    x, y = torch.arange(4, dtype=dtype), torch.arange(4, dtype=dtype) * 10
    program = _foreach_reading_other_elements
    eager = program(x.clone(), y.clone())
    mine = (x.clone(), y.clone())
    result = run_on_path(path, program, (x.clone(), y.clone()), mine)
    torch.testing.assert_close(result, eager, rtol=0, atol=0)
    torch.testing.assert_close(mine, eager, rtol=0, atol=0)


def _two_views_of_a_local_before_a_break(x0, pos):
    t2 = x0.clone().t()
    r3 = t2.t()
    t2.reshape(-1, 2, 3)[:, pos, :] -= 1  # a view of t2 here; int32 pos: a graph break
    return r3, t2[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_outputs_viewing_one_tensor_the_program_does_not_return(path, dtype):
    """Before the graph break dynamo returns `t2.reshape(...)` and `r3 = t2.t()`, both
    views of the clone, which it does not return: they were separate results, and the
    next graph's write into the first did not show in the second (fuzz run program 2891
    of seed 949494, a wrong value under torch.compile). They are views of the clone, a
    result of main no output is, now."""
    x = torch.arange(12, dtype=dtype).view(6, 2)
    args = (x, torch.tensor(-1, dtype=torch.int32))
    program = _two_views_of_a_local_before_a_break
    eager = program(*args)
    result = run_on_path(path, program, args, args)
    _assert_laid_out_as_eager(result, eager)
    result[1].add_(100)  # r3 and t2[0] share elements, as in eager
    eager[1].add_(100)
    torch.testing.assert_close(result[0], eager[0], rtol=0, atol=0)


def _expanded_intermediate(x):
    c = x * 2
    return c.expand(2, -1, -1), c.t().expand(3, -1, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_output_expanded_from_a_tensor_the_program_makes(path, dtype):
    """An output eager lays out with elements sharing memory (an expand's stride 0 of an
    intermediate) is laid out so: copy_ into that layout raised "more than one element
    of the written-to tensor refers to a single memory location" on both paths (fuzz run
    program 8937 of seed 5606, after a graph break)."""
    x = torch.randn(3, 4, dtype=dtype)
    eager = _expanded_intermediate(x.clone())
    result = run_on_path(path, _expanded_intermediate, (x.clone(),), (x.clone(),))
    _assert_laid_out_as_eager(result, eager)


class _RowFromTheFirst(torch.nn.Module):
    """The module fuzzer's program 3602 (seed 62000000): a row at a pointer buffer's
    position written from row 0, which Python's setitem passes without its leading one."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("b", torch.tensor([[[-2.0, 1.0, 2.0]], [[-1.0, -3.0, 0.0]]],
                                               dtype=dtype))
        self.register_buffer("ptr", torch.tensor(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.b[self.ptr % 2] = self.b[0]
        self.ptr.add_(1)
        return self.b * x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_row_written_from_a_row_without_its_leading_one(path, dtype):
    """`self.b[self.ptr % 2] = self.b[0]` with b [2, 1, 3]: the values are row 0 as [3]
    (setitem drops their leading one), the row written is row 0 itself or row 1: order-
    free, compiled on both paths with eager's values (was refused on outofplace.compile
    alone as reading memory it writes)."""
    torch._dynamo.reset()
    ours, eager = _RowFromTheFirst(dtype), _RowFromTheFirst(dtype)
    x = torch.arange(3, dtype=dtype) + 1
    run = outofplace.compile(ours, (x,)) if path == "outofplace.compile" \
        else torch.compile(ours, backend="outofplace", dynamic=False)
    for _ in range(3):  # rows 0, 1, 0
        torch.testing.assert_close(run(x), eager(x), rtol=0, atol=0)
        torch.testing.assert_close(ours.b, eager.b, rtol=0, atol=0)
        torch.testing.assert_close(ours.ptr, eager.ptr, rtol=0, atol=0)


class _RowsFromTheFirstOfATranspose(torch.nn.Module):
    """The module fuzzer's program 1543 (seed 64000000): every row of a parameter's
    transpose written from its row 0, which is written onto itself."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(12, dtype=dtype).view(4, 3) - 5,
                                    requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.w.t()
        v.copy_(v[0])
        self.w.add_(x)
        return v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_copy_writing_its_shared_elements_onto_themselves(path, dtype):
    """`v.copy_(v[0])`: the source shares row 0 with what it writes, and row 0 is written
    from its own place, so the rows read the old row 0 in any order: compiled on both
    paths with eager's values (was refused on both as reading memory it writes)."""
    torch._dynamo.reset()
    ours, eager = _RowsFromTheFirstOfATranspose(dtype), _RowsFromTheFirstOfATranspose(dtype)
    x = torch.arange(3, dtype=dtype) / 4
    run = outofplace.compile(ours, (x,)) if path == "outofplace.compile" \
        else torch.compile(ours, backend="outofplace", dynamic=False)
    for _ in range(3):
        torch.testing.assert_close(run(x), eager(x), rtol=0, atol=0)
        torch.testing.assert_close(ours.w, eager.w, rtol=0, atol=0)


def _copy_shifted_by_a_row(x):
    x[1:].copy_(x[:-1])  # row 1 is written and read: eager copies row 0 down the rows


@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_copy_whose_moved_elements_are_read_is_refused(path):
    """A copy writing, from another place, an element its source reads stays refused, at
    its line, on both paths."""
    error = _refusal(_copy_shifted_by_a_row, path, torch.randn(4, 3))
    assert "its operand `src` shares memory with the tensor it writes" in str(error)
    line = _copy_shifted_by_a_row.__code__.co_firstlineno + 1
    assert f"{__file__}:{line}:" in str(error)


_LINEAR = {}  # the module test_out_resized_in_a_program_with_parameters reads


def _out_resized_beside_a_layer(x):
    o = torch.empty(0, dtype=x.dtype)
    torch.mul(x, 2, out=o)  # resized from [0]: a fresh tensor of the result's shape
    return o + _LINEAR["layer"](x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_out_resized_in_a_program_with_parameters(path, dtype):
    """An `out=` tensor the program makes empty and the op resizes, in a program whose
    gradients may be taken (a layer's parameters): torch.export's trace reads it through
    a `detach` of its own, and the resize was refused as a view's; it is the fresh
    tensor it is in eager."""
    torch.manual_seed(0)
    _LINEAR["layer"] = torch.nn.Linear(7, 7).to(dtype)
    x = torch.randn(7, dtype=dtype)
    result = run_on_path(path, _out_resized_beside_a_layer, (x,), (x,))
    _assert_close(result, _out_resized_beside_a_layer(x), "result")


def _mask_beside_one_element_indices(x, y, m, n, v, w):
    x[m, [2]] = v  # the trues' positions broadcast with [2]
    x.index_put_((m, torch.tensor([-1])), torch.tensor(1.5, dtype=x.dtype), accumulate=True)
    y[n, :, [1]] = w  # apart: the trues' dimension first in the values
    y.index_put_((n, torch.tensor(-1)), w[:, :1] * 2, accumulate=True)  # a 0-d index
    return x * 2, y + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_mask_beside_index_tensors_of_one_element_matches_eager(path, dtype):
    """A runtime bool mask beside index tensors of one element each (`x[m, [2]] = v`),
    whose positions broadcast with the trues': one mask over the dimensions they index,
    on both paths. Refused before; under torch.compile, dynamo's graph break at a
    `torch.tensor` mask made a constant mask (compiled by outofplace.compile) such a
    runtime one (fuzz program 95300041)."""
    x = torch.arange(20, dtype=dtype).view(4, 5)
    y = torch.arange(60, dtype=dtype).view(4, 3, 5)
    m = torch.tensor([True, False, True, True])
    n = torch.tensor([False, True, False, True])
    _assert_path_matches_eager(path, _mask_beside_one_element_indices, x, y, m, n,
                               torch.tensor([7.0, -1.0, 0.5], dtype=dtype),
                               torch.arange(6, dtype=dtype).view(2, 3) - 2)


def _spelled_mask_beside_an_index(x0):
    x0[torch.tensor([False, False, False, True]), [2]] |= True
    return x0.clone()


@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_spelled_mask_beside_an_index_read_and_written(path):
    """(Fuzz program 95300041.) A mask the program spells, read and written beside an
    index: outofplace.compile indexes at its trues' positions; dynamo breaks the graph at
    the read and hands the write's graph the mask as an input."""
    x = torch.tensor([[True, False, True, True, True], [False, False, True, False, True],
                      [False, True, False, False, True], [True, False, False, False, True]])
    _assert_path_matches_eager(path, _spelled_mask_beside_an_index, x)


def _two_masks_in_one_index(x, y, z, m, n, k, j, v):
    x[m, n] = v  # the k-th true of m with the k-th of n
    x[j, n] = -1.0  # j has one true: paired with each of n's
    y[k.view(2, 2), m[:3]] = 7.0  # a 2-d mask, then a 1-d one
    z[m, :, n] = v[:, None] * 2  # apart: the pairs' dimension first in the values
    return x * 1, y + 0, z - 0


def _spelled_masks_read_and_written(c, w):
    c[torch.tensor([True, False, True, False]),
      torch.tensor([False, True, True, False])] += w
    return c.clone()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_two_masks_in_one_index_match_eager(path, dtype):
    """Two runtime bool masks in one index (`x[m, n] = v`), the k-th true of one paired
    with the k-th of the other (or each with the other's only true): one mask over the
    dimensions they index, on both paths, warned (a pairing eager refuses is made up to
    the lesser count). Refused before; under torch.compile, dynamo's graph break at a
    read of two masks the program spells made them runtime ones (fuzz program
    96100251)."""
    x = torch.arange(20, dtype=dtype).view(4, 5)
    y = torch.arange(24, dtype=dtype).view(2, 2, 3, 2)
    z = torch.arange(60, dtype=dtype).view(4, 3, 5)
    m = torch.tensor([True, False, True, True])
    n = torch.tensor([False, True, True, False, True])
    k = torch.tensor([True, False, False, True])
    j = torch.tensor([False, False, True, False])
    with pytest.warns(outofplace.OutOfBoundsPolicyWarning, match="two bool masks"):
        _assert_path_matches_eager(path, _two_masks_in_one_index, x, y, z, m, n, k, j,
                                   torch.tensor([0.5, -2.0, 3.0], dtype=dtype))
    # (outofplace.compile: torch.export folds the masks it spells into their trues')
    with pytest.warns(outofplace.OutOfBoundsPolicyWarning, match="two bool masks") \
            if path == "torch.compile" else warnings.catch_warnings():
        _assert_path_matches_eager(path, _spelled_masks_read_and_written,
                                   torch.arange(16, dtype=dtype).view(4, 4),
                                   torch.tensor([1.5, -1.0], dtype=dtype))


def _two_masks_written(x, m, n):
    x[m, n] = 2.5
    return x + 0


@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_two_masks_eager_cannot_pair_raise_when_checked(path):
    """Masks whose counts of trues differ, neither one: eager raises IndexError, and so
    does `check_bounds=True` before the call writes anything."""
    x = torch.zeros(3, 4)
    m = torch.tensor([True, False, True])
    n = torch.tensor([True, True, True, False])
    paired = torch.tensor([True, False, False, True])
    with pytest.raises(IndexError):
        _two_masks_written(x.clone(), m, n)
    torch._dynamo.reset()
    compiled = outofplace.compile(_two_masks_written, (x, m, paired),
                                  check_bounds=True) if path == "outofplace.compile" else \
        torch.compile(_two_masks_written, backend="outofplace", dynamic=False,
                      options={"check_bounds": True})
    try:
        with pytest.raises(IndexError, match="two bool masks of aten.index_put"):
            compiled(x, m, n)
        assert not x.any()  # nothing written
        y = x.clone()
        torch.testing.assert_close(compiled(x, m, paired), _two_masks_written(y, m, paired))
        torch.testing.assert_close(x, y)
    finally:
        torch._dynamo.reset()


def _masked_values_beside_one_element_indices(x, y, m):
    x[m, [2]] += 1.5  # adjacent: the trues' dimension where the two were
    y[m, :, [-1]] *= 2  # apart, the mask first: the trues' dimension first
    y[m, torch.tensor([0])] -= 1.0  # a one-element tensor
    return x * 1, y + 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_masked_values_beside_one_element_indices_match_eager(path, dtype):
    """A read at a runtime mask beside indices of one element (`x[m, [2]] += 1.5`),
    stored back at the same key: the indices select first where that takes eager's
    elements in eager's order. outofplace.compile refused the read (a bool mask beside
    other index tensors), which torch.compile runs eagerly at a graph break."""
    x = torch.arange(20, dtype=dtype).view(4, 5)
    y = torch.arange(60, dtype=dtype).view(4, 3, 5)
    _assert_path_matches_eager(path, _masked_values_beside_one_element_indices, x, y,
                               torch.tensor([True, False, True, True]))
