"""`outofplace-convolutions-as-kernel-calls`: a large `stablehlo.convolution` becomes a call
of `aten::convolution`, eager's oneDNN kernel, inside the XLA:CPU program.

XLA:CPU's convolutions run 2.7-3.3x slower than eager's (a 3x3 64-channel convolution over
[8, 64, 56, 56]: 17 ms against 6 ms; JAX's own program is as slow, and none of XLA's
oneDNN flags helped: docs/performance.md, "Op classes"). The XLA engine already calls
custom ops' CPU kernels on XLA's buffers (backends/kernel_call.cpp, the `outofplace.op`
custom calls of transforms/kernel_calls.py); this pass hands it convolutions, forward and
backward (outofplace's backward is JAX's transpose rule: more convolutions, one with an
input dilation, frontend/decompositions.py):

    %y = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, f, 0, 1],
           window = {stride = [2, 2], pad = [[0, 1], [0, 1]]}
  =>
    %xt = stablehlo.transpose %x, dims = [0, 3, 1, 2]                  (NCHW)
    %xp = stablehlo.pad %xt, low = [0, 0, 0, 0], high = [0, 0, 1, 1]   (the asymmetric part)
    %wt = stablehlo.transpose %w, dims = [3, 2, 0, 1]                  (OIHW)
    %y = stablehlo.custom_call @"aten::convolution"(%xp, %wt)
           {backend_config = {"outofplace.op" = "aten::convolution", stride = [2, 2],
            padding = [0, 0], dilation = [1, 1], transposed = false,
            output_padding = [0, 0], groups = 1, ...}, api_version = 4, ...}

- operands and result in aten's layouts (NC..., OI...; a transpose around the call where the
  dimension numbers differ), dense row-major (`operand_layouts`, `result_layouts`), which
  is how the handler wraps XLA's buffers;
- symmetric padding is aten's; the asymmetric excess a `stablehlo.pad` of the input;
- an input dilation (a transposed convolution: the input's gradient) is aten's
  `transposed=True` with the input dilation as its stride, the kernel reversed and its
  features swapped within each group, `padding = dilation * (k - 1) - low` and
  `output_padding = high - low`; where that is not aten's (a stride besides, a negative
  padding, an output padding outside [0, max(stride, dilation))) it stays XLA's;
- a slice of a convolution's spatial outputs (how JAX's rule cuts its gradients out of
  larger convolutions) is first folded into the convolution's padding (`_fold_slice`);
- a weight's gradient, a window of at least `MIN_GRADIENT_WINDOW` elements larger than its
  output, is `aten::convolution_backward`'s weight gradient (`_rewrite_weight_gradient`:
  oneDNN's backward-weights kernel), of the input as the program holds it where
  `_fold_slice` cut rows aten's gradient does not read (`_uncut`: a strided 1x1
  convolution's, ResNet's shortcut, no copy of the input); an input's gradient at
  stride 1 is aten's transposed convolution where that reads the weight as the program
  holds it; every operand is read through the transposes and reverses that made it
  (`_compact`);
- `feature_group_count` is aten's `groups`; a `batch_group_count` other than 1, negative
  padding, no spatial dimension or more than three, an element type other than f32, f64
  or bf16, dynamic shapes: XLA's convolution stays;
- a convolution of fewer than `MIN_FLOPS` multiply-adds stays XLA's (see there);
- a convolution whose result the program reads with its features before its batch (a
  weight's gradient of JAX's form over a small window, [I, O, ...] transposed to the
  weight's [O, I, ...]), larger than its operands, at stride 1, is the convolution with
  its operands' roles swapped and both reversed (`_swapped`): aten's result is then the
  layout the program reads;
- a transpose of a call's result, its only reader, is the handler's
  (`outofplace.permute.0`: aten's result written permuted into XLA's buffer;
  `_fold_transpose`): such a gradient at a larger stride, which XLA would otherwise
  copy across into each of its readers.

Only the XLA engine runs this pass (its legalization, `LEGALIZE_FOR_CPU` in
backends/xla/compiler.py), on the module it compiles and nothing else: exports (`save`,
`hlo_module_proto`, `portable_artifact`), the interpreter and IREE take the StableHLO
before it and carry XLA's convolutions; a mesh's legalization (`LEGALIZE_FOR_MESH`,
backends/spmd) does not run it (kernels are not called on a mesh). The XLA engine runs it
only where the C++ handler is built, after registering it for `TARGET`
(backends/custom_calls.py).
"""

