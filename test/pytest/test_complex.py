"""Complex tensors computed as real (re, im) pairs (frontend/complex_pairs.py), against
eager on every engine: the caller's complex tensors are written in place through their
`view_as_real`, lazy conjugate views written through, and ops outside the subset refused
at their line."""

from __future__ import annotations

import math
import random

import pytest
import torch

import outofplace
from differential import assert_matches_eager


def c(*shape, dtype=torch.complex64):
    return torch.randn(*shape, dtype=dtype)


# ---------------------------------------------------------------- writes through views
def conj_view_write(x):
    x.conj().mul_(2)  # writes conj(conj(x) * 2) into x


def conj_returned(x):
    return torch.conj(x)


def conj_physical_write(x):
    x.conj_physical_()


def view_as_real_write(x):
    torch.view_as_real(x)[..., 1].zero_()


def real_write(x):
    x.real.add_(1)


def imag_index_write(x):
    x.imag[0] = 5


def conj_view_add(x, y):
    x.conj().add_(y)
    return x.conj() + 1


def neg_view_write(x):
    x._neg_view().add_(1j)
    return x._neg_view().resolve_neg()


def conj_of_slice_write(x):
    x[1:].conj()[0] = 2 + 3j


@pytest.mark.parametrize("f", [conj_view_write, conj_returned, conj_physical_write,
                               view_as_real_write, real_write, imag_index_write,
                               conj_of_slice_write], ids=lambda f: f.__name__)
def test_writes_through_complex_views(f) -> None:
    compiled = assert_matches_eager(f, c(3))
    if f is not conj_returned:
        assert compiled.io_map == {0: 0} or compiled.io_map == {0: len(compiled.io_map)}


def test_conj_view_written_with_a_complex_operand() -> None:
    assert_matches_eager(conj_view_add, c(3), c(3))


def test_neg_view_written() -> None:
    assert_matches_eager(neg_view_write, c(2, 3))


# ---------------------------------------------------------------- arithmetic
def complex_mul_(x, y):
    x.mul_(y)


def complex_div(x, y):
    return x / y, y / 2, 3 / y, x * 1j - 2, (1 - x) * y.real


def modulus_of_product(x):
    return (x * x.conj()).real.sum()


def reductions(x):
    return x.abs(), x.sum(), x.sum(1, keepdim=True), x.mean(0), -x


def built(a, b):
    z = torch.complex(a, b)
    z += 1
    return torch.view_as_complex(torch.stack([a, b], -1)) * z, z


def fills(x):
    x[0].fill_(1 + 2j)
    x[1].zero_()
    x[2] = 3
    x[:, 1].copy_(torch.ones(4))
    return x.clone().t()


@pytest.mark.parametrize("f, shapes", [
    (complex_mul_, [(3,), (3,)]), (complex_div, [(2, 3), (3,)]),
    (modulus_of_product, [(4,)]), (reductions, [(3, 4)]), (fills, [(4, 4)]),
], ids=lambda v: getattr(v, "__name__", "shapes"))
def test_complex_arithmetic(f, shapes) -> None:
    assert_matches_eager(f, *(c(*s) for s in shapes))


def complex_view_of_real(r):
    torch.view_as_complex(r).mul_(1j)
    z = torch.view_as_complex(r[1:])
    z.conj().add_(1)
    return torch.view_as_complex(r), z.abs()


def test_writes_through_view_as_complex_of_a_real_argument() -> None:
    compiled = assert_matches_eager(complex_view_of_real, torch.randn(3, 2))
    r = torch.randn(3, 2)
    out, _ = compiled(r)
    assert out.data_ptr() == r.data_ptr()  # eager's view of the caller's tensor


def test_torch_complex_of_real_tensors() -> None:
    assert_matches_eager(built, torch.randn(3), torch.randn(3))


def test_complex128() -> None:
    assert_matches_eager(complex_div, c(2, 3, dtype=torch.complex128),
                         c(3, dtype=torch.complex128))


def real_times_complex(x, r):
    x.mul_(r)
    return r * x.conj()


def test_mul_by_a_real_tensor() -> None:
    assert_matches_eager(real_times_complex, c(2, 3), torch.randn(3))


# ---------------------------------------------------------------- caches
def kv_write(cache, k, pos):
    cache[:, pos] = k
    return cache[:, : pos + 1].sum(1) if isinstance(pos, int) else cache.sum(1)


