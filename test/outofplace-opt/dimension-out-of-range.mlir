// A dimension out of range passes the verifier and crashes torch-mlir's decompositions
// (found by test/fuzz/mlir_mutations.py): refused first, with its position.
// RUN: not outofplace-opt %s --pass-pipeline='builtin.module(inplace-to-stablehlo-pipeline)' 2>&1 | FileCheck %s
// CHECK: outofplace-opt: error: {{.*}}dimension-out-of-range.mlir:10:8: torch.aten.select.int: dimension 3 is out of range for a tensor of rank 2
// CHECK-NOT: Traceback
func.func @main(%x: !torch.tensor<[4,5],f32>) {
  %int3 = torch.constant.int 3
  %float1 = torch.constant.float 1.0
  %0 = torch.aten.t %x : !torch.tensor<[4,5],f32> -> !torch.tensor<[5,4],f32>
  %1 = torch.aten.select.int %0, %int3, %int3 : !torch.tensor<[5,4],f32>, !torch.int, !torch.int -> !torch.tensor<[4],f32>
  %2 = torch.aten.fill_.Scalar %1, %float1 : !torch.tensor<[4],f32>, !torch.float -> !torch.tensor<[4],f32>
  return
}
