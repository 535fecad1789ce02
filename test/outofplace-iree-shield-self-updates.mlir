// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-shield-self-updates)' | FileCheck %s

// x[0] = x[3]: the update, read from x, goes behind a barrier; an argument update does not.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<5xf32>, %[[U:[^:]*]]: tensor<1xf32>
// CHECK:         %[[OLD:.*]] = stablehlo.slice %[[X]] [3:4]
// CHECK:         %[[OWN:.*]] = stablehlo.optimization_barrier %[[OLD]] : tensor<1xf32>
// CHECK:         %[[FIRST:.*]] = stablehlo.dynamic_update_slice %[[X]], %[[OWN]], %{{.*}}
// CHECK:         stablehlo.dynamic_update_slice %[[FIRST]], %[[U]], %{{.*}}
func.func @main(%x: tensor<5xf32>, %u: tensor<1xf32>) -> tensor<5xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c3 = stablehlo.constant dense<3> : tensor<i64>
  %0 = stablehlo.slice %x [3:4] : (tensor<5xf32>) -> tensor<1xf32>
  %1 = stablehlo.dynamic_update_slice %x, %0, %c0 : (tensor<5xf32>, tensor<1xf32>, tensor<i64>) -> tensor<5xf32>
  %2 = stablehlo.dynamic_update_slice %1, %u, %c3 : (tensor<5xf32>, tensor<1xf32>, tensor<i64>) -> tensor<5xf32>
  return %2 : tensor<5xf32>
}
