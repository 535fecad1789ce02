// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-bfloat16-state-as-bits)' \
// RUN:   | FileCheck %s

// A bfloat16 KV cache written at a runtime position by a scatter, then read by attention:
// passed, updated and returned as its bits; the new row goes in as bits, attention reads
// the updated cache's bits back.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[C:[^:]*]]: tensor<2x16x8xi16> {tf.aliasing_output = 1 : i32}
// CHECK-SAME:    %[[I:[^:]*]]: tensor<1x1xi64>, %[[K:[^:]*]]: tensor<2x1x8xbf16>
// CHECK-SAME:    -> (tensor<2x1x16xbf16>, tensor<2x16x8xi16>)
// CHECK-NEXT:    %[[K1:.*]] = stablehlo.bitcast_convert %[[K]] : (tensor<2x1x8xbf16>) -> tensor<2x1x8xi16>
// CHECK-NEXT:    %[[U:.*]] = "stablehlo.scatter"(%[[C]], %[[I]], %[[K1]])
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<i16>, %[[NEW:.*]]: tensor<i16>):
// CHECK-NEXT:      stablehlo.return %[[NEW]] : tensor<i16>
// CHECK-NEXT:    }) : (tensor<2x16x8xi16>, tensor<1x1xi64>, tensor<2x1x8xi16>) -> tensor<2x16x8xi16>
// CHECK-NEXT:    %[[U1:.*]] = stablehlo.bitcast_convert %[[U]] : (tensor<2x16x8xi16>) -> tensor<2x16x8xbf16>
// CHECK-NEXT:    %[[S:.*]] = stablehlo.dot_general %[[Q:.*]], %[[U1]]
// CHECK-NEXT:    return %[[S]], %[[U]] : tensor<2x1x16xbf16>, tensor<2x16x8xi16>
func.func @main(%q: tensor<2x1x8xbf16>, %c: tensor<2x16x8xbf16> {tf.aliasing_output = 1 : i32}, %i: tensor<1x1xi64>, %k: tensor<2x1x8xbf16>) -> (tensor<2x1x16xbf16>, tensor<2x16x8xbf16>) {
  %u = "stablehlo.scatter"(%c, %i, %k) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 2], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%old: tensor<bf16>, %new: tensor<bf16>):
    stablehlo.return %new : tensor<bf16>
  }) : (tensor<2x16x8xbf16>, tensor<1x1xi64>, tensor<2x1x8xbf16>) -> tensor<2x16x8xbf16>
  %s = stablehlo.dot_general %q, %u, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x1x8xbf16>, tensor<2x16x8xbf16>) -> tensor<2x1x16xbf16>
  return %s, %u : tensor<2x1x16xbf16>, tensor<2x16x8xbf16>
}

// A cache read before its update and updated twice (a dynamic_update_slice, then
// a reshape and a second one): the old value's reader and the value between read the
// bits back; the last update is returned as bits.
// CHECK-LABEL: func.func @twice(
// CHECK-SAME:    %[[C:[^:]*]]: tensor<4x8xi16> {tf.aliasing_output = 0 : i32}
// CHECK-SAME:    -> (tensor<32xi16>, tensor<4x8xbf16>, tensor<4x8xbf16>)
// CHECK-NEXT:    %[[OLD:.*]] = stablehlo.bitcast_convert %[[C]] : (tensor<4x8xi16>) -> tensor<4x8xbf16>
// CHECK-NEXT:    %[[R1:.*]] = stablehlo.bitcast_convert %[[R:[^ ]*]] : (tensor<1x8xbf16>) -> tensor<1x8xi16>
// CHECK-NEXT:    %[[U:.*]] = stablehlo.dynamic_update_slice %[[C]], %[[R1]], %{{.*}} : (tensor<4x8xi16>, tensor<1x8xi16>, tensor<i64>, tensor<i64>) -> tensor<4x8xi16>
// CHECK-NEXT:    %[[MID:.*]] = stablehlo.bitcast_convert %[[U]] : (tensor<4x8xi16>) -> tensor<4x8xbf16>
// CHECK-NEXT:    %[[F:.*]] = stablehlo.reshape %[[U]] : (tensor<4x8xi16>) -> tensor<32xi16>
// CHECK-NEXT:    %[[E1:.*]] = stablehlo.bitcast_convert %[[E:[^ ]*]] : (tensor<2xbf16>) -> tensor<2xi16>
// CHECK-NEXT:    %[[V:.*]] = stablehlo.dynamic_update_slice %[[F]], %[[E1]], %{{.*}} : (tensor<32xi16>, tensor<2xi16>, tensor<i64>) -> tensor<32xi16>
// CHECK-NEXT:    return %[[V]], %[[OLD]], %[[MID]] : tensor<32xi16>, tensor<4x8xbf16>, tensor<4x8xbf16>
func.func @twice(%c: tensor<4x8xbf16> {tf.aliasing_output = 0 : i32}, %r: tensor<1x8xbf16>, %e: tensor<2xbf16>, %p: tensor<i64>) -> (tensor<32xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %u = stablehlo.dynamic_update_slice %c, %r, %p, %p : (tensor<4x8xbf16>, tensor<1x8xbf16>, tensor<i64>, tensor<i64>) -> tensor<4x8xbf16>
  %f = stablehlo.reshape %u : (tensor<4x8xbf16>) -> tensor<32xbf16>
  %v = stablehlo.dynamic_update_slice %f, %e, %p : (tensor<32xbf16>, tensor<2xbf16>, tensor<i64>) -> tensor<32xbf16>
  return %v, %c, %u : tensor<32xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>
}

