"""A module program (fuzz_modules.py) on both paths against eager, after every call.

`assert_module_matches_eager(cls, held, calls)` builds the module twice (eager's and the
compiled path's), takes `held(model)` views of each before the first call, and calls both
with each call's inputs in their layout, on every path of PATHS.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import torch

from both_paths import split_by_dynamo
from fuzz_modules import laid_out

# outofplace.compile (run on XLA), torch.compile(backend="outofplace") with dynamic=False
# and with its default (dynamic=None).
PATHS = ("xla", "dynamo", "dynamo_default")


def _args(call: list[tuple[torch.Tensor, str]]) -> list[torch.Tensor]:
    return [laid_out(value, layout) for value, layout in call]


def eager_rejects(cls: type, held: Callable, calls: list) -> bool:
    """Whether eager raises on the program (construction, held views or any call)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = cls()
            held(model)
            for call in calls:
                model(*_args(call))
    except Exception:  # noqa: BLE001 - not a valid eager program
        return True
    return False


def _detached(tree: Any) -> Any:
    import torch.utils._pytree as pytree
    return pytree.tree_map(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, tree)


class SplitByDynamo(Exception):
    """outofplace.compile refused a statement that torch.compile's paths run eagerly
    between two graphs (dynamo broke its graph there: `x[:, i] = v` at a 0-d tensor `i`
    it reads as a Python int), so they matched eager there without compiling it: no
    failure, counted apart, as the program fuzzer's "split" (both_paths.other_path)."""

    def __init__(self, refusal: Exception) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal
        self.op = refusal.op
        self.reason = f"{refusal.reason} (dynamo runs the statement between two graphs)"


class UpstreamDivergence(Exception):
    """A torch.compile path failed where torch's own AOTAutograd pipeline
    (`backend="aot_eager"`, no compiler at all) fails against eager too: PyTorch's bug,
    counted and reported apart from outofplace's failures."""

    op = "torch.compile(backend='aot_eager')"
    reason = "fails against eager too: a PyTorch (AOTAutograd) bug, not outofplace's"


def _float64(value: torch.Tensor) -> torch.Tensor:
    return value.double() if value.is_floating_point() else value


def _float64_reference(cls: type, held: Callable) -> tuple[torch.nn.Module, Any] | None:
    """The program's module with every floating parameter and buffer in float64, and its
    held views: the reference `_within_eager_rounding` measures rounding against. None
    when the program cannot be built so."""
    try:
        reference = _in_float64(cls())
        return reference, held(reference)
    except Exception:  # noqa: BLE001 - a program that only runs in its own dtypes
        return None


