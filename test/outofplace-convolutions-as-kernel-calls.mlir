// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-convolutions-as-kernel-calls)' \
// RUN:   | FileCheck %s

// NCHW/OIHW, symmetric padding, a stride: the call alone, aten's arguments in
// backend_config, dense row-major operands and result.
// CHECK-LABEL: func.func @nchw(
// CHECK-SAME:    %[[X:.*]]: tensor<8x64x16x16xf32>, %[[W:.*]]: tensor<64x64x3x3xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[X]], %[[W]]) {api_version = 4 : i32, backend_config = {dilation = array<i64: 1, 1>, groups = 1 : i64, outofplace.op = "aten::convolution", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>, transposed = false}, operand_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>], result_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>]} : (tensor<8x64x16x16xf32>, tensor<64x64x3x3xf32>) -> tensor<8x64x8x8xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @nchw(%x: tensor<8x64x16x16xf32>, %w: tensor<64x64x3x3xf32>) -> tensor<8x64x8x8xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[1, 1], [1, 1]], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x64x16x16xf32>, tensor<64x64x3x3xf32>) -> tensor<8x64x8x8xf32>
  return %0 : tensor<8x64x8x8xf32>
}

// NHWC/HWIO into NCHW, asymmetric padding: aten's the symmetric part, a pad the excess;
// a kernel dilation.
// CHECK-LABEL: func.func @nhwc_asymmetric(
// CHECK-SAME:    %[[X:.*]]: tensor<16x16x16x64xf64>, %[[W:.*]]: tensor<3x3x64x32xf64>
// CHECK-NEXT:    %[[XT:.*]] = stablehlo.transpose %[[X]], dims = [0, 3, 1, 2] : (tensor<16x16x16x64xf64>) -> tensor<16x64x16x16xf64>
// CHECK-NEXT:    %[[Z:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f64>
// CHECK-NEXT:    %[[XP:.*]] = stablehlo.pad %[[XT]], %[[Z]], low = [0, 0, 0, 0], high = [0, 0, 1, 1], interior = [0, 0, 0, 0] : (tensor<16x64x16x16xf64>, tensor<f64>) -> tensor<16x64x17x17xf64>
// CHECK-NEXT:    %[[WT:.*]] = stablehlo.transpose %[[W]], dims = [3, 2, 0, 1] : (tensor<3x3x64x32xf64>) -> tensor<32x64x3x3xf64>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[XP]], %[[WT]]) {{{.*}}backend_config = {dilation = array<i64: 1, 2>, groups = 1 : i64, {{.*}}output_padding = array<i64: 0, 0>, padding = array<i64: 0, 1>, stride = array<i64: 2, 2>, transposed = false}{{.*}} : (tensor<16x64x17x17xf64>, tensor<32x64x3x3xf64>) -> tensor<16x32x8x8xf64>
// CHECK-NEXT:    return %[[Y]]
func.func @nhwc_asymmetric(%x: tensor<16x16x16x64xf64>, %w: tensor<3x3x64x32xf64>) -> tensor<16x32x8x8xf64> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[0, 1], [1, 2]], rhs_dilate = [1, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<16x16x16x64xf64>, tensor<3x3x64x32xf64>) -> tensor<16x32x8x8xf64>
  return %0 : tensor<16x32x8x8xf64>
}

