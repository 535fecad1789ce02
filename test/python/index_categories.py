# RUN: %PYTHON %s | FileCheck %s
"""One program per index category of docs/index-categories.md, compiled to StableHLO.

A write to a box of the root (an int, a unit-step slice, a tuple of them, Ellipsis,
None, a chain of such views, also through t/transpose/permute/movedim) is one
stablehlo.dynamic_update_slice; a strided box is a scatter at iota positions or
pad+select, whichever touches fewer bytes; an integer-tensor index or an index op is a
stablehlo.scatter; a view that merges dimensions is written back through each view op.
"""

import torch

import outofplace


def run(fn):
    print(f"TEST: {fn.__name__}")
    fn()
    return fn


def show(module):
    module.operation.verify()
    print(module.operation.get_asm(use_name_loc_as_prefix=True))


def compile_and_show(f, *args):
    show(outofplace.compile(f, args).module)


def arange(*shape):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape)


# b[3] = v: select + copy_, one dynamic_update_slice at offset 3.
# CHECK-LABEL: TEST: int_index
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %v: tensor<f32>) -> tensor<10xf32>
# CHECK:         %[[C3:.*]] = stablehlo.constant dense<3> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %b_modified = stablehlo.dynamic_update_slice %b, %{{.*}}, %[[C3]] : (tensor<10xf32>, tensor<1xf32>, tensor<i64>) -> tensor<10xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %b_modified : tensor<10xf32>
@run
def int_index():
    def f(b, v):
        b[3] = v
    compile_and_show(f, arange(10), torch.tensor(5.0))


# b[-1] = 0: the negative index is counted from the end at compile time (offset 9).
# CHECK-LABEL: TEST: negative_int_index
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}) -> tensor<10xf32>
# CHECK-DAG:     %[[ZERO:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<1xf32>
# CHECK-DAG:     %[[C9:.*]] = stablehlo.constant dense<9> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %b_modified = stablehlo.dynamic_update_slice %b, %[[ZERO]], %[[C9]] : (tensor<10xf32>, tensor<1xf32>, tensor<i64>) -> tensor<10xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %b_modified : tensor<10xf32>
@run
def negative_int_index():
    def f(b):
        b[-1] = 0
    compile_and_show(f, arange(10))


# b[2:8] = v: the update is v itself, at offset 2.
# CHECK-LABEL: TEST: unit_step_slice
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %v: tensor<6xf32>) -> tensor<10xf32>
# CHECK:         %[[C2:.*]] = stablehlo.constant dense<2> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %b_modified = stablehlo.dynamic_update_slice %b, %v, %[[C2]] : (tensor<10xf32>, tensor<6xf32>, tensor<i64>) -> tensor<10xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %b_modified : tensor<10xf32>
@run
def unit_step_slice():
    def f(b, v):
        b[2:8] = v
    compile_and_show(f, arange(10), torch.ones(6))


# b[-4:] = v: a negative start and an open end (INT64_MAX in the IR) become offset 6.
# CHECK-LABEL: TEST: negative_start_open_end
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %v: tensor<4xf32>) -> tensor<10xf32>
# CHECK:         %[[C6:.*]] = stablehlo.constant dense<6> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %b_modified = stablehlo.dynamic_update_slice %b, %v, %[[C6]] : (tensor<10xf32>, tensor<4xf32>, tensor<i64>) -> tensor<10xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %b_modified : tensor<10xf32>
@run
def negative_start_open_end():
    def f(b, v):
        b[-4:] = v
    compile_and_show(f, arange(10), torch.ones(4))


# b[1:9:2] = v: 4 of 10 elements. One scatter at iota positions 1 + 2 * i touches fewer
# bytes (the update and 4 indices) than pad+select (the whole buffer, twice).
# CHECK-LABEL: TEST: strided_slice
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %v: tensor<4xf32>) -> tensor<10xf32>
# CHECK-DAG:     %[[STEP:.*]] = stablehlo.constant dense<2> : tensor<4x1xi64>
# CHECK-DAG:     %[[START:.*]] = stablehlo.constant dense<1> : tensor<4x1xi64>
# CHECK:         %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<4x1xi64>
# CHECK:         %[[SCALED:.*]] = stablehlo.multiply %[[IOTA]], %[[STEP]] : tensor<4x1xi64>
# CHECK:         %[[IDX:.*]] = stablehlo.add %[[SCALED]], %[[START]] : tensor<4x1xi64>
# CHECK:         %b_modified = "stablehlo.scatter"(%b, %[[IDX]], %v) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true}>
# CHECK-NEXT:    ^bb0(%{{[^:]+}}: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
# CHECK-NEXT:      stablehlo.return %[[UPD]] : tensor<f32>
# CHECK-NOT:     stablehlo.select
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK:         return %b_modified : tensor<10xf32>
@run
def strided_slice():
    def f(b, v):
        b[1:9:2] = v
    compile_and_show(f, arange(10), torch.ones(4))


