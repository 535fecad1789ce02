// RUN: outofplace-opt %s --split-input-file --pass-pipeline='builtin.module(outofplace-transposed-kernel-operands)' \
// RUN:   | FileCheck %s

// A custom op given its experts' weights transposed (transformers' grouped_mm fallback,
// `weight.transpose(-2, -1)`): the call reads the weights' own buffer, the argument a
// view of it with the transposed sizes and the permuted strides; the transpose goes.
// CHECK-LABEL: func.func @custom_op(
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"transformers::grouped_mm_fallback"(%arg0, %arg1, %arg2)
// CHECK-SAME:      outofplace.view.1 = array<i64: 0, 8, 64, 256, 16384, 1, 64>
// CHECK-SAME:      (tensor<2x64xf32>, tensor<8x256x64xf32>, tensor<8xi32>) -> tensor<2x256xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @custom_op(%x: tensor<2x64xf32>, %w: tensor<8x256x64xf32>, %offs: tensor<8xi32>) -> tensor<2x256xf32> {
  %t = stablehlo.transpose %w, dims = [0, 2, 1] : (tensor<8x256x64xf32>) -> tensor<8x64x256xf32>
  %y = stablehlo.custom_call @"transformers::grouped_mm_fallback"(%x, %t, %offs) {api_version = 4 : i32, backend_config = {outofplace.op = "transformers::grouped_mm_fallback", outofplace.operands = array<i64: 0, 1, 2>, outofplace.results = array<i64: -1, -1, -1>, outofplace.tensors = array<i64: 0, 1, 2>}} : (tensor<2x64xf32>, tensor<8x64x256xf32>, tensor<8xi32>) -> tensor<2x256xf32>
  return %y : tensor<2x256xf32>
}

// -----

// An op kept whole (`_grouped_mm` in bfloat16): its row-major operand layouts follow.
// CHECK-LABEL: func.func @kept_whole(
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::kernel"(%arg0, %arg1, %arg2)
// CHECK-SAME:      outofplace.view.1 = array<i64: 0, 4, 8, 16, 128, 1, 8>
// CHECK-SAME:      operand_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[2, 1, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>]
// CHECK-SAME:      (tensor<2x8xbf16>, tensor<4x16x8xbf16>, tensor<4xi32>) -> tensor<2x16xbf16>
func.func @kept_whole(%x: tensor<2x8xbf16>, %w: tensor<4x16x8xbf16>, %offs: tensor<4xi32>) -> tensor<2x16xbf16> {
  %t = stablehlo.transpose %w, dims = [0, 2, 1] : (tensor<4x16x8xbf16>) -> tensor<4x8x16xbf16>
  %y = stablehlo.custom_call @"aten::kernel"(%x, %t, %offs) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::_grouped_mm", outofplace.operands = array<i64: 0, 1, 2>, outofplace.results = array<i64: -1, -1, -1>, outofplace.returns = array<i64: 0>, outofplace.tensors = array<i64: 0, 1, 2>}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[2, 1, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>], result_layouts = [dense<[1, 0]> : tensor<2xindex>]} : (tensor<2x8xbf16>, tensor<4x8x16xbf16>, tensor<4xi32>) -> tensor<2x16xbf16>
  return %y : tensor<2x16xbf16>
}

// -----

// Left as they are: an operand the call writes (its buffer is the result's), one with a
// view already, and a convolution's (its pass lays out its operands).
// CHECK-LABEL: func.func @kept(
// CHECK-COUNT-3: stablehlo.transpose
// CHECK-NOT:     stablehlo.transpose
func.func @kept(%c: tensor<4x2xf32>, %w: tensor<4x2xf32>, %x: tensor<1x3x4x4xf32>, %k: tensor<3x3x3x3xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<1x3x2x2xf32>) {
  %t = stablehlo.transpose %c, dims = [1, 0] : (tensor<4x2xf32>) -> tensor<2x4xf32>
  %a = stablehlo.custom_call @"demo::write"(%t) {api_version = 4 : i32, backend_config = {outofplace.op = "demo::write", outofplace.operands = array<i64: 0>, outofplace.results = array<i64: 0>, outofplace.tensors = array<i64: 0>}, output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>]} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %u = stablehlo.transpose %w, dims = [1, 0] : (tensor<4x2xf32>) -> tensor<2x4xf32>
  %b = stablehlo.custom_call @"demo::read"(%u) {api_version = 4 : i32, backend_config = {outofplace.op = "demo::read", outofplace.operands = array<i64: 0>, outofplace.results = array<i64: -1>, outofplace.tensors = array<i64: 0>, outofplace.view.0 = array<i64: 0, 2, 4, 4, 1>}} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %v = stablehlo.transpose %k, dims = [1, 0, 2, 3] : (tensor<3x3x3x3xf32>) -> tensor<3x3x3x3xf32>
  %y = stablehlo.custom_call @"aten::convolution"(%x, %v) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::convolution", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1, -1>, outofplace.tensors = array<i64: 0, 1>}} : (tensor<1x3x4x4xf32>, tensor<3x3x3x3xf32>) -> tensor<1x3x2x2xf32>
  return %a, %b, %y : tensor<2x4xf32>, tensor<2x4xf32>, tensor<1x3x2x2xf32>
}
