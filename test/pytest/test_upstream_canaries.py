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


def _canonicalize(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([TORCH_MLIR_OPT, "--canonicalize", "-"], input=text, text=True,
                          capture_output=True, timeout=120)


def test_comparison_folder_reads_float_storage_as_int() -> None:
    """comparisonScaleFolder: `gt.Scalar` of a float literal and an int scalar takes the
    integer path and reads the float elements as an APInt: a segfault here (for a splat,
    an address-dependent answer). torch-mlir's decompositions of trunc and sgn create
    this pattern. Workaround: transforms/constant_shields.py (no literal reaches the
    folders) and `_FACTORIES_LIKE` in transforms/constant_folding.py."""
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
    zeros (eager: [0, -1, -1, -2, -2]). Workaround: transforms/constant_shields.py, and
    constant_folding folding `NumToTensor` scalars and `torch.constant.str` modes."""
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