# b[::2] = v: half the buffer. The scatter would read 5 indices besides the update;
# pad+select touches fewer bytes: v and a mask of trues padded (0 before, 1 between,
# 1 after) to the root's shape, select takes the padded v where the mask is true.
# CHECK-LABEL: TEST: strided_half
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %v: tensor<5xf32>) -> tensor<10xf32>
# CHECK-DAG:     %[[TRUE:.*]] = stablehlo.constant dense<true> : tensor<5xi1>
# CHECK-DAG:     %[[FALSE:.*]] = stablehlo.constant dense<false> : tensor<i1>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %[[VALUES:.*]] = stablehlo.pad %v, %{{.*}}, low = [0], high = [1], interior = [1] : (tensor<5xf32>, tensor<f32>) -> tensor<10xf32>
# CHECK:         %[[MASK:.*]] = stablehlo.pad %[[TRUE]], %[[FALSE]], low = [0], high = [1], interior = [1] : (tensor<5xi1>, tensor<i1>) -> tensor<10xi1>
# CHECK:         %b_modified = stablehlo.select %[[MASK]], %[[VALUES]], %b : tensor<10xi1>, tensor<10xf32>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %b_modified : tensor<10xf32>
@run
def strided_half():
    def f(b, v):
        b[::2] = v
    compile_and_show(f, arange(10), torch.ones(5))


# b[2:4, 1:3] = 0: a chain of two slices, one dynamic_update_slice at (2, 1).
# CHECK-LABEL: TEST: tuple_of_slices
# CHECK:       func.func @main(%b: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4x6xf32>
# CHECK-DAG:     %[[ZEROS:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<2x2xf32>
# CHECK-DAG:     %[[C1:.*]] = stablehlo.constant dense<1> : tensor<i64>
# CHECK-DAG:     %[[C2:.*]] = stablehlo.constant dense<2> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %b_modified = stablehlo.dynamic_update_slice %b, %[[ZEROS]], %[[C2]], %[[C1]] : (tensor<4x6xf32>, tensor<2x2xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %b_modified : tensor<4x6xf32>
@run
def tuple_of_slices():
    def f(b):
        b[2:4, 1:3] = 0
    compile_and_show(f, arange(4, 6))


# b[..., 0] = 7: select on the last dim; the column is a 4x1 box at (0, 0).
# CHECK-LABEL: TEST: ellipsis
# CHECK:       func.func @main(%b: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4x6xf32>
# CHECK-DAG:     %[[SEVENS:.*]] = stablehlo.constant dense<7.000000e+00> : tensor<4x1xf32>
# CHECK-DAG:     %[[C0:.*]] = stablehlo.constant dense<0> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %b_modified = stablehlo.dynamic_update_slice %b, %[[SEVENS]], %[[C0]], %[[C0]] : (tensor<4x6xf32>, tensor<4x1xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %b_modified : tensor<4x6xf32>
@run
def ellipsis():
    def f(b):
        b[..., 0] = 7
    compile_and_show(f, arange(4, 6))


# b[None, 2:4] = v: unsqueeze + slice; the unit dim None adds is dropped again.
# CHECK-LABEL: TEST: none_index
# CHECK:       func.func @main(%b: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}, %v: tensor<2x6xf32>) -> tensor<4x6xf32>
# CHECK-DAG:     %[[C0:.*]] = stablehlo.constant dense<0> : tensor<i64>
# CHECK-DAG:     %[[C2:.*]] = stablehlo.constant dense<2> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %b_modified = stablehlo.dynamic_update_slice %b, %{{.*}}, %[[C2]], %[[C0]] : (tensor<4x6xf32>, tensor<2x6xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %b_modified : tensor<4x6xf32>
@run
def none_index():
    def f(b, v):
        b[None, 2:4] = v
    compile_and_show(f, arange(4, 6), torch.ones(2, 6))


