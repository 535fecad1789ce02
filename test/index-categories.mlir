// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(inplace-to-stablehlo-pipeline)' | FileCheck %s

// One function per index category of docs/index-categories.md, as mutable torch IR
// (outofplace.import_torch of a one-line program), through the whole pipeline to the
// StableHLO op each category must become. Every result aliases the written argument.

// b[3] = v: one dynamic_update_slice of row 3.
// CHECK-LABEL: func.func @int(
// CHECK-SAME:    %[[B:[^:]*]]: tensor<8x4xf32> {tf.aliasing_output = 0 : i32}
// CHECK:         %[[NEW:.*]] = stablehlo.dynamic_update_slice %[[B]], %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<i64>, tensor<i64>) -> tensor<8x4xf32>
// CHECK-NOT:     stablehlo.scatter
// CHECK:         return %[[NEW]]
func.func @int(%arg0: !torch.tensor<[8,4],f32>, %arg1: !torch.vtensor<[4],f32>) {
  %int0 = torch.constant.int 0
  %int3 = torch.constant.int 3
  %0 = torch.aten.select.int %arg0, %int0, %int3 : !torch.tensor<[8,4],f32>, !torch.int, !torch.int -> !torch.tensor<[4],f32>
  %false = torch.constant.bool false
  %1 = torch.copy.to_tensor %arg1 : !torch.tensor<[4],f32>
  %2 = torch.aten.copy_ %0, %1, %false : !torch.tensor<[4],f32>, !torch.tensor<[4],f32>, !torch.bool -> !torch.tensor<[4],f32>
  return
}

// -----

// b[1:9:2] = v: one scatter at iota positions (fewer bytes than pad+select here).
// CHECK-LABEL: func.func @strided(
// CHECK:         stablehlo.iota dim = 0 : tensor<4x1xi64>
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"({{.*}}) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true}>
// CHECK:         return %[[NEW]]
func.func @strided(%arg0: !torch.tensor<[10],f32>, %arg1: !torch.vtensor<[4],f32>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int9 = torch.constant.int 9
  %int2 = torch.constant.int 2
  %0 = torch.aten.slice.Tensor %arg0, %int0, %int1, %int9, %int2 : !torch.tensor<[10],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[4],f32>
  %false = torch.constant.bool false
  %1 = torch.copy.to_tensor %arg1 : !torch.tensor<[4],f32>
  %2 = torch.aten.copy_ %0, %1, %false : !torch.tensor<[4],f32>, !torch.tensor<[4],f32>, !torch.bool -> !torch.tensor<[4],f32>
  return
}

// -----

// b[1:9:2] = v of a matrix: indices only for the strided dimension, the rows are whole
// windows (no constant index column for dimension 1: IREE rejects that form).
// CHECK-LABEL: func.func @strided_rows(
// CHECK:         %[[ROWS:.*]] = stablehlo.iota dim = 0 : tensor<4x1xi64>
// CHECK-NOT:     stablehlo.concatenate
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"({{.*}}) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true}>
// CHECK:         return %[[NEW]]
func.func @strided_rows(%arg0: !torch.tensor<[10,64],f32>, %arg1: !torch.vtensor<[4,64],f32>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int9 = torch.constant.int 9
  %int2 = torch.constant.int 2
  %0 = torch.aten.slice.Tensor %arg0, %int0, %int1, %int9, %int2 : !torch.tensor<[10,64],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[4,64],f32>
  %false = torch.constant.bool false
  %1 = torch.copy.to_tensor %arg1 : !torch.tensor<[4,64],f32>
  %2 = torch.aten.copy_ %0, %1, %false : !torch.tensor<[4,64],f32>, !torch.tensor<[4,64],f32>, !torch.bool -> !torch.tensor<[4,64],f32>
  return
}

// -----

