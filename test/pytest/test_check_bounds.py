"""The checked mode, `outofplace.compile(..., check_bounds=True)`, against eager: where
eager raises for a runtime index out of range, the call raises IndexError naming the
statement and every tensor keeps its value from before the call; where eager runs, the
results and written tensors are eager's. On every engine."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F

import outofplace
from outofplace.ir_utils import main_function
from differential import ENGINES, assert_call_matches_eager, assert_same


def _line_of(f, text: str) -> str:
    """`file:line` of the statement of `f` containing `text`."""
    lines, start = inspect.getsourcelines(f)
    number = next(start + i for i, line in enumerate(lines) if text in line and i)
    return f"{inspect.getsourcefile(f)}:{number}"


def index_read(x, i):
    return x[i] * 2


def index_write(x, i, v):
    x[i] = v
    return x.sum()


def position_write(cache, pos, k):
    cache[:, pos] = k
    return cache.mean()


def index_select_(x, i):
    return x.index_select(1, i) + 1


def gather_(x, i):
    return x.gather(0, i)


def scatter_(x, i):
    x.scatter_(0, i, 7.0)


def scatter_add_(x, i, v):
    x.scatter_add_(1, i, v)


def index_add_(x, i, v):
    x.index_add_(0, i, v)


def index_copy_(x, i, v):
    x.index_copy_(0, i, v)


def index_fill_(x, i):
    x.index_fill_(1, i, -1.0)


def embedding_(w, i):
    return F.embedding(i, w)


def take_(x, i):
    return x.take(i)


x43 = lambda: torch.arange(12.).view(4, 3)  # noqa: E731
CASES = {  # program, statement, arguments with the index, index values (some eager refuses)
    "index_read": (index_read, "x[i]", lambda i: (x43(), torch.tensor(i)),
                   [[0, 3], [-4, 1], [4, 0], [0, -5]]),
    "index_write": (index_write, "x[i] = v", lambda i: (x43(), torch.tensor(i), torch.ones(3)),
                    [[1], [-1], [4], [-5]]),
    "position_write": (position_write, "cache[:, pos]",
                       lambda i: (torch.zeros(2, 8), torch.tensor(i), torch.ones(2)),
                       [7, -8, 8, -9]),
    "index_select": (index_select_, "index_select", lambda i: (x43(), torch.tensor(i)),
                     [[0, 2], [3, 0], [-1, 1]]),
    "gather": (gather_, "gather", lambda i: (x43(), torch.tensor(i)),
               [[[3, 0, 1]], [[4, 0, 0]], [[0, -1, 0]]]),
    "scatter_": (scatter_, "scatter_", lambda i: (x43(), torch.tensor(i)),
                 [[[2, 1, 0]], [[0, 4, 0]], [[-1, 0, 0]]]),
    "scatter_add_": (scatter_add_, "scatter_add_",
                     lambda i: (x43(), torch.tensor(i), torch.ones(4, 1)),
                     [[[2], [0], [1], [2]], [[3], [0], [0], [0]], [[0], [0], [-1], [0]]]),
    "index_add_": (index_add_, "index_add_",
                   lambda i: (x43(), torch.tensor(i), torch.ones(2, 3)),
                   [[3, 3], [4, 0], [-1, 0]]),
    "index_copy_": (index_copy_, "index_copy_",
                    lambda i: (x43(), torch.tensor(i), torch.ones(2, 3)),
                    [[0, 3], [0, 4], [-2, 1]]),
    "index_fill_": (index_fill_, "index_fill_", lambda i: (x43(), torch.tensor(i)),
                    [[0, -3], [3, 0], [-4, 0]]),
    "embedding": (embedding_, "F.embedding", lambda i: (x43(), torch.tensor(i)),
                  [[[0, 3], [1, 2]], [[4, 0], [0, 0]], [[0, 0], [-1, 0]]]),
    "take": (take_, "take", lambda i: (x43(), torch.tensor(i)),
             [[0, 11, -12], [12, 0, 0], [-13, 0, 0]]),
}


def _eager_raises(f, args) -> bool:
    try:
        f(*[a.clone() for a in args])
    except (IndexError, RuntimeError):
        return True
    return False


@pytest.mark.parametrize("name", CASES)
def test_checked_mode_raises_where_eager_raises(name):
    f, statement, make, values = CASES[name]
    compiled = outofplace.compile(f, make(values[0]), check_bounds=True)
    assert compiled.bounds_check is not None
    raised = 0
    for value in values:
        args = make(value)
        for engine in ENGINES:
            if not _eager_raises(f, args):
                assert_call_matches_eager(compiled, f, args, {}, engine)
                continue
            raised += 1
            called = [a.clone() for a in args]
            with pytest.raises(IndexError, match=_line_of(f, statement)):
                compiled.run(called, {}, engine)
            for before, after in zip(args, called):
                assert_same(after, before, f"[{engine}] argument after a refused call", engine)
    assert raised  # each case has values eager refuses


class Decoder(torch.nn.Module):
    """A cache written at a position the module keeps and advances: the fifth step runs
    past the end of the cache."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 3))
        self.register_buffer("pos", torch.tensor(0))

    def forward(self, k):
        self.cache[self.pos] = k
        self.pos += 1
        return self.cache.sum(0)


