// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-round-through-float32)' \
// RUN:   | FileCheck %s

// float64 to float16 and to bfloat16 go through float32, as eager rounds them; other
// conversions (float32 to float16, float64 to float32) stay one convert.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2xf64>, %[[Y:[^:]*]]: tensor<f32>
// CHECK:         %[[A:.*]] = stablehlo.convert %[[X]] : (tensor<2xf64>) -> tensor<2xf32>
// CHECK-NEXT:    %[[H:.*]] = stablehlo.convert %[[A]] : (tensor<2xf32>) -> tensor<2xf16>
// CHECK-NEXT:    %[[B:.*]] = stablehlo.convert %[[X]] : (tensor<2xf64>) -> tensor<2xf32>
// CHECK-NEXT:    %[[BF:.*]] = stablehlo.convert %[[B]] : (tensor<2xf32>) -> tensor<2xbf16>
// CHECK-NEXT:    %[[F:.*]] = stablehlo.convert %[[X]] : (tensor<2xf64>) -> tensor<2xf32>
// CHECK-NEXT:    %[[G:.*]] = stablehlo.convert %[[Y]] : (tensor<f32>) -> tensor<f16>
// CHECK-NEXT:    return %[[H]], %[[BF]], %[[F]], %[[G]]
func.func @main(%x: tensor<2xf64>, %y: tensor<f32>) -> (tensor<2xf16>, tensor<2xbf16>, tensor<2xf32>, tensor<f16>) {
  %0 = stablehlo.convert %x : (tensor<2xf64>) -> tensor<2xf16>
  %1 = stablehlo.convert %x : (tensor<2xf64>) -> tensor<2xbf16>
  %2 = stablehlo.convert %x : (tensor<2xf64>) -> tensor<2xf32>
  %3 = stablehlo.convert %y : (tensor<f32>) -> tensor<f16>
  return %0, %1, %2, %3 : tensor<2xf16>, tensor<2xbf16>, tensor<2xf32>, tensor<f16>
}