def test_complex_kv_cache_at_a_runtime_position() -> None:
    cache = c(2, 8, 4)
    compiled = assert_matches_eager(kv_write, cache, c(2, 4), torch.tensor(3))
    assert compiled.in_place_report == {"cache": "in place"}


def test_conj_view_write_in_place() -> None:
    compiled = outofplace.compile(conj_view_write, (c(64, 64),))
    assert compiled.in_place_report == {"x": "in place"}


def test_written_complex_input_updated_in_the_callers_memory() -> None:
    """x.mul_(y) of complex tensors: each part of the result reads both parts of x, so
    XLA:CPU copies x's buffer (docs/reliability.md); the update lands in x's memory."""
    x, y = c(5), c(5)
    compiled = outofplace.compile(complex_mul_, (x.clone(), y), engine="xla")
    view, expected = x[1:], x * y * y
    compiled(x, y)  # the first call moves x's storage into XLA's memory
    address = x.data_ptr()
    compiled(x, y)
    assert x.data_ptr() == address  # the same memory, call after call
    torch.testing.assert_close(x, expected)
    torch.testing.assert_close(view, expected[1:])  # taken before the first call
    assert compiled.in_place_report["x"].startswith("copied 40 bytes per call")


def returns_input(x):
    x.add_(1)
    return x


def test_returned_complex_input_is_the_callers_tensor() -> None:
    x = c(3)
    compiled = outofplace.compile(returns_input, (x.clone(),))
    assert compiled(x) is x


def test_a_real_tensor_for_a_complex_argument_is_refused_at_the_call() -> None:
    compiled = outofplace.compile(complex_mul_, (c(3), c(3)))
    with pytest.raises(ValueError, match="compiled for a torch.complex64 tensor"):
        compiled(torch.randn(3, 2), c(3))
    with pytest.raises(ValueError, match=r"compiled for a torch.complex64 \[3\] tensor, "
                       r"got torch.complex64 \[4\]"):
        compiled(c(4), c(3))


# ---------------------------------------------------------------- refusals
def complex_exp(x):
    return x.exp()


def spectrum(x):
    return torch.fft.rfft(x).abs()


def imag_of_conjugate(x):
    x.conj().imag.add_(1)  # eager writes x's imaginary part through a negative view


def parts_of_lazy_views(x):
    return x.conj().imag * 2, x._neg_view().real + x.conj().real


def test_parts_of_lazy_views_read() -> None:
    assert_matches_eager(parts_of_lazy_views, c(3))


def half_complex(x):
    return x * 2


def unbound(x):
    return x.unbind(0)[1].exp()


@pytest.mark.parametrize("f, arg, op", [
    (complex_exp, c(3), "torch.aten.exp"),
    (spectrum, torch.randn(8), "torch.aten.fft_rfft"),
    (imag_of_conjugate, c(3), "torch.aten.imag"),
    (half_complex, torch.randn(3, dtype=torch.complex32), "torch.aten.mul.Tensor"),
    (unbound, c(2, 3), "torch.aten.exp"),
], ids=["exp", "rfft", "imag_of_conjugate", "complex32", "exp_of_unbound"])
def test_ops_outside_the_subset_are_refused_at_their_line(f, arg, op) -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(f, (arg,))
    assert info.value.op == op
    assert "complex" in info.value.reason
    assert info.value.location.endswith(f":{f.__code__.co_firstlineno + 1}")


# ---------------------------------------------------------------- made in the program
def rotary(xq, freqs):
    """Llama's rotary embedding: complex multiplication by unit phases."""
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    return torch.view_as_real(xq_ * freqs_cis).flatten(2)


def made(x):
    z = torch.zeros(3, dtype=torch.complex64)
    z[1] = x[0]
    full = torch.full((3,), 1 + 2j)
    return (torch.cat([z, torch.ones_like(x), x]), torch.stack([x, full], 1),
            torch.where(x.real > 0, x, full), torch.zeros_like(x),
            x * torch.tensor([1 + 2j, 3j, 1]), x.real * 1j)


def test_rotary_embedding() -> None:
    assert_matches_eager(rotary, torch.randn(2, 4, 8), torch.randn(4, 4))


def test_complex_tensors_made_in_the_program() -> None:
    assert_matches_eager(made, c(3))


class Phases(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.randn(4, dtype=torch.complex64))

    def forward(self, x):
        self.state.mul_(x.conj())
        self.state.imag.neg_()
        return self.state.abs()


