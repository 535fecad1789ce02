"""IREE runs outofplace's StableHLO in the caller's tensors, and each backend's alias check
reads that backend's compiled program (docs/backends.md)."""

from __future__ import annotations

import pytest
import torch

import outofplace
from outofplace.backends import hlo_proto, iree, xla

import differential
from differential import assert_matches_eager, assert_same_tree


@pytest.fixture(autouse=True)
def _every_program_on_iree(monkeypatch):
    """This file's checks are of IREE: every program runs there (differential.py runs
    IREE on a quarter of the programs elsewhere)."""
    monkeypatch.setattr(differential, "IREE_ON_ALL", True)

needs_iree = pytest.mark.skipif(not iree.available(), reason="needs the iree extra")
needs_xla = pytest.mark.skipif(not xla.available(), reason="needs the xla extra")


def kv_step(cache, pos, k):
    cache[:, pos] = k
    return cache.sum(1)  # the updated cache is read, as attention reads it


def kv_args(t: int = 0):
    return torch.zeros(4, 16, 8), torch.tensor(t), torch.randn(4, 8)


def flip(x):  # every element read elsewhere before it is written: not in place on IREE
    x.copy_(x.flip(0))
    return x.sum()


def keep_old(x):  # the old value is a result: XLA keeps a copy, IREE drops the alias
    old = x.clone()
    x.add_(1)
    return old


@needs_iree
def test_kv_step_is_in_place_on_iree() -> None:
    compiled = outofplace.compile(kv_step, kv_args())
    assert compiled.alias_problems("iree") == []
    cache, pos, k = kv_args(3)
    results = compiled._executable("iree")([cache, pos, k])
    assert results[compiled.io_map[0]] is cache  # written in the caller's own memory
    expected = torch.zeros(4, 16, 8)
    kv_step(expected, pos, k)
    assert_same_tree(cache, expected, "cache")


@needs_iree
def test_cache_stays_in_the_callers_tensor_step_after_step() -> None:
    compiled = outofplace.compile(kv_step, kv_args(), engine="iree")
    cache, expected = torch.zeros(4, 16, 8), torch.zeros(4, 16, 8)
    address = cache.data_ptr()
    for t in range(16):
        k = torch.randn(4, 8)
        assert_same_tree(compiled(cache, torch.tensor(t), k),
                         kv_step(expected, torch.tensor(t), k), f"step {t}")
        assert cache.data_ptr() == address
    assert_same_tree(cache, expected, "cache")


@needs_iree
def test_an_update_reading_other_places_is_compiled_without_alias() -> None:
    """The old value reaches the update through a reverse (or a gather, a transpose):
    each element is computed from others, which IREE 3.13 could overwrite first."""
    compiled = assert_matches_eager(flip, torch.arange(64.0).reshape(8, 8))
    assert compiled.alias_problems("iree") == [
        "argument 0: compiled without its alias (IREE 3.13 would update it wrongly in place)"]


def read_then_zero(x):
    y = x + 1
    x.zero_()
    return y


@needs_iree
def test_old_value_read_besides_the_update_is_compiled_without_alias() -> None:
    """IREE 3.13 overwrites a consumed argument before reading its old value elsewhere
    (`read_then_zero` returned ones): such an argument is not aliased on IREE."""
    compiled = assert_matches_eager(read_then_zero, torch.randn(8, 8))
    assert compiled.alias_problems("iree") == [
        "argument 0: compiled without its alias (IREE 3.13 would update it wrongly in place)"]


@needs_iree
def test_argument_returned_as_it_came_is_the_value_before_the_call() -> None:
    """`return old` where old is the argument unchanged: IREE 3.13 returned the argument's
    buffer, written by the update; the engine returns a copy taken before the call and
    keeps the update in place."""
    compiled = assert_matches_eager(keep_old, torch.randn(8, 8))
    assert compiled.alias_problems("iree") == []


@needs_iree
def test_tensors_iree_cannot_import_go_through_a_copy() -> None:
    """A transposed cache (not contiguous) and an unaligned one (a slice of a bigger
    buffer) are updated through a copy, still like eager."""
    def f(c, k):
        c.mul_(0.5).add_(k)
        return c.sum()

    compiled = outofplace.compile(f, (torch.randn(8, 4), torch.randn(8, 4)))
    for cache in (torch.randn(4, 8).t(), torch.randn(33)[1:].reshape(8, 4)):
        k = torch.randn(8, 4)
        expected = cache.clone()
        out = compiled.run((cache, k), engine="iree")
        assert_same_tree(out, f(expected, k), "output")
        assert_same_tree(cache, expected, "cache")


