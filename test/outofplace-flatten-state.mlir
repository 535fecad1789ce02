// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-flatten-state)' \
// RUN:   | FileCheck %s

// SGD with momentum on a 3x3 convolution's weight: the weight and its momentum are passed,
// updated and returned flat; the gradient is reshaped to them, the splat constants made
// again flat, and the forward's convolution reads the weight reshaped back.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[W:[^:]*]]: tensor<36864xf32> {tf.aliasing_output = 1 : i32}
// CHECK-SAME:    %[[B:[^:]*]]: tensor<36864xf32> {tf.aliasing_output = 2 : i32}
// CHECK-SAME:    %[[G:[^:]*]]: tensor<64x64x3x3xf32>
// CHECK-SAME:    -> (tensor<1x64x6x6xf32>, tensor<36864xf32>, tensor<36864xf32>)
// CHECK-NEXT:    %[[W4:.*]] = stablehlo.reshape %[[W]] : (tensor<36864xf32>) -> tensor<64x64x3x3xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.convolution(%{{.*}}, %[[W4]])
// CHECK-NEXT:    %[[C:.*]] = stablehlo.constant dense<0.899999976> : tensor<36864xf32>
// CHECK-NEXT:    %[[M:.*]] = stablehlo.multiply %[[B]], %[[C]] : tensor<36864xf32>
// CHECK-NEXT:    %[[G1:.*]] = stablehlo.reshape %[[G]] : (tensor<64x64x3x3xf32>) -> tensor<36864xf32>
// CHECK-NEXT:    %[[NB:.*]] = stablehlo.add %[[M]], %[[G1]] : tensor<36864xf32>
// CHECK-NEXT:    %[[LR:.*]] = stablehlo.constant dense<-0.00999999977> : tensor<36864xf32>
// CHECK-NEXT:    %[[S:.*]] = stablehlo.multiply %[[NB]], %[[LR]] : tensor<36864xf32>
// CHECK-NEXT:    %[[NW:.*]] = stablehlo.add %[[W]], %[[S]] : tensor<36864xf32>
// CHECK-NEXT:    return %[[Y]], %[[NW]], %[[NB]] : tensor<1x64x6x6xf32>, tensor<36864xf32>, tensor<36864xf32>
func.func @main(%w: tensor<64x64x3x3xf32> {tf.aliasing_output = 1 : i32}, %b: tensor<64x64x3x3xf32> {tf.aliasing_output = 2 : i32}, %g: tensor<64x64x3x3xf32>, %x: tensor<1x64x8x8xf32>) -> (tensor<1x64x6x6xf32>, tensor<64x64x3x3xf32>, tensor<64x64x3x3xf32>) {
  %y = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x64x8x8xf32>, tensor<64x64x3x3xf32>) -> tensor<1x64x6x6xf32>
  %c = stablehlo.constant dense<0.9> : tensor<64x64x3x3xf32>
  %m = stablehlo.multiply %b, %c : tensor<64x64x3x3xf32>
  %nb = stablehlo.add %m, %g : tensor<64x64x3x3xf32>
  %lr = stablehlo.constant dense<-0.01> : tensor<64x64x3x3xf32>
  %s = stablehlo.multiply %nb, %lr : tensor<64x64x3x3xf32>
  %nw = stablehlo.add %w, %s : tensor<64x64x3x3xf32>
  return %y, %nw, %nb : tensor<1x64x6x6xf32>, tensor<64x64x3x3xf32>, tensor<64x64x3x3xf32>
}

