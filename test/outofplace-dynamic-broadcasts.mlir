// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-dynamic-broadcasts)' | FileCheck %s

// torch-mlir's broadcast of a dynamic operand to its own type is the operand.
// CHECK-LABEL: func.func @identity
// CHECK-NOT:     stablehlo.dynamic_broadcast_in_dim
// CHECK:         %[[SUM:.*]] = stablehlo.add %arg0, %arg0 : tensor<?x4xf32>
// CHECK:         return %[[SUM]]
func.func @identity(%arg0: tensor<?x4xf32>, %shape: tensor<2xi32>) -> tensor<?x4xf32> {
  %0 = stablehlo.dynamic_broadcast_in_dim %arg0, %shape, dims = [0, 1] : (tensor<?x4xf32>, tensor<2xi32>) -> tensor<?x4xf32>
  %1 = stablehlo.add %0, %0 : tensor<?x4xf32>
  return %1 : tensor<?x4xf32>
}

// -----

// Into more dimensions: every operand dimension but a static 1 keeps its size.
// CHECK-LABEL: func.func @widened
// CHECK:         stablehlo.dynamic_broadcast_in_dim %arg0, %arg1, dims = [0, 1, 2]
// CHECK-SAME:      known_nonexpanding_dimensions = array<i64: 0, 2>
func.func @widened(%arg0: tensor<?x1x4xf32>, %shape: tensor<3xi32>) -> tensor<?x?x4xf32> {
  %0 = stablehlo.dynamic_broadcast_in_dim %arg0, %shape, dims = [0, 1, 2] : (tensor<?x1x4xf32>, tensor<3xi32>) -> tensor<?x?x4xf32>
  return %0 : tensor<?x?x4xf32>
}

// -----

// A static operand is left as it is.
// CHECK-LABEL: func.func @static_operand
// CHECK:         stablehlo.dynamic_broadcast_in_dim %arg0, %arg1, dims = [1] : (tensor<4xf32>, tensor<2xi32>) -> tensor<?x4xf32>
// CHECK-NOT:     known_nonexpanding_dimensions
func.func @static_operand(%arg0: tensor<4xf32>, %shape: tensor<2xi32>) -> tensor<?x4xf32> {
  %0 = stablehlo.dynamic_broadcast_in_dim %arg0, %shape, dims = [1] : (tensor<4xf32>, tensor<2xi32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}
