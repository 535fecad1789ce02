// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-shield-constants)' | FileCheck %s
// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-shield-constants, canonicalize)' \
// RUN:   | FileCheck %s --check-prefix=FOLDERS

// Every literal becomes a StableHLO constant (signless integers) behind a marked
// optimization barrier, which torch-mlir's folders cannot see through.
// CHECK-LABEL: func.func @literals(
// CHECK-NOT:     torch.vtensor.literal
// CHECK:         %[[F:.*]] = stablehlo.constant dense<2.500000e+00> : tensor<3xf32>
// CHECK:         %[[FB:.*]] = stablehlo.optimization_barrier {outofplace.constant_shield} %[[F]] : tensor<3xf32>
// CHECK:         %[[FT:.*]] = torch_c.from_builtin_tensor %[[FB]] : tensor<3xf32> -> !torch.vtensor<[3],f32>
// CHECK:         %[[I:.*]] = stablehlo.constant dense<[-2, 7]> : tensor<2xi64>
// CHECK:         %[[IB:.*]] = stablehlo.optimization_barrier {outofplace.constant_shield} %[[I]] : tensor<2xi64>
// CHECK:         %[[IT:.*]] = torch_c.from_builtin_tensor %[[IB]] : tensor<2xi64> -> !torch.vtensor<[2],si64>
// CHECK:         %[[S:.*]] = torch.aten.add.Tensor %{{.*}}, %[[FT]], %{{.*}}
// CHECK:         return %[[S]], %[[IT]]
func.func @literals(%x: !torch.vtensor<[3],f32>) -> (!torch.vtensor<[3],f32>, !torch.vtensor<[2],si64>) {
  %0 = torch.vtensor.literal(dense<2.5> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %1 = torch.vtensor.literal(dense<[-2, 7]> : tensor<2xsi64>) : !torch.vtensor<[2],si64>
  %int1 = torch.constant.int 1
  %2 = torch.aten.add.Tensor %x, %0, %int1 : !torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],f32>
  return %2, %1 : !torch.vtensor<[3],f32>, !torch.vtensor<[2],si64>
}

// -----

// Shielded, the literal reaches none of torch-mlir's folders: canonicalize leaves the
// gt.Scalar (trunc's and sgn's decompositions make it) computed at run time, where its
// folder read the floats as an integer and crashed (test_upstream_canaries.py).
// FOLDERS-LABEL: func.func @compared_with_an_int(
// FOLDERS:         %[[B:.*]] = stablehlo.optimization_barrier {outofplace.constant_shield}
// FOLDERS:         %[[T:.*]] = torch_c.from_builtin_tensor %[[B]]
// FOLDERS:         torch.aten.gt.Scalar %[[T]], %{{.*}} : !torch.vtensor<[3],f32>, !torch.int
func.func @compared_with_an_int() -> !torch.vtensor<[3],i1> {
  %0 = torch.vtensor.literal(dense<[1.5, -2.5, 3.5]> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %int0 = torch.constant.int 0
  %1 = torch.aten.gt.Scalar %0, %int0 : !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],i1>
  return %1 : !torch.vtensor<[3],i1>
}
