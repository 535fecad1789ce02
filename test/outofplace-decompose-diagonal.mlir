// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-decompose-diagonal)' \
// RUN:   | FileCheck %s

// diagonal(offset 1, dims 0 and 2) of a 3x4x5 tensor: dims 0 and 2 moved last
// (permute [1, 0, 2]), flattened to 4x15, then every 6th element from 1 (1, 7, 13): 3 of them.
// CHECK-LABEL: func.func @diagonal(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[3,4,5],f32>
// CHECK-NOT:     torch.aten.diagonal
// CHECK:         %[[P:.*]] = torch.aten.permute %[[X]], %{{.*}} : !torch.vtensor<[3,4,5],f32>, !torch.list<int> -> !torch.vtensor<[4,3,5],f32>
// CHECK:         %[[F:.*]] = torch.aten.view %[[P]], %{{.*}} : !torch.vtensor<[4,3,5],f32>, !torch.list<int> -> !torch.vtensor<[4,15],f32>
// CHECK:         %[[D:.*]] = torch.aten.slice.Tensor %[[F]], %int1{{.*}}, %int1{{.*}}, %int14, %int6 : {{.*}} -> !torch.vtensor<[4,3],f32>
// CHECK:         return %[[D]]
func.func @diagonal(%x: !torch.vtensor<[3,4,5],f32>) -> !torch.vtensor<[4,3],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %0 = torch.aten.diagonal %x, %int1, %int0, %int2 : !torch.vtensor<[3,4,5],f32>, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4,3],f32>
  return %0 : !torch.vtensor<[4,3],f32>
}
