// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-fold-empty-tensors)' | FileCheck %s

// A read that makes a tensor without elements becomes an empty literal; the op that made
// it is gone (torch-mlir lowers some of these, like this slice past the end, to invalid
// StableHLO).
// CHECK-LABEL: func.func @slice_past_the_end(
// CHECK:         %[[EMPTY:.*]] = torch.vtensor.literal(dense<0.000000e+00> : tensor<0x3xf16>) : !torch.vtensor<[0,3],f16>
// CHECK-NOT:     torch.aten.slice.Tensor
// CHECK:         %[[SUM:.*]] = torch.aten.sum %[[EMPTY]]
// CHECK:         return %[[SUM]]
func.func @slice_past_the_end(%x: !torch.vtensor<[1,3],f16>) -> !torch.vtensor<[],f16> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %none = torch.constant.none
  %0 = torch.aten.slice.Tensor %x, %int0, %int2, %int2, %int1 : !torch.vtensor<[1,3],f16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[0,3],f16>
  %1 = torch.aten.sum %0, %none : !torch.vtensor<[0,3],f16>, !torch.none -> !torch.vtensor<[],f16>
  return %1 : !torch.vtensor<[],f16>
}

// -----

// Integer tensors keep their signed element type inside the literal; arguments and
// non-empty tensors are left alone.
// CHECK-LABEL: func.func @empty_gather(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[0],si64>
// CHECK:         %[[EMPTY:.*]] = torch.vtensor.literal(dense<0> : tensor<0xsi64>) : !torch.vtensor<[0],si64>
// CHECK-NOT:     torch.aten.index.Tensor
// CHECK:         return %[[EMPTY]], %[[X]]
func.func @empty_gather(%x: !torch.vtensor<[0],si64>, %i: !torch.vtensor<[0],si64>) -> (!torch.vtensor<[0],si64>, !torch.vtensor<[0],si64>) {
  %list = torch.prim.ListConstruct %i : (!torch.vtensor<[0],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index.Tensor %x, %list : !torch.vtensor<[0],si64>, !torch.list<optional<vtensor>> -> !torch.vtensor<[0],si64>
  return %0, %x : !torch.vtensor<[0],si64>, !torch.vtensor<[0],si64>
}
