// A module the verifier rejects after a pass: one line, exit code 1.
// RUN: not outofplace-opt %s --pass-pipeline='builtin.module(canonicalize)' 2>&1 | FileCheck %s
// CHECK: outofplace-opt: error: cannot parse input: {{.*}}verifier.mlir:6:8: 'torch.aten.add_.Tensor' op operand #0 must be
// CHECK-NOT: Traceback
func.func @wrong_return(%x: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.add_.Tensor %x, %x, %x : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
