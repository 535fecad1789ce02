// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-shield-constant-updates)' | FileCheck %s

// A constant update goes behind a barrier; an argument update does not.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<7xf32>, %[[U:[^:]*]]: tensor<1xf32>
// CHECK:         %[[ZERO:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<1xf32>
// CHECK:         %[[OWN:.*]] = stablehlo.optimization_barrier %[[ZERO]] : tensor<1xf32>
// CHECK:         %[[FIRST:.*]] = stablehlo.dynamic_update_slice %[[X]], %[[OWN]], %{{.*}}
// CHECK:         stablehlo.dynamic_update_slice %[[FIRST]], %[[U]], %{{.*}}
func.func @main(%x: tensor<7xf32>, %u: tensor<1xf32>) -> tensor<7xf32> {
  %c4 = stablehlo.constant dense<4> : tensor<i64>
  %c5 = stablehlo.constant dense<5> : tensor<i64>
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<1xf32>
  %0 = stablehlo.dynamic_update_slice %x, %zero, %c5 : (tensor<7xf32>, tensor<1xf32>, tensor<i64>) -> tensor<7xf32>
  %1 = stablehlo.dynamic_update_slice %0, %u, %c4 : (tensor<7xf32>, tensor<1xf32>, tensor<i64>) -> tensor<7xf32>
  return %1 : tensor<7xf32>
}
