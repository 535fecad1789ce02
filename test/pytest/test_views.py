"""Writes through views and setitem, against eager (docs/index-categories.md).

Each case is one index category or view op; the program writes through the view and
reads the result, so a stale view or a wrong write-back shows as a mismatch.
"""

import pytest
import torch

import outofplace
from differential import assert_matches_eager


def set_int(b, v):
    b[3] = v
    return b.sum(0)


def set_tuple_of_slices(b, v):
    b[2:4, 1:3] = v


def set_none_and_slice(b, v):
    b[None, 2:4] = v


def set_int_tensor(b, i, v):
    b[i] = v


def fill_through_t(x):
    x.t()[3].fill_(1)


def view_taken_before_write(x):
    v = x[1]
    x.mul_(2)
    return v + 1


def overlapping_views(x):
    a, b = x[0:3], x[2:5]
    a.add_(1)
    b.mul_(2)
    return a.sum(), b.sum()


def view_of_view(x):
    x.view(2, 8)[1, 2:4].zero_()


def through_permute(x):
    x.permute(2, 0, 1)[0].add_(1)


def through_unsqueeze(x):
    x.unsqueeze(0)[0, 1].zero_()


def intermediate_through_view(x):
    t = x * 3
    t[1:3].mul_(0.5)
    return t


def split_element(x):
    x.split(2)[1].zero_()
    return x.sum()


def chunk_element(x):
    x.chunk(3, dim=1)[2].add_(1)


def unbind_element(x):
    x.unbind(0)[1].mul_(3)


def narrow_negative_start(x):
    x.narrow(1, -2, 2).fill_(3)


def strided_slice(b, v):
    b[1:9:2] = v


def negative_int_scalar(b):
    b[-1] = 0


def ellipsis_scalar(b):
    b[..., 0] = 7


def index_copy(cache, k):
    cache.index_copy_(1, torch.tensor([1, 5]), k)
    return cache.sum()


def index_fill(cache):
    cache.index_fill_(-1, torch.tensor([0, 2]), -1.0)


def index_fill_int(cache):
    cache.index_fill_(0, torch.tensor([0, 2]), 3)


def index_ops_functional_and_negative(x, i, s):
    """The functional forms, a 0-d index (refused by torch-mlir's lowering before the
    scatter builder took index_add), a negative index_fill index and a runtime read."""
    x.index_add_(1, torch.tensor(2), s[:, :1], alpha=2)
    x.index_fill_(0, torch.tensor([-1]), torch.tensor(5.0))
    return torch.index_copy(x, 0, i, s), x.index_add(0, i, s), x.index_fill(1, i, 2.5), x[i]


MASK = torch.tensor([True, False, True, False])


def mask_scalar(b, m):
    b[m] = 2.0


def mask_compacted_values(b, m, v):
    b[m] = v


def mask_pointwise_tagged(b, m):
    """sinh and cosh are PyTorch pointwise ops the hand list of elementwise names lacked
    (refused before it was read from torch.Tag.pointwise)."""
    b[m] = torch.sinh(b[m]) * 2 + b[m].cosh()


def mask_functional(b, m, v):
    """The functional index_put with a mask (torch-mlir's own lowering failed on it)."""
    return torch.index_put(b, (m,), v), torch.index_put(b, (m,), v[0], accumulate=True)


def mask_broadcast_row(b, m, v):
    b[m] = v


def mask_columns(b, m):
    b[:, m] = 5.0


def mask_accumulate(b, m, v):
    b.index_put_((m,), v, accumulate=True)


def runtime_column(cache, pos, k):
    cache[:, pos] = k
    return cache.sum()


def runtime_kv_step(cache, pos, k):
    cache[:, :, pos] = k


def runtime_two_positions(b, i, j):
    b[i, j] = 1.5


def negative_int_tensor(b, idx):
    b[idx] = 1.0
    return b[idx] * 2


def negative_accumulate(b, idx, v):
    b.index_put_((idx,), v, accumulate=True)


def open_end_through_transpose(x):
    x.t()[1:] = 1
    x.t()[::2] = 2


def read_through_to(x):
    y = x.to(torch.float32)  # the same tensor: writes through it reach x
    y.add_(1)
    return x * 2


def reread_after_write_through_transpose(x):
    # The write-back reads the bases of a non-box chain; the view read afterwards must
    # be re-derived from the new root, not served from a cache filled during the write.
    v = x.t()
    v[0].zero_()
    return v + 0, x.t()[1:3] * 2


