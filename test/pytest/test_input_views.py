"""frontend/input_views.py: state that views other state, on both paths.

A module that registers buffers as views of another (the halves of a KV cache, a window
of a ring buffer) writes through one and reads through the other; eager's writes show
through, so the compiled program takes each view inside it from its base. Each program
runs through `outofplace.compile` on every engine and through
`torch.compile(backend="outofplace")`, in float32 and float64, against eager.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch._dynamo

import outofplace
from differential import ENGINES, assert_call_matches_eager, assert_matches_eager, \
    assert_sgd_steps_match_eager, by_dynamo
from outofplace import memory
from outofplace.frontend import input_views

DTYPES = [torch.float32, torch.float64]
# The programs write at runtime positions: clamping's warning is not what is tested here.
pytestmark = pytest.mark.filterwarnings("ignore::outofplace.OutOfBoundsPolicyWarning")


class CacheHalves(torch.nn.Module):
    """Keys and values registered as the two halves of one cache, written at a runtime
    position through the halves and read through the whole."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("kv", torch.zeros(2, 6, 3, dtype=dtype))
        self.register_buffer("k", self.kv[0])
        self.register_buffer("v", self.kv[1])

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.k[pos] = x
        self.v[pos] = x * 2
        return self.kv.sum(1)


class StridedWindow(torch.nn.Module):
    """A window no basic indexing gives (every third element of the flattened buffer),
    read after the whole buffer is written, and written itself."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("buf", torch.arange(24, dtype=dtype).reshape(4, 6))
        self.register_buffer("every_third", self.buf.view(-1)[1::3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.buf.mul_(x)
        out = self.every_third.clone()
        self.every_third.add_(1)
        return out + self.buf.sum()


class TransposedView(torch.nn.Module):
    """A parameter-free module whose buffer is the transpose of another, written in
    place through the transpose."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("state", torch.randn(3, 5, dtype=dtype))
        self.register_buffer("state_t", self.state.t())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.state_t[1:3].add_(x)
        return self.state * 2