@needs_iree
def test_boolean_add_is_a_logical_or_on_iree() -> None:
    def f(x, y):
        x.add_(y)
        return x * 0 + 1

    assert_matches_eager(f, torch.tensor([True, False, True, False]),
                         torch.tensor([True, True, False, False]))


def kv_write(cache, pos, k):
    cache[:, pos] = k
    return k.sum()


@needs_xla
def test_xla_check_compiles_the_export_as_a_plain_consumer() -> None:
    """`alias_problems("xla")` compiles the exported text as a plain XLA:CPU consumer
    does (default options): the write alone stays in place; the write then a read of the
    cache (kv_step, as attention reads it) is copied there (openxla/xla#20440), and the
    check names the option that keeps it in place, which outofplace's own engine
    compiles with (its report: in place). Keeping the old value copies it with any
    option: the check reports that, without the hint."""
    from outofplace.backends import xla

    assert outofplace.compile(kv_write, kv_args()).alias_problems("xla") == []
    step = outofplace.compile(kv_step, kv_args())
    assert step.alias_problems("xla") == [
        "argument 0: a plain XLA:CPU consumer (default options) copies the donated "
        f"buffer; {xla.CONSUMER_HINT}"]
    assert [c["in_place"] for c in xla.consumer_checks(step.stablehlo, step.io_map)] == \
        [False, True]
    assert step.in_place_report == {"cache": "in place"}
    assert outofplace.compile(keep_old, (torch.randn(8, 8),)).alias_problems("xla") == [
        "argument 0: a plain XLA:CPU consumer (default options) copies the donated buffer"]


@needs_iree
def test_iree_updates_in_place_where_xla_copies() -> None:
    assert outofplace.compile(kv_write, kv_args()).alias_problems("iree") == []


def strided_columns(c, k):
    c[:, 0:256:8] = k
    return k.sum()


def strided_two_dims(b, v):
    b[1:9:2, :, 0:8:4] = v


def index_copy_heads(c, idx, k):  # c: [batch, seq, heads, dim]
    c.index_copy_(1, idx, k)
    return c.sum(1)


def small_integers(*shape: int) -> torch.Tensor:
    """Values whose float32 sums are exact in any order (the reference interpreter adds
    in order; eager's vectorized sum rounds otherwise)."""
    return torch.randint(-8, 8, shape, generator=torch.Generator().manual_seed(0)).float()


@needs_iree
@pytest.mark.parametrize("f, args", [
    (strided_columns, (torch.zeros(4, 256, 8), small_integers(4, 32, 8))),
    (strided_two_dims, (torch.zeros(10, 32, 8), small_integers(4, 32, 2))),
    (index_copy_heads, (torch.zeros(2, 256, 4, 8), torch.tensor([3, 200]),
                        small_integers(2, 2, 4, 8))),
], ids=["strided_columns", "strided_two_dims", "index_copy_heads"])
def test_windows_off_the_leading_dimension_are_in_place_on_iree(f, args) -> None:
    """outofplace emits a scatter of whole windows, fastest on XLA; IREE copies the
    operand for it when it indexes a dimension other than the first, so the IREE engine
    scatters single elements instead, in place."""
    compiled = assert_matches_eager(f, *args)
    assert compiled.alias_problems("iree") == []


@needs_xla
def test_hlo_proto_aliases_are_checked_against_io_map() -> None:
    compiled = outofplace.compile(kv_step, kv_args())
    assert compiled.alias_problems("neuron") == []
    proto = compiled.hlo_module_proto()
    assert hlo_proto.alias_problems(proto, {0: 0}) == [
        "argument 0: the proto aliases 1, io_map says result 0"]
    def write_only(c, k):  # one result: the proto's output is not a tuple
        c[:, 0] = k

    for backend in ("neuron", "xla"):
        assert outofplace.compile(write_only, (torch.zeros(4, 8), torch.ones(4))
                                  ).alias_problems(backend) == []
    unaliased = outofplace.compile(lambda a, b: a * b, (torch.randn(3), torch.randn(3)))
    assert hlo_proto.alias_problems(unaliased.hlo_module_proto(), {1: 0}) == [
        "argument 1: the proto aliases None, io_map says result 0"]


