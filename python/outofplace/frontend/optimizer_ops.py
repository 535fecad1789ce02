"""What torch.optim's steps trace to, as ops the pass and torch-mlir know.

- `_foreach_<op>[_]` (every overload): the per-tensor `<op>[_]` on each element, the
  lists' i-th elements, a `Scalar[]` its i-th number, the `scalars` tensor its i-th element.
- `_fused_sgd_`, `_fused_adam_`, `_fused_adamw_`, `_fused_adagrad_`: the per-tensor math
  of their CPU kernels, in place on parameters and state.
- `.item()` of a tensor (`aten.item`) that feeds arithmetic and scalar operands stays a
  0-d tensor (float64 or int64, as Python computes): a step counter read with `.item()`
  must not be baked in. Any other use of it is refused at its line.

Each `Tensor(a!)[]` list a schema writes becomes in-place ops on its elements, which the
pass sees as writes.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx

from ..errors import UnsupportedMutationError
from . import fused_multiply_adds
from .fx_graph import call, op_effects, source_line

aten = torch.ops.aten


def _arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    given = {a.name: v for a, v in zip(schema.arguments, node.args)}
    given.update(node.kwargs)
    return {a.name: given.get(a.name, a.default_value if a.has_default_value() else None)
            for a in schema.arguments}


def _matches(argument: torch._C.Argument, value: Any) -> bool:
    kind = argument.type.kind()
    if kind == "OptionalType":
        if value is None:
            return True
        kind = argument.type.getElementType().kind()
    if isinstance(value, torch.fx.Node):  # a tensor, or a number dynamo made an input
        number = value.meta.get("val")
        if isinstance(number, (torch.SymFloat, torch.SymInt, torch.SymBool)):
            return kind in ("NumberType", "FloatType", "IntType", "BoolType")
        return kind == "TensorType"
    if isinstance(value, bool):
        return kind == "BoolType"
    if isinstance(value, (int, float)):
        return kind in ("NumberType", "FloatType", "IntType") and not (
            kind == "IntType" and isinstance(value, float))
    return False  # (None: only an optional argument takes it, above)


def _per_tensor_overload(packet: Any, args: list[Any], kwargs: dict[str, Any]
                         ) -> torch._ops.OpOverload | None:
    """The overload of `packet` whose schema takes these per-element arguments."""
    names = sorted(packet.overloads(), key=lambda n: (n not in ("Tensor", "default"), n))
    for name in names:
        overload = getattr(packet, name)
        schema = overload._schema.arguments
        positional = [a for a in schema if not a.kwarg_only]
        if len(args) > len(positional) or any(k not in {a.name for a in schema}
                                              for k in kwargs):
            continue
        given = dict(zip([a.name for a in positional], args), **kwargs)
        if all(_matches(a, given[a.name]) if a.name in given else a.has_default_value()
               for a in schema):
            return overload
    return None


# foreach ops whose per-tensor op is named otherwise: `_foreach_norm(tensors, ord,
# dtype)` (clip_grad_norm_'s) is each tensor's `linalg_vector_norm(t, ord, dtype=dtype)`
_PER_TENSOR = {"norm": "linalg_vector_norm"}


def _decompose_foreach(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    schema = node.target._schema
    name = node.target.overloadpacket.__name__.removeprefix("_foreach_")
    packet = getattr(aten, _PER_TENSOR.get(name, name), None)
    copy_back = packet is None and name.endswith("_")  # maximum_: maximum, then copy_
    if copy_back:
        packet = getattr(aten, name[:-1], None)
    arguments = _arguments(node)
    lengths = [len(v) for v in arguments.values() if isinstance(v, (list, tuple))]
    if packet is None or not lengths:
        raise UnsupportedMutationError(
            str(node.target), "no per-tensor op computes it", location=source_line(node))
    results = []
    for i in range(lengths[0]):
        args, kwargs = [], {}
        for argument in schema.arguments:
            value = arguments[argument.name]
            if isinstance(value, (list, tuple)):
                value = value[i]
            elif argument.name == "scalars" and isinstance(value, torch.fx.Node):
                value = call(graph, aten.select.int, value, 0, i)
            if argument.kwarg_only or name in _PER_TENSOR and argument.name == "dtype":
                kwargs[argument.name] = value
            else:
                args.append(value)
        overload = _per_tensor_overload(packet, args, kwargs)
        if overload is None and name in ("addcmul", "addcdiv", "addcmul_", "addcdiv_") \
                and len(args) == 4:
            overload, kwargs = getattr(packet, "default"), {"value": args.pop()}
        if overload is None and name.rstrip("_") in ("maximum", "minimum"):
            # with a number (ASGD's capturable step: `_foreach_maximum_(mus, 1.0)`): the
            # clamp, which keeps NaN as `maximum` does
            overload = _per_tensor_overload(
                aten.clamp_min if name.startswith("maximum") else aten.clamp_max, args, kwargs)
        if overload is None:
            raise UnsupportedMutationError(
                str(node.target), f"no overload of aten.{name} takes its elements",
                location=source_line(node))
        result = call(graph, overload, *args, **kwargs)
        if copy_back:
            result = call(graph, aten.copy_.default, args[0], result)
        result.meta["stack_trace"] = node.meta.get("stack_trace")
        results.append(result)
    for user in list(node.users):
        if user.target is operator.getitem:
            user.replace_all_uses_with(results[user.args[1]])
            graph.erase_node(user)
        else:  # the whole list, an operand of another foreach op
            user.args = tuple(results if a is node else a for a in user.args)
            user.kwargs = {k: results if v is node else v for k, v in user.kwargs.items()}


class _Emitter:
    """`e("mul.Tensor", a, b)`: a node of aten's mul.Tensor with its fake value."""

    def __init__(self, graph: torch.fx.Graph, node: torch.fx.Node) -> None:
        self.graph, self.stack_trace = graph, node.meta.get("stack_trace")

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> torch.fx.Node:
        packet, _, overload = name.partition(".")
        result = call(self.graph, getattr(getattr(aten, packet), overload or "default"),
                      *args, **kwargs)
        result.meta["stack_trace"] = self.stack_trace
        return result

    def scaled(self, tensor: torch.fx.Node, factor: Any) -> torch.fx.Node:
        """tensor * factor, factor a number or a 0-d tensor."""
        if isinstance(factor, torch.fx.Node):
            return self("mul.Tensor", tensor, factor)
        return self("mul.Scalar", tensor, factor)

    def step(self, step: torch.fx.Node) -> torch.fx.Node:
        """The step counter as the kernels read it: a double."""
        return self("to.dtype", step, torch.float64)


