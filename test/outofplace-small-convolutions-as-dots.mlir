// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-small-convolutions-as-dots)' \
// RUN:   | FileCheck %s

// A 3x3 kernel over a 2x2 input (ResNet's last stage): padded, one slice per window
// position, one dot with the kernel as [output, input, window], back to NCHW.
// CHECK-LABEL: func.func @window_larger_than_input(
// CHECK-SAME:    %[[X:.*]]: tensor<8x5x2x2xf32>, %[[W:.*]]: tensor<6x5x3x3xf32>
// CHECK:         %[[Z:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK:         %[[P:.*]] = stablehlo.pad %[[X]], %[[Z]], low = [0, 0, 1, 1], high = [0, 0, 1, 1], interior = [0, 0, 0, 0] : (tensor<8x5x2x2xf32>, tensor<f32>) -> tensor<8x5x4x4xf32>
// CHECK:         stablehlo.slice %[[P]] [0:8, 0:5, 0:2, 0:2]
// CHECK:         stablehlo.slice %[[P]] [0:8, 0:5, 2:4, 2:4]
// CHECK:         %[[C:.*]] = stablehlo.concatenate {{.*}}, dim = 4 : ({{.*}}) -> tensor<8x5x2x2x9xf32>
// CHECK:         %[[K:.*]] = stablehlo.reshape %[[W]] : (tensor<6x5x3x3xf32>) -> tensor<6x5x9xf32>
// CHECK:         %[[D:.*]] = stablehlo.dot_general %[[C]], %[[K]], contracting_dims = [1, 4] x [1, 2] : (tensor<8x5x2x2x9xf32>, tensor<6x5x9xf32>) -> tensor<8x2x2x6xf32>
// CHECK:         %[[Y:.*]] = stablehlo.transpose %[[D]], dims = [0, 3, 1, 2] : (tensor<8x2x2x6xf32>) -> tensor<8x6x2x2xf32>
// CHECK-NOT:     stablehlo.convolution
// CHECK:         return %[[Y]]
func.func @window_larger_than_input(%x: tensor<8x5x2x2xf32>, %w: tensor<6x5x3x3xf32>) -> tensor<8x6x2x2xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x5x2x2xf32>, tensor<6x5x3x3xf32>) -> tensor<8x6x2x2xf32>
  return %0 : tensor<8x6x2x2xf32>
}

// Strides and kernel dilations: the slices' strides and offsets.
// CHECK-LABEL: func.func @strided_dilated(
// CHECK:         stablehlo.slice %{{.*}} [0:1, 0:2, 0:3:2]
// CHECK:         stablehlo.slice %{{.*}} [0:1, 0:2, 2:5:2]
// CHECK:         stablehlo.slice %{{.*}} [0:1, 0:2, 4:7:2]
// CHECK:         stablehlo.dot_general
// CHECK-NOT:     stablehlo.convolution
func.func @strided_dilated(%x: tensor<1x2x3xf32>, %w: tensor<4x2x3xf32>) -> tensor<1x4x2xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {stride = [2], pad = [[2, 2]], rhs_dilate = [2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x2x3xf32>, tensor<4x2x3xf32>) -> tensor<1x4x2xf32>
  return %0 : tensor<1x4x2xf32>
}

// The window fits the input, groups, an input dilation: left to XLA's convolution.
// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-3: stablehlo.convolution
func.func @kept(%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x3x3xf32>, %g: tensor<4x2x3x3xf32>, %s: tensor<1x4x2x2xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x5x5xf32>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>
  %1 = stablehlo.convolution(%x, %g) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<1x4x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x8x8xf32>
  %2 = stablehlo.convolution(%s, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[2, 2], [2, 2]], lhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x2x2xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x5x5xf32>
  return %0, %1, %2 : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x5x5xf32>
}
