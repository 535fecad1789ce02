// RUN: not outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-verify-stablehlo)' 2>/dev/null | FileCheck %s
// RUN: not outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-verify-stablehlo)' 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=ERR

// Pure StableHLO (and func/module structure) passes unchanged.
// CHECK-LABEL: func.func @pure
// CHECK:         stablehlo.add %arg0, %arg0 : tensor<3xf32>
func.func @pure(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.add %x, %x : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// Anything else left by the lowering fails, naming the ops.
// ERR: lowering left 2 non-StableHLO op(s): arith.constant, tensor.empty
func.func @foreign() -> (tensor<1xi64>, tensor<2xf32>) {
  %0 = arith.constant dense<2> : tensor<1xi64>
  %1 = tensor.empty() : tensor<2xf32>
  return %0, %1 : tensor<1xi64>, tensor<2xf32>
}
