// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-kernel-calls)' | FileCheck %s

// A kernel writing one argument: a custom_call targeting the op, its result aliasing
// the written operand, its float argument in backend_config (the schema needs no
// registry: inplace-to-outofplace recorded it on the op).
// CHECK-LABEL: func.func @paged_writer(
// CHECK-SAME:    %[[C:[^:]*]]: !torch.vtensor<[16,8],f32>, %[[I:[^:]*]]: !torch.vtensor<[2],si64>, %[[K:[^:]*]]: !torch.vtensor<[2,8],f32>
// CHECK-DAG:     %[[CB:.*]] = torch_c.to_builtin_tensor %[[C]] : !torch.vtensor<[16,8],f32> -> tensor<16x8xf32>
// CHECK-DAG:     %[[IB:.*]] = torch_c.to_builtin_tensor %[[I]] : !torch.vtensor<[2],si64> -> tensor<2xi64>
// CHECK-DAG:     %[[KB:.*]] = torch_c.to_builtin_tensor %[[K]] : !torch.vtensor<[2,8],f32> -> tensor<2x8xf32>
// CHECK:         %[[NEW:.*]] = stablehlo.custom_call @"demo::write_kv"(%[[CB]], %[[IB]], %[[KB]])
// CHECK-SAME:      api_version = 4 : i32
// CHECK-SAME:      backend_config = {outofplace.op = "demo::write_kv", outofplace.operands = array<i64: 0, 1, 2>, outofplace.results = array<i64: 0, -1, -1>, outofplace.tensors = array<i64: 0, 1, 2>, scale = 2.000000e+00 : f64}
// CHECK-SAME:      output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>]
// CHECK-SAME:      (tensor<16x8xf32>, tensor<2xi64>, tensor<2x8xf32>) -> tensor<16x8xf32>
// CHECK-NOT:     has_side_effect = true
// CHECK:         %[[T:.*]] = torch_c.from_builtin_tensor %[[NEW]] : tensor<16x8xf32> -> !torch.vtensor<[16,8],f32>
// CHECK:         return %[[T]]
func.func @paged_writer(%cache: !torch.vtensor<[16,8],f32>, %idx: !torch.vtensor<[2],si64>, %k: !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[16,8],f32> {
  %scale = torch.constant.float 2.000000e+00
  %0 = torch.operator "torch.demo.write_kv"(%cache, %idx, %k, %scale) {outofplace.arguments = ["cache", "idx", "k", "scale"], outofplace.kernel = "demo::write_kv", outofplace.side_effect = false, outofplace.written = [0]} : (!torch.vtensor<[16,8],f32>, !torch.vtensor<[2],si64>, !torch.vtensor<[2,8],f32>, !torch.float) -> !torch.vtensor<[16,8],f32>
  return %0 : !torch.vtensor<[16,8],f32>
}

// -----

// Two written arguments and a result of its own: the op's result first, then one per
// written argument in schema order, each aliasing its operand; an int list, a bool and a
// string argument in backend_config, None left out; a seeded random op has a side effect.
// CHECK-LABEL: func.func @two_caches(
// CHECK:         %{{[0-9]+}}:3 = stablehlo.custom_call @"demo::append.rows"(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}})
// CHECK-SAME:      backend_config = {causal = true, layout = "bshd", outofplace.op = "demo::append.rows", outofplace.operands = array<i64: 0, 1, 2>, outofplace.results = array<i64: 1, 2, -1>, outofplace.tensors = array<i64: 0, 2, 3>, window = array<i64: 4, 8>}
// CHECK-SAME:      has_side_effect = true
// CHECK-SAME:      output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [1], operand_index = 0, operand_tuple_indices = []>, #stablehlo.output_operand_alias<output_tuple_indices = [2], operand_index = 1, operand_tuple_indices = []>]
// CHECK-SAME:      (tensor<8x8xf32>, tensor<8x8xf32>, tensor<2xi64>) -> (tensor<2xf32>, tensor<8x8xf32>, tensor<8x8xf32>)
func.func @two_caches(%v: !torch.vtensor<[8,8],f32>, %k: !torch.vtensor<[8,8],f32>, %idx: !torch.vtensor<[2],si64>) -> (!torch.vtensor<[2],f32>, !torch.vtensor<[8,8],f32>, !torch.vtensor<[8,8],f32>) {
  %none = torch.constant.none
  %int4 = torch.constant.int 4
  %int8 = torch.constant.int 8
  %window = torch.prim.ListConstruct %int4, %int8 : (!torch.int, !torch.int) -> !torch.list<int>
  %true = torch.constant.bool true
  %layout = torch.constant.str "bshd"
  %0:3 = torch.operator "torch.demo.append.rows"(%v, %none, %k, %idx, %window, %true, %layout) {outofplace.arguments = ["v_cache", "bias", "k_cache", "idx", "window", "causal", "layout"], outofplace.kernel = "demo::append.rows", outofplace.side_effect = true, outofplace.written = [0, 2]} : (!torch.vtensor<[8,8],f32>, !torch.none, !torch.vtensor<[8,8],f32>, !torch.vtensor<[2],si64>, !torch.list<int>, !torch.bool, !torch.str) -> (!torch.vtensor<[2],f32>, !torch.vtensor<[8,8],f32>, !torch.vtensor<[8,8],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[2],f32>, !torch.vtensor<[8,8],f32>, !torch.vtensor<[8,8],f32>
}

// -----

// Two arguments that are views of one root the kernel writes (k(kv[0], kv[1])): one
// operand, the root, each argument's place in it in backend_config, one result.
// CHECK-LABEL: func.func @halves(
// CHECK-SAME:    %[[KV:[^:]*]]: !torch.vtensor<[2,8,8],f32>
// CHECK:         %[[B:.*]] = torch_c.to_builtin_tensor %[[KV]]
// CHECK:         stablehlo.custom_call @"demo::write_kv"(%[[B]], %{{[0-9]+}})
// CHECK-SAME:      outofplace.operands = array<i64: 0, 0, 1>, outofplace.results = array<i64: 0, -1>, outofplace.tensors = array<i64: 0, 1, 2>, outofplace.view.0 = array<i64: 0, 8, 8, 8, 1>, outofplace.view.1 = array<i64: 64, 8, 8, 8, 1>
// CHECK-SAME:      output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>]
// CHECK-SAME:      (tensor<2x8x8xf32>, tensor<2xi64>) -> tensor<2x8x8xf32>
func.func @halves(%kv: !torch.vtensor<[2,8,8],f32>, %idx: !torch.vtensor<[2],si64>) -> !torch.vtensor<[2,8,8],f32> {
  %0 = torch.operator "torch.demo.write_kv"(%kv, %kv, %idx) {outofplace.arguments = ["k_cache", "v_cache", "idx"], outofplace.kernel = "demo::write_kv", outofplace.side_effect = false, outofplace.views = [array<i64: 0, 8, 8, 8, 1>, array<i64: 64, 8, 8, 8, 1>, array<i64>], outofplace.written = [0]} : (!torch.vtensor<[2,8,8],f32>, !torch.vtensor<[2,8,8],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[2,8,8],f32>
  return %0 : !torch.vtensor<[2,8,8],f32>
}