def zero_size_writes(x, w):
    x.unsqueeze(0)[0, -1:-1].abs_()  # an empty slice: writes nothing
    x.narrow(-1, 4, 0)[...] = w  # an empty narrow at the very end
    x[2:2].zero_()
    return x + 0


def mask_selecting_nothing(x, m, w):
    x.select(0, 1).view(2)[m] = w  # an all-false mask and no values


def zero_size_reads(x, i):
    x.mul_(2)
    return x[2:2] + 1, x.narrow(0, 3, 0).sum(), x.movedim(0, 1)[1:1][i] * 2


def runtime_position_among_slices(x, pos, k):
    x[1:, pos] = k
    x[None, -1, ..., pos] = 5
    return x[:, pos] * 2, x[..., pos, None] + 1


def runtime_position_read_before_write(x, pos):
    y = x[pos, 1:3] * 1  # used before the write: the read of the old x
    x[-1, pos] = 7
    return y, x[None, pos]


def runtime_position_strided(x, pos, w):
    x[::2, :, pos] = w
    return x[1::2, 0, pos]


def through_narrow_of_flatten(x):
    x.flatten().unsqueeze(0).narrow(-1, 5, 3).mul_(2)  # not a box of x: written back
    x.t().narrow(0, -2, 1)[0, ::2] = 9


def through_movedim(x):
    x.movedim(-3, 2)[0, 1].zero_()
    x.movedim(0, 2)[1] = 4
    return x.movedim(1, 0) * 1


def through_swapaxes(x):
    x.swapaxes(0, 1).t()[0, 1:] = 3
    x.swapdims(0, 1)[0].neg_()


def through_mT(x):
    x.mT[0, 1:].add_(1)
    return x.mT * 2, x.mH + 1, x.adjoint() + 0


def through_diagonal(x):
    d = x.diagonal(1, 0, 2)  # taken before the writes, read after
    x.diagonal().add_(1)
    x.diagonal(-1, -1, 0)[1:] = 5
    return d * 2, x.diagonal(0, 1, 2) + 0


def through_diagonal_of_t(x):
    x.t().diagonal(-1).zero_()
    return x.diagonal(5) + 1  # empty


def list_views_along_a_dim(x):
    # The element's dimension is the list view's own `dim`, not guessed from shapes
    # (for element 0 every dimension of the same size fits).
    x.unbind(-1)[0].add_(10)
    x.unbind(-1)[-2][0, 1].zero_()
    x.unbind(1)[-1][1].neg_()
    x.split(1, dim=2)[-1].mul_(-1)
    x.chunk(2, dim=-2)[-1][..., 0] = 7


def runtime_position_augmented(x, pos, w):
    x[:, pos] += w  # a view of the pass: add, then its store at pos adds nothing
    x[1:, pos] -= 1
    x[-1, pos] *= 2
    x[None, 0, ..., pos] /= 4
    v = x[pos]
    v.mul_(3)
    x[pos] = v
    return x[:, pos] + 0


def runtime_position_read_then_written(x, pos, w):
    v = x[:, pos]
    scale = v.abs().max()  # read before the write: the same values in a copy and a view
    v.add_(w / scale)
    x[:, pos] = v
    return scale


def through_expand_to_own_shape(x, y):
    x.expand(1, 3).add_(y)  # expands nothing: no element is shared
    x.expand_as(x)[0, 1:] = 5


def mask_read_modify_store(x, m, w):
    x[m] *= 2  # read as the whole view, computed on, stored back with a select
    x[m] += w
    x[m] = 1.5
    x[m].mul_(2)  # a copy in eager too: x does not change
    return x + 0


def mask_expressions_stored_back(x, y, m):
    x[0, m] = y[0, m] + 1
    x[:, m] -= x[:, m] * 0.5
    x[..., m] = torch.where(x[..., m] > 0, x[..., m], 0.0)


def scatter_reduce_every_kind(x, i, s):
    x.scatter_reduce_(1, i, s, reduce="prod")
    x.scatter_reduce_(0, i, s, reduce="amin", include_self=False)
    x.scatter_reduce_(1, i[:, :1], s, reduce="sum", include_self=False)
    x.scatter_reduce_(0, i, s * 3, reduce="amax")


def copy_python_scalars(x, m):
    m[0].copy_(True)  # a bool where copy_ takes a tensor
    x[0].copy_(False)
    x[1].copy_(3)


