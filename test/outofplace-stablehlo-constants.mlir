// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-stablehlo-constants)' | FileCheck %s

// A tensor arith.constant (torch-mlir's lowering of `aten.mul.Scalar` leaves one) is a
// stablehlo.constant of the same value and type.
// CHECK-LABEL: func.func @tensor_constant
// CHECK-NOT:     arith.constant
// CHECK:         %[[C:.*]] = stablehlo.constant dense<2> : tensor<1xi64>
// CHECK:         %[[C2:.*]] = stablehlo.constant dense<[1.500000e+00, 2.500000e+00]> : tensor<2xf32>
// CHECK:         return %[[C]], %[[C2]]
func.func @tensor_constant() -> (tensor<1xi64>, tensor<2xf32>) {
  %0 = arith.constant dense<2> : tensor<1xi64>
  %1 = arith.constant dense<[1.5, 2.5]> : tensor<2xf32>
  return %0, %1 : tensor<1xi64>, tensor<2xf32>
}

// -----

// A scalar arith.constant has no StableHLO form: it stays.
// CHECK-LABEL: func.func @scalar_constant
// CHECK:         arith.constant 3 : index
// CHECK-NOT:     stablehlo.constant
func.func @scalar_constant() -> index {
  %0 = arith.constant 3 : index
  return %0 : index
}

// -----

// tensor.empty of a static shape (torch.empty) is zeros; of a dynamic one it stays.
// CHECK-LABEL: func.func @empty
// CHECK:         %[[F:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<2x3xf32>
// CHECK:         %[[I:.*]] = stablehlo.constant dense<0> : tensor<4xi32>
// CHECK:         %[[D:.*]] = tensor.empty(%arg0) : tensor<?xf32>
// CHECK:         return %[[F]], %[[I]], %[[D]]
func.func @empty(%n: index) -> (tensor<2x3xf32>, tensor<4xi32>, tensor<?xf32>) {
  %0 = tensor.empty() : tensor<2x3xf32>
  %1 = tensor.empty() : tensor<4xi32>
  %2 = tensor.empty(%n) : tensor<?xf32>
  return %0, %1, %2 : tensor<2x3xf32>, tensor<4xi32>, tensor<?xf32>
}
