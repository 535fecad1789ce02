// RUN: outofplace-opt %s --split-input-file --use-name-loc-as-prefix \
// RUN:   --pass-pipeline='builtin.module(inplace-to-stablehlo-pipeline)' | FileCheck %s

// Mutable torch IR as torch-mlir writes it, all the way to pure StableHLO; the aliasing
// attribute survives lowering.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[CACHE:.*]]: tensor<4x8xf32> {tf.aliasing_output = 1 : i32},
// CHECK-SAME:    %[[K:.*]]: tensor<4x8xf32>)
// CHECK-SAME:    -> (tensor<f32>, tensor<4x8xf32>)
// CHECK:         %[[NEW:.*]] = stablehlo.add %[[CACHE]], %[[K]] : tensor<4x8xf32>
// CHECK:         %[[SUM:.*]] = stablehlo.reduce(%[[NEW]] init: %{{.*}}) applies stablehlo.add
// CHECK-NEXT:    return %[[SUM]], %[[NEW]] : tensor<f32>, tensor<4x8xf32>
// CHECK-NOT:     torch.
// CHECK-NOT:     arith.
func.func @main(%cache: !torch.tensor<[4,8],f32> loc("cache"), %k: !torch.vtensor<[4,8],f32> loc("k")) -> !torch.vtensor<[],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %t = torch.copy.to_tensor %k : !torch.tensor<[4,8],f32>
  %0 = torch.aten.add_.Tensor %cache, %t, %int1 : !torch.tensor<[4,8],f32>, !torch.tensor<[4,8],f32>, !torch.int -> !torch.tensor<[4,8],f32>
  %1 = torch.copy.to_vtensor %cache : !torch.vtensor<[4,8],f32>
  %2 = torch.aten.sum %1, %none : !torch.vtensor<[4,8],f32>, !torch.none -> !torch.vtensor<[],f32>
  return %2 : !torch.vtensor<[],f32>
}

// -----

// aten.mul.Scalar leaves arith.constant behind in torch-mlir's output; it becomes
// stablehlo.constant so the module is pure StableHLO.
// CHECK-LABEL: func.func @mul_$scalar(
// CHECK-SAME:    %[[X:.*]]: tensor<3xf32> {tf.aliasing_output = 0 : i32})
// CHECK:         stablehlo.constant
// CHECK-NOT:     arith.constant
// CHECK:         %[[NEW:.*]] = stablehlo.multiply %[[X]]
// CHECK:         return %[[NEW]]
func.func @mul_$scalar(%x: !torch.tensor<[3],f32>) {
  %int2 = torch.constant.int 2
  %0 = torch.aten.mul.Scalar %x, %int2 : !torch.tensor<[3],f32>, !torch.int -> !torch.vtensor<[3],f32>
  torch.overwrite.tensor.contents %0 overwrites %x : !torch.vtensor<[3],f32>, !torch.tensor<[3],f32>
  return
}