// A value of the update another op reads (a sum of it), and a result that is not the
// argument's: they read it reshaped back.
// CHECK-LABEL: func.func @read_elsewhere(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<32xf32> {tf.aliasing_output = 0 : i32}
// CHECK-SAME:    -> (tensor<32xf32>, tensor<f32>, tensor<4x8xf32>)
// CHECK:         %[[E:.*]] = stablehlo.exponential %[[X]] : tensor<32xf32>
// CHECK-NEXT:    %[[E2:.*]] = stablehlo.reshape %[[E]] : (tensor<32xf32>) -> tensor<4x8xf32>
// CHECK:         stablehlo.reduce(%[[E2]] init: %{{.*}})
// CHECK:         return %[[E]], %{{.*}}, %[[E2]] : tensor<32xf32>, tensor<f32>, tensor<4x8xf32>
func.func @read_elsewhere(%x: tensor<4x8xf32> {tf.aliasing_output = 0 : i32}) -> (tensor<4x8xf32>, tensor<f32>, tensor<4x8xf32>) {
  %e = stablehlo.exponential %x : tensor<4x8xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<f32>
  return %e, %s, %e : tensor<4x8xf32>, tensor<f32>, tensor<4x8xf32>
}

// A cache written at a runtime position (dynamic_update_slice) is left as it is: XLA
// updates it in place, and would not through a reshape. So is a state of rank 1, and a
// state whose new value is a select of a scalar predicate (its operands differ in shape).
// CHECK-LABEL: func.func @left(
// CHECK-SAME:    %{{[^:]*}}: tensor<2x16x8xf32> {tf.aliasing_output = 0 : i32}
// CHECK-SAME:    %{{[^:]*}}: tensor<8xf32> {tf.aliasing_output = 1 : i32}
// CHECK-SAME:    %{{[^:]*}}: tensor<4x4xf32> {tf.aliasing_output = 2 : i32}
// CHECK-NOT:     stablehlo.reshape
// CHECK:         return
func.func @left(%c: tensor<2x16x8xf32> {tf.aliasing_output = 0 : i32}, %v: tensor<8xf32> {tf.aliasing_output = 1 : i32}, %t: tensor<4x4xf32> {tf.aliasing_output = 2 : i32}, %k: tensor<2x1x8xf32>, %p: tensor<i64>, %flag: tensor<i1>) -> (tensor<2x16x8xf32>, tensor<8xf32>, tensor<4x4xf32>) {
  %z = stablehlo.constant dense<0> : tensor<i64>
  %u = stablehlo.dynamic_update_slice %c, %k, %z, %p, %z : (tensor<2x16x8xf32>, tensor<2x1x8xf32>, tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<2x16x8xf32>
  %nv = stablehlo.exponential %v : tensor<8xf32>
  %e = stablehlo.exponential %t : tensor<4x4xf32>
  %nt = stablehlo.select %flag, %e, %t : (tensor<i1>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %u, %nv, %nt : tensor<2x16x8xf32>, tensor<8xf32>, tensor<4x4xf32>
}

// A 1x1 convolution's weight that outofplace-squeeze-state passes as [32, 16] and returns
// through a reshape of the [32, 16, 1, 1] update: flat too, the update returned as it is
// computed (XLA:CPU copied the weight and its momentum on every call through the
// bitcasts).
// CHECK-LABEL: func.func @squeezed(
// CHECK-SAME:    %[[W:[^:]*]]: tensor<512xf32> {tf.aliasing_output = 0 : i32}
// CHECK-SAME:    -> tensor<512xf32>
// CHECK:         %[[G:.*]] = stablehlo.reshape %{{.*}} : (tensor<32x16x1x1xf32>) -> tensor<512xf32>
// CHECK-NEXT:    %[[N:.*]] = stablehlo.subtract %[[W]], %[[G]] : tensor<512xf32>
// CHECK-NEXT:    return %[[N]] : tensor<512xf32>
func.func @squeezed(%w: tensor<32x16xf32> {tf.aliasing_output = 0 : i32}, %g: tensor<32x16x1x1xf32>) -> tensor<32x16xf32> {
  %0 = stablehlo.reshape %w : (tensor<32x16xf32>) -> tensor<32x16x1x1xf32>
  %1 = stablehlo.subtract %0, %g : tensor<32x16x1x1xf32>
  %2 = stablehlo.reshape %1 : (tensor<32x16x1x1xf32>) -> tensor<32x16xf32>
  return %2 : tensor<32x16xf32>
}
