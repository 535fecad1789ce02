"""`torch.cond` and `while_loop` whose branches and bodies write tensors in place
(frontend/control_flow.py, transforms/lower_regions.py), against eager, on both paths.

Eager PyTorch itself refuses most of these programs (its HOPs go through dynamo, which
refuses a write in a region with gradients enabled, and `cache[start + i] = h` in a
body everywhere), so the reference is the Python semantics torch documents for them
(`while cond(*v): v = body(*v)`, `true_fn(*ops) if pred else false_fn(*ops)`), run in
eager by `documented_semantics()`.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Callable, Iterator

import pytest
import torch
import torch._higher_order_ops.utils as hop_utils
from torch._higher_order_ops import while_loop

import outofplace
from outofplace.backends import xla

DTYPES = [torch.float32, torch.float64]
PATHS = ["compile", "torch.compile"]


@contextlib.contextmanager
def documented_semantics() -> Iterator[None]:
    """torch.cond and while_loop run as the Python they are documented to equal."""
    original = hop_utils._hop_compile_and_call

    def run(fn: Callable, args: tuple, kwargs: dict | None = None) -> Any:
        if fn.__name__ == "_cond_op_wrapper":
            pred, true_fn, false_fn, operands = args
            return true_fn(*operands) if bool(pred) else false_fn(*operands)
        if fn.__name__ == "_while_loop_op_wrapper":
            cond_fn, body_fn, values, extra = args
            values = tuple(values)
            while bool(cond_fn(*values, *extra)):
                values = tuple(body_fn(*values, *extra))
            return values
        return original(fn, args, kwargs)

    hop_utils._hop_compile_and_call = run
    try:
        with torch.no_grad():
            yield
    finally:
        hop_utils._hop_compile_and_call = original


def _compiled(f: Callable, args: tuple, path: str) -> Callable:
    if path == "compile":
        return outofplace.compile(f, args)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="outofplace")

    def call(*a: Any) -> Any:
        with torch.no_grad():  # dynamo takes writes in regions without gradients only
            return compiled(*a)
    return call


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    return all(_close(x, y) for x, y in zip(a, b))


def _matches_eager(f: Callable, calls: list[tuple], path: str) -> None:
    """Compiled once for the first call's arguments, each call (its own arguments, the
    state carried from call to call) gives eager's results and leaves eager's tensors."""
    compiled = _compiled(f, tuple(t.clone() for t in calls[0]), path)
    eager_state = compiled_state = None
    for args in calls:
        eager_args = [t.clone() for t in args]
        ours = [t.clone() for t in args]
        if eager_state is not None:  # the state written by the last call, fed back
            eager_args[0], ours[0] = eager_state, compiled_state
        with documented_semantics():
            expected = f(*eager_args)
        got = compiled(*ours)
        assert _close(got, expected)
        for e, o in zip(eager_args, ours):
            assert _close(o, e), (o, e)
        eager_state, compiled_state = eager_args[0], ours[0]


# ------------------------------------------------------------------------------ cond
def cond_writes_closure(c: torch.Tensor, k: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    def true_fn(k: torch.Tensor) -> torch.Tensor:
        c[0].add_(k)  # two writes through views in one branch
        c[2].mul_(2)
        return k * 2

    def false_fn(k: torch.Tensor) -> torch.Tensor:
        c[1, 1:].sub_(k[1:])  # the other branch writes elsewhere
        return k - 1

    return torch.cond(p.sum() > 0, true_fn, false_fn, (k,))


def cond_writes_operand(c: torch.Tensor, k: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    def true_fn(c: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        c[1:].add_(k)
        return c.sum(0)

    def false_fn(c: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return c.sum(0) - k  # writes nothing: c passes through

    out = torch.cond(p.sum() > 0, true_fn, false_fn, (c, k))
    return out + c[0]  # a read after the region sees the new value


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", [cond_writes_closure, cond_writes_operand])
def test_cond_both_branches(f: Callable, dtype: torch.dtype, path: str) -> None:
    c, k = torch.randn(3, 4, dtype=dtype), torch.randn(4, dtype=dtype)
    _matches_eager(f, [(c, k, torch.tensor(1.0)), (c, k, torch.tensor(-1.0)),
                       (c, k, torch.tensor(2.0))], path)


def test_cond_in_place_report_and_region_form() -> None:
    args = (torch.zeros(3, 4), torch.ones(4), torch.tensor(1.0))
    compiled = outofplace.compile(cond_writes_closure, args)
    text = compiled.stablehlo
    assert compiled.io_map == {0: 1}
    assert re.search(r"%c: tensor<3x4xf32> \{tf.aliasing_output = 1 : i32\}", text)
    assert '"stablehlo.if"' in text and "%c_modified" in text
    assert compiled.in_place_report == {"c": "in place"}


# ------------------------------------------------------------------------ while_loop
def decode_cache(cache: torch.Tensor, h: torch.Tensor, start: torch.Tensor,
                 n: torch.Tensor) -> torch.Tensor:
    def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < n

    def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
        h = torch.tanh(h * 0.5 + cache.mean(0))  # reads the cache it writes
        cache.index_copy_(0, (start + i).reshape(1), h[None])
        return i + 1, h.clone()

    _, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))
    return h


def decode_cache_setitem(cache: torch.Tensor, h: torch.Tensor, start: torch.Tensor,
                         n: torch.Tensor) -> torch.Tensor:
    def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < n

    def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
        h = torch.tanh(h * 0.5 + 1)
        cache[start + i] = h  # the line (dynamo refuses it: outofplace.compile)
        return i + 1, h.clone()

    _, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))
    return h + cache[start]


def views_in_body(cache: torch.Tensor, h: torch.Tensor, start: torch.Tensor,
                  n: torch.Tensor) -> torch.Tensor:
    layer = cache[1]  # the body closes over a view (and writes it only)

    def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < n

    def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
        layer.t()[:, 2:].mul_(0.5)  # through a transpose and a slice
        layer[0].add_(h)
        layer[:, 1].add_(i.to(h.dtype))
        return i + 1, h * 1.5

    _, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))
    return h


def view_and_base_in_body(cache: torch.Tensor, h: torch.Tensor, start: torch.Tensor,
                          n: torch.Tensor) -> torch.Tensor:
    layer = cache[1, :, 1:]  # a view the body closes over, beside its base

    def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < n

    def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
        layer.mul_(0.5)  # through the view
        cache[0].add_(h)  # and the base
        return i + 1, h + layer.sum() + cache[1, 0]  # reads both after the writes

    _, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))
    return h


def nested_cond(cache: torch.Tensor, h: torch.Tensor, start: torch.Tensor,
                n: torch.Tensor) -> torch.Tensor:
    def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < n

    def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
        def even(h: torch.Tensor) -> torch.Tensor:
            cache.index_copy_(0, i.reshape(1), h[None])
            return h + 1

        def odd(h: torch.Tensor) -> torch.Tensor:
            cache[0].sub_(h)
            return h * 0.5

        return i + 1, torch.cond(i % 2 == 0, even, odd, (h,))

    _, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))
    return h


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", [decode_cache, views_in_body, nested_cond])
def test_while_runtime_trip_counts(f: Callable, dtype: torch.dtype, path: str) -> None:
    cache = torch.randn(8, 4, dtype=dtype) if f in (decode_cache, nested_cond) else \
        torch.randn(2, 4, 4, dtype=dtype)
    h = torch.randn(4, dtype=dtype)
    start = torch.tensor(2)
    # one program: 3 iterations, none, 1, 5, each call on the last call's state
    _matches_eager(f, [(cache, h, start, torch.tensor(n)) for n in (3, 0, 1, 5)], path)


@pytest.mark.parametrize("dtype", DTYPES)
def test_while_closing_over_a_view_and_its_base(dtype: torch.dtype) -> None:
    """(outofplace.compile: dynamo refuses a region whose inputs alias each other.)"""
    cache, h = torch.randn(2, 4, 4, dtype=dtype), torch.randn(4, dtype=dtype)
    _matches_eager(view_and_base_in_body, [(cache, h, torch.tensor(0), torch.tensor(n))
                                           for n in (3, 0, 2)], "compile")


@pytest.mark.parametrize("dtype", DTYPES)
def test_while_setitem_at_runtime_position(dtype: torch.dtype) -> None:
    cache, h = torch.zeros(8, 4, dtype=dtype), torch.randn(4, dtype=dtype)
    _matches_eager(decode_cache_setitem,
                   [(cache, h, torch.tensor(s), torch.tensor(n))
                    for s, n in ((1, 3), (0, 0), (4, 4))], "compile")


def test_while_cache_is_carried_and_updated_in_place() -> None:
    """The cache is a carried value of the while, written by one dynamic_update_slice
    per iteration; XLA:CPU's optimized program donates it and copies it nowhere (not
    at the loop's entry, not in its body)."""
    args = (torch.zeros(1024, 256), torch.ones(256), torch.tensor(1), torch.tensor(3))
    compiled = outofplace.compile(decode_cache_setitem, args)
    text = compiled.stablehlo
    assert "stablehlo.while" in text and "%cache_modified = stablehlo.dynamic_update_slice" \
        in text
    assert compiled.io_map == {0: 1}
    assert compiled.alias_problems("xla") == []
    hlo = "\n".join(m.to_string() for m in xla.compile_for_cpu(
        xla.legalize_for_cpu(text)[0]).hlo_modules())
    assert " while(" in hlo
    assert not re.search(r"f32\[1024,256\]\{1,0\} copy\(", hlo)
    cache, expected = torch.zeros(1024, 256), torch.zeros(1024, 256)
    for start in (5, 7):
        compiled(cache, torch.ones(256), torch.tensor(start), torch.tensor(2))
        with documented_semantics():
            decode_cache_setitem(expected, torch.ones(256), torch.tensor(start),
                                 torch.tensor(2))
    assert compiled.in_place_report == {"cache": "in place"}
    assert torch.allclose(cache, expected) and cache[5:9].abs().sum() > 0


