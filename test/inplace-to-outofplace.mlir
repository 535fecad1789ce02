// RUN: outofplace-opt %s --split-input-file --use-name-loc-as-prefix \
// RUN:   --pass-pipeline='builtin.module(inplace-to-outofplace)' | FileCheck %s

// A chain of in-place ops: each one becomes its twin, names count the versions. The
// mutated argument, which the function returns, is that result, marked as aliasing it:
// one result, not a second one holding the same buffer.
// CHECK-LABEL: func.func @add_$chain(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[4],f32> {tf.aliasing_output = 0 : i32},
// CHECK-SAME:    %[[Y:.*]]: !torch.vtensor<[4],f32>)
// CHECK-SAME:    -> !torch.vtensor<[4],f32>
// CHECK:         %[[V1:.*]] = torch.aten.add.Tensor %[[X]], %[[Y]], %{{.*}} : {{.*}} -> !torch.vtensor<[4],f32>
// CHECK:         %[[V2:.*]] = torch.aten.mul.Tensor %[[V1]], %[[Y]] : {{.*}} -> !torch.vtensor<[4],f32>
// CHECK-NEXT:    return %[[V2]] :
func.func @add_$chain(%x: !torch.tensor<[4],f32> loc("x"), %y: !torch.vtensor<[4],f32> loc("y")) -> !torch.tensor<[4],f32> {
  %int1 = torch.constant.int 1
  %t = torch.copy.to_tensor %y : !torch.tensor<[4],f32>
  %0 = torch.aten.add_.Tensor %x, %t, %int1 : !torch.tensor<[4],f32>, !torch.tensor<[4],f32>, !torch.int -> !torch.tensor<[4],f32>
  %1 = torch.aten.mul_.Tensor %0, %t : !torch.tensor<[4],f32>, !torch.tensor<[4],f32> -> !torch.tensor<[4],f32>
  return %1 : !torch.tensor<[4],f32>
}

// -----

// The NameLocs of the versions: <root>_modified, <root>_modified_2.
// CHECK-LABEL: func.func @names$versions(
// CHECK:         %x_modified = torch.aten.add.Tensor
// CHECK:         %x_modified_2 = torch.aten.mul.Tensor %x_modified
func.func @names$versions(%x: !torch.tensor<[4],f32> loc("x"), %y: !torch.vtensor<[4],f32>) {
  %int1 = torch.constant.int 1
  %t = torch.copy.to_tensor %y : !torch.tensor<[4],f32>
  %0 = torch.aten.add_.Tensor %x, %t, %int1 : !torch.tensor<[4],f32>, !torch.tensor<[4],f32>, !torch.int -> !torch.tensor<[4],f32>
  %1 = torch.aten.mul_.Tensor %x, %t : !torch.tensor<[4],f32>, !torch.tensor<[4],f32> -> !torch.tensor<[4],f32>
  return
}

// -----

// fill_.Tensor becomes its true twin, fill.Tensor (torch-mlir cannot lower it: the
// workaround is a pass of its own, outofplace-upstream-fill-tensor).
// CHECK-LABEL: func.func @fill$tensor(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4],f32> {tf.aliasing_output = 0 : i32}, %[[V:[^:]*]]: !torch.vtensor<[],f32>
// CHECK:         %[[NEW:.*]] = torch.aten.fill.Tensor %[[X]], %[[V]] : !torch.vtensor<[4],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[4],f32>
// CHECK:         return %[[NEW]]
func.func @fill$tensor(%x: !torch.tensor<[4],f32>, %v: !torch.vtensor<[],f32>) {
  %0 = torch.copy.to_tensor %v : !torch.tensor<[],f32>
  %1 = torch.aten.fill_.Tensor %x, %0 : !torch.tensor<[4],f32>, !torch.tensor<[],f32> -> !torch.tensor<[4],f32>
  return
}

// Reads before and after a write see the version current at that point.
// CHECK-LABEL: func.func @reads$interleaved(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[4],f32> {tf.aliasing_output = 2 : i32}
// CHECK:         %[[BEFORE:.*]] = torch.aten.mul.Scalar %[[X]]
// CHECK:         %[[NEW:.*]] = torch.aten.fill.Scalar %[[X]]
// CHECK:         %[[AFTER:.*]] = torch.aten.mul.Scalar %[[NEW]]
// CHECK:         return %[[BEFORE]], %[[AFTER]], %[[NEW]]
func.func @reads$interleaved(%x: !torch.tensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) {
  %int2 = torch.constant.int 2
  %0 = torch.aten.mul.Scalar %x, %int2 : !torch.tensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>
  %float = torch.constant.float 3.5
  %1 = torch.aten.fill_.Scalar %x, %float : !torch.tensor<[4],f32>, !torch.float -> !torch.tensor<[4],f32>
  %2 = torch.aten.mul.Scalar %x, %int2 : !torch.tensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>
  return %0, %2 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>
}

