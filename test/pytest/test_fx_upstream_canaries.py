"""Canaries of frontend/upstream/: each FX rewrite there works around a torch-mlir gap,
pinned here as torch-mlir has it.

Each test imports or lowers the op without the workaround (torch-mlir's FxImporter, or
`torch-mlir-opt` with the two pipelines outofplace runs, in a subprocess: one of them
exhausts memory) and asserts torch-mlir still gets it wrong. When a canary fails,
upstream fixed it: delete the rewrite it names, then the canary.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys

import pytest
import torch
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d

from outofplace.frontend.upstream import scalar_operands, undefined_ops

TORCH_MLIR_OPT = os.path.join(os.path.dirname(sys.executable), "torch-mlir-opt")
TO_STABLEHLO = ("builtin.module(torchdynamo-export-to-torch-backend-pipeline, "
                "torch-backend-to-stablehlo-backend-pipeline)")


def _to_stablehlo(text: str, memory: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return subprocess.run([TORCH_MLIR_OPT, f"--pass-pipeline={TO_STABLEHLO}", "-"],
                          input=text, text=True, capture_output=True, timeout=120,
                          preexec_fn=limit if memory else None)


def _fails_to_legalize(result: subprocess.CompletedProcess) -> bool:
    return result.returncode != 0 and "failed to legalize operation" in result.stderr


def _registered(name: str) -> bool:
    context = ir.Context()
    torch_d.register_dialect(context)
    return context.is_registered_operation(name)


def test_undefined_ops_are_still_undefined() -> None:
    """upstream/undefined_ops.py: none of these ops is defined by torch-mlir's dialect."""
    defined = [name for name in undefined_ops.UNDEFINED if _registered(name)]
    assert not defined, f"torch-mlir defines {defined} now: drop their rewrites"


def test_histc_and_grouped_mm_are_undefined() -> None:
    """upstream/histc.py, upstream/grouped_mm.py: torch-mlir defines neither."""
    defined = [n for n in ("torch.aten.histc", "torch.aten._grouped_mm") if _registered(n)]
    assert not defined, f"torch-mlir defines {defined} now: drop their rewrites"


def test_special_functions_are_undefined() -> None:
    """upstream/special_functions.py: torch-mlir defines none of the special functions
    PyTorch's decompositions record (nor aten's lgamma, digamma, erfc, polygamma)."""
    names = ("torch.prims.lgamma", "torch.prims.digamma", "torch.prims.erf_inv",
             "torch.prims.erfc", "torch.prims.bessel_i0", "torch.prims.bessel_i0e",
             "torch.prims.bessel_i1", "torch.prims.bessel_i1e", "torch.prims.hypot",
             "torch.aten.lgamma", "torch.aten.digamma", "torch.aten.erfc",
             "torch.aten.polygamma", "torch.aten.i0", "torch.aten.special_i0e",
             "torch.aten.special_i1", "torch.aten.special_i1e", "torch.aten.hypot")
    defined = [n for n in names if _registered(n)]
    assert not defined, f"torch-mlir defines {defined} now: drop their rewrites"


def test_erfinv_does_not_lower() -> None:
    """upstream/special_functions.py: torch-mlir defines aten.erfinv but does not lower
    it (NOT_LOWERED)."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.erfinv %a : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}""")
    assert _fails_to_legalize(result), f"erfinv lowers now:\n{result.stdout}"


def test_cummax_and_cummin_are_undefined() -> None:
    """upstream/scans.py: torch-mlir defines neither cummax nor cummin."""
    defined = [n for n in ("torch.aten.cummax", "torch.aten.cummin") if _registered(n)]
    assert not defined, f"torch-mlir defines {defined} now: drop their rewrites"


def test_searchsorted_is_undefined() -> None:
    """upstream/searchsorted.py: torch-mlir does not define searchsorted."""
    assert not _registered("torch.aten.searchsorted.Tensor") and \
        not _registered("torch.aten.searchsorted.Scalar"), \
        "torch-mlir defines searchsorted now: drop the rewrite"


