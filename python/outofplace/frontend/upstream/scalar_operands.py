"""Python scalar operands torch-mlir's FxImporter gets wrong, as 0-d tensors.

Where the schema takes a Tensor, the importer makes a number `torch.tensor(value)`
(`_import_scalar_as_tensor`): a float becomes a float32 tensor (a float64 program
multiplied by 0.9 rounded it to float32: an SGD step with momentum off by 1e-8) and a
bool a `NumToTensor` of a `!torch.bool`, which fails to verify (`x.copy_(True)`). A bool
where the schema takes a number is imported as an int, which promotes a bool tensor to
int64 (`mask &= True`). And torch-mlir lacks the Scalar forms of the bitwise ops
(`x.bitwise_xor_(5)`, `__iand__.Scalar`).

Upstream: llvm/torch-mlir#4448 (open: bitwise_or.Scalar and bitwise_xor.Scalar); the
importer's scalars: no issue found (llvm/torch-mlir#4552 made `mul/div/add/sub.Tensor`
with a number operand their Scalar forms; every other op still takes the tensor).
Canaries: test/pytest/test_fx_upstream_canaries.py::test_importer_makes_a_float_operand_float32,
::test_importer_makes_a_bool_operand_invalid_ir, ::test_bitwise_scalar_forms_are_undefined.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ..fx_graph import call

# The bitwise ops' Scalar forms torch-mlir does not define (the canary checks them).
UNDEFINED_SCALAR_FORMS = ("torch.aten.bitwise_xor.Scalar", "torch.aten.bitwise_or.Scalar",
                          "torch.aten.__iand__.Scalar")


# `x &= y` and friends, as the bitwise ops torch-mlir knows in both operand kinds; the
# bitwise ops' Scalar forms (`x.bitwise_xor_(5)` decomposes to a prim torch-mlir lacks)
# as their Tensor forms.
_BITWISE = {"__iand__": "bitwise_and_", "__ior__": "bitwise_or_", "__ixor__": "bitwise_xor_",
            "__ilshift__": "bitwise_left_shift_", "__irshift__": "bitwise_right_shift_",
            "__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor",
            "__lshift__": "bitwise_left_shift", "__rshift__": "bitwise_right_shift",
            **{name: name for name in ("bitwise_and", "bitwise_or", "bitwise_xor",
                                       "bitwise_and_", "bitwise_or_", "bitwise_xor_")}}


def _scalar_tensor(graph: torch.fx.Graph, value: Any) -> torch.fx.Node:
    """A 0-d tensor for a Python scalar operand; it promotes like the scalar does."""
    if isinstance(value, bool):  # the importer has no bool scalar_tensor: int != 0
        number = call(graph, torch.ops.aten.scalar_tensor.default, int(value),
                      dtype=torch.int64)
        return call(graph, torch.ops.aten.ne.Scalar, number, 0)
    dtype = torch.int64 if isinstance(value, int) else torch.get_default_dtype()
    return call(graph, torch.ops.aten.scalar_tensor.default, value, dtype=dtype)


def scalars_as_tensors(graph: torch.fx.Graph) -> None:
    """Scalar operands the importer would get wrong, as 0-d tensors of the Tensor overload.

    torch-mlir imports a Python bool operand as an int, which promotes a bool tensor to
    int64 (`mask &= True` would fail), and a bool passed as a tensor (`x.copy_(True)`) as
    invalid IR; and it lacks the Scalar form of some bitwise ops.
    """
    for node in list(graph.nodes):
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            continue
        bools = [i for i, (arg, value) in enumerate(zip(target._schema.arguments, node.args))
                 if isinstance(arg.type, torch.TensorType) and isinstance(value, bool)]
        if bools:  # `x.copy_(True)`: the importer makes a bool a tensor of ... a bool
            with graph.inserting_before(node):
                node.args = tuple(_scalar_tensor(graph, v) if i in bools else v
                                  for i, v in enumerate(node.args))
        name = target.overloadpacket.__name__
        renamed = _BITWISE.get(name)
        scalars = [i for i, (arg, value) in enumerate(zip(target._schema.arguments, node.args))
                   if isinstance(arg.type, torch.NumberType) and
                   not isinstance(value, torch.fx.Node)]
        if target._overloadname not in ("Scalar", "Tensor") or renamed is None and (
                target._overloadname != "Scalar" or
                not any(isinstance(node.args[i], bool) for i in scalars)):
            continue
        packet = getattr(torch.ops.aten, renamed or name)
        if "Tensor" not in packet.overloads():
            continue
        args = list(node.args)
        with graph.inserting_before(node):
            for i in scalars:
                args[i] = _scalar_tensor(graph, args[i])
            replacement = graph.call_function(packet.Tensor, tuple(args), dict(node.kwargs))
        replacement.meta = dict(node.meta)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)


def _is_tensor_type(argument: torch._C.Argument) -> bool:
    kind = argument.type
    if isinstance(kind, torch.OptionalType):
        kind = kind.getElementType()
    return isinstance(kind, torch.TensorType)


def float_operands_as_tensors(graph: torch.fx.Graph) -> None:
    """A Python float passed where the schema takes a Tensor (`buf.mul_(0.9)` is traced as
    `mul_.Tensor(buf, 0.9)`), as a 0-d tensor of the dtype eager computes in.

    Eager wraps the number as a double that promotes like a scalar and is read at the
    computation's dtype; torch-mlir's importer makes it a float32 tensor
    (`torch.tensor(0.9)`), so a float64 program multiplied by 0.9 rounded to float32
    (an SGD step with momentum off by 1e-8)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    for node in list(graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        schema = target._schema.arguments
        given = [(i, a, node.args[i] if i < len(node.args) else node.kwargs.get(a.name))
                 for i, a in enumerate(schema)]
        floats = [(i, a, v) for i, a, v in given
                  if _is_tensor_type(a) and isinstance(v, float)]
        if not floats:
            continue
        tensors = [v.meta["val"] for _, a, v in given if isinstance(v, torch.fx.Node)
                   and isinstance(v.meta.get("val"), torch.Tensor)]
        if not tensors:
            continue
        _, dtype = elementwise_dtypes(
            *tensors, *(v for _, _, v in floats),
            type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        if not dtype.is_floating_point:
            continue  # complex: the importer's
        args, kwargs = list(node.args), dict(node.kwargs)
        with graph.inserting_before(node):
            for i, argument, value in floats:
                number = call(graph, torch.ops.aten.scalar_tensor.default, value,
                              dtype=dtype)
                if i < len(args):
                    args[i] = number
                else:
                    kwargs[argument.name] = number
        node.args, node.kwargs = tuple(args), kwargs