def position_beside_index_tensors(x, pos, i):
    # eager applies pos as an int first: x[i, :, pos] has the batch first, x[pos, :, i]
    # keeps it last; all at once as index tensors, both would put it first
    x[i, :, pos] = x[i, :, pos] * 2
    x[pos, :, i] += 1
    x[:, pos, i.flip(0)] = x[pos, i, 0]
    return x[i, pos], x[None, pos, ..., i]


def through_as_strided(x):
    v = x.as_strided((2, 2), (1, 2))
    v.add_(1)  # returns v: later uses of its result see later writes too
    r = v * 2
    v[0].mul_(3)
    x[1] += 5
    return r, v.sum()


def through_unfold(x):
    u = x.unfold(1, 2, 3).transpose(0, 1)  # windows that do not overlap
    u[0].mul_(2)
    x[:, 1] -= 1
    return u + 0, x.unfold(1, 3, 1).sum(-1)  # overlapping windows, only read


def as_strided_of_as_strided(x):
    v = x.as_strided((4,), (1,), 1).as_strided((2,), (2,), 2)  # storage positions 2, 4
    r = v + 1
    x.clamp_(0, 1)
    v.mul_(3)
    return r, x[1:].as_strided((2, 2), (2, 1)).as_strided((3,), (1,)) * 2


def through_as_strided_of_a_view(x):
    x[1:].as_strided((3,), (2,), 1).neg_()


def fill_from_own_element(x, p):
    x.fill_(x[1, 1])  # eager reads the value (.item()) before it fills
    x.masked_fill_(x > 0, x[0, 1])
    x[p, [0, 2]] = x[[1, 0], p] + 1  # lists index as the tensors they spell
    return x[[[0], [2]], p]


def constant_copied_in(x, y):
    # torch-mlir's canonicaliser makes x a literal after these copies, and its folders
    # crashed (a strided slice, a comparison of float16) or folded sign(0) to 1 on it
    x[:] = torch.tensor([[0.0, 2.0, -3.0], [4.0, -2.0, 1.0]])
    x.split(1)[1][:, -1::3] = -1.5
    y.view(1, 4).copy_(torch.tensor([[-1.0, 0.0, -2.0, 1.0]], dtype=torch.float16))
    y.mT.sign_()
    y[:] = 0
    y.select(0, 0).sign_()


def negative_int_fill_through_a_constant_mask(x):
    # torch-mlir turns this into a constant after its own decompositions, reading -2 as
    # 2**64 - 2: negative int scalars of float ops are made floats first
    x.split(3)[0].masked_fill_(torch.tensor(True), -2)  # the whole of x
    x.addcmul_(x, torch.tensor([-1.0, 2.0, 1.0]), value=-1)


def sign_of_zeros(x):
    t = torch.zeros(2)  # a factory torch-mlir would fold, then fold sign(0) to 1
    t.contiguous().sign_()
    x[1] = t[0]
    return t


def as_strided_of_one_element(x):
    r = x[None].as_strided((1,), (1,)).clone()
    x.view(1)[0] = 5
    return r, x.as_strided((2, 2), (0, 0)) + 1


INDEX = torch.tensor([2, 0, 1])  # a captured constant, used by several ops after import


def index_tensors_adjacent(x, v):
    x[1:, INDEX, torch.tensor([[3], [-1]])] = v  # batch [2, 3] where dims 1, 2 were


def index_tensors_separated(x, v):
    x[INDEX, :, torch.tensor([-1])] = v  # a slice between them: the batch goes first


def index_tensors_accumulate_duplicates(x, v):
    x.index_put_((torch.tensor([1, 1, 0]), INDEX.expand(2, 3)), v, accumulate=True)


def scatter_reduce_mean(x, i, s):
    x.scatter_reduce_(1, i, s, reduce="mean")  # integer x: floor division, as eager
    y = x[:, :2].clone()
    y.scatter_reduce_(0, i[:, :2], s[:, :2] * 3, reduce="mean", include_self=False)
    return y, x.scatter_reduce(0, i, s, "mean", include_self=False)


def as_strided_read_after_writes(x):
    # torch-mlir imports as_strided as a gather where it stands; each use gets its own,
    # so reads see the writes made since the view was taken.
    v = x.as_strided((3,), (2,))
    w = v[1:]
    x.add_(1)
    r = w * 2
    x.mul_(3)
    return r, v