def _gradient(e: _Emitter, args: dict[str, Any], i: int, param: torch.fx.Node
              ) -> torch.fx.Node:
    grad = args["grads"][i]
    if args["maximize"]:
        grad = e("neg", grad)
    if args["weight_decay"] and args.get("_decoupled") is not True:
        grad = e("add.Tensor", grad, param, alpha=args["weight_decay"])
    return grad


def _fused_sgd(e: _Emitter, args: dict[str, Any], i: int) -> None:
    param = args["self"][i]
    grad = _gradient(e, args, i, param)
    if args["momentum"]:
        buf = args["momentum_buffer_list"][i]
        if args["is_first_step"]:
            e("copy_", buf, grad)
        else:
            e("add_.Tensor", e("mul_.Scalar", buf, args["momentum"]), grad,
              alpha=1 - args["dampening"])
        grad = e("add.Tensor", grad, buf, alpha=args["momentum"]) if args["nesterov"] \
            else buf
    e("sub_.Tensor", param, e.scaled(grad, args["lr"]))


def _fused_adam(e: _Emitter, args: dict[str, Any], i: int, decoupled: bool) -> None:
    param = args["self"][i]
    lr = args["lr"]
    if decoupled and args["weight_decay"]:
        scale = e("rsub.Scalar", e("mul.Scalar", lr, args["weight_decay"]), 1) \
            if isinstance(lr, torch.fx.Node) else 1 - lr * args["weight_decay"]
        e("mul_.Tensor" if isinstance(scale, torch.fx.Node) else "mul_.Scalar", param, scale)
    grad = _gradient(e, {**args, "_decoupled": decoupled}, i, param)
    exp_avg, exp_avg_sq = args["exp_avgs"][i], args["exp_avg_sqs"][i]
    e("lerp_.Scalar", exp_avg, grad, 1 - args["beta1"])
    e("add_.Tensor", e("mul_.Scalar", exp_avg_sq, args["beta2"]),
      e("mul.Tensor", e("mul.Scalar", grad, 1 - args["beta2"]), grad))
    step = e.step(args["state_steps"][i])
    bias_correction1 = e("rsub.Scalar", e("pow.Scalar", args["beta1"], step), 1)
    bias_correction2 = e("rsub.Scalar", e("pow.Scalar", args["beta2"], step), 1)
    step_size = e("div.Tensor", lr, bias_correction1) if isinstance(lr, torch.fx.Node) \
        else e("mul.Scalar", e("reciprocal", bias_correction1), lr)
    second = exp_avg_sq
    if args["amsgrad"]:
        second = args["max_exp_avg_sqs"][i]
        e("copy_", second, e("maximum", second, exp_avg_sq))
    denom = e("add.Scalar", e("div.Tensor", e("sqrt", second), e("sqrt", bias_correction2)),
              args["eps"])
    e("sub_.Tensor", param, e("div.Tensor", e("mul.Tensor", exp_avg, step_size), denom))


