// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-upstream-fmod)' \
// RUN:   | FileCheck %s

// fmod of like operands (frontend/upstream/remainder.py broadcasts and converts them)
// becomes C's fmod, stablehlo.remainder, between torch_c casts; torch-mlir would lower a
// quotient formula (NaN by an infinite divisor, wrong past the float's integers).
// CHECK-LABEL: func.func @like(
// CHECK-SAME:    %[[A:[^:]*]]: !torch.vtensor<[4],f32>, %[[B:[^:]*]]: !torch.vtensor<[4],f32>
// CHECK:         %[[BA:.*]] = torch_c.to_builtin_tensor %[[A]] : !torch.vtensor<[4],f32> -> tensor<4xf32>
// CHECK:         %[[BB:.*]] = torch_c.to_builtin_tensor %[[B]] : !torch.vtensor<[4],f32> -> tensor<4xf32>
// CHECK:         %[[R:.*]] = stablehlo.remainder %[[BA]], %[[BB]] : tensor<4xf32>
// CHECK:         %[[T:.*]] = torch_c.from_builtin_tensor %[[R]] : tensor<4xf32> -> !torch.vtensor<[4],f32>
// CHECK:         return %[[T]]
func.func @like(%a: !torch.vtensor<[4],f32>, %b: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.fmod.Tensor %a, %b : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}

// Integers too (C's %).
// CHECK-LABEL: func.func @integers(
// CHECK:         stablehlo.remainder %{{.*}}, %{{.*}} : tensor<3xi64>
func.func @integers(%a: !torch.vtensor<[3],si64>, %b: !torch.vtensor<[3],si64>) -> !torch.vtensor<[3],si64> {
  %0 = torch.aten.fmod.Tensor %a, %b : !torch.vtensor<[3],si64>, !torch.vtensor<[3],si64> -> !torch.vtensor<[3],si64>
  return %0 : !torch.vtensor<[3],si64>
}

// Operands of another shape or dtype than the result's are left to torch-mlir.
// CHECK-LABEL: func.func @broadcast(
// CHECK:         torch.aten.fmod.Tensor
// CHECK-NOT:     stablehlo.remainder
func.func @broadcast(%a: !torch.vtensor<[4],f32>, %b: !torch.vtensor<[],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.fmod.Tensor %a, %b : !torch.vtensor<[4],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
