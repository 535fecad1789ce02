// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-float32-power-in-float64)' \
// RUN:   | FileCheck %s

// A float32 power: computed in float64, rounded back.
// CHECK-LABEL: func.func @float32(
// CHECK-SAME:    %[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<4xf32>
// CHECK:         %[[A:.*]] = stablehlo.convert %[[X]] : (tensor<4xf32>) -> tensor<4xf64>
// CHECK:         %[[B:.*]] = stablehlo.convert %[[Y]] : (tensor<4xf32>) -> tensor<4xf64>
// CHECK:         %[[P:.*]] = stablehlo.power %[[A]], %[[B]] : tensor<4xf64>
// CHECK:         %[[R:.*]] = stablehlo.convert %[[P]] : (tensor<4xf64>) -> tensor<4xf32>
// CHECK:         return %[[R]]
func.func @float32(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.power %x, %y : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Other element types are left alone.
// CHECK-LABEL: func.func @float64_and_int(
// CHECK-NOT:     stablehlo.convert
// CHECK:         stablehlo.power %{{.*}}, %{{.*}} : tensor<4xf64>
// CHECK:         stablehlo.power %{{.*}}, %{{.*}} : tensor<4xi32>
func.func @float64_and_int(%x: tensor<4xf64>, %i: tensor<4xi32>) -> (tensor<4xf64>, tensor<4xi32>) {
  %0 = stablehlo.power %x, %x : tensor<4xf64>
  %1 = stablehlo.power %i, %i : tensor<4xi32>
  return %0, %1 : tensor<4xf64>, tensor<4xi32>
}
