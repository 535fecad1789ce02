// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-upstream-nan-order)' \
// RUN:   | FileCheck %s

// torch-mlir's ascending sort (`torch.sort`): `a < b` alone left NaNs anywhere. It
// becomes `a < b or (b is NaN and a is not)`: NaN last.
// CHECK-LABEL: func.func @ascending(
// CHECK:         "stablehlo.sort"{{.*}}is_stable = false
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<f32>, %[[B:[^:]*]]: tensor<f32>, %{{.*}}: tensor<i64>, %{{.*}}: tensor<i64>):
// CHECK-NEXT:      %[[LT:.*]] = stablehlo.compare LT, %[[A]], %[[B]], FLOAT
// CHECK-NEXT:      %[[B_NAN:.*]] = stablehlo.compare NE, %[[B]], %[[B]], FLOAT
// CHECK-NEXT:      %[[A_NUMBER:.*]] = stablehlo.compare EQ, %[[A]], %[[A]], FLOAT
// CHECK-NEXT:      %[[NAN_AFTER:.*]] = stablehlo.and %[[B_NAN]], %[[A_NUMBER]]
// CHECK-NEXT:      %[[BEFORE:.*]] = stablehlo.or %[[LT]], %[[NAN_AFTER]]
// CHECK-NEXT:      stablehlo.return %[[BEFORE]]
func.func @ascending(%x: tensor<2x6xf32>) -> (tensor<2x6xf32>, tensor<2x6xi64>) {
  %iota = stablehlo.iota dim = 1 : tensor<2x6xi64>
  %0:2 = "stablehlo.sort"(%x, %iota) <{dimension = 1 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %ia: tensor<i64>, %ib: tensor<i64>):
    %lt = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }) : (tensor<2x6xf32>, tensor<2x6xi64>) -> (tensor<2x6xf32>, tensor<2x6xi64>)
  return %0#0, %0#1 : tensor<2x6xf32>, tensor<2x6xi64>
}

// Descending (`topk`, `sort(descending=True)`): `a > b or (a is NaN and b is not)`.
// CHECK-LABEL: func.func @descending(
// CHECK:         ^bb0(%[[A:[^:]*]]: tensor<f64>, %[[B:[^:]*]]: tensor<f64>):
// CHECK-NEXT:      %[[GT:.*]] = stablehlo.compare GT, %[[A]], %[[B]], FLOAT
// CHECK-NEXT:      %[[A_NAN:.*]] = stablehlo.compare NE, %[[A]], %[[A]], FLOAT
// CHECK-NEXT:      %[[B_NUMBER:.*]] = stablehlo.compare EQ, %[[B]], %[[B]], FLOAT
// CHECK-NEXT:      %[[NAN_FIRST:.*]] = stablehlo.and %[[A_NAN]], %[[B_NUMBER]]
// CHECK-NEXT:      %[[BEFORE:.*]] = stablehlo.or %[[GT]], %[[NAN_FIRST]]
// CHECK-NEXT:      stablehlo.return %[[BEFORE]]
func.func @descending(%x: tensor<5xf64>) -> tensor<5xf64> {
  %0 = "stablehlo.sort"(%x) <{dimension = 0 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<f64>, %b: tensor<f64>):
    %gt = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f64>, tensor<f64>) -> tensor<i1>
    stablehlo.return %gt : tensor<i1>
  }) : (tensor<5xf64>) -> tensor<5xf64>
  return %0 : tensor<5xf64>
}

// An integer sort is left as it is.
// CHECK-LABEL: func.func @integers(
// CHECK-NEXT:    "stablehlo.sort"
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      %[[LT:.*]] = stablehlo.compare LT, %{{.*}}, %{{.*}}, SIGNED
// CHECK-NEXT:      stablehlo.return %[[LT]]
func.func @integers(%x: tensor<5xi64>) -> tensor<5xi64> {
  %0 = "stablehlo.sort"(%x) <{dimension = 0 : i64, is_stable = false}> ({
  ^bb0(%a: tensor<i64>, %b: tensor<i64>):
    %lt = stablehlo.compare LT, %a, %b, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }) : (tensor<5xi64>) -> tensor<5xi64>
  return %0 : tensor<5xi64>
}