@needs_iree
def test_an_input_copied_into_a_written_tensor_is_not_written() -> None:
    """`x.copy_(w); x[0] = 5` updates w's value: IREE 3.13 wrote the update into w's
    buffer though w is not consumed (found by the fuzzer); w is passed as a copy."""
    def f(x, w):
        x.copy_(w)
        x[0] = 5
        return x.sum()

    assert_matches_eager(f, torch.zeros(4, dtype=torch.int64), torch.tensor([1, 2, 3, 4]))


# Programs on which IREE 3.13 failed or computed wrongly, found by the fuzzer and reduced
# by hand; the legalize-for-iree passes work around each (docs/backends.md). They run on every
# engine, as all differential tests do.
def test_gather_from_a_strided_slice() -> None:
    """IREE folded the slice into the gather's load and could not compile it (`LLVM
    Translation failed for operation: builtin.unrealized_conversion_cast`)."""
    assert_matches_eager(lambda x, i: x[:, -1:, i] * 2, torch.randn(4, 3, 1),
                         torch.tensor([[-1, 0], [0, -1]]))


def test_same_constant_written_next_to_the_last_write() -> None:
    """IREE merged the two fills at a wrong offset (`invalid Write access range`)."""
    def f(x):
        x.mul_(2)
        x[5] = 0
        x[4] = 0

    assert_matches_eager(f, torch.arange(1.0, 8.0))


def test_write_of_a_tensor_onto_itself() -> None:
    """A masked write whose mask is all false writes x[3] with x[3]: IREE copied the
    buffer onto itself and failed at run time (`source and target ranges overlap`)."""
    def f(x):
        x.clamp_(1, 1)
        x.view(5)[-2, None, None][:1, torch.tensor([False])] = 2.5

    assert_matches_eager(f, torch.tensor([[2.0, -1.0, 1.0, -2.0, 0.0]]))


def test_scatter_into_a_reshaped_slice() -> None:
    """IREE folded the slice into the scatter and could not compile it (`expected rank
    to be smaller or equal to the other rank`); found by the fuzzer (seed 9,200,175)."""
    def f(x, w):
        x[1:2].unsqueeze(-2).index_put_((torch.tensor([0, 0, 0]),), w, accumulate=True)
        return x * 2

    assert_matches_eager(f, torch.tensor([2.0, -1.0, 1.0, 0.0]),
                         torch.tensor([[-1.0], [3.0], [1.0]]))


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.bool])
def test_scatter_into_a_slice_of_a_copy_beside_a_read_of_it(dtype) -> None:
    """IREE updated the slice of `x0` where the later read of `x0[0]` found it (that read
    saw the scattered value) although the scatter writes a copy; a barrier on the
    scatter's operand did not stop it, computing the operand into a buffer of its own
    does. Found by the fuzzer (seed 9,900,145)."""
    def f(x0, i, pos, w):
        t1 = x0.clone()
        t1.unsqueeze(-2)[:1, i, pos] = w
        return x0[0] * 1, t1

    assert_matches_eager(f, (torch.arange(20).reshape(4, 5) - 7).to(dtype),
                         torch.tensor([0]), torch.tensor(-1, dtype=torch.int32),
                         torch.zeros(1, 1, dtype=dtype))


def test_two_scatters_at_one_index_tensor() -> None:
    """IREE narrowed the shared indices to i32 once per scatter and could not compile
    the module (`unresolved source materialization`)."""
    def f(x, y, i, v):
        x.index_add_(0, i, v)
        y.index_add_(0, i, v)
        x.index_put_((i,), v, accumulate=True)

    assert_matches_eager(f, torch.zeros(4, 2), torch.zeros(4, 2), torch.tensor([1, 1, 3]),
                         torch.arange(6.0).reshape(3, 2))


