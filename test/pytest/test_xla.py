"""XLA accepts outofplace's StableHLO, honours its aliases and computes eager's values."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import outofplace
from outofplace.backends import xla
from outofplace.backends.hlo_proto import MAY_ALIAS, aliases as hlo_aliases

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

from jax._src import xla_bridge  # noqa: E402
from jax._src.lib import _jax, xla_client  # noqa: E402

from differential import assert_same_tree  # noqa: E402


# ----------------------------------------------------------------------------- helpers
def to_hlo(compiled: outofplace.Compiled):
    return _jax.mlir.mlir_module_to_xla_computation(
        compiled.stablehlo, use_tuple_args=False, return_tuple=False)


def expected_aliases(compiled: outofplace.Compiled) -> list[dict]:
    return sorted(({"output_shape_index": [result], "parameter_number": arg,
                    "parameter_shape_index": [], "kind": MAY_ALIAS}
                   for arg, result in compiled.io_map.items()),
                  key=lambda e: e["parameter_number"])


def run_on_xla_cpu(compiled: outofplace.Compiled, inputs: list[torch.Tensor]):
    """Compiles the StableHLO text with XLA:CPU and runs it; returns the results and the
    device arrays of the inputs (to see which XLA donated)."""
    executable = xla.compile_for_cpu(compiled.stablehlo)
    device = executable.local_devices()[0]
    arrays = [jax.device_put(t.numpy(), device) for t in inputs]
    results = executable.execute(arrays)
    return [torch.from_numpy(np.asarray(r).copy()) for r in results], arrays, executable


def step(cache, x):
    cache.mul_(0.5)
    cache.add_(x)
    return cache.sum()


def decode_step(k_cache, v_cache, k, v, weights):
    k_cache.mul_(0.9).add_(k)
    v_cache.mul_(0.9).add_(v)
    scores = (k_cache * weights).sum(-1)
    return torch.tanh(scores), v_cache.mean()


# ------------------------------------------------------------------------------- tests
def test_kv_cache_step_hlo_proto_has_alias() -> None:
    compiled = outofplace.compile(step, [torch.randn(4, 8), torch.randn(4, 8)])
    assert compiled.io_map == {0: 1}
    proto = to_hlo(compiled).as_serialized_hlo_module_proto()
    assert hlo_aliases(proto) == [{"output_shape_index": [1], "parameter_number": 0,
                                   "parameter_shape_index": [], "kind": MAY_ALIAS}]


def test_kv_cache_step_hlo_text_has_alias() -> None:
    compiled = outofplace.compile(step, [torch.randn(4, 8), torch.randn(4, 8)])
    text = to_hlo(compiled).as_hlo_text()
    assert "input_output_alias={ {1}: (0, {}, may-alias) }" in text


def test_unmutated_program_has_no_alias() -> None:
    compiled = outofplace.compile(lambda a, b: a * b, [torch.randn(3), torch.randn(3)])
    proto = to_hlo(compiled).as_serialized_hlo_module_proto()
    assert hlo_aliases(proto) == []
    assert "input_output_alias" not in to_hlo(compiled).as_hlo_text()


def test_several_caches_hlo_proto_aliases() -> None:
    args = [torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4),
            torch.randn(2, 6, 4), torch.randn(4)]
    compiled = outofplace.compile(decode_step, args)
    assert compiled.io_map == {0: 2, 1: 3}
    proto = to_hlo(compiled).as_serialized_hlo_module_proto()
    assert hlo_aliases(proto) == expected_aliases(compiled)


def test_kv_cache_step_runs_on_xla_cpu_like_eager() -> None:
    cache, x = torch.randn(4, 8), torch.randn(4, 8)
    compiled = outofplace.compile(step, [cache.clone(), x.clone()])
    results, arrays, executable = run_on_xla_cpu(compiled, [cache.clone(), x.clone()])
    assert "input_output_alias={ {1}: (0, {}, may-alias) }" in \
        executable.hlo_modules()[0].to_string()

    eager_cache = cache.clone()
    expected = step(eager_cache, x.clone())
    assert_same_tree(results[0], expected, "output")
    assert_same_tree(results[compiled.io_map[0]], eager_cache, "cache after the call")
    # The aliased input's buffer was donated to the result; the other input was not.
    assert arrays[0].is_deleted()
    assert not arrays[1].is_deleted()


def test_decode_step_runs_on_xla_cpu_like_eager() -> None:
    args = [torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4),
            torch.randn(2, 6, 4), torch.randn(4)]
    compiled = outofplace.compile(decode_step, [a.clone() for a in args])
    results, arrays, _ = run_on_xla_cpu(compiled, [a.clone() for a in args])

    eager_args = [a.clone() for a in args]
    expected = decode_step(*eager_args)
    assert_same_tree(results[:2], list(expected), "outputs")
    for arg, result in compiled.io_map.items():
        assert_same_tree(results[result], eager_args[arg], f"argument {arg} after the call")
        assert arrays[arg].is_deleted()
    assert [a.is_deleted() for a in arrays] == [True, True, False, False, False]


def test_xla_agrees_with_reference_interpreter() -> None:
    cache, x = torch.randn(4, 8), torch.randn(4, 8)
    compiled = outofplace.compile(step, [cache.clone(), x.clone()])
    results, _, _ = run_on_xla_cpu(compiled, [cache.clone(), x.clone()])
    interpreted_cache = cache.clone()
    output = compiled(interpreted_cache, x.clone())
    assert_same_tree(results[0], output, "output")
    assert_same_tree(results[1], interpreted_cache, "cache")


class Accumulator(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(8))
        self.register_buffer("total", torch.zeros(8, dtype=torch.float64))

    def forward(self, x):
        self.total.add_(x * self.scale)
        return self.total.sum()


def test_module_buffer_alias_on_xla_cpu() -> None:
    module = Accumulator()
    x = torch.randn(8, dtype=torch.float64)
    compiled = outofplace.compile(module, [x.clone()])
    assert compiled.input_names == ["scale", "total", "x"]
    assert compiled.io_map == {1: 1}
    proto = to_hlo(compiled).as_serialized_hlo_module_proto()
    assert hlo_aliases(proto) == expected_aliases(compiled)

    inputs = [module.scale.detach().clone(), module.total.clone(), x.clone()]
    results, arrays, _ = run_on_xla_cpu(compiled, inputs)
    with torch.no_grad():
        expected = module(x.clone())
    assert_same_tree(results[0], expected, "output")
    assert_same_tree(results[1], module.total, "buffer after the call")
    assert [a.is_deleted() for a in arrays] == [False, True, False]


def add_constant_row(cache, x):
    cache.add_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    cache.mul_(x)
    return cache.mean()


def test_tensor_constant_runs_on_xla_cpu_like_eager() -> None:
    cache, x = torch.randn(2, 4), torch.randn(2, 4)
    compiled = outofplace.compile(add_constant_row, [cache.clone(), x.clone()])
    results, _, _ = run_on_xla_cpu(compiled, [cache.clone(), x.clone()])
    eager_cache = cache.clone()
    expected = add_constant_row(eager_cache, x.clone())
    assert_same_tree(results[0], expected, "output")
    assert_same_tree(results[compiled.io_map[0]], eager_cache, "cache after the call")


def update_reading_through_a_reshape(x):
    x[:, 2, :] = 0.5
    x.view(-1, 4)[5:] += 1
    x[:, :, 3] = x[0].t() * 2


def plain_xla_cpu_executable(stablehlo: str):
    """XLA:CPU's executable as compile_and_load makes it, without compile_for_cpu's check."""
    client = xla_bridge.get_backend("cpu")
    devices = xla_client.DeviceList(tuple(client.local_devices()[:1]))
    return client.compile_and_load(stablehlo, devices, xla_client.CompileOptions())


def test_update_reading_its_buffer_through_a_reshape_runs_like_eager() -> None:
    """XLA:CPU's fusion pass fuses the read of x[0] into the in-place update of x[:, :, 3]
    because the two reach x through different bitcasts, and the update overwrites x[0, :, 3]
    before it reads it. compile_for_cpu sees the fusion and compiles without it."""
    x = torch.arange(48.0).reshape(4, 3, 4)
    compiled = outofplace.compile(update_reading_through_a_reshape, [x.clone()])
    plain = plain_xla_cpu_executable(compiled.stablehlo)
    assert any(xla.misfusion.reads_updated_buffer_through_another_alias(m)
               for m in plain.hlo_modules())

    results, _, _ = run_on_xla_cpu(compiled, [x.clone()])
    expected = x.clone()
    update_reading_through_a_reshape(expected)
    assert_same_tree(results[compiled.io_map[0]], expected, "x after the call")


def test_misfusion_fallback_keeps_the_other_disabled_passes() -> None:
    """Compiled again without XLA's fusion pass, a program still goes without the passes
    outofplace's options disable (the reshape mover: COMPILE_OPTIONS)."""
    x = torch.arange(48.0).reshape(4, 3, 4)
    compiled = outofplace.compile(update_reading_through_a_reshape, [x.clone()])
    plain = plain_xla_cpu_executable(compiled.stablehlo)
    built = []

    def build(options):
        built.append(options)
        return plain

    xla.misfusion.without_misfusion(build, xla.COMPILE_OPTIONS)
    assert [b["xla_disable_hlo_passes"] for b in built] == ["reshape-mover",
                                                            "reshape-mover,fusion"]


