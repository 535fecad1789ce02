// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-relus-as-kernel-calls)' \
// RUN:   | FileCheck %s

// In a program that calls eager's kernels: the ReLU of a kernel call's result (1M
// elements) becomes eager's clamp_min, its gradient of a kernel call's result eager's
// threshold_backward; the ReLU of a sum (an XLA loop it fuses with) stays XLA's.
// CHECK-LABEL: func.func @main(
// CHECK:         %[[C:.*]] = stablehlo.custom_call @"aten::convolution"
// CHECK:         %[[R:.*]] = stablehlo.custom_call @"aten::kernel"(%[[C]])
// CHECK-SAME:      min = 0 : i64
// CHECK-SAME:      outofplace.op = "aten::clamp_min.out"
// CHECK-SAME:      outofplace.out.2 = 0 : i64
// CHECK:         %[[S:.*]] = stablehlo.add %[[C]], %{{.*}}
// CHECK:         %[[R2:.*]] = stablehlo.maximum %[[S]], %{{.*}}
// CHECK:         %[[G:.*]] = stablehlo.custom_call @"aten::kernel"(%[[C]], %[[R]])
// CHECK-SAME:      outofplace.op = "aten::threshold_backward.grad_input"
// CHECK-SAME:      outofplace.out.3 = 0 : i64
// CHECK-SAME:      threshold = 0.000000e+00 : f64
// CHECK:         return %[[R]], %[[R2]], %[[G]]
func.func @main(%x: tensor<1x1x1024x1024xf32>, %w: tensor<1x1x1x1xf32>, %y: tensor<1x1x1024x1024xf32>) -> (tensor<1x1x1024x1024xf32>, tensor<1x1x1024x1024xf32>, tensor<1x1x1024x1024xf32>) {
  %c = stablehlo.custom_call @"aten::convolution"(%x, %w) {api_version = 4 : i32} : (tensor<1x1x1024x1024xf32>, tensor<1x1x1x1xf32>) -> tensor<1x1x1024x1024xf32>
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<1x1x1024x1024xf32>
  %r = stablehlo.maximum %c, %zero : tensor<1x1x1024x1024xf32>
  %s = stablehlo.add %c, %y : tensor<1x1x1024x1024xf32>
  %r2 = stablehlo.maximum %s, %zero : tensor<1x1x1024x1024xf32>
  %le = stablehlo.compare LE, %r, %zero, FLOAT : (tensor<1x1x1024x1024xf32>, tensor<1x1x1024x1024xf32>) -> tensor<1x1x1024x1024xi1>
  %g = stablehlo.select %le, %zero, %c : tensor<1x1x1024x1024xi1>, tensor<1x1x1024x1024xf32>
  return %r, %r2, %g : tensor<1x1x1024x1024xf32>, tensor<1x1x1024x1024xf32>, tensor<1x1x1024x1024xf32>
}

// A small ReLU (under MIN_ELEMENTS) stays XLA's.
// CHECK-LABEL: func.func @small(
// CHECK-NOT:     aten::kernel
// CHECK:         stablehlo.maximum
func.func @small(%x: tensor<8x8xf32>, %w: tensor<1x1x1x1xf32>) -> tensor<8x8xf32> {
  %c = stablehlo.custom_call @"aten::convolution"(%x, %w) {api_version = 4 : i32} : (tensor<8x8xf32>, tensor<1x1x1x1xf32>) -> tensor<8x8xf32>
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<8x8xf32>
  %r = stablehlo.maximum %c, %zero : tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}
