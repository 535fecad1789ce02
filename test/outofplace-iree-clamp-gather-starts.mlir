// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-clamp-gather-starts)' | FileCheck %s

// The start indices, computed from an argument, clamped into [0, 4 - 1] before the
// gather (StableHLO clamps them; IREE 3.13 reads out of the buffer).
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4xf32>, %[[I:[^:]*]]: tensor<2xi64>
// CHECK:         %[[HIGH:.*]] = stablehlo.constant dense<3> : tensor<1xi64>
// CHECK:         %[[SCALAR:.*]] = stablehlo.reshape %[[HIGH]] : (tensor<1xi64>) -> tensor<i64>
// CHECK:         %[[HIGHS:.*]] = stablehlo.broadcast_in_dim %[[SCALAR]], dims = [] : (tensor<i64>) -> tensor<2xi64>
// CHECK:         %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<2xi64>
// CHECK:         %[[CLAMPED:.*]] = stablehlo.clamp %[[ZERO]], %[[I]], %[[HIGHS]] : tensor<2xi64>
// CHECK:         %[[G:.*]] = "stablehlo.gather"(%[[X]], %[[CLAMPED]])
// CHECK:         return %[[G]]
func.func @main(%x: tensor<4xf32>, %i: tensor<2xi64>) -> tensor<2xf32> {
  %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1>}> : (tensor<4xf32>, tensor<2xi64>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
