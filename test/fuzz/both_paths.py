"""One behaviour on both paths (issue 32): what a fuzzed program that
`outofplace.compile` refused does under `torch.compile(backend="outofplace")`, and
whether a difference on the torch.compile path is PyTorch's own. Used by long_run.py
and by test_fuzz.py's both-paths slice of `make test`.
"""

from __future__ import annotations

import traceback
import warnings


class PyTorchDivergence(Exception):
    """The torch.compile path differs from eager, and so does torch.compile with torch's
    own backends (`upstream`): PyTorch's, counted apart (test_fuzz.py)."""

    op = "torch.compile(backend='eager')"

    def __init__(self, error: AssertionError) -> None:
        super().__init__(str(error))
        self.reason = f"PyTorch's own backends differ from eager too: {str(error)[:200]}"


def check_both_paths(run, f, args, kwargs, reproducer) -> None:
    """`run()` (a program checked against eager on the engines of differential.ENGINES),
    failing also when outofplace.compile refuses a program that torch.compile compiles
    alone ("one-path", `other_path`); a difference on the torch.compile path that
    torch's own backends make too raises PyTorchDivergence."""
    import outofplace

    try:
        run()
    except outofplace.UnsupportedMutationError as error:
        found = other_path(f, args, kwargs, error, reproducer)
        if found.get("outcome") == "one-path":
            raise AssertionError(f"refused by outofplace.compile ({error}), compiled by "
                                 "torch.compile(backend='outofplace') alone") from error
        if found.get("outcome") == "failed":
            raise AssertionError(found["error"]) from error
        raise
    except AssertionError as error:
        if str(error).startswith("[dynamo") and upstream(f, args, kwargs):
            raise PyTorchDivergence(error) from error
        raise


def upstream(f, args, kwargs) -> bool:
    """Whether torch.compile with torch's own backends, no outofplace at all ("eager":
    dynamo's graph run as is; "aot_eager" when gradients are taken: AOTAutograd's too),
    differs from eager as well, two calls as `by_dynamo` makes: PyTorch's divergence,
    counted apart as the module fuzzer counts it (fuzz_modules_check.UpstreamDivergence)."""
    import torch
    import torch._dynamo
    from differential import _assert_call_matches, _clone

    grads = any(isinstance(t, torch.Tensor) and t.requires_grad
                for t in torch.utils._pytree.tree_leaves((args, kwargs)))
    for backend in ("eager", "aot_eager") if grads else ("eager",):
        torch._dynamo.reset()
        run = torch.compile(f, backend=backend, dynamic=False)
        for call in ("first", "second"):
            (mine, my_kwargs), (theirs, their_kwargs) = _clone((args, kwargs)), \
                _clone((args, kwargs))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    actual = run(*mine, **my_kwargs)
                    expected = f(*theirs, **their_kwargs)
                _assert_call_matches(actual, expected, (mine, my_kwargs),
                                     (theirs, their_kwargs), f"[{backend}]", "xla")
            except Exception:  # noqa: BLE001 - torch's own backend differs from eager
                return True
    return False


def _statement(location: str) -> str:
    """The source text at `file:line` (each build of a program is a file of its own)."""
    import linecache
    path, _, line = location.rpartition(":")
    return linecache.getline(path, int(line)).strip() if line.isdigit() else ""


# Why dynamo breaks a graph and runs an op eagerly because the op's result depends on
# tensor values: a shape (`x[mask]`, nonzero) or a Python scalar (`.item()`, an int32
# 0-d tensor used as an index, which dynamo reads with `__index__`).
_DATA_DEPENDENT = ("Dynamic shape operator", "Data dependent operator")