def _in_float64(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with every floating parameter and buffer in float64, the tensors that
    share memory sharing it still: `Module.double()` converts each apart, and a buffer
    that views another (`self.b.t()`) would no longer see the writes of the other (the
    module fuzzer's program 4188, seed 63000000)."""
    converted: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def in_float64(t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        if not t.is_floating_point() or t.dtype == torch.float64:
            return t
        storage = t.untyped_storage()
        key = (storage.data_ptr(), t.dtype)
        if key not in converted:  # the whole storage, once, in float64
            n = storage.nbytes() // t.element_size()
            converted[key] = torch.empty(0, dtype=t.dtype).set_(storage, 0, (n,), (1,)) \
                .double()
        return converted[key].as_strided(t.shape, t.stride(), t.storage_offset())

    for owner in module.modules():
        for name, p in owner._parameters.items():
            if p is not None:
                owner._parameters[name] = torch.nn.Parameter(
                    in_float64(p), requires_grad=p.requires_grad)
        for name, b in owner._buffers.items():
            if b is not None:
                owner._buffers[name] = in_float64(b)
    return module


def _epsilon(module: torch.nn.Module, calls: list) -> float:
    """The machine epsilon of the program's least precise floating dtype (of its state,
    `module`'s before the first call, and inputs)."""
    dtypes = {t.dtype for t in (*module.parameters(), *module.buffers())}
    dtypes |= {value.dtype for call in calls for value, _ in call}
    return max((torch.finfo(d).eps for d in dtypes if d.is_floating_point),
               default=torch.finfo(torch.float64).eps)


def _rmse(reference: torch.Tensor, value: torch.Tensor) -> float:
    return torch.sqrt(torch.mean(torch.square(reference - value))).item()


def _within_eager_rounding(actual: Any, expected: Any, reference: Any,
                           epsilon: float) -> bool:
    """Whether `actual`, a floating tensor torch.testing's tolerances tell apart from
    eager's `expected`, is as close to the float64 program's `reference` as eager's own
    rounding: the rule PyTorch judges its compilers by (torch._dynamo.utils.same with an
    fp64_ref, used by its accuracy benchmarks): a root-mean-square error against the
    reference at most twice eager's (three times for float16 and bfloat16) plus one unit
    of `epsilon` (the machine epsilon of the program's least precise dtype, `_epsilon`)
    at the reference's root-mean-square magnitude: one rounding eager was lucky to miss,
    as in a sum taken in another order. Both must agree with the reference to half the
    digits, sqrt(epsilon) relative and absolute (3.4e-4 for float32, 0.031 for
    float16), else it says nothing (a comparison or a cast it took another way, as far
    off as the values themselves). NaNs and infinities exactly where eager has them; an
    element the reference cannot judge (eager's float32 overflowed where float64 did not,
    or the reference overflowed where eager did not) is compared with eager's alone, to
    half the digits."""
    if not all(isinstance(t, torch.Tensor) for t in (actual, expected, reference)):
        return False
    if actual.dtype != expected.dtype or not expected.is_floating_point() or \
            not actual.shape == expected.shape == reference.shape:
        return False
    a, e, r = (t.detach().double() for t in (actual, expected, reference))
    finite = e.isfinite()
    if not (torch.equal(finite, a.isfinite()) and torch.equal(a[~finite], e[~finite])):
        return False
    half_the_digits = math.sqrt(epsilon)
    unjudged = finite & ~r.isfinite()
    if not torch.allclose(a[unjudged], e[unjudged], rtol=half_the_digits,
                          atol=half_the_digits):
        return False
    judged = finite & r.isfinite()
    a, e, r = a[judged], e[judged], r[judged]
    if not (torch.allclose(e, r, rtol=half_the_digits, atol=half_the_digits) and
            torch.allclose(a, r, rtol=half_the_digits, atol=half_the_digits)):
        return False
    multiplier = 3.0 if expected.dtype in (torch.float16, torch.bfloat16) else 2.0
    magnitude = _rmse(r, torch.zeros_like(r)) if r.numel() else 0.0
    return _rmse(r, a) <= multiplier * _rmse(r, e) + epsilon * magnitude


def _observed(model: torch.nn.Module, held: Any, outputs: list[Any],
              args: list[torch.Tensor]) -> list[tuple[str, Any]]:
    """What a call is compared on: its outputs, earlier calls' outputs read again, the
    views held since before the first call, every parameter and buffer, the inputs and
    their whole storages."""
    from differential import whole_storage

    c = len(outputs) - 1
    return [("output", _detached(outputs[c])),
            *[(f"output of call {k}, read again", _detached(outputs[k])) for k in range(c)],
            ("views of the state taken before the first call", _detached(held)),
            *[(f"state '{name}'", t.detach()) for name, t in
              (*model.named_parameters(), *model.named_buffers())],
            ("inputs after the call", args),
            *[(f"storage of input {i} after the call", whole_storage(a))
              for i, a in enumerate(args)]]


def _compare(actual: list[tuple[str, Any]], expected: list[tuple[str, Any]],
             reference: list[tuple[str, Any]] | None, what: str,
             epsilon: float, rounded: list[str]) -> None:
    """Each observed leaf against eager's (differential.assert_same); a float leaf that
    fails it but is `_within_eager_rounding` of the float64 reference is noted in
    `rounded` instead."""
    import torch.utils._pytree as pytree
    from differential import assert_same

    assert [n for n, _ in actual] == [n for n, _ in expected], \
        f"{what}: observed {[n for n, _ in actual]}, eager has {[n for n, _ in expected]}"
    for k, ((name, a), (_, e)) in enumerate(zip(actual, expected)):
        a_leaves, e_leaves = pytree.tree_leaves(a), pytree.tree_leaves(e)
        assert len(a_leaves) == len(e_leaves), \
            f"{what} {name}: {len(a_leaves)} leaves, eager has {len(e_leaves)}"
        r_leaves = pytree.tree_leaves(reference[k][1]) if reference else []
        if len(r_leaves) != len(e_leaves):
            r_leaves = [None] * len(e_leaves)
        for i, (a_leaf, e_leaf, r_leaf) in enumerate(zip(a_leaves, e_leaves, r_leaves)):
            label = f"{what} {name}" + (f" leaf {i}" if len(e_leaves) > 1 or
                                        not isinstance(e, torch.Tensor) else "")
            try:
                assert_same(a_leaf, e_leaf, label)
            except AssertionError:
                if not _within_eager_rounding(a_leaf, e_leaf, r_leaf, epsilon):
                    raise
                rounded.append(label)


def run_path(path: str, cls: type, held: Callable, calls: list,
             backend: str = "outofplace", rounded: list[str] | None = None
             ) -> Exception | None:
    """The program on `path` beside eager, compared after every call (`_observed`). Returns
    the refusal (UnsupportedMutationError) if the path refused at some call, None if every
    call matched; raises on a difference. A float difference within eager's own rounding
    (`_within_eager_rounding` of the program run in float64 beside them) is not one: it is
    appended to `rounded`."""
    import torch._dynamo

    import outofplace
    from differential import assert_module_state_matches

    torch._dynamo.reset()
    eager, model = cls(), cls()
    held_eager, held_compiled = held(eager), held(model)
    wide = _float64_reference(cls, held)
    epsilon = _epsilon(eager, calls)
    rounded = [] if rounded is None else rounded
    outputs_eager: list[Any] = []
    outputs_compiled: list[Any] = []
    outputs_wide: list[Any] = []
    run: Any = None
    if path != "xla":
        run = torch.compile(model, backend=backend,
                            dynamic=False if path == "dynamo" else None)
    for c, call in enumerate(calls):
        what = f"[{path}, call {c}]"
        args_eager, args_compiled = _args(call), _args(call)
        expected = eager(*args_eager)
        try:
            if run is None:
                run = outofplace.compile(model, _args(call))
                assert_module_state_matches(model, cls(), f"{what} state after compile")
            actual = run(*args_compiled)
        except outofplace.UnsupportedMutationError as error:
            return error
        except torch._dynamo.exc.BackendCompilerFailed as error:
            # the refusal, given by dynamo as its own error (on AOTAutograd's path)
            if isinstance(error.inner_exception, outofplace.UnsupportedMutationError):
                return error.inner_exception
            raise
        outputs_eager.append(expected)
        outputs_compiled.append(actual)
        observed_wide = None
        if wide is not None:
            args_wide = [laid_out(_float64(value), layout) for value, layout in call]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    outputs_wide.append(wide[0](*args_wide))
                observed_wide = _observed(wide[0], wide[1], outputs_wide, args_wide)
            except Exception:  # noqa: BLE001 - the program does not run in float64
                wide = None
        _compare(_observed(model, held_compiled, outputs_compiled, args_compiled),
                 _observed(eager, held_eager, outputs_eager, args_eager), observed_wide,
                 what, epsilon, rounded)
    return None


def assert_module_matches_eager(cls: type, held: Callable, calls: list,
                                paths: tuple[str, ...] = PATHS,
                                rounded: list[str] | None = None) -> None:
    """The program on every path against eager. A path that refuses (at any call) while
    another compiles and matches eager fails, but for outofplace.compile alone refusing a
    statement torch.compile runs eagerly (SplitByDynamo); when every path refuses, the
    first path's UnsupportedMutationError is raised. Values within eager's own rounding
    but not torch.testing's tolerances (run_path) are appended to `rounded`."""
    outcomes = {path: _run_or_blame_torch(path, cls, held, calls, rounded)
                for path in paths}
    refused = {path: error for path, error in outcomes.items() if error is not None}
    if refused and len(refused) < len(paths):
        if list(refused) == ["xla"] and \
                split_by_dynamo(cls(), _args(calls[0]), {}, refused["xla"]):
            raise SplitByDynamo(refused["xla"])
        raise AssertionError(
            "compiled and matched eager on " +
            ", ".join(p for p in paths if p not in refused) + "; refused on " +
            "; ".join(f"{p}: {error}" for p, error in refused.items()))
    if refused:
        raise refused[paths[0]]


def _run_or_blame_torch(path: str, cls: type, held: Callable, calls: list,
                        rounded: list[str] | None = None) -> Exception | None:
    """`run_path`; a failure on a torch.compile path of a module with parameters that
    require grad (whose graphs go through AOTAutograd) raises UpstreamDivergence when
    torch's `aot_eager` backend fails against eager on the same path too."""
    try:
        return run_path(path, cls, held, calls, rounded=rounded)
    except Exception as error:
        if path == "xla" or not any(p.requires_grad for p in cls().parameters()):
            raise
        try:
            run_path(path, cls, held, calls, backend="aot_eager")
        except Exception:  # noqa: BLE001 - torch's own pipeline diverges as well
            raise UpstreamDivergence(f"{path}: {error}") from error
        raise