// -----

// copy_ with a broadcast source becomes aten.copy, which keeps self's shape.
// CHECK-LABEL: func.func @copy_$broadcast(
// CHECK-SAME:    %[[DST:.*]]: !torch.vtensor<[4,8],f32> {tf.aliasing_output = 0 : i32},
// CHECK-SAME:    %[[SRC:.*]]: !torch.vtensor<[1,8],f32>)
// CHECK:         %[[NEW:.*]] = torch.aten.copy %[[DST]], %[[SRC]], %{{.*}} : {{.*}} -> !torch.vtensor<[4,8],f32>
// CHECK:         return %[[NEW]]
func.func @copy_$broadcast(%dst: !torch.tensor<[4,8],f32>, %src: !torch.vtensor<[1,8],f32>) {
  %false = torch.constant.bool false
  %t = torch.copy.to_tensor %src : !torch.tensor<[1,8],f32>
  %0 = torch.aten.copy_ %dst, %t, %false : !torch.tensor<[4,8],f32>, !torch.tensor<[1,8],f32>, !torch.bool -> !torch.tensor<[4,8],f32>
  return
}

// -----

// a += b with a half and b float: eager adds in float and rounds back to half.
// CHECK-LABEL: func.func @add_$keeps_dtype(
// CHECK:         %[[WIDE:.*]] = torch.aten.add.Tensor {{.*}} -> !torch.vtensor<[4],f32>
// CHECK:         %[[NARROW:.*]] = torch.aten.to.dtype %[[WIDE]], %{{.*}} -> !torch.vtensor<[4],f16>
// CHECK:         return %[[NARROW]]
func.func @add_$keeps_dtype(%a: !torch.tensor<[4],f16>, %b: !torch.vtensor<[4],f32>) {
  %int1 = torch.constant.int 1
  %t = torch.copy.to_tensor %b : !torch.tensor<[4],f32>
  %0 = torch.aten.add_.Tensor %a, %t, %int1 : !torch.tensor<[4],f16>, !torch.tensor<[4],f32>, !torch.int -> !torch.tensor<[4],f16>
  return
}

// -----

// A tensor made inside the function and mutated there: no extra result.
// CHECK-LABEL: func.func @intermediate$mutated(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
// CHECK:         %[[T:.*]] = torch.aten.mul.Scalar %[[X]]
// CHECK:         %[[NEW:.*]] = torch.aten.zero %[[T]]
// CHECK:         return %[[NEW]] : !torch.vtensor<[4],f32>
func.func @intermediate$mutated(%x: !torch.vtensor<[4],f32>) -> !torch.tensor<[4],f32> {
  %int2 = torch.constant.int 2
  %0 = torch.aten.mul.Scalar %x, %int2 : !torch.vtensor<[4],f32>, !torch.int -> !torch.tensor<[4],f32>
  %1 = torch.aten.zero_ %0 : !torch.tensor<[4],f32> -> !torch.tensor<[4],f32>
  return %0 : !torch.tensor<[4],f32>
}

// -----

// Two mutated arguments: extra results in argument order, whatever the write order.
// CHECK-LABEL: func.func @args$order(
// CHECK-SAME:    %[[A:.*]]: !torch.vtensor<[2],f32> {tf.aliasing_output = 0 : i32},
// CHECK-SAME:    %[[B:.*]]: !torch.vtensor<[2],f32> {tf.aliasing_output = 1 : i32})
// CHECK:         %[[NB:.*]] = torch.aten.neg %[[B]]
// CHECK:         %[[NA:.*]] = torch.aten.neg %[[A]]
// CHECK:         return %[[NA]], %[[NB]]
func.func @args$order(%a: !torch.tensor<[2],f32>, %b: !torch.tensor<[2],f32>) {
  %0 = torch.aten.neg_ %b : !torch.tensor<[2],f32> -> !torch.tensor<[2],f32>
  %1 = torch.aten.neg_ %a : !torch.tensor<[2],f32> -> !torch.tensor<[2],f32>
  return
}

