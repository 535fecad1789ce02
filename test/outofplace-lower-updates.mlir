// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-lower-updates)' 2>/dev/null | FileCheck %s
// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-lower-updates{strided=select})' 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=SELECT

// A box with unit strides is one dynamic_update_slice at constant starts.
// CHECK-LABEL: func.func @box(
// CHECK-SAME:    %[[R:[^:]*]]: tensor<4x4xf32>, %[[U:[^:]*]]: tensor<2x2xf32>
// CHECK-DAG:     %[[C2:.*]] = stablehlo.constant dense<2> : tensor<i64>
// CHECK-DAG:     %[[C1:.*]] = stablehlo.constant dense<1> : tensor<i64>
// CHECK:         %[[NEW:.*]] = stablehlo.dynamic_update_slice %[[R]], %[[U]], %[[C2]], %[[C1]]
// CHECK-NOT:     tensor.insert_slice
// CHECK:         return %[[NEW]]
func.func @box(%r: tensor<4x4xf32>, %u: tensor<2x2xf32>) -> tensor<4x4xf32> {
  %0 = tensor.insert_slice %u into %r[2, 1] [2, 2] [1, 1] : tensor<2x2xf32> into tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// An insert of the whole destination is its source.
// CHECK-LABEL: func.func @whole(
// CHECK-SAME:    %{{[^:]*}}: tensor<4xf32>, %[[U:[^:]*]]: tensor<4xf32>
// CHECK-NEXT:    return %[[U]]
func.func @whole(%r: tensor<4xf32>, %u: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.insert_slice %u into %r[0] [4] [1] : tensor<4xf32> into tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A strided box: a scatter at 1 + 2 * iota (it touches fewer bytes than pad+select), or,
// with strided=select, the update padded into place and selected by a padded mask.
// CHECK-LABEL: func.func @strided(
// CHECK-SAME:    %[[R:[^:]*]]: tensor<10xf32>, %[[U:[^:]*]]: tensor<4xf32>
// CHECK:         %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<4x1xi64>
// CHECK:         %[[TIMES:.*]] = stablehlo.multiply %[[IOTA]], %{{.*}} : tensor<4x1xi64>
// CHECK:         %[[AT:.*]] = stablehlo.add %[[TIMES]], %{{.*}} : tensor<4x1xi64>
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%[[R]], %[[AT]], %[[U]])
// CHECK-SAME:      indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true
// CHECK:           stablehlo.return %{{.*}} : tensor<f32>
// CHECK:         return %[[NEW]]
// SELECT-LABEL: func.func @strided(
// SELECT-SAME:    %[[R:[^:]*]]: tensor<10xf32>, %[[U:[^:]*]]: tensor<4xf32>
// SELECT:         %[[PADDED:.*]] = stablehlo.pad %[[U]], %{{.*}}, low = [1], high = [2], interior = [1]
// SELECT:         %[[ONES:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [] : (tensor<i1>) -> tensor<4xi1>
// SELECT:         %[[MASK:.*]] = stablehlo.pad %[[ONES]], %{{.*}}, low = [1], high = [2], interior = [1]
// SELECT:         %[[NEW:.*]] = stablehlo.select %[[MASK]], %[[PADDED]], %[[R]]
// SELECT:         return %[[NEW]]
func.func @strided(%r: tensor<10xf32>, %u: tensor<4xf32>) -> tensor<10xf32> {
  %0 = tensor.insert_slice %u into %r[1] [4] [2] : tensor<4xf32> into tensor<10xf32>
  return %0 : tensor<10xf32>
}

// -----

// c[:, p] = k with a 0-d p: one dynamic_update_slice whose start wraps a negative p.
// CHECK-LABEL: func.func @position(
// CHECK-SAME:    %[[C:[^:]*]]: !torch.vtensor<[2,4],f32>, %[[K:[^:]*]]: !torch.vtensor<[2],f32>, %[[P:[^:]*]]: !torch.vtensor<[],si64>
// CHECK:         %[[KB:.*]] = torch_c.to_builtin_tensor %[[K]]
// CHECK:         %[[COLUMN:.*]] = stablehlo.reshape %[[KB]] : (tensor<2xf32>) -> tensor<2x1xf32>
// CHECK:         %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<i64>
// CHECK:         %[[PB:.*]] = torch_c.to_builtin_tensor %[[P]]
// CHECK:         %[[NEGATIVE:.*]] = stablehlo.compare LT, %[[PB]], %{{.*}}
// CHECK:         %[[FOUR:.*]] = stablehlo.constant dense<4> : tensor<i64>
// CHECK:         %[[WRAPPED:.*]] = stablehlo.add %[[PB]], %[[FOUR]]
// CHECK:         %[[START:.*]] = stablehlo.select %[[NEGATIVE]], %[[WRAPPED]], %[[PB]]
// CHECK:         %[[CB:.*]] = torch_c.to_builtin_tensor %[[C]]
// CHECK:         %[[NEW:.*]] = stablehlo.dynamic_update_slice %[[CB]], %[[COLUMN]], %[[ZERO]], %[[START]]
// CHECK:         %[[RESULT:.*]] = torch_c.from_builtin_tensor %[[NEW]]
// CHECK-NOT:     torch.aten.index_put
// CHECK:         return %[[RESULT]]
func.func @position(%c: !torch.vtensor<[2,4],f32>, %k: !torch.vtensor<[2],f32>, %p: !torch.vtensor<[],si64>) -> !torch.vtensor<[2,4],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %list = torch.prim.ListConstruct %none, %p : (!torch.none, !torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index_put %c, %list, %k, %false : !torch.vtensor<[2,4],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[2],f32>, !torch.bool -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// -----

// b[:, i] = v: one scatter of whole rows of dimension 0 at the columns i.
// CHECK-LABEL: func.func @columns(
// CHECK-SAME:    %[[B:[^:]*]]: !torch.vtensor<[2,4],f32>, %[[I:[^:]*]]: !torch.vtensor<[2],si64>, %[[V:[^:]*]]: !torch.vtensor<[2,2],f32>
// CHECK:         %[[VB:.*]] = torch_c.to_builtin_tensor %[[V]]
// CHECK:         %[[IB:.*]] = torch_c.to_builtin_tensor %[[I]]
// CHECK:         %[[AT:.*]] = stablehlo.reshape %[[IB]] : (tensor<2xi64>) -> tensor<2x1xi64>
// CHECK:         %[[BB:.*]] = torch_c.to_builtin_tensor %[[B]]
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%[[BB]], %[[AT]], %[[VB]])
// CHECK-SAME:      update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<f32>, %[[NEWER:.*]]: tensor<f32>):
// CHECK-NEXT:      stablehlo.return %[[NEWER]]
// CHECK:         torch_c.from_builtin_tensor %[[NEW]]
func.func @columns(%b: !torch.vtensor<[2,4],f32>, %i: !torch.vtensor<[2],si64>, %v: !torch.vtensor<[2,2],f32>) -> !torch.vtensor<[2,4],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %list = torch.prim.ListConstruct %none, %i : (!torch.none, !torch.vtensor<[2],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index_put %b, %list, %v, %false : !torch.vtensor<[2,4],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[2,2],f32>, !torch.bool -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// -----

// accumulate=True: the scatter's body adds.
// CHECK-LABEL: func.func @accumulate(
// CHECK:         "stablehlo.scatter"
// CHECK-SAME:      update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1
// CHECK-NEXT:    ^bb0(%[[OLD:.*]]: tensor<f32>, %[[NEW:.*]]: tensor<f32>):
// CHECK-NEXT:      %[[SUM:.*]] = stablehlo.add %[[OLD]], %[[NEW]]
// CHECK-NEXT:      stablehlo.return %[[SUM]]
func.func @accumulate(%b: !torch.vtensor<[5,3],f32>, %i: !torch.vtensor<[3],si64>, %v: !torch.vtensor<[3,3],f32>) -> !torch.vtensor<[5,3],f32> {
  %true = torch.constant.bool true
  %list = torch.prim.ListConstruct %i : (!torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index_put %b, %list, %v, %true : !torch.vtensor<[5,3],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[3,3],f32>, !torch.bool -> !torch.vtensor<[5,3],f32>
  return %0 : !torch.vtensor<[5,3],f32>
}

// -----

// scatter_reduce amax without self: the targets set to -inf, then a scatter that maximises.
// CHECK-LABEL: func.func @scatter_amax(
// CHECK:         %[[AT:.*]] = stablehlo.reshape %{{.*}} : (tensor<3xi64>) -> tensor<3x1xi64>
// CHECK:         %[[X:.*]] = torch_c.to_builtin_tensor
// CHECK:         %[[NEGINF:.*]] = stablehlo.constant dense<0xFF800000> : tensor<f32>
// CHECK:         %[[FILL:.*]] = stablehlo.broadcast_in_dim %[[NEGINF]], dims = [] : (tensor<f32>) -> tensor<3xf32>
// CHECK:         %[[CLEARED:.*]] = "stablehlo.scatter"(%[[X]], %[[AT]], %[[FILL]])
// CHECK:           stablehlo.return
// CHECK:         %[[MAX:.*]] = "stablehlo.scatter"(%[[CLEARED]], %[[AT]], %{{.*}})
// CHECK:           %[[M:.*]] = stablehlo.maximum
// CHECK-NEXT:      stablehlo.return %[[M]]
// CHECK:         torch_c.from_builtin_tensor %[[MAX]]
func.func @scatter_amax(%x: !torch.vtensor<[4],f32>, %i: !torch.vtensor<[3],si64>, %s: !torch.vtensor<[3],f32>) -> !torch.vtensor<[4],f32> {
  %int0 = torch.constant.int 0
  %str = torch.constant.str "amax"
  %false = torch.constant.bool false
  %0 = torch.aten.scatter_reduce.two %x, %int0, %i, %s, %str, %false : !torch.vtensor<[4],f32>, !torch.int, !torch.vtensor<[3],si64>, !torch.vtensor<[3],f32>, !torch.str, !torch.bool -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}

// -----

// A slice with constant bounds: stablehlo.slice, bounds clamped as eager clamps them.
// CHECK-LABEL: func.func @slice(
// CHECK:         %[[X:.*]] = torch_c.to_builtin_tensor
// CHECK:         %[[S:.*]] = stablehlo.slice %[[X]] [0:1, 2:3:3] : (tensor<1x3xf32>) -> tensor<1x1xf32>
// CHECK:         torch_c.from_builtin_tensor %[[S]]
func.func @slice(%x: !torch.vtensor<[1,3],f32>) -> !torch.vtensor<[1,1],f32> {
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %intm1 = torch.constant.int -1
  %end = torch.constant.int 9223372036854775807
  %0 = torch.aten.slice.Tensor %x, %int1, %intm1, %end, %int3 : !torch.vtensor<[1,3],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,1],f32>
  return %0 : !torch.vtensor<[1,1],f32>
}
