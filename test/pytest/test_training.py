"""Training against eager: optimizer steps (loop, foreach and fused forms), whole training
steps with gradients, and torch.compile's backend used for training.

Every test runs the same steps eagerly on a deep copy and compares parameters, gradients
and optimizer state after each step.
"""

import copy

import pytest
import torch

import outofplace
from differential import assert_same

STEPS = 3


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 5)
        self.fc2 = torch.nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


class OptimizerStep(torch.nn.Module):
    """A module whose forward is `opt.step()` on its model's parameters."""

    def __init__(self, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        super().__init__()
        self.model, self.opt = model, opt

    def forward(self) -> None:
        self.opt.step()


def _forms(kind: str) -> list[dict]:
    forms = [dict(foreach=False), dict(foreach=True)]
    if kind in ("SGD", "Adam", "AdamW", "Adagrad"):
        forms.append(dict(fused=True))
    if kind in ("Adam", "AdamW"):  # on CPU only the fused step is capturable
        forms.append(dict(fused=True, capturable=True))
    return forms


_OPTIONS = {"SGD": [dict(lr=0.1, momentum=0.9),
                    dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                         maximize=True),
                    dict(lr=0.1, momentum=0.9, dampening=0.3)],
            "Adam": [dict(lr=0.01), dict(lr=0.01, amsgrad=True, weight_decay=0.1,
                                         maximize=True)],
            "AdamW": [dict(lr=0.01), dict(lr=0.01, amsgrad=True, weight_decay=0.1)],
            "RMSprop": [dict(lr=0.01), dict(lr=0.01, momentum=0.5, centered=True,
                                            weight_decay=0.1)],
            "Adagrad": [dict(lr=0.1), dict(lr=0.1, lr_decay=0.01, weight_decay=0.1)],
            "NAdam": [dict(lr=0.01, weight_decay=0.1)],
            "Adamax": [dict(lr=0.01, weight_decay=0.1)],
            "Adadelta": [dict(lr=0.5, weight_decay=0.1)],
            # (its loop form decides with Python on the step counter's value: refused)
            "ASGD": [dict(lr=0.01, foreach=True)]}

# amsgrad's loop form writes `torch.maximum(a, b, out=a)`: out= writes are refused until
# the frontend rewrites them (issue 16); its foreach and fused forms are tested.
CASES = [pytest.param(kind, {**options, **form},
                      id=f"{kind}-{'-'.join(f'{k}={v}' for k, v in {**options, **form}.items())}")
         for kind in _OPTIONS for options in _OPTIONS[kind] for form in _forms(kind)
         if not (options.get("amsgrad") and form == dict(foreach=False))
         and form.get("foreach") == options.get("foreach", form.get("foreach"))]
# Through torch.compile: every form of an optimizer's first options, the first form of
# the others
_FORM = ("foreach", "fused", "capturable")
PATHS = [pytest.param(*case.values, "compile", id=f"{case.id}-compile") for case in CASES]
for kind in _OPTIONS:
    for number, options in enumerate(_OPTIONS[kind]):
        cases = [c for c in CASES if c.values[0] == kind and
                 {k: v for k, v in c.values[1].items() if k not in _FORM} ==
                 {k: v for k, v in options.items() if k not in _FORM}]
        PATHS += [pytest.param(*c.values, "torch.compile", id=f"{c.id}-torch.compile")
                  for c in (cases if number == 0 else cases[:1])]


def _set_grads(*models: torch.nn.Module) -> None:
    grads = [torch.randn_like(p) for p in models[0].parameters()]
    for model in models:
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()


def _assert_state_matches(actual: torch.optim.Optimizer, expected: torch.optim.Optimizer,
                          what: str) -> None:
    assert len(actual.state) == len(expected.state)
    for (_, a), (_, e) in zip(actual.state.items(), expected.state.items()):
        assert a.keys() == e.keys()
        for key in e:
            assert_same(a[key], e[key], f"{what} state '{key}'")


def _assert_params_match(actual: torch.nn.Module, expected: torch.nn.Module,
                         what: str) -> None:
    for (name, a), e in zip(actual.named_parameters(), expected.parameters()):
        assert_same(a.detach(), e.detach(), f"{what} '{name}'")
        if e.grad is None:
            assert a.grad is None, f"{what} '{name}.grad' is set, eager's is None"
        else:
            assert_same(a.grad, e.grad, f"{what} '{name}.grad'")


@pytest.mark.parametrize("kind,options,path", PATHS)
def test_optimizer_step_matches_eager(kind, options, path):
    """Each optimizer's step, in each of its forms, through outofplace.compile, and each
    form of its first options through torch.compile. (Under torch.compile the step is
    dynamo's trace of it: ASGD's foreach step is its capturable form there,
    `_foreach_maximum_` of a number included.)"""
    torch.manual_seed(0)
    model = Net()
    opt = getattr(torch.optim, kind)(model.parameters(), **options)
    _set_grads(model)
    opt.step()  # the first step creates the state the compiled step updates
    step = OptimizerStep(model, opt)
    eager = copy.deepcopy(step)
    if path == "torch.compile":
        torch._dynamo.reset()
        compiled = torch.compile(step, backend="outofplace")
    else:
        compiled = outofplace.compile(step, ())
        written = {compiled.input_names[i] for i in compiled.io_map}
        params = {f"model.{n}" for n, _ in model.named_parameters()}
        assert params <= written, "every parameter is an aliased result"
        state_names = {name for name in written if name.startswith("opt.state.")}
        expected = {f"opt.state.model.{n}.{key}" for n, p in model.named_parameters()
                    for key, value in opt.state[p].items()
                    if isinstance(value, torch.Tensor) and key != "step"
                    or kind != "SGD" and key == "step"}
        assert state_names == expected
    for i in range(STEPS):
        _set_grads(step.model, eager.model)
        compiled()
        eager()
        _assert_params_match(step.model, eager.model, f"step {i}")
        _assert_state_matches(step.opt, eager.opt, f"step {i}")