CASES = [
    (sign_of_zeros, (torch.randn(2),)),
    (negative_int_fill_through_a_constant_mask, (torch.randn(3),)),
    (scatter_reduce_mean, (torch.randn(3, 4), torch.tensor([[0, 1, 0], [2, 2, 1]]),
                           torch.randn(2, 3))),
    (scatter_reduce_mean, (torch.randint(-9, 9, (3, 4)), torch.tensor([[0, 1, 0], [2, 2, 1]]),
                           torch.randint(-9, 9, (2, 3)))),
    (constant_copied_in, (torch.zeros(2, 3), torch.ones(1, 4, dtype=torch.float16))),
    (as_strided_of_one_element, (torch.tensor(2.0),)),
    (as_strided_of_as_strided, (torch.randn(6),)),
    (fill_from_own_element, (torch.randn(3, 4), torch.tensor(1))),
    (through_as_strided, (torch.arange(6.0),)),
    (through_unfold, (torch.randn(3, 8),)),
    (through_as_strided_of_a_view, (torch.arange(8.0),)),
    (position_beside_index_tensors, (torch.randn(3, 4, 5), torch.tensor(2),
                                     torch.tensor([0, -1, 1]))),
    (position_beside_index_tensors, (torch.randn(3, 4, 5), torch.tensor(-3),
                                     torch.tensor([[1], [2]]))),
    (copy_python_scalars, (torch.randn(2, 3), torch.tensor([[False, True], [True, False]]))),
    (index_tensors_adjacent, (torch.randn(3, 3, 4, 2), torch.randn(2, 3, 2))),
    (index_tensors_adjacent, (torch.randn(3, 3, 4, 2), torch.tensor(5.0))),
    (index_tensors_separated, (torch.randn(3, 4, 5), torch.randn(3, 4))),
    (index_tensors_separated, (torch.randn(3, 4, 5), torch.randn(4))),
    (index_tensors_accumulate_duplicates, (torch.randn(2, 3, 4), torch.randn(2, 3, 4))),
    (index_tensors_accumulate_duplicates, (torch.randint(-9, 9, (2, 3)),
                                           torch.randint(-9, 9, (3,)))),
    (as_strided_read_after_writes, (torch.arange(6.0),)),
    (scatter_reduce_every_kind, (torch.randn(3, 4), torch.tensor([[0, 1, 0], [2, 2, 1]]),
                                 torch.randn(2, 3))),
    (scatter_reduce_every_kind, (torch.randint(-9, 9, (3, 4)),
                                 torch.tensor([[0, 1, 0], [2, 2, 1]]),
                                 torch.randint(-9, 9, (2, 3)))),
    (mask_read_modify_store, (torch.randn(4, 3), MASK, torch.randn(3))),
    (mask_expressions_stored_back, (torch.randn(2, 4), torch.randn(2, 4), MASK)),
    (through_expand_to_own_shape, (torch.randn(1, 3), torch.randn(3))),
    (runtime_position_augmented, (torch.randn(3, 4), torch.tensor(-2), torch.randn(3))),
    (runtime_position_read_then_written, (torch.randn(3, 4), torch.tensor(1),
                                          torch.randn(3))),
    (list_views_along_a_dim, (torch.arange(8.0).reshape(2, 2, 2),)),
    (through_narrow_of_flatten, (torch.randn(2, 4),)),
    (through_movedim, (torch.randn(2, 3, 4),)),
    (through_swapaxes, (torch.randn(3, 4),)),
    (through_mT, (torch.randn(2, 3, 4),)),
    (through_diagonal, (torch.randn(3, 4, 5),)),
    (through_diagonal_of_t, (torch.randn(4, 2),)),
    (runtime_position_among_slices, (torch.randn(3, 4), torch.tensor(2), torch.randn(2))),
    (runtime_position_among_slices, (torch.randn(3, 4), torch.tensor(-4), torch.randn(1))),
    (runtime_position_read_before_write, (torch.randn(4, 4), torch.tensor(-1))),
    (runtime_position_strided, (torch.randn(5, 2, 4), torch.tensor(3), torch.randn(3, 2))),
    (zero_size_writes, (torch.randn(1, 4), torch.tensor(1.0))),
    (zero_size_writes, (torch.randn(3, 4), torch.tensor(1.0))),
    (mask_selecting_nothing, (torch.randn(3, 2), torch.tensor([False, False]),
                              torch.empty(0))),
    (zero_size_reads, (torch.randn(3, 4), torch.empty(0, dtype=torch.int64))),
    (reread_after_write_through_transpose, (torch.randn(4, 3),)),
    (negative_int_tensor, (torch.zeros(4), torch.tensor([1, -1]))),
    (negative_accumulate, (torch.zeros(4), torch.tensor([-1, -1, 0]), torch.ones(3))),
    (open_end_through_transpose, (torch.randn(4, 6),)),
    (read_through_to, (torch.randn(3),)),
    (runtime_column, (torch.randn(2, 8), torch.tensor(3), torch.randn(2))),
    (runtime_column, (torch.randn(2, 8), torch.tensor(-2), torch.randn(2))),
    (runtime_column, (torch.randn(2, 8), torch.tensor(3, dtype=torch.int32), torch.randn(2))),
    (runtime_kv_step, (torch.randn(2, 3, 8, 4), torch.tensor(5), torch.randn(2, 3, 4))),
    (runtime_kv_step, (torch.randn(2, 3, 8, 4), torch.tensor(0), torch.randn(4))),
    (runtime_two_positions, (torch.randn(4, 5), torch.tensor(1), torch.tensor(-1))),
    (mask_scalar, (torch.randn(4, 3), MASK)),
    (mask_scalar, (torch.randn(4, 3), torch.rand(4, 3) > 0.5)),
    (mask_compacted_values, (torch.randn(4, 3), MASK, torch.randn(2, 3))),
    (mask_compacted_values, (torch.randn(6), MASK.repeat(2)[:6], torch.randn(3))),
    (mask_broadcast_row, (torch.randn(4, 3), MASK, torch.randn(3))),
    (mask_functional, (torch.randn(4, 3), MASK, torch.randn(2, 3))),
    (mask_pointwise_tagged, (torch.randn(4, 3), MASK)),
    (mask_columns, (torch.randn(2, 4), MASK)),
    (mask_accumulate, (torch.randn(4, 3), MASK, torch.randn(2, 3))),
    (mask_scalar, (torch.arange(12).reshape(4, 3), MASK)),
    (split_element, (torch.randn(6),)),
    (chunk_element, (torch.randn(2, 6),)),
    (unbind_element, (torch.randn(3, 2),)),
    (narrow_negative_start, (torch.randn(4, 5),)),
    (strided_slice, (torch.randn(10), torch.randn(4))),
    (negative_int_scalar, (torch.randn(8, 4),)),
    (ellipsis_scalar, (torch.randn(3, 4),)),
    (index_copy, (torch.randn(2, 8, 3), torch.randn(2, 2, 3))),
    (index_fill, (torch.randn(2, 8, 3),)),
    (index_fill_int, (torch.arange(12).reshape(4, 3),)),
    (index_ops_functional_and_negative, (torch.randn(4, 4), torch.tensor([1, 3, 0, 2]),
                                         torch.randn(4, 4))),
    (set_int, (torch.randn(8, 4), torch.randn(4))),
    (set_tuple_of_slices, (torch.randn(8, 4), torch.randn(2, 2))),
    (set_none_and_slice, (torch.randn(6, 2), torch.randn(2, 2))),
    (set_int_tensor, (torch.randn(6, 2), torch.tensor([0, 3]), torch.randn(2, 2))),
    (fill_through_t, (torch.randn(4, 5),)),
    (view_taken_before_write, (torch.randn(4, 5),)),
    (overlapping_views, (torch.randn(6),)),
    (view_of_view, (torch.randn(4, 4),)),
    (through_permute, (torch.randn(2, 3, 4),)),
    (through_unsqueeze, (torch.randn(3),)),
    (intermediate_through_view, (torch.randn(5),)),
]


