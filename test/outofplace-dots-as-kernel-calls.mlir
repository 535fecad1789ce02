// RUN: outofplace-opt %s --split-input-file --pass-pipeline='builtin.module(outofplace-dots-as-kernel-calls)' \
// RUN:   | FileCheck %s

// A batch-1 `nn.Linear` as the program holds its weight ([N, K], contracted on its second
// dimension): eager's aten::linear on the operands as they are.
// CHECK-LABEL: func.func @linear(
// CHECK:         %[[Y:.*]] = stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      backend_config = {outofplace.op = "aten::linear.out", outofplace.operands = array<i64: 0, 1>, outofplace.out.3 = 0 : i64, outofplace.results = array<i64: -1>, outofplace.tensors = array<i64: 0, 1>}
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
// CHECK-SAME:      outofplace.op = "aten::matmul.out"
// CHECK-SAME:      : (tensor<4x1024xf64>, tensor<1024x512xf64>) -> tensor<4x512xf64>
func.func @matmul(%x: tensor<4x1024xf64>, %w: tensor<1024x512xf64>) -> tensor<4x512xf64> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<4x1024xf64>, tensor<1024x512xf64>) -> tensor<4x512xf64>
  return %0 : tensor<4x512xf64>
}

// A weight's gradient, g.T @ x (both contracted on their first dimension): aten::matmul of
// g read as [N, M] (its transpose, a view) and x as it is.
// CHECK-LABEL: func.func @weight_gradient(
// CHECK:         stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      outofplace.view.0 = array<i64: 0, 1024, 512, 1, 1024>}
// CHECK-SAME:      : (tensor<512x1024xf32>, tensor<512x768xf32>) -> tensor<1024x768xf32>
// CHECK-NEXT:    return
func.func @weight_gradient(%g: tensor<512x1024xf32>, %x: tensor<512x768xf32>) -> tensor<1024x768xf32> {
  %0 = stablehlo.dot_general %g, %x, contracting_dims = [0] x [0] : (tensor<512x1024xf32>, tensor<512x768xf32>) -> tensor<1024x768xf32>
  return %0 : tensor<1024x768xf32>
}

// Attention's scores, q @ k.T over [heads, positions, head dim] with the heads batched:
// aten::matmul of q as it is and k read as [heads, head dim, positions] (a view of its
// buffer: offset 0, sizes, strides).
// CHECK-LABEL: func.func @scores(
// CHECK:         stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      outofplace.op = "aten::matmul.out", outofplace.operands = array<i64: 0, 1>, outofplace.out.2 = 0 : i64, outofplace.results = array<i64: -1>, outofplace.tensors = array<i64: 0, 1>, outofplace.view.1 = array<i64: 0, 12, 64, 256, 16384, 1, 64>}
// CHECK-SAME:      : (tensor<12x8x64xf32>, tensor<12x256x64xf32>) -> tensor<12x8x256xf32>
func.func @scores(%q: tensor<12x8x64xf32>, %k: tensor<12x256x64xf32>) -> tensor<12x8x256xf32> {
  %0 = stablehlo.dot_general %q, %k, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<12x8x64xf32>, tensor<12x256x64xf32>) -> tensor<12x8x256xf32>
  return %0 : tensor<12x8x256xf32>
}

// Batch-1 attention after outofplace-squeeze-state (under MIN_MULTIPLY_ADDS, called in
// this module, which calls eager's kernels anyway): the query [heads, head dim] has no
// free dimension, nor the weights [heads, positions] of `p @ v`. Each is read with a unit
// one (size 1, in the view), matmul's result [heads, 1, N] reshaped to the dot's.
// CHECK-LABEL: func.func @decode(
// CHECK:         %[[S:.*]] = stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      outofplace.view.0 = array<i64: 0, 32, 1, 64, 64, 1, 1>, outofplace.view.1 = array<i64: 0, 32, 64, 256, 16384, 1, 64>}
// CHECK-SAME:      : (tensor<32x64xf32>, tensor<32x256x64xf32>) -> tensor<32x1x256xf32>
// CHECK-NEXT:    %[[R:.*]] = stablehlo.reshape %[[S]] : (tensor<32x1x256xf32>) -> tensor<32x256xf32>
// CHECK:         %[[O:.*]] = stablehlo.custom_call @"aten::matmul"(%[[R]], %arg2)
// CHECK-SAME:      outofplace.view.0 = array<i64: 0, 32, 1, 256, 256, 1, 1>}
// CHECK-SAME:      : (tensor<32x256xf32>, tensor<32x256x64xf32>) -> tensor<32x1x64xf32>
// CHECK-NEXT:    stablehlo.reshape %[[O]] : (tensor<32x1x64xf32>) -> tensor<32x64xf32>
func.func @decode(%q: tensor<32x64xf32>, %k: tensor<32x256x64xf32>, %v: tensor<32x256x64xf32>) -> tensor<32x64xf32> {
  %0 = stablehlo.dot_general %q, %k, batching_dims = [0] x [0], contracting_dims = [1] x [2] : (tensor<32x64xf32>, tensor<32x256x64xf32>) -> tensor<32x256xf32>
  %1 = stablehlo.dot_general %0, %v, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<32x256xf32>, tensor<32x256x64xf32>) -> tensor<32x64xf32>
  return %1 : tensor<32x64xf32>
}

