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
// CHECK:         %[[CB:.*]] = torch_c.to_builtin_tensor %[[C]]
// CHECK:         %[[KB:.*]] = torch_c.to_builtin_tensor %[[K]]
// CHECK:         %[[FOUR:.*]] = stablehlo.constant dense<4> : tensor<i64>
// CHECK:         %[[PB:.*]] = torch_c.to_builtin_tensor %[[P]]
// CHECK:         %[[NEGATIVE:.*]] = stablehlo.compare LT, %[[PB]], %{{.*}}
// CHECK:         %[[WRAPPED:.*]] = stablehlo.add %[[PB]], %[[FOUR]]
// CHECK:         %[[START:.*]] = stablehlo.select %[[NEGATIVE]], %[[WRAPPED]], %[[PB]]
// CHECK:         %[[COLUMN:.*]] = stablehlo.reshape %[[KB]] : (tensor<2xf32>) -> tensor<2x1xf32>
// CHECK:         %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<i64>
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

// b[:, i] = v: one scatter of whole rows of dimension 0 at the columns i, a negative i
// counted from the end: where(i < 0, i + 4, i).
// CHECK-LABEL: func.func @columns(
// CHECK-SAME:    %[[B:[^:]*]]: !torch.vtensor<[2,4],f32>, %[[I:[^:]*]]: !torch.vtensor<[2],si64>, %[[V:[^:]*]]: !torch.vtensor<[2,2],f32>
// CHECK:         %[[VB:.*]] = torch_c.to_builtin_tensor %[[V]]
// CHECK-DAG:     %[[ZERO:.*]] = torch.constant.int 0
// CHECK-DAG:     %[[ONE:.*]] = torch.constant.int 1
// CHECK-DAG:     %[[FOUR:.*]] = torch.constant.int 4
// CHECK:         %[[NEGATIVE:.*]] = torch.aten.lt.Scalar %[[I]], %[[ZERO]]
// CHECK:         %[[SHIFTED:.*]] = torch.aten.add.Scalar %[[I]], %[[FOUR]], %[[ONE]]
// CHECK:         %[[WRAPPED:.*]] = torch.aten.where.self %[[NEGATIVE]], %[[SHIFTED]], %[[I]]
// CHECK:         %[[IB:.*]] = torch_c.to_builtin_tensor %[[WRAPPED]]
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

// index_copy (no op of torch-mlir's: a torch.operator) is the index_put at [:, i]: one
// scatter of whole slices of dimensions 0 and 2.
// CHECK-LABEL: func.func @index_copy(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[2,8,3],f32>, %[[I:[^:]*]]: !torch.vtensor<[2],si64>, %[[SRC:[^:]*]]: !torch.vtensor<[2,2,3],f32>
// CHECK:         %[[SB:.*]] = torch_c.to_builtin_tensor %[[SRC]]
// CHECK:         %[[EIGHT:.*]] = torch.constant.int 8
// CHECK:         %[[NEGATIVE:.*]] = torch.aten.lt.Scalar %[[I]]
// CHECK:         %[[SHIFTED:.*]] = torch.aten.add.Scalar %[[I]], %[[EIGHT]]
// CHECK:         %[[WRAPPED:.*]] = torch.aten.where.self %[[NEGATIVE]], %[[SHIFTED]], %[[I]]
// CHECK:         %[[IB:.*]] = torch_c.to_builtin_tensor %[[WRAPPED]]
// CHECK:         %[[AT:.*]] = stablehlo.reshape %[[IB]] : (tensor<2xi64>) -> tensor<2x1xi64>
// CHECK:         %[[XB:.*]] = torch_c.to_builtin_tensor %[[X]]
// CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%[[XB]], %[[AT]], %[[SB]])
// CHECK-SAME:      update_window_dims = [0, 2], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<f32>, %[[NEWER:.*]]: tensor<f32>):
// CHECK-NEXT:      stablehlo.return %[[NEWER]]
// CHECK:         %[[RESULT:.*]] = torch_c.from_builtin_tensor %[[NEW]]
// CHECK-NOT:     torch.operator
// CHECK:         return %[[RESULT]]
func.func @index_copy(%x: !torch.vtensor<[2,8,3],f32>, %i: !torch.vtensor<[2],si64>, %src: !torch.vtensor<[2,2,3],f32>) -> !torch.vtensor<[2,8,3],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.operator "torch.aten.index_copy"(%x, %int1, %i, %src) : (!torch.vtensor<[2,8,3],f32>, !torch.int, !torch.vtensor<[2],si64>, !torch.vtensor<[2,2,3],f32>) -> !torch.vtensor<[2,8,3],f32>
  return %0 : !torch.vtensor<[2,8,3],f32>
}

