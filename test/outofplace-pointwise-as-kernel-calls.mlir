// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-pointwise-as-kernel-calls)' \
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

// SGD's momentum and parameter updates, b2 = b * 0.9 + g of a kernel's result g and
// p2 = -(b2 * 0.01 - p), are eager's add with alpha, each in the buffer of the written
// argument it reads; a multiply-add of an XLA loop's result (g + g) stays XLA's.
// CHECK-LABEL: func.func @update(
// CHECK-SAME:    %[[B:[^:]*]]: tensor<1048576xf32> {tf.aliasing_output = 0 : i32}
// CHECK-SAME:    %[[P:[^:]*]]: tensor<1048576xf32> {tf.aliasing_output = 1 : i32}
// CHECK:         %[[G:.*]] = stablehlo.reshape
// CHECK:         %[[B2:.*]] = stablehlo.custom_call @"aten::kernel"(%[[G]], %[[B]])
// CHECK-SAME:      alpha = 0.89999997615814208 : f64
// CHECK-SAME:      outofplace.op = "aten::add.out"
// CHECK-SAME:      outofplace.out.3 = 0 : i64
// CHECK-SAME:      outofplace.results = array<i64: -1, 0>
// CHECK-SAME:      output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 1, operand_tuple_indices = []>]
// CHECK:         %[[P2:.*]] = stablehlo.custom_call @"aten::kernel"(%[[P]], %[[B2]])
// CHECK-SAME:      alpha = -0.0099999997764825821 : f64
// CHECK-SAME:      outofplace.results = array<i64: 0, -1>
// CHECK-SAME:      operand_index = 0
// CHECK:         %[[S:.*]] = stablehlo.add %[[G]], %[[G]]
// CHECK:         %[[U:.*]] = stablehlo.add %{{.*}}, %[[S]]
// CHECK:         return %[[B2]], %[[P2]], %[[U]]
func.func @update(%b: tensor<1048576xf32> {tf.aliasing_output = 0 : i32}, %p: tensor<1048576xf32> {tf.aliasing_output = 1 : i32}, %x: tensor<1024x1024xf32>, %w: tensor<1x1x1x1xf32>) -> (tensor<1048576xf32>, tensor<1048576xf32>, tensor<1048576xf32>) {
  %g0 = stablehlo.custom_call @"aten::convolution"(%x, %w) {api_version = 4 : i32} : (tensor<1024x1024xf32>, tensor<1x1x1x1xf32>) -> tensor<1024x1024xf32>
  %g = stablehlo.reshape %g0 : (tensor<1024x1024xf32>) -> tensor<1048576xf32>
  %c9 = stablehlo.constant dense<0.899999976> : tensor<1048576xf32>
  %m = stablehlo.multiply %b, %c9 : tensor<1048576xf32>
  %b2 = stablehlo.add %m, %g : tensor<1048576xf32>
  %c1 = stablehlo.constant dense<0.00999999977> : tensor<1048576xf32>
  %q = stablehlo.multiply %b2, %c1 : tensor<1048576xf32>
  %d = stablehlo.subtract %q, %p : tensor<1048576xf32>
  %p2 = stablehlo.negate %d : tensor<1048576xf32>
  %s = stablehlo.add %g, %g : tensor<1048576xf32>
  %m2 = stablehlo.multiply %b, %c9 : tensor<1048576xf32>
  %u = stablehlo.add %m2, %s : tensor<1048576xf32>
  return %b2, %p2, %u : tensor<1048576xf32>, tensor<1048576xf32>, tensor<1048576xf32>
}
