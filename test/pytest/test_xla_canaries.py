"""Canaries: XLA:CPU bugs outofplace works around, pinned as jaxlib 0.10.2 has them.

Each test shows the bug on the smallest program that has it, then that outofplace's
workaround gets the right answer. When a canary's first assertion fails, upstream fixed
the bug: delete the workaround it names and the canary with it.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from outofplace.backends import hlo_proto, xla  # noqa: E402
from test_reduced_precision import native_float16  # noqa: E402


def _shifted_copy(x):
    """openxla/xla#49176's reproducer: the operand shifted down by one row."""
    base = x + np.int32(1)
    return jax.lax.dynamic_update_slice(base, base[:3], (1, 0, 0)).reshape((1, 4, 1))


def test_dynamic_update_slice_fusion_reads_its_own_output() -> None:
    """openxla/xla#49176 (open): XLA:CPU fuses a dynamic-update-slice whose update is a
    shifted slice of its operand into an in-place kernel that overwrites elements before
    reading them. Workaround: `xla.misfusion.without_misfusion` finds the fusion in the optimized
    HLO (`_reads_updated_buffer_through_another_alias`) and compiles again without the
    fusion pass."""
    x = np.arange(4, dtype=np.int32).reshape(4, 1, 1)
    expected = [1, 1, 2, 3]
    assert np.asarray(jax.jit(_shifted_copy)(x)).ravel().tolist() != expected  # the bug
    compiled = jax.jit(_shifted_copy).lower(x).compile()
    assert any(xla.misfusion.reads_updated_buffer_through_another_alias(m)
               for m in xla.misfusion.executable_of(compiled).hlo_modules())
    text = jax.jit(_shifted_copy).lower(x).as_text()
    executable = xla.compile_for_cpu(text)
    assert not any(xla.misfusion.reads_updated_buffer_through_another_alias(m)
                   for m in executable.hlo_modules())
    result = executable.execute_sharded([xla.buffers.put(x)])
    assert np.asarray(result.disassemble_into_single_device_arrays()[0][0]).ravel() \
        .tolist() == expected


_READ_BEFORE_UPDATE = """module {
  func.func @main(%c: tensor<1x8x1024x64xf32> {tf.aliasing_output = 1 : i32},
                  %n: tensor<1x8x1x64xf32>, %p: tensor<i64>)
      -> (tensor<f32>, tensor<1x8x1024x64xf32>) {
    %z = stablehlo.constant dense<0> : tensor<i64>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %old = stablehlo.slice %c [0:1, 0:8, 0:1, 0:64]
        : (tensor<1x8x1024x64xf32>) -> tensor<1x8x1x64xf32>
    %r = stablehlo.reduce(%old init: %zero) applies stablehlo.add across dimensions = [0, 1, 2, 3]
        : (tensor<1x8x1x64xf32>, tensor<f32>) -> tensor<f32>
    %new = stablehlo.dynamic_update_slice %c, %n, %z, %z, %p, %z
        : (tensor<1x8x1024x64xf32>, tensor<1x8x1x64xf32>, tensor<i64>, tensor<i64>,
           tensor<i64>, tensor<i64>) -> tensor<1x8x1024x64xf32>
    return %r, %new : tensor<f32>, tensor<1x8x1024x64xf32>
  }
}"""


def test_copy_insertion_copies_a_donated_buffer_read_before_its_update() -> None:
    """openxla/xla#20440 (open): XLA:CPU's default copy insertion cannot order a read of a
    donated buffer before its in-place update and copies the buffer (twice). Workaround:
    outofplace's engine compiles with `xla_cpu_copy_insertion_use_region_analysis`
    (`xla.COMPILE_OPTIONS`); `alias_problems("xla")` and `save()` tell a plain consumer
    to (`xla.CONSUMER_HINT`)."""
    copied, with_option = (
        xla.consumers.plain_problems(_READ_BEFORE_UPDATE, {0: 1}, options)[1]
        for options in ({}, {xla.CONSUMER_OPTION: True}))
    assert copied == {0}  # the bug
    assert with_option == set()
    assert xla.COMPILE_OPTIONS[xla.CONSUMER_OPTION] is True
    executable = xla.compile_for_cpu(_READ_BEFORE_UPDATE)
    assert not any(hlo_proto.copied_parameters(m.as_serialized_hlo_module_proto())
                   for m in executable.hlo_modules())



def _fill(s, v, i, w, j):
    """Probe fuzzer seed 2,812 (test_sharding.py
    `test_scatter_into_a_value_computed_whole_then_split`)."""
    s[:] = v
    s.scatter_(0, i, w)
    s.index_fill_(0, j, -5)
    return s.clone()


def test_sharded_scatter_after_a_write_is_wrong_without_a_barrier(monkeypatch) -> None:
    """openxla/xla#49121 (open): XLA's AlgebraicSimplifier folds a dynamic-slice of a
    dynamic-slice into one clamped with the wrong size; on a mesh it folds the slice of
    each device's shard into a scatter's read, clamped into the whole operand: devices
    not owning the filled index write the element at their shard's edge. Workaround:
    the mesh engine's legalization puts each scatter's operand behind an
    optimization_barrier (`outofplace-barrier-scatter-operands`)."""
    import torch

    import outofplace
    from outofplace.backends import spmd

    def run() -> list[float]:
        args = (torch.zeros(16), torch.arange(16.0),
                torch.tensor([15, 0, 12, 14, 8, 10, 2]), -torch.arange(1.0, 8.0),
                torch.tensor([3]))
        compiled = outofplace.compile(_fill, args, mesh={"x": 2}, shardings={"s": ("x",)})
        s = torch.zeros(16)
        compiled(s, *args[1:])
        return s.tolist()

    eager = torch.zeros(16)
    _fill(eager, torch.arange(16.0), torch.tensor([15, 0, 12, 14, 8, 10, 2]),
          -torch.arange(1.0, 8.0), torch.tensor([3]))
    assert "outofplace-barrier-scatter-operands" in spmd.LEGALIZE_FOR_MESH
    monkeypatch.setattr(spmd.executable, "LEGALIZE_FOR_MESH", spmd.LEGALIZE_FOR_MESH.replace(
        ", outofplace-barrier-scatter-operands", ""))
    assert run() != eager.tolist()  # the bug: XLA:CPU without the barrier
    monkeypatch.undo()
    assert run() == eager.tolist()


