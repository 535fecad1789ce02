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


# ------------------------------------------------- in-place shape changes of locals
def unsqueeze_local(x):
    z = x * 2
    z.unsqueeze_(0)
    z.add_(1)
    return z


def squeeze_local(x):
    z = x.clone()
    z.squeeze_()
    z[0] = -1
    return z, x


def squeeze_dim_local(x):
    z = x.clone()
    z.squeeze_(0)
    return z.sum(0)


def t_local_writes_reach_the_base(x):
    z = x.clone()
    v = z[1:]
    v.t_()
    v[0] += 10  # column 0 of z[1:]
    return z


def transpose_then_write(x):
    z = x + 0
    z.transpose_(0, 1)
    z.mul_(torch.arange(3.0))  # broadcast along the new last dimension
    x.add_(z.t())
    return z


def swapdims_local(x):
    z = x.clone()
    z.swapdims_(0, 1)
    return z.contiguous().view(-1)


def resize_same_size(x):
    y = x.clone()
    y.resize_(25, 5)
    y[0] = 0
    return y


def resize_smaller(x):
    y = x.clone()
    y.resize_(2, 3)
    y.add_(1)
    return y, x


def resize_from_empty(x):
    y = torch.empty(0)
    y.resize_(4, 3)
    y.copy_(x)
    return y * 2


