// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-narrow-indices)' \
// RUN:   | FileCheck %s

// A scatter and a gather with torch's 64-bit indices get them clamped to
// [-1, the largest dimension] (out of bounds stays out of bounds) and converted to i32;
// 32-bit indices are left as they are.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x1x4xf32>, %[[I:[^:]*]]: tensor<2x1xi64>, %[[J:[^:]*]]: tensor<2x1xi32>
// CHECK-DAG:     %[[LOW:.*]] = stablehlo.constant dense<-1> : tensor<2x1xi64>
// CHECK-DAG:     %[[HIGH:.*]] = stablehlo.constant dense<4> : tensor<2x1xi64>
// CHECK:         %[[C:.*]] = stablehlo.clamp %[[LOW]], %[[I]], %[[HIGH]] : tensor<2x1xi64>
// CHECK:         %[[N:.*]] = stablehlo.convert %[[C]] : (tensor<2x1xi64>) -> tensor<2x1xi32>
// CHECK:         "stablehlo.scatter"(%[[X]], %[[N]], %{{.*}})
// CHECK:         stablehlo.convert %{{.*}} : (tensor<2x1xi64>) -> tensor<2x1xi32>
// CHECK:         "stablehlo.gather"(%{{.*}}, %{{.*}}) {{.*}} : (tensor<4x1x4xf32>, tensor<2x1xi32>)
// CHECK:         "stablehlo.gather"(%{{.*}}, %[[J]])
func.func @main(%x: tensor<4x1x4xf32>, %i: tensor<2x1xi64>, %j: tensor<2x1xi32>, %w: tensor<2x1x4xf32>) -> (tensor<4x1x4xf32>, tensor<2x1x4xf32>, tensor<2x1x4xf32>) {
  %0 = "stablehlo.scatter"(%x, %i, %w) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1, 2], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<4x1x4xf32>, tensor<2x1xi64>, tensor<2x1x4xf32>) -> tensor<4x1x4xf32>
  %1 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1, 2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1, 4>}> : (tensor<4x1x4xf32>, tensor<2x1xi64>) -> tensor<2x1x4xf32>
  %2 = "stablehlo.gather"(%x, %j) <{dimension_numbers = #stablehlo.gather<offset_dims = [1, 2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1, 4>}> : (tensor<4x1x4xf32>, tensor<2x1xi32>) -> tensor<2x1x4xf32>
  return %0, %1, %2 : tensor<4x1x4xf32>, tensor<2x1x4xf32>, tensor<2x1x4xf32>
}