class FlatViewReassigned(torch.nn.Module):
    """A buffer registered as a view of another of the same layout (`b.view(-1)`),
    written through both, the base by `+=` (dynamo sets `self.b` to the graph's output:
    it must be `b` itself, not the view)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("b", torch.arange(8, dtype=dtype))
        self.register_buffer("flat", self.b.view(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.b += 0.25 * (x - self.b)
        self.flat.copy_(x.abs() + 1)
        self.b.mul_(0.1).add_(self.b, alpha=0.9)
        return self.b * 2


PROGRAMS = {
    "cache halves": (CacheHalves, lambda dt: (torch.randn(3, dtype=dt), torch.tensor(4))),
    "strided window": (StridedWindow, lambda dt: (torch.randn(6, dtype=dt),)),
    "transposed view": (TransposedView, lambda dt: (torch.randn(2, 3, dtype=dt),)),
    "flat view reassigned": (FlatViewReassigned, lambda dt: (torch.randn(8, dtype=dt),)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_state_viewing_other_state_matches_eager_on_both_paths(name, dtype):
    make, arguments = PROGRAMS[name]
    torch.manual_seed(0)
    module, args = make(dtype), arguments(dtype)
    eager = copy.deepcopy(module)
    compiled = assert_matches_eager(module, *args)
    assert len(compiled.input_names) == len(set(compiled.input_names))
    assert not any(n in ("k", "v", "every_third", "state_t", "flat")
                   for n in compiled.input_names)
    by_dynamo(copy.deepcopy(eager), copy.deepcopy(eager), args, {})


def test_views_stay_views_after_calls():
    """After compiled calls the module's views still view its base (nothing was copied
    into a tensor of its own), and every later call keeps matching eager."""
    module, eager = CacheHalves(torch.float32), CacheHalves(torch.float32)
    compiled = outofplace.compile(module, (torch.randn(3), torch.tensor(0)))
    for position in (0, 5, 2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, torch.tensor(position)),
                                   eager(x, torch.tensor(position)))
    assert module.k.data_ptr() == module.kv.data_ptr()
    torch.testing.assert_close(module.kv, eager.kv, rtol=0, atol=0)


def test_a_view_reassigned_after_compiling_is_refused_before_anything_is_written():
    module = CacheHalves(torch.float32)
    compiled = outofplace.compile(module, (torch.randn(3), torch.tensor(0)))
    module.k = torch.zeros(6, 3)  # no longer a view of kv
    before = module.kv.clone(), module.k.clone()
    with pytest.raises(ValueError, match="`k` was compiled as a view of `kv`"):
        compiled(torch.randn(3), torch.tensor(1))
    torch.testing.assert_close(module.kv, before[0], rtol=0, atol=0)
    torch.testing.assert_close(module.k, before[1], rtol=0, atol=0)


@pytest.mark.parametrize("layout, basic", [
    (((3,), (1,), 3, (2, 6), (6, 1), 0), True),  # a row's tail: select and slice
    (((6,), (6,), 1, (6, 6), (6, 1), 0), True),  # a column: select of the second dimension
    (((2, 2), (1, 6), 6, (6, 6), (6, 1), 0), True),  # a transposed block: slices, permute
    (((3,), (1,), 4, (2, 6), (6, 1), 0), False),  # across two rows
    (((2, 3), (1, 2), 0, (6,), (1,), 0), False),  # a transposed reshape
])
def test_indexing_gives_exactly_the_view_or_nothing(layout, basic):
    """`indexing` returns steps taking exactly the view from its base, else None (the
    view is then the base's as_strided)."""
    base = torch.arange(36.).as_strided(layout[3], layout[4], layout[5])
    view = base.as_strided(layout[0], layout[1], layout[2])
    steps = input_views.indexing(layout)
    assert (steps is not None) == basic
    if steps is None:
        return
    value = base
    for op, *arguments in steps:
        value = op(value, *arguments)
    assert value.data_ptr() == view.data_ptr() and value.shape == view.shape and \
        value.stride() == view.stride()


def _reads_a_view_beside_its_base(a, b):
    return a - 1, b * 2, b.sum(0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("given", ["row of it", "empty slice of it", "itself twice",
                                   "expanded row of it"])
def test_arguments_viewing_one_another_are_traced_with_static_shapes(given, dtype):
    """Arguments sharing memory that the program only reads are separate values of
    fixed shape: torch.export made the sizes of a tensor another argument views
    symbolic (`tensor<?x?xf32>`), and a call on XLA specialized the program again, which
    failed for an empty view."""
    x = torch.randn(6, 6, dtype=dtype)
    a = {"row of it": x[2, 1:3], "empty slice of it": x[2, 4:3], "itself twice": x,
         "expanded row of it": x[0].expand(3, 6)}[given]
    b = x[1:] if given == "expanded row of it" else x
    compiled = outofplace.compile(_reads_a_view_beside_its_base, (a, b))  # views, as given
    assert not compiled.dynamic
    for engine in ENGINES:
        if engine not in ("mesh", "dynamo"):
            assert_call_matches_eager(compiled, _reads_a_view_beside_its_base, (a, b), {},
                                      engine)
    by_dynamo(_reads_a_view_beside_its_base, _reads_a_view_beside_its_base, (a, b), {})


def _empty_read_then_a_graph_break(x0, pos):
    r = x0[pos, 4:-3] - 1  # empty; the int32 position breaks the graph
    t = x0.clone()
    t.transpose_(1, 1)
    return r, t


@pytest.mark.parametrize("dtype", DTYPES)
def test_graph_break_passing_an_empty_view_beside_its_base(dtype):
    torch._dynamo.reset()
    run = torch.compile(_empty_read_then_a_graph_break, backend="outofplace",
                        dynamic=False)
    x = torch.randn(6, 6, dtype=dtype)
    for position in (-6, 2):
        pos = torch.tensor(position, dtype=torch.int32)
        torch.testing.assert_close(run(x, pos), _empty_read_then_a_graph_break(x, pos),
                                   rtol=0, atol=0)


def _writes_views_of_neighbours(a, b, pos):
    b[pos].abs_()  # an int32 position breaks the graph: `b[pos]` is passed beside b
    a[0, pos] = 1
    b.unbind(0)[0][...] = 2
    return a * 2, b + 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_graph_break_passing_a_view_of_one_of_two_neighbours_in_a_buffer(dtype):
    """Arguments side by side in one buffer (not views of each other) and, after a graph
    break, a view of the smaller one: the view's base is the argument holding its
    elements, not the largest of the buffer, which does not. The view was refused as
    sharing memory with its own base."""
    def arguments():
        buffer = torch.arange(-8.0, 12.0, dtype=dtype)
        return buffer[:16].view(4, 4), buffer[16:], torch.tensor(2, dtype=torch.int32)

    assert_matches_eager(_writes_views_of_neighbours, *arguments())
    by_dynamo(_writes_views_of_neighbours, _writes_views_of_neighbours, arguments(), {})
    a, b, _ = arguments()
    assert memory.views_of_inputs([a, b, b[2], a[1:], b]) == {2: 1, 3: 0, 4: 1}


# Arguments the user passes that view another argument's elements, written through one
# and read through the other: `outofplace.compile` takes the view from its base inside the
# program (graph_preparation._take_input_views) as the torch.compile path does; they were
# refused as "shares memory" by outofplace.compile alone.
def _writes_both(x, v):
    x.add_(1)
    v.mul_(2)
    return x.sum(0) + v


def _writes_the_view_reads_the_base(cache, column, k):
    column.copy_(k)
    return cache * 2


def _writes_the_base_through_a_transpose(x, xt):
    xt[1:3].add_(1)
    return x.sum(1), xt.clone()


class WritesTheBufferAnArgumentViews(torch.nn.Module):
    """`m(m.cache[1])`: the module writes its buffer and reads the argument viewing it."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("cache", torch.arange(12, dtype=dtype).reshape(3, 4))

    def forward(self, row: torch.Tensor) -> torch.Tensor:
        self.cache.mul_(-1)
        return row * 3


ARGUMENT_VIEWS = {
    "a row, both written": (_writes_both, lambda x: (x, x[1])),
    "a column written, the base read": (
        _writes_the_view_reads_the_base, lambda x: (x, x[:, 2], torch.ones(3, dtype=x.dtype))),
    "the transpose written": (_writes_the_base_through_a_transpose, lambda x: (x, x.t())),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(ARGUMENT_VIEWS))
def test_arguments_viewing_another_written_match_eager_on_both_paths(name, dtype):
    f, arguments = ARGUMENT_VIEWS[name]
    x = torch.arange(12, dtype=dtype).reshape(3, 4)
    args = arguments(x)
    compiled = assert_matches_eager(f, *args)
    assert compiled.signature.input_views  # taken from its base, not refused
    by_dynamo(f, f, arguments(x.clone()), {})


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_argument_viewing_a_buffer_the_module_writes(dtype):
    module = WritesTheBufferAnArgumentViews(dtype)
    eager = copy.deepcopy(module)
    compiled = outofplace.compile(module, (module.cache[1],))
    for _ in range(2):
        torch.testing.assert_close(compiled(module.cache[1]), eager(eager.cache[1]),
                                   rtol=0, atol=0)
        torch.testing.assert_close(module.cache, eager.cache, rtol=0, atol=0)
    run = torch.compile(copy.deepcopy(eager), backend="outofplace", dynamic=False)
    torch.testing.assert_close(run(run.cache[1]), eager(eager.cache[1]), rtol=0, atol=0)
    torch.testing.assert_close(run.cache, eager.cache, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_arguments_sharing_memory_otherwise_at_a_call_are_compiled_again(dtype):
    """One program, called with the view at another place, with separate tensors and
    compiled for separate tensors then called with a view: each call as eager, with a
    warning naming the arguments, and with two overlapping in part."""
    x = torch.arange(12, dtype=dtype).reshape(3, 4)
    compiled = outofplace.compile(_writes_both, (x.clone(), x.clone()[1]))  # separate
    mine, theirs = x.clone(), x.clone()
    expected = _writes_both(theirs, theirs[1])
    with pytest.warns(UserWarning, match="'v' a view of 'x' \\(traced: no views\\)"):
        actual = compiled(mine, mine[1])  # the traced layouts, but sharing memory
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    for given in (lambda t: (t, t[2]), lambda t: (t, t[2]), lambda t: (t, t[1].clone()),
                  lambda t: (t, t[0]), lambda t: (t, t[1])):
        mine, theirs = x.clone(), x.clone()
        expected = _writes_both(*given(theirs))
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            actual = compiled(*given(mine))
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    flat, theirs = torch.arange(16, dtype=dtype), torch.arange(16, dtype=dtype)
    with pytest.warns(UserWarning, match="compiling it again"):
        actual = compiled(flat[:12].view(3, 4), flat[10:14])  # v overlaps x's last row
    torch.testing.assert_close(actual, _writes_both(theirs[:12].view(3, 4), theirs[10:14]),
                               rtol=0, atol=0)
    torch.testing.assert_close(flat, theirs, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_separate_arguments_laid_out_as_a_traced_view_are_not_taken_from_each_other(dtype):
    """Compiled for `(x, x[1])` and called so, then called (the call XLA's planned call
    would take) with two tensors of the same layouts in memory of their own: the
    program read `x[1]` for the second; it is compiled again for them."""
    x = torch.arange(12, dtype=dtype).reshape(3, 4)
    shared, eager = x.clone(), x.clone()
    compiled = outofplace.compile(_writes_both, (shared, shared[1]))
    torch.testing.assert_close(compiled(shared, shared[1]), _writes_both(eager, eager[1]))
    mine = (x.clone(), torch.arange(12, 24, dtype=dtype)[4:8])
    for _ in range(3):  # the same tensors: adopted by the first call, then planned
        theirs = (mine[0].clone(), mine[1].clone())
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            actual = compiled(*mine)
        torch.testing.assert_close(actual, _writes_both(*theirs), rtol=0, atol=0)
        for a, b in zip(mine, theirs):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def _writes_one_of_two_overlapping_views_after_a_break(x, pos):
    rows = x[0:2].unsqueeze(0).expand(2, -1, -1)  # rows 0 and 1, read after the break
    x[1:3, pos].mul_(2)  # an int32 position breaks the graph: x[1:3, pos] is passed
    return rows.sum(0) + 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_graph_break_passing_two_views_overlapping_in_part(dtype):
    """A graph break passes two views of a tensor, not the tensor, which share elements
    in part (row 1 of `x[:, pos]` and the expanded rows 0 and 1): neither is the other's
    base, so both are taken from a tensor of the storage they span, passed as one more
    input (a synthetic base, as AOTAutograd makes); the write was refused as sharing
    memory (fuzz run program 4074)."""
    torch._dynamo.reset()
    run = torch.compile(_writes_one_of_two_overlapping_views_after_a_break,
                        backend="outofplace", dynamic=False)
    for position in (1, 2, 0):
        x = torch.randn(4, 3, dtype=dtype)
        theirs, pos = x.clone(), torch.tensor(position, dtype=torch.int32)
        torch.testing.assert_close(
            run(x, pos), _writes_one_of_two_overlapping_views_after_a_break(theirs, pos),
            rtol=0, atol=0)
        torch.testing.assert_close(x, theirs, rtol=0, atol=0)
    assert_matches_eager(_writes_one_of_two_overlapping_views_after_a_break,
                         torch.randn(4, 3, dtype=dtype), torch.tensor(2, dtype=torch.int32))


def _write_and_return_the_view(x, v):
    x.mul_(2)
    v.add_(1)
    return v


@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_argument_viewing_another_returned_is_the_callers_tensor(dtype, path):
    """An argument that views another, written and returned: the output is the caller's
    tensor itself, as in eager (outofplace.compile made it again as a view of the base,
    the strides of its unit dimensions its own)."""
    def make():
        x = torch.arange(12, dtype=dtype).reshape(3, 1, 4)
        return x, x[1:2].unsqueeze(0)[..., 0:3]  # unit dimensions of stride 4
    if path == "outofplace.compile":
        compiled = outofplace.compile(_write_and_return_the_view, make())
    else:
        torch._dynamo.reset()
        compiled = torch.compile(_write_and_return_the_view, backend="outofplace",
                                 dynamic=False)
    (x, v), (eager_x, eager_v) = make(), make()
    expected = _write_and_return_the_view(eager_x, eager_v)
    out = compiled(x, v)
    assert out is v and out.stride() == expected.stride()
    torch.testing.assert_close(x, eager_x, rtol=0, atol=0)


def _add_into_a_view_of_unit_dimensions(x0, pos):
    x0[:, 0::2, -3, :, ...] = 1.0
    v = x0.mT.view(-1, 3, 3)
    # `pos`, a 0-d int32 position: dynamo breaks the graph, the next one takes the view
    # and adds into it, then eager's setitem copies the graph's output into the view
    v.view(1, 1, 3, 3)[::3, -1::2, :, pos] += x0.split(1, -2)[1].unbind(2)[0]
    x0.reshape(1, 1, 9).neg_()
    return x0 * 2


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_graph_break_writing_a_view_of_unit_dimensions_it_was_passed(dtype, offset):
    """(A fuzzer's finding.) The graph after the break returns the view it was passed
    and wrote: it is the view itself, so eager's setitem copies it onto itself. The
    backend returned it made again from its base, the strides of its unit dimensions
    not the view's, which PyTorch's overlap check of the copy refused: "some elements of
    the input tensor and the written-to tensor refer to a single memory location"."""
    torch._dynamo.reset()
    compiled = torch.compile(_add_into_a_view_of_unit_dimensions, backend="outofplace",
                             dynamic=False)
    base = torch.arange(10, dtype=dtype)
    for position in (0, 2, 0):  # (at 1, eager refuses its own write: the two overlap)
        pos = torch.tensor(position, dtype=torch.int32)
        eager, ours = (base.clone()[offset:offset + 9].view(1, 1, 3, 3) for _ in range(2))
        expected = _add_into_a_view_of_unit_dimensions(eager, pos)
        torch.testing.assert_close(compiled(ours, pos), expected, rtol=0, atol=0)
        torch.testing.assert_close(ours, eager, rtol=0, atol=0)


class _Embeddings(torch.nn.Module):
    """BERT's embeddings: token kinds read through an expanded slice of a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.word, self.kind = torch.nn.Embedding(16, 8), torch.nn.Embedding(2, 8)
        self.register_buffer("kinds", torch.zeros(1, 32, dtype=torch.long))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        kinds = self.kinds[:, :ids.shape[1]].expand(ids.shape[0], ids.shape[1])
        return self.word(ids) + self.kind(kinds)


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_training_step_reading_a_buffer_through_two_expanded_views(path, dtype):
    """The backward graph AOTAutograd makes of BERT's embeddings takes two views of the
    `kinds` buffer that overlap, neither viewing the other: taken from a tensor of the
    memory they span, whose fake value (of dynamo's meta stand-ins) was on the meta
    device (a transformers BERT's training step failed on the torch.compile path)."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    assert_sgd_steps_match_eager(
        _Embeddings().to(dtype), torch.randint(16, (2, 12)),
        outofplace.compile if path == "compile" else
        lambda step, args: torch.compile(step, backend="outofplace", dynamic=False),
        dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14))