from __future__ import annotations

import math

import numpy as np

from torch_mlir import ir, rewrite
from torch_mlir._mlir_libs import _stablehlo

from ..ir_utils import (all_operations, create_ranked, i64_array, ranked_shape, reshape,
                        stablehlo_splat)
from . import kernel_calls
from .registry import register_pass

TARGET = "aten::convolution"  # the custom call target of every call this pass makes
BACKWARD = "aten::convolution_backward"  # the op of a weight gradient's (`outofplace.op`)
# Below this many FLOPs (2 x multiply-adds, counting an input dilation's zeros) XLA keeps
# the convolution: measured, a 3x3 convolution, 32 channels at 16x16, in its own program
# (2 threads): at batch 2 (9.4 MFLOP) XLA's 0.075 ms against the call's 0.109, at batch 4
# (18.9 MFLOP) 0.137 against 0.141, at batch 8 (37.7) 0.234 against 0.185. And oneDNN
# runs on OpenMP's threads, whose barriers collapse on a loaded machine (these small
# convolutions took 8-20 ms through the call and in eager, XLA's 0.04-0.12): a small one
# is XLA's. Every convolution of a ResNet-18 at 64x64, batch 8, is above it (the
# smallest, 151 MFLOP) but its three 1x1 shortcuts (8.4 MFLOP each, and their gradients).
MIN_FLOPS = 20_000_000
ELEMENT_TYPES = ("f32", "f64", "bf16")  # what eager's CPU convolution takes
# A convolution whose window has at least this many elements and more than its output
# runs as aten::convolution_backward's weight gradient (see _plan). Measured on one
# thread, the weight gradient of a 3x3 convolution, batch 8, f32, as a backward-weights
# kernel against a convolution with the forward's output as its window: 14.9 against
# 79.9 ms (a 7x7/2 stem at 224x224: a 112x112 window), 0.79 against 1.70 (16x16, 64
# channels), 16.9 against 24.3 (7x7, 512 channels), 0.73 against 1.13 and 9.6 against
# 9.4 (4x4: the break-even), but 2.15 against 1.22 and 8.19 against 5.40 with a 2x2
# window. f64 the same way (26.7 against 39.9 at 7x7, 10.1 against 12.3 at 4x4, 10.2
# against 4.6 at 2x2).
MIN_GRADIENT_WINDOW = 16


def _transpose(value: ir.Value, permutation: list[int]) -> ir.Value:
    if permutation == list(range(len(permutation))):
        return value
    shape, element = ranked_shape(value), ir.RankedTensorType(value.type).element_type
    return create_ranked("stablehlo.transpose", [value], [shape[p] for p in permutation], element,
                   permutation=ir.DenseI64ArrayAttr.get(permutation))


def _reverse(value: ir.Value, dimensions: list[int]) -> ir.Value:
    if not dimensions:
        return value
    return create_ranked("stablehlo.reverse", [value], ranked_shape(value),
                   ir.RankedTensorType(value.type).element_type,
                   dimensions=ir.DenseI64ArrayAttr.get(dimensions))


def _chain(value: ir.Value) -> tuple[ir.Value, list[int], set[int]]:
    """The first value before the chain of transposes and reverses that made `value`,
    and how: `value` is `transpose(reverse(root, flipped), permutation)`."""
    root, permutation, flipped = value, list(range(len(ranked_shape(value)))), set()
    while _layout_op(root):
        op = root.owner.operation
        if op.name == "stablehlo.transpose":
            inner = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
            permutation = [inner[p] for p in permutation]
            flipped = {inner[d] for d in flipped}
        else:
            flipped ^= set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        root = op.operands[0]
    return root, permutation, flipped


def _compact(value: ir.Value) -> ir.Value:
    """`value` read from the root of its chain of transposes and reverses (`_chain`)
    through one reverse and one transpose at most, none where they cancel (the weight of
    an input's gradient is the forward's, transposed and reversed by JAX's rule, then
    transposed and reversed back into aten's layout here: no copy of it at all)."""
    root, permutation, flipped = _chain(value)
    if root == value or not _layout_op(value.owner.operation.operands[0]):
        return value  # (one op: as compact as it gets)
    return _transpose(_reverse(root, sorted(flipped)), permutation)


