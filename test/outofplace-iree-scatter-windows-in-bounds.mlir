// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-scatter-windows-in-bounds)' | FileCheck %s

// index_add_ at runtime indices: each index row out of [0, 4 - 1] is replaced by its
// clamped row, and its update by 0 (add's identity), so the scatter writes in bounds.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x2xf32>, %[[I:[^:]*]]: tensor<3xi64>, %[[V:[^:]*]]: tensor<3x2xf32>
// CHECK:         %[[HIGH:.*]] = stablehlo.constant dense<3> : tensor<1x1xi64>
// CHECK:         %[[HIGHS:.*]] = stablehlo.broadcast_in_dim %[[HIGH]], dims = [0, 1] : (tensor<1x1xi64>) -> tensor<3x1xi64>
// CHECK:         %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<3x1xi64>
// CHECK:         %[[CLAMPED:.*]] = stablehlo.clamp %[[ZERO]], %[[ROWS:.*]], %[[HIGHS]] : tensor<3x1xi64>
// CHECK:         %[[FITS:.*]] = stablehlo.compare EQ, %[[CLAMPED]], %[[ROWS]]
// CHECK:         %[[COLUMN:.*]] = stablehlo.slice %[[FITS]] [0:3, 0:1]
// CHECK:         %[[INSIDE:.*]] = stablehlo.reshape %[[COLUMN]] : (tensor<3x1xi1>) -> tensor<3xi1>
// CHECK:         %[[ROW_MASK:.*]] = stablehlo.broadcast_in_dim %[[INSIDE]], dims = [0] : (tensor<3xi1>) -> tensor<3x1xi1>
// CHECK:         %[[WINDOW_MASK:.*]] = stablehlo.broadcast_in_dim %[[INSIDE]], dims = [0] : (tensor<3xi1>) -> tensor<3x2xi1>
// CHECK:         %[[IDENTITY:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<3x2xf32>
// CHECK:         %[[NEW_ROWS:.*]] = stablehlo.select %[[ROW_MASK]], %[[ROWS]], %[[CLAMPED]]
// CHECK:         %[[NEW_WINDOWS:.*]] = stablehlo.select %[[WINDOW_MASK]], %{{.*}}, %[[IDENTITY]]
// CHECK:         "stablehlo.scatter"(%[[X]], %[[NEW_ROWS]], %[[NEW_WINDOWS]]) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}>
// CHECK:           stablehlo.add
func.func @main(%x: tensor<4x2xf32>, %i: tensor<3xi64>, %v: tensor<3x2xf32>) -> tensor<4x2xf32> {
  %0 = stablehlo.reshape %i : (tensor<3xi64>) -> tensor<3x1xi64>
  %1 = "stablehlo.scatter"(%x, %0, %v) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<4x2xf32>, tensor<3x1xi64>, tensor<3x2xf32>) -> tensor<4x2xf32>
  return %1 : tensor<4x2xf32>
}
