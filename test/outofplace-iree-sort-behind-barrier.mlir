// RUN: outofplace-opt %s --split-input-file --pass-pipeline='builtin.module(outofplace-iree-sort-behind-barrier)' | FileCheck %s

// topk as torch-mlir lowers it (a sort of the values and their 64-bit indices, sliced):
// the slices read the sort through a barrier (IREE 3.13 matches sort and slices to a
// top_k of 32-bit indices and fails).
// CHECK-LABEL: func.func @topk(
// CHECK:         %[[S:.*]]:2 = "stablehlo.sort"
// CHECK:         %[[B:.*]]:2 = stablehlo.optimization_barrier %[[S]]#0, %[[S]]#1
// CHECK-NEXT:    stablehlo.slice %[[B]]#0 [0:3, 0:2]
// CHECK-NEXT:    stablehlo.slice %[[B]]#1 [0:3, 0:2]
func.func @topk(%x: tensor<3x8xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>) {
  %0 = stablehlo.iota dim = 1 : tensor<3x8xi64>
  %1:2 = "stablehlo.sort"(%x, %0) <{dimension = 1 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i64>, %d: tensor<i64>):
    %2 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %2 : tensor<i1>
  }) : (tensor<3x8xf32>, tensor<3x8xi64>) -> (tensor<3x8xf32>, tensor<3x8xi64>)
  %3 = stablehlo.slice %1#0 [0:3, 0:2] : (tensor<3x8xf32>) -> tensor<3x2xf32>
  %4 = stablehlo.slice %1#1 [0:3, 0:2] : (tensor<3x8xi64>) -> tensor<3x2xi64>
  return %3, %4 : tensor<3x2xf32>, tensor<3x2xi64>
}

// -----

// A sort of one tensor, or one read whole (torch.sort), stays as it is.
// CHECK-LABEL: func.func @sort(
// CHECK-NOT:     optimization_barrier
func.func @sort(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xi64>) {
  %0 = stablehlo.iota dim = 0 : tensor<8xi64>
  %1:2 = "stablehlo.sort"(%x, %0) <{dimension = 0 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i64>, %d: tensor<i64>):
    %2 = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %2 : tensor<i1>
  }) : (tensor<8xf32>, tensor<8xi64>) -> (tensor<8xf32>, tensor<8xi64>)
  return %1#0, %1#1 : tensor<8xf32>, tensor<8xi64>
}
