// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-dynamic-shapes)' | FileCheck %s

// A broadcast torch.export traced as valid: the assumption's body, inlined.
// CHECK-LABEL: func.func @assuming
// CHECK-NOT:     shape.cstr_broadcastable
// CHECK-NOT:     shape.assuming
// CHECK:         %[[S:.*]] = shape.broadcast
// CHECK:         %[[A:.*]] = stablehlo.dynamic_broadcast_in_dim %arg0, %[[S]]
// CHECK:         %[[B:.*]] = stablehlo.dynamic_broadcast_in_dim %arg1, %[[S]]
// CHECK:         %[[SUM:.*]] = stablehlo.add %[[A]], %[[B]]
// CHECK:         return %[[SUM]]
func.func @assuming(%arg0: tensor<?x4xf32>, %arg1: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = shape.shape_of %arg0 : tensor<?x4xf32> -> tensor<2xindex>
  %1 = shape.shape_of %arg1 : tensor<?x4xf32> -> tensor<2xindex>
  %2 = shape.cstr_broadcastable %0, %1 : tensor<2xindex>, tensor<2xindex>
  %3 = shape.assuming %2 -> (tensor<?x4xf32>) {
    %4 = shape.broadcast %0, %1 : tensor<2xindex>, tensor<2xindex> -> tensor<2xindex>
    %5 = stablehlo.dynamic_broadcast_in_dim %arg0, %4, dims = [0, 1] : (tensor<?x4xf32>, tensor<2xindex>) -> tensor<?x4xf32>
    %6 = stablehlo.dynamic_broadcast_in_dim %arg1, %4, dims = [0, 1] : (tensor<?x4xf32>, tensor<2xindex>) -> tensor<?x4xf32>
    %7 = stablehlo.add %5, %6 : tensor<?x4xf32>
    shape.assuming_yield %7 : tensor<?x4xf32>
  }
  return %3 : tensor<?x4xf32>
}

// -----

// A size as a tensor (x.mean(0) divides by it): get_dimension_size, no tensor.dim.
// CHECK-LABEL: func.func @size
// CHECK:         %[[N:.*]] = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
// CHECK:         %[[N64:.*]] = stablehlo.convert %[[N]] : (tensor<i32>) -> tensor<i64>
// CHECK:         %[[V:.*]] = stablehlo.reshape %[[N64]] : (tensor<i64>) -> tensor<1xi64>
// CHECK-NOT:     tensor.dim
// CHECK:         return %[[V]]
func.func @size(%arg0: tensor<?x4xf32>) -> tensor<1xi64> {
  %c0 = arith.constant 0 : index
  %dim = tensor.dim %arg0, %c0 : tensor<?x4xf32>
  %0 = arith.index_cast %dim : index to i64
  %1 = tensor.from_elements %0 : tensor<1xi64>
  return %1 : tensor<1xi64>
}
