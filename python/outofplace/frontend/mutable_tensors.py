"""`mark_mutable_tensors`: the importer's all-`!torch.vtensor` IR made mutable torch IR.

torch-mlir's FxImporter writes every tensor as `!torch.vtensor`, in-place ops included,
which the verifier rejects (torch-mlir #4346). Every tensor that is written, or aliases a
written tensor, becomes `!torch.tensor`; in-place ops get `torch.copy.to_tensor`
operands, lists read values (`torch.copy.to_vtensor`).

It is the last step of the import, not a registered pass: its input does not pass the
MLIR verifier, so it cannot be parsed from text, nor handed to a PassManager (which
verifies the IR it is given). test/python/mark_mutable_tensors.py pins its output with
FileCheck, on IR made by the importer in memory.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from .. import op_registry, torch_types
from ..errors import UnsupportedMutationError
from ..ir_utils import operations, retype_function


def _root_of(value: ir.Value, roots: dict[ir.Value, ir.Value]) -> ir.Value:
    return roots.get(value, value)


def _copy_operands(op: ir.Operation, to_value: bool) -> None:
    """Gives op the tensor kind it takes, with torch-mlir's copy ops.

    In-place torch ops take only `!torch.tensor` operands (`torch.copy.to_tensor`); a list
    of tensors holds values, so it reads mutable operands (`torch.copy.to_vtensor`).
    """
    wrong_kind = torch_types.is_nonvalue_tensor if to_value else torch_types.is_value_tensor
    name, retype = ("torch.copy.to_vtensor", torch_types.value_type) if to_value else \
        ("torch.copy.to_tensor", torch_types.nonvalue_type)
    for position, operand in enumerate(op.operands):
        if wrong_kind(operand.type):
            copy = ir.Operation.create(name, results=[retype(operand.type)],
                                       operands=[operand], loc=op.location,
                                       ip=ir.InsertionPoint(op))
            op.operands[position] = copy.result


def mark_mutable_tensors(func: func_d.FuncOp) -> None:
    """Gives `!torch.tensor` type to every tensor written in place or aliasing one.

    Views hang off their base in program order, so each tensor's root is known when it is
    defined: one walk finds the roots, a second retypes the members of written roots.
    """
    block = func.regions[0].blocks[0]
    for op in operations(block):  # detach_ means nothing without autograd
        effects = op_registry.effects(op_registry.aten_name(op))
        if effects is not None and effects.is_autograd_only:
            op.result.replace_all_uses_with(op.operands[0])
            op.erase()
    roots: dict[ir.Value, ir.Value] = {}
    written: set[ir.Value] = set()
    for op in operations(block):
        effects = op_registry.effects_of(op)
        if effects is None:
            continue
        viewed = 0 if op_registry.is_position_view(op) else effects.result_views
        if viewed is not None and len(op.results) == 1:  # views and in-place ops
            roots[op.results[0]] = _root_of(op.operands[viewed], roots)
        for position in effects.written:
            if position < len(op.operands) and not effects.is_autograd_only:
                if not torch_types.is_tensor(op.operands[position].type):
                    raise UnsupportedMutationError.at(
                        op, "it writes the tensors of a list, which outofplace does "
                        "not follow (the frontend decomposes _foreach_* and _fused_* ops)")
                written.add(_root_of(op.operands[position], roots))
    if not written:
        return

    def retype(value: ir.Value) -> None:
        if torch_types.is_value_tensor(value.type) and _root_of(value, roots) in written:
            value.set_type(torch_types.nonvalue_type(value.type))

    for arg in block.arguments:
        retype(arg)
    for op in operations(block):
        for result in op.results:
            retype(result)
        effects = op_registry.effects_of(op)
        if effects is not None and effects.written:
            _copy_operands(op, to_value=False)
        elif op.name == "torch.prim.ListConstruct":
            _copy_operands(op, to_value=True)
        if op.name == "torch.vtensor.literal" and op.results[0] in written:
            raise UnsupportedMutationError.at(op, "a tensor constant is written in place")
    retype_function(func)
