// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-separate-scatter-indices)' | FileCheck %s

// The second scatter on %i takes it through a barrier of its own; the first as it is.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x2xf32>, %[[I:[^:]*]]: tensor<3x1xi64>, %[[V:[^:]*]]: tensor<3x2xf32>
// CHECK:         %[[FIRST:.*]] = "stablehlo.scatter"(%[[X]], %[[I]], %[[V]])
// CHECK:         %[[OWN:.*]] = stablehlo.optimization_barrier %[[I]] : tensor<3x1xi64>
// CHECK:         "stablehlo.scatter"(%[[FIRST]], %[[OWN]], %[[V]])
func.func @main(%x: tensor<4x2xf32>, %i: tensor<3x1xi64>, %v: tensor<3x2xf32>) -> tensor<4x2xf32> {
  %0 = "stablehlo.scatter"(%x, %i, %v) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<4x2xf32>, tensor<3x1xi64>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = "stablehlo.scatter"(%0, %i, %v) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<4x2xf32>, tensor<3x1xi64>, tensor<3x2xf32>) -> tensor<4x2xf32>
  return %1 : tensor<4x2xf32>
}
