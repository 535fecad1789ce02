"""Canaries: IREE 3.13 bugs the IREE engine works around (the `legalize-for-iree`
passes, transforms/upstream/iree/), pinned as IREE has them.

Each test compiles a reduced StableHLO module with IREE's own `compile_str` (none of the
engine's rewrites) and asserts the failure or the wrong answer. When a canary fails,
IREE fixed the bug: delete the pass it names (and its lit test, and its place in the
pipeline) and the canary with it. A bug that writes or reads out of a buffer runs in a
subprocess: it may abort the process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from outofplace.backends import iree as engine
from outofplace.backends.iree import compiler, executable

pytestmark = pytest.mark.skipif(not engine.available(), reason="needs the iree extra")


def _compile(text: str) -> bytes:
    from iree import compiler

    return compiler.compile_str(text, extra_args=engine.FLAGS)


def _run(text: str, *inputs: np.ndarray) -> list[np.ndarray]:
    import iree.runtime as rt

    context = rt.SystemContext(config=rt.Config(engine.DRIVER))
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, _compile(text)))
    results = context.modules.module.main(*inputs)
    return [np.asarray(r) for r in (results if isinstance(results, (list, tuple))
                                    else [results])]


def test_gather_from_a_strided_slice_does_not_compile() -> None:
    """Workaround: outofplace-iree-copy-sliced-operands, a barrier on a gather operand that
    is a slice."""
    with pytest.raises(Exception, match="unrealized_conversion_cast"):
        _compile("""
func.func @main(%x: tensor<4x3x1xf32>, %i: tensor<2x3xi64>) -> tensor<2xf32> {
  %0 = stablehlo.slice %x [0:4, 2:3, 0:1] : (tensor<4x3x1xf32>) -> tensor<4x1x1xf32>
  %1 = "stablehlo.gather"(%0, %i) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1, 2], start_index_map = [0, 1, 2], index_vector_dim = 1>, slice_sizes = array<i64: 1, 1, 1>}> : (tensor<4x1x1xf32>, tensor<2x3xi64>) -> tensor<2xf32>
  return %1 : tensor<2xf32>
}""")


_TOPK = """
func.func @main(%x: tensor<3x8xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>) {
  %0 = stablehlo.iota dim = 1 : tensor<3x8xi64>
  %1:2 = "stablehlo.sort"(%x, %0) <{dimension = 1 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i64>, %d: tensor<i64>):
    %2 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %2 : tensor<i1>
  }) : (tensor<3x8xf32>, tensor<3x8xi64>) -> (tensor<3x8xf32>, tensor<3x8xi64>)
  %3 = stablehlo.slice %1#0 [0:3, 0:2] : (tensor<3x8xf32>) -> tensor<3x2xf32>
  %4 = stablehlo.slice %1#1 [0:3, 0:2] : (tensor<3x8xi64>) -> tensor<3x2xi64>
  return %3, %4 : tensor<3x2xf32>, tensor<3x2xi64>
}"""


def test_sort_of_a_sliced_argument_does_not_compile() -> None:
    """`topk(x[:, :8])`: the sort reads a strided slice of an argument. Workaround:
    outofplace-iree-copy-sliced-operands, a barrier on the sort's sliced operand."""
    with pytest.raises(Exception, match="write affecting operations on global resources"):
        _compile("""
func.func @main(%x: tensor<3x130xf32>) -> tensor<3x8xf32> {
  %0 = stablehlo.slice %x [0:3, 0:8] : (tensor<3x130xf32>) -> tensor<3x8xf32>
  %1 = "stablehlo.sort"(%0) <{dimension = 1 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %2 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %2 : tensor<i1>
  }) : (tensor<3x8xf32>) -> tensor<3x8xf32>
  return %1 : tensor<3x8xf32>
}""")


def test_topk_with_64_bit_indices_does_not_compile() -> None:
    """torch-mlir's topk (a sort of the values and their 64-bit indices, sliced): IREE
    matches it to a top_k of 32-bit indices and fails. Workaround:
    outofplace-iree-sort-behind-barrier."""
    with pytest.raises(Exception, match="'chlo.top_k' op inferred type"):
        _compile(_TOPK)