# c[:, pos] = k with a 0-d integer tensor pos: index_put_ with a 0-d index, one
# dynamic_update_slice whose start is computed at run time (negative wraps like eager).
# CHECK-LABEL: TEST: runtime_position
# CHECK:       func.func @main(%c: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}, %k: tensor<4xf32>, %pos: tensor<i64>) -> tensor<4x6xf32>
# CHECK-DAG:     %[[C0:.*]] = stablehlo.constant dense<0> : tensor<i64>
# CHECK-DAG:     %[[C6:.*]] = stablehlo.constant dense<6> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %[[NEGATIVE:.*]] = stablehlo.compare LT, %pos, %[[C0]]
# CHECK:         %[[WRAPPED:.*]] = stablehlo.add %pos, %[[C6]]
# CHECK:         %[[START:.*]] = stablehlo.select %[[NEGATIVE]], %[[WRAPPED]], %pos
# CHECK:         %c_modified = stablehlo.dynamic_update_slice %c, %{{.*}}, %[[C0]], %[[START]] : (tensor<4x6xf32>, tensor<4x1xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %c_modified : tensor<4x6xf32>
@run
def runtime_position():
    def f(c, k, pos):
        c[:, pos] = k
    compile_and_show(f, arange(4, 6), torch.ones(4), torch.tensor(2))


# b[mask] = 2.0: a select over the whole buffer, no nonzero, no scatter.
# CHECK-LABEL: TEST: bool_mask_scalar
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %mask: tensor<10xi1>) -> tensor<10xf32>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %[[M:.*]] = stablehlo.broadcast_in_dim %mask, dims = [0] : (tensor<10xi1>) -> tensor<10xi1>
# CHECK:         %[[OLD:.*]] = stablehlo.broadcast_in_dim %b, dims = [0] : (tensor<10xf32>) -> tensor<10xf32>
# CHECK:         %[[NEW:.*]] = stablehlo.select %[[M]], %{{.*}}, %[[OLD]] : tensor<10xi1>, tensor<10xf32>
# CHECK-NEXT:    return %[[NEW]] : tensor<10xf32>
@run
def bool_mask_scalar():
    def f(b, mask):
        b[mask] = 2.0
    compile_and_show(f, arange(10), arange(10) > 5)


# b[mask] = vals: the k-th true element takes vals[k]; the index of each element's value
# is cumsum(mask) - 1 (a reduce_window), gathered from vals, then one select.
# CHECK-LABEL: TEST: bool_mask_values
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %mask: tensor<10xi1>, %vals: tensor<4xf32>) -> tensor<10xf32>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         "stablehlo.reduce_window"
# CHECK:         "stablehlo.gather"(%vals, {{.*}} : (tensor<4xf32>, tensor<10xi64>) -> tensor<10xf32>
# CHECK:         %[[M:.*]] = stablehlo.broadcast_in_dim %mask, dims = [0] : (tensor<10xi1>) -> tensor<10xi1>
# CHECK:         %[[OLD:.*]] = stablehlo.broadcast_in_dim %b, dims = [0] : (tensor<10xf32>) -> tensor<10xf32>
# CHECK:         %[[NEW:.*]] = stablehlo.select %[[M]], %{{.*}}, %[[OLD]] : tensor<10xi1>, tensor<10xf32>
# CHECK-NEXT:    return %[[NEW]] : tensor<10xf32>
@run
def bool_mask_values():
    def f(b, mask, vals):
        b[mask] = vals
    compile_and_show(f, arange(10), arange(10) > 5, torch.ones(4))


# b[idx] = v: index_put_ with an integer tensor, a scatter of whole rows; negative
# indices first count from the end (compare + select), as in eager.
# CHECK-LABEL: TEST: int_tensor_rows
# CHECK:       func.func @main(%b: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}, %idx: tensor<2xi64>, %v: tensor<2x6xf32>) -> tensor<4x6xf32>
# CHECK:         stablehlo.compare LT, %idx, %{{.*}}, SIGNED
# CHECK:         %[[IDXW:.*]] = stablehlo.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<2xi1>, tensor<2xi64>
# CHECK:         %[[IDX:.*]] = stablehlo.reshape %[[IDXW]] : (tensor<2xi64>) -> tensor<2x1xi64>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %[[IDX]], %v)
# CHECK-SAME:      update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0]
# CHECK-NEXT:    ^bb0(%{{[^:]+}}: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
# CHECK-NEXT:      stablehlo.return %[[UPD]] : tensor<f32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK:         return %[[NEW]] : tensor<4x6xf32>
@run
def int_tensor_rows():
    def f(b, idx, v):
        b[idx] = v
    compile_and_show(f, arange(4, 6), torch.tensor([0, 2]), torch.ones(2, 6))