// torch-mlir's argmax (and max.dim): GE keeps the greater value, EQ the lesser index; a
// NaN was never kept. The body becomes: a wins where greater or a NaN beside a number
// (b likewise), a tie (two NaNs, equal numbers) goes to the lesser index, the value is
// the chosen index's.
// CHECK-LABEL: func.func @argmax(
// CHECK:         stablehlo.reduce
// CHECK-NEXT:    reducer(%[[A:[^:]*]]: tensor<f32>, %[[B:[^:]*]]: tensor<f32>) (%[[IA:[^:]*]]: tensor<i64>, %[[IB:[^:]*]]: tensor<i64>)
// CHECK-NEXT:      %[[A_NAN:.*]] = stablehlo.compare NE, %[[A]], %[[A]], FLOAT
// CHECK-NEXT:      %[[B_NAN:.*]] = stablehlo.compare NE, %[[B]], %[[B]], FLOAT
// CHECK-NEXT:      %[[A_NUMBER:.*]] = stablehlo.compare EQ, %[[A]], %[[A]], FLOAT
// CHECK-NEXT:      %[[B_NUMBER:.*]] = stablehlo.compare EQ, %[[B]], %[[B]], FLOAT
// CHECK-NEXT:      %[[A_GT:.*]] = stablehlo.compare GT, %[[A]], %[[B]], FLOAT
// CHECK-NEXT:      %[[A_NAN_WINS:.*]] = stablehlo.and %[[A_NAN]], %[[B_NUMBER]]
// CHECK-NEXT:      %[[A_FIRST:.*]] = stablehlo.or %[[A_GT]], %[[A_NAN_WINS]]
// CHECK-NEXT:      %[[B_GT:.*]] = stablehlo.compare GT, %[[B]], %[[A]], FLOAT
// CHECK-NEXT:      %[[B_NAN_WINS:.*]] = stablehlo.and %[[B_NAN]], %[[A_NUMBER]]
// CHECK-NEXT:      %[[B_FIRST:.*]] = stablehlo.or %[[B_GT]], %[[B_NAN_WINS]]
// CHECK-NEXT:      %[[NOT_A:.*]] = stablehlo.not %[[A_FIRST]]
// CHECK-NEXT:      %[[NOT_B:.*]] = stablehlo.not %[[B_FIRST]]
// CHECK-NEXT:      %[[TIE:.*]] = stablehlo.and %[[NOT_A]], %[[NOT_B]]
// CHECK-NEXT:      %[[LESSER:.*]] = stablehlo.compare LT, %[[IA]], %[[IB]], SIGNED
// CHECK-NEXT:      %[[TIE_A:.*]] = stablehlo.and %[[TIE]], %[[LESSER]]
// CHECK-NEXT:      %[[TAKE_A:.*]] = stablehlo.or %[[A_FIRST]], %[[TIE_A]]
// CHECK-NEXT:      %[[VALUE:.*]] = stablehlo.select %[[TAKE_A]], %[[A]], %[[B]]
// CHECK-NEXT:      %[[INDEX:.*]] = stablehlo.select %[[TAKE_A]], %[[IA]], %[[IB]]
// CHECK-NEXT:      stablehlo.return %[[VALUE]], %[[INDEX]]
func.func @argmax(%x: tensor<1x5xf32>) -> (tensor<1xf32>, tensor<1xi64>) {
  %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %c = stablehlo.constant dense<0> : tensor<i64>
  %0 = stablehlo.iota dim = 1 : tensor<1x5xi64>
  %1:2 = stablehlo.reduce(%x init: %cst), (%0 init: %c) across dimensions = [1] : (tensor<1x5xf32>, tensor<1x5xi64>, tensor<f32>, tensor<i64>) -> (tensor<1xf32>, tensor<1xi64>)
   reducer(%arg1: tensor<f32>, %arg3: tensor<f32>) (%arg2: tensor<i64>, %arg4: tensor<i64>)  {
    %5 = stablehlo.compare GE, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %6 = stablehlo.select %5, %arg1, %arg3 : tensor<i1>, tensor<f32>
    %7 = stablehlo.compare EQ, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %8 = stablehlo.minimum %arg2, %arg4 : tensor<i64>
    %9 = stablehlo.select %5, %arg2, %arg4 : tensor<i1>, tensor<i64>
    %10 = stablehlo.select %7, %8, %9 : tensor<i1>, tensor<i64>
    stablehlo.return %6, %10 : tensor<f32>, tensor<i64>
  }
  return %1#0, %1#1 : tensor<1xf32>, tensor<1xi64>
}

// argmin's (LE) becomes the same with LT: a NaN wins a min too, as eager's.
// CHECK-LABEL: func.func @argmin(
// CHECK:         %{{.*}} = stablehlo.compare LT, %{{.*}}, %{{.*}}, FLOAT
// CHECK-NOT:     stablehlo.minimum
// CHECK:         stablehlo.return
func.func @argmin(%x: tensor<5xf32>) -> tensor<i64> {
  %cst = stablehlo.constant dense<0x7F800000> : tensor<f32>
  %c = stablehlo.constant dense<0> : tensor<i64>
  %0 = stablehlo.iota dim = 0 : tensor<5xi64>
  %1:2 = stablehlo.reduce(%x init: %cst), (%0 init: %c) across dimensions = [0] : (tensor<5xf32>, tensor<5xi64>, tensor<f32>, tensor<i64>) -> (tensor<f32>, tensor<i64>)
   reducer(%arg1: tensor<f32>, %arg3: tensor<f32>) (%arg2: tensor<i64>, %arg4: tensor<i64>)  {
    %5 = stablehlo.compare LE, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %6 = stablehlo.select %5, %arg1, %arg3 : tensor<i1>, tensor<f32>
    %7 = stablehlo.compare EQ, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %8 = stablehlo.minimum %arg2, %arg4 : tensor<i64>
    %9 = stablehlo.select %5, %arg2, %arg4 : tensor<i1>, tensor<i64>
    %10 = stablehlo.select %7, %8, %9 : tensor<i1>, tensor<i64>
    stablehlo.return %6, %10 : tensor<f32>, tensor<i64>
  }
  return %1#1 : tensor<i64>
}
