// RUN: outofplace-opt %s --split-input-file --pass-pipeline='builtin.module(outofplace-kernel-results-as-state)' \
// RUN:   | FileCheck %s

// A convolution's output (1 MiB and more, read by a later kernel call) is also returned
// through a new argument aliased to it and marked as a temporary; a written argument
// keeps its alias, and the kernel's call is left as it is.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[W:[^:]*]]: tensor<16x16x3x3xf32> {tf.aliasing_output = 1 : i32}
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x16x64x64xf32>
// CHECK-SAME:    %[[T:[^:]*]]: tensor<4x16x64x64xf32> {outofplace.temporary, tf.aliasing_output = 2 : i32})
// CHECK-SAME:    -> (tensor<4x16x64x64xf32>, tensor<16x16x3x3xf32>, tensor<4x16x64x64xf32>)
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::convolution"(%[[X]], %[[W]])
// CHECK-NEXT:    %[[Z:.*]] = stablehlo.custom_call @"aten::convolution"(%[[Y]], %[[W]])
// CHECK-NEXT:    %[[NW:.*]] = stablehlo.add %[[W]], %[[W]]
// CHECK-NEXT:    return %[[Z]], %[[NW]], %[[Y]] : tensor<4x16x64x64xf32>, tensor<16x16x3x3xf32>, tensor<4x16x64x64xf32>
func.func @main(%w: tensor<16x16x3x3xf32> {tf.aliasing_output = 1 : i32}, %x: tensor<4x16x64x64xf32>) -> (tensor<4x16x64x64xf32>, tensor<16x16x3x3xf32>) {
  %y = stablehlo.custom_call @"aten::convolution"(%x, %w) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::convolution", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<4x16x64x64xf32>, tensor<16x16x3x3xf32>) -> tensor<4x16x64x64xf32>
  %z = stablehlo.custom_call @"aten::convolution"(%y, %w) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::convolution", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<4x16x64x64xf32>, tensor<16x16x3x3xf32>) -> tensor<4x16x64x64xf32>
  %nw = stablehlo.add %w, %w : tensor<16x16x3x3xf32>
  return %z, %nw : tensor<4x16x64x64xf32>, tensor<16x16x3x3xf32>
}

// -----

// Not kept: a result under 1 MiB (batch norm's statistics), the new value of an operand
// the kernel writes in place (a running mean, `outofplace.results`), a result main
// returns already, and a custom call that is no kernel's (no `outofplace.op`).
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %{{[^:]*}}: tensor<4x16x64x64xf32>, %{{[^:]*}}: tensor<16x1024x64xf32>)
// CHECK-SAME:    -> (tensor<4x16x64x64xf32>, tensor<16xf32>, tensor<4x16x64x64xf32>)
// CHECK-NOT:     outofplace.temporary
// CHECK:         return %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x16x64x64xf32>, tensor<16xf32>, tensor<4x16x64x64xf32>
func.func @main(%x: tensor<4x16x64x64xf32>, %m: tensor<16x1024x64xf32>) -> (tensor<4x16x64x64xf32>, tensor<16xf32>, tensor<4x16x64x64xf32>) {
  %r:3 = stablehlo.custom_call @"aten::kernel"(%x, %m) {api_version = 4 : i32, backend_config = {outofplace.op = "demo::normalize", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, 2>, outofplace.tensors = array<i64: 0, 1>}, output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [2], operand_index = 1, operand_tuple_indices = []>]} : (tensor<4x16x64x64xf32>, tensor<16x1024x64xf32>) -> (tensor<4x16x64x64xf32>, tensor<16xf32>, tensor<16x1024x64xf32>)
  %o = stablehlo.custom_call @"foreign_target"(%r#0) {api_version = 4 : i32} : (tensor<4x16x64x64xf32>) -> tensor<4x16x64x64xf32>
  %s = stablehlo.add %o, %o : tensor<4x16x64x64xf32>
  return %r#0, %r#1, %s : tensor<4x16x64x64xf32>, tensor<16xf32>, tensor<4x16x64x64xf32>
}

// -----

// Not kept either: results main returns as XLA returns them, without moving a byte: a
// weight's gradient through two transposes undoing each other (`(g.T @ x).T.T`), and one
// through a reshape (a flat state). Kept twice, XLA would copy each at every call. A
// result through transposes that move its elements is kept.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[G:[^:]*]]: tensor<256x1024xf32>, %[[X:[^:]*]]: tensor<256x512xf32>, %[[T:[^:]*]]: tensor<1024x512xf32> {outofplace.temporary, tf.aliasing_output = 3 : i32})
// CHECK-SAME:    -> (tensor<1024x512xf32>, tensor<524288xf32>, tensor<512x1024xf32>, tensor<1024x512xf32>)
// CHECK:         stablehlo.custom_call @"aten::matmul"(%[[G]], %[[X]])
// CHECK:         stablehlo.custom_call @"aten::matmul"(%[[G]], %[[X]])
// CHECK:         %[[E:.*]] = stablehlo.custom_call @"aten::matmul"(%[[G]], %[[X]])
// CHECK:         return %{{.*}}, %{{.*}}, %{{.*}}, %[[E]] :
func.func @main(%g: tensor<256x1024xf32>, %x: tensor<256x512xf32>) -> (tensor<1024x512xf32>, tensor<524288xf32>, tensor<512x1024xf32>) {
  %c = stablehlo.custom_call @"aten::matmul"(%g, %x) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::matmul.out", outofplace.operands = array<i64: 0, 1>, outofplace.out.2 = 0 : i64, outofplace.results = array<i64: -1>, outofplace.tensors = array<i64: 0, 1>, outofplace.view.0 = array<i64: 0, 1024, 256, 1, 1024>}} : (tensor<256x1024xf32>, tensor<256x512xf32>) -> tensor<1024x512xf32>
  %t = stablehlo.transpose %c, dims = [1, 0] : (tensor<1024x512xf32>) -> tensor<512x1024xf32>
  %tt = stablehlo.transpose %t, dims = [1, 0] : (tensor<512x1024xf32>) -> tensor<1024x512xf32>
  %d = stablehlo.custom_call @"aten::matmul"(%g, %x) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::matmul.out", outofplace.operands = array<i64: 0, 1>, outofplace.out.2 = 0 : i64, outofplace.results = array<i64: -1>, outofplace.tensors = array<i64: 0, 1>, outofplace.view.0 = array<i64: 0, 1024, 256, 1, 1024>}} : (tensor<256x1024xf32>, tensor<256x512xf32>) -> tensor<1024x512xf32>
  %r = stablehlo.reshape %d : (tensor<1024x512xf32>) -> tensor<524288xf32>
  %e = stablehlo.custom_call @"aten::matmul"(%g, %x) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::matmul.out", outofplace.operands = array<i64: 0, 1>, outofplace.out.2 = 0 : i64, outofplace.results = array<i64: -1>, outofplace.tensors = array<i64: 0, 1>, outofplace.view.0 = array<i64: 0, 1024, 256, 1, 1024>}} : (tensor<256x1024xf32>, tensor<256x512xf32>) -> tensor<1024x512xf32>
  %et = stablehlo.transpose %e, dims = [1, 0] : (tensor<1024x512xf32>) -> tensor<512x1024xf32>
  return %tt, %r, %et : tensor<1024x512xf32>, tensor<524288xf32>, tensor<512x1024xf32>
}