def _dynamo_split(f, args, kwargs) -> tuple[set[tuple[str, bool]], set[str]]:
    """What dynamo makes of `f`: the source lines of the ops in its graphs (their FX
    stack traces), each with False, and with True too for an op indexing at a bool mask
    (`x[m]`, `x[m] = v`): the statements torch.compile hands its backend; and the
    `file:line`s where it broke a graph at an op whose result depends on values, which
    it runs eagerly between two graphs, as source statements."""
    import torch
    import torch._dynamo
    import torch.utils._pytree as pytree
    from differential import _clone

    seen: set[tuple[str, bool]] = set()

    def value(node):
        meta = getattr(node, "meta", {})
        return meta.get("example_value", meta.get("val"))

    def at_a_mask(node) -> bool:
        return any(isinstance(v := value(operand), torch.Tensor) and
                   v.dtype == torch.bool and v.dim() > 0
                   for operand in pytree.tree_leaves((node.args[1:], node.kwargs)))

    torch._dynamo.reset()
    (mine, my_kwargs), = (_clone((args, kwargs)),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explained = torch._dynamo.explain(f)(*mine, **my_kwargs)
    torch._dynamo.reset()
    for gm in explained.graphs:
        for node in gm.graph.nodes:
            for line in (node.meta.get("stack_trace") or "").splitlines():
                seen.add((line.strip(), False))
                if node.op in ("call_function", "call_method") and at_a_mask(node):
                    seen.add((line.strip(), True))
    breaks = {_statement(f"{frame.filename}:{frame.lineno}")
              for reason in explained.break_reasons
              if reason.reason.startswith(_DATA_DEPENDENT)
              for frame in reason.user_stack[-1:]}
    return seen, breaks


def other_path(f, args, kwargs, refusal, reproducer) -> dict:
    """A program outofplace.compile refused, through torch.compile(backend="outofplace"):
    refused there too ({}), compiled
    there alone and matching eager ("one-path", with how many graph breaks dynamo made:
    a graph break runs what lies between graphs eagerly), or a finding ("failed").
    A program whose refused statement is in none of the graphs dynamo hands the backend
    (for a shape that depends on values, `x[mask]` returned: no op there at a mask;
    dynamo breaks the graph there and runs it eagerly, which a whole program compiled to
    one StableHLO cannot do; docs/api.md), or where dynamo broke a graph at an op whose
    result depends on values (the read `x[m, i]` of `x[m, i] += 1`, an int32 position
    it reads as a Python int), so that the op outofplace.compile refused is not in the
    graphs as written (`x[:, pos].as_strided(...)` is an as_strided of an eager view
    there), is "split": no failure, counted apart."""
    import torch._dynamo
    import outofplace
    from differential import by_dynamo

    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            by_dynamo(f, f, args, kwargs)
    except Exception as error:  # noqa: BLE001 - sorted below
        inner = getattr(error, "inner_exception", None) or error.__cause__
        if isinstance(error, outofplace.UnsupportedMutationError) or \
                isinstance(inner, outofplace.UnsupportedMutationError):
            return {}
        return {"outcome": "failed", "error": f"refused by outofplace.compile; torch.compile:"
                f" {type(error).__name__}: {error}"[:2000],
                "where": traceback.format_exc().splitlines()[-3:],
                "reproducer": reproducer()}
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values()) - breaks
    outcome = "split" if split_by_dynamo(f, args, kwargs, refusal) else "one-path"
    return {"outcome": outcome, "graph_breaks": breaks, "reproducer": reproducer()}


def split_by_dynamo(f, args, kwargs, refusal) -> bool:
    """Whether the statement outofplace.compile refused (`refusal`) is one dynamo runs
    eagerly between two graphs on `f(*args, **kwargs)`: in none of the graphs it hands
    the backend, or where it broke a graph at an op whose result depends on values
    (other_path)."""
    statement = _statement(refusal.location)
    masked = refusal.shape_from_values  # x[mask]: the rest of its line may be in a graph
    in_graphs, broken_at = _dynamo_split(f, args, kwargs)
    return bool(statement) and ((statement, masked) not in in_graphs or
                                statement in broken_at)
