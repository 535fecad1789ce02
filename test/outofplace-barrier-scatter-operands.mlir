// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-barrier-scatter-operands)' \
// RUN:   | FileCheck %s

// openxla/xla#49121: a scatter into a value computed from the state (here a slice write)
// reads it through an optimization_barrier; the scatter of the argument itself does not.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[S:.*]]: tensor<8xf32> {tf.aliasing_output = 0 : i32}
// CHECK:         %[[FIRST:.*]] = "stablehlo.scatter"(%[[S]], %{{.*}}, %{{.*}})
// CHECK:         %[[W:.*]] = stablehlo.dynamic_update_slice %[[FIRST]]
// CHECK-NEXT:    %[[B:.*]] = stablehlo.optimization_barrier %[[W]] : tensor<8xf32>
// CHECK-NEXT:    %[[SECOND:.*]] = "stablehlo.scatter"(%[[B]], %{{.*}}, %{{.*}})
// CHECK:         return %[[SECOND]] : tensor<8xf32>
func.func @main(%s: tensor<8xf32> {tf.aliasing_output = 0 : i32}, %i: tensor<1x1xi32>, %w: tensor<1xf32>, %u: tensor<2xf32>, %p: tensor<i64>) -> tensor<8xf32> {
  %0 = "stablehlo.scatter"(%s, %i, %w) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<8xf32>, tensor<1x1xi32>, tensor<1xf32>) -> tensor<8xf32>
  %1 = stablehlo.dynamic_update_slice %0, %u, %p : (tensor<8xf32>, tensor<2xf32>, tensor<i64>) -> tensor<8xf32>
  %2 = "stablehlo.scatter"(%1, %i, %w) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<8xf32>, tensor<1x1xi32>, tensor<1xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}
