"""`outofplace.compile(f, args, dynamic_shapes=...)`: StableHLO with dynamic dimensions
(`tensor<?x...>`), compiled once and called at several sizes against eager, on every
engine: the interpreter and IREE run the dynamic program, XLA one specialized per shape
(docs/shapes.md)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch.export import Dim

import outofplace
from outofplace.errors import OutOfBoundsPolicyWarning

from differential import ENGINES, assert_call_matches_eager, assert_module_state_matches

THIS_FILE = __file__
BATCH = Dim("batch", min=2, max=64)
SIZES = (2, 5, 17)


def add_one(x):
    x.add_(1)
    return x.sum()


def kv_write(cache, k, pos):
    cache[:, pos] = k
    return cache.sum(1)


class CountingNorm(torch.nn.Module):
    """A buffer written in place from a batch of dynamic size (BatchNorm's running mean)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        return x - self.running


def add_rows(x, y):
    x.add_(y)  # two dynamic operands of one size (one Dim)
    return x * 2


def scale_columns(x):
    x[:, 1:3].mul_(2)  # a write through a slice of the static dimension
    return x.sum()


def read_from_the_end(x, pos):
    return x[pos] * 2  # a negative pos counts from the end of the dynamic dimension


def write_into_position_view(x, pos):
    y = x[pos]  # a view (a select at pos), taken again after the writes
    y.mul_(2)
    x.add_(1)
    return y + 0


def _compile(f, args, spec, engine="auto"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfBoundsPolicyWarning)
        return outofplace.compile(f, args, dynamic_shapes=spec, engine=engine)


def _batch_of(tensors, n, dynamic):
    return tuple(torch.randn(n, *t.shape[1:]) if d else t.clone()
                 for t, d in zip(tensors, dynamic))


CASES = {
    "add_one": (add_one, (torch.ones(3, 4),), {"x": {0: BATCH}}),
    "kv_write": (kv_write, (torch.zeros(3, 8, 4), torch.ones(3, 4), torch.tensor(5)),
                 {"cache": {0: BATCH}, "k": {0: BATCH}, "pos": None}),
    "add_rows": (add_rows, (torch.ones(3, 4), torch.ones(3, 4)),
                 {"x": {0: BATCH}, "y": {0: BATCH}}),
    "scale_columns": (scale_columns, (torch.ones(3, 4),), {"x": {0: BATCH}}),
    "read_from_the_end": (read_from_the_end, (torch.randn(3, 4), torch.tensor(-2)),
                          {"x": {0: BATCH}, "pos": None}),
    "write_into_position_view": (write_into_position_view,
                                 (torch.randn(3, 4), torch.tensor(-1)),
                                 {"x": {0: BATCH}, "pos": None}),
}


@pytest.mark.parametrize("name", CASES)
def test_compiled_once_matches_eager_at_three_sizes(name):
    f, args, spec = CASES[name]
    compiled = _compile(f, args, spec)
    assert compiled.dynamic and "tensor<?x" in compiled.stablehlo
    dynamic = [s is not None for s in spec.values()]
    for engine in ENGINES:
        for n in SIZES:
            assert_call_matches_eager(compiled, f, _batch_of(args, n, dynamic), {}, engine)


def test_module_with_mutated_buffer_and_dynamic_batch():
    model = CountingNorm()
    compiled = _compile(model, (torch.ones(3, 4),), {"x": {0: BATCH}})
    assert compiled.io_map == {0: 1} and compiled.input_names == ["running", "x"]
    for engine in ENGINES:
        model.running.zero_()
        eager = copy.deepcopy(model)
        for n in SIZES:
            x = torch.randn(n, 4)
            expected = eager(x.clone())
            actual = compiled.run((x,), {}, engine)
            torch.testing.assert_close(actual, expected)
        assert_module_state_matches(model, eager, f"[{engine}] running", engine)


def test_kv_write_is_a_scatter_of_k_on_the_dynamic_cache():
    """A write along a dynamic dimension is no dynamic_update_slice (its update would
    have a runtime size, which IREE refuses): one scatter of k itself as the window."""
    f, args, spec = CASES["kv_write"]
    text = _compile(f, args, spec).stablehlo
    assert "%cache: tensor<?x8x4xf32> {tf.aliasing_output = 1 : i32}" in text
    assert text.count("\"stablehlo.scatter\"(") == 1 and "dynamic_update_slice" not in text
    assert "(tensor<?x8x4xf32>, tensor<1xi64>, tensor<?x4xf32>) -> tensor<?x8x4xf32>" in text


def test_xla_runs_each_shape_specialized_in_place():
    pytest.importorskip("jax")
    f, args, spec = CASES["kv_write"]
    compiled = _compile(f, args, spec, engine="xla")
    cache, k = torch.zeros(6, 8, 4), torch.randn(6, 4)
    compiled(cache, k, torch.tensor(2))
    assert torch.equal(cache[:, 2], k)
    static = compiled.specialized([(6, 8, 4), (6, 4), ()])
    assert "?" not in static.stablehlo and static.input_types[0][0] == (6, 8, 4)
    assert static.in_place_report == {"cache": "in place"}
    with pytest.raises(ValueError, match="XLA compiles static shapes"):
        compiled.in_place_report
    with pytest.raises(ValueError, match="an HLO module proto needs static shapes"):
        compiled.hlo_module_proto()
    assert static.alias_problems("neuron") == []  # its proto has the cache's alias


def test_iree_updates_the_dynamic_cache_in_its_own_memory():
    iree = pytest.importorskip("iree.runtime")
    del iree
    f, args, spec = CASES["kv_write"]
    compiled = _compile(f, args, spec, engine="iree")
    inputs = [torch.zeros(7, 8, 4), torch.randn(7, 4), torch.tensor(3)]
    results = compiled._executable("iree")(inputs)
    assert results[1] is inputs[0] and torch.equal(inputs[0][:, 3], inputs[1])


def test_sizes_that_break_the_export_are_refused_at_the_call():
    f, args, spec = CASES["kv_write"]
    compiled = _compile(f, args, spec, engine="interpreter")
    cache = torch.zeros(3, 8, 4)
    with pytest.raises(ValueError, match="argument 'k' has size 4 at dimension 0, where "
                                         "argument 'cache' has 3"):
        compiled(cache, torch.ones(4, 4), torch.tensor(1))
    with pytest.raises(ValueError, match=r"argument 'cache' has size 65 at dimension 0, "
                                         r"outside the range \[2, 64\]"):
        compiled(torch.zeros(65, 8, 4), torch.ones(65, 4), torch.tensor(1))
    with pytest.raises(ValueError, match="was compiled for"):
        compiled(torch.zeros(3, 7, 4), torch.ones(3, 4), torch.tensor(1))
    assert cache.eq(0).all()


def index_rows(x, i):
    x[:, i] = 1.0
    return x.sum()


def test_write_at_index_tensors_into_a_dynamic_tensor_is_refused():
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        _compile(index_rows, (torch.randn(5, 4), torch.tensor([0, 2])),
                 {"x": {0: BATCH}, "i": None})
    assert info.value.op == "torch.aten.index_put"
    assert "a tensor with a dynamic dimension (dynamic_shapes)" in info.value.reason
    assert info.value.location.endswith(f"{THIS_FILE}:{index_rows.__code__.co_firstlineno + 1}")


def test_exported_program_with_dynamic_shapes_compiles():
    class ScaleRows(torch.nn.Module):
        def forward(self, x):
            x[:, 1:3].mul_(2)
            return x.sum()

    exported = torch.export.export(ScaleRows(), (torch.randn(8, 4),), strict=False,
                                   dynamic_shapes={"x": {0: Dim("rows", min=4)}})
    compiled = outofplace.compile(exported, (torch.randn(8, 4),), engine="interpreter")
    for n in (4, 9):
        x = torch.randn(n, 4)
        expected = x.clone()
        expected[:, 1:3] *= 2
        assert torch.allclose(compiled(x), expected.sum()) and torch.equal(x, expected)
    with pytest.raises(ValueError, match="dynamic_shapes is for a program to export"):
        outofplace.compile(exported, (torch.randn(8, 4),), dynamic_shapes={"x": None})


def zero_positive(x):
    x[x > 0] = 0
    return x.sum()


def test_masked_write_into_a_dynamic_tensor_is_refused_at_its_line():
    """A write at a bool mask counts the mask's trues over all of x, a running count of
    runtime size: refused, not torch-mlir's lowering failure."""
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        _compile(zero_positive, (torch.randn(5, 4),), {"x": {0: BATCH}})
    assert "a tensor with a dynamic dimension (dynamic_shapes)" in info.value.reason
    assert info.value.location.endswith(
        f"{THIS_FILE}:{zero_positive.__code__.co_firstlineno + 1}")


def prefill(cache, k):
    cache[:, :k.shape[1]] = k  # a prompt of dynamic length into a static cache
    return cache.sum(1)


def test_prefill_of_dynamic_length_into_a_static_cache():
    """The slice's end is the length, a runtime value torch-mlir's slice_scatter does not
    take: one scatter of k as the window at 0."""
    length = Dim("length", min=2, max=15)
    compiled = _compile(prefill, (torch.zeros(2, 16, 4), torch.ones(2, 3, 4)),
                        {"cache": None, "k": {1: length}})
    assert "%k: tensor<2x?x4xf32>" in compiled.stablehlo
    assert compiled.stablehlo.count('"stablehlo.scatter"(%cache') == 1
    for engine in ENGINES:
        for n in (2, 5, 9):
            assert_call_matches_eager(compiled, prefill,
                                      (torch.zeros(2, 16, 4), torch.randn(2, n, 4)), {},
                                      engine)
