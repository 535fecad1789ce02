"""Canaries: torch-mlir bugs outofplace works around, pinned as upstream has them.

Each test runs torch-mlir's own folders (`torch-mlir-opt --canonicalize`, in a
subprocess: one of them crashes) on the pattern at fault and asserts the wrong answer.
When a canary fails, upstream fixed the bug: delete the workaround it names and the
canary with it.
"""

from __future__ import annotations

import os
import subprocess
import sys

TORCH_MLIR_OPT = os.path.join(os.path.dirname(sys.executable), "torch-mlir-opt")
TO_STABLEHLO = ("builtin.module(torchdynamo-export-to-torch-backend-pipeline, "
                "torch-backend-to-stablehlo-backend-pipeline)")


def _canonicalize(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([TORCH_MLIR_OPT, "--canonicalize", "-"], input=text, text=True,
                          capture_output=True, timeout=120)


def _to_stablehlo(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([TORCH_MLIR_OPT, f"--pass-pipeline={TO_STABLEHLO}", "-"],
                          input=text, text=True, capture_output=True, timeout=120)


def test_comparison_folder_reads_float_storage_as_int() -> None:
    """comparisonScaleFolder: `gt.Scalar` of a float literal and an int scalar takes the
    integer path and reads the float elements as an APInt: a segfault here (for a splat,
    an address-dependent answer). torch-mlir's decompositions of trunc and sgn create
    this pattern. Workaround: transforms/upstream/shield_constants.py (no literal reaches the
    folders) and `_FACTORIES_LIKE` in transforms/fold_constants.py."""
    result = _canonicalize("""
func.func @f() -> !torch.vtensor<[3],i1> {
  %0 = torch.vtensor.literal(dense<[1.5, -2.5, 3.5]> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %int0 = torch.constant.int 0
  %1 = torch.aten.gt.Scalar %0, %int0 : !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],i1>
  return %1 : !torch.vtensor<[3],i1>
}""")
    assert result.returncode != 0 and "Stack dump" in result.stderr, "gt.Scalar of a float literal with an int 0 no longer " \
        f"crashes torch-mlir's folder:\n{result.stdout}{result.stderr[-2000:]}"


def test_div_tensor_mode_folder_divides_as_unsigned() -> None:
    """AtenDivTensorModeOp::fold divides int64 as uint64: `arange(5) // -2` folds to
    zeros (eager: [0, -1, -1, -2, -2]). Workaround: transforms/upstream/shield_constants.py, and
    fold_constants.py folding `NumToTensor` scalars and `torch.constant.str` modes."""
    result = _canonicalize("""
func.func @f() -> !torch.vtensor<[5],si64> {
  %0 = torch.vtensor.literal(dense<[0, 1, 2, 3, 4]> : tensor<5xsi64>) : !torch.vtensor<[5],si64>
  %1 = torch.vtensor.literal(dense<-2> : tensor<si64>) : !torch.vtensor<[],si64>
  %str = torch.constant.str "floor"
  %2 = torch.aten.div.Tensor_mode %0, %1, %str : !torch.vtensor<[5],si64>, !torch.vtensor<[],si64>, !torch.str -> !torch.vtensor<[5],si64>
  return %2 : !torch.vtensor<[5],si64>
}""")
    assert result.returncode == 0, result.stderr
    assert "torch.vtensor.literal(dense<0> : tensor<5xsi64>)" in result.stdout, \
        f"div.Tensor_mode's folder changed:\n{result.stdout}"


def test_strided_slice_of_a_constant_crashes_the_folder() -> None:
    """The folder of `slice.Tensor` with step > 1 of a literal reads out of bounds.
    Workaround: transforms/upstream/static_slices.py (outofplace-upstream-static-slices)."""
    result = _canonicalize("""
func.func @f() -> !torch.vtensor<[1,1],f32> {
  %0 = torch.vtensor.literal(dense<[[1.0, 2.0, 3.0]]> : tensor<1x3xf32>) : !torch.vtensor<[1,3],f32>
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %intm1 = torch.constant.int -1
  %end = torch.constant.int 9223372036854775807
  %1 = torch.aten.slice.Tensor %0, %int1, %intm1, %end, %int3 : !torch.vtensor<[1,3],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,1],f32>
  return %1 : !torch.vtensor<[1,1],f32>
}""")
    assert result.returncode != 0 and "Stack dump" in result.stderr, \
        f"a strided slice of a literal no longer crashes the folder:\n{result.stdout}"


def test_index_tensor_gathers_negative_indices_as_given() -> None:
    """The StableHLO lowering of `index.Tensor` passes the indices to the gather as they
    are (no wrap of negatives: the gather clamps them to 0). Workaround:
    transforms/upstream/negative_indices.py (outofplace-upstream-wrap-negative-indices)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[4],f32>, %i: !torch.vtensor<[2],si64>) -> !torch.vtensor<[2],f32> {
  %list = torch.prim.ListConstruct %i : (!torch.vtensor<[2],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index.Tensor %x, %list : !torch.vtensor<[4],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[2],f32>
  return %0 : !torch.vtensor<[2],f32>
}""")
    assert result.returncode == 0, result.stderr
    assert '"stablehlo.gather"(%arg0, %0)' in result.stdout and \
        "stablehlo.select" not in result.stdout and "stablehlo.compare" not in result.stdout, \
        f"index.Tensor's lowering now treats negative indices:\n{result.stdout}"


def test_fill_tensor_has_no_lowering() -> None:
    """`aten.fill.Tensor` has no StableHLO lowering (fill.Scalar has). Workaround:
    transforms/upstream/fill_tensor.py (outofplace-upstream-fill-tensor)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[4],f32>, %v: !torch.vtensor<[],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.fill.Tensor %x, %v : !torch.vtensor<[4],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}""")
    assert result.returncode != 0 and \
        "failed to legalize operation 'torch.aten.fill.Tensor'" in result.stderr, \
        f"fill.Tensor lowers now:\n{result.stdout}"


