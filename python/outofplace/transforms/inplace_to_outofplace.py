"""The `inplace-to-outofplace` pass: mutable torch IR to value semantics in one walk.

Every `!torch.tensor` is an alias of a root tensor (a function argument or a tensor made
inside the function) through a chain of view ops. The walk keeps, for every root, its
newest value. An in-place op becomes its out-of-place twin and the result becomes the root's
newest value; any later read of the root, or of a view of it, sees that value. Mutated
arguments become extra results, marked `tf.aliasing_output` so XLA donates their buffers.

    func.func @main(%x: !torch.tensor<[4],f32>, %y: !torch.vtensor<[4],f32>) {
      %t = torch.copy.to_tensor %y
      %0 = torch.aten.add_.Tensor %x, %t, %int1
      return %0
    =>
    func.func @main(%x: !torch.vtensor<[4],f32> {tf.aliasing_output = 1 : i32}, %y: ...) {
      %x_modified = torch.aten.add.Tensor %x, %y, %int1
      return %x_modified, %x_modified

A mutated argument the function returns itself is that result (`return %0` above gives
`return %x_modified` with `tf.aliasing_output = 0`).

Each op is visited once and each use is rewritten once: the pass is linear in the size of
the function, however many mutations it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from . import insert_plan, kernel_writes, views

from .. import op_registry, torch_types
from ..torch_types import TORCH_DTYPE_TO_INT
from ..context import load_torch_conversion
from ..errors import UnsupportedMutationError
from ..ir_utils import constant_bool, operations, terminator, torch_constant
from ..signature import ALIASING_OUTPUT
from . import lower_regions  # (regions read their operands' values: functional)
from .registry import register_pass

@dataclass
class _Root:
    """A tensor that owns its storage: what writes through any of its aliases update."""

    value: ir.Value  # the newest version, a !torch.vtensor
    name: str  # base of the NameLocs of its versions: <name>_modified, <name>_modified_2
    arg_number: int | None  # the function argument it is, if any
    versions: int = 0  # number of writes so far


@dataclass(frozen=True)
class _Alias:
    """A `!torch.tensor` seen as a root and the view ops that lead from it."""

    root: _Root
    chain: tuple[ir.Operation, ...] = ()  # view ops applied to the root, outermost first


@dataclass
class _FunctionRewriter:
    func: func_d.FuncOp
    aliases: dict[ir.Value, _Alias] = field(default_factory=dict)
    dead: list[ir.Operation] = field(default_factory=list)
    views: dict[ir.Value, tuple[int, ir.Value]] = field(default_factory=dict)  # read cache
    returned: dict[int, int] = field(default_factory=dict)  # mutated arg -> its result

    # ----------------------------------------------------------------------------- reads
    def read(self, value: ir.Value, before: ir.Operation) -> ir.Value:
        """The current value of a tracked tensor, as of the op `before`.

        A view is re-derived from its root's newest version by cloning its chain of view
        ops; the result is cached until the root is written again.
        """
        alias = self.aliases[value]
        if not alias.chain:
            return alias.root.value
        cached = self.views.get(value)
        if cached is not None and cached[0] == alias.root.versions:
            return cached[1]
        current = alias.root.value
        for view in alias.chain:
            clone = view.clone(ip=ir.InsertionPoint(before))
            clone.operands[0] = current
            clone.result.set_type(torch_types.value_type(clone.result.type))
            current = clone.result
        self.views[value] = (alias.root.versions, current)
        return current

    def read_operands(self, op: ir.Operation) -> list[ir.Value]:
        return [self.read(v, op) if v in self.aliases else v for v in op.operands]

    # ---------------------------------------------------------------------------- writes
    @staticmethod
    def version_location(root: _Root, op: ir.Operation) -> ir.Location:
        """NameLoc `<root>_modified[_N]` for the next version of `root`, over op's loc."""
        number = root.versions + 1
        suffix = "" if number == 1 else f"_{number}"
        return ir.Location.name(f"{root.name}_modified{suffix}", childLoc=op.location)

    def write(self, target: ir.Value, op: ir.Operation,
              build: Callable[[ir.Location], ir.Value]) -> None:
        """Makes `build(loc)` the new value of the tensor `target`.

        A write to a view that covers a box of the root is one insert into the root; any
        other view is written back into each base in turn, innermost first, a run of
        views that covers a box of its base as one insert (`x.view(2, 6)[1, 2:4]`: an
        insert into the view, which is reshaped back into x). Either way
        the root gets one new version and every other view of it is re-derived on read.
        The version is bumped only once the new value exists: reads made while building
        it (the bases of the write-back) see, and are cached as, the old version.
        """
        if torch_types.TensorType.of(target.type).is_empty:
            return  # writes no element: every version stays as it is
        alias = self.aliases[target]
        root = alias.root
        loc = self.version_location(root, op)
        if not alias.chain:
            new_value = build(loc)
        else:
            new_value = self._write_through(alias, op, build(op.location), loc)
        root.value = new_value
        root.versions += 1

    def _write_through(self, alias: _Alias, op: ir.Operation, value: ir.Value,
                       loc: ir.Location) -> ir.Value:
        """The root's new value after writing `value` into the view `alias`."""
        ip = ir.InsertionPoint(op)
        chain, end = alias.chain, len(alias.chain)
        while end:  # chain[:end] is still to be written back, innermost first
            for start in range(end):  # the longest run of views that is a box of its base
                base = alias.root.value if start == 0 else \
                    self.read(chain[start].operands[0], op)
                plan = insert_plan.plan_insert(base, chain[start:end])
                if plan is not None:
                    value = insert_plan.emit_insert(base, value, plan,
                                                    loc if start == 0 else op.location, ip)
                    break
            else:  # no box ends at this view (a reshape that merges dimensions)
                start = end - 1
                base = self.read(chain[start].operands[0], op)
                value = views.write_back(chain[start], base, value,
                                         loc if start == 0 else op.location, ip)
            end = start
        return value

    # ----------------------------------------------------------------------------- visit
    def new_root(self, value: ir.Value, vtensor: ir.Value, arg_number: int | None = None
                 ) -> None:
        self.aliases[value] = _Alias(_Root(vtensor, _name_of(value), arg_number))

    def run(self) -> dict[int, int]:
        block = self.func.regions[0].blocks[0]
        for arg in block.arguments:
            if torch_types.is_nonvalue_tensor(arg.type):
                arg.set_type(torch_types.value_type(arg.type))
                self.new_root(arg, arg, arg.arg_number)
        for op in operations(block):
            self.visit(op)
        return self.finish(block)

    def visit(self, op: ir.Operation) -> None:
        tracked = any(v in self.aliases for v in op.operands)
        fresh = [r for r in op.results if torch_types.is_nonvalue_tensor(r.type)]
        if not tracked and not fresh:
            return
        handler = _HANDLERS.get(op.name)
        if handler is not None:
            handler(self, op)
            return
        effects = op_registry.effects_of(op)
        if effects is not None and effects.kernel:  # a custom op: called, as it is
            kernel_writes.visit_kernel(self, op, effects)
            return
        if effects is not None and effects.written:
            self.visit_inplace(op, effects)
            return
        viewed = op_registry.viewed_operand(op)  # a view op, or x[pos] (a position view)
        if viewed is not None and fresh and op.operands[viewed] in self.aliases:
            base = self.aliases[op.operands[viewed]]
            self.aliases[op.result] = _Alias(base.root, base.chain + (op,))
            self.dead.append(op)
        else:
            self.visit_reader(op, fresh)

    def visit_reader(self, op: ir.Operation, fresh: list[ir.Value]) -> None:
        """Any other op reads the current values; a tensor it makes may be mutated later."""
        if op.name == "torch.operator" and op_registry.aten_name(op) not in \
                op_registry.OPERATOR_TWINS and not lower_regions.is_region(op) or \
                any(len(r.blocks) for r in op.regions):
            raise UnsupportedMutationError.at(
                op, "a mutated tensor is used by an op outofplace cannot see into")
        for position, value in enumerate(op.operands):
            if value in self.aliases:
                op.operands[position] = self.read(value, op)
        for result in fresh:
            result.set_type(torch_types.value_type(result.type))
            self.new_root(result, result)

    def _same_tensor(self, a: ir.Value, b: ir.Value) -> bool:
        """Whether two tracked tensors are the same view of the same root: the same view
        ops with the same arguments."""
        if a not in self.aliases or b not in self.aliases:
            return False
        first, second = self.aliases[a], self.aliases[b]
        return first.root is second.root and len(first.chain) == len(second.chain) and all(
            x.name == y.name and len(x.operands) == len(y.operands) and
            all(_same_argument(p, q) for p, q in zip(list(x.operands)[1:],
                                                      list(y.operands)[1:]))
            for x, y in zip(first.chain, second.chain))

    def _stores_itself(self, op: ir.Operation) -> bool:
        """`index_put_(x, [pos], x[pos])`: a store of a position view of x (through
        identity views of the same type) at its own positions, which changes nothing."""
        if op.name != "torch.aten.index_put_" or constant_bool(op.operands[3]) is not False:
            return False
        target, indices, values = op.operands[:3]
        if target not in self.aliases or values not in self.aliases:
            return False
        chain = self.aliases[values].chain
        while chain and views.is_identity(chain[-1]) and \
                torch_types.value_type(chain[-1].result.type) == \
                torch_types.value_type(chain[-1].operands[0].type):
            chain = chain[:-1]
        if not chain or not op_registry.is_position_view(chain[-1]) or \
                not _same_argument(chain[-1].operands[1], indices):
            return False
        return self._same_tensor(target, chain[-1].operands[0])

    def _refuse_part_through_position(self, op: ir.Operation) -> None:
        """`x.add_(x[pos])`: an operand that is a part of self through a position view.
        Eager refuses it (the operand shares some elements with what the op writes);
        refusals.py cannot tell on FX, where the traced read is a copy. `index_put_` is
        spared: it is how `x[p] = x[q]` is traced, a copy between rows in eager."""
        if op.name == "torch.aten.index_put_":
            return
        target = self.aliases[op.operands[0]]
        for operand in list(op.operands)[1:]:
            alias = self.aliases.get(operand)
            if alias is None or alias.root is not target.root:
                continue
            prefix = len(target.chain)
            if len(alias.chain) > prefix and alias.chain[:prefix] == target.chain and \
                    any(map(op_registry.is_position_view, alias.chain[prefix:])):
                raise UnsupportedMutationError.at(
                    op, "an operand is a part of the tensor it writes, read at a runtime "
                    "position (`x.add_(x[pos])`): it shares elements with what the op "
                    "writes, which eager refuses; clone the operand first")

    def visit_inplace(self, op: ir.Operation, effects: op_registry.OpEffects) -> None:
        self_value = op.operands[0]
        if effects.is_autograd_only:
            self.aliases[op.result] = self.aliases[self_value]
            self.dead.append(op)
            return
        if effects.rebinds_view:
            raise UnsupportedMutationError.at(
                op, "it changes the shape or strides of a tensor in place")
        if effects.written != (0,):
            raise UnsupportedMutationError.at(op, "it writes an operand other than self")
        twin = effects.twin
        if twin is None or not op_registry.twin_is_available(twin, op.context):
            raise UnsupportedMutationError.at(op, "it has no out-of-place twin")
        if twin._schema.name == "aten::copy" and self._same_tensor(self_value,
                                                                    op.operands[1]) or \
                self._stores_itself(op) or _writes_at_no_index(op):
            # b[2:5] += v traces to an add_ on b[2:5], then a copy_ of it into b[2:5];
            # x[pos] += v to an add_ on x[pos], then an index_put_ of it at pos.
            self.aliases[op.result] = self.aliases[self_value]
            self.dead.append(op)
            return
        self._refuse_part_through_position(op)
        operands = self.read_operands(op)
        self_type = torch_types.TensorType.of(operands[0].type)
        result_type = _twin_result_type(op, twin, operands, self_type)

        def build(loc: ir.Location) -> ir.Value:
            ip = ir.InsertionPoint(op)
            name, twin_operands = op_registry.mlir_name(twin), operands
            if result_type == self_type:
                return _create(name, twin_operands, self_type, loc, ip)
            wide = _create(name, twin_operands, result_type, op.location, ip)
            return _cast(wide, self_type, loc, ip)

        self.write(self_value, op, build)
        self.aliases[op.result] = self.aliases[self_value]
        self.dead.append(op)

    # ------------------------------------------------------------------ torch copy ops
    def visit_to_vtensor(self, op: ir.Operation) -> None:
        op.result.replace_all_uses_with(self.read(op.operands[0], op))
        self.dead.append(op)

    def visit_to_tensor(self, op: ir.Operation) -> None:
        self.new_root(op.result, op.operands[0])
        self.dead.append(op)

    def visit_overwrite(self, op: ir.Operation) -> None:
        """`torch.overwrite.tensor.contents %value overwrites %tensor`."""
        value, target = op.operands
        self.write(target, op, lambda loc: value)
        self.dead.append(op)

    def visit_return(self, op: ir.Operation) -> None:
        """A returned argument that is written is its own aliased result (`return cache`
        after writing it): one result, not a second copy of the buffer."""
        for position, value in enumerate(op.operands):
            if value in self.aliases:
                alias = self.aliases[value]
                if not alias.chain and alias.root.arg_number is not None:
                    self.returned.setdefault(alias.root.arg_number, position)
                op.operands[position] = self.read(value, op)

    # ------------------------------------------------------------------------ finish
    def finish(self, block: ir.Block) -> dict[int, int]:
        for op in reversed(self.dead):
            for result in op.results:
                for use in result.uses:
                    user = use.owner
                    raise UnsupportedMutationError.at(
                        user if isinstance(user, ir.Operation) else user.operation,
                        "a mutated tensor is used where outofplace cannot rewrite it")
            op.erase()
        ret = terminator(block)
        results = list(ret.operands)
        roots = {id(a.root): a.root for a in self.aliases.values()}.values()
        mutated = sorted((r for r in roots if r.arg_number is not None and r.versions),
                         key=lambda r: r.arg_number)
        io_map = {}
        for root in mutated:
            io_map[root.arg_number] = self.returned.get(root.arg_number, len(results))
            if io_map[root.arg_number] == len(results):
                results.append(root.value)
        with ret.context, ret.location:
            func_d.ReturnOp(results, ip=ir.InsertionPoint(ret))
        ret.erase()
        self.func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], [v.type for v in results]))
        _set_aliasing_attributes(self.func, io_map)
        return io_map