@pytest.mark.parametrize("f, args", CASES, ids=[f"{f.__name__}-{i}" for i, (f, _) in
                                                 enumerate(CASES)])
def test_write_through_view_matches_eager(f, args):
    assert_matches_eager(f, *args)


def test_write_into_an_expansion_is_refused():
    def f(x):
        x.expand(3, 4)[:, 1:].add_(1)  # eager: each element of x[1:] three times

    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=r"test_views.py:\d+: unsupported mutation by torch.aten.expand"):
        outofplace.compile(f, (torch.randn(4),))


def test_write_into_one_copy_of_an_expansion_is_a_write_into_the_tensor():
    def f(x):
        x.expand(3, 4)[0].add_(1)  # x itself

    assert_matches_eager(f, torch.randn(4))


def test_write_through_overlapping_as_strided_is_refused():
    def f(x):
        x.as_strided((2, 2), (1, 1)).add_(1)  # x[1] is in both rows: eager adds twice

    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=r"test_views.py:\d+: unsupported mutation by torch.aten.as_strided: "
                             r"writing into an as_strided view whose elements overlap"):
        outofplace.compile(f, (torch.randn(6),))


def test_write_through_as_strided_is_one_scatter_back():
    """The write lands in a gathered copy, scattered back at the elements' positions."""
    def f(x):
        x.as_strided((2, 2), (1, 2), 1).mul_(2)

    text = assert_matches_eager(f, torch.randn(6)).stablehlo
    assert text.count('"stablehlo.scatter"') == 1 and text.count('"stablehlo.gather"') == 1
    assert "dense<[[1], [3], [2], [4]]> : tensor<4x1xi64>" in text


