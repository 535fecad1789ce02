// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-upstream-max-pool-indices)' \
// RUN:   | FileCheck %s

// torch-mlir's max pooling with indices (this is its output for a 2x2 window): from the
// init (-inf, 0), GE picks the value, EQ the lesser index. The body becomes eager's order
// (NaN above every number, the last NaN's index; between equal numbers the lesser
// index) and the init's index the greatest int64, which no window element loses to.
// CHECK-LABEL: func.func @max_pool_with_indices(
// CHECK-DAG:     %[[NEG_INF:.*]] = stablehlo.constant dense<0xFF800000> : tensor<f32>
// CHECK-DAG:     %[[LAST:.*]] = stablehlo.constant dense<9223372036854775807> : tensor<i64>
// CHECK-NOT:     dense<0> : tensor<i64>
// CHECK:         "stablehlo.reduce_window"(%{{.*}}, %{{.*}}, %[[NEG_INF]], %[[LAST]])
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<f32>, %[[IA:[^:]*]]: tensor<i64>, %[[B:[^:]*]]: tensor<f32>, %[[IB:[^:]*]]: tensor<i64>):
// CHECK-NEXT:      %[[A_NAN:.*]] = stablehlo.compare NE, %[[A]], %[[A]], FLOAT
// CHECK-NEXT:      %[[B_NAN:.*]] = stablehlo.compare NE, %[[B]], %[[B]], FLOAT
// CHECK-NEXT:      %[[GT:.*]] = stablehlo.compare GT, %[[A]], %[[B]], FLOAT
// CHECK-NEXT:      %[[EQ:.*]] = stablehlo.compare EQ, %[[A]], %[[B]], FLOAT
// CHECK-NEXT:      %[[NOT_B_NAN:.*]] = stablehlo.not %[[B_NAN]]
// CHECK-NEXT:      %[[ONLY_A_NAN:.*]] = stablehlo.and %[[A_NAN]], %[[NOT_B_NAN]]
// CHECK-NEXT:      %[[PICK_A:.*]] = stablehlo.or %[[GT]], %[[ONLY_A_NAN]]
// CHECK-NEXT:      %[[BOTH_NAN:.*]] = stablehlo.and %[[A_NAN]], %[[B_NAN]]
// CHECK-NEXT:      %[[VALUE:.*]] = stablehlo.select %[[PICK_A]], %[[A]], %[[B]]
// CHECK-NEXT:      %[[MAX:.*]] = stablehlo.maximum %[[IA]], %[[IB]]
// CHECK-NEXT:      %[[MIN:.*]] = stablehlo.minimum %[[IA]], %[[IB]]
// CHECK-NEXT:      %[[PICKED:.*]] = stablehlo.select %[[PICK_A]], %[[IA]], %[[IB]]
// CHECK-NEXT:      %[[IF_EQUAL:.*]] = stablehlo.select %[[EQ]], %[[MIN]], %[[PICKED]]
// CHECK-NEXT:      %[[INDEX:.*]] = stablehlo.select %[[BOTH_NAN]], %[[MAX]], %[[IF_EQUAL]]
// CHECK-NEXT:      stablehlo.return %[[VALUE]], %[[INDEX]]
func.func @max_pool_with_indices(%arg0: tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>) {
  %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %c = stablehlo.constant dense<0> : tensor<i64>
  %0 = stablehlo.iota dim = 2 : tensor<1x1x16xi64>
  %1 = stablehlo.reshape %0 : (tensor<1x1x16xi64>) -> tensor<1x1x4x4xi64>
  %2:2 = "stablehlo.reduce_window"(%arg0, %1, %cst, %c) <{padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
  ^bb0(%arg1: tensor<f32>, %arg2: tensor<i64>, %arg3: tensor<f32>, %arg4: tensor<i64>):
    %3 = stablehlo.compare GE, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %4 = stablehlo.select %3, %arg1, %arg3 : tensor<i1>, tensor<f32>
    %5 = stablehlo.compare EQ, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %6 = stablehlo.minimum %arg2, %arg4 : tensor<i64>
    %7 = stablehlo.select %3, %arg2, %arg4 : tensor<i1>, tensor<i64>
    %8 = stablehlo.select %5, %6, %7 : tensor<i1>, tensor<i64>
    stablehlo.return %4, %8 : tensor<f32>, tensor<i64>
  }) : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xi64>, tensor<f32>, tensor<i64>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  return %2#0, %2#1 : tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>
}

// Another variadic reduce_window (an argmin's body, LE) is not max pooling's: unchanged.
// CHECK-LABEL: func.func @other_body(
// CHECK:         stablehlo.constant dense<0> : tensor<i64>
// CHECK:         stablehlo.compare LE
// CHECK-NOT:     stablehlo.compare NE
func.func @other_body(%arg0: tensor<1x1x4x4xf32>, %arg1: tensor<1x1x4x4xi64>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>) {
  %cst = stablehlo.constant dense<0x7F800000> : tensor<f32>
  %c = stablehlo.constant dense<0> : tensor<i64>
  %2:2 = "stablehlo.reduce_window"(%arg0, %arg1, %cst, %c) <{padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
  ^bb0(%a: tensor<f32>, %ia: tensor<i64>, %b: tensor<f32>, %ib: tensor<i64>):
    %3 = stablehlo.compare LE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %4 = stablehlo.select %3, %a, %b : tensor<i1>, tensor<f32>
    %5 = stablehlo.compare EQ, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %6 = stablehlo.minimum %ia, %ib : tensor<i64>
    %7 = stablehlo.select %3, %ia, %ib : tensor<i1>, tensor<i64>
    %8 = stablehlo.select %5, %6, %7 : tensor<i1>, tensor<i64>
    stablehlo.return %4, %8 : tensor<f32>, tensor<i64>
  }) : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xi64>, tensor<f32>, tensor<i64>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  return %2#0, %2#1 : tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>
}