_HANDLERS: dict[str, Callable[[_FunctionRewriter, ir.Operation], None]] = {
    "torch.copy.to_vtensor": _FunctionRewriter.visit_to_vtensor,
    "torch.copy.to_tensor": _FunctionRewriter.visit_to_tensor,
    "torch.overwrite.tensor.contents": _FunctionRewriter.visit_overwrite,
    "func.return": _FunctionRewriter.visit_return,
}


def _writes_at_no_index(op: ir.Operation) -> bool:
    """An indexed write whose index tensors have no element, so it writes none:
    `x[:, torch.tensor([False])] = v`, `x.index_copy_(0, torch.tensor([], dtype=long), v)`.
    Kept, it would be a scatter of no updates, which IREE's compiler divides by."""
    name = op_registry.aten_name(op)
    if name == "torch.aten.index_put_":
        items = op.operands[1]
        if not isinstance(items, ir.OpResult) or \
                items.owner.name != "torch.prim.ListConstruct":
            return False
        indices = list(items.owner.operands)
    elif name.startswith(("torch.aten.index_", "torch.aten.scatter")) and \
            len(op.operands) > 2:
        indices = [op.operands[2]]
    else:
        return False
    return any(torch_types.is_tensor(i.type) and torch_types.TensorType.of(i.type).is_empty
               for i in indices)


