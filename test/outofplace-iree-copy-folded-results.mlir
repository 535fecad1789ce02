// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-copy-folded-results)' | FileCheck %s

// r = x * 1 is x to IREE, whose update writes x's buffer: r goes behind a barrier; the
// result updated in place does not.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<1x3xf32> {tf.aliasing_output = 1 : i32}
// CHECK:         %[[R:.*]] = stablehlo.multiply %[[X]], %{{.*}} : tensor<1x3xf32>
// CHECK:         %[[NEW:.*]] = stablehlo.dynamic_update_slice %[[X]]
// CHECK:         %[[COPY:.*]] = stablehlo.optimization_barrier %[[R]] : tensor<1x3xf32>
// CHECK:         return %[[COPY]], %[[NEW]]
func.func @main(%x: tensor<1x3xf32> {tf.aliasing_output = 1 : i32}) -> (tensor<1x3xf32>, tensor<1x3xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c1 = stablehlo.constant dense<1> : tensor<i64>
  %five = stablehlo.constant dense<5.000000e+00> : tensor<1x1xf32>
  %one = stablehlo.constant dense<1.000000e+00> : tensor<1x3xf32>
  %r = stablehlo.multiply %x, %one : tensor<1x3xf32>
  %0 = stablehlo.dynamic_update_slice %x, %five, %c0, %c1 : (tensor<1x3xf32>, tensor<1x1xf32>, tensor<i64>, tensor<i64>) -> tensor<1x3xf32>
  return %r, %0 : tensor<1x3xf32>, tensor<1x3xf32>
}
