// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-strip-returned-arguments)' | FileCheck %s

// Result 0, a reshape of x as it came, is removed and recorded ([result, argument,
// shape]); y's alias moves from result 2 to result 1.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x3xf32>, %[[Y:[^:]*]]: tensor<3xf32> {tf.aliasing_output = 1 : i32}) -> (tensor<2x3xf32>, tensor<3xf32>)
// CHECK-SAME:    attributes {outofplace.iree_returned_arguments = [array<i64: 0, 0, 6>]}
// CHECK:         %[[SUM:.*]] = stablehlo.add %[[X]], %[[X]]
// CHECK:         %[[SQUARE:.*]] = stablehlo.multiply %[[Y]], %[[Y]]
// CHECK:         return %[[SUM]], %[[SQUARE]] : tensor<2x3xf32>, tensor<3xf32>
func.func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32> {tf.aliasing_output = 2 : i32}) -> (tensor<6xf32>, tensor<2x3xf32>, tensor<3xf32>) {
  %0 = stablehlo.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  %1 = stablehlo.add %x, %x : tensor<2x3xf32>
  %2 = stablehlo.multiply %y, %y : tensor<3xf32>
  return %0, %1, %2 : tensor<6xf32>, tensor<2x3xf32>, tensor<3xf32>
}
