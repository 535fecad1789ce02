// RUN: not outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-lower-collectives)' 2>&1 | FileCheck %s

// A reduce op XLA has no body for is refused, naming the op and its line.
// CHECK: model.py:3: unsupported mutation by torch._c10d_functional.all_reduce: collective: reduce op 'premul_sum'
module attributes {outofplace.process_groups = {"0" = [array<i64: 0, 1>]}, outofplace.world_size = 2 : i64} {
func.func @unsupported(%x: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %op = torch.constant.str "premul_sum"
  %group = torch.constant.str "0"
  %0 = torch.operator "torch._c10d_functional.all_reduce"(%x, %op, %group) : (!torch.vtensor<[4],f32>, !torch.str, !torch.str) -> !torch.vtensor<[4],f32> loc("model.py":3:0)
  return %0 : !torch.vtensor<[4],f32>
}
}

// -----

// A group the module does not name (traced without torch.distributed's groups) is refused.
// CHECK: model.py:4: unsupported mutation by torch._c10d_functional.all_gather_into_tensor: collective: process group '5' is not known to the program
module attributes {outofplace.process_groups = {"0" = [array<i64: 0, 1>]}, outofplace.world_size = 2 : i64} {
func.func @unknown_group(%x: !torch.vtensor<[4],f32>) -> !torch.vtensor<[8],f32> {
  %two = torch.constant.int 2
  %group = torch.constant.str "5"
  %0 = torch.operator "torch._c10d_functional.all_gather_into_tensor"(%x, %two, %group) : (!torch.vtensor<[4],f32>, !torch.int, !torch.str) -> !torch.vtensor<[8],f32> loc("model.py":4:0)
  return %0 : !torch.vtensor<[8],f32>
}
}

// -----

// Uneven splits of all_to_all_single are refused.
// CHECK: model.py:5: unsupported mutation by torch._c10d_functional.all_to_all_single: collective: all_to_all_single with uneven splits
module attributes {outofplace.process_groups = {"0" = [array<i64: 0, 1>]}, outofplace.world_size = 2 : i64} {
func.func @uneven(%x: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %one = torch.constant.int 1
  %three = torch.constant.int 3
  %split = torch.prim.ListConstruct %one, %three : (!torch.int, !torch.int) -> !torch.list<int>
  %group = torch.constant.str "0"
  %0 = torch.operator "torch._c10d_functional.all_to_all_single"(%x, %split, %split, %group) : (!torch.vtensor<[4],f32>, !torch.list<int>, !torch.list<int>, !torch.str) -> !torch.vtensor<[4],f32> loc("model.py":5:0)
  return %0 : !torch.vtensor<[4],f32>
}
}