# b[:, idx] = v: one scatter whose windows are whole columns (an index per column, not
# per element), as JAX emits for b.at[:, idx].set(v); lowered by outofplace-lower-updates.
# CHECK-LABEL: TEST: int_tensor_columns
# CHECK:       func.func @main(%b: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}, %idx: tensor<2xi64>, %v: tensor<4x2xf32>) -> tensor<4x6xf32>
# CHECK:         stablehlo.compare LT, %idx, %{{.*}}, SIGNED
# CHECK:         %[[IDXW:.*]] = stablehlo.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<2xi1>, tensor<2xi64>
# CHECK:         %[[IDX:.*]] = stablehlo.reshape %[[IDXW]] : (tensor<2xi64>) -> tensor<2x1xi64>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %[[IDX]], %v)
# CHECK-SAME:      update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1
# CHECK-NEXT:    ^bb0(%{{[^:]+}}: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
# CHECK-NEXT:      stablehlo.return %[[UPD]] : tensor<f32>
# CHECK-NEXT:    }) : (tensor<4x6xf32>, tensor<2x1xi64>, tensor<4x2xf32>) -> tensor<4x6xf32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK:         return %[[NEW]] : tensor<4x6xf32>
@run
def int_tensor_columns():
    def f(b, idx, v):
        b[:, idx] = v
    compile_and_show(f, arange(4, 6), torch.tensor([0, 2]), torch.ones(4, 2))


# b[i, j] = 9.0: the indices are (i[k], j[k]) pairs.
# CHECK-LABEL: TEST: int_tensor_pairs
# CHECK:       func.func @main(%b: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}, %i: tensor<2xi64>, %j: tensor<2xi64>) -> tensor<4x6xf32>
# CHECK:         stablehlo.compare LT, %i, %{{.*}}, SIGNED
# CHECK:         %[[I:.*]] = stablehlo.reshape %{{.*}} : (tensor<2xi64>) -> tensor<2x1xi64>
# CHECK:         stablehlo.compare LT, %j, %{{.*}}, SIGNED
# CHECK:         %[[J:.*]] = stablehlo.reshape %{{.*}} : (tensor<2xi64>) -> tensor<2x1xi64>
# CHECK:         %[[IDX:.*]] = stablehlo.concatenate %[[I]], %[[J]], dim = 1 : (tensor<2x1xi64>, tensor<2x1xi64>) -> tensor<2x2xi64>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %[[IDX]], %{{.*}})
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK:         return %[[NEW]] : tensor<4x6xf32>
@run
def int_tensor_pairs():
    def f(b, i, j):
        b[i, j] = 9.0
    compile_and_show(f, arange(4, 6), torch.tensor([0, 1]), torch.tensor([2, 3]))


# b[i, :, j] = v: a slice separates the index tensors, so the batch dimension of the
# indices comes first in the update ([3, 4]). Dimensions 0 and 2 are neither one nor the
# leading ones (IREE rejects windows there): one index per element of the update, the
# index tensors broadcast along the batch dimension and an iota along dimension 1.
# CHECK-LABEL: TEST: int_tensors_around_a_slice
# CHECK:       func.func @main(%b: tensor<3x4x5xf32> {tf.aliasing_output = 0 : i32}, %i: tensor<3xi64>, %j: tensor<3xi64>, %v: tensor<3x4xf32>) -> tensor<3x4x5xf32>
# CHECK:         %[[I:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [0] : (tensor<3xi64>) -> tensor<3x4x1xi64>
# CHECK:         %[[ROWS:.*]] = stablehlo.iota dim = 1 : tensor<3x4x1xi64>
# CHECK:         %[[J:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [0] : (tensor<3xi64>) -> tensor<3x4x1xi64>
# CHECK:         %[[IDX:.*]] = stablehlo.concatenate %[[I]], %[[ROWS]], %[[J]], dim = 2 : (tensor<3x4x1xi64>, tensor<3x4x1xi64>, tensor<3x4x1xi64>) -> tensor<3x4x3xi64>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %[[IDX]], %v)
# CHECK-SAME:      scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2], scatter_dims_to_operand_dims = [0, 1, 2], index_vector_dim = 2>
# CHECK:         return %[[NEW]] : tensor<3x4x5xf32>
@run
def int_tensors_around_a_slice():
    def f(b, i, j, v):
        b[i, :, j] = v
    compile_and_show(f, arange(3, 4, 5), torch.tensor([2, 0, 1]), torch.tensor([4, 0, 1]),
                     torch.ones(3, 4))


