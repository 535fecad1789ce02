// RUN: not outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-refuse-unknown-shapes)' 2>/dev/null | FileCheck %s
// RUN: not outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-refuse-unknown-shapes)' 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=ERR

// Unknown sizes of a known rank (batch_norm's decomposition makes some) pass unchanged.
// CHECK-LABEL: func.func @known_rank
// CHECK:         torch.aten.relu %arg0 : !torch.vtensor<[?,4],f32> -> !torch.vtensor<[?,4],f32>
func.func @known_rank(%x: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %0 = torch.aten.relu %x : !torch.vtensor<[?,4],f32> -> !torch.vtensor<[?,4],f32>
  return %0 : !torch.vtensor<[?,4],f32>
}

// -----

// A tensor of unknown rank (torch-mlir's einsum and cross_entropy_loss patterns have
// left some) would abort torch-mlir's StableHLO conversion: refused at its op's line.
// ERR: model.py:7: unsupported mutation by torch.aten.relu: torch-mlir's decompositions left a tensor of unknown rank (!torch.vtensor<*,f32>)
func.func @unknown_rank(%x: !torch.vtensor<[3],f32>) -> !torch.vtensor<*,f32> {
  %0 = torch.aten.relu %x : !torch.vtensor<[3],f32> -> !torch.vtensor<*,f32> loc("model.py":7:0)
  return %0 : !torch.vtensor<*,f32>
}
