# RUN: %PYTHON %s | FileCheck %s
"""Programs compiled with torch.export's dynamic_shapes: StableHLO with `?` dimensions,
mutated arguments still aliased to their results (docs/shapes.md)."""

import warnings

import torch
from torch.export import Dim

import outofplace

BATCH = Dim("batch", min=2, max=64)


def show(f, args, dynamic_shapes):
    print(f"TEST: {getattr(f, '__name__', type(f).__name__)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = outofplace.compile(f, args, dynamic_shapes=dynamic_shapes)
    compiled.module.operation.verify()
    print(compiled.stablehlo)


# x.add_(1) on a dynamic batch: the add of x itself (torch-mlir's broadcast of x to its
# own shape removed), the broadcast 1 sized by get_dimension_size.
# CHECK-LABEL: TEST: add_one
# CHECK:       func.func @main(%x: tensor<?x4xf32> {tf.aliasing_output = 1 : i32}) -> (tensor<f32>, tensor<?x4xf32>)
# CHECK:         %[[N:.*]] = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
# CHECK:         %[[ONE:.*]] = stablehlo.dynamic_broadcast_in_dim %{{.*}}, %{{.*}}, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x4xf32>
# CHECK:         %[[NEW:.*]] = stablehlo.add %x, %[[ONE]] : tensor<?x4xf32>
# CHECK:         return %{{.*}}, %[[NEW]] : tensor<f32>, tensor<?x4xf32>
def add_one(x):
    x.add_(1)
    return x.sum()


show(add_one, (torch.ones(3, 4),), {"x": {0: BATCH}})


# cache[:, pos] = k with a dynamic batch: one scatter of k as the window at the wrapped
# position, no dynamic_update_slice (its update would have a runtime size).
# CHECK-LABEL: TEST: kv_write
# CHECK:       func.func @main(%cache: tensor<?x8x4xf32> {tf.aliasing_output = 1 : i32}, %k: tensor<?x4xf32>, %pos: tensor<i64>) -> (tensor<?x4xf32>, tensor<?x8x4xf32>)
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK:         %[[AT:.*]] = stablehlo.reshape %{{.*}} : (tensor<i64>) -> tensor<1xi64>
# CHECK:         %cache_modified = "stablehlo.scatter"(%cache, %[[AT]], %k)
# CHECK-SAME:      update_window_dims = [0, 1], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1]
# CHECK:         }) : (tensor<?x8x4xf32>, tensor<1xi64>, tensor<?x4xf32>) -> tensor<?x8x4xf32>
# CHECK:         return %{{.*}}, %cache_modified : tensor<?x4xf32>, tensor<?x8x4xf32>
def kv_write(cache, k, pos):
    cache[:, pos] = k
    return cache.sum(1)


show(kv_write, (torch.zeros(3, 8, 4), torch.ones(3, 4), torch.tensor(5)),
     {"cache": {0: BATCH}, "k": {0: BATCH}, "pos": None})


# A buffer written from a dynamic batch: the buffer is static and aliased, the mean
# divides by the batch's runtime size.
# CHECK-LABEL: TEST: RunningMean
# CHECK:       func.func @main(%running: tensor<4xf32> {tf.aliasing_output = 1 : i32}, %x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<4xf32>)
# CHECK:         stablehlo.get_dimension_size %x, dim = 0
# CHECK:         %[[RUNNING:.*]] = stablehlo.add %{{.*}}, %{{.*}} : tensor<4xf32>
# CHECK:         return %{{.*}}, %[[RUNNING]] : tensor<?x4xf32>, tensor<4xf32>
class RunningMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        return x - self.running


show(RunningMean(), (torch.ones(3, 4),), {"x": {0: BATCH}})