def test_cdist_is_undefined() -> None:
    """upstream/distances.py: torch-mlir defines none of cdist's and pdist's kernels."""
    defined = [n for n in ("torch.aten._cdist_forward", "torch.aten._cdist_backward",
                           "torch.aten._pdist_forward", "torch.aten._pdist_backward")
               if _registered(n)]
    assert not defined, f"torch-mlir defines {defined} now: drop their rewrites"


def test_nextafter_is_undefined() -> None:
    """upstream/nextafter.py: torch-mlir defines no nextafter."""
    assert not _registered("torch.aten.nextafter") and \
        not _registered("torch.prims.nextafter"), \
        "torch-mlir defines nextafter now: drop the rewrite"


def test_uneven_same_padding_does_not_lower() -> None:
    """upstream/same_padding.py: torch-mlir lowers a convolution of `padding="same"`
    with the same padding on both sides: of an even window, one output too few."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[2,4,6],f32>, %w: !torch.vtensor<[8,4,4],f32>) -> !torch.vtensor<[2,8,6],f32> {
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %same = torch.constant.str "same"
  %s = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.conv1d.padding %x, %w, %none, %s, %same, %s, %int1 : !torch.vtensor<[2,4,6],f32>, !torch.vtensor<[8,4,4],f32>, !torch.none, !torch.list<int>, !torch.str, !torch.list<int>, !torch.int -> !torch.vtensor<[2,8,6],f32>
  return %0 : !torch.vtensor<[2,8,6],f32>
}""")
    assert result.returncode != 0 and "inferred shape '[2, 8, 5]'" in result.stderr, \
        f"an uneven same padding lowers now:\n{result.stdout}{result.stderr}"


def test_certain_dropout_divides_by_zero() -> None:
    """upstream/certain_dropout.py: torch-mlir lowers native_dropout as the masked input
    divided by `1 - p`, which is 0 at `p = 1` (NaN where eager gives zeros)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],i1>) {
  %p = torch.constant.float 1.000000e+00
  %true = torch.constant.bool true
  %0, %1 = torch.aten.native_dropout %x, %p, %true : !torch.vtensor<[4],f32>, !torch.float, !torch.bool -> !torch.vtensor<[4],f32>, !torch.vtensor<[4],i1>
  return %0, %1 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],i1>
}""")
    assert result.returncode == 0, result.stderr
    assert re.search(r"%\S+ = stablehlo.divide %\S+, %\S+ : tensor<4xf32>", result.stdout), \
        f"native_dropout no longer divides by 1 - p:\n{result.stdout}"


def test_index_reduce_is_undefined() -> None:
    """upstream/index_reduce.py: torch-mlir does not define index_reduce."""
    assert not _registered("torch.aten.index_reduce") and \
        not _registered("torch.aten.index_reduce_"), \
        "torch-mlir defines index_reduce now: drop the rewrite"


def test_order_statistics_do_not_lower() -> None:
    """upstream/order_statistics.py: torch-mlir defines neither median nor nanmedian, and
    defines kthvalue without lowering it."""
    defined = [n for n in ("torch.aten.median", "torch.aten.nanmedian") if _registered(n)]
    assert not defined, f"torch-mlir defines {defined} now: drop their rewrites"
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[4,5],f32>) -> !torch.vtensor<[4],f32> {
  %int2 = torch.constant.int 2
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0, %1 = torch.aten.kthvalue %a, %int2, %int1, %false : !torch.vtensor<[4,5],f32>, !torch.int, !torch.int, !torch.bool -> !torch.vtensor<[4],f32>, !torch.vtensor<[4],si64>
  return %0 : !torch.vtensor<[4],f32>
}""")
    assert _fails_to_legalize(result), f"kthvalue lowers now:\n{result.stdout}"


def test_bitwise_scalar_forms_are_undefined() -> None:
    """upstream/scalar_operands.py: the bitwise ops' Scalar forms (llvm/torch-mlir#4448)."""
    defined = [n for n in scalar_operands.UNDEFINED_SCALAR_FORMS if _registered(n)]
    assert not defined, f"torch-mlir defines {defined} now"


