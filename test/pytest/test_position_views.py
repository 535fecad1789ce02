"""`x[pos]` with a runtime position (a 0-d integer tensor) is a view, as in eager: a
select at a runtime index. torch.export traces it as `index.Tensor` (a copy); the pass
takes it as a view of x (op_registry.is_position_view): later reads re-derive it from x's
newest value, and a write into it is an `index_put` of x at the same positions (one
dynamic_update_slice).
"""

import pytest
import torch

import outofplace
from differential import assert_matches_eager


def read_then_base_written(x, pos):
    y = x[pos]
    x.add_(1)  # eager's y, a view, shows this
    return y * 2


def write_into_read(x, pos):
    y = x[pos]
    y.add_(1)  # writes row pos of x


def augmented(x, pos, w):
    x[pos] += w
    x[pos, 1:] *= 2
    x[1:, pos] -= w


def set_element_then_read(x, pos, v):
    y = x[pos]
    x[pos, 1] = v
    return y + 0, x[pos] * 2


def nested_writes(x, pos, j):
    x[pos][j] = 5  # a position view of a position view
    x[pos][1].mul_(3)  # a select of a position view
    x[pos][j].add_(x[0, 0])
    return x[pos][j] + 0


def two_positions(x, p, q):
    y = x[p, q]
    y.mul_(2)
    x.add_(1)
    return y + 0, x[p][q] * 1


def read_stays_plain(x, pos):
    y = x[pos] * 2  # used before x is written: the read of the old x, once
    x.add_(1)
    return y


def stored_elsewhere(x, pos, w):
    v = x[pos]
    v.add_(w)  # writes x[pos]
    x[pos - 1] = v


def stale_read(x, pos):
    r = x[:, pos]
    x.neg_()  # eager's r, a view, shows this
    return r


def written_through_method(x, pos, w):
    x[pos].mul_(w)
    x[:, pos].copy_(w.flip(0))
    return x[pos, pos]


def read_after_clone_and_write(x, pos):
    r = x[:, pos]
    x.neg_()
    c = x[:, pos].clone()
    x.mul_(2)
    return r, c


def position_written_after_the_read(x, pos):
    y = x[pos]
    pos.add_(1)  # eager's y stays the row at the old position
    y.mul_(2)
    return y[1:] + 0, pos + 0


def views_of_a_position_view(x, pos):
    y = x[pos]
    y[1:].zero_()
    y.unsqueeze(0)[0, 0] = 9
    return x[pos, :2].sum()


def int32_position_through_slice(x, pos):
    y = x[1:, pos]
    y.zero_()
    x.mul_(3)
    return y + 1


def copies_between_rows(x, p, q):
    x[p] = x[q]  # traced as index_put_(x, [p], x[q]): rows, identical or disjoint
    x[q].add_(x[p])
    return x[p] * 1


def of_a_local(x, pos):
    z = torch.zeros(4, 3)
    y = z[pos]
    y.fill_(2)
    z.add_(x)
    return z * 1, y + 0


def through_reshape_and_transpose(x, pos):
    x.view(3, 4)[pos] += 1  # a position view of a reshape: written back through it
    x.t()[pos].zero_()
    return x.view(3, 4)[pos] + 0


def positions_between_static_views(x, p, q):
    x[1:][p][1:][q] = 5  # slice, position, slice, position
    y = x[1:][p]
    x.mul_(2)
    return y * 1


def returned_after_its_base_is_written(x, pos):
    y = x[pos]
    x.zero_()
    return y


def computed_positions(x, i):
    y = x[i + 1, (i * 2) % 3]
    y.add_(10)
    return x[i + 1] * 1