def test_unsigned_integers_compare_and_shift_as_signed() -> None:
    """torch-mlir lowers a comparison and a right shift of uint8 tensors as signed ones:
    XLA rejects the comparison, and 200 >> 3 is 249. Workaround:
    transforms/upstream/unsigned_integers.py (outofplace-upstream-unsigned-integers)."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[5],ui8>, %b: !torch.vtensor<[5],ui8>) -> (!torch.vtensor<[5],i1>, !torch.vtensor<[5],ui8>, !torch.vtensor<[],ui8>) {
  %0 = torch.aten.gt.Tensor %a, %b : !torch.vtensor<[5],ui8>, !torch.vtensor<[5],ui8> -> !torch.vtensor<[5],i1>
  %1 = torch.aten.bitwise_right_shift.Tensor %a, %b : !torch.vtensor<[5],ui8>, !torch.vtensor<[5],ui8> -> !torch.vtensor<[5],ui8>
  %none = torch.constant.none
  %2 = torch.aten.max %a : !torch.vtensor<[5],ui8> -> !torch.vtensor<[],ui8>
  return %0, %1, %2 : !torch.vtensor<[5],i1>, !torch.vtensor<[5],ui8>, !torch.vtensor<[],ui8>
}""")
    assert result.returncode == 0, result.stderr
    assert "SIGNED" in result.stdout and "UNSIGNED" not in result.stdout and \
        "shift_right_arithmetic" in result.stdout and "dense<128> : tensor<ui8>" in \
        result.stdout, f"uint8 comparisons, shifts or max lower as unsigned now:\n{result.stdout}"