// -----

// torch-mlir's own mutable form: to_vtensor reads, overwrite.tensor.contents writes.
// CHECK-LABEL: func.func @overwrite$contents(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[2],f32> {tf.aliasing_output = 1 : i32})
// CHECK:         %[[NEW:.*]] = torch.aten.neg %[[X]]
// CHECK:         %[[OUT:.*]] = torch.aten.mul.Tensor %[[NEW]], %[[NEW]]
// CHECK:         return %[[OUT]], %[[NEW]]
func.func @overwrite$contents(%x: !torch.tensor<[2],f32>) -> !torch.vtensor<[2],f32> {
  %0 = torch.copy.to_vtensor %x : !torch.vtensor<[2],f32>
  %1 = torch.aten.neg %0 : !torch.vtensor<[2],f32> -> !torch.vtensor<[2],f32>
  torch.overwrite.tensor.contents %1 overwrites %x : !torch.vtensor<[2],f32>, !torch.tensor<[2],f32>
  %2 = torch.copy.to_vtensor %x : !torch.vtensor<[2],f32>
  %3 = torch.aten.mul.Tensor %2, %2 : !torch.vtensor<[2],f32>, !torch.vtensor<[2],f32> -> !torch.vtensor<[2],f32>
  return %3 : !torch.vtensor<[2],f32>
}

// -----

// An argument that is !torch.tensor but never written gets no extra result.
// CHECK-LABEL: func.func @readonly$nonvalue(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32>
// CHECK-NEXT:    %[[N:.*]] = torch.aten.neg %[[X]]
// CHECK-NEXT:    return %[[N]] : !torch.vtensor<[2],f32>
func.func @readonly$nonvalue(%x: !torch.tensor<[2],f32>) -> !torch.vtensor<[2],f32> {
  %0 = torch.aten.neg %x : !torch.tensor<[2],f32> -> !torch.vtensor<[2],f32>
  return %0 : !torch.vtensor<[2],f32>
}

// -----

// A write through a slice is one insert of the root; a view taken before the write
// (the row) is re-derived from the new root when read after it.
// CHECK-LABEL: func.func @slice$copy_(
// CHECK-SAME:    %[[B:.*]]: !torch.vtensor<[8,4],f32> {tf.aliasing_output = 1 : i32},
// CHECK-SAME:    %[[V:.*]]: !torch.vtensor<[2,4],f32>)
// CHECK:         %[[OLD:.*]] = torch.aten.slice.Tensor %[[B]]
// CHECK:         %[[NEW:.*]] = torch.aten.copy %[[OLD]], %[[V]]
// CHECK:         %[[DEST:.*]] = torch_c.to_builtin_tensor %[[B]] : !torch.vtensor<[8,4],f32> -> tensor<8x4xf32>
// CHECK:         %[[SRC:.*]] = torch_c.to_builtin_tensor %[[NEW]] : !torch.vtensor<[2,4],f32> -> tensor<2x4xf32>
// CHECK:         %[[INS:.*]] = tensor.insert_slice %[[SRC]] into %[[DEST]][2, 0] [2, 4] [1, 1]
// CHECK:         %[[ROOT:.*]] = torch_c.from_builtin_tensor %[[INS]] : tensor<8x4xf32> -> !torch.vtensor<[8,4],f32>
// CHECK:         %[[ROW:.*]] = torch.aten.select.int %[[ROOT]]
// CHECK:         return %[[ROW]], %[[ROOT]]
func.func @slice$copy_(%b: !torch.tensor<[8,4],f32>, %v: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[4],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %false = torch.constant.bool false
  %row = torch.aten.select.int %b, %int0, %int2 : !torch.tensor<[8,4],f32>, !torch.int, !torch.int -> !torch.tensor<[4],f32>
  %s = torch.aten.slice.Tensor %b, %int0, %int2, %int4, %int1 : !torch.tensor<[8,4],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[2,4],f32>
  %t = torch.copy.to_tensor %v : !torch.tensor<[2,4],f32>
  %0 = torch.aten.copy_ %s, %t, %false : !torch.tensor<[2,4],f32>, !torch.tensor<[2,4],f32>, !torch.bool -> !torch.tensor<[2,4],f32>
  %1 = torch.copy.to_vtensor %row : !torch.vtensor<[4],f32>
  return %1 : !torch.vtensor<[4],f32>
}

