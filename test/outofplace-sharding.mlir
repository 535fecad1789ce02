// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-sharding)' | FileCheck %s

// `cache[:, pos] = k` on a mesh {dp: 2, tp: 4} with the cache split over tp at its
// first dimension (the module's attributes, written by frontend/device_mesh.py, are
// taken off). The cache and its aliased result get its HloSharding, the unnamed
// arguments and the other result {replicated}; the runtime start of the update is
// clamped to [0, 8 - 1].
// CHECK:       module attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[C:.*]]: tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}", tf.aliasing_output = 1 : i32}
// CHECK-SAME:    %[[K:.*]]: tensor<4x1xf32> {mhlo.sharding = "{replicated}"}
// CHECK-SAME:    %[[P:.*]]: tensor<i64> {mhlo.sharding = "{replicated}"}
// CHECK-SAME:    -> (tensor<f32> {mhlo.sharding = "{replicated}"}, tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"})
// CHECK-NOT:     outofplace.
// CHECK:         %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i64>
// CHECK:         %[[LOW:.*]] = stablehlo.constant dense<0> : tensor<i64>
// CHECK:         %[[HIGH:.*]] = stablehlo.constant dense<7> : tensor<i64>
// CHECK:         %[[S:.*]] = stablehlo.clamp %[[LOW]], %[[P]], %[[HIGH]] : tensor<i64>
// CHECK:         stablehlo.dynamic_update_slice %[[C]], %[[K]], %[[Z]], %[[S]]
module attributes {outofplace.mesh_axes = ["dp", "tp"], outofplace.mesh_shape = array<i64: 2, 4>, outofplace.shardings = [[["tp"], []], [], []]} {
  func.func @main(%cache: tensor<4x8xf32> {tf.aliasing_output = 1 : i32}, %k: tensor<4x1xf32>, %pos: tensor<i64>) -> (tensor<f32>, tensor<4x8xf32>) {
    %z = stablehlo.constant dense<0> : tensor<i64>
    %0 = stablehlo.dynamic_update_slice %cache, %k, %z, %pos : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<i64>, tensor<i64>) -> tensor<4x8xf32>
    %init = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %init) applies stablehlo.add across dimensions = [0, 1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<f32>
    return %1, %0 : tensor<f32>, tensor<4x8xf32>
  }
}

// -----

// The state returned twice (`return cache, cache` after a write): both results are its
// new value and get its sharding.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    -> (tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}, tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"})
module attributes {outofplace.mesh_axes = ["x"], outofplace.mesh_shape = array<i64: 2>, outofplace.shardings = [[["x"]]]} {
  func.func @main(%x: tensor<8xf32> {tf.aliasing_output = 1 : i32}) -> (tensor<8xf32>, tensor<8xf32>) {
    %0 = stablehlo.add %x, %x : tensor<8xf32>
    return %0, %0 : tensor<8xf32>, tensor<8xf32>
  }
}

// -----

// Without a mesh: nothing changes.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %{{.*}}: tensor<8xf32> {tf.aliasing_output = 0 : i32}) -> tensor<8xf32> {
// CHECK-NOT:   mhlo.
func.func @main(%x: tensor<8xf32> {tf.aliasing_output = 0 : i32}) -> tensor<8xf32> {
  return %x : tensor<8xf32>
}
