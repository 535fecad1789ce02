// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-dots-as-kernel-calls)' \
// RUN:   | FileCheck %s

// A batch-1 `nn.Linear` as the program holds its weight ([N, K], contracted on its second
// dimension): eager's aten::linear on the operands as they are.
// CHECK-LABEL: func.func @linear(
// CHECK:         %[[Y:.*]] = stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      backend_config = {outofplace.op = "aten::linear", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1>, outofplace.tensors = array<i64: 0, 1>}
// CHECK-SAME:      operand_layouts = [dense<[2, 1, 0]> : tensor<3xindex>, dense<[1, 0]> : tensor<2xindex>]
// CHECK-SAME:      : (tensor<1x1x768xf32>, tensor<2048x768xf32>) -> tensor<1x1x2048xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @linear(%x: tensor<1x1x768xf32>, %w: tensor<2048x768xf32>) -> tensor<1x1x2048xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [2] x [1] : (tensor<1x1x768xf32>, tensor<2048x768xf32>) -> tensor<1x1x2048xf32>
  return %0 : tensor<1x1x2048xf32>
}

// A weight [K, N] contracted on its first dimension: aten::matmul.
// CHECK-LABEL: func.func @matmul(
// CHECK:         stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      outofplace.op = "aten::matmul"
// CHECK-SAME:      : (tensor<4x1024xf64>, tensor<1024x512xf64>) -> tensor<4x512xf64>
func.func @matmul(%x: tensor<4x1024xf64>, %w: tensor<1024x512xf64>) -> tensor<4x512xf64> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<4x1024xf64>, tensor<1024x512xf64>) -> tensor<4x512xf64>
  return %0 : tensor<4x512xf64>
}

// Attention's scores, q @ k.T over [heads, positions, head dim] with the heads batched:
// aten::matmul of q as it is and k read as [heads, head dim, positions] (a view of its
// buffer: offset 0, sizes, strides).
// CHECK-LABEL: func.func @scores(
// CHECK:         stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      outofplace.op = "aten::matmul", outofplace.operands = array<i64: 0, 1>, outofplace.results = array<i64: -1>, outofplace.tensors = array<i64: 0, 1>, outofplace.view.1 = array<i64: 0, 12, 64, 256, 16384, 1, 64>}
// CHECK-SAME:      : (tensor<12x8x64xf32>, tensor<12x256x64xf32>) -> tensor<12x8x256xf32>
func.func @scores(%q: tensor<12x8x64xf32>, %k: tensor<12x256x64xf32>) -> tensor<12x8x256xf32> {
  %0 = stablehlo.dot_general %q, %k, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<12x8x64xf32>, tensor<12x256x64xf32>) -> tensor<12x8x256xf32>
  return %0 : tensor<12x8x256xf32>
}

// Left to XLA: a small dot (under MIN_MULTIPLY_ADDS), an integer one, one whose lhs
// contracts a dimension other than its last without batch dimensions (a weight's
// gradient, x.T @ g), and one with two contracting dimensions.
// CHECK-LABEL: func.func @left(
// CHECK-NOT:     custom_call
// CHECK-COUNT-4: stablehlo.dot_general
func.func @left(%a: tensor<1x256xf32>, %b: tensor<256x256xf32>, %i: tensor<64x1024xi32>, %j: tensor<1024x64xi32>, %x: tensor<512x1024xf32>, %g: tensor<512x1024xf32>, %u: tensor<8x64x64xf32>, %v: tensor<8x64x64xf32>) -> (tensor<1x256xf32>, tensor<64x64xi32>, tensor<1024x1024xf32>, tensor<f32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<1x256xf32>, tensor<256x256xf32>) -> tensor<1x256xf32>
  %1 = stablehlo.dot_general %i, %j, contracting_dims = [1] x [0] : (tensor<64x1024xi32>, tensor<1024x64xi32>) -> tensor<64x64xi32>
  %2 = stablehlo.dot_general %x, %g, contracting_dims = [0] x [0] : (tensor<512x1024xf32>, tensor<512x1024xf32>) -> tensor<1024x1024xf32>
  %3 = stablehlo.dot_general %u, %v, contracting_dims = [0, 1, 2] x [0, 1, 2] : (tensor<8x64x64xf32>, tensor<8x64x64xf32>) -> tensor<f32>
  return %0, %1, %2, %3 : tensor<1x256xf32>, tensor<64x64xi32>, tensor<1024x1024xf32>, tensor<f32>
}