// -----

// A transpose only reorders dimensions: x.t()[3] is the box x[:, 3], one insert.
// CHECK-LABEL: func.func @t$select_fill_(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[4,5],f32> {tf.aliasing_output = 0 : i32})
// CHECK:         %[[T:.*]] = torch.aten.t %[[X]]
// CHECK:         %[[COL:.*]] = torch.aten.select.int %[[T]]
// CHECK:         %[[FILLED:.*]] = torch.aten.fill.Scalar %[[COL]]
// CHECK:         %[[BOXED:.*]] = torch.aten.view %[[FILLED]], %{{.*}} : !torch.vtensor<[4],f32>, !torch.list<int> -> !torch.vtensor<[4,1],f32>
// CHECK:         %[[NEW:.*]] = tensor.insert_slice %{{.*}} into %{{.*}}[0, 3] [4, 1] [1, 1] : tensor<4x1xf32> into tensor<4x5xf32>
// CHECK-NOT:     select_scatter
// CHECK:         %[[ROOT:.*]] = torch_c.from_builtin_tensor %[[NEW]]
// CHECK:         return %[[ROOT]]
func.func @t$select_fill_(%x: !torch.tensor<[4,5],f32>) {
  %int0 = torch.constant.int 0
  %int3 = torch.constant.int 3
  %float1 = torch.constant.float 1.0
  %0 = torch.aten.t %x : !torch.tensor<[4,5],f32> -> !torch.tensor<[5,4],f32>
  %1 = torch.aten.select.int %0, %int0, %int3 : !torch.tensor<[5,4],f32>, !torch.int, !torch.int -> !torch.tensor<[4],f32>
  %2 = torch.aten.fill_.Scalar %1, %float1 : !torch.tensor<[4],f32>, !torch.float -> !torch.tensor<[4],f32>
  return
}

// -----

// A view that merges dimensions has no box in x: the chain writes back innermost first,
// the slice into the flat view as a box of it (an insert), the flat view into x.
// CHECK-LABEL: func.func @flat$slice_fill_(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[4,5],f32> {tf.aliasing_output = 0 : i32})
// CHECK:         %[[FLAT:.*]] = torch.aten.view %[[X]]
// CHECK:         %[[PART:.*]] = torch.aten.slice.Tensor %[[FLAT]]
// CHECK:         %[[FILLED:.*]] = torch.aten.fill.Scalar %[[PART]]
// CHECK:         %[[FLAT2:.*]] = torch.aten.view %[[X]]
// CHECK-DAG:     %[[DEST:.*]] = torch_c.to_builtin_tensor %[[FLAT2]]
// CHECK-DAG:     %[[SRC:.*]] = torch_c.to_builtin_tensor %[[FILLED]]
// CHECK:         %[[INS:.*]] = tensor.insert_slice %[[SRC]] into %[[DEST]][3] [5] [1] : tensor<5xf32> into tensor<20xf32>
// CHECK:         %[[NEWFLAT:.*]] = torch_c.from_builtin_tensor %[[INS]]
// CHECK-NOT:     slice_scatter
// CHECK:         %[[ROOT:.*]] = torch.aten.view %[[NEWFLAT]], %{{.*}} : !torch.vtensor<[20],f32>, !torch.list<int> -> !torch.vtensor<[4,5],f32>
// CHECK:         return %[[ROOT]]
func.func @flat$slice_fill_(%x: !torch.tensor<[4,5],f32>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int8 = torch.constant.int 8
  %int20 = torch.constant.int 20
  %float1 = torch.constant.float 1.0
  %shape = torch.prim.ListConstruct %int20 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.view %x, %shape : !torch.tensor<[4,5],f32>, !torch.list<int> -> !torch.tensor<[20],f32>
  %1 = torch.aten.slice.Tensor %0, %int0, %int3, %int8, %int1 : !torch.tensor<[20],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[5],f32>
  %2 = torch.aten.fill_.Scalar %1, %float1 : !torch.tensor<[5],f32>, !torch.float -> !torch.tensor<[5],f32>
  return
}

// -----