# ---------------------------------------------------------------------------- refusals
def data_dependent_body(cache: torch.Tensor, h: torch.Tensor, n: torch.Tensor
                        ) -> torch.Tensor:
    def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < n

    def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
        cache[0].add_(h[h > 0].sum())  # REFUSED-LINE
        return i + 1, h.clone()

    _, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))
    return h


def writes_carried(h: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < n

    def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
        h.mul_(2)  # CARRIED-LINE
        return i + 1, h + 1

    _, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))
    return h


def _line(marker: str) -> str:
    with open(__file__) as source:
        number = next(i for i, text in enumerate(source, 1) if f"# {marker}" in text
                      and "marker" not in text)
    return f"test_control_flow.py:{number}"


def test_refuses_data_dependent_shape_in_body() -> None:
    args = (torch.zeros(3, 4), torch.randn(4), torch.tensor(2))
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=r"its shape depends on the mask's values") as error:
        outofplace.compile(data_dependent_body, args)
    assert _line("REFUSED-LINE") in str(error.value)


def test_refuses_write_of_carried_value() -> None:
    h = torch.randn(4)
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match="torch.while_loop: its body writes a carried value") as error:
        outofplace.compile(writes_carried, (h.clone(), torch.tensor(2)))
    assert _line("CARRIED-LINE") in str(error.value)