def test_read_before_an_update_with_a_constant_result() -> None:
    """IREE scheduled the slice read after the in-place update of x[1, 1, 0] when the
    program also returned a constant."""
    def f(x, w):
        x.sub_(-1)
        x.clamp_(min=-1)
        x.permute(2, 1, 0)[0, 0::2, 1:] = w
        r = x.narrow(-2, 1, 3) - 1
        x[-1, -3:-1:2, 0].mul_(2.5)
        return r, torch.zeros(3, 4, 2, dtype=torch.int64)

    assert_matches_eager(f, torch.tensor([[[5.0, 7.0], [4.0, 6.0], [3.0, -5.0], [0.0, -7.0]],
                                          [[-3.0, -6.0], [-8.0, -4.0], [1.0, -1.0],
                                           [-2.0, 2.0]]]), torch.tensor([0.0]))


def test_reshaped_argument_returned_beside_its_update() -> None:
    """The result is x reshaped as it came: IREE returned x's buffer, which it wrote."""
    def f(x):
        r = x.unsqueeze(0).clone()
        x[1, 1] = 0
        x[0] += 1
        return r

    assert_matches_eager(f, torch.tensor([[-1.0, 2.0], [0.0, 1.0]]))


def test_update_reading_other_elements_of_the_argument() -> None:
    """Each element of the new x reads x[0, 0, :2]: IREE wrote x in place in the
    dispatch that still read it."""
    def f(x):
        t = x.clone()
        torch.add(torch.tensor([[[3.0, -1.0]], [[-2.0, 0.0]], [[1.0, 4.0]], [[-3.0, 2.0]]]),
                  t.as_strided((2,), (1,)), out=x)

    assert_matches_eager(f, torch.tensor([[[-2.0, -1.0]], [[-3.0, 3.0]], [[4.0, 0.0]],
                                          [[1.0, 2.0]]]))


def test_input_multiplied_by_one_into_a_written_tensor() -> None:
    """w * 1 is w to IREE: it wrote x's update into w's buffer, though w is not
    consumed."""
    def f(x, w, pos, v):
        torch.mul(w, 1, out=x)
        x[pos] = v

    assert_matches_eager(f, torch.zeros(4, 3, dtype=torch.int64),
                         torch.arange(12).reshape(4, 3), torch.tensor(-3),
                         torch.tensor([7, 8, 9]))


def test_one_element_strided_slice_written() -> None:
    """`y[-1::2]` of a 1-long y was a stablehlo.slice [0:1:2], which IREE rejected
    once reshaped; one element has no step."""
    def f(y, w):
        y.unsqueeze(-1)[-1::2, None].index_put_((torch.tensor([0, -1, -1, 0]),), w,
                                                 accumulate=True)

    assert_matches_eager(f, torch.tensor(0), torch.tensor([[2]]))


def test_input_written_over_the_whole_tensor_then_updated() -> None:
    """`x[:, pos] = w` covers all of a 5x1 x: IREE folded the update to w and wrote the
    next update of x into w's buffer, though w is not consumed."""
    def f(x, pos, w):
        x[:, pos] = w
        x.view(1, 5, 1)[0, -4, ::3][0] = 1

    assert_matches_eager(f, torch.tensor([[1], [0], [3], [-1], [2]]), torch.tensor(-1),
                         torch.tensor([-1, -2, 0, 1, 2]))


def test_input_written_over_the_whole_tensor_with_a_constant_then_updated() -> None:
    """`x[..., pos, :, :] = literal` covers all of x: IREE took the literal's read-only
    buffer for x and failed to update it next (`PERMISSION_DENIED; buffer allows
    READ`); the write is now a select of the literal into a buffer of its own."""
    def f(x, pos, w):
        x[..., pos, :, :] = torch.tensor([[[1.0]], [[0.0]], [[-1.0]]])
        x.view(3, 1, 1)[-3, [-1], 0] = w
        return x * 2

    assert_matches_eager(f, torch.tensor([[[[2.0]]], [[[0.0]]], [[[1.0]]]]), torch.tensor(0),
                         torch.tensor(1.0))


def test_clone_of_an_input_transposed_over_a_unit_dimension_then_scattered() -> None:
    """Program 339 of seeds 5,000..: `t.t_()` of a 1x5 clone is a transpose that keeps
    the elements' order, which IREE folds to x's buffer; it scattered `v[i] = 0` into x
    (and sorted into it), though x is not consumed. x is passed as a copy."""
    def scatter(x, i):
        t = x.clone()
        t.t_()
        t.view(5)[i] = 0
        return t

    def unsqueezed(x, i):
        t = x[:, None].clone()
        t.t_()
        t.view(5).index_fill_(0, i, 0)
        return t

    def sort(x):
        t = x.clone()
        t.t_()
        return t.view(5).sort()[0]

    x = torch.tensor([[-1.0, 2.0, -2.0, 1.0, 0.0]])
    assert_matches_eager(scatter, x, torch.tensor([1, 4]))
    assert_matches_eager(unsqueezed, x[0], torch.tensor([1, 4]))
    assert_matches_eager(sort, x)