# c[i, :, pos] = v with a runtime pos: eager applies pos as an int first, so the batch
# of i stays first; pos is a one-element index tensor beside i, broadcast with it (and,
# as for b[i, :, j], one index per element of the update).
# CHECK-LABEL: TEST: runtime_position_beside_int_tensor
# CHECK:       func.func @main(%c: tensor<3x4x5xf32> {tf.aliasing_output = 0 : i32}, %i: tensor<2xi64>, %pos: tensor<i64>, %v: tensor<2x4xf32>) -> tensor<3x4x5xf32>
# CHECK:         %[[P:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [0] : (tensor<1xi64>) -> tensor<2x4x1xi64>
# CHECK:         %[[IDX:.*]] = stablehlo.concatenate %{{.*}}, %{{.*}}, %[[P]], dim = 2 : (tensor<2x4x1xi64>, tensor<2x4x1xi64>, tensor<2x4x1xi64>) -> tensor<2x4x3xi64>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%c, %[[IDX]], %v)
# CHECK-SAME:      inserted_window_dims = [0, 1, 2], scatter_dims_to_operand_dims = [0, 1, 2]
# CHECK:         return %[[NEW]] : tensor<3x4x5xf32>
@run
def runtime_position_beside_int_tensor():
    def f(c, i, pos, v):
        c[i, :, pos] = v
    compile_and_show(f, arange(3, 4, 5), torch.tensor([2, 0]), torch.tensor(3),
                     torch.ones(2, 4))


# index_put_(accumulate=True): the scatter's body adds, so duplicates sum.
# CHECK-LABEL: TEST: index_put_accumulate
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %idx: tensor<3xi64>, %v: tensor<3xf32>) -> tensor<10xf32>
# CHECK:         stablehlo.compare LT, %idx, %{{.*}}, SIGNED
# CHECK:         %[[IDXW:.*]] = stablehlo.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<3xi1>, tensor<3xi64>
# CHECK:         %[[IDX:.*]] = stablehlo.reshape %[[IDXW]] : (tensor<3xi64>) -> tensor<3x1xi64>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %[[IDX]], %v)
# CHECK-NEXT:    ^bb0(%[[OLD:[^:]+]]: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
# CHECK-NEXT:      %[[SUM:.*]] = stablehlo.add %[[OLD]], %[[UPD]] : tensor<f32>
# CHECK-NEXT:      stablehlo.return %[[SUM]] : tensor<f32>
# CHECK:         return %[[NEW]] : tensor<10xf32>
@run
def index_put_accumulate():
    def f(b, idx, v):
        b.index_put_((idx,), v, accumulate=True)
    compile_and_show(f, arange(10), torch.tensor([1, 1, 3]), torch.ones(3))


# masked_fill_: its twin masked_fill is a select over the whole tensor.
# CHECK-LABEL: TEST: masked_fill
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %mask: tensor<10xi1>) -> tensor<10xf32>
# CHECK:         %[[M:.*]] = stablehlo.broadcast_in_dim %mask, dims = [0] : (tensor<10xi1>) -> tensor<10xi1>
# CHECK:         %[[FILL:.*]] = stablehlo.constant dense<3.000000e+00> : tensor<10xf32>
# CHECK:         %[[OLD:.*]] = stablehlo.broadcast_in_dim %b, dims = [0] : (tensor<10xf32>) -> tensor<10xf32>
# CHECK:         %[[NEW:.*]] = stablehlo.select %[[M]], %[[FILL]], %[[OLD]] : tensor<10xi1>, tensor<10xf32>
# CHECK-NEXT:    return %[[NEW]] : tensor<10xf32>
@run
def masked_fill():
    def f(b, mask):
        b.masked_fill_(mask, 3.0)
    compile_and_show(f, arange(10), arange(10) > 5)


# scatter_: its twin scatter.src is a stablehlo.scatter that replaces.
# CHECK-LABEL: TEST: scatter
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %idx: tensor<3xi64>, %src: tensor<3xf32>) -> tensor<10xf32>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %{{.*}}, %{{.*}})
# CHECK-NEXT:    ^bb0(%{{[^:]+}}: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
# CHECK-NEXT:      stablehlo.return %[[UPD]] : tensor<f32>
# CHECK-NEXT:    }) : (tensor<10xf32>, tensor<3x1xi64>, tensor<3xf32>) -> tensor<10xf32>
# CHECK-NEXT:    return %[[NEW]] : tensor<10xf32>
@run
def scatter():
    def f(b, idx, src):
        b.scatter_(0, idx, src)
    compile_and_show(f, arange(10), torch.tensor([1, 4, 7]), torch.ones(3))


