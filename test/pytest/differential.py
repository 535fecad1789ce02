"""Differential testing: a program compiled by outofplace against eager PyTorch.

`assert_matches_eager(f, *args, **kwargs)` runs `f` eagerly and compiled, each on its own
clones of the arguments, and checks that both give the same outputs and leave every input
tensor (and, for an nn.Module, every buffer and parameter) with the same final value.
"""

from __future__ import annotations

import contextlib
import copy
import os
import zlib
from typing import Any

# Eight XLA:CPU devices for the sharded tests (test_sharding.py) and the "mesh" engine
# below; read once, when jax starts its backend, so it is set before anything imports
# jax. Programs without a mesh run on the first device as before.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()

import pytest
import torch
import torch.utils._pytree as pytree

import outofplace


def _clone(tree: Any) -> Any:
    """A deep copy of the tensor leaves of a pytree, in their layout: each storage is
    copied once, and every leaf viewing it becomes the same view of the copy (an input
    at a storage offset, strided, or sharing a buffer with another stays so); other
    leaves are shared."""
    storages: dict[int, torch.UntypedStorage] = {}

    def clone(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        v = v.detach()
        key = v.untyped_storage().data_ptr()
        if key not in storages:
            storages[key] = v.untyped_storage().clone()
        return torch.empty(0, dtype=v.dtype, device=v.device).set_(
            storages[key], v.storage_offset(), v.shape, v.stride())

    return pytree.tree_map(clone, tree)


def whole_storage(t: torch.Tensor) -> torch.Tensor:
    """Every element of t's storage, those around and between t's own too."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage())


# IREE rounds a fused chain of bfloat16 ops once, in float32, where eager rounds after each
# op, and computes tan, erf, ... with its own polynomials: its float results get one
# bfloat16 ulp at magnitude 1, and 1e-5 relative for float32.
IREE_TOLERANCE = {torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
                  torch.float32: {"rtol": 1e-5, "atol": 1e-5}}


def assert_same(actual: Any, expected: Any, what: str, engine: str = "") -> None:
    """Tensors: exact dtype and shape, values close (NaNs equal), within IREE_TOLERANCE
    for `engine` "iree"; others: equal."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), \
            f"{what}: expected a tensor, got {type(actual).__name__}"
        assert actual.dtype == expected.dtype, \
            f"{what}: dtype {actual.dtype}, eager has {expected.dtype}"
        assert tuple(actual.shape) == tuple(expected.shape), \
            f"{what}: shape {tuple(actual.shape)}, eager has {tuple(expected.shape)}"
        tolerance = IREE_TOLERANCE.get(expected.dtype, {}) if engine == "iree" else {}
        torch.testing.assert_close(actual, expected, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}", **tolerance)
    else:
        assert actual == expected, f"{what}: {actual!r}, eager has {expected!r}"


def assert_same_tree(actual: Any, expected: Any, what: str, engine: str = "") -> None:
    actual_leaves = pytree.tree_leaves(actual)
    expected_leaves = pytree.tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves), \
        f"{what}: {len(actual_leaves)} leaves, eager has {len(expected_leaves)}"
    for i, (a, e) in enumerate(zip(actual_leaves, expected_leaves)):
        assert_same(a, e, f"{what} leaf {i}", engine)


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def squared_mean_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
    """A training step of `model`: gradients cleared, a squared-mean loss of its output,
    backward, `optimizer`'s step; it returns the loss."""
    def step(x: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step


def assert_sgd_steps_match_eager(model: torch.nn.Module, x: torch.Tensor,
                                 compile: Any, tolerance: dict) -> None:
    """`squared_mean_step` of `model` with SGD and momentum, compiled by
    `compile(step, (x,))` after one eager step (which makes the optimizer's state), against
    the same on a copy run eagerly: the loss of three steps and the parameters after them,
    within `tolerance` (`torch.testing.assert_close`'s rtol and atol)."""
    import copy

    eager_model = copy.deepcopy(model)

    def step_of(m: torch.nn.Module) -> Any:
        return squared_mean_step(m, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
    eager, step = step_of(eager_model), step_of(model)
    eager(x), step(x)  # (the optimizer's state made eagerly, by its first step)
    compiled = compile(step, (x,))
    for _ in range(3):
        torch.testing.assert_close(compiled(x), eager(x), **tolerance)
    for got, expected in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(got, expected, **tolerance)


def assert_module_state_matches(compiled_module: torch.nn.Module,
                                eager_module: torch.nn.Module, what: str = "state",
                                engine: str = "") -> None:
    """Every parameter and buffer of the compiled run's module equals eager's."""
    compiled_state, eager_state = _state(compiled_module), _state(eager_module)
    assert compiled_state.keys() == eager_state.keys()
    for name, expected in eager_state.items():
        assert_same(compiled_state[name].detach(), expected.detach(), f"{what} '{name}'",
                    engine)


@contextlib.contextmanager
def engine_failing_after_taking_buffers(compiled: outofplace.Compiled):
    """Within the block, `compiled`'s XLA executable fails after taking the buffer of its
    first argument (deleted, as a donation into a failed execution leaves it)."""
    executable = compiled._xla
    loaded = executable.executable

    class Failing:
        def execute_sharded(self, arrays):
            arrays[0].delete()
            raise RuntimeError("injected")
    executable.executable = Failing()
    try:
        yield
    finally:
        executable.executable = loaded


from outofplace.backends import iree  # noqa: E402

ENGINES = ["interpreter"] + ["xla"] * outofplace.xla.available() + \
    ["iree"] * iree.available()
if os.environ.get("OUTOFPLACE_TEST_ENGINES"):  # a subset, e.g. "interpreter,xla"
    # asked for only: "mesh", the program compiled again on a mesh (`on_a_mesh`);
    # "dynamo", the program through torch.compile(backend="outofplace") (`by_dynamo`)
    ENGINES = [e for e in os.environ["OUTOFPLACE_TEST_ENGINES"].split(",")
               if e in ENGINES or (e in ("mesh", "dynamo") and "xla" in ENGINES)]


# IREE compiles a small program in about 0.5 s (its codegen of each dispatch), most of a
# differential check's time: `make test` runs it on a quarter of the programs, those
# whose StableHLO hashes to 1 modulo 4 (the same ones in every run; half of them took a
# quarter of test_views.py's time); test_iree.py runs it on all of its own, and
# OUTOFPLACE_TEST_IREE=all on every program.
IREE_ON_ALL = os.environ.get("OUTOFPLACE_TEST_IREE") == "all"


def engines_for(compiled: outofplace.Compiled) -> list[str]:
    """ENGINES for `compiled`: IREE on a quarter of the programs unless IREE_ON_ALL."""
    if IREE_ON_ALL or "iree" not in ENGINES or \
            zlib.crc32(compiled.stablehlo.encode()) % 4 == 1:
        return ENGINES
    return [e for e in ENGINES if e != "iree"]


def by_dynamo(f: Any, eager_f: Any, args: tuple, kwargs: dict) -> None:
    """The other path: `f` through `torch.compile(backend="outofplace", dynamic=False)`,
    called twice, each call against eager on copies of the arguments. A program
    `outofplace.compile` compiled must compile there too: a refusal fails the check."""
    import torch._dynamo

    torch._dynamo.reset()
    run = torch.compile(copy.deepcopy(f) if isinstance(f, torch.nn.Module) else f,
                        backend="outofplace", dynamic=False)
    for call in ("first", "second"):
        compiled_args, compiled_kwargs = _clone((args, kwargs))
        eager_args, eager_kwargs = _clone((args, kwargs))
        try:
            actual = run(*compiled_args, **compiled_kwargs)
        except outofplace.UnsupportedMutationError as error:
            raise AssertionError("torch.compile(backend='outofplace') refused a program "
                                 f"outofplace.compile compiled: {error}") from error
        expected = eager_f(*eager_args, **eager_kwargs)
        _assert_call_matches(actual, expected, (compiled_args, compiled_kwargs),
                             (eager_args, eager_kwargs), f"[dynamo, {call} call]", "xla")
        if isinstance(f, torch.nn.Module):
            assert_module_state_matches(run._orig_mod, eager_f, f"[dynamo, {call} call] "
                                        "state", "xla")


def on_a_mesh(f: Any, args: tuple, kwargs: dict,
              compiled: outofplace.Compiled) -> outofplace.Compiled:
    """`f` compiled on a mesh of 2 XLA:CPU devices ({"x": 2}) or 4 ({"x": 2, "y": 2}),
    each argument it writes (and, for some programs, each it reads) split along its
    first even dimension over x, and over y along its next even one (or both axes on
    the first, when it divides by 4); the choices are drawn from the program's text, the
    same in every process."""
    choice = zlib.crc32(compiled.stablehlo.encode())
    mesh = {"x": 2} if choice % 2 else {"x": 2, "y": 2}
    shardings = {}
    for i, name in enumerate(compiled.input_names):
        if i not in compiled.io_map and not choice & 2:
            continue
        shape = compiled.input_types[i][0]
        even = [d for d, n in enumerate(shape) if isinstance(n, int) and n and n % 2 == 0]
        if not even:
            continue
        spec: list[Any] = [None] * len(shape)
        spec[even[0]] = "x"
        if "y" in mesh and len(even) > 1:
            spec[even[1]] = "y"
        elif "y" in mesh and shape[even[0]] % 4 == 0:
            spec[even[0]] = ("x", "y")
        shardings[name] = tuple(spec)
    args, kwargs = _clone((args, kwargs))
    return outofplace.compile(f, list(args), kwargs, mesh=mesh, shardings=shardings)


def assert_matches_eager(f: Any, *args: Any, **kwargs: Any) -> outofplace.Compiled:
    """Compiles `f(*args, **kwargs)` and checks compiled calls against eager calls.

    The compiled program runs on every engine (the reference interpreter, XLA:CPU when
    jax is installed, IREE when the iree extra is), each time from the same starting state. Outputs are compared leaf
    by leaf, then every input tensor after the call (so mutated inputs must end with
    eager's values). When `f` is an nn.Module, the module itself is compiled and called,
    and its buffers and parameters afterwards are compared against a deepcopy of it that
    ran eagerly. Returns the Compiled program.
    """
    is_module = isinstance(f, torch.nn.Module)
    pristine = copy.deepcopy(f) if is_module else None
    before = {n: t.detach().clone() for n, t in _state(f).items()} if is_module else {}

    compile_args, compile_kwargs = _clone((args, kwargs))
    compiled = outofplace.compile(f, list(compile_args), compile_kwargs)
    if is_module:  # compiling must not run the program on the module's own state
        for name, value in _state(f).items():
            assert_same(value.detach(), before[name], f"'{name}' after compile")

    for engine in engines_for(compiled):
        if is_module:  # every engine starts from the module's state before any call
            with torch.no_grad():
                for name, value in _state(f).items():
                    value.copy_(before[name])
        eager_f = copy.deepcopy(pristine) if is_module else f
        program = compiled
        if engine == "dynamo":
            by_dynamo(pristine if is_module else f, eager_f, args, kwargs)
            continue
        if engine == "mesh":
            program = on_a_mesh(f, args, kwargs, compiled)
            if is_module:  # compiling again traced it: the module's state as before
                with torch.no_grad():
                    for name, value in _state(f).items():
                        value.copy_(before[name])
        assert_call_matches_eager(program, eager_f, args, kwargs, engine)
        if is_module:
            assert_module_state_matches(f, eager_f, f"[{engine}] state", engine)
    return compiled


def assert_call_matches_eager(compiled: outofplace.Compiled, f: Any, args: tuple,
                              kwargs: dict, engine: str) -> None:
    """One call of `compiled` on `engine` against `f`, each on its own copy of the
    arguments (in their layout): outputs, inputs after the call, and their whole
    storages (nothing written around or between an input's elements)."""
    eager_args, eager_kwargs = _clone((args, kwargs))
    compiled_args, compiled_kwargs = _clone((args, kwargs))
    expected = f(*eager_args, **eager_kwargs)
    # a mesh's program runs on XLA:CPU's devices (a mesh takes every call there)
    actual = compiled.run(compiled_args, compiled_kwargs,
                          engine="xla" if engine == "mesh" else engine)
    _assert_call_matches(actual, expected, (compiled_args, compiled_kwargs),
                         (eager_args, eager_kwargs), f"[{engine}]", engine)
    if engine in ("xla", "mesh") and compiled.engine in ("auto", "xla"):
        # Again on the same tensors, their values reset to the arguments' (so that
        # rounding does not compound), through `compiled(...)`: after a checked call on
        # XLA this is the planned call (backends/planned_call.cpp, sharded_call.cpp);
        # the first call's outputs must stay eager's (views of inputs change with them,
        # as in eager). The reset is a write torch counts, as a caller's would be: a
        # mesh keeps a written tensor's state on the devices until it changes.
        for argument, compiled_arg, eager_arg in zip(*map(pytree.tree_leaves, (
                (args, kwargs), (compiled_args, compiled_kwargs), (eager_args, eager_kwargs)))):
            if isinstance(argument, torch.Tensor):
                compiled_arg.untyped_storage().copy_(argument.untyped_storage())
                eager_arg.untyped_storage().copy_(argument.untyped_storage())
                if not compiled_arg.is_inference():
                    torch.autograd.graph.increment_version(compiled_arg)
        expected_again = f(*eager_args, **eager_kwargs)
        actual_again = compiled(*compiled_args, **compiled_kwargs)
        _assert_call_matches(actual_again, expected_again, (compiled_args, compiled_kwargs),
                             (eager_args, eager_kwargs), f"[{engine}, second call]", engine)
        assert_same_tree(actual, expected, f"[{engine}] first call's output after the "
                         "second", engine)


def _assert_call_matches(actual: Any, expected: Any, compiled_inputs: Any,
                         eager_inputs: Any, what: str, engine: str) -> None:
    assert_same_tree(actual, expected, f"{what} output", engine)
    assert_same_tree(compiled_inputs, eager_inputs, f"{what} input after the call", engine)
    compiled_leaves = pytree.tree_leaves(compiled_inputs)
    eager_leaves = pytree.tree_leaves(eager_inputs)
    for i, (a, e) in enumerate(zip(compiled_leaves, eager_leaves)):
        if isinstance(e, torch.Tensor) and \
                e.untyped_storage().nbytes() % max(e.element_size(), 1) == 0:
            assert_same(whole_storage(a), whole_storage(e),
                        f"{what} storage of input leaf {i} after the call", engine)


def count_planned_calls(compiled: outofplace.Compiled, taken: list[bool]) -> None:
    """Makes the compiled program's planned call note in `taken`, at each later call,
    whether it took the call (True) or handed it back to `Compiled.run` (False)."""
    plan = compiled._planned
    assert plan is not None, "no planned call was made"

    def counting(inputs: Any) -> Any:
        results = plan(inputs)
        taken.append(results is not None)
        return results
    compiled._planned = counting


def assert_refused_alike(compiled: outofplace.Compiled, args: tuple, kwargs: dict | None = None
                         ) -> BaseException:
    """Makes one bad call both ways a call goes: through the planned call
    (`Compiled.__call__` once `compiled._planned` is made: C++ or its Python twin) and
    through Python's checked path alone (`Compiled.run`, which no planned call sees).
    Both must raise, with the same error type and message (call_checks.py decides every
    refusal), and the planned call, when the call reached it, must have handed it back
    rather than run it. Returns the error."""
    kwargs = kwargs or {}
    taken: list[bool] = []
    planned = compiled._planned
    if planned is not None:
        count_planned_calls(compiled, taken)
    try:
        with pytest.raises(Exception) as through_plan:
            compiled(*args, **kwargs)
        assert True not in taken, "the planned call ran a call Python refuses"
        with pytest.raises(Exception) as through_python:
            compiled.run(args, kwargs, compiled.engine)
    finally:
        compiled._planned = planned
    assert type(through_plan.value) is type(through_python.value), \
        f"{through_plan.value!r} against {through_python.value!r}"
    assert str(through_plan.value) == str(through_python.value)
    return through_plan.value


def run_on_path(path: str, program: Any, compile_args: tuple, call_args: tuple) -> Any:
    """`program(*call_args)` compiled on one path: "outofplace.compile" (traced with
    `compile_args`) or "torch.compile" (the outofplace backend, `dynamic=False`), with
    dynamo's caches reset before and after."""
    import torch._dynamo

    torch._dynamo.reset()
    if path == "torch.compile":
        compiled = torch.compile(program, backend="outofplace", dynamic=False)
    else:
        compiled = outofplace.compile(program, compile_args)
    try:
        return compiled(*call_args)
    finally:
        torch._dynamo.reset()