@pytest.mark.parametrize("engine", ENGINES)
def test_state_written_past_its_end_raises_and_keeps_the_state(engine):
    eager, model = Decoder(), Decoder()
    compiled = outofplace.compile(model, (torch.ones(3),), check_bounds=True)
    for step in range(4):
        k = torch.full((3,), float(step + 1))
        assert_same(compiled.run((k,), {}, engine), eager(k), f"[{engine}] step {step}",
                    engine)
    assert_same(model.cache, eager.cache, f"[{engine}] cache", engine)
    with pytest.raises(IndexError):
        eager(torch.ones(3))
    cache, pos = model.cache.clone(), model.pos.clone()
    with pytest.raises(IndexError, match=_line_of(Decoder.forward, "self.cache[self.pos]")):
        compiled.run((torch.ones(3),), {}, engine)
    assert_same(model.cache, cache, f"[{engine}] cache after the refused call", engine)
    assert_same(model.pos, pos, f"[{engine}] pos after the refused call", engine)


def _ops(module) -> tuple[list[str], set[str]]:
    """The ops of main in order, constants aside (the lowering orders them by first use)."""
    ops = list(main_function(module).regions[0].blocks[0].operations)
    return ([(op.name, [str(r.type) for r in op.results]) for op in ops
             if op.name != "stablehlo.constant"],
            {str(op.attributes["value"]) for op in ops if op.name == "stablehlo.constant"})


def test_main_program_is_the_unchecked_one():
    """The flags are a program of their own: main is what compiling without the check
    gives, and the default compiles no check (and warns that positions are clamped)."""
    args = (torch.zeros(2, 8), torch.tensor(3), torch.ones(2))
    with pytest.warns(outofplace.OutOfBoundsPolicyWarning):
        unchecked = outofplace.compile(position_write, args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", outofplace.OutOfBoundsPolicyWarning)
        checked = outofplace.compile(position_write, args, check_bounds=True)
    assert unchecked.bounds_check is None
    assert _ops(checked.module) == _ops(unchecked.module)
    assert checked.io_map == unchecked.io_map == {0: 1}
    assert "tf.aliasing_output" not in checked.bounds_check.stablehlo


def test_checked_mode_on_a_mesh():
    """Sharded, the check runs before the partitioned program too."""
    args = (torch.zeros(2, 8), torch.tensor(3), torch.ones(2))
    compiled = outofplace.compile(position_write, args, check_bounds=True, mesh={"x": 2},
                                  shardings={"cache": ("x", None)})
    cache = torch.arange(16.).view(2, 8)
    with pytest.raises(IndexError, match=_line_of(position_write, "cache[:, pos]")):
        compiled(cache, torch.tensor(-9), torch.ones(2))
    assert torch.equal(cache, torch.arange(16.).view(2, 8))
    expected = torch.arange(16.).view(2, 8)
    assert_same(compiled(cache, torch.tensor(-8), torch.ones(2)),
                position_write(expected, torch.tensor(-8), torch.ones(2)), "output", "xla")
    assert_same(cache, expected, "cache", "xla")


@pytest.mark.parametrize("engine", ENGINES)
def test_checked_mode_with_dynamic_shapes(engine):
    """A program with a dynamic dimension: the check runs at each call's sizes (XLA and
    the interpreter specialise it), so the bound it checks is the call's own."""
    compiled = outofplace.compile(
        position_write, (torch.zeros(2, 8), torch.tensor(3), torch.ones(2)),
        dynamic_shapes={"cache": {1: torch.export.Dim("seq", min=2)}, "pos": None,
                        "k": None}, check_bounds=True)
    for seq in (5, 11):
        cache = torch.arange(2. * seq).view(2, seq)
        expected = cache.clone()
        assert_same(compiled.run((cache, torch.tensor(seq - 1), torch.ones(2)), {}, engine),
                    position_write(expected, torch.tensor(seq - 1), torch.ones(2)),
                    f"[{engine}] seq {seq}", engine)
        assert_same(cache, expected, f"[{engine}] cache at seq {seq}", engine)
        with pytest.raises(IndexError, match=_line_of(position_write, "cache[:, pos]")):
            compiled.run((cache, torch.tensor(seq), torch.ones(2)), {}, engine)
        assert_same(cache, expected, f"[{engine}] cache after the refused call", engine)


def _policy_warnings(run) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught
            if issubclass(w.category, outofplace.OutOfBoundsPolicyWarning)]


def _write_at(cache, pos, k):
    cache[:, pos] = k
    return cache.sum()


def test_the_clamping_policy_warns_unless_asked_for():
    """By default compiling a runtime-position write warns that out-of-range positions
    are clamped; `check_bounds=False` asks for that policy (no warning), `True` checks;
    `torch.compile`'s `options` pass the same choice."""
    import torch._dynamo

    args = (torch.zeros(2, 8), torch.tensor(3), torch.ones(2))
    assert _policy_warnings(lambda: outofplace.compile(_write_at, args))
    assert not _policy_warnings(lambda: outofplace.compile(_write_at, args,
                                                           check_bounds=False))
    for options, warned in ((None, True), ({"check_bounds": False}, False)):
        torch._dynamo.reset()
        run = torch.compile(_write_at, backend="outofplace", dynamic=False, options=options)
        cache = torch.zeros(2, 8)
        assert bool(_policy_warnings(lambda: run(cache, torch.tensor(5), torch.ones(2)))) \
            == warned
        assert torch.equal(cache[:, 5], torch.ones(2))
    torch._dynamo.reset()
    checked = torch.compile(_write_at, backend="outofplace", dynamic=False,
                            options={"check_bounds": True})
    with pytest.raises(IndexError):
        checked(torch.zeros(2, 8), torch.tensor(8), torch.ones(2))
    with pytest.raises(Exception, match="takes the options check_bounds, engine, cache"):
        torch._dynamo.reset()
        torch.compile(_write_at, backend="outofplace", options={"mode": 1})(*args)
