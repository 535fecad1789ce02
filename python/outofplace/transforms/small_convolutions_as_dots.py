"""`outofplace-small-convolutions-as-dots`: a convolution whose window is larger than its
input (a 3x3 kernel over ResNet's last 2x2 feature maps) becomes one `dot_general` over
the window's slices of the padded input, for XLA:CPU.

XLA:CPU runs such a convolution hundreds of times slower than the matrix product it is:
a 3x3 convolution of 512 channels over [8, 512, 2, 2] took 300 ms on XLA:CPU, whether
outofplace's program or JAX's own `lax.conv_general_dilated`, against 17 ms as slices and
a dot (eager: 18 ms; bench/op_classes.py). A ResNet-18 training step at 64x64 spent most
of its time there. Where the window fits the input, XLA:CPU's convolution is as fast as
eager's or faster, and is left alone.

    %y = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1],
           window = {pad = [[1, 1], [1, 1]]} : (tensor<8x512x2x2xf32>, tensor<512x512x3x3xf32>)
  =>
    %p = stablehlo.pad %x, low = [0, 0, 1, 1], high = [0, 0, 1, 1]          (8x512x4x4)
    %s_ij = stablehlo.slice %p [0:8, 0:512, i:i+2, j:j+2], reshaped to 8x512x2x2x1
    %c = stablehlo.concatenate %s_00, ..., %s_22, dim = 4                     (8x512x2x2x9)
    %k = stablehlo.reshape (stablehlo.transpose %w) : 512x512x9
    %d = stablehlo.dot_general %c, %k, contracting_dims = [1, 4] x [1, 2]    (8x2x2x512)
    %y = stablehlo.transpose %d, dims = [0, 3, 1, 2]

Window strides become the slices' strides and kernel dilations their offsets. Grouped
convolutions, input dilations (transposed convolutions), negative padding and reversed
windows are left as they are. Only the XLA engine runs it (backends/xla).
"""

from __future__ import annotations

import math

from torch_mlir import ir, rewrite
from torch_mlir._mlir_libs import _stablehlo

from ..ir_utils import create_ranked, i64_array, ranked_shape, stablehlo_splat
from .registry import register_pass