// An input dilation (the input's gradient, as JAX's transpose rule makes it): aten's
// transposed convolution, its stride the dilation, the kernel [I, O / groups, ...] per
// group and reversed; padding d * (k - 1) - low = 0.
// CHECK-LABEL: func.func @transposed_grouped(
// CHECK-SAME:    %[[G:.*]]: tensor<8x64x8x8xf32>, %[[W:.*]]: tensor<3x3x32x32xf32>
// CHECK-NEXT:    %[[W0:.*]] = stablehlo.transpose %[[W]], dims = [2, 3, 0, 1] : (tensor<3x3x32x32xf32>) -> tensor<32x32x3x3xf32>
// CHECK-NEXT:    %[[W1:.*]] = stablehlo.reshape %[[W0]] : (tensor<32x32x3x3xf32>) -> tensor<2x16x32x3x3xf32>
// CHECK-NEXT:    %[[W2:.*]] = stablehlo.transpose %[[W1]], dims = [0, 2, 1, 3, 4] : (tensor<2x16x32x3x3xf32>) -> tensor<2x32x16x3x3xf32>
// CHECK-NEXT:    %[[W3:.*]] = stablehlo.reshape %[[W2]] : (tensor<2x32x16x3x3xf32>) -> tensor<64x16x3x3xf32>
// CHECK-NEXT:    %[[W4:.*]] = stablehlo.reverse %[[W3]], dims = [2, 3] : tensor<64x16x3x3xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[G]], %[[W4]]) {{{.*}}backend_config = {dilation = array<i64: 1, 1>, groups = 2 : i64, {{.*}}output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 2, 2>, transposed = true}{{.*}} : (tensor<8x64x8x8xf32>, tensor<64x16x3x3xf32>) -> tensor<8x32x17x17xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @transposed_grouped(%g: tensor<8x64x8x8xf32>, %w: tensor<3x3x32x32xf32>) -> tensor<8x32x17x17xf32> {
  %0 = stablehlo.convolution(%g, %w) dim_numbers = [b, f, 0, 1]x[0, 1, o, i]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[2, 2], [2, 2]], lhs_dilate = [2, 2], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<8x64x8x8xf32>, tensor<3x3x32x32xf32>) -> tensor<8x32x17x17xf32>
  return %0 : tensor<8x32x17x17xf32>
}

// A transposed convolution with an output padding (high - low = 1 < stride) and an
// aten padding (d * (k - 1) - low = 1); the output in the convolution's [b, 0, f], which
// the handler writes permuted (no transpose after the call).
// CHECK-LABEL: func.func @transposed_output_padding(
// CHECK:         %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"({{.*}}backend_config = {dilation = array<i64: 1>, groups = 1 : i64, {{.*}}outofplace.permute.0 = array<i64: 0, 2, 1>, {{.*}}output_padding = array<i64: 1>, padding = array<i64: 1>, stride = array<i64: 2>, transposed = true}{{.*}} -> tensor<16x64x64xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @transposed_output_padding(%g: tensor<16x64x32xf32>, %w: tensor<64x64x3xf32>) -> tensor<16x64x64xf32> {
  %0 = stablehlo.convolution(%g, %w) dim_numbers = [b, f, 0]x[o, i, 0]->[b, 0, f], window = {pad = [[1, 2]], lhs_dilate = [2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<16x64x32xf32>, tensor<64x64x3xf32>) -> tensor<16x64x64xf32>
  return %0 : tensor<16x64x64xf32>
}

// bf16, one spatial dimension.
// CHECK-LABEL: func.func @conv1d_bf16(
// CHECK-NEXT:    stablehlo.custom_call @"aten::convolution"({{.*}}operand_layouts = [dense<[2, 1, 0]> : tensor<3xindex>, dense<[2, 1, 0]> : tensor<3xindex>], result_layouts = [dense<[2, 1, 0]> : tensor<3xindex>]} : (tensor<4x64x128xbf16>, tensor<64x64x5xbf16>) -> tensor<4x64x128xbf16>
func.func @conv1d_bf16(%x: tensor<4x64x128xbf16>, %w: tensor<64x64x5xbf16>) -> tensor<4x64x128xbf16> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {pad = [[2, 2]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<4x64x128xbf16>, tensor<64x64x5xbf16>) -> tensor<4x64x128xbf16>
  return %0 : tensor<4x64x128xbf16>
}

