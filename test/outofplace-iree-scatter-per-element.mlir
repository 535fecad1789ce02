// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-scatter-per-element)' | FileCheck %s

// A scatter of columns of c (windows along dimension 0, indexed along dimension 1)
// becomes a scatter of single elements: an iota along the window dimension, the index
// broadcast along it.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[C:[^:]*]]: tensor<2x8xf32>, %[[I:[^:]*]]: tensor<3x1xi64>, %[[K:[^:]*]]: tensor<2x3xf32>
// CHECK:         %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<2x3xi64>
// CHECK:         %[[ROWS:.*]] = stablehlo.reshape %[[IOTA]] : (tensor<2x3xi64>) -> tensor<2x3x1xi64>
// CHECK:         %[[COL:.*]] = stablehlo.slice %[[I]] [0:3, 0:1]
// CHECK:         %[[FLAT:.*]] = stablehlo.reshape %[[COL]] : (tensor<3x1xi64>) -> tensor<3xi64>
// CHECK:         %[[B:.*]] = stablehlo.broadcast_in_dim %[[FLAT]], dims = [1] : (tensor<3xi64>) -> tensor<2x3xi64>
// CHECK:         %[[COLS:.*]] = stablehlo.reshape %[[B]] : (tensor<2x3xi64>) -> tensor<2x3x1xi64>
// CHECK:         %[[INDICES:.*]] = stablehlo.concatenate %[[ROWS]], %[[COLS]], dim = 2 : (tensor<2x3x1xi64>, tensor<2x3x1xi64>) -> tensor<2x3x2xi64>
// CHECK:         "stablehlo.scatter"(%[[C]], %[[INDICES]], %[[K]]) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 2>}>
// CHECK:         (tensor<2x8xf32>, tensor<2x3x2xi64>, tensor<2x3xf32>) -> tensor<2x8xf32>
func.func @main(%c: tensor<2x8xf32>, %i: tensor<3x1xi64>, %k: tensor<2x3xf32>) -> tensor<2x8xf32> {
  %0 = "stablehlo.scatter"(%c, %i, %k) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<2x8xf32>, tensor<3x1xi64>, tensor<2x3xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