# scatter_add_: the same scatter with an adding body.
# CHECK-LABEL: TEST: scatter_add
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %idx: tensor<3xi64>, %src: tensor<3xf32>) -> tensor<10xf32>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %{{.*}}, %{{.*}})
# CHECK-NEXT:    ^bb0(%[[OLD:[^:]+]]: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
# CHECK-NEXT:      %[[SUM:.*]] = stablehlo.add %[[OLD]], %[[UPD]] : tensor<f32>
# CHECK-NEXT:      stablehlo.return %[[SUM]] : tensor<f32>
# CHECK:         return %[[NEW]] : tensor<10xf32>
@run
def scatter_add():
    def f(b, idx, src):
        b.scatter_add_(0, idx, src)
    compile_and_show(f, arange(10), torch.tensor([1, 1, 7]), torch.ones(3))


# scatter_reduce_(amax, include_self=False), which torch-mlir does not lower: the targets
# are set to -inf first (a replacing scatter), then a scatter whose body takes the max.
# CHECK-LABEL: TEST: scatter_reduce_amax
# CHECK:       func.func @main(%b: tensor<10xf32> {tf.aliasing_output = 0 : i32}, %idx: tensor<3xi64>, %src: tensor<3xf32>) -> tensor<10xf32>
# CHECK:         %[[IDX:.*]] = stablehlo.reshape %idx : (tensor<3xi64>) -> tensor<3x1xi64>
# CHECK:         %[[FILL:.*]] = stablehlo.constant dense<0xFF800000> : tensor<3xf32>
# CHECK:         %[[CLEARED:.*]] = "stablehlo.scatter"(%b, %[[IDX]], %[[FILL]])
# CHECK:         %b_modified = "stablehlo.scatter"(%[[CLEARED]], %[[IDX]], %src)
# CHECK-NEXT:    ^bb0(%[[OLD:[^:]+]]: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
# CHECK-NEXT:      %[[MAX:.*]] = stablehlo.maximum %[[OLD]], %[[UPD]] : tensor<f32>
# CHECK-NEXT:      stablehlo.return %[[MAX]] : tensor<f32>
# CHECK:         return %b_modified : tensor<10xf32>
@run
def scatter_reduce_amax():
    def f(b, idx, src):
        b.scatter_reduce_(0, idx, src, reduce="amax", include_self=False)
    compile_and_show(f, arange(10), torch.tensor([1, 1, 3]), torch.ones(3))


# index_copy_ along dim 1: rewritten to index_put_ with [None, idx], a scatter.
# CHECK-LABEL: TEST: index_copy
# CHECK:       func.func @main(%b: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}, %idx: tensor<2xi64>, %src: tensor<4x2xf32>) -> tensor<4x6xf32>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %{{.*}}, %src)
# CHECK-NEXT:    ^bb0(%{{[^:]+}}: tensor<f32>, %[[UPD:[^:]+]]: tensor<f32>):
# CHECK-NEXT:      stablehlo.return %[[UPD]] : tensor<f32>
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK:         return %[[NEW]] : tensor<4x6xf32>
@run
def index_copy():
    def f(b, idx, src):
        b.index_copy_(1, idx, src)
    compile_and_show(f, arange(4, 6), torch.tensor([0, 3]), torch.ones(4, 2))


# index_fill_: rewritten to index_put_ of the broadcast value, a scatter of rows.
# CHECK-LABEL: TEST: index_fill
# CHECK:       func.func @main(%b: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}, %idx: tensor<2xi64>) -> tensor<4x6xf32>
# CHECK:         %[[ROWS:.*]] = stablehlo.constant dense<3.000000e+00> : tensor<2x6xf32>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%b, %{{.*}}, %[[ROWS]])
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK:         return %[[NEW]] : tensor<4x6xf32>
@run
def index_fill():
    def f(b, idx):
        b.index_fill_(0, idx, 3.0)
    compile_and_show(f, arange(4, 6), torch.tensor([0, 2]))


