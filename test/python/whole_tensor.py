# RUN: %PYTHON %s | FileCheck %s
"""From torch programs to mutable torch IR, value-semantic IR and StableHLO."""

import torch

import outofplace


def run(fn):
    print(f"TEST: {fn.__name__}")
    fn()
    return fn


def show(module):
    module.operation.verify()
    print(module.operation.get_asm(use_name_loc_as_prefix=True))


# The frontend keeps the mutation and types only the mutated tensor as !torch.tensor.
# CHECK-LABEL: TEST: frontend_types
# CHECK:       func.func @main(%x: !torch.tensor<[4],f32>, %y: !torch.vtensor<[4],f32>)
# CHECK:         %[[T:.*]] = torch.copy.to_tensor %y
# CHECK:         torch.aten.add_.Tensor %x, %[[T]]
@run
def frontend_types():
    def f(x, y):
        x.add_(y)
        return y * 2
    show(outofplace.import_torch(f, (torch.ones(4), torch.ones(4))))


# The public lower-level steps on a module: the pass returns the io_map.
# CHECK-LABEL: TEST: lower_level_steps
# CHECK:       io_map {0: 1}
# CHECK:       func.func @main(%x: tensor<4xf32> {tf.aliasing_output = 1 : i32}, %y: tensor<4xf32>)
# CHECK:         %x_modified = stablehlo.add %x, %y
@run
def lower_level_steps():
    def f(x, y):
        x.add_(y)
        return y * 2
    module = outofplace.import_torch(f, (torch.ones(4), torch.ones(4)))
    print("io_map", outofplace.inplace_to_outofplace(module))
    show(outofplace.lower_to_stablehlo(module))


# Chained mutations name every version after the root.
# CHECK-LABEL: TEST: chained_names
# CHECK:       %x_modified = stablehlo.add %x, %y
# CHECK:       %x_modified_2 = stablehlo.multiply %x_modified
# CHECK:       return {{.*}}%x_modified_2
@run
def chained_names():
    def f(x, y):
        x.add_(y).mul_(y)
    show(outofplace.compile(f, (torch.ones(4), torch.ones(4))).module)


# Half-precision += with a float operand: computed in f32, rounded back to f16.
# CHECK-LABEL: TEST: half_add
# CHECK:       func.func @main(%x: tensor<4xf16> {tf.aliasing_output = 0 : i32}, %y: tensor<4xf32>) -> tensor<4xf16>
# CHECK:         %[[WIDE:.*]] = stablehlo.convert %x : (tensor<4xf16>) -> tensor<4xf32>
# CHECK:         %[[SUM:.*]] = stablehlo.add %[[WIDE]], %y : tensor<4xf32>
# CHECK:         %x_modified = stablehlo.convert %[[SUM]] : (tensor<4xf32>) -> tensor<4xf16>
@run
def half_add():
    def f(x, y):
        x += y
    show(outofplace.compile(f, (torch.ones(4, dtype=torch.half), torch.ones(4))).module)


# copy_ broadcasts and casts: an int64 row into a float matrix.
# CHECK-LABEL: TEST: copy_broadcast_cast
# CHECK:       func.func @main(%dst: tensor<3x4xf32> {tf.aliasing_output = 0 : i32}, %src: tensor<4xi64>)
# CHECK:         stablehlo.convert %src : (tensor<4xi64>) -> tensor<4xf32>
# CHECK:         stablehlo.broadcast_in_dim {{.*}} -> tensor<3x4xf32>
@run
def copy_broadcast_cast():
    def f(dst, src):
        dst.copy_(src)
    show(outofplace.compile(f, (torch.zeros(3, 4), torch.arange(4))).module)


# A buffer of a module is an argument after the parameters, and is aliased.
# CHECK-LABEL: TEST: module_buffer
# CHECK:       func.func @main(%weight: tensor<4xf32>, %steps: tensor<i64> {tf.aliasing_output = 1 : i32}, %x: tensor<4xf32>)
# CHECK:         %steps_modified = stablehlo.add %steps
@run
def module_buffer():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))
            self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

        def forward(self, x):
            self.steps.add_(1)
            return x * self.weight
    show(outofplace.compile(Counter(), (torch.ones(4),)).module)


# An op with no out-of-place twin is refused, naming the op and this file's line.
# CHECK-LABEL: TEST: no_twin
# CHECK:       UnsupportedMutationError: {{.*}}whole_tensor.py:[[# @LINE + 4]]: unsupported mutation by torch.aten.normal_: it has no out-of-place twin
@run
def no_twin():
    def f(x):
        x.normal_()
    try:
        outofplace.compile(f, (torch.ones(4),))
    except outofplace.UnsupportedMutationError as error:
        print(f"UnsupportedMutationError: {error}")