@pytest.mark.parametrize("f, shape", [
    (unsqueeze_local, (3,)), (squeeze_local, (1, 4, 1)), (squeeze_dim_local, (1, 4, 2)),
    (t_local_writes_reach_the_base, (4, 3)), (transpose_then_write, (3, 2)),
    (swapdims_local, (2, 3, 4)), (resize_same_size, (125,)), (resize_smaller, (3, 4)),
    (resize_from_empty, (4, 3)),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_shape_change_of_local(f, shape) -> None:
    assert_matches_eager(f, torch.randn(shape))


def unsqueeze_input(x):
    x.unsqueeze_(0)
    return x * 2


def t_view_input(x):
    x.t_()
    return x * 2


def resize_of_viewed_local(x):
    y = x.clone()
    v = y[0]
    y.resize_(20)
    return v, y


@pytest.mark.parametrize("f, arg, op, line", [
    (unsqueeze_input, torch.randn(3), "torch.aten.unsqueeze_", 1),
    (t_view_input, torch.randn(2, 3, 4)[0], "torch.aten.t_", 1),
    (resize_of_viewed_local, torch.randn(3, 4), "torch.aten.resize_", 3),
])
def test_shape_change_the_caller_would_see_is_refused(f, arg, op, line) -> None:
    """Of an argument (torch.export itself crashes on some: refused before it), or a
    growth that would give a viewed tensor new memory."""
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(f, (arg,))
    assert info.value.op == op
    assert "it changes the shape or strides of a tensor in place" in info.value.reason
    assert info.value.location.endswith(f":{f.__code__.co_firstlineno + line}")


def test_a_refusal_inside_the_trace_leaves_no_trace_state_behind() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError):
        outofplace.compile(unsqueeze_input, (torch.randn(3),))
    assert torch._C._len_torch_function_stack() == 0


def test_out_resizes_a_local_written_before() -> None:
    def f(a):
        z = torch.zeros(2)
        z.add_(1)
        torch.mul(a, 2, out=z)
        return z + 1

    assert_matches_eager(f, torch.randn(2, 3))


# --------------------------------------- ops torch-mlir cannot lower without decomposing
@pytest.mark.parametrize("running", [False, True])
@pytest.mark.parametrize("affine", [False, True])
def test_instance_norm_over_calls(running: bool, affine: bool) -> None:
    """torch-mlir aborted the process on instance_norm; its running statistics are
    written as batch_norm's are."""
    torch.manual_seed(0)
    module = nn.InstanceNorm2d(3, affine=affine, track_running_stats=running)
    module.train()
    _check_calls(module, lambda: torch.randn(2, 3, 4, 5) * 3 + 1)
    if running:
        module.eval()
        _check_calls(module, lambda: torch.randn(2, 3, 4, 5))


def test_instance_norm_1d_functional() -> None:
    def f(x, rm, rv):
        return torch.nn.functional.instance_norm(x, rm, rv, use_input_stats=True,
                                                 momentum=0.3)

    assert_matches_eager(f, torch.randn(3, 2, 7), torch.zeros(2), torch.ones(2))


# ---------------------------------------------------- autocast and grad-mode regions
class AutocastRegion(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(4))

    def forward(self, x, w):
        with torch.autocast("cpu"):
            self.b.add_(x)
            y = w @ x  # bfloat16 under CPU autocast
            with torch.enable_grad():
                self.b.mul_(2)
        with torch.no_grad():
            self.b.sub_(1)
        return self.b * 2, y


def test_autocast_and_grad_mode_regions_are_inlined() -> None:
    compiled = assert_matches_eager(AutocastRegion(), torch.randn(4), torch.randn(3, 4))
    assert compiled.result_dtypes[1] == torch.bfloat16
    assert "bf16" in compiled.stablehlo


def test_grad_mode_region_in_a_function() -> None:
    def f(x):
        with torch.enable_grad():
            x.mul_(3)
        with torch.autocast("cpu", enabled=False):
            x.add_(1)
        return x.sum()

    assert_matches_eager(f, torch.randn(5))


def efficient_zeros(x):
    return x + torch._efficientzerotensor((3,), dtype=torch.float32)


def lifted(x):
    y = torch.ops.aten.lift(x)  # the tensor itself: the write reaches x
    y.add_(1)
    return y * 2


def neg_view_read(x):
    return torch._neg_view(x) * 2


def empty_strided_then_copy(x):
    y = torch.empty_strided((3, 4), (1, 3))
    y.copy_(x)
    return y.sum(0), y.t().contiguous().view(-1)


def block_diagonal(a, b):
    return torch.block_diag(a, b) + torch.vdot(a[0], a[1])


@pytest.mark.parametrize("f, args", [
    (efficient_zeros, (torch.randn(3),)), (lifted, (torch.randn(3),)),
    (neg_view_read, (torch.randn(3),)),
    (empty_strided_then_copy, (torch.randn(3, 4),)),
    (block_diagonal, (torch.randn(2, 2), torch.randn(3, 3))),
], ids=lambda v: getattr(v, "__name__", "args"))
def test_op_torch_mlir_cannot_lower_is_decomposed(f, args) -> None:
    assert_matches_eager(f, *args)


def real_conjugations(x):
    y = x.conj()
    y.mul_(2)
    x.conj_physical_()
    return x.resolve_conj().resolve_neg() + 1


def test_conjugation_of_real_tensors_is_the_tensor() -> None:
    assert_matches_eager(real_conjugations, torch.randn(3))


def test_quantile_whose_decomposition_squeezes_a_local_in_place() -> None:
    assert_matches_eager(lambda x: torch.quantile(x, 0.3), torch.randn(7))


def test_write_through_a_view_of_a_resized_out() -> None:
    """The fuzzer's find: the views taken after the op know the resized tensor's storage;
    the new tensor must carry it, or the view is taken for a copy and the write lost."""
    def f(x):
        o = torch.empty(0)
        torch.mul(x, 2, out=o)
        o.narrow(-2, 1, 5).fill_(-3)
        return o.clone()

    assert_matches_eager(f, torch.randn(6, 3))


def test_write_through_a_view_of_a_grown_local() -> None:
    def f(x):
        y = x.clone()
        y.resize_(20)
        y[12:].fill_(1)  # new elements, uninitialized in eager until written
        y[:4].mul_(2)
        return y

    assert_matches_eager(f, torch.randn(3, 4))
