"""float16 and bfloat16 computed as eager computes them on CPU.

Eager's CPU kernels compute a float16/bfloat16 op in float32 ("opmath") and round the
result once. A Python number in `mul`, `div`, `addcmul`, `lerp` and the activations'
parameters (`x.mul_(0.9)`, `addcmul_(a, b, value=1e-3)`, `lerp_(y, 0.3)`) enters that
float32 computation as the number itself (TensorIterator's `original_scalar_value`); in
`add`, `sub` and `pow` (`x + 0.1`, `add_(y, alpha=0.1)`) as the number rounded to the
tensor's dtype first (measured against torch 2.13). A reduction (`sum`, `mean`)
accumulates in float32. torch-mlir types every number as the tensor's dtype and computes
and reduces in it: `ema.mul_(0.999)` in bfloat16 multiplied by 1.0, a sum of 4,096
bfloat16 values was two units in the last place off.

So such an op computes in float32 here too, its result converted back: the same single
rounding as eager's. Ops that compare or store a number (`gt`, `clamp`, `fill`,
`masked_fill`, `where`) read it at the tensor's dtype in eager as well and are left alone.
Every other pointwise op computes in float32 too, and the norms and softmaxes
(`_IN_FLOAT32`): eager's kernel of an activation (`silu`, `gelu`, `sigmoid`, `mish`,
`hardsigmoid`, ...) computes its formula in float32 and rounds once, where the
decomposition's ops each rounded in the dtype (of 4,096 bfloat16 values, silu's results
differed from eager's in 968, selu's in 3,067; float16's sigmoid in 1,378: now 0).
"""

from __future__ import annotations

import torch
import torch.fx

from .fx_graph import call, op_effects

REDUCED = (torch.float16, torch.bfloat16)
A = torch.ops.aten

# Pointwise ops that read a number at the tensor's dtype in eager, as they do here.
_AT_TENSOR_DTYPE = {"eq", "ne", "lt", "le", "gt", "ge", "clamp", "clamp_min", "clamp_max",
                    "clip", "fill", "masked_fill", "where", "copy", "threshold",
                    "hardtanh", "nan_to_num", "remainder", "fmod", "floor_divide"}
# Pointwise ops whose number eager rounds to the tensor's dtype before its float32 math.
_NUMBER_ROUNDED = {"add", "sub", "rsub", "pow"}
# Pointwise ops whose result is exact in the tensor's dtype (one of their operands', or
# its sign, magnitude or integer part): no float32 to compute them in.
_EXACT = {"clone", "neg", "abs", "relu", "maximum", "minimum", "fmax", "fmin", "sign",
          "sgn", "round", "floor", "ceil", "trunc", "positive", "threshold_backward",
          "hardtanh_backward", "isnan", "isinf", "isfinite", "signbit", "copysign",
          "heaviside", "logical_not", "bitwise_not", "nextafter", "alias"}
# Ops besides the pointwise ones that eager's CPU kernel computes in float32 from the
# float16/bfloat16 operands to the one rounding of each result: norms, softmaxes, a
# loss, whole here (their decompositions, op by op in the dtype, rounded at each op:
# of 4,096 bfloat16 values, rms_norm's results differed from eager's in 1,168, layer
# norm's in 1,990, log_softmax's in 1,147; now 0, 1 and 321). Not the losses eager
# computes op by op (`binary_cross_entropy_with_logits`, `huber_loss`).
# And the pointwise kernels PyTorch does not tag `pointwise` (hardswish, the
# activations' backwards).
_IN_FLOAT32 = {A.rms_norm.default, A.layer_norm.default, A.log_softmax.int,
               A.softmax.int, A._log_softmax.default, A._softmax.default, A.glu.default,
               A.smooth_l1_loss.default, A.softplus.default, A.hardswish.default,
               A.hardswish_backward.default, A.hardsigmoid_backward.default,
               A.elu_backward.default, A.mish_backward.default,
               A.softplus_backward.default, A.leaky_relu_backward.default,
               A._prelu_kernel.default}
# Reductions that accumulate in float32 in eager, and take the dtype to accumulate in.
_ACCUMULATING = {A.sum.default, A.sum.dim_IntList, A.mean.default, A.mean.dim,
                 A.cumsum.default, A.prod.default, A.prod.dim_int}