// A returned view of a mutated argument is a result of its own (a value); the argument's
// new value is the aliased extra result.
// CHECK-LABEL: func.func @return$view_of_mutated(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[4,8],f32> {tf.aliasing_output = 1 : i32})
// CHECK:         %[[NEW:.*]] = torch.aten.fill.Scalar %[[X]]
// CHECK:         %[[ROW:.*]] = torch.aten.select.int %[[NEW]]
// CHECK-NEXT:    return %[[ROW]], %[[NEW]] :
func.func @return$view_of_mutated(%x: !torch.tensor<[4,8],f32>) -> !torch.tensor<[8],f32> {
  %float = torch.constant.float 3.5
  %0 = torch.aten.fill_.Scalar %x, %float : !torch.tensor<[4,8],f32>, !torch.float -> !torch.tensor<[4,8],f32>
  %int0 = torch.constant.int 0
  %1 = torch.aten.select.int %x, %int0, %int0 : !torch.tensor<[4,8],f32>, !torch.int, !torch.int -> !torch.tensor<[8],f32>
  return %1 : !torch.tensor<[8],f32>
}

// -----

// Returned twice, after a write: the first is the aliased result.
// CHECK-LABEL: func.func @return$mutated_twice(
// CHECK-SAME:    %[[X:.*]]: !torch.vtensor<[4],f32> {tf.aliasing_output = 0 : i32})
// CHECK-SAME:    -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>)
// CHECK:         %[[NEW:.*]] = torch.aten.fill.Scalar %[[X]]
// CHECK-NEXT:    return %[[NEW]], %[[NEW]] :
func.func @return$mutated_twice(%x: !torch.tensor<[4],f32>) -> (!torch.tensor<[4],f32>, !torch.tensor<[4],f32>) {
  %float = torch.constant.float 3.5
  %0 = torch.aten.fill_.Scalar %x, %float : !torch.tensor<[4],f32>, !torch.float -> !torch.tensor<[4],f32>
  return %0, %x : !torch.tensor<[4],f32>, !torch.tensor<[4],f32>
}

// -----

// x[pos] at a 0-d integer position is a view (a select at a runtime index): read after
// x is written, it is taken again from x's new value.
// CHECK-LABEL: func.func @position$read_after_write(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4,3],f32> {tf.aliasing_output = 1 : i32}, %[[POS:[^:]*]]: !torch.vtensor<[],si64>)
// CHECK:         %[[IDX:.*]] = torch.prim.ListConstruct %[[POS]]
// CHECK-NOT:     torch.aten.index.Tensor
// CHECK:         %[[NEW:.*]] = torch.aten.add.Scalar %[[X]]
// CHECK-NEXT:    %[[ROW:.*]] = torch.aten.index.Tensor %[[NEW]], %[[IDX]] : !torch.vtensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[3],f32>
// CHECK-NEXT:    %[[OUT:.*]] = torch.aten.mul.Scalar %[[ROW]]
// CHECK-NEXT:    return %[[OUT]], %[[NEW]] :
func.func @position$read_after_write(%x: !torch.tensor<[4,3],f32>, %pos: !torch.vtensor<[],si64>) -> !torch.vtensor<[3],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %pos : (!torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %1 = torch.aten.index.Tensor %x, %0 : !torch.tensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.tensor<[3],f32>
  %2 = torch.aten.add_.Scalar %x, %int1, %int1 : !torch.tensor<[4,3],f32>, !torch.int, !torch.int -> !torch.tensor<[4,3],f32>
  %3 = torch.aten.mul.Scalar %1, %int1 : !torch.tensor<[3],f32>, !torch.int -> !torch.vtensor<[3],f32>
  return %3 : !torch.vtensor<[3],f32>
}

// -----

// A read used only before x is written stays the one read of the old x.
// CHECK-LABEL: func.func @position$read_before_write(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4,3],f32> {tf.aliasing_output = 1 : i32}, %[[POS:[^:]*]]: !torch.vtensor<[],si64>)
// CHECK:         %[[IDX:.*]] = torch.prim.ListConstruct %[[POS]]
// CHECK:         %[[ROW:.*]] = torch.aten.index.Tensor %[[X]], %[[IDX]]
// CHECK-NEXT:    %[[OUT:.*]] = torch.aten.mul.Scalar %[[ROW]]
// CHECK-NEXT:    %[[NEW:.*]] = torch.aten.add.Scalar %[[X]]
// CHECK-NOT:     torch.aten.index
// CHECK:         return %[[OUT]], %[[NEW]] :
func.func @position$read_before_write(%x: !torch.tensor<[4,3],f32>, %pos: !torch.vtensor<[],si64>) -> !torch.vtensor<[3],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %pos : (!torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %1 = torch.aten.index.Tensor %x, %0 : !torch.tensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.tensor<[3],f32>
  %2 = torch.aten.mul.Scalar %1, %int1 : !torch.tensor<[3],f32>, !torch.int -> !torch.vtensor<[3],f32>
  %3 = torch.aten.add_.Scalar %x, %int1, %int1 : !torch.tensor<[4,3],f32>, !torch.int, !torch.int -> !torch.tensor<[4,3],f32>
  return %2 : !torch.vtensor<[3],f32>
}