def test_max_pool_indices_from_index_0_and_without_nan() -> None:
    """torch-mlir lowers max_pool2d_with_indices to a reduce_window from the init (-inf,
    index 0) whose body takes the lesser index between equal values and compares with GE
    only: a window of -inf gets index 0, a NaN is not the maximum. Workaround:
    transforms/upstream/max_pool_indices.py (outofplace-upstream-max-pool-indices)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[1,1,4,4],f32>) -> (!torch.vtensor<[1,1,2,2],f32>, !torch.vtensor<[1,1,2,2],si64>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %k = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %p = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %d = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %0, %1 = torch.aten.max_pool2d_with_indices %x, %k, %k, %p, %d, %false : !torch.vtensor<[1,1,4,4],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool -> !torch.vtensor<[1,1,2,2],f32>, !torch.vtensor<[1,1,2,2],si64>
  return %0, %1 : !torch.vtensor<[1,1,2,2],f32>, !torch.vtensor<[1,1,2,2],si64>
}""")
    assert result.returncode == 0, result.stderr
    body = result.stdout[result.stdout.index("stablehlo.reduce_window"):]
    assert "compare  GE" in body or "compare GE" in body, body
    assert "stablehlo.minimum" in body and "dense<0> : tensor<i64>" in result.stdout and \
        "NE" not in body.split("stablehlo.return")[0], \
        f"max pooling with indices lowers otherwise now:\n{result.stdout}"


def test_sort_comparator_ignores_nan() -> None:
    """torch-mlir lowers sort with a comparator of one `compare LT, FLOAT`, which a NaN
    fails both ways: the sort leaves NaNs anywhere. Workaround:
    transforms/upstream/nan_order.py (outofplace-upstream-nan-order)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[5],f32>) -> !torch.vtensor<[5],f32> {
  %int0 = torch.constant.int 0
  %false = torch.constant.bool false
  %0, %1 = torch.aten.sort %x, %int0, %false : !torch.vtensor<[5],f32>, !torch.int, !torch.bool -> !torch.vtensor<[5],f32>, !torch.vtensor<[5],si64>
  return %0 : !torch.vtensor<[5],f32>
}""")
    assert result.returncode == 0, result.stderr
    body = result.stdout[result.stdout.index("stablehlo.sort"):]
    body = body[:body.index("stablehlo.return")]
    assert "compare  LT" in body or "compare LT" in body, body
    assert "NE" not in body and "stablehlo.or" not in body, \
        f"sort's comparator handles NaN now:\n{result.stdout}"


def test_arg_reduction_ignores_nan() -> None:
    """torch-mlir lowers argmax (max.dim, argmin, min.dim) to a reduce whose body keeps
    the greater value by `compare GE` alone: a NaN is never kept. Workaround:
    transforms/upstream/nan_order.py (outofplace-upstream-nan-order)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[5],f32>) -> !torch.vtensor<[],si64> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %0 = torch.aten.argmax %x, %none, %false : !torch.vtensor<[5],f32>, !torch.none, !torch.bool -> !torch.vtensor<[],si64>
  return %0 : !torch.vtensor<[],si64>
}""")
    assert result.returncode == 0, result.stderr
    body = result.stdout[result.stdout.index("stablehlo.reduce"):]
    body = body[:body.index("stablehlo.return")]
    assert "compare  GE" in body or "compare GE" in body, body
    assert "NE" not in body, f"argmax handles NaN now:\n{result.stdout}"


def test_eq_of_a_tensor_and_itself_folds_to_true() -> None:
    """AtenEqTensorOp's folder: `eq(x, x)` of floats folds to true, which a NaN is not
    (`ne(x, x)` is left alone). Workaround: frontend/upstream/float_equality.py."""
    result = _canonicalize("""
func.func @f(%x: !torch.vtensor<[3],f32>) -> (!torch.vtensor<[3],i1>, !torch.vtensor<[3],i1>) {
  %0 = torch.aten.eq.Tensor %x, %x : !torch.vtensor<[3],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[3],i1>
  %1 = torch.aten.ne.Tensor %x, %x : !torch.vtensor<[3],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[3],i1>
  return %0, %1 : !torch.vtensor<[3],i1>, !torch.vtensor<[3],i1>
}""")
    assert result.returncode == 0, result.stderr
    assert "dense<true>" in result.stdout and "torch.aten.eq.Tensor" not in result.stdout, \
        f"eq(x, x) is no longer folded to true:\n{result.stdout}"
    assert "torch.aten.ne.Tensor" in result.stdout, result.stdout