def _fused_adagrad(e: _Emitter, args: dict[str, Any], i: int) -> None:
    param = args["self"][i]
    grad = _gradient(e, args, i, param)
    state_sum = args["state_sums"][i]
    step = e.step(args["state_steps"][i])
    decay = e("add.Scalar", e("mul.Scalar", e("sub.Scalar", step, 1), args["lr_decay"]), 1)
    clr = e("div.Tensor", args["lr"], decay) if isinstance(args["lr"], torch.fx.Node) \
        else e("mul.Scalar", e("reciprocal", decay), args["lr"])
    e("add_.Tensor", state_sum, e("mul.Tensor", grad, grad))
    std = e("add.Scalar", e("sqrt", state_sum), args["eps"])
    e("sub_.Tensor", param, e("div.Tensor", e("mul.Tensor", grad, clr), std))


_FUSED = {
    "_fused_sgd_": _fused_sgd,
    "_fused_adam_": lambda e, args, i: _fused_adam(e, args, i, decoupled=False),
    "_fused_adamw_": lambda e, args, i: _fused_adam(e, args, i, decoupled=True),
    "_fused_adagrad_": _fused_adagrad,
}


def _decompose_fused(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    name = node.target.overloadpacket.__name__
    args = _arguments(node)
    if name not in _FUSED or args.get("grad_scale") is not None or \
            args.get("found_inf") is not None:
        raise UnsupportedMutationError(
            str(node.target), "outofplace computes the fused steps of SGD, Adam, AdamW and "
            "Adagrad without a GradScaler's grad_scale/found_inf",
            location=source_line(node))
    e = _Emitter(graph, node)
    for i in range(len(args["self"])):
        _FUSED[name](e, args, i)


def decompose(graph: torch.fx.Graph) -> None:
    """`_foreach_*` and `_fused_*` ops as per-tensor ops."""
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) \
                or node.target.namespace != "aten":
            continue
        name = node.target.overloadpacket.__name__
        if not name.startswith(("_foreach_", "_fused_")) or name == "_fused_rms_norm":
            continue
        with graph.inserting_before(node):
            if name.startswith("_foreach_"):
                _decompose_foreach(graph, node)
            else:
                _decompose_fused(graph, node)
        if not node.users:
            graph.erase_node(node)


# Python arithmetic on a value read with .item(), as aten ops on 0-d tensors.
_ARITHMETIC = {operator.add: "add.Tensor", operator.sub: "sub.Tensor",
               operator.mul: "mul.Tensor", operator.truediv: "div.Tensor",
               operator.pow: "pow.Tensor_Tensor"}
_UNARY = {operator.neg: "neg", math.sqrt: "sqrt", torch.sym_float: None,
          torch.sym_sqrt: "sqrt"}


def _as_tensor(e: _Emitter, value: Any) -> torch.fx.Node:
    if isinstance(value, torch.fx.Node):
        return value
    dtype = torch.int64 if isinstance(value, int) else torch.float64
    return e("scalar_tensor", value, dtype=dtype)