def _imported(fn, *args) -> tuple[str, str]:
    """`fn` exported and imported by torch-mlir's FxImporter: the module's text and what
    its verifier says ("" when it verifies)."""
    from torch_mlir.extras.fx_importer import FxImporter

    class Program(torch.nn.Module):
        def forward(self, *xs):
            return fn(*xs)

    program = torch.export.export(Program(), args, strict=False)
    context = ir.Context()
    torch_d.register_dialect(context)
    importer = FxImporter(context=context)
    importer.import_frozen_program(program)
    try:
        importer.module.operation.verify()
        complaint = ""
    except ir.MLIRError as error:
        complaint = str(error)
    return str(importer.module), complaint


def test_importer_makes_a_float_operand_float32() -> None:
    """upstream/scalar_operands.py: a Python float where the schema takes a Tensor is
    imported as a float32 tensor, here beside a float64 one."""
    text, complaint = _imported(lambda x: torch.ops.aten.copy.default(x, 0.9),
                                torch.ones(3, dtype=torch.float64))
    assert not complaint, complaint
    assert re.search(r"torch\.prim\.NumToTensor\.Scalar %\S+ : !torch\.float -> "
                     r"!torch\.vtensor<\[\],f32>", text), text


def test_importer_makes_a_bool_operand_invalid_ir() -> None:
    """upstream/scalar_operands.py: `x.copy_(True)` imports a NumToTensor of a bool."""
    _, complaint = _imported(lambda x: torch.ops.aten.copy.default(x, True),
                             torch.ones(3, dtype=torch.bool))
    assert "'torch.prim.NumToTensor.Scalar' op operand #0" in complaint and \
        "!torch.bool" in complaint, complaint


_ATTENTION = """
func.func @main(%q: !torch.vtensor<[1,4,3,8],f32>, %k: !torch.vtensor<[1,4,5,8],f32>, %v: !torch.vtensor<[1,4,5,8],f32>, %m: !torch.vtensor<[3,5],i1>) -> !torch.vtensor<[1,4,3,8],f32> {
  %none = torch.constant.none
  %f0 = torch.constant.float 0.000000e+00
  %false = torch.constant.bool false
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %m, %f0, %false, %none, %false : !torch.vtensor<[1,4,3,8],f32>, !torch.vtensor<[1,4,5,8],f32>, !torch.vtensor<[1,4,5,8],f32>, !torch.vtensor<[3,5],i1>, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,3,8],f32>
  return %0 : !torch.vtensor<[1,4,3,8],f32>
}"""


_UNSORTED_TOPK = """
func.func @main(%x: !torch.vtensor<[3,8],f32>) -> !torch.vtensor<[3,2],f32> {
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %values, %indices = torch.aten.topk %x, %int2, %int-1, %true, %false : !torch.vtensor<[3,8],f32>, !torch.int, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[3,2],f32>, !torch.vtensor<[3,2],si64>
  return %values : !torch.vtensor<[3,2],f32>
}"""


def test_unsorted_topk_does_not_lower() -> None:
    """upstream/unsorted_topk.py: topk with sorted=false fails to legalize."""
    result = _to_stablehlo(_UNSORTED_TOPK)
    assert _fails_to_legalize(result), f"unsorted topk lowers now:\n{result.stdout}"
    assert _fails_to_legalize(_to_stablehlo(_UNSORTED_TOPK.replace("%false :", "%true :"))) \
        is False, "the sorted topk fails too: the canary tests nothing"