def test_input_times_one_returned_beside_its_update() -> None:
    """`x * 1` is x to IREE: it exported x's buffer as r and wrote `x[:, 1] = 5` into
    it (also through a transposed `index_add_`, found reducing a fuzzer program); r is
    now computed into a buffer of its own."""
    def times_one(x):
        r = x * 1
        x[:, 1] = 5
        return r

    def index_add(x, w, i):
        r = x * 1
        x.t().index_add_(1, i, w)
        return r

    x = torch.tensor([[1.0, -2.0, 1.0]])
    assert_matches_eager(times_one, x)
    assert_matches_eager(index_add, x, torch.tensor([[-1.0, 0.0, 2.0], [4.0, -2.0, -3.0],
                                                     [3.0, -4.0, 1.0]]),
                         torch.tensor([0, 0, 0]))


_OUT_OF_BOUNDS = '''
import torch, warnings, outofplace
warnings.simplefilter("ignore")

def index_add(c, i, v):
    c.index_add_(1, i, v)
    return c.sum()

def index_add_unit(c, i, v):  # into a dimension of size one
    c.index_add_(2, i[:1], v[:, :, :1])
    return c.sum()

def put_accumulate(c, i, v):
    c.index_put_((i,), v[:, 0, None].expand(-1, 4).clone(), accumulate=True)
    return c.sum()

for f, shape, dim in ((index_add_unit, (6, 2, 1, 4), 2), (index_add, (8, 4), 1),
                      (put_accumulate, (8, 4), 0)):
    c = torch.randn(shape)
    v = torch.randn(*shape[:dim], 2, *shape[dim + 1:])
    compiled = outofplace.compile(f, (c, torch.tensor([0, 1]), v))
    n = shape[dim]
    for i in ([0, n], [n + 3, 1], [-n - 1, 0], [n, n + 1], [100, -100]):
        for _ in range(10):
            on_iree, on_xla = c.clone(), c.clone()
            compiled.run((on_iree, torch.tensor(i), v), engine="iree")
            compiled.run((on_xla, torch.tensor(i), v), engine="xla")
            assert torch.equal(on_iree, on_xla), (f.__name__, shape, i)
print("same")
'''


@needs_iree
@needs_xla
def test_combining_scatter_out_of_bounds_is_dropped_on_iree() -> None:
    """A scatter index out of range drops its window (StableHLO's scatter; the policy of
    docs/api.md). IREE 3.13 writes it anyway (iree-org/iree#13580): into another
    element, or past the buffer, which corrupted the heap and aborted the process
    ("double free or corruption", probe fuzzer seed 5,001). A combining scatter
    (`index_add_`) gets the op's identity at such an index; a replacing one is not
    rewritten (docs/backends.md: use check_bounds=True). Run in a process of its own,
    which such an abort ends with a nonzero status."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _OUT_OF_BOUNDS], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "same", \
        done.stdout[-2000:] + done.stderr[-3000:]


@needs_iree
@needs_xla
def test_gather_out_of_bounds_is_clamped_on_iree() -> None:
    """A gather's start out of range is clamped (StableHLO's gather; the policy of
    docs/api.md). IREE 3.13 read past the operand instead (iree-org/iree#24881): `s[i]`
    at i = 16 of 16 rows gave 1.7e+31 (probe, hand-written reads)."""
    def rows(s, i):
        return s[i] * 1

    def take(s, i):
        return torch.take(s, i * 8 + 3)

    def row(s, i):
        return s[i[0]] * 1

    s = torch.randn(16, 8)
    for f in (rows, take, row):
        compiled = outofplace.compile(f, (s, torch.tensor([0, 1, 2])))
        for i in ([0, 5, 15], [16, 0, 1], [-17, 3, 4], [3, 20, 1]):
            assert_same_tree(compiled.run((s, torch.tensor(i)), engine="iree"),
                             compiled.run((s, torch.tensor(i)), engine="xla"),
                             f"{f.__name__} at {i}")