// -----

// Left to XLA, in a module calling no eager kernel: a small dot (under
// MIN_MULTIPLY_ADDS), an integer one, one whose lhs
// contracts a dimension other than its last without batch dimensions (a weight's
// gradient, x.T @ g), and one with two contracting dimensions.
// CHECK-LABEL: func.func @left(
// CHECK-NOT:     custom_call
// CHECK-COUNT-3: stablehlo.dot_general
func.func @left(%a: tensor<1x256xf32>, %b: tensor<256x256xf32>, %i: tensor<64x1024xi32>, %j: tensor<1024x64xi32>, %u: tensor<8x64x64xf32>, %v: tensor<8x64x64xf32>) -> (tensor<1x256xf32>, tensor<64x64xi32>, tensor<f32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<1x256xf32>, tensor<256x256xf32>) -> tensor<1x256xf32>
  %1 = stablehlo.dot_general %i, %j, contracting_dims = [1] x [0] : (tensor<64x1024xi32>, tensor<1024x64xi32>) -> tensor<64x64xi32>
  %3 = stablehlo.dot_general %u, %v, contracting_dims = [0, 1, 2] x [0, 1, 2] : (tensor<8x64x64xf32>, tensor<8x64x64xf32>) -> tensor<f32>
  return %0, %1, %3 : tensor<1x256xf32>, tensor<64x64xi32>, tensor<f32>
}

// -----

// In a module calling eager's kernels anyway (a large dot), a dot of at least
// MIN_MULTIPLY_ADDS_AT_HOME is eager's too.
// CHECK-LABEL: func.func @at_home(
// CHECK-COUNT-2: stablehlo.custom_call @"aten::matmul"
// CHECK-NOT:     stablehlo.dot_general
func.func @at_home(%x: tensor<1x1024xf32>, %w: tensor<1024x1024xf32>, %a: tensor<1x256xf32>, %b: tensor<256x256xf32>) -> (tensor<1x1024xf32>, tensor<1x256xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<1x1024xf32>, tensor<1024x1024xf32>) -> tensor<1x1024xf32>
  %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<1x256xf32>, tensor<256x256xf32>) -> tensor<1x256xf32>
  return %0, %1 : tensor<1x1024xf32>, tensor<1x256xf32>
}

// -----

// Grouped-query attention: the keys repeated to every query head (`repeat_kv`: a
// broadcast of [2, 1, 256, 64] to [2, 4, 256, 64], merged to 8 heads) are read where
// they are (the cache itself, through the reshape that gave it the unit dimension), the repeated dimension stride 0, the queries' 8 heads split alike into
// (2, 4); matmul's [2, 4, 1, 256] reshaped to the dot's [8, 1, 256]. No broadcast left.
// CHECK-LABEL: func.func @grouped(
// CHECK:         %[[S:.*]] = stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      outofplace.view.0 = array<i64: 0, 2, 4, 1, 64, 256, 64, 1, 1>, outofplace.view.1 = array<i64: 0, 2, 4, 64, 256, 16384, 0, 1, 64>}
// CHECK-SAME:      : (tensor<8x1x64xf32>, tensor<2x256x64xf32>) -> tensor<2x4x1x256xf32>
// CHECK-NEXT:    stablehlo.reshape %[[S]] : (tensor<2x4x1x256xf32>) -> tensor<8x1x256xf32>
// CHECK-NOT:     stablehlo.broadcast_in_dim
func.func @grouped(%q: tensor<8x1x64xf32>, %k: tensor<2x256x64xf32>, %big: tensor<1x2048xf32>, %w: tensor<2048x1024xf32>) -> (tensor<8x1x256xf32>, tensor<1x1024xf32>) {
  %0 = stablehlo.reshape %k : (tensor<2x256x64xf32>) -> tensor<2x1x256x64xf32>
  %1 = stablehlo.broadcast_in_dim %0, dims = [0, 1, 2, 3] : (tensor<2x1x256x64xf32>) -> tensor<2x4x256x64xf32>
  %2 = stablehlo.reshape %1 : (tensor<2x4x256x64xf32>) -> tensor<8x256x64xf32>
  %3 = stablehlo.dot_general %q, %2, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<8x1x64xf32>, tensor<8x256x64xf32>) -> tensor<8x1x256xf32>
  %4 = stablehlo.dot_general %big, %w, contracting_dims = [1] x [0] : (tensor<1x2048xf32>, tensor<2048x1024xf32>) -> tensor<1x1024xf32>
  return %3, %4 : tensor<8x1x256xf32>, tensor<1x1024xf32>
}