_PARTITION = """
import sys
import numpy as np
from jax._src.lib import xla_client
client = xla_client.make_cpu_client(num_devices=2)
options = xla_client.CompileOptions()
options.executable_build_options.num_partitions = 2
options.executable_build_options.use_spmd_partitioning = True
options.device_assignment = xla_client.DeviceAssignment.create(np.array([[0, 1]]))
client.compile_and_load(sys.stdin.read(), xla_client.DeviceList(
    tuple(client.local_devices()[:2])), options)
print("partitioned")
"""


def test_partitioner_aborts_on_64_bit_scatter_indices_sharded_unevenly(monkeypatch) -> None:
    """No upstream issue found (openxla/xla#24371 fixed the like for a
    dynamic-update-slice's indices): the SPMD partitioner pads a scatter's indices it
    shards unevenly with a 32-bit constant and, with torch's 64-bit indices, aborts the
    process (`x.diagonal().add_(1)` on a [4, 1, 4] state split over its first
    dimension). Workaround: the sharding annotation narrows scatter and gather indices
    to 32 bits (`outofplace-narrow-indices`). The exported program, compiled for 2
    devices as a plain XLA consumer compiles it, in a process of its own: it aborts."""
    import os
    import subprocess
    import sys

    import torch

    import outofplace
    from outofplace.transforms import sharding

    def f(x):
        x.diagonal().add_(1)
        return x.sum()

    def partition() -> subprocess.CompletedProcess:
        compiled = outofplace.compile(f, (torch.zeros(4, 1, 4),), mesh={"x": 2},
                                      shardings={"x": ("x", None, None)})
        environment = {**os.environ,
                       "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
        return subprocess.run([sys.executable, "-c", _PARTITION], input=compiled.stablehlo,
                              env=environment, capture_output=True, text=True, timeout=120)

    monkeypatch.setattr(sharding, "narrow_indices", lambda module: None)
    done = partition()
    assert done.returncode != 0 and "partitioned" not in done.stdout  # the bug: it died
    assert "IsScalarWithElementType" in done.stderr, done.stderr[-2000:]
    monkeypatch.undo()
    done = partition()
    assert done.returncode == 0 and "partitioned" in done.stdout, done.stderr[-2000:]


_ROUNDED_PRODUCT_MINUS = """module {
  func.func @main(%a: tensor<4096xf16>, %b: tensor<4096xf16>) -> tensor<4096xf16> {
    %a32 = stablehlo.convert %a : (tensor<4096xf16>) -> tensor<4096xf32>
    %b32 = stablehlo.convert %b : (tensor<4096xf16>) -> tensor<4096xf32>
    %p = stablehlo.multiply %a32, %b32 : tensor<4096xf32>
    %p16 = stablehlo.convert %p : (tensor<4096xf32>) -> tensor<4096xf16>
    %p32 = stablehlo.convert %p16 : (tensor<4096xf16>) -> tensor<4096xf32>
    %d = stablehlo.subtract %p32, %b32 : tensor<4096xf32>
    %d16 = stablehlo.convert %d : (tensor<4096xf32>) -> tensor<4096xf16>
    return %d16 : tensor<4096xf16>
  }
}"""


@pytest.mark.skipif(not native_float16(),
                    reason="the contraction needs a CPU computing float16 natively")
def test_float16_product_contracted_into_the_add_on_native_float16() -> None:
    """No upstream issue found, no workaround: on a CPU with AVX512-FP16, XLA:CPU's LLVM
    narrows a float32 product of float16 values rounded to float16, and the subtraction
    after it, to float16 ops, then contracts the two into one fused multiply-add (XLA
    allows every contraction): the product's rounding, stated by the convert to float16
    and back, is lost, and the result is one rounding from eager's. Nothing in StableHLO
    keeps them apart inside a fusion (an `optimization_barrier` is expanded away, XLA's
    `xla_cpu_max_isa` is read when the client is made, not per compile), so
    test_reduced_precision.py allows that rounding on such a CPU (`CONTRACTED`). When
    this fails, XLA keeps the rounding: drop `CONTRACTED`. `a * b - b`, rounded after
    each op as eager does."""
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(4096) * 3).astype(np.float16)
    b = rng.standard_normal(4096).astype(np.float16)
    product = (a.astype(np.float32) * b.astype(np.float32)).astype(np.float16)
    expected = (product.astype(np.float32) - b.astype(np.float32)).astype(np.float16)
    executable = xla.compile_for_cpu(_ROUNDED_PRODUCT_MINUS)
    result = executable.execute_sharded([xla.buffers.put(a), xla.buffers.put(b)])
    got = np.asarray(result.disassemble_into_single_device_arrays()[0][0])
    assert (got != expected).any()  # the contraction
    fused = (a.astype(np.float32) * b.astype(np.float32) - b.astype(np.float32)) \
        .astype(np.float16)  # one rounding: the fused multiply-add's
    assert (got == fused).all()