// Left as they are: a float32 cache, a float16 one (XLA:CPU computes float16 as it is), a
// bfloat16 state scattered with an add (index_add_: computed in floats), one computed
// elementwise, and one only reshaped.
// CHECK-LABEL: func.func @left(
// CHECK-SAME:    tensor<4x8xf32> {tf.aliasing_output = 0 : i32}
// CHECK-SAME:    tensor<4x8xf16> {tf.aliasing_output = 4 : i32}
// CHECK-SAME:    tensor<4x8xbf16> {tf.aliasing_output = 1 : i32}
// CHECK-SAME:    tensor<4x8xbf16> {tf.aliasing_output = 2 : i32}
// CHECK-SAME:    tensor<32xbf16> {tf.aliasing_output = 3 : i32}
// CHECK-NOT:     bitcast_convert
// CHECK:         return
func.func @left(%f: tensor<4x8xf32> {tf.aliasing_output = 0 : i32}, %h: tensor<4x8xf16> {tf.aliasing_output = 4 : i32}, %rh: tensor<1x8xf16>, %a: tensor<4x8xbf16> {tf.aliasing_output = 1 : i32}, %x: tensor<4x8xbf16> {tf.aliasing_output = 2 : i32}, %y: tensor<32xbf16> {tf.aliasing_output = 3 : i32}, %r: tensor<1x8xf32>, %i: tensor<1x1xi64>, %ra: tensor<1x8xbf16>, %p: tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf16>) {
  %u = stablehlo.dynamic_update_slice %f, %r, %p, %p : (tensor<4x8xf32>, tensor<1x8xf32>, tensor<i64>, tensor<i64>) -> tensor<4x8xf32>
  %s = "stablehlo.scatter"(%a, %i, %ra) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%old: tensor<bf16>, %new: tensor<bf16>):
    %sum = stablehlo.add %old, %new : tensor<bf16>
    stablehlo.return %sum : tensor<bf16>
  }) : (tensor<4x8xbf16>, tensor<1x1xi64>, tensor<1x8xbf16>) -> tensor<4x8xbf16>
  %e = stablehlo.exponential %x : tensor<4x8xbf16>
  %z = stablehlo.reshape %y : (tensor<32xbf16>) -> tensor<4x8xbf16>
  %uh = stablehlo.dynamic_update_slice %h, %rh, %p, %p : (tensor<4x8xf16>, tensor<1x8xf16>, tensor<i64>, tensor<i64>) -> tensor<4x8xf16>
  return %u, %s, %e, %z, %uh : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf16>
}

// A cache a loop carries and its body writes (a decode loop): carried as bits, the
// body's update on bits, the body's other reader reading them back; the loop's result
// is returned as bits.
// CHECK-LABEL: func.func @loop(
// CHECK-SAME:    %[[C:[^:]*]]: tensor<4x8xi16> {tf.aliasing_output = 0 : i32}
// CHECK-SAME:    -> (tensor<4x8xi16>, tensor<i64>)
// CHECK:         %[[W:.*]]:3 = stablehlo.while(%[[IC:.*]] = %[[C]], %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : tensor<4x8xi16>, tensor<i64>, tensor<1x8xbf16>
// CHECK:         do {
// CHECK-NEXT:      %[[READ:.*]] = stablehlo.bitcast_convert %[[IC]] : (tensor<4x8xi16>) -> tensor<4x8xbf16>
// CHECK-NEXT:      %[[S:.*]] = stablehlo.slice %[[READ]]
// CHECK:           %[[R1:.*]] = stablehlo.bitcast_convert %{{.*}} : (tensor<1x8xbf16>) -> tensor<1x8xi16>
// CHECK-NEXT:      %[[U:.*]] = stablehlo.dynamic_update_slice %[[IC]], %[[R1]], %{{.*}} : (tensor<4x8xi16>, tensor<1x8xi16>, tensor<i64>, tensor<i64>) -> tensor<4x8xi16>
// CHECK:           stablehlo.return %[[U]], %{{.*}}, %{{.*}} : tensor<4x8xi16>, tensor<i64>, tensor<1x8xbf16>
// CHECK:         return %[[W]]#0, %[[W]]#1 : tensor<4x8xi16>, tensor<i64>
func.func @loop(%c: tensor<4x8xbf16> {tf.aliasing_output = 0 : i32}, %r: tensor<1x8xbf16>, %n: tensor<i64>) -> (tensor<4x8xbf16>, tensor<i64>) {
  %z = stablehlo.constant dense<0> : tensor<i64>
  %w:3 = stablehlo.while(%ic = %c, %i = %z, %ir = %r) : tensor<4x8xbf16>, tensor<i64>, tensor<1x8xbf16>
   cond {
    %lt = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %s = stablehlo.slice %ic [0:1, 0:8] : (tensor<4x8xbf16>) -> tensor<1x8xbf16>
    %nr = stablehlo.add %s, %ir : tensor<1x8xbf16>
    %u = stablehlo.dynamic_update_slice %ic, %nr, %i, %z : (tensor<4x8xbf16>, tensor<1x8xbf16>, tensor<i64>, tensor<i64>) -> tensor<4x8xbf16>
    %one = stablehlo.constant dense<1> : tensor<i64>
    %ni = stablehlo.add %i, %one : tensor<i64>
    stablehlo.return %u, %ni, %nr : tensor<4x8xbf16>, tensor<i64>, tensor<1x8xbf16>
  }
  return %w#0, %w#1 : tensor<4x8xbf16>, tensor<i64>
}
