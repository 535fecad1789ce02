"""IREE runs outofplace's StableHLO in the caller's tensors, and each backend's alias check
reads that backend's compiled program (docs/backends.md)."""

from __future__ import annotations

import pytest
import torch

import outofplace
from outofplace.backends import hlo_proto, iree, xla

from differential import assert_matches_eager, assert_same_tree

needs_iree = pytest.mark.skipif(not iree.available(), reason="needs the iree extra")
needs_xla = pytest.mark.skipif(not xla.available(), reason="needs the xla extra")


def kv_step(cache, pos, k):
    cache[:, pos] = k
    return cache.sum(1)  # the updated cache is read, as attention reads it


def kv_args(t: int = 0):
    return torch.zeros(4, 16, 8), torch.tensor(t), torch.randn(4, 8)


def flip(x):  # every element read before it is written: not in place on IREE
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
    results = compiled._iree_executable()([cache, pos, k], compiled.result_dtypes)
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
def test_iree_check_reports_an_update_that_is_not_in_place() -> None:
    compiled = assert_matches_eager(flip, torch.arange(64.0).reshape(8, 8))
    problems = compiled.alias_problems("iree")
    assert "argument 0 (result 1): a copy writes all of it" in problems


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
def test_xla_check_proves_the_kv_write_and_reports_copies() -> None:
    """XLA:CPU updates the cache in place, also when the updated cache is read (kv_step:
    compile_for_cpu turns on copy insertion's region analysis; without it XLA copied the
    donated cache twice). Keeping the old value copies it: the check reports that."""
    assert outofplace.compile(kv_write, kv_args()).alias_problems("xla") == []
    assert outofplace.compile(kv_step, kv_args()).alias_problems("xla") == []
    assert outofplace.compile(keep_old, (torch.randn(8, 8),)).alias_problems("xla") == [
        "argument 0: XLA copies the donated buffer"]


@needs_iree
def test_iree_updates_in_place_where_xla_copies() -> None:
    assert outofplace.compile(kv_write, kv_args()).alias_problems("iree") == []


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