def test_static_index_out_of_bounds_is_index_error():
    def f(b):
        b.select(0, 8).zero_()

    with pytest.raises(IndexError, match="index 8 out of range"):
        outofplace.compile(f, (torch.randn(8, 2),))


def test_bool_mask_is_one_select_without_nonzero():
    compiled = outofplace.compile(mask_compacted_values, (torch.randn(4, 3), MASK,
                                                          torch.randn(2, 3)))
    text = compiled.stablehlo
    assert text.count("stablehlo.select") == 1
    assert "stablehlo.scatter" not in text and "nonzero" not in text


def test_runtime_position_is_one_dynamic_update_slice():
    args = (torch.randn(2, 3, 8, 4), torch.tensor(5), torch.randn(2, 3, 4))
    compiled = outofplace.compile(runtime_kv_step, args)
    text = compiled.stablehlo
    assert text.count("stablehlo.dynamic_update_slice") == 1
    assert "stablehlo.scatter" not in text
    assert compiled.io_map == {0: 0}
    for pos in (0, 7, -1, -8):  # one compiled program, positions only known at run time
        cache = torch.randn(2, 3, 8, 4)
        eager_cache = cache.clone()
        k = torch.randn(2, 3, 4)
        compiled(cache, torch.tensor(pos), k)
        runtime_kv_step(eager_cache, torch.tensor(pos), k)
        torch.testing.assert_close(cache, eager_cache)


def test_slice_plus_equals_is_one_dynamic_update_slice():
    def f(b, v):
        b[2:5] += v

    compiled = assert_matches_eager(f, torch.randn(8), torch.randn(3))
    assert compiled.stablehlo.count("stablehlo.dynamic_update_slice") == 1


def test_runtime_position_warns_about_its_out_of_bounds_policy():
    with pytest.warns(outofplace.OutOfBoundsPolicyWarning,
                      match=r"test_views.py:\d+: a runtime position out of bounds is "
                            r"clamped into range"):
        outofplace.compile(runtime_column, (torch.randn(2, 8), torch.tensor(3),
                                            torch.randn(2)))


def test_index_copy_is_one_scatter_of_whole_slices():
    """One index per copied slice, not per element: the scatter's windows are whole
    slices of the other dimensions (JAX's form of c.at[:, :, idx].set(k))."""
    args = (torch.randn(2, 3, 8, 4), torch.randn(2, 3, 2, 4))
    compiled = assert_matches_eager(index_copy_at_positions, *args)
    text = compiled.stablehlo
    assert text.count('"stablehlo.scatter"') == 1
    assert "update_window_dims = [0, 1, 3], inserted_window_dims = [2], " \
           "scatter_dims_to_operand_dims = [2], index_vector_dim = 1" in text
    assert "tensor<2x1xi64>" in text and "concatenate" not in text


def test_index_tensors_on_several_dims_are_one_scatter():
    """`x[i, :, j] = v`: indexed dimensions that are neither one nor the leading ones, so
    one index per element of the update (the form IREE takes too): the broadcast index
    tensors and an iota along the slice between them; a slice separates them, so the
    batch dimension comes first in the update, as in eager's `x[i, :, j]`. torch-mlir's
    own lowering fails on this case."""
    compiled = assert_matches_eager(index_tensors_separated, torch.randn(3, 4, 5),
                                    torch.randn(3, 4))
    text = compiled.stablehlo
    assert text.count('"stablehlo.scatter"') == 1
    assert "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = "\
           "[0, 1, 2], scatter_dims_to_operand_dims = [0, 1, 2], index_vector_dim = 2>" in text
    assert "stablehlo.iota dim = 1 : tensor<3x4x1xi64>" in text
    # Constant indices, broadcast over the update and folded; -1 counted from the end.
    assert "dense<[[[2], [2], [2], [2]], [[0], [0], [0], [0]], [[1], [1], [1], [1]]]> : " \
           "tensor<3x4x1xi64>" in text and "dense<4> : tensor<3x4x1xi64>" in text


