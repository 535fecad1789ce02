// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-writable-constant-updates)' | FileCheck %s

// An update of all of x by a constant becomes select(barrier(true), constant, x).
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x3xf32>
// CHECK:         %[[K:.*]] = stablehlo.constant dense<7.000000e+00> : tensor<2x3xf32>
// CHECK:         %[[TRUE:.*]] = stablehlo.constant dense<true> : tensor<2x3xi1>
// CHECK:         %[[OPAQUE:.*]] = stablehlo.optimization_barrier %[[TRUE]] : tensor<2x3xi1>
// CHECK:         %[[NEW:.*]] = stablehlo.select %[[OPAQUE]], %[[K]], %[[X]]
// CHECK-NOT:     dynamic_update_slice
// CHECK:         return %[[NEW]]
func.func @main(%x: tensor<2x3xf32>, %p: tensor<i64>) -> tensor<2x3xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %k = stablehlo.constant dense<7.000000e+00> : tensor<2x3xf32>
  %0 = stablehlo.dynamic_update_slice %x, %k, %c0, %p : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<i64>, tensor<i64>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