// b[1:9:2, :, 0:8:4] = v: strided dimensions 0 and 2 are neither one nor the leading
// ones, so each element of the update gets its own index (an iota column per dimension).
// CHECK-LABEL: func.func @strided_two_dims(
// CHECK-DAG:     stablehlo.iota dim = 0 : tensor<4x32x2x1xi64>
// CHECK-DAG:     stablehlo.iota dim = 1 : tensor<4x32x2x1xi64>
// CHECK-DAG:     stablehlo.iota dim = 2 : tensor<4x32x2x1xi64>
// CHECK:         %[[IDX:.*]] = stablehlo.concatenate {{.*}}, dim = 3 : {{.*}} -> tensor<4x32x2x3xi64>
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%{{.*}}, %[[IDX]], %{{.*}}) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2], scatter_dims_to_operand_dims = [0, 1, 2], index_vector_dim = 3>, unique_indices = true}>
// CHECK:         return %[[NEW]]
func.func @strided_two_dims(%arg0: !torch.tensor<[10,32,8],f32>, %arg1: !torch.vtensor<[4,32,2],f32>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int9 = torch.constant.int 9
  %int2 = torch.constant.int 2
  %0 = torch.aten.slice.Tensor %arg0, %int0, %int1, %int9, %int2 : !torch.tensor<[10,32,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[4,32,8],f32>
  %int8 = torch.constant.int 8
  %int4 = torch.constant.int 4
  %int0_1 = torch.constant.int 0
  %1 = torch.aten.slice.Tensor %0, %int2, %int0_1, %int8, %int4 : !torch.tensor<[4,32,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[4,32,2],f32>
  %false = torch.constant.bool false
  %2 = torch.copy.to_tensor %arg1 : !torch.tensor<[4,32,2],f32>
  %3 = torch.aten.copy_ %1, %2, %false : !torch.tensor<[4,32,2],f32>, !torch.tensor<[4,32,2],f32>, !torch.bool -> !torch.tensor<[4,32,2],f32>
  return
}

// -----

// b[2:4, 1:3] = 0: a chain of two slices, one dynamic_update_slice.
// CHECK-LABEL: func.func @tuple(
// CHECK:         %[[NEW:.*]] = stablehlo.dynamic_update_slice %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x6xf32>, tensor<2x2xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>
// CHECK-NOT:     stablehlo.scatter
// CHECK:         return %[[NEW]]
func.func @tuple(%arg0: !torch.tensor<[4,6],f32>) {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %none = torch.constant.none
  %1 = torch.aten.clone %0, %none : !torch.vtensor<[],f32>, !torch.none -> !torch.vtensor<[],f32>
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %int1 = torch.constant.int 1
  %2 = torch.aten.slice.Tensor %arg0, %int0, %int2, %int4, %int1 : !torch.tensor<[4,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[2,6],f32>
  %int1_0 = torch.constant.int 1
  %int1_1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int1_2 = torch.constant.int 1
  %3 = torch.aten.slice.Tensor %2, %int1_0, %int1_1, %int3, %int1_2 : !torch.tensor<[2,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[2,2],f32>
  %4 = torch.copy.to_tensor %1 : !torch.tensor<[],f32>
  %5 = torch.aten.fill_.Tensor %3, %4 : !torch.tensor<[2,2],f32>, !torch.tensor<[],f32> -> !torch.tensor<[2,2],f32>
  return
}

// -----

// c[:, pos] = k with a 0-d pos: one dynamic_update_slice at a runtime start, wrapped
// when negative.
// CHECK-LABEL: func.func @position(
// CHECK-SAME:    %[[C:[^:]*]]: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}, %[[POS:[^:]*]]: tensor<i64>
// CHECK:         stablehlo.compare LT, %[[POS]]
// CHECK:         %[[START:.*]] = stablehlo.select %{{.*}}, %{{.*}}, %[[POS]] : tensor<i1>, tensor<i64>
// CHECK:         %[[NEW:.*]] = stablehlo.dynamic_update_slice %[[C]], %{{.*}}, %{{.*}}, %[[START]] : (tensor<4x6xf32>, tensor<4x1xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>
// CHECK-NOT:     stablehlo.scatter
// CHECK:         return %[[NEW]]
func.func @position(%arg0: !torch.tensor<[4,6],f32>, %arg1: !torch.vtensor<[],si64>, %arg2: !torch.vtensor<[4],f32>) {
  %none = torch.constant.none
  %none_0 = torch.constant.none
  %int6 = torch.constant.int 6
  %cpu = torch.constant.device "cpu"
  %int0 = torch.constant.int 0
  torch.aten._assert_tensor_metadata %arg2, %none, %none_0, %int6, %cpu, %int0 : !torch.vtensor<[4],f32>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
  %int6_1 = torch.constant.int 6
  %false = torch.constant.bool false
  %false_2 = torch.constant.bool false
  %none_3 = torch.constant.none
  %0 = torch.aten.to.dtype %arg2, %int6_1, %false, %false_2, %none_3 : !torch.vtensor<[4],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[4],f32>
  %none_4 = torch.constant.none
  %1 = torch.prim.ListConstruct %none_4, %arg1 : (!torch.none, !torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %false_5 = torch.constant.bool false
  %2 = torch.copy.to_tensor %0 : !torch.tensor<[4],f32>
  %3 = torch.aten.index_put_ %arg0, %1, %2, %false_5 : !torch.tensor<[4,6],f32>, !torch.list<optional<vtensor>>, !torch.tensor<[4],f32>, !torch.bool -> !torch.tensor<[4,6],f32>
  return
}

// -----

// b[mask] = 2.0 (rewritten before import into where + copy_): one select.
// CHECK-LABEL: func.func @mask(
// CHECK:         %[[NEW:.*]] = stablehlo.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<10xi1>, tensor<10xf32>
// CHECK-NOT:     stablehlo.scatter
// CHECK:         return %[[NEW]]
func.func @mask(%arg0: !torch.tensor<[10],f32>, %arg1: !torch.vtensor<[10],i1>) {
  %0 = torch.vtensor.literal(dense<2.000000e+00> : tensor<f32>) : !torch.vtensor<[],f32>
  %none = torch.constant.none
  %1 = torch.aten.clone %0, %none : !torch.vtensor<[],f32>, !torch.none -> !torch.vtensor<[],f32>
  %int6 = torch.constant.int 6
  %false = torch.constant.bool false
  %false_0 = torch.constant.bool false
  %none_1 = torch.constant.none
  %2 = torch.aten.to.dtype %1, %int6, %false, %false_0, %none_1 : !torch.vtensor<[],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[],f32>
  %int1 = torch.constant.int 1
  %3 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %4 = torch.aten.view %2, %3 : !torch.vtensor<[],f32>, !torch.list<int> -> !torch.vtensor<[1],f32>
  %int1_2 = torch.constant.int 1
  %5 = torch.prim.ListConstruct %int1_2 : (!torch.int) -> !torch.list<int>
  %6 = torch.aten.view %4, %5 : !torch.vtensor<[1],f32>, !torch.list<int> -> !torch.vtensor<[1],f32>
  %int10 = torch.constant.int 10
  %7 = torch.prim.ListConstruct %int10 : (!torch.int) -> !torch.list<int>
  %8 = torch.aten.view %arg1, %7 : !torch.vtensor<[10],i1>, !torch.list<int> -> !torch.vtensor<[10],i1>
  %9 = torch.aten.where.self %8, %6, %arg0 : !torch.vtensor<[10],i1>, !torch.vtensor<[1],f32>, !torch.tensor<[10],f32> -> !torch.vtensor<[10],f32>
  %false_3 = torch.constant.bool false
  %10 = torch.copy.to_tensor %9 : !torch.tensor<[10],f32>
  %11 = torch.aten.copy_ %arg0, %10, %false_3 : !torch.tensor<[10],f32>, !torch.tensor<[10],f32>, !torch.bool -> !torch.tensor<[10],f32>
  return
}

// -----

// b[:, idx] = v: one scatter whose windows are whole columns.
// CHECK-LABEL: func.func @int_tensor(
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"({{.*}}) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1>, unique_indices = false}>
// CHECK:         stablehlo.return
// CHECK:         return %[[NEW]]
func.func @int_tensor(%arg0: !torch.tensor<[4,6],f32>, %arg1: !torch.vtensor<[2],si64>, %arg2: !torch.vtensor<[4,2],f32>) {
  %int0 = torch.constant.int 0
  %0 = torch.aten.lt.Scalar %arg1, %int0 : !torch.vtensor<[2],si64>, !torch.int -> !torch.vtensor<[2],i1>
  %int6 = torch.constant.int 6
  %int1 = torch.constant.int 1
  %1 = torch.aten.add.Scalar %arg1, %int6, %int1 : !torch.vtensor<[2],si64>, !torch.int, !torch.int -> !torch.vtensor<[2],si64>
  %2 = torch.aten.where.self %0, %1, %arg1 : !torch.vtensor<[2],i1>, !torch.vtensor<[2],si64>, !torch.vtensor<[2],si64> -> !torch.vtensor<[2],si64>
  %none = torch.constant.none
  %3 = torch.prim.ListConstruct %none, %2 : (!torch.none, !torch.vtensor<[2],si64>) -> !torch.list<optional<vtensor>>
  %false = torch.constant.bool false
  %4 = torch.copy.to_tensor %arg2 : !torch.tensor<[4,2],f32>
  %5 = torch.aten.index_put_ %arg0, %3, %4, %false : !torch.tensor<[4,6],f32>, !torch.list<optional<vtensor>>, !torch.tensor<[4,2],f32>, !torch.bool -> !torch.tensor<[4,6],f32>
  return
}

// -----

// b[:, i, j] = v: the indexed dimensions trail, so one index per element of the update:
// an iota along dimension 0, the index tensors broadcast along the batch dimension.
// CHECK-LABEL: func.func @int_tensors_trailing(
// CHECK:         %[[ROWS:.*]] = stablehlo.iota dim = 0 : tensor<4x3x1xi64>
// CHECK:         %[[I:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [1] : (tensor<3xi64>) -> tensor<4x3x1xi64>
// CHECK:         %[[J:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [1] : (tensor<3xi64>) -> tensor<4x3x1xi64>
// CHECK:         %[[IDX:.*]] = stablehlo.concatenate %[[ROWS]], %[[I]], %[[J]], dim = 2
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%{{.*}}, %[[IDX]], %{{.*}}) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2], scatter_dims_to_operand_dims = [0, 1, 2], index_vector_dim = 2>, unique_indices = false}>
// CHECK:         return %[[NEW]]
func.func @int_tensors_trailing(%arg0: !torch.tensor<[4,6,5],f32>, %arg1: !torch.vtensor<[3],si64>, %arg2: !torch.vtensor<[3],si64>, %arg3: !torch.vtensor<[4,3],f32>) {
  %none = torch.constant.none
  %0 = torch.prim.ListConstruct %none, %arg1, %arg2 : (!torch.none, !torch.vtensor<[3],si64>, !torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
  %false = torch.constant.bool false
  %1 = torch.copy.to_tensor %arg3 : !torch.tensor<[4,3],f32>
  %2 = torch.aten.index_put_ %arg0, %0, %1, %false : !torch.tensor<[4,6,5],f32>, !torch.list<optional<vtensor>>, !torch.tensor<[4,3],f32>, !torch.bool -> !torch.tensor<[4,6,5],f32>
  return
}

// -----

// index_put_(accumulate=True): a scatter whose body adds, so duplicates sum.
// CHECK-LABEL: func.func @accumulate(
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"
// CHECK-NEXT:    ^bb0(%[[OLD:[^:]+]]: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
// CHECK-NEXT:      %[[SUM:.*]] = stablehlo.add %[[OLD]], %[[UPD]] : tensor<f32>
// CHECK-NEXT:      stablehlo.return %[[SUM]]
// CHECK:         return %[[NEW]]
func.func @accumulate(%arg0: !torch.tensor<[10],f32>, %arg1: !torch.vtensor<[3],si64>, %arg2: !torch.vtensor<[3],f32>) {
  %int0 = torch.constant.int 0
  %0 = torch.aten.lt.Scalar %arg1, %int0 : !torch.vtensor<[3],si64>, !torch.int -> !torch.vtensor<[3],i1>
  %int10 = torch.constant.int 10
  %int1 = torch.constant.int 1
  %1 = torch.aten.add.Scalar %arg1, %int10, %int1 : !torch.vtensor<[3],si64>, !torch.int, !torch.int -> !torch.vtensor<[3],si64>
  %2 = torch.aten.where.self %0, %1, %arg1 : !torch.vtensor<[3],i1>, !torch.vtensor<[3],si64>, !torch.vtensor<[3],si64> -> !torch.vtensor<[3],si64>
  %3 = torch.prim.ListConstruct %2 : (!torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
  %true = torch.constant.bool true
  %4 = torch.copy.to_tensor %arg2 : !torch.tensor<[3],f32>
  %5 = torch.aten.index_put_ %arg0, %3, %4, %true : !torch.tensor<[10],f32>, !torch.list<optional<vtensor>>, !torch.tensor<[3],f32>, !torch.bool -> !torch.tensor<[10],f32>
  return
}

// -----

// scatter_reduce_(amax): a scatter whose body takes the maximum.
// CHECK-LABEL: func.func @scatter_reduce(
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"
// CHECK-NEXT:    ^bb0(%[[OLD:[^:]+]]: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
// CHECK-NEXT:      %[[MAX:.*]] = stablehlo.maximum %[[OLD]], %[[UPD]] : tensor<f32>
// CHECK-NEXT:      stablehlo.return %[[MAX]]
// CHECK:         return %[[NEW]]
func.func @scatter_reduce(%arg0: !torch.tensor<[10],f32>, %arg1: !torch.vtensor<[3],si64>, %arg2: !torch.vtensor<[3],f32>) {
  %int0 = torch.constant.int 0
  %str = torch.constant.str "amax"
  %true = torch.constant.bool true
  %0 = torch.copy.to_tensor %arg1 : !torch.tensor<[3],si64>
  %1 = torch.copy.to_tensor %arg2 : !torch.tensor<[3],f32>
  %2 = torch.aten.scatter_reduce_.two %arg0, %int0, %0, %1, %str, %true : !torch.tensor<[10],f32>, !torch.int, !torch.tensor<[3],si64>, !torch.tensor<[3],f32>, !torch.str, !torch.bool -> !torch.tensor<[10],f32>
  return
}