# ------------------------------------------------------------------- other engines
@pytest.mark.parametrize("f", [decode_cache_setitem, nested_cond])
def test_regions_on_the_reference_interpreter(f: Callable) -> None:
    args = (torch.randn(8, 4), torch.randn(4), torch.tensor(1), torch.tensor(3))
    compiled = outofplace.compile(f, args, engine="interpreter")
    ours, eager = [t.clone() for t in args], [t.clone() for t in args]
    got = compiled(*ours)
    with documented_semantics():
        expected = f(*eager)
    assert _close(got, expected) and all(_close(o, e) for o, e in zip(ours, eager))


def test_regions_on_iree_match_eager_and_say_they_copy() -> None:
    """IREE runs the loop and the branches right, but outofplace compiles their state
    without its alias there (IREE 3.13's stream phase would update it wrongly in place,
    outofplace-iree-unalias-early-overwrites): the report says so."""
    from outofplace.backends import iree

    if not iree.available():
        pytest.skip("the iree extra is not installed")
    for f, args in ((decode_cache_setitem, (torch.randn(8, 4), torch.randn(4),
                                            torch.tensor(1), torch.tensor(3))),
                    (cond_writes_closure, (torch.randn(3, 4), torch.randn(4),
                                           torch.tensor(-1.0)))):
        compiled = outofplace.compile(f, args, engine="iree")
        ours, eager = [t.clone() for t in args], [t.clone() for t in args]
        got = compiled(*ours)
        with documented_semantics():
            expected = f(*eager)
        assert _close(got, expected) and all(_close(o, e) for o, e in zip(ours, eager))
        assert compiled.alias_problems("iree") == [
            "argument 0: compiled without its alias (IREE 3.13 would update it wrongly in "
            "place)"]


