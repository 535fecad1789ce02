// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-upstream-unsigned-integers)' \
// RUN:   | FileCheck %s

// torch-mlir compares and right-shifts unsigned integers as signed: the comparison
// becomes UNSIGNED, the shift logical; signed ones stay as they are.
// CHECK-LABEL: func.func @unsigned(
// CHECK-SAME:    %[[A:[^:]*]]: tensor<5xui8>, %[[B:[^:]*]]: tensor<5xui8>
// CHECK:         %[[GT:.*]] = stablehlo.compare GT, %[[A]], %[[B]], UNSIGNED : (tensor<5xui8>, tensor<5xui8>) -> tensor<5xi1>
// CHECK:         %[[SHIFT:.*]] = stablehlo.shift_right_logical %[[A]], %[[B]] : tensor<5xui8>
// CHECK-NOT:     shift_right_arithmetic
// CHECK:         return %[[GT]], %[[SHIFT]]
func.func @unsigned(%a: tensor<5xui8>, %b: tensor<5xui8>) -> (tensor<5xi1>, tensor<5xui8>) {
  %0 = stablehlo.compare GT, %a, %b, SIGNED : (tensor<5xui8>, tensor<5xui8>) -> tensor<5xi1>
  %1 = stablehlo.shift_right_arithmetic %a, %b : tensor<5xui8>
  return %0, %1 : tensor<5xi1>, tensor<5xui8>
}

// CHECK-LABEL: func.func @signed(
// CHECK:         stablehlo.compare GT, %{{.*}}, %{{.*}}, SIGNED : (tensor<5xi8>, tensor<5xi8>) -> tensor<5xi1>
// CHECK:         stablehlo.shift_right_arithmetic %{{.*}}, %{{.*}} : tensor<5xi8>
func.func @signed(%a: tensor<5xi8>, %b: tensor<5xi8>) -> (tensor<5xi1>, tensor<5xi8>) {
  %0 = stablehlo.compare GT, %a, %b, SIGNED : (tensor<5xi8>, tensor<5xi8>) -> tensor<5xi1>
  %1 = stablehlo.shift_right_arithmetic %a, %b : tensor<5xi8>
  return %0, %1 : tensor<5xi1>, tensor<5xi8>
}

// A reduction's init that is the signed type's least (greatest) value is the unsigned
// type's: the max of uint8 values below 128 is not 128, their min above 127 not 127.
// CHECK-LABEL: func.func @extremes(
// CHECK:         %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<ui8>
// CHECK:         stablehlo.reduce(%{{.*}} init: %[[ZERO]]) applies stablehlo.maximum
// CHECK:         %[[ONES:.*]] = stablehlo.constant dense<255> : tensor<ui8>
// CHECK:         stablehlo.reduce(%{{.*}} init: %[[ONES]]) applies stablehlo.minimum
// CHECK-NOT:     dense<128>
// CHECK-NOT:     dense<127>
func.func @extremes(%a: tensor<5xui8>) -> (tensor<ui8>, tensor<ui8>) {
  %least = stablehlo.constant dense<128> : tensor<ui8>
  %greatest = stablehlo.constant dense<127> : tensor<ui8>
  %0 = stablehlo.reduce(%a init: %least) applies stablehlo.maximum across dimensions = [0] : (tensor<5xui8>, tensor<ui8>) -> tensor<ui8>
  %1 = stablehlo.reduce(%a init: %greatest) applies stablehlo.minimum across dimensions = [0] : (tensor<5xui8>, tensor<ui8>) -> tensor<ui8>
  return %0, %1 : tensor<ui8>, tensor<ui8>
}

// Booleans: compared UNSIGNED, and a min (max) reduction starts from true (false).
// CHECK-LABEL: func.func @booleans(
// CHECK:         stablehlo.compare GT, %{{.*}}, %{{.*}}, UNSIGNED : (tensor<6xi1>, tensor<6xi1>) -> tensor<6xi1>
// CHECK:         %[[TRUE:.*]] = stablehlo.constant dense<true> : tensor<i1>
// CHECK:         stablehlo.reduce(%{{.*}} init: %[[TRUE]]) applies stablehlo.minimum
// CHECK-NOT:     dense<false>
func.func @booleans(%a: tensor<6xi1>, %b: tensor<6xi1>) -> (tensor<6xi1>, tensor<i1>) {
  %false = stablehlo.constant dense<false> : tensor<i1>
  %0 = stablehlo.compare GT, %a, %b, SIGNED : (tensor<6xi1>, tensor<6xi1>) -> tensor<6xi1>
  %1 = stablehlo.reduce(%a init: %false) applies stablehlo.minimum across dimensions = [0] : (tensor<6xi1>, tensor<i1>) -> tensor<i1>
  return %0, %1 : tensor<6xi1>, tensor<i1>
}

// One init serving two reductions is replaced for each, and erased once.
// CHECK-LABEL: func.func @shared(
// CHECK-COUNT-2: stablehlo.reduce(%{{.*}} init: %{{.*}}) applies stablehlo.maximum
// CHECK-NOT:     dense<128>
func.func @shared(%a: tensor<5xui8>, %b: tensor<5xui8>) -> (tensor<ui8>, tensor<ui8>) {
  %least = stablehlo.constant dense<128> : tensor<ui8>
  %0 = stablehlo.reduce(%a init: %least) applies stablehlo.maximum across dimensions = [0] : (tensor<5xui8>, tensor<ui8>) -> tensor<ui8>
  %1 = stablehlo.reduce(%b init: %least) applies stablehlo.maximum across dimensions = [0] : (tensor<5xui8>, tensor<ui8>) -> tensor<ui8>
  return %0, %1 : tensor<ui8>, tensor<ui8>
}