def test_optimizer_of_parameters_no_module_registers():
    """The optimizer holds tensors that are no module's parameters: they, their gradients
    and the state are found through the optimizer and written back in place."""
    torch.manual_seed(0)
    weights = [torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)]
    opt = torch.optim.Adam(weights, lr=0.01)
    for w in weights:
        w.grad = torch.randn_like(w)
    opt.step()

    class Holder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.opt = opt

        def forward(self) -> None:
            self.opt.step()

    holder = Holder()
    compiled = outofplace.compile(holder, ())
    assert {compiled.input_names[i] for i in compiled.io_map} == {
        "opt.param_groups.0.params.0", "opt.param_groups.0.params.1",
        *(f"opt.state.opt.param_groups.0.params.{i}.{key}" for i in range(2)
          for key in ("step", "exp_avg", "exp_avg_sq"))}
    eager_weights = [w.detach().clone().requires_grad_() for w in weights]
    eager_opt = torch.optim.Adam(eager_weights, lr=0.01)
    eager_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    for i in range(STEPS):
        grads = [torch.randn_like(w) for w in weights]
        for w, e, g in zip(weights, eager_weights, grads):
            w.grad, e.grad = g.clone(), g.clone()
        compiled()
        eager_opt.step()
        for w, e in zip(weights, eager_weights):
            assert_same(w.detach(), e.detach(), f"step {i} weight")
        _assert_state_matches(opt, eager_opt, f"step {i}")


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("kind", ["AdamW", "SGD"])
def test_foreach_step_of_a_function_reads_each_parameter_once(kind, dtype, path):
    """A foreach optimizer's step as a plain function (the optimizer a global): tracing
    meets each parameter as two tensor objects (AdamW's weight decay and its update, two
    constants of one memory), which are one argument, written in place. (The default
    dtype is the model's: under torch.compile the step counters, of the default dtype,
    make AdamW's bias corrections, docs/training.md.)"""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        _foreach_step_of_a_function(kind, dtype, path)
    finally:
        torch.set_default_dtype(previous)


def _foreach_step_of_a_function(kind: str, dtype: torch.dtype, path: str) -> None:
    torch.manual_seed(0)
    options = dict(lr=0.01, foreach=True, weight_decay=0.1)
    if kind == "SGD":
        options["momentum"] = 0.9
    model = Net().to(dtype)
    opt = getattr(torch.optim, kind)(model.parameters(), **options)
    eager_model = copy.deepcopy(model)
    eager_opt = getattr(torch.optim, kind)(eager_model.parameters(), **options)
    _set_grads(model, eager_model)
    opt.step()
    eager_opt.step()

    def step() -> None:
        opt.step()

    compiled = outofplace.compile(step, ()) if path == "compile" else \
        torch.compile(step, backend="outofplace")
    for i in range(STEPS):
        _set_grads(model, eager_model)
        compiled()
        eager_opt.step()
        _assert_params_match(model, eager_model, f"step {i}")
        _assert_state_matches(opt, eager_opt, f"step {i}")


def test_ema_with_foreach_lerp():
    """An exponential moving average of a model's weights with torch._foreach_lerp_."""
    torch.manual_seed(0)
    model, average = Net(), Net()

    def ema(decay: torch.Tensor) -> None:
        with torch.no_grad():
            torch._foreach_lerp_(list(average.parameters()), list(model.parameters()),
                                 0.1)
            torch._foreach_mul_(list(average.parameters()), decay)

    eager_average = copy.deepcopy(average)
    compiled = outofplace.compile(ema, (torch.tensor(0.99),))
    assert {compiled.input_names[i] for i in compiled.io_map} == {
        f"average.{n}" for n, _ in average.named_parameters()}
    for i in range(STEPS):
        compiled(torch.tensor(0.99))
        with torch.no_grad():
            for a, m in zip(eager_average.parameters(), model.parameters()):
                a.lerp_(m, 0.1).mul_(0.99)
        for a, e in zip(average.parameters(), eager_average.parameters()):
            assert_same(a.detach(), e.detach(), f"step {i}")


def test_step_counter_read_with_item_stays_a_tensor():
    """`.item()` of a 0-d state tensor that feeds arithmetic is read at every call."""
    weight = torch.ones(4)
    count = torch.tensor(1.0)

    def step(grad: torch.Tensor) -> None:
        count.add_(1)
        scale = 0.5 ** count.item()
        weight.sub_(grad * (1 - scale))

    compiled = outofplace.compile(step, (torch.ones(4),))
    assert {compiled.input_names[i] for i in compiled.io_map} == {"count", "weight"}
    expected_weight, expected_count = weight.clone(), count.clone()
    for i in range(STEPS):
        grad = torch.randn(4)
        compiled(grad)
        expected_count += 1
        expected_weight -= grad * (1 - 0.5 ** expected_count.item())
        assert_same(count, expected_count, f"step {i} count")
        assert_same(weight, expected_weight, f"step {i} weight")


def test_item_as_a_python_number_is_refused():
    weight = torch.ones(4)
    count = torch.tensor(3)

    def step() -> None:
        weight.sub_(torch.full((4,), count.item()))

    with pytest.raises(outofplace.UnsupportedMutationError, match="item"):
        outofplace.compile(step, ())


def test_first_step_creating_state_is_refused():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _set_grads(model)
    with pytest.raises(outofplace.UnsupportedMutationError, match="first step"):
        outofplace.compile(OptimizerStep(model, opt), ())
    assert not opt.state, "compiling leaves the optimizer as it was"