def test_rms_norm_without_eps_divides_by_zero() -> None:
    """torch-mlir's decomposition of rms_norm takes eps=None as 0 (eager: the machine
    epsilon): a row of zeros is 0 / 0. Workaround: frontend/upstream/rms_norm.py."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int3 = torch.constant.int 3
  %shape = torch.prim.ListConstruct %int3 : (!torch.int) -> !torch.list<int>
  %none = torch.constant.none
  %0 = torch.aten.rms_norm %x, %shape, %none, %none : !torch.vtensor<[2,3],f32>, !torch.list<int>, !torch.none, !torch.none -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}""")
    assert result.returncode == 0, result.stderr
    assert "stablehlo.rsqrt" in result.stdout and "= stablehlo.add " not in result.stdout, \
        f"rms_norm adds an eps now:\n{result.stdout}"


def test_bool_max_dim_starts_from_true() -> None:
    """torch-mlir reduces `max.dim` of bools as signed i1 (true = -1, below false) from
    the init true (the signed minimum): a max of bools is False. Workaround:
    frontend/upstream/bool_extremes.py."""
    result = _to_stablehlo("""
func.func @main(%b: !torch.vtensor<[3,4],i1>) -> !torch.vtensor<[3],si64> {
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0, %1 = torch.aten.max.dim %b, %int1, %false : !torch.vtensor<[3,4],i1>, !torch.int, !torch.bool -> !torch.vtensor<[3],i1>, !torch.vtensor<[3],si64>
  return %1 : !torch.vtensor<[3],si64>
}""")
    assert result.returncode == 0, result.stderr
    assert "dense<true> : tensor<i1>" in result.stdout and \
        "compare  GE" in result.stdout.replace("compare GE", "compare  GE") and \
        "SIGNED" in result.stdout and "UNSIGNED" not in result.stdout, \
        f"max.dim of bools lowers otherwise now:\n{result.stdout}"


def test_abs_of_uint8_does_not_lower() -> None:
    """torch-mlir lowers `abs` of uint8 to `stablehlo.abs`, which takes no unsigned
    integers. Workaround: frontend/upstream/unsigned_abs.py."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[3],ui8>) -> !torch.vtensor<[3],ui8> {
  %0 = torch.aten.abs %x : !torch.vtensor<[3],ui8> -> !torch.vtensor<[3],ui8>
  return %0 : !torch.vtensor<[3],ui8>
}""")
    assert result.returncode != 0 and "'stablehlo.abs' op operand #0" in result.stderr, \
        f"abs of uint8 lowers now:\n{result.stdout}{result.stderr[-2000:]}"


def test_embedding_bag_does_not_lower() -> None:
    """torch-mlir's lowering of `embedding_bag.padding_idx` fails to verify (its
    offset2bag result's element count). Workaround: frontend/upstream/embedding_bag.py."""
    result = _to_stablehlo("""
func.func @main(%w: !torch.vtensor<[10,3],f32>, %i: !torch.vtensor<[8],si64>, %o: !torch.vtensor<[2],si64>) -> !torch.vtensor<[2,3],f32> {
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %none = torch.constant.none
  %0, %1, %2, %3 = torch.aten.embedding_bag.padding_idx %w, %i, %o, %false, %int0, %false, %none, %false, %none : !torch.vtensor<[10,3],f32>, !torch.vtensor<[8],si64>, !torch.vtensor<[2],si64>, !torch.bool, !torch.int, !torch.bool, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[2,3],f32>, !torch.vtensor<[0],si64>, !torch.vtensor<[2],si64>, !torch.vtensor<[2],si64>
  return %0 : !torch.vtensor<[2,3],f32>
}""")
    assert result.returncode != 0 and "number of output elements" in result.stderr, \
        f"embedding_bag lowers now:\n{result.stdout}{result.stderr[-2000:]}"


def test_norm_scalar_and_linalg_norm_do_not_lower() -> None:
    """`aten.norm.Scalar` (torch.dist, x.norm(p)) and `aten.linalg_norm` fail to
    legalize. Workaround: NOT_LOWERED (frontend/upstream/unlowered_ops.py)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[],f32> {
  %int2 = torch.constant.int 2
  %0 = torch.aten.norm.Scalar %x, %int2 : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[],f32>
  return %0 : !torch.vtensor<[],f32>
}""")
    assert result.returncode != 0 and "failed to legalize" in result.stderr, \
        f"norm.Scalar lowers now:\n{result.stdout}"