def test_masked_attention_does_not_lower() -> None:
    """upstream/attention.py: attention with a mask is left undecomposed and fails to
    legalize (llvm/torch-mlir#3473)."""
    result = _to_stablehlo(_ATTENTION)
    assert _fails_to_legalize(result), f"masked attention lowers now:\n{result.stdout}"


def test_pytorch_decomposes_the_cpu_attention_kernel_with_weights_for_logsumexp() -> None:
    """upstream/attention.py: PyTorch's decomposition of eager's CPU attention kernel
    (torch/_decomp/decompositions.py, for export) returns the attention weights where
    the kernel returns each query's logsumexp, which the kernel's backward reads."""
    from torch._decomp import decomposition_table

    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    assert kernel(q, k, v)[1].shape == (1, 2, 3)
    assert decomposition_table[kernel](q, k, v)[1].shape == (1, 2, 3, 5), \
        "PyTorch's decomposition returns the logsumexp now"


def test_remainder_keeps_the_dividends_sign() -> None:
    """upstream/remainder.py: remainder is stablehlo.remainder, C's sign, and nothing
    else (llvm/torch-mlir#4440)."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[4],f32>, %b: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.remainder.Tensor %a, %b : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}""")
    assert result.returncode == 0, result.stderr
    ops = re.findall(r"= (stablehlo\.\w+)", result.stdout)
    assert ops == ["stablehlo.remainder"], f"remainder's lowering changed:\n{result.stdout}"


def test_fmod_is_a_quotient_formula() -> None:
    """upstream/remainder.py and transforms/upstream/fmod.py: fmod.Tensor lowers as
    a - sign(a/b) * floor(|a/b|) * b (NaN by an infinite divisor, wrong past the float's
    integers), floor division of floats as floor(a / b); neither is
    stablehlo.remainder."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[4],f32>, %b: !torch.vtensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) {
  %floor = torch.constant.str "floor"
  %0 = torch.aten.fmod.Tensor %a, %b : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  %1 = torch.aten.div.Tensor_mode %a, %b, %floor : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.str -> !torch.vtensor<[4],f32>
  return %0, %1 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>
}""")
    assert result.returncode == 0, result.stderr
    ops = re.findall(r"= (stablehlo\.\w+)", result.stdout)
    assert "stablehlo.remainder" not in ops and "stablehlo.floor" in ops, \
        f"fmod's lowering changed:\n{result.stdout}"


def test_log_sigmoid_threshold_and_hardshrink_lower_wrongly() -> None:
    """upstream/unlowered_ops.py (NOT_LOWERED): log_sigmoid lowers as log(logistic(x))
    (-inf below -88), threshold and hardshrink select by a comparison a NaN fails (the
    NaN replaced)."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) {
  %half = torch.constant.float 5.000000e-01
  %minus = torch.constant.float -7.000000e+00
  %0 = torch.aten.log_sigmoid %a : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  %1 = torch.aten.threshold %a, %half, %minus : !torch.vtensor<[4],f32>, !torch.float, !torch.float -> !torch.vtensor<[4],f32>
  %2 = torch.aten.hardshrink %a, %half : !torch.vtensor<[4],f32>, !torch.float -> !torch.vtensor<[4],f32>
  return %0, %1, %2 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>
}""")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "stablehlo.logistic" in text and "stablehlo.log " in text and \
        "log_plus_one" not in text, f"log_sigmoid's lowering changed:\n{text}"
    assert "compare  GT" in text or "compare GT" in text, \
        f"threshold's and hardshrink's lowerings changed:\n{text}"
    assert "compare  LE" not in text and "compare LE" not in text, text


def test_fmod_scalar_does_not_lower() -> None:
    """upstream/remainder.py: fmod.Scalar has no StableHLO lowering (llvm/torch-mlir#4448)."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %f = torch.constant.float 1.500000e+00
  %0 = torch.aten.fmod.Scalar %a, %f : !torch.vtensor<[4],f32>, !torch.float -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}""")
    assert _fails_to_legalize(result), f"fmod.Scalar lowers now:\n{result.stdout}"