// -----

// A write into x[1:, pos, 2] (a slice, then positions: a runtime one and a constant) is
// an index_put of the slice at the same positions, inserted back into x.
// CHECK-LABEL: func.func @position$write_through(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4,3,5],f32> {tf.aliasing_output = 0 : i32}, %[[POS:[^:]*]]: !torch.vtensor<[],si64>)
// CHECK:         %[[IDX:.*]] = torch.prim.ListConstruct %[[NONE:.*]], %[[POS]], %[[TWO:.*]] :
// CHECK:         %[[TAIL:.*]] = torch.aten.slice.Tensor %[[X]]
// CHECK-NEXT:    %[[COL:.*]] = torch.aten.index.Tensor %[[TAIL]], %[[IDX]]
// CHECK-NEXT:    %[[NEWCOL:.*]] = torch.aten.mul.Scalar %[[COL]]
// CHECK:         %[[TAIL2:.*]] = torch.aten.slice.Tensor %[[X]]
// CHECK:         %[[NEWTAIL:.*]] = torch.aten.index_put %[[TAIL2]], %[[IDX]], %[[NEWCOL]], %{{.*}} : !torch.vtensor<[3,3,5],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[3],f32>, !torch.bool -> !torch.vtensor<[3,3,5],f32>
// CHECK:         %[[INS:.*]] = tensor.insert_slice %{{.*}} into %{{.*}}[1, 0, 0] [3, 3, 5] [1, 1, 1]
// CHECK:         %[[NEW:.*]] = torch_c.from_builtin_tensor %[[INS]]
// CHECK:         return %[[NEW]] :
func.func @position$write_through(%x: !torch.tensor<[4,3,5],f32>, %pos: !torch.vtensor<[],si64>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int4 = torch.constant.int 4
  %none = torch.constant.none
  %two = torch.vtensor.literal(dense<2> : tensor<si64>) : !torch.vtensor<[],si64>
  %0 = torch.aten.slice.Tensor %x, %int0, %int1, %int4, %int1 : !torch.tensor<[4,3,5],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.tensor<[3,3,5],f32>
  %1 = torch.prim.ListConstruct %none, %pos, %two : (!torch.none, !torch.vtensor<[],si64>, !torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %2 = torch.aten.index.Tensor %0, %1 : !torch.tensor<[3,3,5],f32>, !torch.list<optional<vtensor>> -> !torch.tensor<[3],f32>
  %3 = torch.aten.mul_.Scalar %2, %int4 : !torch.tensor<[3],f32>, !torch.int -> !torch.tensor<[3],f32>
  return
}

// -----

// x[pos] += w: an add_ on the view x[pos], then its store at pos, which changes nothing
// more: one read, one index_put.
// CHECK-LABEL: func.func @position$augmented(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4,3],f32> {tf.aliasing_output = 0 : i32}, %[[POS:[^:]*]]: !torch.vtensor<[],si64>, %[[W:[^:]*]]: !torch.vtensor<[3],f32>)
// CHECK:         %[[IDX:.*]] = torch.prim.ListConstruct %[[POS]]
// CHECK:         %[[ROW:.*]] = torch.aten.index.Tensor %[[X]], %[[IDX]]
// CHECK-NEXT:    %[[SUM:.*]] = torch.aten.add.Tensor %[[ROW]], %[[W]]
// CHECK:         %[[NEW:.*]] = torch.aten.index_put %[[X]], %[[IDX]], %[[SUM]], %{{.*}} :
// CHECK-NOT:     torch.aten.index
// CHECK:         return %[[NEW]] :
func.func @position$augmented(%x: !torch.tensor<[4,3],f32>, %pos: !torch.vtensor<[],si64>, %w: !torch.vtensor<[3],f32>) {
  %int1 = torch.constant.int 1
  %false = torch.constant.bool false
  %0 = torch.prim.ListConstruct %pos : (!torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %1 = torch.aten.index.Tensor %x, %0 : !torch.tensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.tensor<[3],f32>
  %t = torch.copy.to_tensor %w : !torch.tensor<[3],f32>
  %2 = torch.aten.add_.Tensor %1, %t, %int1 : !torch.tensor<[3],f32>, !torch.tensor<[3],f32>, !torch.int -> !torch.tensor<[3],f32>
  %3 = torch.prim.ListConstruct %pos : (!torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %4 = torch.aten.index_put_ %x, %3, %2, %false : !torch.tensor<[4,3],f32>, !torch.list<optional<vtensor>>, !torch.tensor<[3],f32>, !torch.bool -> !torch.tensor<[4,3],f32>
  return
}

// -----

// Index tensors without elements write no element (`x[torch.tensor([False])] = v`,
// `index_copy_` at no index): both writes are dropped, x is not written.
// CHECK-LABEL: func.func @position$no_index(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4,3],f32>, %{{[^:]*}}: !torch.vtensor<[0],si64>, %{{[^:]*}}: !torch.vtensor<[0,3],f32>) -> !torch.vtensor<[4,3],f32> {
// CHECK-NOT:     index_put
// CHECK-NOT:     index_copy
// CHECK:         return %[[X]] :
func.func @position$no_index(%x: !torch.tensor<[4,3],f32>, %i: !torch.vtensor<[0],si64>, %v: !torch.vtensor<[0,3],f32>) -> !torch.vtensor<[4,3],f32> {
  %int0 = torch.constant.int 0
  %false = torch.constant.bool false
  %t = torch.copy.to_tensor %v : !torch.tensor<[0,3],f32>
  %0 = torch.prim.ListConstruct %i : (!torch.vtensor<[0],si64>) -> !torch.list<optional<vtensor>>
  %1 = torch.aten.index_put_ %x, %0, %t, %false : !torch.tensor<[4,3],f32>, !torch.list<optional<vtensor>>, !torch.tensor<[0,3],f32>, !torch.bool -> !torch.tensor<[4,3],f32>
  %2 = torch.operator "torch.aten.index_copy_"(%x, %int0, %i, %t) : (!torch.tensor<[4,3],f32>, !torch.int, !torch.vtensor<[0],si64>, !torch.tensor<[0,3],f32>) -> !torch.tensor<[4,3],f32>
  %3 = torch.copy.to_vtensor %x : !torch.vtensor<[4,3],f32>
  return %3 : !torch.vtensor<[4,3],f32>
}

// -----

// Indices that are not all 0-d integer tensors make a copy, in eager too (a 1-d index
// tensor here, a 0-d bool mask below): a plain read of x's value at that point.
// CHECK-LABEL: func.func @position$not_a_view(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4,3],f32> {tf.aliasing_output = 2 : i32}, %[[I:[^:]*]]: !torch.vtensor<[2],si64>, %[[M:[^:]*]]: !torch.vtensor<[],i1>)
// CHECK:         %[[ROWS:.*]] = torch.aten.index.Tensor %[[X]], %{{.*}} : {{.*}} -> !torch.vtensor<[2,3],f32>
// CHECK:         %[[MASKED:.*]] = torch.aten.index.Tensor %[[X]], %{{.*}} : {{.*}} -> !torch.vtensor<[1,4,3],f32>
// CHECK:         %[[NEW:.*]] = torch.aten.add.Scalar %[[X]]
// CHECK-NEXT:    return %[[ROWS]], %[[MASKED]], %[[NEW]] :
func.func @position$not_a_view(%x: !torch.tensor<[4,3],f32>, %i: !torch.vtensor<[2],si64>, %m: !torch.vtensor<[],i1>) -> (!torch.vtensor<[2,3],f32>, !torch.vtensor<[1,4,3],f32>) {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %i : (!torch.vtensor<[2],si64>) -> !torch.list<optional<vtensor>>
  %1 = torch.aten.index.Tensor %x, %0 : !torch.tensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[2,3],f32>
  %2 = torch.prim.ListConstruct %m : (!torch.vtensor<[],i1>) -> !torch.list<optional<vtensor>>
  %3 = torch.aten.index.Tensor %x, %2 : !torch.tensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[1,4,3],f32>
  %4 = torch.aten.add_.Scalar %x, %int1, %int1 : !torch.tensor<[4,3],f32>, !torch.int, !torch.int -> !torch.tensor<[4,3],f32>
  return %1, %3 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[1,4,3],f32>
}