def _same_argument(a: ir.Value, b: ir.Value) -> bool:
    """The same value, two constants of one value (the importer makes one per use) or two
    lists of the same values (the indices of `x[pos]`)."""
    if a == b:
        return True
    if not (isinstance(a, ir.OpResult) and isinstance(b, ir.OpResult)):
        return False
    x, y = a.owner, b.owner
    if x.name != y.name:
        return False
    if x.name == "torch.prim.ListConstruct":
        return len(x.operands) == len(y.operands) and \
            all(_same_argument(p, q) for p, q in zip(x.operands, y.operands))
    if x.name == "torch.vtensor.literal":
        return a.type == b.type and x.attributes["value"] == y.attributes["value"]
    if not x.name.startswith("torch.constant."):
        return False
    return x.name == "torch.constant.none" or x.attributes["value"] == y.attributes["value"]


def _name_of(value: ir.Value) -> str:
    """The NameLoc name of a value (argument or op result), else its op's short name."""
    loc = value.location if isinstance(value, ir.BlockArgument) else value.owner.location
    if loc.typeid == ir.NameLoc.static_typeid:
        return ir.NameLoc(loc).name_str
    owner = value.owner
    if isinstance(value, ir.OpResult) and owner.name.startswith("torch.aten."):
        return owner.name.split(".")[2]
    return "tensor"


