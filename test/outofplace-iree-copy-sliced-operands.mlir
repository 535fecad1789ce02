// RUN: outofplace-opt %s --split-input-file --pass-pipeline='builtin.module(outofplace-iree-copy-sliced-operands)' | FileCheck %s

// A gather's operand that is a slice goes behind a barrier; a scatter's (a slice of part
// of y, through a reshape) too, then into a buffer of its own: select(barrier(true), it,
// zeros).
// CHECK-LABEL: func.func @main(
// CHECK:         %[[S:.*]] = stablehlo.slice %arg0 [0:4, 2:3, 0:1]
// CHECK:         %[[SB:.*]] = stablehlo.optimization_barrier %[[S]] : tensor<4x1x1xf32>
// CHECK:         %[[G:.*]] = "stablehlo.gather"(%[[SB]], %arg1)
// CHECK:         %[[T:.*]] = stablehlo.slice %arg2 [1:2]
// CHECK:         %[[R:.*]] = stablehlo.reshape %[[T]] : (tensor<1xf32>) -> tensor<1x1xf32>
// CHECK:         %[[RB:.*]] = stablehlo.optimization_barrier %[[R]] : tensor<1x1xf32>
// CHECK:         %[[ZEROS:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<1x1xf32>
// CHECK:         %[[TRUE:.*]] = stablehlo.constant dense<true> : tensor<1x1xi1>
// CHECK:         %[[OPAQUE:.*]] = stablehlo.optimization_barrier %[[TRUE]] : tensor<1x1xi1>
// CHECK:         %[[OWN:.*]] = stablehlo.select %[[OPAQUE]], %[[RB]], %[[ZEROS]]
// CHECK:         %[[SC:.*]] = "stablehlo.scatter"(%[[OWN]], %arg3, %arg4)
// CHECK:         return %[[G]], %[[SC]]
func.func @main(%x: tensor<4x3x1xf32>, %i: tensor<2x3xi64>, %y: tensor<4xf32>, %j: tensor<3x1xi64>, %w: tensor<3x1xf32>) -> (tensor<2xf32>, tensor<1x1xf32>) {
  %0 = stablehlo.slice %x [0:4, 2:3, 0:1] : (tensor<4x3x1xf32>) -> tensor<4x1x1xf32>
  %1 = "stablehlo.gather"(%0, %i) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1, 2], start_index_map = [0, 1, 2], index_vector_dim = 1>, slice_sizes = array<i64: 1, 1, 1>}> : (tensor<4x1x1xf32>, tensor<2x3xi64>) -> tensor<2xf32>
  %2 = stablehlo.slice %y [1:2] : (tensor<4xf32>) -> tensor<1xf32>
  %3 = stablehlo.reshape %2 : (tensor<1xf32>) -> tensor<1x1xf32>
  %4 = "stablehlo.scatter"(%3, %j, %w) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<1x1xf32>, tensor<3x1xi64>, tensor<3x1xf32>) -> tensor<1x1xf32>
  return %1, %4 : tensor<2xf32>, tensor<1x1xf32>
}

// -----

// A sort of a slice of an argument (`topk(x[:, :8])`): its operand behind a barrier.
// CHECK-LABEL: func.func @main(
// CHECK:         %[[S:.*]] = stablehlo.slice %arg0 [0:3, 0:8]
// CHECK:         %[[SB:.*]] = stablehlo.optimization_barrier %[[S]] : tensor<3x8xf32>
// CHECK:         "stablehlo.sort"(%[[SB]])
func.func @main(%x: tensor<3x130xf32>) -> tensor<3x8xf32> {
  %0 = stablehlo.slice %x [0:3, 0:8] : (tensor<3x130xf32>) -> tensor<3x8xf32>
  %1 = "stablehlo.sort"(%0) <{dimension = 1 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %2 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %2 : tensor<i1>
  }) : (tensor<3x8xf32>) -> tensor<3x8xf32>
  return %1 : tensor<3x8xf32>
}
