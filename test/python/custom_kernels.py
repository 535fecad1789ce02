# RUN: %PYTHON %s | FileCheck %s
"""Custom ops that write their arguments, from torch to StableHLO: a paged-cache writer
through a view of the pool, and a kernel writing two caches and returning a tensor of
its own between ordinary writes. Each is one stablehlo.custom_call targeting the op,
each written root an operand aliased to its result, aliased in turn to main's result
(tf.aliasing_output)."""

import torch

import outofplace


@torch.library.custom_op("lit::write_rows", mutates_args=("cache",))
def write_rows(cache: torch.Tensor, idx: torch.Tensor, rows: torch.Tensor,
               scale: float) -> None:
    cache.index_copy_(0, idx, rows * scale)


@torch.library.custom_op("lit::write_kv", mutates_args=("k_cache", "v_cache"))
def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, idx: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    k_cache.index_copy_(0, idx, k)
    v_cache.index_copy_(0, idx, v)
    return k.sum(0)


@write_kv.register_fake
def _(k_cache, v_cache, idx, k, v):
    return k.new_empty(k.shape[1:])


def paged(pool, idx, k):
    write_rows(pool.view(-1, 8), idx, k, 0.5)
    return pool.sum()


# The kernel is given the pool and where its argument lies in it (view(-1, 8): offset 0,
# sizes [16, 8], strides [8, 1]); its result is the pool's new version.
# CHECK-LABEL: func.func @main(
# CHECK-SAME:    %pool: tensor<4x4x8xf32> {tf.aliasing_output = 1 : i32}, %idx: tensor<2xi64>, %k: tensor<2x8xf32>
# CHECK:         %pool_modified = stablehlo.custom_call @"lit::write_rows"(%pool, %idx, %k)
# CHECK-SAME:      backend_config = {outofplace.op = "lit::write_rows", outofplace.operands = array<i64: 0, 1, 2>, outofplace.results = array<i64: 0, -1, -1>, outofplace.tensors = array<i64: 0, 1, 2>, outofplace.view.0 = array<i64: 0, 16, 8, 8, 1>, scale = 5.000000e-01 : f64}
# CHECK-SAME:      output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>]
# CHECK-SAME:      (tensor<4x4x8xf32>, tensor<2xi64>, tensor<2x8xf32>) -> tensor<4x4x8xf32>
# CHECK:         return %{{.*}}, %pool_modified
print(outofplace.compile(paged, (torch.zeros(4, 4, 8), torch.tensor([1, 5]),
                                 torch.ones(2, 8))).stablehlo)


def two_caches(k_cache, v_cache, idx, k, v):
    k_cache.mul_(0.5)
    total = write_kv(k_cache, v_cache, idx, k, v)
    v_cache[0] = 1.0
    return total


# CHECK-LABEL: func.func @main(
# CHECK-SAME:    %k_cache: tensor<8x8xf32> {tf.aliasing_output = 1 : i32}, %v_cache: tensor<8x8xf32> {tf.aliasing_output = 2 : i32}
# CHECK:         %k_cache_modified = stablehlo.multiply %k_cache
# CHECK:         %write_kv:3 = stablehlo.custom_call @"lit::write_kv"(%k_cache_modified, %v_cache, %idx, %k, %v)
# CHECK-SAME:      output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [1], operand_index = 0, operand_tuple_indices = []>, #stablehlo.output_operand_alias<output_tuple_indices = [2], operand_index = 1, operand_tuple_indices = []>]
# CHECK-SAME:      -> (tensor<8xf32>, tensor<8x8xf32>, tensor<8x8xf32>)
# Each root's version is named (an identity reshape XLA removes: MLIR names an op's
# results together).
# CHECK-NEXT:    %k_cache_modified_2 = stablehlo.reshape %write_kv#1 : (tensor<8x8xf32>) -> tensor<8x8xf32>
# CHECK-NEXT:    %v_cache_modified = stablehlo.reshape %write_kv#2 : (tensor<8x8xf32>) -> tensor<8x8xf32>
# CHECK-NEXT:    %v_cache_modified_2 = stablehlo.dynamic_update_slice %v_cache_modified
# CHECK:         return %write_kv#0, %k_cache_modified_2, %v_cache_modified_2
print(outofplace.compile(two_caches, (torch.ones(8, 8), torch.zeros(8, 8),
                                      torch.tensor([1, 5]), torch.ones(2, 8),
                                      torch.ones(2, 8))).stablehlo)
