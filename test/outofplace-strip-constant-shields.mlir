// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-strip-constant-shields)' | FileCheck %s

// The marked barriers go; reshapes, broadcasts, conversions and concatenations of
// constants fold into the constants they make. An unmarked barrier stays.
// CHECK-LABEL: func.func @strip(
// CHECK-DAG:     %[[B:.*]] = stablehlo.constant dense<2.500000e+00> : tensor<2x3xf32>
// CHECK-DAG:     %[[R:.*]] = stablehlo.constant dense<{{\[}}[1, 2], [3, 4]]> : tensor<2x2xi64>
// CHECK-DAG:     %[[C:.*]] = stablehlo.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00, 7.000000e+00]> : tensor<5xf32>
// CHECK-DAG:     %[[U:.*]] = stablehlo.constant dense<5.000000e-01> : tensor<f32>
// CHECK:         %[[K:.*]] = stablehlo.optimization_barrier %[[U]] : tensor<f32>
// CHECK-NOT:     outofplace.constant_shield
// CHECK-NOT:     stablehlo.reshape
// CHECK-NOT:     stablehlo.broadcast_in_dim
// CHECK-NOT:     stablehlo.convert
// CHECK-NOT:     stablehlo.concatenate
// CHECK:         return %[[B]], %[[R]], %[[C]], %[[K]]
func.func @strip() -> (tensor<2x3xf32>, tensor<2x2xi64>, tensor<5xf32>, tensor<f32>) {
  %0 = stablehlo.constant dense<2.5> : tensor<3xf32>
  %1 = stablehlo.optimization_barrier {outofplace.constant_shield} %0 : tensor<3xf32>
  %2 = stablehlo.broadcast_in_dim %1, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %3 = stablehlo.constant dense<[1, 2, 3, 4]> : tensor<4xi64>
  %4 = stablehlo.optimization_barrier {outofplace.constant_shield} %3 : tensor<4xi64>
  %5 = stablehlo.reshape %4 : (tensor<4xi64>) -> tensor<2x2xi64>
  %6 = stablehlo.convert %4 : (tensor<4xi64>) -> tensor<4xf32>
  %7 = stablehlo.constant dense<7.0> : tensor<1xf32>
  %8 = stablehlo.concatenate %6, %7, dim = 0 : (tensor<4xf32>, tensor<1xf32>) -> tensor<5xf32>
  %9 = stablehlo.constant dense<0.5> : tensor<f32>
  %10 = stablehlo.optimization_barrier %9 : tensor<f32>
  return %2, %5, %8, %10 : tensor<2x3xf32>, tensor<2x2xi64>, tensor<5xf32>, tensor<f32>
}

// -----

// A constant concatenated with itself: folded, and erased once.
// CHECK-LABEL: func.func @twice(
// CHECK-NEXT:    %[[C:.*]] = stablehlo.constant dense<[1, 2, 1, 2]> : tensor<4xi64>
// CHECK-NEXT:    return %[[C]]
func.func @twice() -> tensor<4xi64> {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi64>
  %1 = stablehlo.concatenate %0, %0, dim = 0 : (tensor<2xi64>, tensor<2xi64>) -> tensor<4xi64>
  return %1 : tensor<4xi64>
}
