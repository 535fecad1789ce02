// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-squeeze-state)' \
// RUN:   | FileCheck %s

// A batch-1 cache written at a runtime position (index_copy_) and read by attention: the
// cache is passed, scattered into and returned without its unit dimension, the scatter's
// window dimensions renumbered; the reader gets the old type through a reshape.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[C:.*]]: tensor<4x16x8xf32> {tf.aliasing_output = 1 : i32}
// CHECK-SAME:    -> (tensor<1x4x1x16xf32>, tensor<4x16x8xf32>)
// CHECK:         %[[K:.*]] = stablehlo.reshape %{{.*}} : (tensor<1x4x1x8xf32>) -> tensor<4x1x8xf32>
// CHECK:         %[[S:.*]] = "stablehlo.scatter"(%[[C]], %{{.*}}, %[[K]])
// CHECK-SAME:      update_window_dims = [0, 2], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1
// CHECK:         }) : (tensor<4x16x8xf32>, tensor<1x1xi64>, tensor<4x1x8xf32>) -> tensor<4x16x8xf32>
// CHECK:         %[[R:.*]] = stablehlo.reshape %[[S]] : (tensor<4x16x8xf32>) -> tensor<1x4x16x8xf32>
// CHECK:         %[[D:.*]] = stablehlo.dot_general %{{.*}}, %[[R]]
// CHECK:         return %[[D]], %[[S]] : tensor<1x4x1x16xf32>, tensor<4x16x8xf32>
func.func @main(%cache: tensor<1x4x16x8xf32> {tf.aliasing_output = 1 : i32}, %k: tensor<1x4x1x8xf32>, %q: tensor<1x4x1x8xf32>, %pos: tensor<1x1xi64>) -> (tensor<1x4x1x16xf32>, tensor<1x4x16x8xf32>) {
  %0 = "stablehlo.scatter"(%cache, %pos, %k) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 1, 3], inserted_window_dims = [2], scatter_dims_to_operand_dims = [2], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<1x4x16x8xf32>, tensor<1x1xi64>, tensor<1x4x1x8xf32>) -> tensor<1x4x16x8xf32>
  %1 = stablehlo.dot_general %q, %0, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3] : (tensor<1x4x1x8xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x1x16xf32>
  return %1, %0 : tensor<1x4x1x16xf32>, tensor<1x4x16x8xf32>
}

// A chain of slice writes (dynamic_update_slice) on a [1, 8] state: both on the squeezed
// state, the starts of the unit dimension dropped.
// CHECK-LABEL: func.func @chain(
// CHECK-SAME:    %[[X:.*]]: tensor<8xf32> {tf.aliasing_output = 0 : i32}
// CHECK:         %[[U1:.*]] = stablehlo.dynamic_update_slice %[[X]], %{{.*}}, %arg2 : (tensor<8xf32>, tensor<2xf32>, tensor<i64>) -> tensor<8xf32>
// CHECK:         %[[U2:.*]] = stablehlo.dynamic_update_slice %[[U1]], %{{.*}}, %arg2 : (tensor<8xf32>, tensor<2xf32>, tensor<i64>) -> tensor<8xf32>
// CHECK-NEXT:    return %[[U2]] : tensor<8xf32>
func.func @chain(%x: tensor<1x8xf32> {tf.aliasing_output = 0 : i32}, %v: tensor<1x2xf32>, %p: tensor<i64>) -> tensor<1x8xf32> {
  %z = stablehlo.constant dense<0> : tensor<i64>
  %0 = stablehlo.dynamic_update_slice %x, %v, %z, %p : (tensor<1x8xf32>, tensor<1x2xf32>, tensor<i64>, tensor<i64>) -> tensor<1x8xf32>
  %1 = stablehlo.dynamic_update_slice %0, %v, %z, %p : (tensor<1x8xf32>, tensor<1x2xf32>, tensor<i64>, tensor<i64>) -> tensor<1x8xf32>
  return %1 : tensor<1x8xf32>
}

