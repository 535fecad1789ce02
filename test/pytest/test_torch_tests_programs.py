"""Programs in the style of PyTorch's functionalization tests and torch-mlir's mutation
tests (issue 16), against eager: `out=` writes, in-place shape changes of local tensors,
ops torch-mlir cannot lower without a decomposition, autocast and grad-mode regions."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import outofplace
from differential import assert_matches_eager, assert_module_state_matches, assert_same_tree


# ------------------------------------------------------------------------ out= writes
def test_add_out_into_local() -> None:
    def f(a, b):
        z = torch.empty(4, 3)
        torch.add(a, b, alpha=2, out=z)
        return z * 2

    assert_matches_eager(f, torch.randn(4, 3), torch.randn(4, 3))


def test_add_out_into_input_is_an_aliased_result() -> None:
    def f(a, b, z):
        r = torch.add(a, b, out=z)
        return r.sum()

    compiled = assert_matches_eager(f, torch.randn(4, 3), torch.randn(3), torch.zeros(4, 3))
    assert compiled.io_map == {2: 1}


def test_out_into_a_view_of_an_input() -> None:
    def f(a, z):
        torch.mul(a, 3, out=z[1])
        return z

    assert_matches_eager(f, torch.randn(5), torch.zeros(3, 5))


def test_out_casts_to_the_dtype_of_out() -> None:
    def f(a, b, z):
        torch.add(a, b, out=z)

    assert_matches_eager(f, torch.arange(6), torch.arange(6), torch.zeros(6))


def test_cat_out_into_buffer() -> None:
    class Cat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("buf", torch.zeros(6, 2))

        def forward(self, a, b):
            torch.cat([a, b], out=self.buf)
            return self.buf.sum(0)

    assert_matches_eager(Cat(), torch.randn(2, 2), torch.randn(4, 2))


def test_mv_out_reads_the_old_value_first() -> None:
    def f(w, v, u):
        old = u * 1
        torch.mv(w, v, out=u)
        return old + u

    assert_matches_eager(f, torch.randn(3, 4), torch.randn(4), torch.randn(3))


def test_out_resizes_a_local_as_eager_does() -> None:
    def f(a, b):
        z = torch.empty(0)
        torch.add(a, b, out=z)
        z.mul_(2)
        y = torch.zeros(2)
        torch.matmul(a, b.t(), out=y)
        return z, y

    assert_matches_eager(f, torch.randn(3, 4), torch.randn(3, 4))


def test_out_with_two_results() -> None:
    def f(x, values, indices):
        torch.max(x, 1, out=(values, indices))
        return values * 2

    assert_matches_eager(f, torch.randn(3, 5), torch.zeros(3),
                         torch.zeros(3, dtype=torch.int64))


def resizes_input(a, z):
    torch.add(a, 1, out=z)
    return z


def resizes_viewed(a):
    z = torch.zeros(2)
    v = z[0:1]
    torch.add(a, 1, out=z)
    return v, z


@pytest.mark.parametrize("f, args, line, what", [
    (resizes_input, (torch.randn(3), torch.zeros(2)), 1, "an argument, parameter or buffer"),
    (resizes_viewed, (torch.randn(3),), 3, "a tensor of which a view is taken"),
])
def test_resizing_out_is_refused_where_eager_would_change_what_the_caller_sees(
        f, args, line, what) -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(f, args)
    assert info.value.op == "torch.aten.add.out"
    assert what in info.value.reason
    assert info.value.location.endswith(f":{f.__code__.co_firstlineno + line}")


def _check_calls(module: nn.Module, make_input, calls: int = 3) -> None:
    """Compiles `module` once, then calls it and an eager copy `calls` times each,
    comparing outputs and the state (buffers updated as aliased results) each time."""
    eager = copy.deepcopy(module)
    compiled = outofplace.compile(module, (make_input(),))
    for call in range(calls):
        x = make_input()
        assert_same_tree(compiled(x.clone()), eager(x.clone()), f"call {call}")
        assert_module_state_matches(module, eager, f"state after call {call}")


@pytest.mark.parametrize("form", ["hook", "parametrize"])
def test_spectral_norm_in_train_mode_over_calls(form: str) -> None:
    torch.manual_seed(0)
    norm = nn.utils.spectral_norm if form == "hook" else \
        nn.utils.parametrizations.spectral_norm
    module = norm(nn.Linear(5, 4))
    module.train()
    before = {n: b.clone() for n, b in module.named_buffers()}
    _check_calls(module, lambda: torch.randn(2, 5))
    changed = [n for n, b in module.named_buffers() if not torch.equal(b, before[n])]
    assert len(changed) >= 2  # u and v are written at every call