def _set_aliasing_attributes(func: func_d.FuncOp, io_map: dict[int, int]) -> None:
    if not io_map:
        return
    i32 = ir.IntegerType.get_signless(32, func.context)
    arg_attrs = []
    existing = func.arg_attrs if "arg_attrs" in func.attributes else None
    for position in range(len(func.regions[0].blocks[0].arguments)):
        entries = {}
        if existing is not None:
            entries = {n.name: n.attr for n in ir.DictAttr(existing[position])}
        if position in io_map:
            entries[ALIASING_OUTPUT] = ir.IntegerAttr.get(i32, io_map[position])
        arg_attrs.append(ir.DictAttr.get(entries, context=func.context))
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs, context=func.context)


def _create(name: str, operands: list[ir.Value], result: torch_types.TensorType,
            loc: ir.Location, ip: ir.InsertionPoint) -> ir.Value:
    if name in op_registry.OPERATOR_TWINS:  # no op of torch-mlir's: as its importer writes it
        return ir.Operation.create("torch.operator", results=[result.to_ir()],
                                   operands=operands, loc=loc, ip=ip, attributes={
                                       "name": ir.StringAttr.get(name)}).result
    return ir.Operation.create(name, results=[result.to_ir()], operands=operands,
                               loc=loc, ip=ip).result