// -----

// index_fill on dimension -1 with a number: the number broadcast to the update b[:, i].
// CHECK-LABEL: func.func @index_fill(
// CHECK:         %[[THREE:.*]] = stablehlo.constant dense<3> : tensor<i64>
// CHECK:         %[[FILL:.*]] = stablehlo.broadcast_in_dim %[[THREE]], dims = [] : (tensor<i64>) -> tensor<4x2xi64>
// CHECK:         %[[AT:.*]] = stablehlo.reshape %{{.*}} : (tensor<2xi64>) -> tensor<2x1xi64>
// CHECK:         "stablehlo.scatter"(%{{.*}}, %[[AT]], %[[FILL]])
// CHECK-SAME:      update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1
// CHECK-NOT:     torch.operator
func.func @index_fill(%x: !torch.vtensor<[4,3],si64>, %i: !torch.vtensor<[2],si64>) -> !torch.vtensor<[4,3],si64> {
  %intm1 = torch.constant.int -1
  %int3 = torch.constant.int 3
  %0 = torch.operator "torch.aten.index_fill.int_Scalar"(%x, %intm1, %i, %int3) : (!torch.vtensor<[4,3],si64>, !torch.int, !torch.vtensor<[2],si64>, !torch.int) -> !torch.vtensor<[4,3],si64>
  return %0 : !torch.vtensor<[4,3],si64>
}

// -----

// index_add with alpha 2 and a 0-d index (one index of one element): the source times
// 2, added by the scatter's body.
// CHECK-LABEL: func.func @index_add(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[5,3],f32>, %[[I:[^:]*]]: !torch.vtensor<[],si64>, %[[SRC:[^:]*]]: !torch.vtensor<[1,3],f32>
// CHECK:         %[[SB:.*]] = torch_c.to_builtin_tensor %[[SRC]]
// CHECK:         %[[TWO:.*]] = stablehlo.constant dense<2.000000e+00> : tensor<f32>
// CHECK:         %[[TWOS:.*]] = stablehlo.broadcast_in_dim %[[TWO]], dims = [] : (tensor<f32>) -> tensor<1x3xf32>
// CHECK:         %[[SCALED:.*]] = stablehlo.multiply %[[SB]], %[[TWOS]]
// CHECK:         %[[AT:.*]] = stablehlo.reshape %{{.*}} : (tensor<i64>) -> tensor<1x1xi64>
// CHECK:         "stablehlo.scatter"(%{{.*}}, %[[AT]], %[[SCALED]])
// CHECK-SAME:      update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1
// CHECK-NEXT:    ^bb0(%[[OLD:.*]]: tensor<f32>, %[[NEW:.*]]: tensor<f32>):
// CHECK-NEXT:      %[[SUM:.*]] = stablehlo.add %[[OLD]], %[[NEW]]
// CHECK-NEXT:      stablehlo.return %[[SUM]]
func.func @index_add(%x: !torch.vtensor<[5,3],f32>, %i: !torch.vtensor<[],si64>, %src: !torch.vtensor<[1,3],f32>) -> !torch.vtensor<[5,3],f32> {
  %int0 = torch.constant.int 0
  %float2 = torch.constant.float 2.0
  %0 = torch.operator "torch.aten.index_add"(%x, %int0, %i, %src, %float2) : (!torch.vtensor<[5,3],f32>, !torch.int, !torch.vtensor<[],si64>, !torch.vtensor<[1,3],f32>, !torch.float) -> !torch.vtensor<[5,3],f32>
  return %0 : !torch.vtensor<[5,3],f32>
}

// -----