def test_logcumsumexp_is_log_of_cumsum_of_exp() -> None:
    """upstream/scans.py: log(cumsum(exp(x))), which overflows (llvm/torch-mlir#4748)."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %int0 = torch.constant.int 0
  %0 = torch.aten.logcumsumexp %a, %int0 : !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}""")
    assert result.returncode == 0, result.stderr
    assert "stablehlo.exponential %arg0" in result.stdout and "stablehlo.log " in \
        result.stdout and "stablehlo.maximum" not in result.stdout, \
        f"logcumsumexp's lowering changed:\n{result.stdout}"


def test_cumsum_of_0d_does_not_lower() -> None:
    """upstream/scans.py: the cumsum of a 0-d tensor fails to legalize."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[],f32>) -> !torch.vtensor<[],f32> {
  %int0 = torch.constant.int 0
  %none = torch.constant.none
  %0 = torch.aten.cumsum %a, %int0, %none : !torch.vtensor<[],f32>, !torch.int, !torch.none -> !torch.vtensor<[],f32>
  return %0 : !torch.vtensor<[],f32>
}""")
    assert _fails_to_legalize(result), f"a 0-d cumsum lowers now:\n{result.stdout}"


def test_cumprod_does_not_lower() -> None:
    """upstream/scans.py: cumprod fails to legalize."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[4,5],f32>) -> !torch.vtensor<[4,5],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %0 = torch.aten.cumprod %a, %int1, %none : !torch.vtensor<[4,5],f32>, !torch.int, !torch.none -> !torch.vtensor<[4,5],f32>
  return %0 : !torch.vtensor<[4,5],f32>
}""")
    assert _fails_to_legalize(result), f"cumprod lowers now:\n{result.stdout}"


def test_as_strided_scatter_does_not_lower() -> None:
    """upstream/scatters.py: as_strided_scatter has no StableHLO lowering."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[6],f32>, %s: !torch.vtensor<[2],f32>) -> !torch.vtensor<[6],f32> {
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %size = torch.prim.ListConstruct %int2 : (!torch.int) -> !torch.list<int>
  %stride = torch.prim.ListConstruct %int3 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.as_strided_scatter %x, %s, %size, %stride, %int1 : !torch.vtensor<[6],f32>, !torch.vtensor<[2],f32>, !torch.list<int>, !torch.list<int>, !torch.int -> !torch.vtensor<[6],f32>
  return %0 : !torch.vtensor<[6],f32>
}""")
    assert _fails_to_legalize(result), f"as_strided_scatter lowers now:\n{result.stdout}"


def test_select_scatter_at_a_negative_index_does_not_lower() -> None:
    """upstream/scatters.py: a scatter of no indices, which fails to verify."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[3,4],f32>, %s: !torch.vtensor<[4],f32>) -> !torch.vtensor<[3,4],f32> {
  %int0 = torch.constant.int 0
  %intm1 = torch.constant.int -1
  %0 = torch.aten.select_scatter %x, %s, %int0, %intm1 : !torch.vtensor<[3,4],f32>, !torch.vtensor<[4],f32>, !torch.int, !torch.int -> !torch.vtensor<[3,4],f32>
  return %0 : !torch.vtensor<[3,4],f32>
}""")
    assert result.returncode != 0 and "scatter_indices bound is 0" in result.stderr, \
        f"select_scatter at -1 lowers now:\n{result.stdout}"


