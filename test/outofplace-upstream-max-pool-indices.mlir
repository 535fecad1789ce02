// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-upstream-max-pool-indices)' \
// RUN:   | FileCheck %s

// torch-mlir's max pooling with indices (this is its output for a 2x2 window): from the
// init (-inf, 0), GE picks the value, EQ the lesser index: a window of -inf got index
// 0, a NaN was never the maximum. The pooling becomes one over values without NaN (a
// NaN made +inf) and int32 keys (a NaN's index made -index - 2**30, below any index),
// from (-inf, the greatest int32), with torch-mlir's body; its results read back.
// CHECK-LABEL: func.func @max_pool_with_indices(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<1x1x4x4xf32>
// CHECK:         %[[NEG_INF:.*]] = stablehlo.constant dense<0xFF800000> : tensor<f32>
// CHECK:         %[[IOTA:.*]] = stablehlo.reshape
// CHECK:         %[[NAN:.*]] = stablehlo.compare NE, %[[X]], %[[X]], FLOAT
// CHECK:         %[[INF:.*]] = stablehlo.constant dense<0x7F800000> : tensor<1x1x4x4xf32>
// CHECK:         %[[POSITION:.*]] = stablehlo.convert %[[IOTA]] : (tensor<1x1x4x4xi64>) -> tensor<1x1x4x4xi32>
// CHECK:         %[[BELOW:.*]] = stablehlo.subtract %{{.*}}, %[[POSITION]]
// CHECK:         %[[KEY:.*]] = stablehlo.select %[[NAN]], %[[BELOW]], %[[POSITION]]
// CHECK:         %[[LAST:.*]] = stablehlo.constant dense<2147483647> : tensor<i32>
// CHECK:         %[[VALUE:.*]] = stablehlo.select %[[NAN]], %[[INF]], %[[X]]
// CHECK:         %[[POOL:.*]]:2 = "stablehlo.reduce_window"(%[[VALUE]], %[[KEY]], %[[NEG_INF]], %[[LAST]])
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<f32>, %[[IA:[^:]*]]: tensor<i32>, %[[B:[^:]*]]: tensor<f32>, %[[IB:[^:]*]]: tensor<i32>):
// CHECK-NEXT:      %[[GE:.*]] = stablehlo.compare GE, %[[A]], %[[B]], FLOAT
// CHECK-NEXT:      %[[EQ:.*]] = stablehlo.compare EQ, %[[A]], %[[B]], FLOAT
// CHECK-NEXT:      %[[MAX:.*]] = stablehlo.select %[[GE]], %[[A]], %[[B]]
// CHECK-NEXT:      %[[MIN:.*]] = stablehlo.minimum %[[IA]], %[[IB]]
// CHECK-NEXT:      %[[PICKED:.*]] = stablehlo.select %[[GE]], %[[IA]], %[[IB]]
// CHECK-NEXT:      %[[INDEX:.*]] = stablehlo.select %[[EQ]], %[[MIN]], %[[PICKED]]
// CHECK-NEXT:      stablehlo.return %[[MAX]], %[[INDEX]]
// CHECK:         %[[WAS_NAN:.*]] = stablehlo.compare LT, %[[POOL]]#1, %{{.*}}, SIGNED
// CHECK:         %[[BACK:.*]] = stablehlo.subtract %{{.*}}, %[[POOL]]#1
// CHECK:         %[[WHERE:.*]] = stablehlo.select %[[WAS_NAN]], %[[BACK]], %[[POOL]]#1
// CHECK:         %[[WIDE:.*]] = stablehlo.convert %[[WHERE]] : (tensor<1x1x2x2xi32>) -> tensor<1x1x2x2xi64>
// CHECK:         %[[NAN_VALUE:.*]] = stablehlo.constant dense<0x7FC00000> : tensor<1x1x2x2xf32>
// CHECK:         %[[RESULT:.*]] = stablehlo.select %[[WAS_NAN]], %[[NAN_VALUE]], %[[POOL]]#0
// CHECK:         return %[[RESULT]], %[[WIDE]]
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