def test_index_tensors_on_the_leading_dims_scatter_whole_windows():
    """`x[i, j] = v` indexes the leading dimensions: one index per window, no column for
    the whole last dimension."""
    def f(x, i, j, v):
        x[i, j] = v

    compiled = assert_matches_eager(f, torch.randn(3, 4, 5), torch.tensor([2, 0]),
                                    torch.tensor([1, 3]), torch.randn(2, 5))
    assert "update_window_dims = [1], inserted_window_dims = [0, 1], " \
           "scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1" in compiled.stablehlo


def test_write_after_a_merging_view_is_an_update_of_that_view():
    """x.view(2, 6)[1, 2:4]: no box of x, but a box of the view: one dynamic_update_slice
    of the reshaped x, reshaped back; no scatter with an index per element."""
    def f(x, v):
        x.view(2, 6)[1, 2:4] = v
        x[1:].view(4, 2)[1:3, 1] += v

    text = assert_matches_eager(f, torch.randn(3, 4), torch.randn(2)).stablehlo
    assert text.count("stablehlo.dynamic_update_slice") == 3
    assert "scatter" not in text


def index_copy_at_positions(cache, k):
    cache.index_copy_(2, torch.tensor([1, 5]), k)


def test_strided_write_is_the_cheaper_of_scatter_and_select():
    """A few strided rows of a big buffer: a scatter at iota positions (the update's bytes);
    half of a small buffer: pad+select (no index tensor)."""
    def rows(c, k):
        c[:, 0:64:8] = k

    few = assert_matches_eager(rows, torch.randn(2, 64, 4), torch.randn(2, 8, 4))
    assert few.stablehlo.count('"stablehlo.scatter"') == 1
    assert "stablehlo.iota" in few.stablehlo and "stablehlo.pad" not in few.stablehlo

    def every_other(b, v):
        b[::2] = v

    select = assert_matches_eager(every_other, torch.randn(10), torch.randn(5))
    assert "stablehlo.pad" in select.stablehlo and "scatter" not in select.stablehlo


def test_write_through_permute_is_one_dynamic_update_slice():
    """Reordering views keep the box: the update is permuted back; no scatter."""
    def f(x, v):
        x.permute(2, 0, 1)[1:3, :, 0] = v
        x.movedim(0, -1)[..., 1].neg_()

    compiled = assert_matches_eager(f, torch.randn(2, 3, 4), torch.randn(2, 2))
    text = compiled.stablehlo
    assert text.count("stablehlo.dynamic_update_slice") == 2
    assert '"stablehlo.scatter"' not in text


def write_through_as_strided_of_a_copying_reshape(x):
    t = x * 2
    v = t.permute(1, 0).reshape(-1).as_strided((3,), (1,))  # reshape copied: v is apart
    v.add_(100)
    return v, t


def test_write_through_as_strided_of_a_reshape_that_copied():
    """The clone that makes the copy explicit has storage of its own: reads through the
    as_strided were re-taken from the reshape's input and lost the write (fuzzer)."""
    assert_matches_eager(write_through_as_strided_of_a_copying_reshape, torch.randn(2, 3))


def test_every_entry_of_the_view_table_is_a_view_op():
    """views.VIEW_OPS names ops the pass takes as views (op_registry.viewed_operand reads
    the schemas): an entry of another op would never be reached."""
    from outofplace import op_registry
    from outofplace.transforms.views import VIEW_OPS

    for name in VIEW_OPS:
        effects = op_registry.effects(name)
        assert name == "torch.aten.index.Tensor" or effects is not None and \
            effects.is_view and effects.result_views == 0, name


@pytest.mark.parametrize("size", [0, 1, 5])
def test_slice_normaliser_is_eagers(size):
    """indexing.clamp_slice and slice_length, which every constant slice of a read or a
    write goes through, give eager's elements for any bounds."""
    from outofplace.indexing import INT64_MAX, clamp_slice, slice_length

    bounds = [None, -INT64_MAX, -7, -5, -1, 0, 1, 2, 5, 7, INT64_MAX]
    for start in bounds:
        for end in bounds:
            for step in (1, 2, 3):
                expected = torch.arange(size)[start:end:step].tolist()
                first, last = clamp_slice(start, end, size)
                assert list(range(first, last, step)) == expected, (start, end, step)
                assert slice_length(first, last, step) == len(expected)