def _is_reduced(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in REDUCED


def _scalar_tensor(value: object, dtype: torch.dtype) -> bool:
    """A 0-d floating tensor of another dtype than the op's (a number `.item()` gave, a
    step count): eager's kernel reads it as it reads a Python number (a CPU scalar's
    `original_scalar_value`), so it is one here too."""
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dim() == 0 and \
        val.is_floating_point() and val.dtype != dtype


def _reads_a_number(node: torch.fx.Node) -> bool:
    dtype = node.meta["val"].dtype
    return any(isinstance(value, (int, float)) and not isinstance(value, bool) or
               _scalar_tensor(value, dtype)
               for value in (*node.args, *node.kwargs.values()))


def _in_float32(graph: torch.fx.Graph, value: object) -> object:
    if isinstance(value, torch.fx.Node) and _is_reduced(value.meta.get("val")):
        return call(graph, A._to_copy.default, value, dtype=torch.float32)
    return value


def compute_in_float32(graph: torch.fx.Graph) -> None:
    """Each float16/bfloat16 pointwise op (but `_EXACT`'s, and `_AT_TENSOR_DTYPE`'s
    reading a number) and `_IN_FLOAT32` op, and each accumulating reduction, computed
    in float32 and converted back (see above)."""
    for node in list(graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or \
                not _is_reduced(node.meta.get("val")):
            continue
        name = target.overloadpacket.__name__.rstrip("_")
        if target in _ACCUMULATING:
            _accumulate_in_float32(graph, node)
        elif (target in _IN_FLOAT32 or torch.Tag.pointwise in target.tags and
              name not in _EXACT and (name not in _AT_TENSOR_DTYPE or
                                      not _reads_a_number(node))) and \
                _computes_in_reduced_precision(node):
            _computed_in_float32(graph, node)


def _computes_in_reduced_precision(node: torch.fx.Node) -> bool:
    """Whether the op computes in float16/bfloat16 (then eager's kernel uses float32),
    not in a wider dtype its tensors promote to (`b.add_(s, alpha=0.9)` of a float16 `b`
    and a 0-d float64 `s` computes in float64, then rounds into b)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    tensors = [a.meta["val"] for a in node.all_input_nodes
               if isinstance(a.meta.get("val"), torch.Tensor)]
    _, dtype = elementwise_dtypes(
        *tensors, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return dtype in REDUCED


def _computed_in_float32(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    effects = op_effects(node)
    functional = node.target
    if effects is not None and effects.is_inplace:
        if effects.written != (0,) or effects.twin is None:
            return
        functional = effects.twin
    dtype = node.meta["val"].dtype
    rounded = node.target.overloadpacket.__name__.rstrip("_") in _NUMBER_ROUNDED

    def operand(value: object) -> object:
        if rounded and isinstance(value, (int, float)) and not isinstance(value, bool):
            return torch.tensor(value, dtype=dtype).item()
        if rounded and _scalar_tensor(value, dtype):  # rounded to the dtype, then widened
            return call(graph, A._to_copy.default,
                        call(graph, A._to_copy.default, value, dtype=dtype),
                        dtype=torch.float32)
        return _in_float32(graph, value)  # (a wider 0-d tensor stays: read as a number)

    with graph.inserting_before(node):
        args = tuple(operand(a) for a in node.args)
        kwargs = {k: operand(v) for k, v in node.kwargs.items()}
        result = call(graph, A._to_copy.default,
                      call(graph, functional, *args, **kwargs), dtype=dtype)
        if functional is not node.target:  # in place: the result stored into self
            result = call(graph, A.copy_.default, node.args[0], result)
    result.meta = dict(node.meta)  # its value too: views of it keep its storage
    node.replace_all_uses_with(result)
    graph.erase_node(node)


def _accumulate_in_float32(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    if node.kwargs.get("dtype") is not None:
        return  # the dtype the user asked for
    dtype = node.meta["val"].dtype
    with graph.inserting_before(node):
        total = call(graph, node.target, *node.args,
                     **{**node.kwargs, "dtype": torch.float32})
        result = call(graph, A._to_copy.default, total, dtype=dtype)
    result.meta = dict(node.meta)  # its value too: views of it keep its storage
    node.replace_all_uses_with(result)
    graph.erase_node(node)
