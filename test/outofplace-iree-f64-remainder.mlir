// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-f64-remainder)' \
// RUN:   | FileCheck %s

// A float64 remainder: the quotient truncated, the remainder corrected by |b| where the
// quotient was one off (a sign not the dividend's, or past |b|), a zero given the
// dividend's sign, the dividend where the divisor is infinite. (IREE called libm's fmod,
// which it cannot link.)
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[A:[^:]*]]: tensor<3xf64>, %[[B:[^:]*]]: tensor<3xf64>
// CHECK-NOT:     stablehlo.remainder
// CHECK:         %[[Q:.*]] = stablehlo.divide %[[A]], %[[B]]
// CHECK:         %[[SIGN:.*]] = stablehlo.sign %[[Q]]
// CHECK:         %[[MAGNITUDE:.*]] = stablehlo.abs %[[Q]]
// CHECK:         %[[FLOOR:.*]] = stablehlo.floor %[[MAGNITUDE]]
// CHECK:         %[[N:.*]] = stablehlo.multiply %[[SIGN]], %[[FLOOR]]
// CHECK:         %[[NB:.*]] = stablehlo.multiply %[[N]], %[[B]]
// CHECK:         %[[R:.*]] = stablehlo.subtract %[[A]], %[[NB]]
// CHECK:         %[[SIZE:.*]] = stablehlo.abs %[[B]]
// CHECK-COUNT-4: stablehlo.select
// CHECK:         %[[ZERO_R:.*]] = stablehlo.compare EQ
// CHECK:         %[[SIGNED_ZERO:.*]] = stablehlo.multiply %[[A]]
// CHECK:         %[[R2:.*]] = stablehlo.select %[[ZERO_R]], %[[SIGNED_ZERO]]
// CHECK:         %[[INFINITE:.*]] = stablehlo.compare EQ, %[[SIZE]]
// CHECK:         %[[RESULT:.*]] = stablehlo.select %{{.*}}, %[[A]], %[[R2]]
// CHECK:         %[[F32:.*]] = stablehlo.remainder %{{.*}} : tensor<3xf32>
// CHECK:         return %[[RESULT]], %[[F32]]
func.func @main(%a: tensor<3xf64>, %b: tensor<3xf64>, %c: tensor<3xf32>) -> (tensor<3xf64>, tensor<3xf32>) {
  %0 = stablehlo.remainder %a, %b : tensor<3xf64>
  %1 = stablehlo.remainder %c, %c : tensor<3xf32>
  return %0, %1 : tensor<3xf64>, tensor<3xf32>
}