def test_slice_scatter_past_the_end_allocates_without_bound() -> None:
    """upstream/scatters.py: an end of 2**63 - 1 runs out of memory (here, 768 MiB of
    address space; llvm/torch-mlir#4443)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[6],f32>, %s: !torch.vtensor<[2],f32>) -> !torch.vtensor<[6],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int4 = torch.constant.int 4
  %end = torch.constant.int 9223372036854775807
  %0 = torch.aten.slice_scatter %x, %s, %int0, %int4, %end, %int1 : !torch.vtensor<[6],f32>, !torch.vtensor<[2],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[6],f32>
  return %0 : !torch.vtensor<[6],f32>
}""", memory=768 << 20)
    assert result.returncode != 0 and "out of memory" in result.stderr, \
        f"slice_scatter past the end lowers now:\n{result.stdout}"


def test_max_pool_with_indices_reads_an_empty_stride_as_1() -> None:
    """upstream/max_pool.py: windows at stride 1, a result of the wrong shape
    (llvm/torch-mlir#2932)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[1,1,4,4],f32>) -> (!torch.vtensor<[1,1,2,2],f32>, !torch.vtensor<[1,1,2,2],si64>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %k = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %s = torch.prim.ListConstruct : () -> !torch.list<int>
  %p = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %d = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %0, %1 = torch.aten.max_pool2d_with_indices %x, %k, %s, %p, %d, %false : !torch.vtensor<[1,1,4,4],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool -> !torch.vtensor<[1,1,2,2],f32>, !torch.vtensor<[1,1,2,2],si64>
  return %0, %1 : !torch.vtensor<[1,1,2,2],f32>, !torch.vtensor<[1,1,2,2],si64>
}""")
    assert result.returncode != 0 and "tensor<1x1x3x3xf32>" in result.stderr, \
        f"max_pool2d_with_indices with stride [] lowers now:\n{result.stdout}"


def test_bool_clamp_fills_the_missing_bound_with_false() -> None:
    """upstream/bool_clamp.py: clamp(min=m) of bools clamps to a max of False."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[4],i1>, %m: !torch.vtensor<[4],i1>) -> !torch.vtensor<[4],i1> {
  %none = torch.constant.none
  %0 = torch.aten.clamp.Tensor %x, %m, %none : !torch.vtensor<[4],i1>, !torch.vtensor<[4],i1>, !torch.none -> !torch.vtensor<[4],i1>
  return %0 : !torch.vtensor<[4],i1>
}""")
    assert result.returncode == 0, result.stderr
    assert re.search(r"(%\w+) = stablehlo\.constant dense<false>.*\n.*stablehlo\.clamp "
                     r"%arg1, %arg0, \1", result.stdout), \
        f"a bool clamp's missing bound is no longer False:\n{result.stdout}"


def _weight_gradient(g: str, x: str, w: str, transposed: bool
                     ) -> subprocess.CompletedProcess:
    """convolution_backward's weight gradient (stride 2, no padding) of shapes g, x, w
    (`[n,c,h,w]`), of a transposed convolution or not, lowered to StableHLO."""
    return _to_stablehlo(f"""
func.func @main(%g: !torch.vtensor<{g},f32>, %x: !torch.vtensor<{x},f32>, %w: !torch.vtensor<{w},f32>) -> !torch.vtensor<{w},f32> {{
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %false = torch.constant.bool false
  %true = torch.constant.bool true
  %none = torch.constant.none
  %s = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %p = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %d = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %m = torch.prim.ListConstruct %false, %true, %false : (!torch.bool, !torch.bool, !torch.bool) -> !torch.list<bool>
  %0:3 = torch.aten.convolution_backward %g, %x, %w, %none, %s, %p, %d, %{"true" if transposed else "false"}, %p, %int1, %m : !torch.vtensor<{g},f32>, !torch.vtensor<{x},f32>, !torch.vtensor<{w},f32>, !torch.none, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int, !torch.list<bool> -> !torch.none, !torch.vtensor<{w},f32>, !torch.none
  return %0#1 : !torch.vtensor<{w},f32>
}}""")


