"""The `outofplace-lower-collectives` pass: functional collectives → StableHLO collectives.

A rank-local tensor-parallel program (docs/sharding.md, "Tensor-parallel programs with
collectives") reaches this pass with PyTorch's functional collectives as calls
(`torch.operator "torch._c10d_functional.*"`: what torch.export and dynamo make of
`dist.all_reduce(y)` and the other c10d calls, a `copy_` into the written tensor that
inplace-to-outofplace already turned into a new version). Each becomes its collective,
between torch_c casts, run before `outofplace-kernel-calls` (which would make it a
custom call):

    all_reduce(x, "sum", group)              → stablehlo.all_reduce (add body; "avg" is
                                               the sum divided by the group's size)
    all_reduce_(x, ...)                      → the same, its result the written x's
    all_gather_into_tensor(x, n, group)      → stablehlo.all_gather, dimension 0
    reduce_scatter_tensor(x, op, n, group)   → stablehlo.reduce_scatter, dimension 0
    all_to_all_single(x, out, in, group)     → stablehlo.all_to_all, dimension 0 (even
                                               splits)
    wait_tensor(x)                           → x

The replica groups come from the module's `outofplace.process_groups` (group name → its
replica groups, recorded from torch.distributed by frontend/collectives.py when the
program is traced); each collective gets its own channel id, in program order, with
`use_global_device_ids`: a rank is a replica (`mhlo.num_replicas` = the world's size, set
here on the module). An all_to_all has no channel: XLA reads one with a channel as
crossing partitions, and it has no `use_global_device_ids` to say otherwise. Anything
else (a reduce op XLA has no body for, uneven splits, a group the module does not name,
an `all_reduce_` into a view) is refused naming the op.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from .. import torch_types
from ..errors import UnsupportedMutationError
from ..frontend.collectives import GROUP_OPERAND, GROUPS, WORLD, collective_name
from ..ir_utils import all_operations, from_builtin, to_builtin, unnamed
from .registry import register_pass

_BODIES = {"sum": "stablehlo.add", "avg": "stablehlo.add", "product": "stablehlo.multiply",
           "min": "stablehlo.minimum", "max": "stablehlo.maximum"}


def _constant(value: ir.Value, op: ir.Operation, what: str):
    owner = value.owner if isinstance(value, ir.OpResult) else None
    kind = owner.name if owner is not None else ""
    if kind == "torch.constant.str":
        return ir.StringAttr(owner.attributes["value"]).value
    if kind == "torch.constant.int":
        return ir.IntegerAttr(owner.attributes["value"]).value
    if kind == "torch.constant.none":
        return None
    if kind == "torch.prim.ListConstruct":
        return [_constant(v, op, what) for v in owner.operands]
    raise UnsupportedMutationError.at(
        op, f"collective: its {what} is not a constant known when compiling")


def _builtin_type(value_type: ir.Type, op: ir.Operation) -> ir.RankedTensorType:
    t = torch_types.TensorType.of(value_type)
    if t.sizes is None or t.dtype is None or any(d < 0 for d in t.sizes):
        raise UnsupportedMutationError.at(op, "collective: a tensor without a static shape")
    return ir.RankedTensorType.get(list(t.sizes),
                                   torch_types.element_type(t.dtype, signless=True))


class _Lowering:
    def __init__(self, module: ir.Operation) -> None:
        attributes = module.attributes
        self.groups = {}
        if GROUPS in attributes:
            for named in ir.DictAttr(attributes[GROUPS]):
                self.groups[named.name] = [list(ir.DenseI64ArrayAttr(g))
                                           for g in ir.ArrayAttr(named.attr)]
        self.world = ir.IntegerAttr(attributes[WORLD]).value if WORLD in attributes else None
        self.channel = 0

    def replica_groups(self, op: ir.Operation, group_name: str) -> ir.Attribute:
        groups = self.groups.get(group_name)
        if groups is None or self.world is None:
            raise UnsupportedMutationError.at(
                op, f"collective: process group '{group_name}' is not known to the program "
                f"(the module's {GROUPS} and {WORLD} are recorded when tracing with "
                "torch.distributed initialised)")
        array = np.array(groups, dtype=np.int64)
        return ir.DenseIntElementsAttr.get(array)

    def attributes(self, op: ir.Operation, group_name: str) -> dict[str, ir.Attribute]:
        self.channel += 1
        return {"replica_groups": self.replica_groups(op, group_name),
                "channel_handle": ir.Attribute.parse(
                    f"#stablehlo.channel_handle<handle = {self.channel}, type = 1>"),
                "use_global_device_ids": ir.UnitAttr.get()}

    def group_size(self, op: ir.Operation, group_name: str) -> int:
        return len(self.groups.get(group_name, [[]])[0])

    @staticmethod
    def add_body(collective: ir.Operation, reduce_op: str, element: ir.Type,
                 loc: ir.Location) -> None:
        scalar = ir.RankedTensorType.get([], element)
        block = collective.regions[0].blocks.append(scalar, scalar)
        with ir.InsertionPoint(block):
            combined = ir.Operation.create(_BODIES[reduce_op], results=[scalar],
                                           operands=list(block.arguments), loc=loc)
            ir.Operation.create("stablehlo.return", operands=[combined.result], loc=loc)

    def reduce_op(self, op: ir.Operation, value: ir.Value, element: ir.Type) -> str:
        reduce_op = _constant(value, op, "reduce op")
        if reduce_op not in _BODIES:
            raise UnsupportedMutationError.at(
                op, f"collective: reduce op '{reduce_op}' (outofplace lowers "
                f"{', '.join(_BODIES)})")
        if reduce_op == "avg" and not isinstance(element, ir.FloatType):
            raise UnsupportedMutationError.at(
                op, "collective: 'avg' of an integer tensor (c10d refuses it too)")
        return reduce_op

    def lower(self, op: ir.Operation, kind: str) -> None:
        ip, loc = ir.InsertionPoint(op), unnamed(op.location)
        operands = list(op.operands)
        if kind == "wait_tensor":
            value = operands[0]
            op.results[0].replace_all_uses_with(value)
            op.erase()
            return
        if kind == "all_reduce_" and "outofplace.views" in op.attributes and \
                any(len(ir.DenseI64ArrayAttr(v)) for v in
                    ir.ArrayAttr(op.attributes["outofplace.views"])):
            raise UnsupportedMutationError.at(
                op, "collective: an in-place all_reduce_ into a view of another tensor")
        source = to_builtin(operands[0], loc, ip)
        result_type = _builtin_type(op.results[0].type, op)
        element = result_type.element_type
        divide_by = None
        if kind in ("all_reduce", "all_reduce_"):
            reduce_op = self.reduce_op(op, operands[1], element)
            group = _constant(operands[2], op, "group name")
            collective = ir.Operation.create(
                "stablehlo.all_reduce", results=[result_type], operands=[source], loc=loc,
                ip=ip, attributes=self.attributes(op, group), regions=1)
            self.add_body(collective, reduce_op, element, loc)
            divide_by = self.group_size(op, group) if reduce_op == "avg" else None
        elif kind == "all_gather_into_tensor":
            group = _constant(operands[2], op, "group name")
            collective = ir.Operation.create(
                "stablehlo.all_gather", results=[result_type], operands=[source], loc=loc,
                ip=ip, attributes={"all_gather_dim": _i64(0), **self.attributes(op, group)})
        elif kind == "reduce_scatter_tensor":
            reduce_op = self.reduce_op(op, operands[1], element)
            group = _constant(operands[3], op, "group name")
            collective = ir.Operation.create(
                "stablehlo.reduce_scatter", results=[result_type], operands=[source],
                loc=loc, ip=ip, regions=1,
                attributes={"scatter_dimension": _i64(0), **self.attributes(op, group)})
            self.add_body(collective, reduce_op, element, loc)
            divide_by = self.group_size(op, group) if reduce_op == "avg" else None
        else:  # all_to_all_single
            outputs = _constant(operands[1], op, "output split sizes")
            inputs = _constant(operands[2], op, "input split sizes")
            group = _constant(operands[3], op, "group name")
            groups = self.replica_groups(op, group)  # (refused first if unknown)
            count = self.group_size(op, group)
            rows = ir.RankedTensorType(source.type).shape[0]
            even = [rows // count] * count if count and rows % count == 0 else None
            if even is None or outputs not in (None, [], even) or inputs not in (None, [], even):
                raise UnsupportedMutationError.at(
                    op, "collective: all_to_all_single with uneven splits (outofplace "
                    "lowers even splits of dimension 0)")
            # XLA reads an all_to_all with a channel as one across partitions (it has no
            # use_global_device_ids): across replicas it has none.
            attributes = {"replica_groups": groups}
            collective = ir.Operation.create(
                "stablehlo.all_to_all", results=[result_type], operands=[source], loc=loc,
                ip=ip, attributes={"split_dimension": _i64(0), "concat_dimension": _i64(0),
                                   "split_count": _i64(count), **attributes})
        value = collective.results[0]
        if divide_by is not None:
            count = ir.Operation.create(
                "stablehlo.constant", results=[result_type], loc=loc, ip=ip,
                attributes={"value": ir.DenseElementsAttr.get_splat(
                    result_type, ir.FloatAttr.get(element, float(divide_by)))})
            value = ir.Operation.create("stablehlo.divide", results=[result_type],
                                        operands=[value, count.result], loc=loc,
                                        ip=ip).result
        for old in op.results:  # all_reduce_: its result and the written root's value
            old.replace_all_uses_with(from_builtin(value, old.type, loc, ip))
        op.erase()


def _i64(value: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


@register_pass(
    "outofplace-lower-collectives",
    "Lower PyTorch's functional collectives to StableHLO collectives",
    "`_c10d_functional` all_reduce(_), all_gather_into_tensor, reduce_scatter_tensor, "
    "all_to_all_single → `stablehlo.all_reduce` (its reduction's body), `all_gather`, "
    "`reduce_scatter`, `all_to_all` on dimension 0, with the replica groups of the module's "
    "`outofplace.process_groups` and a channel id each; `wait_tensor` → its operand; "
    "`mhlo.num_replicas` set to `outofplace.world_size`")
def lower_collectives(module: ir.Operation) -> None:
    """Lowers every functional collective of `module`."""
    with module.context, ir.Location.unknown():
        lowering = _Lowering(module)
        found = False
        for op in all_operations(module):
            kind = collective_name(op)
            if kind is None:
                continue
            if kind not in GROUP_OPERAND:
                raise UnsupportedMutationError.at(
                    op, f"collective: _c10d_functional.{kind} (outofplace lowers "
                    f"{', '.join(GROUP_OPERAND)})")
            lowering.lower(op, kind)
            found = True
        if found:
            i32 = ir.IntegerType.get_signless(32)
            module.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, lowering.world)
            module.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, 1)