// Left to XLA: below MIN_FLOPS, batch groups, negative padding, an input dilation with a
// stride, a transposed padding aten has not (d * (k - 1) - low < 0; an output padding
// not below the stride), integers.
// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-7: stablehlo.convolution
// CHECK-NOT:     stablehlo.custom_call
func.func @kept(%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x3x3xf32>, %big: tensor<8x64x16x16xf32>, %bw: tensor<64x32x3x3xf32>, %bg: tensor<64x8x3x3xf32>, %i: tensor<8x64x16x16xi32>, %iw: tensor<64x64x3x3xi32>) -> (tensor<1x4x8x8xf32>, tensor<32x64x14x14xf32>, tensor<8x64x14x14xf32>, tensor<8x64x17x17xf32>, tensor<8x64x35x35xf32>, tensor<8x64x35x35xf32>, tensor<8x64x14x14xi32>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x8x8xf32>
  %1 = stablehlo.convolution(%big, %bg) dim_numbers = [f, b, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {} {batch_group_count = 2 : i64, feature_group_count = 1 : i64} : (tensor<8x64x16x16xf32>, tensor<64x8x3x3xf32>) -> tensor<32x64x14x14xf32>
  %2 = stablehlo.convolution(%big, %bw) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[-1, 1], [1, -1]]} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<8x64x16x16xf32>, tensor<64x32x3x3xf32>) -> tensor<8x64x14x14xf32>
  %3 = stablehlo.convolution(%big, %bw) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[2, 2], [2, 2]], lhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<8x64x16x16xf32>, tensor<64x32x3x3xf32>) -> tensor<8x64x17x17xf32>
  %4 = stablehlo.convolution(%big, %bw) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[3, 3], [3, 3]], lhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<8x64x16x16xf32>, tensor<64x32x3x3xf32>) -> tensor<8x64x35x35xf32>
  %5 = stablehlo.convolution(%big, %bw) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[2, 4], [2, 4]], lhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<8x64x16x16xf32>, tensor<64x32x3x3xf32>) -> tensor<8x64x35x35xf32>
  %6 = stablehlo.convolution(%i, %iw) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x64x16x16xi32>, tensor<64x64x3x3xi32>) -> tensor<8x64x14x14xi32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<1x4x8x8xf32>, tensor<32x64x14x14xf32>, tensor<8x64x14x14xf32>, tensor<8x64x17x17xf32>, tensor<8x64x35x35xf32>, tensor<8x64x35x35xf32>, tensor<8x64x14x14xi32>
}

// A slice of a convolution's spatial outputs (how JAX's rule cuts a gradient out of a
// larger convolution) is folded into its padding: outputs [2, 16) of 18 start two rows
// later, low padding 2 - 2 = 0, and end 2 rows sooner, high 0: no slice left.
// CHECK-LABEL: func.func @slice_folded(
// CHECK-SAME:    %[[X:.*]]: tensor<8x64x16x16xf32>, %[[W:.*]]: tensor<64x64x3x3xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[X]], %[[W]]) {{{.*}}padding = array<i64: 0, 1>, stride = array<i64: 1, 1>, transposed = false}{{.*}} -> tensor<8x64x14x16xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @slice_folded(%x: tensor<8x64x16x16xf32>, %w: tensor<64x64x3x3xf32>) -> tensor<8x64x14x16xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[2, 2], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x64x16x16xf32>, tensor<64x64x3x3xf32>) -> tensor<8x64x18x16xf32>
  %1 = stablehlo.slice %0 [0:8, 0:64, 2:16, 0:16] : (tensor<8x64x18x16xf32>) -> tensor<8x64x14x16xf32>
  return %1 : tensor<8x64x14x16xf32>
}

// A slice that would need a negative padding cuts the input instead: outputs [4, 18)
// of 18 would start with low padding 2 - 4 = -2, so the input's first 2 rows go (low
// padding 0); the padding after them, 2, is the pad before the call (aten's is
// symmetric), the columns' 1 aten's.
// CHECK-LABEL: func.func @slice_cut(
// CHECK-SAME:    %[[X:.*]]: tensor<8x64x16x16xf32>, %[[W:.*]]: tensor<64x64x3x3xf32>
// CHECK-NEXT:    %[[C:.*]] = stablehlo.slice %[[X]] [0:8, 0:64, 2:16, 0:16]
// CHECK-NEXT:    %[[Z:.*]] = stablehlo.constant dense<0.000000e+00>
// CHECK-NEXT:    %[[P:.*]] = stablehlo.pad %[[C]], %[[Z]], low = [0, 0, 0, 0], high = [0, 0, 2, 0]
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[P]], %[[W]]) {{{.*}}padding = array<i64: 0, 1>, stride = array<i64: 1, 1>, transposed = false}{{.*}} -> tensor<8x64x14x16xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @slice_cut(%x: tensor<8x64x16x16xf32>, %w: tensor<64x64x3x3xf32>) -> tensor<8x64x14x16xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[2, 2], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x64x16x16xf32>, tensor<64x64x3x3xf32>) -> tensor<8x64x18x16xf32>
  %1 = stablehlo.slice %0 [0:8, 0:64, 4:18, 0:16] : (tensor<8x64x18x16xf32>) -> tensor<8x64x14x16xf32>
  return %1 : tensor<8x64x14x16xf32>
}

