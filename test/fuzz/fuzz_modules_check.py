"""A module program (fuzz_modules.py) on both paths against eager, after every call.

`assert_module_matches_eager(cls, held, calls)` builds the module twice (eager's and the
compiled path's), takes `held(model)` views of each before the first call, and calls both
with each call's inputs in their layout, on every path of PATHS.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

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


class UpstreamDivergence(Exception):
    """A torch.compile path failed where torch's own AOTAutograd pipeline
    (`backend="aot_eager"`, no compiler at all) fails against eager too: PyTorch's bug,
    counted and reported apart from outofplace's failures."""

    op = "torch.compile(backend='aot_eager')"
    reason = "fails against eager too: a PyTorch (AOTAutograd) bug, not outofplace's"


def run_path(path: str, cls: type, held: Callable, calls: list,
             backend: str = "outofplace") -> Exception | None:
    """The program on `path` beside eager, compared after every call: the call's outputs,
    earlier calls' outputs read again, the held views, buffers and parameters, inputs
    and their whole storages. Returns the refusal (UnsupportedMutationError) if the path
    refused at some call, None if every call matched; raises on a difference."""
    import torch._dynamo

    import outofplace
    from differential import assert_module_state_matches, assert_same, assert_same_tree, \
        whole_storage

    torch._dynamo.reset()
    eager, model = cls(), cls()
    held_eager, held_compiled = held(eager), held(model)
    outputs_eager: list[Any] = []
    outputs_compiled: list[Any] = []
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
        assert_same_tree(_detached(actual), _detached(expected), f"{what} output")
        outputs_eager.append(expected)
        outputs_compiled.append(actual)
        for k in range(c):
            assert_same_tree(_detached(outputs_compiled[k]), _detached(outputs_eager[k]),
                             f"{what} output of call {k}, read again")
        assert_same_tree(_detached(held_compiled), _detached(held_eager),
                         f"{what} views of the state taken before the first call")
        assert_module_state_matches(model, eager, f"{what} state")
        assert_same_tree(args_compiled, args_eager, f"{what} inputs after the call")
        for i, (a, e) in enumerate(zip(args_compiled, args_eager)):
            assert_same(whole_storage(a), whole_storage(e),
                        f"{what} storage of input {i} after the call")
    return None


def assert_module_matches_eager(cls: type, held: Callable, calls: list,
                                paths: tuple[str, ...] = PATHS) -> None:
    """The program on every path against eager. A path that refuses (at any call) while
    another compiles and matches eager fails; when every path refuses, the first path's
    UnsupportedMutationError is raised."""
    outcomes = {path: _run_or_blame_torch(path, cls, held, calls) for path in paths}
    refused = {path: error for path, error in outcomes.items() if error is not None}
    if refused and len(refused) < len(paths):
        raise AssertionError(
            "compiled and matched eager on " +
            ", ".join(p for p in paths if p not in refused) + "; refused on " +
            "; ".join(f"{p}: {error}" for p, error in refused.items()))
    if refused:
        raise refused[paths[0]]


def _run_or_blame_torch(path: str, cls: type, held: Callable, calls: list
                        ) -> Exception | None:
    """`run_path`; a failure on a torch.compile path of a module with parameters that
    require grad (whose graphs go through AOTAutograd) raises UpstreamDivergence when
    torch's `aot_eager` backend fails against eager on the same path too."""
    try:
        return run_path(path, cls, held, calls)
    except Exception as error:
        if path == "xla" or not any(p.requires_grad for p in cls().parameters()):
            raise
        try:
            run_path(path, cls, held, calls, backend="aot_eager")
        except Exception:  # noqa: BLE001 - torch's own pipeline diverges as well
            raise UpstreamDivergence(f"{path}: {error}") from error
        raise