def test_adjacent_fills_of_one_constant_are_merged_wrongly() -> None:
    """Workaround: outofplace-iree-shield-constant-updates, a barrier on a constant update."""
    with pytest.raises(Exception, match="invalid Write access range"):
        _compile("""
func.func @main(%x: tensor<7xf32>) -> tensor<7xf32> {
  %c4 = stablehlo.constant dense<4> : tensor<i64>
  %c5 = stablehlo.constant dense<5> : tensor<i64>
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<1xf32>
  %0 = stablehlo.dynamic_update_slice %x, %zero, %c5 : (tensor<7xf32>, tensor<1xf32>, tensor<i64>) -> tensor<7xf32>
  %1 = stablehlo.dynamic_update_slice %0, %zero, %c4 : (tensor<7xf32>, tensor<1xf32>, tensor<i64>) -> tensor<7xf32>
  return %1 : tensor<7xf32>
}""")


def test_update_read_from_its_own_place_copies_a_buffer_onto_itself() -> None:
    """Workaround: outofplace-iree-shield-self-updates, a barrier on an update read from its
    operand."""
    with pytest.raises(Exception, match="ranges overlap"):
        _run("""
func.func @main(%x: tensor<1x5xf32>) -> tensor<1x5xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c3 = stablehlo.constant dense<3> : tensor<i64>
  %one = stablehlo.constant dense<1.000000e+00> : tensor<1x5xf32>
  %0 = stablehlo.add %one, %x : tensor<1x5xf32>
  %1 = stablehlo.reshape %0 : (tensor<1x5xf32>) -> tensor<5xf32>
  %2 = stablehlo.slice %1 [3:4] : (tensor<5xf32>) -> tensor<1xf32>
  %3 = stablehlo.reshape %2 : (tensor<1xf32>) -> tensor<1x1xf32>
  %4 = stablehlo.dynamic_update_slice %0, %3, %c0, %c3 : (tensor<1x5xf32>, tensor<1x1xf32>, tensor<i64>, tensor<i64>) -> tensor<1x5xf32>
  return %4 : tensor<1x5xf32>
}""", np.arange(5, dtype=np.float32).reshape(1, 5))


def test_read_is_scheduled_after_the_in_place_update_beside_a_constant_result() -> None:
    """r = x[1:] - 1 must read x before x[1, 0] *= 2.5 updates it; with a constant
    result beside, IREE's concurrent schedule runs the update first. Workaround:
    outofplace-iree-serial-schedule, the module's `stream.partitioning` is `debug`."""
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    r, _, _ = _run("""
func.func @main(%x: tensor<4x2xf32>) -> (tensor<3x2xf32>, tensor<1xi64>, tensor<4x2xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c1 = stablehlo.constant dense<1> : tensor<i64>
  %k = stablehlo.constant dense<0> : tensor<1xi64>
  %two = stablehlo.constant dense<2.000000e+00> : tensor<4x2xf32>
  %0 = stablehlo.multiply %x, %two : tensor<4x2xf32>
  %1 = stablehlo.slice %0 [1:4, 0:2] : (tensor<4x2xf32>) -> tensor<3x2xf32>
  %one = stablehlo.constant dense<1.000000e+00> : tensor<3x2xf32>
  %2 = stablehlo.subtract %1, %one : tensor<3x2xf32>
  %3 = stablehlo.slice %0 [1:2, 0:1] : (tensor<4x2xf32>) -> tensor<1x1xf32>
  %f = stablehlo.constant dense<2.500000e+00> : tensor<1x1xf32>
  %4 = stablehlo.multiply %3, %f : tensor<1x1xf32>
  %5 = stablehlo.dynamic_update_slice %0, %4, %c1, %c0 : (tensor<4x2xf32>, tensor<1x1xf32>, tensor<i64>, tensor<i64>) -> tensor<4x2xf32>
  return %2, %k, %5 : tensor<3x2xf32>, tensor<1xi64>, tensor<4x2xf32>
}""", x)
    assert r[0, 0] != x[1, 0] * 2 - 1, "IREE now reads before the update"


def _run_isolated(text: str, *inputs: np.ndarray) -> subprocess.CompletedProcess:
    """`_run` in a subprocess, for a bug that writes or reads out of a buffer (it may
    abort the process): its stdout is the results as JSON lists."""
    script = f"""
import json, sys
import numpy as np
import iree.runtime as rt
from iree import compiler
context = rt.SystemContext(config=rt.Config({engine.DRIVER!r}))
vmfb = compiler.compile_str({text!r}, extra_args={engine.FLAGS!r})
context.add_vm_module(rt.VmModule.copy_buffer(context.instance, vmfb))
inputs = [np.array(values, dtype=dtype) for values, dtype in json.loads(sys.stdin.read())]
print(json.dumps([np.asarray(context.modules.module.main(*inputs)).tolist()]))
"""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, input=json.dumps([(a.tolist(), str(a.dtype))
                                                         for a in inputs]))


