"""frontend/strided_views.py: `as_strided` and `unfold` of a root written in place,
against eager on both paths, float32 and float64."""

from __future__ import annotations

import pytest
import torch

from differential import assert_matches_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def both_paths(f, *args):
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def read_after_write(x):
    windows = x.unfold(0, 3, 2)  # overlapping windows of x
    x.mul_(2)
    return windows.sum(-1)


def write_through_as_strided(x):
    diagonal = x.as_strided((3,), (5,))  # x's diagonal (4x4, stride 5)
    diagonal.add_(10)
    return x.sum()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f, shape", [(read_after_write, (7,)),
                                      (write_through_as_strided, (4, 4))],
                         ids=["read_after_write", "write_through_as_strided"])
def test_matches_eager_on_both_paths(f, shape, dtype):
    torch.manual_seed(0)
    both_paths(f, torch.randn(shape, dtype=dtype))


def write_through_as_strided_of_a_strided_argument(column, m):
    column.as_strided((2,), (3,), column.storage_offset() + 3).mul_(2)  # rows 1 and 2
    column.as_strided((1,), (1,)).view(-1)[m] = -1  # the storage's first element
    return column * 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_write_through_as_strided_of_a_strided_argument(dtype):
    """The as_strided of an argument that is itself strided (a column of the caller's
    matrix, or a view a graph break passes): its elements are found among the
    argument's by storage offset. A write through it was refused, as not in one
    contiguous tensor."""
    matrix = torch.arange(12, dtype=dtype).view(4, 3)
    both_paths(write_through_as_strided_of_a_strided_argument, matrix[:, 0],
               torch.tensor([True]))


def as_strided_of_a_view_at_a_runtime_position(x, pos):
    v = x[pos, 0].view(-1)  # a view at a runtime position, traced as a copy
    return v.as_strided((1,), (1,)) * 2


def test_as_strided_of_a_view_at_a_runtime_position_is_refused_not_crashed():
    """torch-mlir's as_strided of the traced copy of `x[pos, 0]` (0-d) indexed it with
    no index tensors, which crashed its lowering (a segfault: fuzz 10k run program
    1731); where such a view starts in storage is known only at the call: refused at its
    line."""
    import outofplace
    with pytest.raises(outofplace.UnsupportedMutationError, match="runtime position"):
        outofplace.compile(as_strided_of_a_view_at_a_runtime_position,
                           (torch.randn(2, 2), torch.tensor(1)))


def _writes_no_element_of_overlapping_elements(x, w):
    x.as_strided((2, 3), (0, 1))[1:1] = w  # rows share their elements; the slice is empty
    x.as_strided((3, 2), (1, 1))[:, 2:].mul_(2)
    return x + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_write_of_no_element_through_overlapping_elements(dtype):
    """An as_strided view whose elements overlap, written at no element: nothing is
    written, as in eager (it was refused as 'writing into an as_strided view whose
    elements overlap'; fuzz run program 4074 on the torch.compile path)."""
    args = (torch.randn(6, dtype=dtype), torch.empty(0, 3, dtype=dtype))
    assert_matches_eager(_writes_no_element_of_overlapping_elements, *args)
    by_dynamo(_writes_no_element_of_overlapping_elements,
              _writes_no_element_of_overlapping_elements, args, {})
