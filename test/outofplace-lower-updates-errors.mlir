// RUN: not outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-lower-updates)' 2>&1 | FileCheck %s

// A bool mask with another index tensor: the number of trues (known only at run time)
// would broadcast with the other index.
// CHECK: model.py:3: unsupported mutation by torch.aten.index_put: a bool mask together with other index tensors in one index
func.func @mask_and_index(%b: !torch.vtensor<[2,3],f32>, %m: !torch.vtensor<[2],i1>, %i: !torch.vtensor<[1],si64>, %v: !torch.vtensor<[],f32>) -> !torch.vtensor<[2,3],f32> {
  %false = torch.constant.bool false
  %list = torch.prim.ListConstruct %m, %i : (!torch.vtensor<[2],i1>, !torch.vtensor<[1],si64>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index_put %b, %list, %v, %false : !torch.vtensor<[2,3],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[],f32>, !torch.bool -> !torch.vtensor<[2,3],f32> loc("model.py":3:0)
  return %0 : !torch.vtensor<[2,3],f32>
}
