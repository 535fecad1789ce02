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

// -----

// A static index out of bounds is an IndexError at compile time, as in eager.
// CHECK: model.py:11: index 8 is out of bounds for dimension of size 8
func.func @select$out_of_bounds(%x: !torch.tensor<[8,2],f32>) {
  %int0 = torch.constant.int 0
  %int8 = torch.constant.int 8
  %0 = torch.aten.select.int %x, %int0, %int8 : !torch.tensor<[8,2],f32>, !torch.int, !torch.int -> !torch.tensor<[2],f32> loc("model.py":11:0)
  %1 = torch.aten.zero_ %0 : !torch.tensor<[2],f32> -> !torch.tensor<[2],f32>
  return
}

// -----

// x.add_(x[pos]): the operand is a part of x through a runtime position (eager refuses).
// CHECK: model.py:21: unsupported mutation by torch.aten.add_.Tensor: an operand is a part of the tensor it writes, read at a runtime position
func.func @position$part_of_self(%x: !torch.tensor<[4,3],f32>, %pos: !torch.vtensor<[],si64>) {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %pos : (!torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
  %1 = torch.aten.index.Tensor %x, %0 : !torch.tensor<[4,3],f32>, !torch.list<optional<vtensor>> -> !torch.tensor<[3],f32>
  %2 = torch.aten.add_.Tensor %x, %1, %int1 : !torch.tensor<[4,3],f32>, !torch.tensor<[3],f32>, !torch.int -> !torch.tensor<[4,3],f32> loc("model.py":21:0)
  return
}