def numbers_at_their_ops_dtype(graph: torch.fx.Graph) -> None:
    """A Python number computed from `.item()` values (a 0-d tensor here: ItemAsTensor's
    `convert_element_type`, and pointwise ops of such numbers only) where it meets a
    tensor of the program, read at the dtype the op computes in with a Python number,
    as eager reads it. NAdam's `mu_product *= mu` multiplies a float32 state by a number
    computed in float64 from the step: eager by `mu` rounded to float32; two 0-d tensors
    would compute in float64, then round (one unit in the last place off). With a
    float16 or bfloat16 tensor, eager computes in float32 with the number: float32 here,
    which reduced_precision.py then reads as the number it is."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    numbers: set[torch.fx.Node] = set()
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        inputs = [a for a in node.all_input_nodes
                  if isinstance(a.meta.get("val"), torch.Tensor)]
        if node.target is torch.ops.prims.convert_element_type.default and \
                node.meta["val"].dim() == 0 and node.meta["val"].dtype in (
                    torch.float64, torch.int64, torch.bool):
            numbers.add(node)
            continue
        if torch.Tag.pointwise not in node.target.tags or not inputs:
            continue
        own = [a for a in inputs if a not in numbers]
        if not own:
            effects = op_effects(node)
            if effects is None or not effects.is_inplace:
                numbers.add(node)
            continue
        if len(own) == len(inputs) or not any(
                a.meta["val"].dtype.is_floating_point for a in own):
            continue
        _, dtype = elementwise_dtypes(
            *(a.meta["val"] for a in own), 1.0,
            type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        if dtype in (torch.float16, torch.bfloat16):  # eager's kernel computes in float32,
            dtype = torch.float32  # the number in it (reduced_precision.py reads it so)
        for number in [a for a in inputs if a in numbers]:
            if number.meta["val"].dtype != dtype:
                with graph.inserting_before(node):
                    cast = call(graph, torch.ops.prims.convert_element_type.default,
                                number, dtype)
                node.replace_input_with(number, cast)


def scalars_read_as_tensors(graph: torch.fx.Graph) -> None:
    """`aten.item(t)` that feeds arithmetic and scalar operands: the 0-d tensor itself."""
    tensors: dict[torch.fx.Node, torch.fx.Node] = {}  # a scalar node -> its 0-d tensor
    for node in list(graph.nodes):
        if node.target in (aten.item.default, aten._local_scalar_dense.default):
            e = _Emitter(graph, node)
            value = node.args[0]
            with graph.inserting_before(node):
                dtype = value.meta["val"].dtype
                wide = torch.float64 if dtype.is_floating_point else \
                    torch.bool if dtype == torch.bool else torch.int64
                tensors[node] = e("to.dtype", e("view.default", value, []), wide)
            continue
        if not any(isinstance(a, torch.fx.Node) and a in tensors
                   for a in node.args + tuple(node.kwargs.values())):
            continue
        e = _Emitter(graph, node)
        with graph.inserting_before(node):
            replacement = _tensor_form(e, node, tensors)
        if replacement is None:
            raise UnsupportedMutationError(
                str(node.target), "it takes a value read from a tensor with .item() as a "
                "Python number, which the compiled program cannot read at run time (eager's "
                "value would be baked in); compute with the 0-d tensor instead",
                location=source_line(node))
        if replacement is not node:
            if node.op == "call_function" and replacement.op == "call_function" and \
                    isinstance(node.target, torch._ops.OpOverload):
                replacement.meta = {**node.meta, "val": replacement.meta["val"]}
            node.replace_all_uses_with(replacement)
            graph.erase_node(node)
        if _is_scalar_result(node):
            tensors[replacement] = replacement
    for node in reversed(list(tensors)):
        if node.target in (aten.item.default, aten._local_scalar_dense.default) and \
                not node.users:
            graph.erase_node(node)


def _is_scalar_result(node: torch.fx.Node) -> bool:
    return node.target in _ARITHMETIC or node.target in _UNARY


def _tensor_form(e: _Emitter, node: torch.fx.Node, tensors: dict[torch.fx.Node, torch.fx.Node]
                 ) -> torch.fx.Node | None:
    """The node with its scalar operands read from 0-d tensors, or None."""
    def t(value: Any) -> Any:
        return tensors.get(value, value) if isinstance(value, torch.fx.Node) else value

    if node.target in _ARITHMETIC:
        return e(_ARITHMETIC[node.target], _as_tensor(e, t(node.args[0])),
                 _as_tensor(e, t(node.args[1])))
    if node.target in _UNARY:
        inner = t(node.args[0])
        return inner if _UNARY[node.target] is None else e(_UNARY[node.target], inner)
    if not isinstance(node.target, torch._ops.OpOverload):
        return None
    schema = node.target._schema
    scalar_positions = [i for i, (a, v) in enumerate(zip(schema.arguments, node.args))
                        if v in tensors]
    scalar_names = [k for k, v in node.kwargs.items() if v in tensors]
    if not scalar_positions and not scalar_names:
        return node
    packet = node.target.overloadpacket
    args = [t(a) for a in node.args]
    kwargs = {k: t(v) for k, v in node.kwargs.items()}
    if packet in (aten.addcmul_, aten.addcdiv_, aten.addcmul, aten.addcdiv) and \
            scalar_names == ["value"] and not scalar_positions:  # as eager rounds them
        return fused_multiply_adds.multiply_add(e.graph, node, kwargs["value"])
    if packet in (aten.add_, aten.sub_, aten.add, aten.sub) and scalar_names == ["alpha"] \
            and not scalar_positions and len(args) == 2 and \
            isinstance(args[1], torch.fx.Node):  # x.add_(y, alpha=t.item())
        return fused_multiply_adds.scaled_add(e.graph, node, kwargs["alpha"])
    if scalar_names:
        return None
    overload = _per_tensor_overload(packet, args, kwargs)
    return None if overload is None or overload is node.target else \
        e(f"{packet.__name__}.{overload._overloadname}", *args, **kwargs)