def _layout_op(value: ir.Value) -> bool:
    """Whether `value` is a transpose's or a reverse's."""
    return isinstance(value.owner, (ir.Operation, ir.OpView)) and \
        value.owner.operation.name in ("stablehlo.transpose", "stablehlo.reverse")


def _is_root(value: ir.Value, permutation: list[int], flipped: list[int]) -> bool:
    """Whether `transpose(reverse(value, flipped), permutation)` is the root of
    `value`'s chain as it is: no transpose or reverse left to compute."""
    _, inner, inner_flipped = _chain(value)
    return all(inner[p] == j for j, p in enumerate(permutation)) and \
        not inner_flipped ^ {inner[d] for d in flipped}


def _fold_slice(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """A slice of a convolution's spatial outputs (JAX's transpose rule cuts its
    gradients out of larger convolutions: the input's of the full transposed convolution,
    the weight's of one over the batch) is the convolution with less padding, computing
    only the outputs kept: the slice of outputs [a, b) starts a window stride `a` times
    later and ends after `b - a` outputs. Where the padding would turn negative (which
    aten cannot take) the input is cut instead: a slice of the input, not of the output
    (a strided 1x1 convolution's weight gradient, which JAX's rule takes from a 2x2
    window's, no more computed than the gradient); with an input dilation the slice
    stays."""
    conv = op.operands[0].owner
    if not isinstance(conv, (ir.Operation, ir.OpView)) or \
            conv.operation.name != "stablehlo.convolution" or \
            len(list(conv.result.uses)) != 1 or \
            not ir.RankedTensorType(conv.result.type).has_static_shape:
        return True
    conv = conv.operation
    numbers = _stablehlo.ConvDimensionNumbers(conv.attributes["dimension_numbers"])
    spatial = list(numbers.output_spatial_dimensions)
    rank = len(spatial)
    starts, limits = i64_array(op, "start_indices", []), i64_array(op, "limit_indices", [])
    shape = ranked_shape(conv.result)
    if i64_array(op, "strides", []) != [1] * len(shape) or any(
            (starts[d], limits[d]) != (0, shape[d]) for d in range(len(shape))
            if d not in spatial):
        return True
    x_shape, w_shape = ranked_shape(conv.operands[0]), ranked_shape(conv.operands[1])
    strides = i64_array(conv, "window_strides", [1] * rank)
    lhs_dilation = i64_array(conv, "lhs_dilation", [1] * rank)
    rhs_dilation = i64_array(conv, "rhs_dilation", [1] * rank)
    flat = [int(p) for p in ir.DenseIntElementsAttr(conv.attributes["padding"])] \
        if "padding" in conv.attributes else [0] * (2 * rank)
    padding, start, limit = [], [0] * len(x_shape), list(x_shape)
    for i in range(rank):
        a, b = starts[spatial[i]], limits[spatial[i]]
        dilated = (x_shape[numbers.input_spatial_dimensions[i]] - 1) * lhs_dilation[i] + 1
        window = (w_shape[numbers.kernel_spatial_dimensions[i]] - 1) * rhs_dilation[i] + 1
        low = flat[2 * i] - a * strides[i]
        high = (b - a - 1) * strides[i] + window - dilated - low
        if -strides[i] < high < 0:  # (the last window ends before the input does: up to a
            high = 0                # stride more padding makes no more outputs)
        if (low < 0 or high < 0) and lhs_dilation[i] != 1:
            return True
        d = numbers.input_spatial_dimensions[i]  # (a negative padding: the input cut)
        start[d], limit[d] = max(-low, 0), x_shape[d] - max(-high, 0)
        if start[d] >= limit[d]:  # (windows in the padding alone: nothing of it read)
            return True
        padding += [max(low, 0), max(high, 0)]
    with rewriter.ip, conv.location:
        x = conv.operands[0]
        if start != [0] * len(x_shape) or limit != x_shape:
            x = create_ranked("stablehlo.slice", [x], [hi - lo for lo, hi in zip(start, limit)],
                              ir.RankedTensorType(x.type).element_type,
                              start_indices=ir.DenseI64ArrayAttr.get(start),
                              limit_indices=ir.DenseI64ArrayAttr.get(limit),
                              strides=ir.DenseI64ArrayAttr.get([1] * len(x_shape)))
        attributes = {name: conv.attributes[name] for name in conv.attributes}
        attributes["padding"] = ir.DenseIntElementsAttr.get(
            np.array(padding, dtype=np.int64).reshape(rank, 2))
        folded = ir.Operation.create("stablehlo.convolution", results=[op.result.type],
                                     operands=[x, conv.operands[1]],
                                     attributes=attributes).result
    rewriter.replace_op(op, [folded])
    rewriter.erase_op(conv)
    return False


def _plan(op: ir.Operation) -> dict | None:
    """aten::convolution's arguments for `op`, or None where it stays XLA's."""
    numbers = _stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    x, w = op.operands
    types = [ir.RankedTensorType(v.type) for v in (x, w, op.result)]
    if not all(t.has_static_shape for t in types) or \
            len({str(t.element_type) for t in types}) != 1 or \
            str(types[0].element_type) not in ELEMENT_TYPES:
        return None
    spatial = list(numbers.input_spatial_dimensions)
    rank = len(spatial)
    if not 1 <= rank <= 3:
        return None
    if ir.IntegerAttr(op.attributes["batch_group_count"]).value != 1:
        return None
    groups = ir.IntegerAttr(op.attributes["feature_group_count"]).value
    w_shape, out_shape = ranked_shape(w), ranked_shape(op.result)
    kernel = [w_shape[d] for d in numbers.kernel_spatial_dimensions]
    flops = 2 * math.prod(out_shape) * w_shape[numbers.kernel_input_feature_dimension] * \
        math.prod(kernel)
    if flops == 0 or flops < MIN_FLOPS:  # (an empty tensor: no buffer to hand aten)
        return None
    strides = i64_array(op, "window_strides", [1] * rank)
    lhs_dilation = i64_array(op, "lhs_dilation", [1] * rank)
    rhs_dilation = i64_array(op, "rhs_dilation", [1] * rank)
    flat = [int(p) for p in ir.DenseIntElementsAttr(op.attributes["padding"])] \
        if "padding" in op.attributes else [0] * (2 * rank)
    padding = [flat[2 * i:2 * i + 2] for i in range(rank)]
    if any(p < 0 for row in padding for p in row):
        return None
    reversed_ = [bool(r) for r in ir.DenseBoolArrayAttr(op.attributes["window_reversal"])] \
        if "window_reversal" in op.attributes else [False] * rank
    plan = dict(numbers=numbers, groups=groups, dilation=rhs_dilation, reversed=reversed_,
                backward=False)
    x_shape = ranked_shape(x)
    inputs = [x_shape[d] for d in numbers.input_spatial_dimensions]
    outputs = [out_shape[d] for d in numbers.output_spatial_dimensions]
    if lhs_dilation == [1] * rank and groups == 1 and not any(reversed_) and \
            math.prod(kernel) >= MIN_GRADIENT_WINDOW and math.prod(kernel) > math.prod(outputs):
        # a window larger than its outputs: a weight's gradient (JAX's transpose rule, the
        # batch contracted as the features), where oneDNN's backward-weights kernel is
        # faster than its convolution with this window. It is that of the convolution of
        # the input (the batch its features) with stride `rhs_dilation`, dilation
        # `window_strides` and the low padding on both sides, where that convolution's
        # output is `kernel`'s size.
        low = [lo for lo, _ in padding]
        sizes = [(n + 2 * p - dilation * (k - 1) - 1) // stride + 1 for n, p, dilation, k, stride
                 in zip(inputs, low, strides, outputs, rhs_dilation)]
        if sizes == kernel:
            plan.update(backward=True, stride=rhs_dilation, padding=low, dilation=strides,
                        kernel=outputs,
                        transposed=False, output_padding=[0] * rank,
                        excess=[(0, 0)] * rank)
            return plan
    if lhs_dilation == [1] * rank and strides == [1] * rank and groups == 1:
        # an input's gradient at stride 1 (JAX's rule: the weight's features swapped and
        # its window reversed) is aten's transposed convolution of stride 1 of the weight
        # as it is: no copy of it where that is the weight the program holds
        w_numbers = [numbers.kernel_input_feature_dimension,
                     numbers.kernel_output_feature_dimension,
                     *numbers.kernel_spatial_dimensions]
        aten_padding = [d * (k - 1) - lo for d, k, (lo, _) in zip(rhs_dilation, kernel, padding)]
        output_padding = [hi - lo for lo, hi in padding]
        if all(p >= 0 for p in aten_padding) and \
                all(0 <= o < d for o, d in zip(output_padding, rhs_dilation)) and \
                _is_root(w, w_numbers, [numbers.kernel_spatial_dimensions[d]
                                        for d, r in enumerate(reversed_) if not r]):
            plan.update(transposed=True, stride=strides, padding=aten_padding,
                        output_padding=output_padding, excess=[(0, 0)] * rank)
            return plan
    if lhs_dilation == [1] * rank:  # a convolution: the excess padding before it
        symmetric = [min(lo, hi) for lo, hi in padding]
        plan.update(transposed=False, stride=strides, padding=symmetric,
                    output_padding=[0] * rank,
                    excess=[(lo - s, hi - s) for (lo, hi), s in zip(padding, symmetric)])
        return plan
    if strides != [1] * rank:
        return None
    # a transposed convolution of stride `lhs_dilation`: the output's size,
    # (n - 1) * s + 1 + low + high - d * (k - 1), is aten's
    # (n - 1) * s - 2 * p + d * (k - 1) + output_padding + 1 for these p, output_padding
    aten_padding = [d * (k - 1) - lo for d, k, (lo, _) in zip(rhs_dilation, kernel, padding)]
    output_padding = [hi - lo for lo, hi in padding]
    if any(p < 0 for p in aten_padding) or any(
            not 0 <= o < max(s, d)
            for o, s, d in zip(output_padding, lhs_dilation, rhs_dilation)):
        return None
    plan.update(transposed=True, stride=lhs_dilation, padding=aten_padding,
                output_padding=output_padding, excess=[(0, 0)] * rank)
    return plan


def _read_as(op: ir.Operation) -> list[int]:
    """The order in which the program reads `op`'s result dimensions: through its one
    reader's transpose, or as it is."""
    uses = list(op.result.uses)
    if len(uses) == 1 and uses[0].owner.name == "stablehlo.transpose":
        return list(ir.DenseI64ArrayAttr(uses[0].owner.attributes["permutation"]))
    return list(range(len(ranked_shape(op.result))))


def _swapped(op: ir.Operation, plan: dict) -> ir.Operation | None:
    """`op` with its operands' roles swapped, where the program reads its result with the
    features before the batch (a weight's gradient over a small window, JAX's rule's
    [I, O, ...] transposed to the weight's [O, I, ...]) and its result is larger than its
    operands: the swapped convolution's batch is `op`'s features, so aten's result is
    the layout the program reads and no permuted copy of it is made. A correlation of
    the kernel over the input is the input's over the kernel with the output reversed,
    so both operands are reversed (one reverse and transpose each, which XLA fuses into
    the operand's copy into aten's layout), and the padding is `L - K + low`,
    `L - K + high` (L the input's size, K the kernel's). Stride, dilations and groups
    of 1 only; None otherwise, or where that padding would be negative."""
    numbers = plan["numbers"]
    rank = len(plan["stride"])
    x, w = op.operands
    if plan["backward"] or plan["transposed"] or plan["groups"] != 1 or \
            plan["stride"] != [1] * rank or plan["dilation"] != [1] * rank or \
            _read_as(op) != [numbers.output_feature_dimension, numbers.output_batch_dimension,
                             *numbers.output_spatial_dimensions] or \
            math.prod(ranked_shape(op.result)) <= \
            math.prod(ranked_shape(x)) + math.prod(ranked_shape(w)):
        return None
    x_shape, w_shape = ranked_shape(x), ranked_shape(w)
    padding = []
    for i, (symmetric, (lo, hi)) in enumerate(zip(plan["padding"], plan["excess"])):
        grow = x_shape[numbers.input_spatial_dimensions[i]] - \
            w_shape[numbers.kernel_spatial_dimensions[i]]
        padding.append([grow + symmetric + lo, grow + symmetric + hi])
    if any(p < 0 for row in padding for p in row):
        return None
    swapped_numbers = _stablehlo.ConvDimensionNumbers.get(
        input_batch_dimension=numbers.kernel_output_feature_dimension,
        input_feature_dimension=numbers.kernel_input_feature_dimension,
        input_spatial_dimensions=list(numbers.kernel_spatial_dimensions),
        kernel_input_feature_dimension=numbers.input_feature_dimension,
        kernel_output_feature_dimension=numbers.input_batch_dimension,
        kernel_spatial_dimensions=list(numbers.input_spatial_dimensions),
        output_batch_dimension=numbers.output_feature_dimension,
        output_feature_dimension=numbers.output_batch_dimension,
        output_spatial_dimensions=list(numbers.output_spatial_dimensions))
    lhs = _reverse(w, [d for d, r in zip(numbers.kernel_spatial_dimensions, plan["reversed"])
                       if not r])
    rhs = _reverse(x, list(numbers.input_spatial_dimensions))
    i64 = ir.IntegerType.get_signless(64)
    return ir.Operation.create("stablehlo.convolution", results=[op.result.type],
                               operands=[lhs, rhs], attributes={
        "dimension_numbers": swapped_numbers,
        "padding": ir.DenseIntElementsAttr.get(np.array(padding, dtype=np.int64)),
        "feature_group_count": ir.IntegerAttr.get(i64, 1),
        "batch_group_count": ir.IntegerAttr.get(i64, 1),
        **({"precision_config": op.attributes["precision_config"]}
           if "precision_config" in op.attributes else {})})


def _rewrite(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    plan = _plan(op)
    if plan is None:
        return True
    with rewriter.ip, op.location:
        swapped = _swapped(op, plan)
    swapped_plan = _plan(swapped) if swapped is not None else None
    if swapped_plan is not None:
        rewriter.replace_op(op, [swapped.result])
        op, plan = swapped, swapped_plan
    elif swapped is not None:  # (its reverses: erased with the other unread ones)
        rewriter.erase_op(swapped)
    numbers, groups = plan["numbers"], plan["groups"]
    x, w = op.operands
    rank = len(plan["stride"])
    element = ir.RankedTensorType(x.type).element_type
    if plan["backward"]:
        return _rewrite_weight_gradient(op, plan, rewriter)
    with rewriter.ip, op.location:
        # the input as N, C, spatial..., its asymmetric padding's excess added
        x = _compact(_transpose(x, [numbers.input_batch_dimension,
                                    numbers.input_feature_dimension,
                                    *numbers.input_spatial_dimensions]))
        if any(lo or hi for lo, hi in plan["excess"]):
            low = [0, 0, *(lo for lo, _ in plan["excess"])]
            high = [0, 0, *(hi for _, hi in plan["excess"])]
            zero = stablehlo_splat(ir.RankedTensorType.get([], element), 0)
            x = create_ranked("stablehlo.pad", [x, zero],
                        [n + lo + hi for n, lo, hi in zip(ranked_shape(x), low, high)], element,
                        edge_padding_low=ir.DenseI64ArrayAttr.get(low),
                        edge_padding_high=ir.DenseI64ArrayAttr.get(high),
                        interior_padding=ir.DenseI64ArrayAttr.get([0] * (rank + 2)))
        # the kernel as O, I / groups, spatial...; for a transposed convolution, aten's
        # [I, O / groups, spatial...] of the kernel reversed
        w = _transpose(w, [numbers.kernel_output_feature_dimension,
                           numbers.kernel_input_feature_dimension,
                           *numbers.kernel_spatial_dimensions])
        reverse = plan["reversed"]
        if plan["transposed"]:
            o, i, *kernel = ranked_shape(w)
            if groups == 1:
                w = _transpose(w, [1, 0, *range(2, rank + 2)])
            else:
                w = reshape(w, [groups, o // groups, i, *kernel])
                w = _transpose(w, [0, 2, 1, *range(3, rank + 3)])
                w = reshape(w, [groups * i, o // groups, *kernel])
            reverse = [not r for r in reverse]
        w = _compact(_reverse(w, [2 + d for d, r in enumerate(reverse) if r]))
        # the call, its result N, C, spatial...
        out_shape = ranked_shape(op.result)
        order = [numbers.output_batch_dimension, numbers.output_feature_dimension,
                 *numbers.output_spatial_dimensions]
        config = _config(TARGET, plan, plan["transposed"], groups)
        call = _call([x, w], [out_shape[d] for d in order], element, config)
        # to the convolution's output layout
        result = _transpose(call, [order.index(d) for d in range(rank + 2)])
    rewriter.replace_op(op, [result])
    return False


def _config(op: str, plan: dict, transposed: bool, groups: int
            ) -> dict[str, ir.Attribute]:
    """The handler's attributes of an aten convolution op `op` (both tensors read as
    given, results written by the handler) with the convolution's `plan`."""
    return {
        kernel_calls.OP_NAME: ir.StringAttr.get(op),
        "outofplace.tensors": ir.DenseI64ArrayAttr.get([0, 1]),
        "outofplace.operands": ir.DenseI64ArrayAttr.get([0, 1]),
        "outofplace.results": ir.DenseI64ArrayAttr.get([-1, -1]),
        "stride": ir.DenseI64ArrayAttr.get(plan["stride"]),
        "padding": ir.DenseI64ArrayAttr.get(plan["padding"]),
        "dilation": ir.DenseI64ArrayAttr.get(plan["dilation"]),
        "transposed": ir.BoolAttr.get(transposed),
        "output_padding": ir.DenseI64ArrayAttr.get(plan["output_padding"]),
        "groups": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), groups),
    }


def _call(operands: list[ir.Value], shape: list[int], element: ir.Type,
          config: dict[str, ir.Attribute]) -> ir.Value:
    """The custom call the kernel handler runs, operands and result dense row-major."""
    return kernel_calls.eager_call(TARGET, operands,
                                   [ir.RankedTensorType.get(shape, element)], config).result


def _rewrite_weight_gradient(op: ir.Operation, plan: dict,
                             rewriter: rewrite.PatternRewriter) -> bool:
    """`op` as `aten::convolution_backward(grad_output, input, weight, ...)`'s weight gradient
    (`output_mask = [False, True, False]`): the input is `op`'s lhs with its batch and
    features swapped ([N, C, ...]), the gradient its rhs ([N, O, ...]), the weight only
    sizes (`outofplace.unread.2`: aten reads none of its elements), the result [O, C, ...]."""
    numbers = plan["numbers"]
    x, g = op.operands
    rank = len(plan["stride"])
    element = ir.RankedTensorType(x.type).element_type
    out_shape = ranked_shape(op.result)
    order = [numbers.output_feature_dimension, numbers.output_batch_dimension,
             *numbers.output_spatial_dimensions]
    shape = [out_shape[d] for d in order]
    x = _uncut(x, plan, ranked_shape(g), numbers)
    with rewriter.ip, op.location:
        x = _compact(_transpose(x, [numbers.input_feature_dimension,
                                    numbers.input_batch_dimension,
                                    *numbers.input_spatial_dimensions]))
        g = _compact(_transpose(g, [numbers.kernel_input_feature_dimension,
                                    numbers.kernel_output_feature_dimension,
                                    *numbers.kernel_spatial_dimensions]))
        config = {**_config(BACKWARD, plan, False, 1),
                  "outofplace.unread.2": ir.DenseI64ArrayAttr.get(shape),
                  "outofplace.returns": ir.DenseI64ArrayAttr.get([1]),
                  "output_mask": ir.DenseI64ArrayAttr.get([0, 1, 0])}
        call = _call([g, x], shape, element, config)
        result = _transpose(call, [order.index(d) for d in range(rank + 2)])
    rewriter.replace_op(op, [result])
    return False


def _uncut(x: ir.Value, plan: dict, g_shape: list[int],
           numbers: _stablehlo.ConvDimensionNumbers) -> ir.Value:
    """The input of a weight's gradient before the slices that cut its end (`_fold_slice`,
    a dimension at a time: a strided 1x1 convolution's, whose windows never reach its
    last rows), where aten's gradient reads none of what was cut and takes the whole
    input for the gradient's size: no copy of the input's rows that are read."""
    whole = x
    while isinstance(whole.owner, (ir.Operation, ir.OpView)) and \
            whole.owner.operation.name == "stablehlo.slice":
        cut = whole.owner.operation
        if any(i64_array(cut, "start_indices", [])) or \
                i64_array(cut, "strides", []) != [1] * len(ranked_shape(whole)):
            break
        whole = cut.operands[0]
    limits, sizes = ranked_shape(x), ranked_shape(whole)
    spatial = list(numbers.input_spatial_dimensions)
    if whole == x or any(limits[d] != sizes[d] for d in range(len(sizes))
                         if d not in spatial):
        return x
    gradient = [g_shape[d] for d in numbers.kernel_spatial_dimensions]
    for d, g, s, p, dilation, k in zip(spatial, gradient, plan["stride"], plan["padding"],
                                       plan["dilation"], plan["kernel"]):
        last = (g - 1) * s - p + (k - 1) * dilation  # the last row the gradient reads
        if last >= limits[d] or (sizes[d] + 2 * p - dilation * (k - 1) - 1) // s + 1 != g:
            return x
    return whole


@register_pass(
    "outofplace-convolutions-as-kernel-calls",
    "Large convolutions as calls of eager's kernel (aten::convolution) inside XLA:CPU",
    "`stablehlo.convolution` of at least `MIN_FLOPS` (f32, f64, bf16; groups, strides, "
    "dilations, asymmetric padding, an input dilation as aten's transposed convolution, "
    "a weight gradient's large window as aten::convolution_backward; slices folded into "
    "the padding first) → "
    "transposes to NC.../OI..., `stablehlo.custom_call @\"aten::convolution\"` that the "
    "kernel handler (backends/kernel_call.cpp) runs through the c10 dispatcher, its result "
    "written in the convolution's layout (or its one reader's, a transpose's: "
    "`outofplace.permute.0`, the handler permuting aten's result): XLA:CPU's convolutions "
    "are ~3x slower than oneDNN's (the XLA engine's "
    "legalization only, backends/xla; exports keep XLA's convolutions)")
def convolutions_as_kernel_calls(module: ir.Operation) -> None:
    slices = rewrite.RewritePatternSet(module.context)
    slices.add("stablehlo.slice", _fold_slice)
    rewrite.walk_and_apply_patterns(module, slices.freeze())
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.convolution", _rewrite)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
    transposes = rewrite.RewritePatternSet(module.context)
    transposes.add("stablehlo.transpose", _fold_transpose)
    rewrite.walk_and_apply_patterns(module, transposes.freeze())
    # the transposes and reverses `_compact` read through, when nothing else reads them
    dead = [op for op in all_operations(module) if op.name in (
        "stablehlo.transpose", "stablehlo.reverse") and not _used(op)]
    while dead:
        op = dead.pop()
        operand = op.operands[0]
        op.erase()
        if _layout_op(operand) and not _used(operand.owner.operation):
            dead.append(operand.owner.operation)


def _fold_transpose(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """A transpose of a call's result, its only reader (the program's own: JAX's rule
    makes a weight's gradient [I, O, ...] and transposes it to the weight's [O, I, ...];
    or the call's back to the convolution's layout), is the handler's: it writes aten's
    result permuted into XLA's buffer (`outofplace.permute.0`, on the caller's threads)
    rather than XLA copying it across into each reader (the optimizer's update, the
    gradient returned). Two that undo each other leave none."""
    call = op.operands[0].owner
    if not isinstance(call, (ir.Operation, ir.OpView)) or \
            call.operation.name != "stablehlo.custom_call" or \
            ir.StringAttr(call.attributes["call_target_name"]).value != TARGET or \
            len(list(call.result.uses)) != 1:
        return True
    call = call.operation
    config = ir.DictAttr(call.attributes["backend_config"])
    entries = {config[i].name: config[i].attr for i in range(len(config))}
    rank = len(ranked_shape(call.result))
    before = list(ir.DenseI64ArrayAttr(entries["outofplace.permute.0"])) \
        if "outofplace.permute.0" in entries else list(range(rank))
    permutation = [before[d] for d in ir.DenseI64ArrayAttr(op.attributes["permutation"])]
    entries.pop("outofplace.permute.0", None)
    if permutation != list(range(rank)):
        entries["outofplace.permute.0"] = ir.DenseI64ArrayAttr.get(permutation)
    attributes = {name: call.attributes[name] for name in call.attributes}
    attributes["backend_config"] = ir.DictAttr.get(entries)
    with rewriter.ip, op.location:
        folded = ir.Operation.create("stablehlo.custom_call", results=[op.result.type],
                                     operands=list(call.operands), attributes=attributes)
    rewriter.replace_op(op, [folded.result])
    rewriter.erase_op(call)
    return False


def _used(op: ir.Operation) -> bool:
    return any(True for _ in op.result.uses)