# Chains of views that select a box (unsqueeze/select, slice of slice, narrow, an
# element of split): each write is one dynamic_update_slice of the newest root.
# CHECK-LABEL: TEST: chain_of_views
# CHECK:       func.func @main(%x: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4x6xf32>
# CHECK-DAG:     %[[FIVES:.*]] = stablehlo.constant dense<5.000000e+00> : tensor<2x1xf32>
# CHECK-DAG:     %[[FOURS:.*]] = stablehlo.constant dense<4.000000e+00> : tensor<1x2xf32>
# CHECK-DAG:     %[[THREES:.*]] = stablehlo.constant dense<3.000000e+00> : tensor<2x1xf32>
# CHECK-DAG:     %[[TWOS:.*]] = stablehlo.constant dense<2.000000e+00> : tensor<1x6xf32>
# CHECK-DAG:     %[[C0:.*]] = stablehlo.constant dense<0> : tensor<i64>
# CHECK-DAG:     %[[C1:.*]] = stablehlo.constant dense<1> : tensor<i64>
# CHECK-DAG:     %[[C2:.*]] = stablehlo.constant dense<2> : tensor<i64>
# CHECK-DAG:     %[[C4:.*]] = stablehlo.constant dense<4> : tensor<i64>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %x_modified = stablehlo.dynamic_update_slice %x, %[[TWOS]], %[[C1]], %[[C0]] :
# CHECK-NEXT:    %x_modified_2 = stablehlo.dynamic_update_slice %x_modified, %[[THREES]], %[[C2]], %[[C2]] :
# CHECK-NEXT:    %x_modified_3 = stablehlo.dynamic_update_slice %x_modified_2, %[[FOURS]], %[[C0]], %[[C4]] :
# CHECK-NEXT:    %x_modified_4 = stablehlo.dynamic_update_slice %x_modified_3, %[[FIVES]], %[[C2]], %[[C0]] :
# CHECK-NEXT:    return %x_modified_4 : tensor<4x6xf32>
@run
def chain_of_views():
    def f(x):
        x.unsqueeze(0)[0, 1] = 2
        x[1:4][1:3, 2] = 3
        x.narrow(1, 4, 2)[0] = 4
        x.split(2)[1][:, 0] = 5
    compile_and_show(f, torch.zeros(4, 6))


# A view taken before the write and read after it sees the new value: the row is
# sliced from the updated root, not from %x.
# CHECK-LABEL: TEST: view_before_write
# CHECK:       func.func @main(%x: tensor<4x6xf32> {tf.aliasing_output = 1 : i32}, %v: tensor<2xf32>) -> (tensor<6xf32>, tensor<4x6xf32>)
# CHECK-DAG:     %[[C1:.*]] = stablehlo.constant dense<1> : tensor<i64>
# CHECK-DAG:     %[[C2:.*]] = stablehlo.constant dense<2> : tensor<i64>
# CHECK-NOT:     stablehlo.slice
# CHECK:         %x_modified = stablehlo.dynamic_update_slice %x, %{{.*}}, %[[C1]], %[[C2]] : (tensor<4x6xf32>, tensor<1x2xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>
# CHECK:         %[[ROW:.*]] = stablehlo.slice %x_modified [1:2, 0:6] : (tensor<4x6xf32>) -> tensor<1x6xf32>
# CHECK-NOT:     stablehlo.slice
# CHECK:         %[[READ:.*]] = stablehlo.multiply
# CHECK-NEXT:    return %[[READ]], %x_modified : tensor<6xf32>, tensor<4x6xf32>
@run
def view_before_write():
    def f(x, v):
        row = x[1]
        x[1, 2:4] = v
        return row * 2
    compile_and_show(f, torch.zeros(4, 6), torch.ones(2))


# x.t()[3].fill_(1): a transpose only reorders dimensions, so the column x[:, 3] is a
# box of x: one dynamic_update_slice at (0, 3), no transpose of the whole buffer.
# CHECK-LABEL: TEST: transpose_column
# CHECK:       func.func @main(%x: tensor<4x6xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4x6xf32>
# CHECK-NOT:     stablehlo.transpose
# CHECK:         %[[COL:.*]] = stablehlo.constant dense<1.000000e+00> : tensor<4x1xf32>
# CHECK:         %x_modified = stablehlo.dynamic_update_slice %x, %[[COL]], %{{.*}}, %{{.*}} : (tensor<4x6xf32>, tensor<4x1xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         return %x_modified : tensor<4x6xf32>
@run
def transpose_column():
    def f(x):
        x.t()[3].fill_(1)
    compile_and_show(f, arange(4, 6))


