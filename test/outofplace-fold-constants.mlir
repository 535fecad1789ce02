// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-fold-constants)' | FileCheck %s

// A constant tensor times a negative int is folded by PyTorch: torch-mlir's own folder
// makes [1.8e19, 0] of it (the -1 read as an unsigned 2**64 - 1).
// CHECK-LABEL: func.func @negative_scalar(
// CHECK:         %[[C:.*]] = torch.vtensor.literal(dense<[1.000000e+00, -0.000000e+00]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
// CHECK-NOT:     torch.aten.mul.Scalar
// CHECK:         torch.aten.add.Tensor %{{.*}}, %[[C]]
func.func @negative_scalar(%x: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {
  %int-1 = torch.constant.int -1
  %int1 = torch.constant.int 1
  %0 = torch.vtensor.literal(dense<[-1.0, 0.0]> : tensor<2xf32>) : !torch.vtensor<[2],f32>
  %1 = torch.aten.mul.Scalar %0, %int-1 : !torch.vtensor<[2],f32>, !torch.int -> !torch.vtensor<[2],f32>
  %2 = torch.aten.add.Tensor %x, %1, %int1 : !torch.vtensor<[2],f32>, !torch.vtensor<[2],f32>, !torch.int -> !torch.vtensor<[2],f32>
  return %2 : !torch.vtensor<[2],f32>
}

// -----

// Half precision, and a chain: each constant step is folded in turn. An op with a
// non-constant operand stays.
// CHECK-LABEL: func.func @half_chain(
// CHECK:         %[[C:.*]] = torch.vtensor.literal(dense<-2.000000e+00> : tensor<f16>) : !torch.vtensor<[],f16>
// CHECK-NOT:     torch.aten.mul.Scalar
// CHECK:         %[[R:.*]] = torch.aten.mul.Tensor %{{.*}}, %[[C]]
// CHECK:         return %[[R]]
func.func @half_chain(%x: !torch.vtensor<[2],f16>) -> !torch.vtensor<[2],f16> {
  %int-1 = torch.constant.int -1
  %int2 = torch.constant.int 2
  %0 = torch.vtensor.literal(dense<1.0> : tensor<f16>) : !torch.vtensor<[],f16>
  %1 = torch.aten.mul.Scalar %0, %int-1 : !torch.vtensor<[],f16>, !torch.int -> !torch.vtensor<[],f16>
  %2 = torch.aten.mul.Scalar %1, %int2 : !torch.vtensor<[],f16>, !torch.int -> !torch.vtensor<[],f16>
  %3 = torch.aten.mul.Tensor %x, %2 : !torch.vtensor<[2],f16>, !torch.vtensor<[],f16> -> !torch.vtensor<[2],f16>
  return %3 : !torch.vtensor<[2],f16>
}

// -----

// A scalar operand traced as a 0-d tensor (`t.floor_divide_(-2)`) and a rounding mode
// are constants too: torch-mlir's div folder divided -2 as unsigned (zeros).
// CHECK-LABEL: func.func @scalar_tensor_and_mode(
// CHECK:         %[[C:.*]] = torch.vtensor.literal(dense<[0, -1, -1, -2, -2]> : tensor<5xsi64>)
// CHECK-NOT:     torch.aten.div.Tensor_mode
// CHECK:         return %[[C]]
func.func @scalar_tensor_and_mode() -> !torch.vtensor<[5],si64> {
  %0 = torch.vtensor.literal(dense<[0, 1, 2, 3, 4]> : tensor<5xsi64>) : !torch.vtensor<[5],si64>
  %int-2 = torch.constant.int -2
  %1 = torch.prim.NumToTensor.Scalar %int-2 : !torch.int -> !torch.vtensor<[],si64>
  %str = torch.constant.str "floor"
  %2 = torch.aten.div.Tensor_mode %0, %1, %str : !torch.vtensor<[5],si64>, !torch.vtensor<[],si64>, !torch.str -> !torch.vtensor<[5],si64>
  return %2 : !torch.vtensor<[5],si64>
}

// -----

// full_like reads only its argument's shape and dtype: a constant, folded here (torch-mlir
// made it a literal after this pass, for its folders to misread).
// CHECK-LABEL: func.func @full_like_of_an_argument(
// CHECK:         %[[C:.*]] = torch.vtensor.literal(dense<2.500000e+00> : tensor<3xf32>)
// CHECK-NOT:     torch.aten.full_like
// CHECK:         return %[[C]]
func.func @full_like_of_an_argument(%x: !torch.vtensor<[3],f32>) -> !torch.vtensor<[3],f32> {
  %float = torch.constant.float 2.5
  %none = torch.constant.none
  %0 = torch.aten.full_like %x, %float, %none, %none, %none, %none, %none : !torch.vtensor<[3],f32>, !torch.float, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[3],f32>
  return %0 : !torch.vtensor<[3],f32>
}