def scan_writing(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    from torch._higher_order_ops.scan import scan

    def combine(carry: torch.Tensor, xs: torch.Tensor) -> tuple:
        c.add_(1)
        return carry + xs, carry * 2

    return scan(combine, torch.zeros(4), x)[0]  # SCAN-LINE


def int_carried(x: torch.Tensor) -> torch.Tensor:
    def cond_fn(i: int, x: torch.Tensor) -> bool:
        return i < 3

    def body_fn(i: int, x: torch.Tensor) -> tuple:
        return i + 1, x + 1

    return while_loop(cond_fn, body_fn, (0, x))[1]  # INT-LINE


@pytest.mark.parametrize("f, args, match, marker", [
    (scan_writing, (torch.randn(3, 4), torch.zeros(2)), "torch.scan: outofplace compiles",
     "SCAN-LINE"),
    (int_carried, (torch.randn(3),), "torch.while_loop: outofplace takes tensor carried",
     "INT-LINE")])
def test_refuses_scan_and_python_carried_values(f: Callable, args: tuple, match: str,
                                                marker: str) -> None:
    with pytest.raises(outofplace.UnsupportedMutationError, match=match) as error:
        outofplace.compile(f, args)
    assert _line(marker) in str(error.value)


def test_check_bounds_refuses_regions() -> None:
    """The checked mode's flags see main's ops only: a program with regions is refused
    with it rather than left unchecked."""
    args = (torch.zeros(8, 4), torch.ones(4), torch.tensor(1), torch.tensor(3))
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match="torch.while_loop: check_bounds=True does not check") as error:
        outofplace.compile(decode_cache_setitem, args, check_bounds=True)
    assert "test_control_flow.py" in str(error.value)


def while_in_cond(cache: torch.Tensor, h: torch.Tensor, p: torch.Tensor,
                  n: torch.Tensor) -> torch.Tensor:
    def true_fn(h: torch.Tensor) -> torch.Tensor:
        def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < n

        def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
            cache[i].add_(h)
            return i + 1, h * 2

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))[1]

    def false_fn(h: torch.Tensor) -> torch.Tensor:
        cache[0].zero_()
        return h

    return torch.cond(p > 0, true_fn, false_fn, (h,))


def while_in_while(cache: torch.Tensor, h: torch.Tensor, p: torch.Tensor,
                   n: torch.Tensor) -> torch.Tensor:
    def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < n

    def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple:
        def inner_cond(j: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return j < p.to(j.dtype)

        def inner_body(j: torch.Tensor, h: torch.Tensor) -> tuple:
            cache[i, j].add_(h)
            return j + 1, h + 1

        return i + 1, while_loop(inner_cond, inner_body,
                                 (torch.zeros((), dtype=torch.int64), h))[1]

    return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), h))[1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", [while_in_cond, while_in_while])
def test_loops_nested_in_regions(f: Callable, dtype: torch.dtype) -> None:
    """(outofplace.compile: dynamo refuses `cache[i]` at a tensor position in a region.)"""
    cache, h = torch.randn(8, 2, 4, dtype=dtype), torch.randn(4, dtype=dtype)
    _matches_eager(f, [(cache, h, torch.tensor(p), torch.tensor(n))
                       for p, n in ((1.0, 3), (-1.0, 3), (2.0, 0), (1.0, 5))], "compile")
