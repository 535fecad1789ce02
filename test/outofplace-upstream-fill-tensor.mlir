// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-upstream-fill-tensor)' \
// RUN:   | FileCheck %s

// fill.Tensor (no StableHLO lowering in torch-mlir) is the copy of the value into self.
// CHECK-LABEL: func.func @fill(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[4],f32>, %[[V:[^:]*]]: !torch.vtensor<[],f32>
// CHECK:         %[[FALSE:.*]] = torch.constant.bool false
// CHECK:         %[[NEW:.*]] = torch.aten.copy %[[X]], %[[V]], %[[FALSE]] : !torch.vtensor<[4],f32>, !torch.vtensor<[],f32>, !torch.bool -> !torch.vtensor<[4],f32>
// CHECK-NOT:     torch.aten.fill
// CHECK:         return %[[NEW]]
func.func @fill(%x: !torch.vtensor<[4],f32>, %v: !torch.vtensor<[],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.fill.Tensor %x, %v : !torch.vtensor<[4],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