def _run_in_place(text: str, *inputs: torch.Tensor, results: int = 1) -> list:
    """Runs `main` on the inputs' own memory, imported as the engine imports it; its
    results as float32 tensors."""
    import iree.runtime as rt

    _, instance, device = executable._runtime()
    module = rt.VmModule.copy_buffer(instance, _compile(text))
    context = rt.VmContext(instance, [rt.create_hal_module(instance, device), module])
    arguments = rt.VmVariantList(len(inputs))
    for tensor in inputs:
        data, view = executable._import(tensor)
        assert data.data_ptr() == tensor.data_ptr()
        arguments.push_ref(view.ref)
    outputs = rt.VmVariantList(results)
    context.invoke(module.lookup_function("main"), arguments, outputs)
    return [executable._to_torch(outputs.get_as_object(i, rt.HalBufferView), torch.float32)
            for i in range(results)]


def test_scatter_through_a_transpose_of_a_unit_dimension_writes_the_input() -> None:
    """x is not consumed, yet IREE scatters into its buffer: the transpose moves only a
    dimension of size one, and IREE folds it away. Workaround:
    outofplace-iree-copy-written-inputs follows such transposes (`_keeps_order`), so x is
    passed as a copy."""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    _run_in_place("""
func.func @main(%x: tensor<1x5xf32>) -> tensor<5xf32> {
  %i = stablehlo.constant dense<[[1], [4]]> : tensor<2x1xi64>
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
  %0 = stablehlo.transpose %x, dims = [1, 0] : (tensor<1x5xf32>) -> tensor<5x1xf32>
  %1 = stablehlo.reshape %0 : (tensor<5x1xf32>) -> tensor<5xf32>
  %2 = "stablehlo.scatter"(%1, %i, %zero) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<5xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<5xf32>
  return %2 : tensor<5xf32>
}""", x)
    assert x.tolist() == [[1.0, 0.0, 3.0, 4.0, 0.0]], "IREE no longer writes the input"


def test_result_folded_to_an_argument_is_written_by_its_update() -> None:
    """r = x * 1 is x to IREE, which returns x's buffer for r and writes the update of x
    into that buffer: r comes back updated. Workaround:
    outofplace-iree-copy-folded-results, a barrier on r."""
    r, updated = _run("""
func.func @main(%x: tensor<1x3xf32>) -> (tensor<1x3xf32>, tensor<1x3xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c1 = stablehlo.constant dense<1> : tensor<i64>
  %five = stablehlo.constant dense<5.000000e+00> : tensor<1x1xf32>
  %one = stablehlo.constant dense<1.000000e+00> : tensor<1x3xf32>
  %r = stablehlo.multiply %x, %one : tensor<1x3xf32>
  %0 = stablehlo.dynamic_update_slice %x, %five, %c0, %c1 : (tensor<1x3xf32>, tensor<1x1xf32>, tensor<i64>, tensor<i64>) -> tensor<1x3xf32>
  return %r, %0 : tensor<1x3xf32>, tensor<1x3xf32>
}""", np.array([[1.0, 2.0, 3.0]], dtype=np.float32))
    assert updated.tolist() == [[1.0, 5.0, 3.0]]
    assert r.tolist() == [[1.0, 5.0, 3.0]], "IREE now returns x as it came"


def test_two_scatters_with_one_index_tensor_do_not_compile() -> None:
    """Workaround: outofplace-iree-separate-scatter-indices, a barrier on the indices of
    each scatter after the first that takes the same index tensor."""
    with pytest.raises(Exception, match="unresolved source materialization"):
        _compile("""
func.func @main(%x: tensor<4x2xf32>, %index: tensor<3xi64>, %v: tensor<3x2xf32>) -> tensor<4x2xf32> {
  %i = stablehlo.reshape %index : (tensor<3xi64>) -> tensor<3x1xi64>
  %0 = "stablehlo.scatter"(%x, %i, %v) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<4x2xf32>, tensor<3x1xi64>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = "stablehlo.scatter"(%0, %i, %v) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<4x2xf32>, tensor<3x1xi64>, tensor<3x2xf32>) -> tensor<4x2xf32>
  return %1 : tensor<4x2xf32>
}""")


