// RUN: not outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-lower-updates)' 2>&1 | FileCheck %s

// A bool mask with an index tensor of two elements: the number of trues (known only at
// run time) would broadcast with the other index.
// CHECK: model.py:3: unsupported mutation by torch.aten.index_put: a bool mask together with index tensors of more than one element in one index
func.func @mask_and_index(%b: !torch.vtensor<[2,3],f32>, %m: !torch.vtensor<[2],i1>, %i: !torch.vtensor<[2],si64>, %v: !torch.vtensor<[],f32>) -> !torch.vtensor<[2,3],f32> {
  %false = torch.constant.bool false
  %list = torch.prim.ListConstruct %m, %i : (!torch.vtensor<[2],i1>, !torch.vtensor<[2],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index_put %b, %list, %v, %false : !torch.vtensor<[2,3],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[],f32>, !torch.bool -> !torch.vtensor<[2,3],f32> loc("model.py":3:0)
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

// CHECK: model.py:4: unsupported mutation by torch.aten.scatter_reduce.two: reduce="mean" of a bool tensor
func.func @mean_of_bool(%x: !torch.vtensor<[3],i1>, %i: !torch.vtensor<[3],si64>, %s: !torch.vtensor<[3],i1>) -> !torch.vtensor<[3],i1> {
  %int0 = torch.constant.int 0
  %str = torch.constant.str "mean"
  %true = torch.constant.bool true
  %0 = torch.aten.scatter_reduce.two %x, %int0, %i, %s, %str, %true : !torch.vtensor<[3],i1>, !torch.int, !torch.vtensor<[3],si64>, !torch.vtensor<[3],i1>, !torch.str, !torch.bool -> !torch.vtensor<[3],i1> loc("model.py":4:0)
  return %0 : !torch.vtensor<[3],i1>
}