def _rewrite(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    numbers = _stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    x, w = op.operands
    if not (ir.RankedTensorType(x.type).has_static_shape and
            ir.RankedTensorType(w.type).has_static_shape):
        return True
    x_shape, w_shape = ranked_shape(x), ranked_shape(w)
    spatial = list(numbers.input_spatial_dimensions)
    kernel = list(numbers.kernel_spatial_dimensions)
    rank = len(spatial)
    strides = i64_array(op, "window_strides", [1] * rank)
    dilations = i64_array(op, "rhs_dilation", [1] * rank)
    flat = [int(p) for p in ir.DenseIntElementsAttr(op.attributes["padding"])] \
        if "padding" in op.attributes else [0] * (2 * rank)
    padding = [flat[2 * i:2 * i + 2] for i in range(rank)]
    groups = [ir.IntegerAttr(op.attributes[n]).value
              for n in ("feature_group_count", "batch_group_count")]
    if groups != [1, 1] or i64_array(op, "lhs_dilation", [1] * rank) != [1] * rank:
        return True
    if "window_reversal" in op.attributes and any(
            ir.DenseBoolArrayAttr(op.attributes["window_reversal"])):
        return True
    if any(p < 0 for row in padding for p in row):
        return True
    extents = [(w_shape[k] - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if all(e <= x_shape[s] for e, s in zip(extents, spatial)):
        return True  # the window fits the input: XLA:CPU's convolution is fast there
    out_shape = ranked_shape(op.result)
    out_spatial = [out_shape[d] for d in numbers.output_spatial_dimensions]
    element = ir.RankedTensorType(x.type).element_type
    with rewriter.ip, op.location:
        # the input padded
        low, high = [0] * len(x_shape), [0] * len(x_shape)
        for s, (lo, hi) in zip(spatial, padding):
            low[s], high[s] = lo, hi
        padded_shape = [n + lo + hi for n, lo, hi in zip(x_shape, low, high)]
        zero = stablehlo_splat(ir.RankedTensorType.get([], element), 0)
        padded = create_ranked("stablehlo.pad", [x, zero], padded_shape, element,
                         edge_padding_low=ir.DenseI64ArrayAttr.get(low),
                         edge_padding_high=ir.DenseI64ArrayAttr.get(high),
                         interior_padding=ir.DenseI64ArrayAttr.get([0] * len(x_shape)))
        # one slice per window position, kernel dimensions major to minor
        sliced_shape = list(x_shape)
        for s, n in zip(spatial, out_spatial):
            sliced_shape[s] = n
        slices = []
        for offsets in _positions([w_shape[k] for k in kernel]):
            start, limit, step = [0] * len(x_shape), list(padded_shape), [1] * len(x_shape)
            for s, o, d, st, n in zip(spatial, offsets, dilations, strides, out_spatial):
                start[s], limit[s], step[s] = o * d, o * d + (n - 1) * st + 1, st
            part = create_ranked("stablehlo.slice", [padded], sliced_shape, element,
                           start_indices=ir.DenseI64ArrayAttr.get(start),
                           limit_indices=ir.DenseI64ArrayAttr.get(limit),
                           strides=ir.DenseI64ArrayAttr.get(step))
            slices.append(create_ranked("stablehlo.reshape", [part], sliced_shape + [1], element))
        window = math.prod(w_shape[k] for k in kernel)
        patches = create_ranked("stablehlo.concatenate", slices, sliced_shape + [window], element,
                          dimension=ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                       len(x_shape)))
        # the kernel as [output features, input features, window]
        order = [numbers.kernel_output_feature_dimension,
                 numbers.kernel_input_feature_dimension, *kernel]
        w_element = ir.RankedTensorType(w.type).element_type
        w_t = w if order == list(range(len(w_shape))) else create_ranked(
            "stablehlo.transpose", [w], [w_shape[d] for d in order], w_element,
            permutation=ir.DenseI64ArrayAttr.get(order))
        features = [w_shape[numbers.kernel_output_feature_dimension],
                    w_shape[numbers.kernel_input_feature_dimension]]
        w_flat = w_t if ranked_shape(w_t) == features + [window] else create_ranked(
            "stablehlo.reshape", [w_t], features + [window], w_element)
        # the product: the input's batch and spatial dimensions (its order), then features
        kept = [d for d in range(len(x_shape)) if d != numbers.input_feature_dimension]
        dot_shape = [sliced_shape[d] for d in kept] + [features[0]]
        dot = ir.Operation.create(
            "stablehlo.dot_general", results=[ir.RankedTensorType.get(
                dot_shape, ir.RankedTensorType(op.result.type).element_type)],
            operands=[patches, w_flat], attributes={
                "dot_dimension_numbers": _stablehlo.DotDimensionNumbers.get(
                    [], [], [numbers.input_feature_dimension, len(x_shape)], [1, 2],
                    context=op.context),
                **({"precision_config": op.attributes["precision_config"]}
                   if "precision_config" in op.attributes else {})}).result
        # to the convolution's output layout
        where = {numbers.input_batch_dimension: numbers.output_batch_dimension}
        where.update(zip(spatial, numbers.output_spatial_dimensions))
        position = {where[d]: i for i, d in enumerate(kept)}
        position[numbers.output_feature_dimension] = len(kept)
        permutation = [position[d] for d in range(len(out_shape))]
        result = dot if permutation == list(range(len(out_shape))) else create_ranked(
            "stablehlo.transpose", [dot], out_shape,
            ir.RankedTensorType(op.result.type).element_type,
            permutation=ir.DenseI64ArrayAttr.get(permutation))
    rewriter.replace_op(op, [result])
    return False


def _positions(sizes: list[int]) -> list[tuple[int, ...]]:
    """Every index tuple of a window of `sizes`, the first dimension major."""
    if not sizes:
        return [()]
    return [(i, *rest) for i in range(sizes[0]) for rest in _positions(sizes[1:])]


@register_pass(
    "outofplace-small-convolutions-as-dots",
    "Convolutions whose window is larger than their input as one dot over the window's slices",
    "`stablehlo.convolution` (no groups, no input dilation) whose dilated kernel is larger "
    "than its input in a spatial dimension → `pad`, one strided `slice` per window "
    "position, `concatenate` and one `dot_general` with the kernel: XLA:CPU runs such a "
    "convolution (a 3x3 kernel over a 2x2 feature map) hundreds of times slower than the "
    "product (the XLA engine's legalization, backends/xla)")
def small_convolutions_as_dots(module: ir.Operation) -> None:
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.convolution", _rewrite)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