def test_scatter_into_a_reshaped_slice_does_not_compile() -> None:
    """Workaround: outofplace-iree-copy-sliced-operands, a barrier on a scatter operand
    that is a slice (through reshapes), as on a gather's."""
    with pytest.raises(Exception, match="expected rank to be smaller or equal"):
        _compile("""
func.func @main(%x: tensor<4xf32>, %w: tensor<3x1xf32>) -> tensor<1x1xf32> {
  %0 = stablehlo.slice %x [1:2] : (tensor<4xf32>) -> tensor<1xf32>
  %1 = stablehlo.reshape %0 : (tensor<1xf32>) -> tensor<1x1xf32>
  %i = stablehlo.constant dense<0> : tensor<3x1xi64>
  %2 = "stablehlo.scatter"(%1, %i, %w) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<1x1xf32>, tensor<3x1xi64>, tensor<3x1xf32>) -> tensor<1x1xf32>
  return %2 : tensor<1x1xf32>
}""")


def test_read_of_a_slice_sees_a_scatter_into_a_copy_of_it_behind_a_barrier() -> None:
    """Workaround: outofplace-iree-copy-sliced-operands computes such a scatter's operand
    into a buffer of its own (`_copied`), not only behind a barrier. The scatter writes a copy of the
    slice x[0] (the barrier's result), yet the later read of x[0] sees its write: 0
    where x holds -3 (found by the fuzzer, seed 9,900,145; without the barrier IREE
    reads -3). Scheduled as the engine schedules (`debug` partitioning)."""
    x = np.arange(20).reshape(4, 5) - 7
    read, written = _run("""
module attributes {stream.partitioning = #stream.partitioning_config<"debug">} {
func.func @main(%x: tensor<4x5xi64>, %i: tensor<1x1x3xi64>, %w: tensor<1x1xi64>) -> (tensor<5xi64>, tensor<4x5xi64>) {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %one = stablehlo.constant dense<1> : tensor<5xi64>
  %0 = stablehlo.reshape %x : (tensor<4x5xi64>) -> tensor<4x1x5xi64>
  %1 = stablehlo.slice %0 [0:1, 0:1, 0:5] : (tensor<4x1x5xi64>) -> tensor<1x1x5xi64>
  %2 = stablehlo.optimization_barrier %1 : tensor<1x1x5xi64>
  %3 = "stablehlo.scatter"(%2, %i, %w) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2], scatter_dims_to_operand_dims = [0, 1, 2], index_vector_dim = 2>}> ({
  ^bb0(%a: tensor<i64>, %b: tensor<i64>):
    stablehlo.return %b : tensor<i64>
  }) : (tensor<1x1x5xi64>, tensor<1x1x3xi64>, tensor<1x1xi64>) -> tensor<1x1x5xi64>
  %4 = stablehlo.reshape %3 : (tensor<1x1x5xi64>) -> tensor<1x5xi64>
  %5 = stablehlo.dynamic_update_slice %x, %4, %c0, %c0 : (tensor<4x5xi64>, tensor<1x5xi64>, tensor<i64>, tensor<i64>) -> tensor<4x5xi64>
  %6 = stablehlo.slice %x [0:1, 0:5] : (tensor<4x5xi64>) -> tensor<1x5xi64>
  %7 = stablehlo.reshape %6 : (tensor<1x5xi64>) -> tensor<5xi64>
  %8 = stablehlo.multiply %7, %one : tensor<5xi64>
  return %8, %5 : tensor<5xi64>, tensor<4x5xi64>
}
}""", x, np.array([[[0, 0, 4]]]), np.zeros((1, 1), np.int64))
    assert written[0].tolist() == [-7, -6, -5, -4, 0]  # the scatter, as eager's
    assert read.tolist() == [-7, -6, -5, -4, 0], "IREE now reads x[0] as it is"


def test_scatter_writes_a_window_out_of_bounds() -> None:
    """iree-org/iree#13580: StableHLO's scatter skips an index out of bounds; IREE writes
    it anyway at its linear offset: (0, 3) of a 4x2 x adds 10 to x[1, 1] (or past the
    buffer, which may abort: a subprocess). Workaround:
    outofplace-iree-scatter-windows-in-bounds."""
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    run = _run_isolated("""
func.func @main(%x: tensor<4x2xf32>, %i: tensor<1x2xi64>) -> tensor<4x2xf32> {
  %v = stablehlo.constant dense<10.0> : tensor<1xf32>
  %0 = "stablehlo.scatter"(%x, %i, %v) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<4x2xf32>, tensor<1x2xi64>, tensor<1xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}""", x, np.array([[0, 3]]))
    assert run.returncode < 0 or run.returncode == 0 and \
        json.loads(run.stdout)[0] != x.tolist(), \
        f"IREE now skips a scatter index out of bounds:\n{run.stdout}{run.stderr[-2000:]}"