// b[m] = v with a row of v per true element: a select over the whole of b, the k-th
// true row taking row k of v, found by a running count of the trues (no nonzero).
// CHECK-LABEL: func.func @mask_rows(
// CHECK-SAME:    %[[B:[^:]*]]: !torch.vtensor<[4,3],f32>, %[[M:[^:]*]]: !torch.vtensor<[4],i1>, %[[V:[^:]*]]: !torch.vtensor<[2,3],f32>
// CHECK:         %[[FLAT:.*]] = torch.aten.view %[[M]], %{{.*}} -> !torch.vtensor<[4],i1>
// CHECK:         %[[COUNT:.*]] = torch.aten.cumsum %[[FLAT]], %{{.*}}, %{{.*}} -> !torch.vtensor<[4],si64>
// CHECK:         %[[BEFORE:.*]] = torch.aten.sub.Scalar %[[COUNT]]
// CHECK:         %[[ROW:.*]] = torch.aten.clamp_min %[[BEFORE]]
// CHECK:         %[[VALUES:.*]] = torch.aten.view %[[V]], %{{.*}} -> !torch.vtensor<[2,3],f32>
// CHECK:         %[[PICKED:.*]] = torch.aten.index_select %[[VALUES]], %{{.*}}, %[[ROW]] : {{.*}} -> !torch.vtensor<[4,3],f32>
// CHECK:         %[[SHAPED:.*]] = torch.aten.view %[[PICKED]], %{{.*}} -> !torch.vtensor<[4,3],f32>
// CHECK:         %[[COND:.*]] = torch.aten.view %[[M]], %{{.*}} -> !torch.vtensor<[4,1],i1>
// CHECK:         %[[NEW:.*]] = torch.aten.where.self %[[COND]], %[[SHAPED]], %[[B]]
// CHECK-NOT:     torch.aten.index_put
// CHECK:         return %[[NEW]]
func.func @mask_rows(%b: !torch.vtensor<[4,3],f32>, %m: !torch.vtensor<[4],i1>, %v: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[4,3],f32> {
  %false = torch.constant.bool false
  %list = torch.prim.ListConstruct %m : (!torch.vtensor<[4],i1>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index_put %b, %list, %v, %false : !torch.vtensor<[4,3],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[2,3],f32>, !torch.bool -> !torch.vtensor<[4,3],f32>
  return %0 : !torch.vtensor<[4,3],f32>
}

// -----

// b[:, m] += v with a 0-d v of another dtype: cast, added to b, selected where m is true.
// CHECK-LABEL: func.func @mask_accumulate_scalar(
// CHECK-SAME:    %[[B:[^:]*]]: !torch.vtensor<[2,4],f32>, %[[M:[^:]*]]: !torch.vtensor<[4],i1>, %[[V:[^:]*]]: !torch.vtensor<[],f64>
// CHECK:         %[[CAST:.*]] = torch.aten.to.dtype %[[V]], {{.*}} -> !torch.vtensor<[],f32>
// CHECK:         %[[ONE:.*]] = torch.aten.view %[[CAST]], %{{.*}} -> !torch.vtensor<[1,1],f32>
// CHECK:         %[[SUM:.*]] = torch.aten.add.Tensor %[[B]], %[[ONE]], %{{.*}} -> !torch.vtensor<[2,4],f32>
// CHECK:         %[[COND:.*]] = torch.aten.view %[[M]], %{{.*}} -> !torch.vtensor<[4],i1>
// CHECK:         %[[NEW:.*]] = torch.aten.where.self %[[COND]], %[[SUM]], %[[B]]
// CHECK:         return %[[NEW]]
func.func @mask_accumulate_scalar(%b: !torch.vtensor<[2,4],f32>, %m: !torch.vtensor<[4],i1>, %v: !torch.vtensor<[],f64>) -> !torch.vtensor<[2,4],f32> {
  %none = torch.constant.none
  %true = torch.constant.bool true
  %list = torch.prim.ListConstruct %none, %m : (!torch.none, !torch.vtensor<[4],i1>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index_put %b, %list, %v, %true : !torch.vtensor<[2,4],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[],f64>, !torch.bool -> !torch.vtensor<[2,4],f32>
  return %0 : !torch.vtensor<[2,4],f32>
}

// -----

// b[m, :, [i]] = v, a mask and a one-element index tensor apart: one mask over the
// dimensions they index (the mask's trues at i, a negative i from the end), those made
// the first (where eager puts the trues' dimension), then the select of b[mask].
// CHECK-LABEL: func.func @mask_beside_one_index(
// CHECK-SAME:    %[[B:[^:]*]]: !torch.vtensor<[4,3,5],f32>, %[[M:[^:]*]]: !torch.vtensor<[4],i1>, %[[I:[^:]*]]: !torch.vtensor<[1],si64>, %[[V:[^:]*]]: !torch.vtensor<[2,3],f32>
// CHECK:         %[[MASK:.*]] = torch.aten.view %[[M]], %{{.*}} -> !torch.vtensor<[4,1],i1>
// CHECK:         %[[AT:.*]] = torch.aten.view %[[I]], %{{.*}} -> !torch.vtensor<[1],si64>
// CHECK:         %[[IOTA:.*]] = torch.vtensor.literal(dense<[0, 1, 2, 3, 4]> : tensor<5xsi64>)
// CHECK:         %[[EQ:.*]] = torch.aten.eq.Tensor %[[IOTA]], %[[AT]] : {{.*}} -> !torch.vtensor<[5],i1>
// CHECK:         %[[FROM_END:.*]] = torch.vtensor.literal(dense<[-5, -4, -3, -2, -1]> : tensor<5xsi64>)
// CHECK:         %[[EQ_END:.*]] = torch.aten.eq.Tensor %[[FROM_END]], %[[AT]]
// CHECK:         %[[HOT:.*]] = torch.aten.logical_or %[[EQ]], %[[EQ_END]]
// CHECK:         %[[HOT_ROW:.*]] = torch.aten.view %[[HOT]], %{{.*}} -> !torch.vtensor<[1,5],i1>
// CHECK:         %[[BOTH:.*]] = torch.aten.logical_and %[[MASK]], %[[HOT_ROW]] : {{.*}} -> !torch.vtensor<[4,5],i1>
// CHECK:         %[[FIRST:.*]] = torch.aten.permute %[[B]], %{{.*}} -> !torch.vtensor<[4,5,3],f32>
// CHECK:         %[[COUNT:.*]] = torch.aten.cumsum
// CHECK:         torch.aten.index_select %{{.*}} -> !torch.vtensor<[20,3],f32>
// CHECK:         %[[NEW:.*]] = torch.aten.where.self %{{.*}}, %{{.*}}, %[[FIRST]] : {{.*}} -> !torch.vtensor<[4,5,3],f32>
// CHECK:         %[[BACK:.*]] = torch.aten.permute %[[NEW]], %{{.*}} -> !torch.vtensor<[4,3,5],f32>
// CHECK-NOT:     torch.aten.index_put
// CHECK:         return %[[BACK]]
func.func @mask_beside_one_index(%b: !torch.vtensor<[4,3,5],f32>, %m: !torch.vtensor<[4],i1>, %i: !torch.vtensor<[1],si64>, %v: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[4,3,5],f32> {
  %false = torch.constant.bool false
  %none = torch.constant.none
  %list = torch.prim.ListConstruct %m, %none, %i : (!torch.vtensor<[4],i1>, !torch.none, !torch.vtensor<[1],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index_put %b, %list, %v, %false : !torch.vtensor<[4,3,5],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[2,3],f32>, !torch.bool -> !torch.vtensor<[4,3,5],f32>
  return %0 : !torch.vtensor<[4,3,5],f32>
}

// -----

// scatter_reduce "mean" of integers without self: the targets cleared, the sources
// summed, divided by how many reached each element (at least 1), rounded down.
// CHECK-LABEL: func.func @scatter_mean(
// CHECK:         %[[AT:.*]] = stablehlo.reshape %{{.*}} : (tensor<3xi64>) -> tensor<3x1xi64>
// CHECK:         %[[CLEARED:.*]] = "stablehlo.scatter"(%{{.*}}, %[[AT]], %{{.*}})
// CHECK:         %[[TOTAL:.*]] = "stablehlo.scatter"(%[[CLEARED]], %[[AT]], %{{.*}})
// CHECK:           stablehlo.add
// CHECK:         %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<i64>
// CHECK:         %[[ZEROS:.*]] = stablehlo.broadcast_in_dim %[[ZERO]], dims = [] : (tensor<i64>) -> tensor<4xi64>
// CHECK:         %[[ONES:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [] : (tensor<i64>) -> tensor<3xi64>
// CHECK:         %[[COUNT:.*]] = "stablehlo.scatter"(%[[ZEROS]], %[[AT]], %[[ONES]])
// CHECK:           stablehlo.add
// CHECK:         %[[AT_LEAST_1:.*]] = stablehlo.maximum %[[COUNT]], %{{.*}} : tensor<4xi64>
// CHECK:         %[[QUOTIENT:.*]] = stablehlo.divide %[[TOTAL]], %[[AT_LEAST_1]]
// CHECK:         %[[REST:.*]] = stablehlo.remainder %[[TOTAL]], %[[AT_LEAST_1]]
// CHECK:         %[[BELOW:.*]] = stablehlo.compare LT, %[[REST]], %{{.*}}
// CHECK:         %[[LOWER:.*]] = stablehlo.subtract %[[QUOTIENT]], %{{.*}}
// CHECK:         %[[MEAN:.*]] = stablehlo.select %[[BELOW]], %[[LOWER]], %[[QUOTIENT]]
// CHECK:         torch_c.from_builtin_tensor %[[MEAN]]
func.func @scatter_mean(%x: !torch.vtensor<[4],si64>, %i: !torch.vtensor<[3],si64>, %s: !torch.vtensor<[3],si64>) -> !torch.vtensor<[4],si64> {
  %int0 = torch.constant.int 0
  %str = torch.constant.str "mean"
  %false = torch.constant.bool false
  %0 = torch.aten.scatter_reduce.two %x, %int0, %i, %s, %str, %false : !torch.vtensor<[4],si64>, !torch.int, !torch.vtensor<[3],si64>, !torch.vtensor<[3],si64>, !torch.str, !torch.bool -> !torch.vtensor<[4],si64>
  return %0 : !torch.vtensor<[4],si64>
}

// -----

// slice_scatter of constant bounds between static shapes (autograd's backward of
// `x[..., :32]` writes the slice's gradient into zeros so) is the box it writes: a
// dynamic_update_slice at the start, here along the last dimension; with a step, the
// strided box (a scatter of the strided dimension's positions, or pad+select); a start
// from the end and an open end (INT64_MAX) as eager clamps them.
// CHECK-LABEL: func.func @slice_scatter(
// CHECK-COUNT-3: stablehlo.constant dense<0> : tensor<i64>
// CHECK-NEXT:    %[[C32:.*]] = stablehlo.constant dense<32> : tensor<i64>
// CHECK-NEXT:    stablehlo.dynamic_update_slice %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[C32]] : (tensor<4x8x64x64xf32>, tensor<4x8x64x32xf32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<4x8x64x64xf32>
// CHECK:         "stablehlo.scatter"
// CHECK-SAME:      inserted_window_dims = [3], scatter_dims_to_operand_dims = [3]
// CHECK-NOT:     torch.aten.slice_scatter
// SELECT-LABEL: func.func @slice_scatter(
// SELECT:        stablehlo.dynamic_update_slice
// SELECT:        stablehlo.pad
// SELECT:        stablehlo.select
func.func @slice_scatter(%x: !torch.vtensor<[4,8,64,64],f32>, %g: !torch.vtensor<[4,8,64,32],f32>) -> (!torch.vtensor<[4,8,64,64],f32>, !torch.vtensor<[4,8,64,64],f32>) {
  %int-1 = torch.constant.int -1
  %int-32 = torch.constant.int -32
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %int0 = torch.constant.int 0
  %max = torch.constant.int 9223372036854775807
  %0 = torch.aten.slice_scatter %x, %g, %int-1, %int-32, %max, %int1 : !torch.vtensor<[4,8,64,64],f32>, !torch.vtensor<[4,8,64,32],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,8,64,64],f32>
  %1 = torch.aten.slice_scatter %x, %g, %int3, %int0, %max, %int2 : !torch.vtensor<[4,8,64,64],f32>, !torch.vtensor<[4,8,64,32],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,8,64,64],f32>
  return %0, %1 : !torch.vtensor<[4,8,64,64],f32>, !torch.vtensor<[4,8,64,64],f32>
}