// A weight's gradient (JAX's rule: the input's batch as the features, the output's
// gradient as an 8x8 window, the stride as its dilation): aten::convolution_backward's
// weight gradient on the gradient and the input as the program holds them (the transposes
// read through), the weight only sizes, return 1; aten's [O, I, ...] is the program's
// (the call's transpose to the convolution's [I, O, ...] and the program's back cancel).
// CHECK-LABEL: func.func @weight_gradient(
// CHECK-SAME:    %[[X:.*]]: tensor<16x64x16x16xf32>, %[[G:.*]]: tensor<16x32x8x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[G]], %[[X]]) {{{.*}}backend_config = {dilation = array<i64: 1, 1>, groups = 1 : i64, outofplace.op = "aten::convolution_backward", {{.*}}outofplace.returns = array<i64: 1>, {{.*}}outofplace.unread.2 = array<i64: 32, 64, 3, 3>, output_mask = array<i64: 0, 1, 0>, output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 2, 2>, transposed = false}{{.*}} : (tensor<16x32x8x8xf32>, tensor<16x64x16x16xf32>) -> tensor<32x64x3x3xf32>
// CHECK-NOT:     outofplace.permute
// CHECK-NEXT:    return %[[Y]]
func.func @weight_gradient(%x: tensor<16x64x16x16xf32>, %g: tensor<16x32x8x8xf32>) -> tensor<32x64x3x3xf32> {
  %xt = stablehlo.transpose %x, dims = [1, 0, 2, 3] : (tensor<16x64x16x16xf32>) -> tensor<64x16x16x16xf32>
  %gt = stablehlo.transpose %g, dims = [1, 0, 2, 3] : (tensor<16x32x8x8xf32>) -> tensor<32x16x8x8xf32>
  %0 = stablehlo.convolution(%xt, %gt) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[1, 0], [1, 0]], rhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<64x16x16x16xf32>, tensor<32x16x8x8xf32>) -> tensor<64x32x3x3xf32>
  %1 = stablehlo.transpose %0, dims = [1, 0, 2, 3] : (tensor<64x32x3x3xf32>) -> tensor<32x64x3x3xf32>
  return %1 : tensor<32x64x3x3xf32>
}

// A weight's gradient whose window (the output's gradient, 2x2) is smaller than its
// result stays a convolution over the batch, aten's result [I, O, ...], which the program
// transposes to the weight's [O, I, ...]: the convolution with its operands' roles
// swapped and both reversed computes [O, I, ...] itself. That one's kernel, the input
// reversed with its features swapped, is aten's transposed convolution of the input as
// it is: only the gradient's reverse and transpose (32 KB) are XLA's, no copy of the
// 512x256x3x3 result.
// CHECK-LABEL: func.func @small_window_weight_gradient(
// CHECK-SAME:    %[[X:.*]]: tensor<8x256x2x2xf32>, %[[G:.*]]: tensor<8x512x2x2xf32>
// CHECK-NEXT:    %[[R:.*]] = stablehlo.reverse %[[G]], dims = [2, 3]
// CHECK-NEXT:    %[[T:.*]] = stablehlo.transpose %[[R]], dims = [1, 0, 2, 3] : (tensor<8x512x2x2xf32>) -> tensor<512x8x2x2xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[T]], %[[X]]) {{{.*}}outofplace.op = "aten::convolution", {{.*}}output_padding = array<i64: 0, 0>, padding = array<i64: 0, 0>, stride = array<i64: 1, 1>, transposed = true}{{.*}} : (tensor<512x8x2x2xf32>, tensor<8x256x2x2xf32>) -> tensor<512x256x3x3xf32>
// CHECK-NOT:     outofplace.permute
// CHECK-NEXT:    return %[[Y]]
func.func @small_window_weight_gradient(%x: tensor<8x256x2x2xf32>, %g: tensor<8x512x2x2xf32>) -> tensor<512x256x3x3xf32> {
  %xt = stablehlo.transpose %x, dims = [1, 0, 2, 3] : (tensor<8x256x2x2xf32>) -> tensor<256x8x2x2xf32>
  %gt = stablehlo.transpose %g, dims = [1, 0, 2, 3] : (tensor<8x512x2x2xf32>) -> tensor<512x8x2x2xf32>
  %0 = stablehlo.convolution(%xt, %gt) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<256x8x2x2xf32>, tensor<512x8x2x2xf32>) -> tensor<256x512x3x3xf32>
  %1 = stablehlo.transpose %0, dims = [1, 0, 2, 3] : (tensor<256x512x3x3xf32>) -> tensor<512x256x3x3xf32>
  return %1 : tensor<512x256x3x3xf32>
}