def test_complex_buffer_written_in_place() -> None:
    assert_matches_eager(Phases(), c(4))


def shifted_add(x):
    x[1:] += x[:-1]


def test_overlapping_complex_write_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(shifted_add, (c(4),))
    assert info.value.location.endswith(f":{shifted_add.__code__.co_firstlineno + 1}")


def quotients(x, y):
    return x / y, x.abs(), y.abs(), 1 / y


def test_division_and_modulus_at_extremes() -> None:
    """Large, tiny, zero, infinite and nan parts: scaled as eager computes them, no
    square overflows or underflows."""
    values = [3e30 + 4e30j, 1e-30 - 1e-30j, 0j, complex(math.inf, 1), complex(1, math.nan),
              complex(math.inf, math.nan), 2 - 3j, complex(0, -5e-30)]
    x = torch.tensor(values, dtype=torch.complex64)
    assert_matches_eager(quotients, x, x.flip(0))


# ---------------------------------------------------------------- index categories
def augmented_at_runtime_position(cache, k, pos):
    cache[:, pos] += k
    cache[1:, pos] *= 2j  # reads both parts of the gathered row, then stores it back
    return cache[:, pos].conj()


def masked_writes(x):
    x[x.real > 0] = 0
    x[x.abs() < 0.5] *= 2


def index_tensor_writes(x, i, v):
    x[i] = v
    x.index_put_((i,), v, accumulate=True)
    return x[i].sum(0)


def list_views(x):
    a, b = x.chunk(2)
    a.mul_(2j)
    b.conj()[:, 1:].zero_()
    first, *rest = x.unbind(1)
    first.add_(rest[0])
    return x.split(1, -1)[2] + 1


def views_of_views(x):
    y = x.t()[1:].unsqueeze(0)
    y.mul_(1j)
    z = x.view(-1)
    z[3] = 7
    x.conj()[0, :2] = torch.tensor([1.0, 2.0])
    return y.squeeze(0), x.reshape(3, 4).permute(1, 0).sum(0, keepdim=True)


@pytest.mark.parametrize("f, args", [
    (augmented_at_runtime_position, (c(2, 8, 4), c(2, 4), torch.tensor(3))),
    (masked_writes, (c(8),)),
    (index_tensor_writes, (c(5, 3), torch.tensor([0, 2]), c(2, 3))),
    (views_of_views, (c(4, 3),)),
    (list_views, (c(4, 3),)),
], ids=lambda v: getattr(v, "__name__", "args"))
def test_index_categories_on_complex_tensors(f, args) -> None:
    assert_matches_eager(f, *args)


def test_written_complex_leaf_requiring_grad_is_refused_at_the_call() -> None:
    compiled = outofplace.compile(complex_mul_, (c(3), c(3)))
    with pytest.raises(ValueError, match="leaf tensor that requires grad"):
        compiled(c(3).requires_grad_(), c(3))


def mixed_precision(x, y, s, r):
    return x * s, x + y, x / r, x - s.real, x.add_(y), x.mul_(s)


def same_dtype_conversions(x, r):
    x.to(torch.complex64).mul_(2)  # `to` its own dtype is x itself: writes x
    wide = x.to(torch.complex128)
    wide.add_(1)  # a copy: x keeps its value
    return wide, x.sum(dtype=torch.complex64), r.to(torch.complex64)


def test_conversions() -> None:
    assert_matches_eager(same_dtype_conversions, c(3), torch.randn(3))


def test_type_promotion_as_eager() -> None:
    """complex64 with a 0-d complex128 (float64) tensor stays complex64; with a complex128
    tensor it is complex128; in place, computed in the wider type and cast back."""
    assert_matches_eager(mixed_precision, c(3), c(3, dtype=torch.complex128),
                         torch.tensor(1.5 - 2j, dtype=torch.complex128),
                         torch.randn(3, dtype=torch.float64))


# ---------------------------------------------------------------- other entry points
def test_checked_mode_on_a_complex_cache() -> None:
    compiled = outofplace.compile(kv_write, (c(2, 8, 4), c(2, 4), torch.tensor(3)),
                                  check_bounds=True)
    cache, k = c(2, 8, 4), c(2, 4)
    before = cache.clone()
    with pytest.raises(IndexError, match="out of range for dimension 1 of size 8"):
        compiled(cache, k, torch.tensor(8))
    assert torch.equal(cache, before)  # nothing written
    compiled(cache, k, torch.tensor(-1))
    before[:, -1] = k
    torch.testing.assert_close(cache, before)