def test_gather_reads_out_of_bounds() -> None:
    """iree-org/iree#24881: StableHLO's gather clamps a start index into range (row 3 of
    3 rows reads row 2); IREE reads past the operand's buffer (zeros here; garbage, and
    in a subprocess: it may abort). Workaround: outofplace-iree-clamp-gather-starts."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    run = _run_isolated("""
func.func @main(%x: tensor<3x4xf32>, %i: tensor<2x1xi64>) -> tensor<2x4xf32> {
  %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<2x1xi64>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}""", x, np.array([[3], [1]]))
    assert run.returncode < 0 or run.returncode == 0 and \
        json.loads(run.stdout)[0][0] != x[2].tolist(), \
        f"IREE now clamps a gather's start index:\n{run.stdout}{run.stderr[-2000:]}"


_COLUMNS = """
func.func @main(%c: tensor<4x64xf32> {tf.aliasing_output = 0 : i32}, %i: tensor<3x1xi64>, %k: tensor<4x3xf32>) -> tensor<4x64xf32> {
  %0 = "stablehlo.scatter"(%c, %i, %k) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<4x64xf32>, tensor<3x1xi64>, tensor<4x3xf32>) -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}"""


def test_scatter_of_windows_off_the_lead_is_not_in_place() -> None:
    """`c[:, idx] = k` (windows along dimension 0, indexed along 1): IREE's stream-phase
    program allocates a buffer larger than c and copies it back (no IREE issue found).
    Workaround: outofplace-iree-scatter-per-element, after which the engine's alias
    check proves it in place."""
    _, problems = compiler._compile_in_halves(_COLUMNS, {0: 0})
    assert any("is allocated" in problem for problem in problems), \
        f"IREE now scatters windows off the lead in place: {problems}"
    legalized, _, _, aliased = compiler.legalize_for_iree(_COLUMNS, {0: 0})
    assert compiler._compile_in_halves(legalized, aliased)[1] == []


def test_boolean_add_is_an_exclusive_or() -> None:
    """StableHLO's add of booleans is a logical or; IREE adds them modulo 2: true + true
    is false (no IREE issue found). Workaround: outofplace-iree-boolean-add-as-or."""
    result, = _run("""
func.func @main(%a: tensor<2xi1>, %b: tensor<2xi1>) -> tensor<2xi1> {
  %0 = stablehlo.add %a, %b : tensor<2xi1>
  return %0 : tensor<2xi1>
}""", np.array([True, False]), np.array([True, True]))
    assert result.tolist() == [False, True], "IREE's boolean add is an or now"


def test_an_argument_returned_as_it_came_is_written_by_its_update() -> None:
    """main returns x as it came beside an update of x; x is not consumed, yet IREE
    returns x's buffer for it and writes the update into it: the caller's x and the
    result both hold the 9 (no IREE issue found). Workaround:
    outofplace-iree-strip-returned-arguments (the engine returns a copy of x itself)."""
    x = torch.tensor([1.0, 2.0, 3.0])
    old, new = _run_in_place("""
func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %c = stablehlo.constant dense<1> : tensor<i64>
  %u = stablehlo.constant dense<9.0> : tensor<1xf32>
  %0 = stablehlo.dynamic_update_slice %x, %u, %c : (tensor<3xf32>, tensor<1xf32>, tensor<i64>) -> tensor<3xf32>
  return %x, %0 : tensor<3xf32>, tensor<3xf32>
}""", x, results=2)
    assert new.tolist() == [1.0, 9.0, 3.0]
    assert old.tolist() == x.tolist() == [1.0, 9.0, 3.0], "IREE no longer writes x"


def test_a_consumed_argument_is_overwritten_before_it_is_read() -> None:
    """`dst.copy_(src); src.mul_(2)`, both consumed: IREE doubles src in its buffer before
    copying its old value into dst, which gets the doubled values (no IREE issue found).
    Workaround: outofplace-iree-unalias-early-overwrites (src loses its alias)."""
    dst, src = torch.zeros(3), torch.tensor([1.0, 2.0, 3.0])
    _run_in_place("""
