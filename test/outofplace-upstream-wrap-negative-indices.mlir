// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-upstream-wrap-negative-indices)' | FileCheck %s

// A read torch-mlir lowers (its gather clamps a negative index to 0) gets its index
// wrapped: where(i < 0, i + 5, i).
// CHECK-LABEL: func.func @read(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4,5],f32>, %[[I:[^:]*]]: !torch.vtensor<[3],si64>
// CHECK:         %[[NONE:.*]] = torch.constant.none
// CHECK:         %[[FIVE:.*]] = torch.constant.int 5
// CHECK:         %[[NEGATIVE:.*]] = torch.aten.lt.Scalar %[[I]]
// CHECK:         %[[SHIFTED:.*]] = torch.aten.add.Scalar %[[I]], %[[FIVE]]
// CHECK:         %[[WRAPPED:.*]] = torch.aten.where.self %[[NEGATIVE]], %[[SHIFTED]], %[[I]]
// CHECK:         %[[LIST:.*]] = torch.prim.ListConstruct %[[NONE]], %[[WRAPPED]]
// CHECK:         torch.aten.index.Tensor %[[X]], %[[LIST]]
func.func @read(%x: !torch.vtensor<[4,5],f32>, %i: !torch.vtensor<[3],si64>) -> !torch.vtensor<[4,3],f32> {
  %none = torch.constant.none
  %list = torch.prim.ListConstruct %none, %i : (!torch.none, !torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index.Tensor %x, %list : !torch.vtensor<[4,5],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[4,3],f32>
  return %0 : !torch.vtensor<[4,3],f32>
}

// -----

// A bool mask is no position; a 0-d index after it wraps by the size of its own dimension.
// CHECK-LABEL: func.func @mask_then_position(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[2,3,4],f32>, %[[M:[^:]*]]: !torch.vtensor<[2,3],i1>, %[[P:[^:]*]]: !torch.vtensor<[],si64>
// CHECK:         %[[FOUR:.*]] = torch.constant.int 4
// CHECK:         %[[NEGATIVE:.*]] = torch.aten.lt.Scalar %[[P]]
// CHECK:         %[[SHIFTED:.*]] = torch.aten.add.Scalar %[[P]], %[[FOUR]]
// CHECK:         %[[WRAPPED:.*]] = torch.aten.where.self %[[NEGATIVE]], %[[SHIFTED]], %[[P]]
// CHECK:         %[[LIST:.*]] = torch.prim.ListConstruct %[[M]], %[[WRAPPED]]
// CHECK:         torch.aten.index.Tensor %[[X]], %[[LIST]]
func.func @mask_then_position(%x: !torch.vtensor<[2,3,4],f32>, %m: !torch.vtensor<[2,3],i1>, %p: !torch.vtensor<[],si64>) -> !torch.vtensor<[2],f32> {
  %list = torch.prim.ListConstruct %m, %p : (!torch.vtensor<[2,3],i1>, !torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index.Tensor %x, %list : !torch.vtensor<[2,3,4],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[2],f32>
  return %0 : !torch.vtensor<[2],f32>
}

// -----

// A dynamic dimension (dynamic_shapes): the index wraps by its runtime size.
// CHECK-LABEL: func.func @dynamic_dimension(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[?,3],f32>, %[[P:[^:]*]]: !torch.vtensor<[],si64>
// CHECK:         %[[DIM:.*]] = torch.constant.int 0
// CHECK-NEXT:    %[[SIZE:.*]] = torch.aten.size.int %[[X]], %[[DIM]] : !torch.vtensor<[?,3],f32>, !torch.int -> !torch.int
// CHECK:         %[[NEGATIVE:.*]] = torch.aten.lt.Scalar %[[P]]
// CHECK:         %[[SHIFTED:.*]] = torch.aten.add.Scalar %[[P]], %[[SIZE]]
// CHECK:         %[[WRAPPED:.*]] = torch.aten.where.self %[[NEGATIVE]], %[[SHIFTED]], %[[P]]
// CHECK:         %[[LIST:.*]] = torch.prim.ListConstruct %[[WRAPPED]]
// CHECK:         torch.aten.index.Tensor %[[X]], %[[LIST]]
func.func @dynamic_dimension(%x: !torch.vtensor<[?,3],f32>, %p: !torch.vtensor<[],si64>) -> !torch.vtensor<[3],f32> {
  %list = torch.prim.ListConstruct %p : (!torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index.Tensor %x, %list : !torch.vtensor<[?,3],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[3],f32>
  return %0 : !torch.vtensor<[3],f32>
}
