"""The regions of `torch.cond` / `while_loop` (control_flow.py) and the ops kept whole
(composites.py) imported as private functions of the module, beside `main`, and their
ops annotated with them:

    %ops = torch.prim.ListConstruct %p, %k, %c
    %r = torch.operator "torch.outofplace.region"(%id, %ops)
        {outofplace.kind = "cond", outofplace.functions = [@region0_true, @region0_false],
         outofplace.carried = 0, outofplace.written = [1]}
    %k2, %c2 = torch.prim.ListUnpack %r

Each function is mutable torch IR like main (its writes of its arguments in place);
transforms/lower_regions.py lowers it and splices it in as a StableHLO region.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.fx
from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from ..ir_utils import all_operations, torch_constant
from .control_flow import REGIONS, is_region_op

_ROLES = {"cond": ("true", "false"), "while": ("cond", "body"), "composite": ("body",)}
KIND, FUNCTIONS, CARRIED, WRITTEN = ("outofplace.kind", "outofplace.functions",
                                     "outofplace.carried", "outofplace.written")
# a composite's (composites.py): its op's name and the attributes its kernel takes
COMPOSITE, COMPOSITE_ATTRIBUTES = "outofplace.composite", "outofplace.composite_attributes"


def _attribute(value: object) -> ir.Attribute:
    """A composite's attribute: a str, bool, int, float or a list of bools or ints."""
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, float):
        return ir.FloatAttr.get(ir.F64Type.get(), value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value) and value:
        return ir.DenseBoolArrayAttr.get(list(value))
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return ir.DenseI64ArrayAttr.get(list(value))
    raise TypeError(f"a composite attribute of type {type(value).__name__}")


def _name_of(value: ir.Value) -> str | None:
    """The name (NameLoc) of an argument or of the op making `value`, if any: a
    region's argument takes the name of its operand, so `cache` written in a body
    is `cache_modified` there too."""
    if isinstance(value, ir.OpResult) and value.owner.name == "torch.copy.to_vtensor":
        value = value.owner.operands[0]  # (a list reads a written tensor's value)
    loc = value.location if isinstance(value, ir.BlockArgument) else value.owner.location
    return ir.NameLoc(loc).name_str if loc.typeid == ir.NameLoc.static_typeid else None


def _region_ids(graph: torch.fx.Graph) -> list[int]:
    return [node.args[0] for node in graph.nodes
            if node.op == "call_function" and is_region_op(node.target)]


def import_regions(importer: object, graph: torch.fx.Graph,
                   prepare: Callable[[torch.fx.Graph], None],
                   mark: Callable[[func_d.FuncOp], None]) -> None:
    """Imports every region `graph` calls (and those they call) as private functions
    of the importer's module, and annotates each region op with them."""
    pending = list(_region_ids(graph))
    done: set[int] = set()
    # Each region's number in this module, in the order they are imported: the names
    # depend on the program only, not on what the process traced before (the compile
    # cache's key is the program's text).
    numbers: dict[int, int] = {}
    while pending:
        rid = pending.pop()
        if rid in done:
            continue
        done.add(rid)
        region = REGIONS[rid]
        region.names = []
        for role, gm in zip(_ROLES[region.kind], region.graphs):
            prepare(gm.graph)
            gm.recompile()
            name = f"region{numbers.setdefault(rid, len(numbers))}_{role}"
            func = importer.import_stateless_graph(gm.graph, func_name=name)
            func.attributes["sym_visibility"] = ir.StringAttr.get("private")
            mark(func.operation.opview)
            region.names.append(name)
            pending += _region_ids(gm.graph)
    module = importer.module
    i64 = ir.IntegerType.get_signless(64)
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op
                 for op in map(lambda o: o.operation, module.body.operations)
                 if op.name == "func.func"}
    region_ops = [op for op in all_operations(module.operation)
                  if op.name == "torch.operator" and ir.StringAttr(
                      op.attributes["name"]).value == "torch.outofplace.region"]
    ids = [ir.IntegerAttr(op.operands[0].owner.attributes["value"]).value
           for op in region_ops]
    for op, rid in zip(region_ops, ids):  # its id becomes its number in this module
        old = op.operands[0].owner
        op.operands[0] = torch_constant("int", numbers[rid], old.location,
                                        ir.InsertionPoint(op))
        if not list(old.result.uses):
            old.erase()
    for op, rid in zip(region_ops, ids):
        region = REGIONS[rid]
        op.attributes[KIND] = ir.StringAttr.get(region.kind)
        op.attributes[FUNCTIONS] = ir.ArrayAttr.get(
            [ir.FlatSymbolRefAttr.get(n) for n in region.names])
        op.attributes[CARRIED] = ir.IntegerAttr.get(i64, region.carried)
        op.attributes[WRITTEN] = ir.ArrayAttr.get(
            [ir.IntegerAttr.get(i64, i) for i in region.written])
        if region.kind == "composite":
            op.attributes[COMPOSITE] = ir.StringAttr.get(region.name)
            with op.location:  # (a float attribute asks for one)
                op.attributes[COMPOSITE_ATTRIBUTES] = ir.DictAttr.get(
                    {name: _attribute(v) for name, v in region.attributes.items()})
        operands = list(op.operands[1].owner.operands)  # (a torch.prim.ListConstruct)
        names = [_name_of(v) for v in operands[1 if region.kind == "cond" else 0:]]
        for callee in region.names:
            for arg, name in zip(functions[callee].regions[0].blocks[0].arguments, names):
                if name is not None:
                    arg.set_location(ir.Location.name(name, childLoc=arg.location))