func.func @main(%d: tensor<3xf32> {tf.aliasing_output = 0 : i32}, %s: tensor<3xf32> {tf.aliasing_output = 1 : i32}) -> (tensor<3xf32>, tensor<3xf32>) {
  %two = stablehlo.constant dense<2.0> : tensor<3xf32>
  %0 = stablehlo.multiply %s, %two : tensor<3xf32>
  return %s, %0 : tensor<3xf32>, tensor<3xf32>
}""", dst, src, results=2)
    assert src.tolist() == [2.0, 4.0, 6.0]
    assert dst.tolist() == [2.0, 4.0, 6.0], "IREE now reads src before doubling it"


def test_update_of_a_whole_constant_writes_its_read_only_buffer() -> None:
    """x updated all over by a constant (behind a barrier, as the constant-update
    workaround leaves it), then updated again: IREE takes the constant's read-only
    buffer for x and fails to write it (no IREE issue found). Workaround:
    outofplace-iree-writable-constant-updates (a select into a buffer of its own)."""
    with pytest.raises(Exception, match="PERMISSION_DENIED"):
        _run_in_place("""
func.func @main(%x: tensor<3xf32> {tf.aliasing_output = 0 : i32}, %w: tensor<1xf32>) -> tensor<3xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %k = stablehlo.constant dense<[1.0, 0.0, -1.0]> : tensor<3xf32>
  %b = stablehlo.optimization_barrier %k : tensor<3xf32>
  %0 = stablehlo.dynamic_update_slice %x, %b, %c0 : (tensor<3xf32>, tensor<3xf32>, tensor<i64>) -> tensor<3xf32>
  %1 = stablehlo.dynamic_update_slice %0, %w, %c0 : (tensor<3xf32>, tensor<1xf32>, tensor<i64>) -> tensor<3xf32>
  return %1 : tensor<3xf32>
}""", torch.tensor([2.0, 0.0, 1.0]), torch.tensor([5.0]))


def test_sorts_sharing_an_iota_are_wrong() -> None:
    """Two sorts of one row sharing the `iota` of indices (torch.sort beside
    torch.argsort(descending=True)): IREE sorts in the shared buffer, the first sort's
    indices come out reversed and the second's all zeros. Workaround:
    outofplace-iree-copy-shared-sort-operands."""
    x = np.array([[3.0, 0.7, 1.0, 5.0, -4, 2.0], [2.0, 4.0, -1.0, 9, 8, 0.5]], np.float32)
    ascending, descending = _run("""
func.func @main(%x: tensor<2x6xf32>) -> (tensor<2x6xi64>, tensor<2x6xi64>) {
  %iota = stablehlo.iota dim = 1 : tensor<2x6xi64>
  %0:2 = "stablehlo.sort"(%x, %iota) <{dimension = 1 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %ia: tensor<i64>, %ib: tensor<i64>):
    %lt = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }) : (tensor<2x6xf32>, tensor<2x6xi64>) -> (tensor<2x6xf32>, tensor<2x6xi64>)
  %1:2 = "stablehlo.sort"(%x, %iota) <{dimension = 1 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %ia: tensor<i64>, %ib: tensor<i64>):
    %gt = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %gt : tensor<i1>
  }) : (tensor<2x6xf32>, tensor<2x6xi64>) -> (tensor<2x6xf32>, tensor<2x6xi64>)
  return %0#1, %1#1 : tensor<2x6xi64>, tensor<2x6xi64>
}""", x)
    assert ascending.tolist() != np.argsort(x, 1).tolist() and \
        descending.tolist() == [[0] * 6] * 2, \
        f"IREE sorts a shared iota rightly now: {ascending.tolist()}, {descending.tolist()}"


def test_float64_remainder_does_not_link() -> None:
    """A float64 remainder (C's fmod) is a call of libm's fmod, which IREE's embedded
    linker lacks. Workaround: outofplace-iree-f64-remainder."""
    with pytest.raises(Exception, match="undefined symbol: fmod"):
        _compile("""
func.func @main(%a: tensor<3xf64>, %b: tensor<3xf64>) -> tensor<3xf64> {
  %0 = stablehlo.remainder %a, %b : tensor<3xf64>
  return %0 : tensor<3xf64>
}""")