def _unsplit_fusion(x, w, z):
    z.mul_(0.9).add_(torch.sin(z))
    return torch.nn.functional.conv2d(x, w, padding=1)


def _split_fusion(x, w, z):
    z.mul_(0.9).add_(torch.sin(z))
    return x * 2


@pytest.mark.parametrize("program, partitions", [(_unsplit_fusion, 0), (_split_fusion, 1)])
def test_fusions_beside_eagers_kernels_are_whole(program, partitions) -> None:
    """A program that calls eager's kernels (a convolution) runs its fusions whole on
    the caller's thread (compiler.UNSPLIT: XLA's parallel task assignment off); one
    without keeps XLA's split of a large fusion. Both compute eager's values."""
    from outofplace.backends import custom_calls

    if custom_calls.extension() is None:
        pytest.skip("needs the kernel handler (backends/kernel_call.cpp)")
    args = [torch.randn(4, 16, 24, 24), torch.randn(32, 16, 3, 3), torch.randn(1 << 20)]
    compiled = outofplace.compile(program, [a.clone() for a in args])
    executable, *_ = xla.compiler.cached_compile_for_cpu(compiled.stablehlo,
                                                        xla.COMPILE_OPTIONS, False)
    text = executable.hlo_modules()[0].to_string()
    assert text.count("outer_dimension_partitions") == partitions
    assert text.count('custom_call_target="aten::convolution"') == 1 - partitions
    got, expected = [a.clone() for a in args], [a.clone() for a in args]
    torch.testing.assert_close(compiled(*got), program(*expected))
    torch.testing.assert_close(got[2], expected[2])


