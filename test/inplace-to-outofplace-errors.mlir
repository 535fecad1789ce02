// RUN: not outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(inplace-to-outofplace)' 2>&1 | FileCheck %s

// CHECK: model.py:7: unsupported mutation by torch.aten.normal_: it has no out-of-place twin
func.func @normal_$no_twin(%x: !torch.tensor<[4],f32>) {
  %mean = torch.constant.float 0.000000e+00
  %std = torch.constant.float 1.000000e+00
  %none = torch.constant.none
  %0 = torch.operator "torch.aten.normal_"(%x, %mean, %std, %none) : (!torch.tensor<[4],f32>, !torch.float, !torch.float, !torch.none) -> !torch.tensor<[4],f32> loc("model.py":7:0)
  return
}

// -----

// CHECK: model.py:9: unsupported mutation by torch.aten.t_: it changes the shape or strides of a tensor in place
func.func @t_$metadata(%x: !torch.tensor<[4,4],f32>) {
  %0 = torch.operator "torch.aten.t_"(%x) : (!torch.tensor<[4,4],f32>) -> !torch.tensor<[4,4],f32> loc(callsite("model.py":9:0 at "main.py":1:0))
  return
}