class Cache(torch.nn.Module):
    """A buffer read at a runtime position, written, then the read used."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 6, 4))

    def forward(self, k, pos):
        slot = self.cache[:, pos]
        slot.copy_(k)  # writes the cache's column pos
        self.cache.mul_(0.5)
        return slot.sum(-1)


CASES = [
    (read_then_base_written, (torch.randn(4, 3), torch.tensor(1))),
    (read_then_base_written, (torch.randn(4, 3), torch.tensor(-1))),
    (write_into_read, (torch.randn(4, 3), torch.tensor(2))),
    (augmented, (torch.randn(4, 3), torch.tensor(-2), torch.randn(3))),
    (set_element_then_read, (torch.randn(4, 3), torch.tensor(3), torch.tensor(7.0))),
    (nested_writes, (torch.randn(4, 3), torch.tensor(1), torch.tensor(-1))),
    (two_positions, (torch.randn(4, 3), torch.tensor(3), torch.tensor(0))),
    (read_stays_plain, (torch.randn(4, 3), torch.tensor(2))),
    (stored_elsewhere, (torch.randn(4, 4), torch.tensor(1), torch.randn(4))),
    (stale_read, (torch.randn(3, 4), torch.tensor(1))),
    (written_through_method, (torch.randn(4, 4), torch.tensor(2), torch.randn(4))),
    (read_after_clone_and_write, (torch.randn(3, 4), torch.tensor(1))),
    (position_written_after_the_read, (torch.randn(4, 3), torch.tensor(0))),
    (views_of_a_position_view, (torch.randn(4, 3), torch.tensor(-3))),
    (copies_between_rows, (torch.randn(4, 3), torch.tensor(1), torch.tensor(-1))),
    (copies_between_rows, (torch.randn(4, 3), torch.tensor(2), torch.tensor(2))),
    (of_a_local, (torch.randn(4, 3), torch.tensor(-4))),
    (through_reshape_and_transpose, (torch.randn(4, 3), torch.tensor(2))),
    (positions_between_static_views, (torch.randn(4, 3, 5), torch.tensor(-1),
                                      torch.tensor(1, dtype=torch.int16))),
    (returned_after_its_base_is_written, (torch.randn(4, 3), torch.tensor(1, dtype=torch.int8))),
    (computed_positions, (torch.randn(4, 3), torch.tensor(2))),
    (Cache(), (torch.randn(2, 4), torch.tensor(3))),
    (int32_position_through_slice, (torch.randn(3, 4), torch.tensor(2, dtype=torch.int32))),
]


@pytest.mark.parametrize("f, args", CASES, ids=[
    f"{getattr(f, '__name__', type(f).__name__)}-{i}" for i, (f, _) in enumerate(CASES)])
def test_position_view_matches_eager(f, args):
    assert_matches_eager(f, *args)


def _count(text: str, op: str) -> int:
    """Ops in generic (`"stablehlo.gather"(...)`) and pretty (`stablehlo.add %a`) form."""
    return text.count(f'"stablehlo.{op}"') + text.count(f" stablehlo.{op} ")


def test_augmented_assignment_is_one_read_and_one_update():
    """`x[pos] += w`: the store of the view at its own positions adds nothing."""
    def f(x, pos, w):
        x[pos] += w

    text = assert_matches_eager(f, torch.randn(4, 3), torch.tensor(2), torch.randn(3)).stablehlo
    assert _count(text, "gather") == 1 and _count(text, "dynamic_update_slice") == 1
    assert "stablehlo.scatter" not in text


def test_read_not_affected_by_a_write_stays_one_plain_read():
    """Used before its root is written (or never written into), the read is the one
    index of the old value it was: no re-read, no write-back."""
    text = assert_matches_eager(read_stays_plain, torch.randn(4, 3), torch.tensor(2)).stablehlo
    assert _count(text, "gather") == 1
    assert "dynamic_update_slice" not in text and "stablehlo.scatter" not in text


def test_read_used_before_and_after_a_write_is_read_at_both_versions():
    def f(x, pos):
        y = x[pos]
        a = y * 2
        x.add_(1)
        return a, y * 3

    text = assert_matches_eager(f, torch.randn(4, 3), torch.tensor(-1)).stablehlo
    assert _count(text, "gather") == 2
    assert "dynamic_update_slice" not in text


def adds_its_own_row(x, pos):
    x.add_(x[pos])  # eager: RuntimeError, the row shares elements with x


def test_operand_that_is_a_part_of_self_through_a_position_is_refused():
    args = (torch.randn(4, 3), torch.tensor(1))
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        adds_its_own_row(*[a.clone() for a in args])
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(adds_its_own_row, args)
    error = info.value
    assert error.op == "torch.aten.add_.Tensor"
    assert error.reason.startswith("an operand is a part of the tensor it writes, read at a "
                                   "runtime position")
    assert error.location.endswith(
        f"test_position_views.py:{adds_its_own_row.__code__.co_firstlineno + 1}")



# Eager's x[pos] has the strides of x; the traced read is contiguous. Layout-dependent
# ops decide copy or alias as eager does (fuzzer: `x0[:, :, :, pos1].contiguous()[:] = 0`
# wrote x0 where eager writes a copy).
def contiguous_of_a_strided_read_copies(x, pos):
    x[:, :, pos].contiguous()[:] = 0


def contiguous_of_a_contiguous_read_aliases(x, pos):
    x[pos].contiguous().add_(1)


def contiguous_of_a_transposed_view_copies(x, pos):
    z = x[:, :, pos].transpose(0, 1).contiguous()
    z[0] = 7


def reshape_that_eager_copies(x, pos):
    y = x[:, pos].reshape(-1)
    y[0] = 100
    return y


def flatten_that_eager_views(x, pos):
    y = x[:, :, pos].flatten()  # strides (12, 4): one stride of 4 after flattening
    y[1] = 9


@pytest.mark.parametrize("f", [
    contiguous_of_a_strided_read_copies, contiguous_of_a_contiguous_read_aliases,
    contiguous_of_a_transposed_view_copies, reshape_that_eager_copies,
    flatten_that_eager_views])
def test_layout_dependent_ops_copy_or_alias_as_in_eager(f):
    assert_matches_eager(f, torch.arange(24.0).reshape(2, 3, 4), torch.tensor(1))

