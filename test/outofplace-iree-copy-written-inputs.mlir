// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-copy-written-inputs)' | FileCheck %s

// x reaches a scatter's operand through a transpose of a unit dimension and a reshape,
// which IREE folds: marked to be passed as a copy. y is only read; z is aliased (its
// buffer is IREE's to write): neither is marked.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %arg0: tensor<1x5xf32> {outofplace.iree_copied}, %arg1: tensor<5xf32>, %arg2: tensor<5xf32> {tf.aliasing_output = 1 : i32}
func.func @main(%x: tensor<1x5xf32>, %y: tensor<5xf32>, %z: tensor<5xf32> {tf.aliasing_output = 1 : i32}) -> (tensor<5xf32>, tensor<5xf32>) {
  %i = stablehlo.constant dense<[[1], [4]]> : tensor<2x1xi64>
  %u = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
  %0 = stablehlo.transpose %x, dims = [1, 0] : (tensor<1x5xf32>) -> tensor<5x1xf32>
  %1 = stablehlo.reshape %0 : (tensor<5x1xf32>) -> tensor<5xf32>
  %2 = "stablehlo.scatter"(%1, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<5xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<5xf32>
  %3 = stablehlo.add %2, %y : tensor<5xf32>
  %4 = "stablehlo.scatter"(%z, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<5xf32>, tensor<2x1xi64>, tensor<2xf32>) -> tensor<5xf32>
  return %3, %4 : tensor<5xf32>, tensor<5xf32>
}