def test_kv_cache_updates_keep_xla_fusion() -> None:
    """The check does not fire on the usual in-place updates: they keep XLA's fusions."""
    cache, x = torch.randn(4, 8), torch.randn(4, 8)
    compiled = outofplace.compile(step, [cache.clone(), x.clone()])
    plain = plain_xla_cpu_executable(compiled.stablehlo)
    assert not any(xla.misfusion.reads_updated_buffer_through_another_alias(m)
                   for m in plain.hlo_modules())


def test_a_module_xla_rejects_is_an_internal_error_with_the_module() -> None:
    """XLA's own error text is no message for a user: the module is saved to report."""
    module = """func.func @main(%a: tensor<5xui8>, %b: tensor<5xui8>) -> tensor<5xi1> {
  %0 = stablehlo.compare GT, %a, %b, SIGNED : (tensor<5xui8>, tensor<5xui8>) -> tensor<5xi1>
  return %0 : tensor<5xi1>
}"""
    with pytest.raises(xla.XlaCompileError, match="internal error: XLA:CPU could not compile "
                       "the StableHLO outofplace emitted") as info:
        xla.compile_for_cpu(module)
    path = str(info.value).split("report it with ")[1].split(")")[0]
    assert Path(path).read_text() == module


def test_in_place_report_names_the_argument_xla_copies() -> None:
    """Two counters given one new value: XLA writes it into one through a `copy` at the
    root, which the report puts on that counter, not on the argument whose position among
    the written ones matches the result's index (the cache, with a result before them)."""
    def step(a, b, cache, x):
        cache[0] = x
        a.fill_(x.sum())
        b.fill_(x.sum())
        return x * 2

    compiled = outofplace.compile(step, (torch.zeros(()), torch.zeros(()),
                                         torch.zeros(64, 1024), torch.randn(1024)))
    assert compiled.io_map == {0: 1, 1: 2, 2: 3}
    report = compiled.in_place_report  # says it (4 bytes: under WARN_BYTES, no warning)
    assert report["cache"] == "in place"
    assert sorted(v.split(":")[0] for v in report.values()) == \
        ["copied 4 bytes per call", "in place", "in place"]
    assert report["b"].endswith("the program gives it the same new value as argument "
                                "'a', and one buffer cannot be both")
    with warnings.catch_warnings(record=True) as caught:  # 4 bytes: said, not warned
        warnings.simplefilter("always")
        compiled(torch.zeros(()), torch.zeros(()), torch.zeros(64, 1024), torch.randn(1024))
    assert not [w for w in caught if "copied" in str(w.message)]
