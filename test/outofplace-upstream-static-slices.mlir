// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-upstream-static-slices)' \
// RUN:   | FileCheck %s

// A slice with constant bounds: stablehlo.slice, bounds clamped as eager clamps them.
// CHECK-LABEL: func.func @slice(
// CHECK:         %[[X:.*]] = torch_c.to_builtin_tensor
// CHECK:         %[[S:.*]] = stablehlo.slice %[[X]] [0:1, 2:3] : (tensor<1x3xf32>) -> tensor<1x1xf32>
// CHECK:         torch_c.from_builtin_tensor %[[S]]
func.func @slice(%x: !torch.vtensor<[1,3],f32>) -> !torch.vtensor<[1,1],f32> {
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %intm1 = torch.constant.int -1
  %end = torch.constant.int 9223372036854775807
  %0 = torch.aten.slice.Tensor %x, %int1, %intm1, %end, %int3 : !torch.vtensor<[1,3],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,1],f32>
  return %0 : !torch.vtensor<[1,1],f32>
}
