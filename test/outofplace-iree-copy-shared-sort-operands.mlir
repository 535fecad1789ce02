// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-copy-shared-sort-operands)' \
// RUN:   | FileCheck %s

// Two sorts share the iota of indices (and the values): each sort gets its own buffer
// of each, select(barrier(true), operand, zeros); IREE sorted the shared one in place.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x6xf32>
// CHECK:         %[[IOTA:.*]] = stablehlo.iota dim = 1
// CHECK:         %[[TRUE_X:.*]] = stablehlo.optimization_barrier %{{.*}} : tensor<2x6xi1>
// CHECK:         %[[OWN_X:.*]] = stablehlo.select %[[TRUE_X]], %[[X]], %{{.*}}
// CHECK:         %[[TRUE_I:.*]] = stablehlo.optimization_barrier %{{.*}} : tensor<2x6xi1>
// CHECK:         %[[OWN_I:.*]] = stablehlo.select %[[TRUE_I]], %[[IOTA]], %{{.*}}
// CHECK:         "stablehlo.sort"(%[[OWN_X]], %[[OWN_I]])
// CHECK:         %[[OWN_X2:.*]] = stablehlo.select %{{.*}}, %[[X]], %{{.*}}
// CHECK:         %[[OWN_I2:.*]] = stablehlo.select %{{.*}}, %[[IOTA]], %{{.*}}
// CHECK:         "stablehlo.sort"(%[[OWN_X2]], %[[OWN_I2]])
// A sort whose operands nothing else reads is left as it is.
// CHECK:         %[[NEG:.*]] = stablehlo.negate %[[X]]
// CHECK-NEXT:    %[[OTHER:.*]] = stablehlo.iota dim = 1
// CHECK-NEXT:    "stablehlo.sort"(%[[NEG]], %[[OTHER]])
func.func @main(%x: tensor<2x6xf32>) -> (tensor<2x6xi64>, tensor<2x6xi64>, tensor<2x6xi64>) {
  %iota = stablehlo.iota dim = 1 : tensor<2x6xi64>
  %0:2 = "stablehlo.sort"(%x, %iota) <{dimension = 1 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %ia: tensor<i64>, %ib: tensor<i64>):
    %lt = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }) : (tensor<2x6xf32>, tensor<2x6xi64>) -> (tensor<2x6xf32>, tensor<2x6xi64>)
  %1:2 = "stablehlo.sort"(%x, %iota) <{dimension = 1 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %ia: tensor<i64>, %ib: tensor<i64>):
    %gt = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %gt : tensor<i1>
  }) : (tensor<2x6xf32>, tensor<2x6xi64>) -> (tensor<2x6xf32>, tensor<2x6xi64>)
  %neg = stablehlo.negate %x : tensor<2x6xf32>
  %other = stablehlo.iota dim = 1 : tensor<2x6xi64>
  %2:2 = "stablehlo.sort"(%neg, %other) <{dimension = 1 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %ia: tensor<i64>, %ib: tensor<i64>):
    %lt = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }) : (tensor<2x6xf32>, tensor<2x6xi64>) -> (tensor<2x6xf32>, tensor<2x6xi64>)
  return %0#1, %1#1, %2#1 : tensor<2x6xi64>, tensor<2x6xi64>, tensor<2x6xi64>
}

