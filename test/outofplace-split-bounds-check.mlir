// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-split-bounds-check)' | FileCheck %s

// `cache[pos] = v` with check_bounds=True: main returns the flags (result 0, named by
// the module's attribute) before the written cache's new value (result 1, aliased).
// main loses the flags and their computation (the compare), its alias renumbered to 0;
// @bounds_check keeps only them, without aliases, taking only `pos` (argument 2).
// CHECK:       module {
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[C:.*]]: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %[[V:.*]]: tensor<1xf32>, %[[P:.*]]: tensor<i64>)
// CHECK-SAME:    -> tensor<4xf32>
// CHECK-NOT:     stablehlo.compare
// CHECK:         %[[U:.*]] = stablehlo.dynamic_update_slice %[[C]], %[[V]], %[[P]]
// CHECK-NEXT:    return %[[U]] : tensor<4xf32>
// CHECK-LABEL: func.func @bounds_check(
// CHECK-SAME:    %[[P2:.*]]: tensor<i64>) -> tensor<1xi1> attributes {outofplace.arguments = array<i64: 2>}
// CHECK-NOT:     stablehlo.dynamic_update_slice
// CHECK:         %[[LT:.*]] = stablehlo.compare LT, %[[P2]]
// CHECK:         %[[F:.*]] = stablehlo.reshape %[[LT]]
// CHECK-NEXT:    return %[[F]] : tensor<1xi1>
module attributes {outofplace.bounds_flags = 0 : i64} {
  func.func @main(%cache: tensor<4xf32> {tf.aliasing_output = 1 : i32}, %v: tensor<1xf32>, %pos: tensor<i64>) -> (tensor<1xi1>, tensor<4xf32>) {
    %size = stablehlo.constant dense<4> : tensor<i64>
    %lt = stablehlo.compare  LT, %pos, %size : (tensor<i64>, tensor<i64>) -> tensor<i1>
    %flags = stablehlo.reshape %lt : (tensor<i1>) -> tensor<1xi1>
    %0 = stablehlo.dynamic_update_slice %cache, %v, %pos : (tensor<4xf32>, tensor<1xf32>, tensor<i64>) -> tensor<4xf32>
    return %flags, %0 : tensor<1xi1>, tensor<4xf32>
  }
}

// -----

// Without the attribute (check_bounds not asked for): nothing changes.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    -> (tensor<1xi1>, tensor<4xf32>)
// CHECK-NOT:   @bounds_check
func.func @main(%cache: tensor<4xf32> {tf.aliasing_output = 1 : i32}, %flags: tensor<1xi1>) -> (tensor<1xi1>, tensor<4xf32>) {
  return %flags, %cache : tensor<1xi1>, tensor<4xf32>
}