def test_index_normaliser_is_eagers():
    """A constant index: from the end when negative, eager's IndexError outside the
    dimension (indexing.normalise_index, at the op's line)."""
    from outofplace.errors import UserIndexError
    from outofplace.indexing import normalise_index
    from torch_mlir import ir

    with ir.Context(), ir.Location.unknown():
        op = ir.Operation.create("test.op")
        for index in range(-6, 6):
            if -4 <= index < 4:
                assert normalise_index(index, 4, op) == torch.arange(4)[index].item()
            else:
                with pytest.raises(IndexError):
                    torch.arange(4)[index]
                with pytest.raises(UserIndexError, match=f"index {index} is out of bounds"):
                    normalise_index(index, 4, op)


def masks_the_program_spells(x, y):
    a = x[torch.tensor([True, False, True])]
    x[torch.tensor([False, True, True]), 1] = 5
    b = x[:, torch.tensor([True, False])].sum()
    x[..., torch.tensor([[True, False], [False, False], [True, True]])] *= y[0, 0]
    return a * 2, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masks_the_program_spells_index_as_their_trues_on_both_paths(dtype) -> None:
    """A mask written as a literal has known values, so its reads have a known shape:
    returned, summed, stored at other positions (refused as "its shape depends on the
    mask's values" by outofplace.compile; dynamo compiled them)."""
    from differential import by_dynamo
    args = (torch.randn(3, 2, dtype=dtype), torch.randn(2, 2, dtype=dtype))
    assert_matches_eager(masks_the_program_spells, *args)
    by_dynamo(masks_the_program_spells, masks_the_program_spells, args, {})


def masks_beside_runtime_positions(x, m, pos, w, y, m2):
    x[m, 2:, pos] = w  # x[:, :, pos][m, 2:]
    y[pos, m2] *= 2
    y[:, pos, torch.tensor([True, False, True])] += 1
    return y[pos, torch.tensor([False, True])].sum() + x.sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_mask_beside_runtime_positions_indexes_the_positions_view(dtype) -> None:
    """Eager selects at a 0-d integer tensor as at an int, before it indexes with the
    mask: `x[m, 2:, pos]` is `x[:, :, pos][m, 2:]`, a masked write through a view at a
    runtime position (refused as "a runtime position ... together with a mask")."""
    from differential import by_dynamo

    def arguments():
        return (torch.randn(4, 5, 3, dtype=dtype), torch.tensor([True, False, True, True]),
                torch.tensor(1), torch.tensor(2.5, dtype=dtype),
                torch.randn(3, 2, 3, dtype=dtype), torch.tensor([False, True]))
    compiled = assert_matches_eager(masks_beside_runtime_positions, *arguments())
    x, m, _, w, y, m2 = arguments()
    for position in (0, 1, -1):  # one program for every position
        mine, theirs = (x.clone(), y.clone()), (x.clone(), y.clone())
        torch.testing.assert_close(
            compiled(mine[0], m, torch.tensor(position), w, mine[1], m2),
            masks_beside_runtime_positions(theirs[0], m, torch.tensor(position), w,
                                           theirs[1], m2))  # (a sum: XLA's order)
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    by_dynamo(masks_beside_runtime_positions, masks_beside_runtime_positions, arguments(), {})


def masked_values_beside_unit_dimensions(x, m, w, z):
    x[m, 3] *= w  # w: [1], broadcast against the masked values' count
    x[m] -= z  # z: [1, 5]: a unit dimension, then the columns after the mask
    return x * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_values_beside_an_operand_of_unit_dimensions(dtype) -> None:
    """An operand of shape [1] (or [1, *after the mask]) broadcasts against the masked
    values whatever their count: it was refused as "not broadcast over the dimensions
    after the mask"."""
    from differential import by_dynamo
    args = (torch.randn(5, 5, dtype=dtype), torch.tensor([True, False, False, True, True]),
            torch.tensor([2.0], dtype=dtype), torch.randn(1, 5, dtype=dtype))
    assert_matches_eager(masked_values_beside_unit_dimensions, *args)
    by_dynamo(masked_values_beside_unit_dimensions, masked_values_beside_unit_dimensions,
              args, {})