// The same at the forward's stride 2 (the gradient's window dilated by 2), where no
// swapped convolution computes it: the program's transpose to the weight's [O, I, ...]
// is the handler's, writing aten's [I, O, ...] permuted.
// CHECK-LABEL: func.func @strided_small_window_weight_gradient(
// CHECK:         %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"({{.*}}dilation = array<i64: 2, 2>, {{.*}}outofplace.op = "aten::convolution", {{.*}}outofplace.permute.0 = array<i64: 1, 0, 2, 3>, {{.*}} -> tensor<512x256x3x3xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @strided_small_window_weight_gradient(%x: tensor<8x256x4x4xf32>, %g: tensor<8x512x2x2xf32>) -> tensor<512x256x3x3xf32> {
  %xt = stablehlo.transpose %x, dims = [1, 0, 2, 3] : (tensor<8x256x4x4xf32>) -> tensor<256x8x4x4xf32>
  %gt = stablehlo.transpose %g, dims = [1, 0, 2, 3] : (tensor<8x512x2x2xf32>) -> tensor<512x8x2x2xf32>
  %0 = stablehlo.convolution(%xt, %gt) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {pad = [[1, 0], [1, 0]], rhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<256x8x4x4xf32>, tensor<512x8x2x2xf32>) -> tensor<256x512x3x3xf32>
  %1 = stablehlo.transpose %0, dims = [1, 0, 2, 3] : (tensor<256x512x3x3xf32>) -> tensor<512x256x3x3xf32>
  return %1 : tensor<512x256x3x3xf32>
}

// An input's gradient at stride 1 (JAX's rule: the weight's features swapped and its
// window reversed): aten's transposed convolution of stride 1 of the weight itself, no
// transpose or reverse of it left.
// CHECK-LABEL: func.func @input_gradient_stride_1(
// CHECK-SAME:    %[[G:.*]]: tensor<8x64x16x16xf32>, %[[W:.*]]: tensor<64x32x3x3xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[G]], %[[W]]) {{{.*}}output_padding = array<i64: 0, 0>, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, transposed = true}{{.*}} -> tensor<8x32x16x16xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @input_gradient_stride_1(%g: tensor<8x64x16x16xf32>, %w: tensor<64x32x3x3xf32>) -> tensor<8x32x16x16xf32> {
  %0 = stablehlo.transpose %w, dims = [2, 3, 1, 0] : (tensor<64x32x3x3xf32>) -> tensor<3x3x32x64xf32>
  %1 = stablehlo.reverse %0, dims = [0, 1] : tensor<3x3x32x64xf32>
  %2 = stablehlo.convolution(%g, %1) dim_numbers = [b, f, 0, 1]x[0, 1, o, i]->[b, f, 0, 1], window = {pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x64x16x16xf32>, tensor<3x3x32x64xf32>) -> tensor<8x32x16x16xf32>
  return %2 : tensor<8x32x16x16xf32>
}
