// Our Python pass between MLIR's own passes, with --mlir-print-ir-after-all.
// RUN: outofplace-opt %s --mlir-print-ir-after-all \
// RUN:   --pass-pipeline='builtin.module(canonicalize, inplace-to-outofplace, func.func(cse))' \
// RUN:   2>%t.log | FileCheck %s
// RUN: FileCheck %s --check-prefix=LOG < %t.log
// CHECK-LABEL: func.func @f(
// CHECK:         torch.aten.relu
// CHECK-NOT:     torch.aten.relu_
// LOG: IR Dump After Canonicalizer
// LOG: IR Dump After inplace-to-outofplace
// LOG: IR Dump After CSE
func.func @f(%x: !torch.tensor<[4],f32>) {
  %0 = torch.aten.relu_ %x : !torch.tensor<[4],f32> -> !torch.tensor<[4],f32>
  return
}
