"""Writes through a select, slice or runtime position of an expand at the dimensions it
broadcasts (frontend/expanded_positions.py), and through an expand that broadcasts
nothing (views.py): eager writes each element once, into the expanded tensor; both
paths match it. They were refused ("writing into an expanded tensor") on
outofplace.compile alone (fuzz run programs 561, 1081)."""

import warnings

import pytest
import torch

import outofplace
from differential import run_on_path


def _position_of_a_new_dimension(x, p, q):
    x.expand(3, -1, -1)[p, q, 0:] = 2  # x[q, :]
    x.expand(2, -1, -1)[0, 1] += 1  # x[1]
    return x * 1


def _select_and_slice_of_a_broadcast_dimension(x, p, q):
    v = x.unsqueeze(1).expand(-1, 2, -1)
    r = v[:, p]  # a view of x, read again after the writes
    v[:, q, 1:] *= 3
    v.select(1, 0)[0] -= 1
    return x * 1, r, v[1, q]


def _expand_adding_a_unit_dimension(x, p):
    x[-1:, 0].expand(1, -1)[:, p - 1] = 5  # x[-1, 0]
    return x + 0


PROGRAMS = {
    "position of a new dimension": (_position_of_a_new_dimension, 3),
    "select and slice of a broadcast dimension": (_select_and_slice_of_a_broadcast_dimension,
                                                  3),
    "expand adding a unit dimension": (_expand_adding_a_unit_dimension, 2),
}


def _args(count: int, dtype: torch.dtype) -> tuple:
    x = torch.arange(12, dtype=dtype).view(4, 3)
    return (x, torch.tensor(1), torch.tensor(-2, dtype=torch.int32))[:count]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_write_through_an_expand_matches_eager(name, path, dtype):
    program, count = PROGRAMS[name]
    args = _args(count, dtype)
    expected = tuple(a.clone() for a in args)
    eager = program(*expected)
    result = run_on_path(path, program, tuple(a.clone() for a in args), args)
    for actual, wanted in zip(result if isinstance(result, tuple) else (result,),
                              eager if isinstance(eager, tuple) else (eager,)):
        torch.testing.assert_close(actual, wanted, rtol=0, atol=0)
    torch.testing.assert_close(args[0], expected[0], rtol=0, atol=0)


def _write_across_a_broadcast_dimension(x, q):
    x.expand(3, -1, -1)[:, q] = 2  # three writes of each element of x[q]


def test_write_across_a_broadcast_dimension_is_refused_at_its_line():
    """Eager refuses it too (more than one element of the written-to tensor refers to a
    single memory location)."""
    x, q = torch.zeros(4, 3), torch.tensor(1)
    with pytest.raises(RuntimeError, match="single memory location"):
        _write_across_a_broadcast_dimension(x.clone(), q)
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match="writing into an expanded tensor") as error:
        outofplace.compile(_write_across_a_broadcast_dimension, (x, q))
    line = _write_across_a_broadcast_dimension.__code__.co_firstlineno + 1
    assert f"{__file__}:{line}:" in str(error.value)


def _writes_one_copy_of_an_expanded_argument(v, p):
    v[1, 0] = 5  # x[0]
    v[p, 2:] += 1  # x[2:], at a runtime position of the broadcast dimension
    return v.sum(0)


@pytest.mark.parametrize("traced", ["expanded", "plain"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_write_into_one_copy_of_an_expanded_argument(path, dtype, traced):
    """An expanded tensor passed alone (`f(x.expand(3, -1, -1))`) is taken from the
    memory it spans on both paths: a write into one copy lands in x, as in eager. It was
    refused by outofplace.compile at the call (ValueError), compiled by torch.compile.
    Traced with a plain tensor, outofplace.compile traces it again for the expansion."""
    x = torch.arange(12, dtype=dtype).view(4, 3)
    expected = x.clone()
    eager = _writes_one_copy_of_an_expanded_argument(expected.expand(3, -1, -1),
                                                     torch.tensor(2))
    example = x.clone().expand(3, -1, -1) if traced == "expanded" else \
        torch.zeros(3, 4, 3, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (traced again for the expansion)
        result = run_on_path(path, _writes_one_copy_of_an_expanded_argument,
                             (example, torch.tensor(0)), (x.expand(3, -1, -1),
                                                          torch.tensor(2)))
    torch.testing.assert_close(result, eager, rtol=0, atol=0)
    torch.testing.assert_close(x, expected, rtol=0, atol=0)
