// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-kernel-results-as-state{results=at-peaks})' \
// RUN:   | FileCheck %s

// With results=at-peaks, the results kept are those alive where the most bytes are (8
// MiB each: a1, a2, a3 and g3 at the fourth call, 32 MiB), until the rest are at most
// 16 MiB alive at once: g2, alive from one call to the next beside nothing else left,
// stays XLA's temporary (as a backward pass's gradients, whose bytes XLA reuses); g1 is
// returned already.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<8x16x128x128xf32>, %[[W:[^:]*]]: tensor<16x16x3x3xf32>
// CHECK-SAME:    %{{[^:]*}}: tensor<8x16x128x128xf32> {outofplace.temporary, tf.aliasing_output = 1 : i32}
// CHECK-SAME:    %{{[^:]*}}: tensor<8x16x128x128xf32> {outofplace.temporary, tf.aliasing_output = 2 : i32}
// CHECK-SAME:    %{{[^:]*}}: tensor<8x16x128x128xf32> {outofplace.temporary, tf.aliasing_output = 3 : i32}
// CHECK-SAME:    %{{[^:]*}}: tensor<8x16x128x128xf32> {outofplace.temporary, tf.aliasing_output = 4 : i32})
// CHECK:         %[[A1:.*]] = stablehlo.custom_call @"aten::convolution"(%[[X]], %[[W]])
// CHECK:         %[[A2:.*]] = stablehlo.custom_call @"aten::convolution"(%[[A1]], %[[W]])
// CHECK:         %[[A3:.*]] = stablehlo.custom_call @"aten::convolution"(%[[A2]], %[[W]])
// CHECK:         %[[G3:.*]] = stablehlo.custom_call @"aten::convolution"(%[[A3]], %[[W]])
// CHECK:         %[[G2:.*]] = stablehlo.custom_call @"aten::kernel"(%[[G3]], %[[A2]])
// CHECK:         %[[G1:.*]] = stablehlo.custom_call @"aten::kernel"(%[[G2]], %[[A1]])
// CHECK:         return %[[G1]], %[[A1]], %[[A2]], %[[A3]], %[[G3]] :
func.func @main(%x: tensor<8x16x128x128xf32>, %w: tensor<16x16x3x3xf32>) -> tensor<8x16x128x128xf32> {
  %a1 = stablehlo.custom_call @"aten::convolution"(%x, %w) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::convolution", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<8x16x128x128xf32>, tensor<16x16x3x3xf32>) -> tensor<8x16x128x128xf32>
  %a2 = stablehlo.custom_call @"aten::convolution"(%a1, %w) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::convolution", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<8x16x128x128xf32>, tensor<16x16x3x3xf32>) -> tensor<8x16x128x128xf32>
  %a3 = stablehlo.custom_call @"aten::convolution"(%a2, %w) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::convolution", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<8x16x128x128xf32>, tensor<16x16x3x3xf32>) -> tensor<8x16x128x128xf32>
  %g3 = stablehlo.custom_call @"aten::convolution"(%a3, %w) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::convolution", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<8x16x128x128xf32>, tensor<16x16x3x3xf32>) -> tensor<8x16x128x128xf32>
  %g2 = stablehlo.custom_call @"aten::kernel"(%g3, %a2) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::add.out", outofplace.operands = array<i64: 0, 1>, outofplace.out.3 = 0 : i64, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<8x16x128x128xf32>, tensor<8x16x128x128xf32>) -> tensor<8x16x128x128xf32>
  %g1 = stablehlo.custom_call @"aten::kernel"(%g2, %a1) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::add.out", outofplace.operands = array<i64: 0, 1>, outofplace.out.3 = 0 : i64, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<8x16x128x128xf32>, tensor<8x16x128x128xf32>) -> tensor<8x16x128x128xf32>
  return %g1 : tensor<8x16x128x128xf32>
}