def _cast(value: ir.Value, to: torch_types.TensorType, loc: ir.Location,
          ip: ir.InsertionPoint) -> ir.Value:
    """`aten.to.dtype`: what an in-place op does to a result wider than self."""
    operands = [value, torch_constant("int", TORCH_DTYPE_TO_INT[to.dtype], loc, ip),
                torch_constant("bool", False, loc, ip), torch_constant("bool", False, loc, ip),
                torch_constant("none", None, loc, ip)]
    return _create("torch.aten.to.dtype", operands, to, loc, ip)


_SCALAR_STAND_INS = {"!torch.int": 1, "!torch.float": 1.0, "!torch.bool": False,
                     "!torch.number": 1.0, "!torch.none": None}


def _meta_argument(value: ir.Value) -> Any:
    """A stand-in for `value` that PyTorch's meta kernels accept."""
    if torch_types.is_tensor(value.type):
        t = torch_types.TensorType.of(value.type)
        if t.sizes is None or t.dtype is None or any(d < 0 for d in t.sizes):
            raise _Unknown()
        return torch.empty(t.sizes, dtype=t.dtype, device="meta")
    owner = value.owner
    if isinstance(value, ir.OpResult):
        name = owner.name
        if name in ("torch.constant.int", "torch.constant.float", "torch.constant.bool"):
            return owner.attributes["value"].value
        if name == "torch.constant.str":
            return ir.StringAttr(owner.attributes["value"]).value
        if name == "torch.prim.ListConstruct":
            return [_meta_argument(v) for v in owner.operands]
    type_text = str(value.type)
    if type_text in _SCALAR_STAND_INS:
        return _SCALAR_STAND_INS[type_text]
    if type_text.startswith("!torch.optional"):
        return None
    raise _Unknown()


class _Unknown(Exception):
    """An operand whose stand-in cannot be made: trust the IR's own types."""


def _twin_result_type(op: ir.Operation, twin: torch._ops.OpOverload,
                      operands: list[ir.Value], self_type: torch_types.TensorType
                      ) -> torch_types.TensorType:
    """The type the twin computes in (eager's type promotion), run on meta tensors."""
    positional, keywords = [], {}
    try:
        for schema_arg, value in zip(twin._schema.arguments, operands):
            if schema_arg.kwarg_only:
                keywords[schema_arg.name] = _meta_argument(value)
            else:
                positional.append(_meta_argument(value))
        result = twin(*positional, **keywords)
    except _Unknown:
        return self_type
    except (RuntimeError, TypeError, ValueError) as error:
        raise UnsupportedMutationError.at(op, f"PyTorch rejects it: {error}") from None
    if self_type.dtype is not None and not torch.can_cast(result.dtype, self_type.dtype):
        raise UnsupportedMutationError.at(
            op, f"its result type {result.dtype} can't be cast to self's "
            f"{self_type.dtype} (eager raises too)")
    if tuple(result.shape) != self_type.sizes:
        raise UnsupportedMutationError.at(
            op, f"its result has shape {list(result.shape)}, not self's "
            f"{list(self_type.sizes or ())}")
    return self_type.with_dtype(result.dtype)


@register_pass(
    "inplace-to-outofplace",
    "Rewrite in-place ops and writes through views to value semantics",
    'mutable torch IR to value semantics; mutated arguments become aliased results')
def inplace_to_outofplace(module: ir.Module | ir.Operation) -> dict[int, int]:
    """Rewrites every function of `module` to value semantics, in place.

    Returns the io_map of `main` (or of the only function): for each mutated argument, the
    index of the result holding its final value.
    """
    operation = module.operation if isinstance(module, ir.Module) else module
    load_torch_conversion(operation.context)
    io_maps: dict[str, dict[int, int]] = {}
    with operation.context:
        for op in operations(operation.regions[0].blocks[0]):
            if op.name != "func.func":
                continue
            func = op.opview
            if len(func.regions[0].blocks) == 0:
                continue
            io_maps[func.sym_name.value] = _FunctionRewriter(func).run()
    if "main" in io_maps:
        return io_maps["main"]
    return next(iter(io_maps.values()), {})
