// RUN: outofplace-opt %s --split-input-file \
// RUN:   --pass-pipeline='builtin.module(outofplace-lower-collectives)' | FileCheck %s

// A tensor-parallel rank's collectives over the tensor-parallel group "1" of a 2 x 2
// (data x tensor) layout: each its StableHLO collective with every rank's group of that
// layout, its own channel id, global device ids (an all_to_all none: XLA would read it as
// crossing partitions); wait_tensor is its operand; "avg" is the
// sum divided by the group's size; the world's size is the module's replica count.
// CHECK:       module attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32
// CHECK-LABEL: func.func @rank(
// CHECK-SAME:    %[[X:[^:]*]]: !torch.vtensor<[2,8],f32>
// CHECK:         %[[XB:.*]] = torch_c.to_builtin_tensor %[[X]] : !torch.vtensor<[2,8],f32> -> tensor<2x8xf32>
// CHECK:         %[[SUM:.*]] = "stablehlo.all_reduce"(%[[XB]]) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<{{\[}}[0, 1], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids}> ({
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<f32>, %[[B:.*]]: tensor<f32>):
// CHECK-NEXT:      %[[AB:.*]] = stablehlo.add %[[A]], %[[B]] : tensor<f32>
// CHECK-NEXT:      stablehlo.return %[[AB]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK:         %[[S:.*]] = torch_c.from_builtin_tensor %[[SUM]]
// CHECK:         %[[SB:.*]] = torch_c.to_builtin_tensor %[[S]]
// CHECK:         %[[G:.*]] = "stablehlo.all_gather"(%[[SB]]) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<{{\[}}[0, 1], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids}> : (tensor<2x8xf32>) -> tensor<4x8xf32>
// CHECK:         %[[GT:.*]] = torch_c.from_builtin_tensor %[[G]]
// CHECK:         %[[GB:.*]] = torch_c.to_builtin_tensor %[[GT]]
// CHECK:         %[[RS:.*]] = "stablehlo.reduce_scatter"(%[[GB]]) <{channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>, replica_groups = dense<{{\[}}[0, 1], [2, 3]]> : tensor<2x2xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
// CHECK-NEXT:    ^bb0(%[[C:.*]]: tensor<f32>, %[[D:.*]]: tensor<f32>):
// CHECK-NEXT:      %[[CD:.*]] = stablehlo.add %[[C]], %[[D]] : tensor<f32>
// CHECK-NEXT:      stablehlo.return %[[CD]] : tensor<f32>
// CHECK-NEXT:    }) : (tensor<4x8xf32>) -> tensor<2x8xf32>
// CHECK:         %[[TWO:.*]] = stablehlo.constant dense<2.000000e+00> : tensor<2x8xf32>
// CHECK:         %[[AVG:.*]] = stablehlo.divide %[[RS]], %[[TWO]] : tensor<2x8xf32>
// CHECK:         %[[AT:.*]] = torch_c.from_builtin_tensor %[[AVG]]
// CHECK:         %[[AB2:.*]] = torch_c.to_builtin_tensor %[[AT]]
// CHECK:         %[[A2A:.*]] = "stablehlo.all_to_all"(%[[AB2]]) <{concat_dimension = 0 : i64, replica_groups = dense<{{\[}}[0, 1], [2, 3]]> : tensor<2x2xi64>, split_count = 2 : i64, split_dimension = 0 : i64}> : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK:         %[[R:.*]] = torch_c.from_builtin_tensor %[[A2A]]
// CHECK-NOT:     torch.operator
// CHECK:         return %[[R]]
module attributes {outofplace.process_groups = {"1" = [array<i64: 0, 1>, array<i64: 2, 3>]}, outofplace.world_size = 4 : i64} {
func.func @rank(%x: !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32> {
  %sum = torch.constant.str "sum"
  %avg = torch.constant.str "avg"
  %group = torch.constant.str "1"
  %two = torch.constant.int 2
  %none = torch.constant.none
  %0 = torch.operator "torch._c10d_functional.all_reduce"(%x, %sum, %group) : (!torch.vtensor<[2,8],f32>, !torch.str, !torch.str) -> !torch.vtensor<[2,8],f32>
  %1 = torch.operator "torch._c10d_functional.wait_tensor"(%0) : (!torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32>
  %2 = torch.operator "torch._c10d_functional.all_gather_into_tensor"(%1, %two, %group) : (!torch.vtensor<[2,8],f32>, !torch.int, !torch.str) -> !torch.vtensor<[4,8],f32>
  %3 = torch.operator "torch._c10d_functional.wait_tensor"(%2) : (!torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4,8],f32>
  %4 = torch.operator "torch._c10d_functional.reduce_scatter_tensor"(%3, %avg, %two, %group) : (!torch.vtensor<[4,8],f32>, !torch.str, !torch.int, !torch.str) -> !torch.vtensor<[2,8],f32>
  %5 = torch.operator "torch._c10d_functional.wait_tensor"(%4) : (!torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32>
  %6 = torch.operator "torch._c10d_functional.all_to_all_single"(%5, %none, %none, %group) : (!torch.vtensor<[2,8],f32>, !torch.none, !torch.none, !torch.str) -> !torch.vtensor<[2,8],f32>
  %7 = torch.operator "torch._c10d_functional.wait_tensor"(%6) : (!torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32>
  return %7 : !torch.vtensor<[2,8],f32>
}
}

