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


def _shifted_copy(x):
    """openxla/xla#49176's reproducer: the operand shifted down by one row."""
    base = x + np.int32(1)
    return jax.lax.dynamic_update_slice(base, base[:3], (1, 0, 0)).reshape((1, 4, 1))


def test_dynamic_update_slice_fusion_reads_its_own_output() -> None:
    """openxla/xla#49176 (open): XLA:CPU fuses a dynamic-update-slice whose update is a
    shifted slice of its operand into an in-place kernel that overwrites elements before
    reading them. Workaround: `xla._without_misfusion` finds the fusion in the optimized
    HLO (`_reads_updated_buffer_through_another_alias`) and compiles again without the
    fusion pass."""
    x = np.arange(4, dtype=np.int32).reshape(4, 1, 1)
    expected = [1, 1, 2, 3]
    assert np.asarray(jax.jit(_shifted_copy)(x)).ravel().tolist() != expected  # the bug
    compiled = jax.jit(_shifted_copy).lower(x).compile()
    assert any(xla._reads_updated_buffer_through_another_alias(m)
               for m in xla._executable_of(compiled).hlo_modules())
    text = jax.jit(_shifted_copy).lower(x).as_text()
    executable = xla.compile_for_cpu(text)
    assert not any(xla._reads_updated_buffer_through_another_alias(m)
                   for m in executable.hlo_modules())
    result = executable.execute_sharded([xla._put(x)])
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
        xla._plain_problems(_READ_BEFORE_UPDATE, {0: 1}, options)[1]
        for options in ({}, {xla.CONSUMER_OPTION: True}))
    assert copied == {0}  # the bug
    assert with_option == set()
    assert xla.COMPILE_OPTIONS[xla.CONSUMER_OPTION] is True
    executable = xla.compile_for_cpu(_READ_BEFORE_UPDATE)
    assert not any(hlo_proto.copied_parameters(m.as_serialized_hlo_module_proto())
                   for m in executable.hlo_modules())

