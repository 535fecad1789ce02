// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-name-kernel-results)' --mlir-print-debuginfo \
// RUN:   | FileCheck %s

// A kernel call with several results: each written root's version, named by
// inplace-to-outofplace in `outofplace.result_names`, becomes an identity reshape
// carrying the name (MLIR names an op's results together); the attribute is dropped and
// the op's own result (named "") is left as it is.
// CHECK-LABEL: func.func @two_caches(
// CHECK:         %[[CALL:.*]]:3 = stablehlo.custom_call @"demo::write_kv"
// CHECK-NOT:       outofplace.result_names
// CHECK-NEXT:    %[[K:.*]] = stablehlo.reshape %[[CALL]]#1 : (tensor<8x8xf32>) -> tensor<8x8xf32> loc(#[[KLOC:.*]])
// CHECK-NEXT:    %[[V:.*]] = stablehlo.reshape %[[CALL]]#2 : (tensor<8x8xf32>) -> tensor<8x8xf32> loc(#[[VLOC:.*]])
// CHECK-NEXT:    return %[[CALL]]#0, %[[K]], %[[V]]
// CHECK-DAG:   #[[KLOC]] = loc("k_cache_modified"
// CHECK-DAG:   #[[VLOC]] = loc("v_cache_modified"
func.func @two_caches(%k: tensor<8x8xf32>, %v: tensor<8x8xf32>) -> (tensor<2xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %0:3 = stablehlo.custom_call @"demo::write_kv"(%k, %v) {api_version = 4 : i32, backend_config = {outofplace.op = "demo::write_kv"}, outofplace.result_names = ["", "k_cache_modified", "v_cache_modified"], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [1], operand_index = 0, operand_tuple_indices = []>, #stablehlo.output_operand_alias<output_tuple_indices = [2], operand_index = 1, operand_tuple_indices = []>]} : (tensor<8x8xf32>, tensor<8x8xf32>) -> (tensor<2xf32>, tensor<8x8xf32>, tensor<8x8xf32>)
  return %0#0, %0#1, %0#2 : tensor<2xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}