// A scatter indexing the unit dimension (an index there may be out of bounds, and then
// the scatter writes nothing): left as it is, on the state reshaped back.
// CHECK-LABEL: func.func @indexed_unit_dim(
// CHECK-SAME:    %[[X:.*]]: tensor<8xf32>
// CHECK:         %[[U:.*]] = stablehlo.reshape %[[X]] : (tensor<8xf32>) -> tensor<1x8xf32>
// CHECK:         "stablehlo.scatter"(%[[U]],
func.func @indexed_unit_dim(%x: tensor<1x8xf32> {tf.aliasing_output = 0 : i32}, %i: tensor<1x1xi64>, %v: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %0 = "stablehlo.scatter"(%x, %i, %v) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<1x8xf32>, tensor<1x1xi64>, tensor<1x8xf32>) -> tensor<1x8xf32>
  return %0 : tensor<1x8xf32>
}

// A state without unit dimensions, and a read-only argument with them: unchanged.
// CHECK-LABEL: func.func @nothing_to_squeeze(
// CHECK-SAME:    %{{.*}}: tensor<2x8xf32> {tf.aliasing_output = 0 : i32}, %{{.*}}: tensor<1x8xf32>)
func.func @nothing_to_squeeze(%x: tensor<2x8xf32> {tf.aliasing_output = 0 : i32}, %y: tensor<1x8xf32>) -> tensor<2x8xf32> {
  %0 = stablehlo.add %x, %x : tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// A batch-1 cache carried by a while (a decode loop) and written in its body: carried
// without its unit dimension, the update done on the squeezed value, reshaped back for
// its readers in the loop and after it.
// CHECK-LABEL: func.func @carried(
// CHECK-SAME:    %[[C:.*]]: tensor<2x8x4xf32> {tf.aliasing_output = 0 : i32},
// CHECK-SAME:    %[[K:.*]]: tensor<1x2x1x4xf32>, %[[N:.*]]: tensor<i64>) -> tensor<2x8x4xf32>
// CHECK:         %[[W:.*]]:2 = stablehlo.while(%[[I:.*]] = %{{.*}}, %[[CC:.*]] = %[[C]]) : tensor<i64>, tensor<2x8x4xf32>
// CHECK:         } do {
// CHECK:           %[[KK:.*]] = stablehlo.reshape %[[K]] : (tensor<1x2x1x4xf32>) -> tensor<2x1x4xf32>
// CHECK:           %[[U:.*]] = stablehlo.dynamic_update_slice %[[CC]], %[[KK]], %{{.*}}, %[[I]], %{{.*}} : (tensor<2x8x4xf32>, tensor<2x1x4xf32>, tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<2x8x4xf32>
// CHECK:           stablehlo.return %{{.*}}, %[[U]] : tensor<i64>, tensor<2x8x4xf32>
// CHECK:         return %[[W]]#1 : tensor<2x8x4xf32>
func.func @carried(%cache: tensor<1x2x8x4xf32> {tf.aliasing_output = 0 : i32}, %k: tensor<1x2x1x4xf32>, %n: tensor<i64>) -> tensor<1x2x8x4xf32> {
  %zero = stablehlo.constant dense<0> : tensor<i64>
  %one = stablehlo.constant dense<1> : tensor<i64>
  %0:2 = stablehlo.while(%i = %zero, %c = %cache) : tensor<i64>, tensor<1x2x8x4xf32>
  cond {
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %u = stablehlo.dynamic_update_slice %c, %k, %zero, %zero, %i, %zero : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<1x2x8x4xf32>
    %next = stablehlo.add %i, %one : tensor<i64>
    stablehlo.return %next, %u : tensor<i64>, tensor<1x2x8x4xf32>
  }
  return %0#1 : tensor<1x2x8x4xf32>
}
