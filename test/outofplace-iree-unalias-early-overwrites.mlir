// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-unalias-early-overwrites)' | FileCheck %s

// x's old value is read by y = x + 1 besides its update: x loses its alias. w's only
// reader is the chain to its new value: w keeps it.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %arg0: tensor<3xf32>, %arg1: tensor<3xf32> {tf.aliasing_output = 2 : i32}
// y = x + 1; x.zero_(); return y, x   (x's old value read by y)
func.func @main(%x: tensor<3xf32> {tf.aliasing_output = 1 : i32}, %w: tensor<3xf32> {tf.aliasing_output = 2 : i32}) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %one = stablehlo.constant dense<1.000000e+00> : tensor<3xf32>
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<3xf32>
  %0 = stablehlo.add %x, %one : tensor<3xf32>
  %1 = stablehlo.multiply %w, %one : tensor<3xf32>
  return %0, %zero, %1 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}
