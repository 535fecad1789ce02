// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-boolean-add-as-or)' | FileCheck %s

// add of booleans (a logical or in StableHLO; IREE 3.13 adds modulo 2) becomes or;
// add of anything else stays.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[A:[^:]*]]: tensor<3xi1>, %[[B:[^:]*]]: tensor<3xi1>, %[[X:[^:]*]]: tensor<3xf32>
// CHECK:         %[[OR:.*]] = stablehlo.or %[[A]], %[[B]] : tensor<3xi1>
// CHECK:         %[[SUM:.*]] = stablehlo.add %[[X]], %[[X]] : tensor<3xf32>
// CHECK:         return %[[OR]], %[[SUM]]
func.func @main(%a: tensor<3xi1>, %b: tensor<3xi1>, %x: tensor<3xf32>) -> (tensor<3xi1>, tensor<3xf32>) {
  %0 = stablehlo.add %a, %b : tensor<3xi1>
  %1 = stablehlo.add %x, %x : tensor<3xf32>
  return %0, %1 : tensor<3xi1>, tensor<3xf32>
}
