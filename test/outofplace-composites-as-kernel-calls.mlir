// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-composites-as-kernel-calls)' \
// RUN:   | FileCheck %s

// Batch norm's forward: eager's `_native_batch_norm_legit.out`, the running statistics
// (operands 3, 4) updated in place (aliased to results 3, 4), the output and the saved
// statistics written into XLA's result buffers (out=, save_mean=, save_invstd= are
// results 0, 1, 2); the decomposition erased.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %[[X:.*]]: tensor<8x4x5x5xf32>, %[[W:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>, %[[RM:.*]]: tensor<4xf32>, %[[RV:.*]]: tensor<4xf32>
// CHECK-NEXT:    %[[R:.*]]:5 = stablehlo.custom_call @"aten::kernel"(%[[X]], %[[W]], %[[B]], %[[RM]], %[[RV]]) {api_version = 4 : i32, backend_config = {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64, outofplace.op = "aten::_native_batch_norm_legit.out", outofplace.operands = array<i64: 0, 1, 2, 3, 4>, outofplace.out.10 = 2 : i64, outofplace.out.8 = 0 : i64, outofplace.out.9 = 1 : i64, outofplace.results = array<i64: -1, -1, -1, 3, 4>, outofplace.returns = array<i64>, outofplace.tensors = array<i64: 0, 1, 2, 3, 4>, training = true}, operand_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<0> : tensor<1xindex>, dense<0> : tensor<1xindex>, dense<0> : tensor<1xindex>, dense<0> : tensor<1xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [3], operand_index = 3, operand_tuple_indices = []>, #stablehlo.output_operand_alias<output_tuple_indices = [4], operand_index = 4, operand_tuple_indices = []>], result_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<0> : tensor<1xindex>, dense<0> : tensor<1xindex>, dense<0> : tensor<1xindex>, dense<0> : tensor<1xindex>]} : (tensor<8x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<8x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NEXT:    return %[[R]]#0, %[[R]]#1, %[[R]]#2, %[[R]]#3, %[[R]]#4
// CHECK-NOT:   @aten._native_batch_norm_legit_functional.region0_body
func.func @forward(%x: tensor<8x4x5x5xf32>, %w: tensor<4xf32>, %b: tensor<4xf32>, %rm: tensor<4xf32>, %rv: tensor<4xf32>) -> (tensor<8x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0:5 = stablehlo.composite "aten._native_batch_norm_legit_functional" %x, %w, %b, %rm, %rv {composite_attributes = {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64, outofplace.kernel = "aten::_native_batch_norm_legit.out", outofplace.returns = array<i64>, outofplace.tensors = array<i64: 0, 1, 2, 3, 4>, outofplace.written = array<i64: 8, 9, 10, 3, 4>, training = true}, decomposition = @aten._native_batch_norm_legit_functional.region0_body} : (tensor<8x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<8x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %0#0, %0#1, %0#2, %0#3, %0#4 : tensor<8x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
func.func private @aten._native_batch_norm_legit_functional.region0_body(%x: tensor<8x4x5x5xf32>, %w: tensor<4xf32>, %b: tensor<4xf32>, %rm: tensor<4xf32>, %rv: tensor<4xf32>) -> (tensor<8x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  return %x, %w, %b, %rm, %rv : tensor<8x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// The backward, the input's and the bias' gradients asked for: the op itself, its
// returns 0 and 2 copied into the results, running_mean and running_var (3, 4) None,
// output_mask's bools as integers.
// CHECK-LABEL: func.func @backward(
// CHECK-NEXT:    %[[R:.*]]:2 = stablehlo.custom_call @"aten::kernel"(%arg0, %arg1, %arg2, %arg3, %arg4) {api_version = 4 : i32, backend_config = {eps = 1.000000e-05 : f64, outofplace.op = "aten::native_batch_norm_backward", outofplace.operands = array<i64: 0, 1, 2, 3, 4>, outofplace.results = array<i64: -1, -1, -1, -1, -1>, outofplace.returns = array<i64: 0, 2>, outofplace.tensors = array<i64: 0, 1, 2, 5, 6>, output_mask = array<i64: 1, 0, 1>, train = true}, {{.*}}} : (tensor<8x4x5x5xf64>, tensor<8x4x5x5xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>) -> (tensor<8x4x5x5xf64>, tensor<4xf64>)
// CHECK-NEXT:    return %[[R]]#0, %[[R]]#1
func.func @backward(%g: tensor<8x4x5x5xf64>, %x: tensor<8x4x5x5xf64>, %w: tensor<4xf64>, %mean: tensor<4xf64>, %invstd: tensor<4xf64>) -> (tensor<8x4x5x5xf64>, tensor<4xf64>) {
  %0:2 = stablehlo.composite "aten.native_batch_norm_backward" %g, %x, %w, %mean, %invstd {composite_attributes = {eps = 1.000000e-05 : f64, outofplace.kernel = "aten::native_batch_norm_backward", outofplace.returns = array<i64: 0, 2>, outofplace.tensors = array<i64: 0, 1, 2, 5, 6>, outofplace.written = array<i64>, output_mask = array<i1: true, false, true>, train = true}, decomposition = @aten.native_batch_norm_backward.region1_body} : (tensor<8x4x5x5xf64>, tensor<8x4x5x5xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>) -> (tensor<8x4x5x5xf64>, tensor<4xf64>)
  return %0#0, %0#1 : tensor<8x4x5x5xf64>, tensor<4xf64>
}
func.func private @aten.native_batch_norm_backward.region1_body(%g: tensor<8x4x5x5xf64>, %x: tensor<8x4x5x5xf64>, %w: tensor<4xf64>, %mean: tensor<4xf64>, %invstd: tensor<4xf64>) -> (tensor<8x4x5x5xf64>, tensor<4xf64>) {
  return %g, %w : tensor<8x4x5x5xf64>, tensor<4xf64>
}

// bfloat16: eager's kernel would compute in another dtype than the decomposition's
// float32: the composite stays, and its decomposition.
// CHECK-LABEL: func.func @bfloat16(
// CHECK-NEXT:    stablehlo.composite "aten.native_batch_norm_backward"
// CHECK:       func.func private @aten.native_batch_norm_backward.region2_body(
func.func @bfloat16(%g: tensor<8x4xbf16>, %x: tensor<8x4xbf16>, %w: tensor<4xbf16>, %mean: tensor<4xbf16>, %invstd: tensor<4xbf16>) -> tensor<8x4xbf16> {
  %0 = stablehlo.composite "aten.native_batch_norm_backward" %g, %x, %w, %mean, %invstd {composite_attributes = {eps = 1.000000e-05 : f64, outofplace.kernel = "aten::native_batch_norm_backward", outofplace.returns = array<i64: 0>, outofplace.tensors = array<i64: 0, 1, 2, 5, 6>, outofplace.written = array<i64>, output_mask = array<i1: true, false, false>, train = true}, decomposition = @aten.native_batch_norm_backward.region2_body} : (tensor<8x4xbf16>, tensor<8x4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>) -> tensor<8x4xbf16>
  return %0 : tensor<8x4xbf16>
}
func.func private @aten.native_batch_norm_backward.region2_body(%g: tensor<8x4xbf16>, %x: tensor<8x4xbf16>, %w: tensor<4xbf16>, %mean: tensor<4xbf16>, %invstd: tensor<4xbf16>) -> tensor<8x4xbf16> {
  return %g : tensor<8x4xbf16>
}

// bfloat16 where eager's kernel computes it as the decomposition does
// (`outofplace.bfloat16`: grouped_mm, products in float32 rounded once): called, the
// integer offsets passed as they are, the attribute not passed on.
// CHECK-LABEL: func.func @grouped_mm(
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.custom_call @"aten::kernel"(%arg0, %arg1, %arg2) {api_version = 4 : i32, backend_config = {outofplace.op = "aten::_grouped_mm", outofplace.operands = array<i64: 0, 1, 2>, outofplace.results = array<i64: -1, -1, -1>, outofplace.returns = array<i64: 0>, outofplace.tensors = array<i64: 0, 1, 2>}, {{.*}}} : (tensor<2x8xbf16>, tensor<4x8x16xbf16>, tensor<4xi32>) -> tensor<2x16xbf16>
// CHECK-NEXT:    return %[[Y]]
// CHECK-NOT:   region3_body
func.func @grouped_mm(%a: tensor<2x8xbf16>, %b: tensor<4x8x16xbf16>, %offs: tensor<4xi32>) -> tensor<2x16xbf16> {
  %0 = stablehlo.composite "aten._grouped_mm" %a, %b, %offs {composite_attributes = {outofplace.bfloat16 = true, outofplace.kernel = "aten::_grouped_mm", outofplace.returns = array<i64: 0>, outofplace.tensors = array<i64: 0, 1, 2>, outofplace.written = array<i64>}, decomposition = @aten._grouped_mm.region3_body} : (tensor<2x8xbf16>, tensor<4x8x16xbf16>, tensor<4xi32>) -> tensor<2x16xbf16>
  return %0 : tensor<2x16xbf16>
}
func.func private @aten._grouped_mm.region3_body(%a: tensor<2x8xbf16>, %b: tensor<4x8x16xbf16>, %offs: tensor<4xi32>) -> tensor<2x16xbf16> {
  %0 = stablehlo.slice %b [0:1, 0:8, 0:16] : (tensor<4x8x16xbf16>) -> tensor<1x8x16xbf16>
  %1 = stablehlo.reshape %0 : (tensor<1x8x16xbf16>) -> tensor<8x16xbf16>
  %2 = stablehlo.dot_general %a, %1, contracting_dims = [1] x [0] : (tensor<2x8xbf16>, tensor<8x16xbf16>) -> tensor<2x16xbf16>
  return %2 : tensor<2x16xbf16>
}
