// RUN: outofplace-opt %s --split-input-file --pass-pipeline='builtin.module(outofplace-vector-dots-weight-first, outofplace-dots-as-kernel-calls)' \
// RUN:   | FileCheck %s

// A batch-1 `nn.Linear` ([1, 1, K] and an [N, K] weight): the weight first, the result
// reshaped to the dot's; outofplace-dots-as-kernel-calls leaves it to XLA.
// CHECK-LABEL: func.func @linear(
// CHECK-NEXT:    %[[D:.*]] = stablehlo.dot_general %arg1, %arg0, contracting_dims = [1] x [2] : (tensor<5632x2048xf32>, tensor<1x1x2048xf32>) -> tensor<5632x1x1xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.reshape %[[D]] : (tensor<5632x1x1xf32>) -> tensor<1x1x5632xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @linear(%x: tensor<1x1x2048xf32>, %w: tensor<5632x2048xf32>) -> tensor<1x1x5632xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [2] x [1] : (tensor<1x1x2048xf32>, tensor<5632x2048xf32>) -> tensor<1x1x5632xf32>
  return %0 : tensor<1x1x5632xf32>
}

// -----

// `x @ W` with W [K, N] in float64: the weight first too, contracting its first dimension.
// CHECK-LABEL: func.func @matmul(
// CHECK-NEXT:    %[[D:.*]] = stablehlo.dot_general %arg1, %arg0, contracting_dims = [0] x [1] : (tensor<2048x1024xf64>, tensor<1x2048xf64>) -> tensor<1024x1xf64>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.reshape %[[D]] : (tensor<1024x1xf64>) -> tensor<1x1024xf64>
// CHECK-NEXT:    return %[[Y]]
func.func @matmul(%x: tensor<1x2048xf64>, %w: tensor<2048x1024xf64>) -> tensor<1x1024xf64> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<1x2048xf64>, tensor<2048x1024xf64>) -> tensor<1x1024xf64>
  return %0 : tensor<1x1024xf64>
}

// -----

// Left as they are: bfloat16 (eager's kernel call: XLA:CPU's bfloat16 dot is slower), a
// batch of rows (eager's matrix product), a dot with batch dimensions (attention).
// CHECK-LABEL: func.func @others(
// CHECK-NEXT:    stablehlo.custom_call @"aten::matmul"(%arg0, %arg1)
// CHECK-SAME:      outofplace.op = "aten::linear.out"
// CHECK-SAME:      (tensor<1x1x2048xbf16>, tensor<5632x2048xbf16>) -> tensor<1x1x5632xbf16>
// CHECK-NEXT:    stablehlo.custom_call @"aten::matmul"(%arg2, %arg3)
// CHECK-SAME:      (tensor<8x2048xf32>, tensor<1024x2048xf32>) -> tensor<8x1024xf32>
// CHECK-NEXT:    stablehlo.dot_general %arg4, %arg5, batching_dims = [0] x [0], contracting_dims = [2] x [2]
// CHECK-NEXT:    return
func.func @others(%b: tensor<1x1x2048xbf16>, %wb: tensor<5632x2048xbf16>, %xs: tensor<8x2048xf32>, %w: tensor<1024x2048xf32>, %q: tensor<4x1x64xf32>, %k: tensor<4x16x64xf32>) -> (tensor<1x1x5632xbf16>, tensor<8x1024xf32>, tensor<4x1x16xf32>) {
  %0 = stablehlo.dot_general %b, %wb, contracting_dims = [2] x [1] : (tensor<1x1x2048xbf16>, tensor<5632x2048xbf16>) -> tensor<1x1x5632xbf16>
  %1 = stablehlo.dot_general %xs, %w, contracting_dims = [1] x [1] : (tensor<8x2048xf32>, tensor<1024x2048xf32>) -> tensor<8x1024xf32>
  %2 = stablehlo.dot_general %q, %k, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<4x1x64xf32>, tensor<4x16x64xf32>) -> tensor<4x1x16xf32>
  return %0, %1, %2 : tensor<1x1x5632xbf16>, tensor<8x1024xf32>, tensor<4x1x16xf32>
}