# A write through as_strided lands in a gathered copy (torch-mlir imports as_strided as
# a gather), scattered back at once at the elements' positions in the flattened root.
# CHECK-LABEL: TEST: through_as_strided
# CHECK:       func.func @main(%x: tensor<6xf32> {tf.aliasing_output = 0 : i32}) -> tensor<6xf32>
# CHECK:         %[[COPY:.*]] = "stablehlo.gather"(%x,
# CHECK:         %[[DOUBLED:.*]] = stablehlo.multiply %[[COPY]]
# CHECK:         %[[FLAT:.*]] = stablehlo.reshape %[[DOUBLED]] : (tensor<2x2xf32>) -> tensor<4xf32>
# CHECK:         %[[POS:.*]] = stablehlo.constant dense<{{\[\[}}1], [3], [2], [4]]> : tensor<4x1xi64>
# CHECK:         %[[NEW:.*]] = "stablehlo.scatter"(%x, %[[POS]], %[[FLAT]])
# CHECK-NOT:     stablehlo.dynamic_update_slice
# CHECK:         return %[[NEW]] : tensor<6xf32>
@run
def through_as_strided():
    def f(x):
        x.as_strided((2, 2), (1, 2), 1).mul_(2)
    compile_and_show(f, arange(6))


# Writing into an expanded tensor is refused at the line that does it.
# CHECK-LABEL: TEST: expand_refused
# CHECK:       UnsupportedMutationError: {{.*}}index_categories.py:[[# @LINE + 4]]: unsupported mutation by torch.aten.expand: writing into an expanded tensor
@run
def expand_refused():
    def f(x):
        x.expand(3, 4).fill_(1)
    try:
        outofplace.compile(f, (torch.zeros(1, 4),))
    except outofplace.UnsupportedMutationError as error:
        print(f"UnsupportedMutationError: {error}")


# A constant index out of bounds is a compile-time IndexError, as in eager.
# CHECK-LABEL: TEST: static_out_of_bounds
# CHECK:       IndexError: index 12 is out of bounds for dimension 0 with size 10
@run
def static_out_of_bounds():
    def f(b):
        b[12] = 0
    try:
        outofplace.compile(f, (arange(10),))
    except IndexError as error:
        print(f"IndexError: {error}")


# A strided slice that keeps one element has no step: `y[-1::2]` of a 1-long y is
# [0:1], not [0:1:2] (IREE 3.13 rejects the stepped form once it is reshaped).
# CHECK-LABEL: TEST: one_element_strided_slice
# CHECK:         stablehlo.slice %{{.*}} [0:1] : (tensor<1xi64>) -> tensor<1xi64>
# CHECK:         stablehlo.slice %{{.*}} [0:3, 1:2] : (tensor<3x3xf32>) -> tensor<3x1xf32>
@run
def one_element_strided_slice():
    def f(x, w, y):
        y.unsqueeze(-1)[-1::2, None].index_put_((torch.tensor([0, 0]),), w,
                                                 accumulate=True)
        return x[:, 1::3] * 2
    compile_and_show(f, arange(3, 3), torch.ones(1, 1, dtype=torch.int64),
                     torch.tensor(0))


# A complex cache is a float32 pair [..., 2] (frontend/complex_pairs.py): the runtime
# position write is one dynamic_update_slice of the pair, the conjugate a multiply by
# [1, -1], nothing complex left.
# CHECK-LABEL: TEST: complex_runtime_position
# CHECK:       func.func @main(%cache: tensor<2x8x4x2xf32> {tf.aliasing_output = 0 : i32}, %k: tensor<2x4x2xf32>, %pos: tensor<i64>) -> tensor<2x8x4x2xf32>
# CHECK-NOT:     complex
# CHECK:         %[[CONJ:.*]] = stablehlo.multiply %k, %{{.*}} : tensor<2x4x2xf32>
# CHECK:         %[[ROW:.*]] = stablehlo.reshape %[[CONJ]] : (tensor<2x4x2xf32>) -> tensor<2x1x4x2xf32>
# CHECK-NOT:     stablehlo.scatter
# CHECK:         %cache_modified = stablehlo.dynamic_update_slice %cache, %[[ROW]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x4x2xf32>, tensor<2x1x4x2xf32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<2x8x4x2xf32>
# CHECK-NEXT:    return %cache_modified
@run
def complex_runtime_position():
    def f(cache, k, pos):
        cache[:, pos] = k.conj()
    compile_and_show(f, torch.zeros(2, 8, 4, dtype=torch.complex64),
                     torch.zeros(2, 4, dtype=torch.complex64), torch.tensor(3))