def test_weight_gradient_is_grouped_by_the_batch() -> None:
    """upstream/convolution_backward.py: the weight's gradient is a convolution with
    feature_group_count = N (the batch, 8), 4x4 windows where the kernel is 3x3."""
    result = _weight_gradient("[8,6,5,5]", "[8,4,12,12]", "[6,4,3,3]", transposed=False)
    assert result.returncode == 0, result.stderr
    assert "feature_group_count = 8" in result.stdout and "x4x4xf32>" in result.stdout, \
        f"the weight gradient's convolution changed:\n{result.stdout}"


def test_transposed_convolution_backward_does_not_lower() -> None:
    """upstream/convolution_backward.py: a transposed convolution's backward (stride 2,
    ConvTranspose2d's) fails to legalize."""
    result = _weight_gradient("[2,4,16,16]", "[2,3,8,8]", "[3,4,2,2]", transposed=True)
    assert _fails_to_legalize(result), \
        f"a transposed convolution's backward lowers now:\n{result.stdout}"


_AVG_POOL_LISTS = """
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %false = torch.constant.bool false
  %true = torch.constant.bool true
  %none = torch.constant.none
  %k = torch.prim.ListConstruct %int3, %int3 : (!torch.int, !torch.int) -> !torch.list<int>
  %s = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %p = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
"""


def test_avg_pool_backward_does_not_lower() -> None:
    """upstream/avg_pool.py: avg_pool2d_backward (a 3x3 window, stride 2) fails to
    legalize."""
    result = _to_stablehlo("""
func.func @main(%g: !torch.vtensor<[2,3,3,3],f32>, %x: !torch.vtensor<[2,3,8,8],f32>) -> !torch.vtensor<[2,3,8,8],f32> {""" + _AVG_POOL_LISTS + """
  %0 = torch.aten.avg_pool2d_backward %g, %x, %k, %s, %p, %false, %true, %none : !torch.vtensor<[2,3,3,3],f32>, !torch.vtensor<[2,3,8,8],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,3,8,8],f32>
  return %0 : !torch.vtensor<[2,3,8,8],f32>
}""")
    assert _fails_to_legalize(result), f"avg_pool2d_backward lowers now:\n{result.stdout}"


def test_avg_pool_with_ceil_mode_fails_to_verify() -> None:
    """upstream/avg_pool.py: avg_pool2d with ceil_mode (8 to 4 windows of 3, stride 2)
    lowers to a reduce_window whose result type is not the one it infers."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[2,3,8,8],f32>) -> !torch.vtensor<[2,3,4,4],f32> {""" + _AVG_POOL_LISTS + """
  %0 = torch.aten.avg_pool2d %x, %k, %s, %p, %true, %true, %none : !torch.vtensor<[2,3,8,8],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,3,4,4],f32>
  return %0 : !torch.vtensor<[2,3,4,4],f32>
}""")
    assert result.returncode != 0 and "reduce_window" in result.stderr, \
        f"avg_pool2d with ceil_mode lowers now:\n{result.stdout}"


def test_max_pool_with_ceil_mode_pads_both_ends() -> None:
    """upstream/max_pool.py: max_pool2d with ceil_mode (8 to 4 windows of 3, stride 2,
    the last partial, no padding) lowers to a reduce_window padded by one at both ends:
    its windows start one early, silently wrong values (max_pool2d_with_indices' fails
    to verify instead)."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[2,3,8,8],f32>) -> !torch.vtensor<[2,3,4,4],f32> {""" + _AVG_POOL_LISTS + """
  %int1 = torch.constant.int 1
  %d = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.max_pool2d %x, %k, %s, %p, %d, %true : !torch.vtensor<[2,3,8,8],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool -> !torch.vtensor<[2,3,4,4],f32>
  return %0 : !torch.vtensor<[2,3,4,4],f32>
}""")
    assert result.returncode == 0, result.stderr
    assert "padding = dense<[[0, 0], [0, 0], [1, 1], [1, 1]]>" in result.stdout, \
        f"max_pool2d with ceil_mode lowers otherwise now:\n{result.stdout}"