def rotate_in_place(x, y):
    x.mul_(y.conj())
    return (x * 2).conj()


def test_torch_compile_backend() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(rotate_in_place, backend="outofplace", dynamic=False)
    x, y = c(3), c(3)
    x_eager = x.clone()
    torch.testing.assert_close(compiled(x, y), rotate_in_place(x_eager, y))
    torch.testing.assert_close(x, x_eager)


# ---------------------------------------------------------------- random programs
# A view of x (complex or, last, real), written by one of the writes for its kind, up to
# three times; then a result read. Programs eager refuses are skipped. (No write makes a
# part that is zero in exact arithmetic and compared after: `v.mul_(v.conj())` has an
# imaginary part of rounding noise, eager's and ours differ, and `v.imag > 0` flips.)
_COMPLEX_VIEWS = ["x[{i}]", "x[:, {i}]", "x[1:]", "x[:, ::2]", "x.t()", "x.conj()",
                  "x._neg_view()", "x.unsqueeze(0)", "x.chunk(2)[{i}]", "x.view(-1)",
                  "x.transpose(0, -1)", "x.narrow(0, 1, 2)", "x.unbind(0)[{i}]"]
_REAL_VIEWS = ["x.real", "x.imag", "torch.view_as_real(x)[..., {i}]", "torch.view_as_real(x)"]
_COMPLEX_WRITES = [
    "v.mul_(2)", "v.add_(1j)", "v.mul_(y.mean())", "v.zero_()", "v.fill_(2 - 1j)", "v.neg_()",
    "v.conj_physical_()", "v.div_(y[0])", "v.sub_(y.sum(), alpha=2)", "v.copy_(v.conj() * 1j)",
    "v[...] = y.real.sum()", "v.add_(torch.ones_like(v.real))", "v.mul_(y)", "v.div_(y + 3)",
    "v[torch.tensor([0, 1])] = y[:2]", "v[v.real > 0] = 1j", "v[v.abs() > 1] *= 1j",
    "v.index_put_((torch.tensor([1, 1]),), y[:2], accumulate=True)", "v.mul_(v.conj() + 1)",
    "v.copy_(torch.where(v.imag > 0, v, y[0]))", "v.add_(v.to(torch.complex128))"]
_REAL_WRITES = ["v.add_(1)", "v.mul_(-2)", "v.zero_()", "v.fill_(3)", "v[0] = 5"]
_RESULTS = ["x.abs().sum()", "(x * x.conj()).real", "x.conj()", "x + y", "x / (y + 2)",
            "x.mean(0)", "torch.view_as_real(x).sum(-1)", "x.clone()",
            "torch.cat([x, y[None]]) * 1j", "torch.stack([x[0], y], 1).conj()",
            "x.abs() / (y.abs() + 1)", "1 / (x + 3)"]


def _random_program(rng: random.Random) -> str:
    lines = ["def f(x, y):"]
    for _ in range(rng.randint(1, 3)):
        view, writes = "x", _COMPLEX_WRITES
        for _ in range(rng.randint(1, 2)):
            real = rng.random() < 0.25
            pattern = rng.choice(_REAL_VIEWS if real else _COMPLEX_VIEWS)
            view = pattern.replace("x", f"({view})", 1).format(i=rng.randint(0, 1))
            if real:
                writes = _REAL_WRITES
                break
        lines += [f"    v = {view}", f"    {rng.choice(writes)}"]
    return "\n".join(lines + [f"    return {rng.choice(_RESULTS)}"])


def test_random_programs_match_eager() -> None:
    rng, ran = random.Random(16), 0
    for _ in range(24):
        source = _random_program(rng)
        namespace: dict = {"torch": torch}
        exec(compile(source, f"<random program {ran}>", "exec"), namespace)
        x, y = c(4, 4), c(4)
        try:
            namespace["f"](x.clone(), y.clone())
        except (RuntimeError, IndexError):
            continue  # eager refuses it
        try:
            assert_matches_eager(namespace["f"], x, y)
        except outofplace.UnsupportedMutationError as error:
            # documented: view_as_real of a lazy view, a write through its parts
            assert "lazily conjugated or negated" in error.reason, f"{source}\n{error}"
            continue
        except AssertionError as error:
            raise AssertionError(f"{source}\n{error}") from error
        ran += 1
    assert ran >= 16