def test_softshrink_subtracts_below_minus_lambda() -> None:
    """upstream/activations.py: softshrink(x, 0.5) below -0.5 adds -0.5 to x (eager adds
    0.5), beside subtracting 0.5 above 0.5."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %half = torch.constant.float 5.000000e-01
  %0 = torch.aten.softshrink %x, %half : !torch.vtensor<[4],f32>, !torch.float -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}""")
    assert result.returncode == 0, result.stderr
    # -0.5 is both the lower bound compared with and the term added to x
    minus_half = re.search(r"(%\w+) = \w+\.constant dense<-5\.000000e-01>", result.stdout)
    assert minus_half and "stablehlo.add %arg0" in result.stdout and \
        len(re.findall(rf"{minus_half.group(1)}\b", result.stdout)) == 3, \
        f"softshrink's lowering changed:\n{result.stdout}"


def test_prelu_broadcasts_along_the_last_dimension() -> None:
    """upstream/activations.py: prelu of [2, 4, 3] by 4 channel weights broadcasts them
    along the last dimension (3): a broadcast that fails."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[2,4,3],f32>, %w: !torch.vtensor<[4],f32>) -> !torch.vtensor<[2,4,3],f32> {
  %0 = torch.aten.prelu %x, %w : !torch.vtensor<[2,4,3],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[2,4,3],f32>
  return %0 : !torch.vtensor<[2,4,3],f32>
}""")
    assert result.returncode != 0 and "incompatible" in result.stderr, \
        f"prelu's lowering changed:\n{result.stdout}{result.stderr}"


def test_uneven_adaptive_avg_pool_does_not_lower() -> None:
    """upstream/avg_pool.py: adaptive_avg_pool2d of 8x7 to 3x5 (windows of unequal
    length) fails to lower; so does the gradient of any."""
    result = _to_stablehlo("""
func.func @main(%x: !torch.vtensor<[2,3,8,7],f32>) -> !torch.vtensor<[2,3,3,5],f32> {
  %int3 = torch.constant.int 3
  %int5 = torch.constant.int 5
  %out = torch.prim.ListConstruct %int3, %int5 : (!torch.int, !torch.int) -> !torch.list<int>
  %0 = torch.aten.adaptive_avg_pool2d %x, %out : !torch.vtensor<[2,3,8,7],f32>, !torch.list<int> -> !torch.vtensor<[2,3,3,5],f32>
  return %0 : !torch.vtensor<[2,3,3,5],f32>
}""")
    assert result.returncode != 0, f"uneven adaptive_avg_pool2d lowers now:\n{result.stdout}"
    result = _to_stablehlo("""
func.func @main(%g: !torch.vtensor<[2,3,4,4],f32>, %x: !torch.vtensor<[2,3,8,8],f32>) -> !torch.vtensor<[2,3,8,8],f32> {
  %0 = torch.aten._adaptive_avg_pool2d_backward %g, %x : !torch.vtensor<[2,3,4,4],f32>, !torch.vtensor<[2,3,8,8],f32> -> !torch.vtensor<[2,3,8,8],f32>
  return %0 : !torch.vtensor<[2,3,8,8],f32>
}""")
    assert _fails_to_legalize(result), \
        f"_adaptive_avg_pool2d_backward lowers now:\n{result.stdout}"


def test_logsumexp_does_not_lower() -> None:
    """upstream/unlowered_ops.py: one op of NOT_LOWERED, left undecomposed by torch-mlir's
    pipeline, fails to legalize."""
    result = _to_stablehlo("""
func.func @main(%a: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3],f32> {
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %d = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.logsumexp %a, %d, %false : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[3],f32>
  return %0 : !torch.vtensor<[3],f32>
}""")
    assert _fails_to_legalize(result), f"logsumexp lowers now:\n{result.stdout}"
