"""The `outofplace-lower-updates` pass: value-semantic updates to StableHLO.

The inplace-to-outofplace pass writes a box of a root as `tensor.insert_slice` on builtin
tensors (between `torch_c.to_builtin_tensor` / `from_builtin_tensor`). These rewrite
patterns turn it into the StableHLO a backend updates in place, before torch-mlir lowers
everything else (torch-mlir leaves StableHLO between torch_c casts alone):

    tensor.insert_slice %u into %r[2, 0] [2, 4] [1, 1]
    =>  stablehlo.dynamic_update_slice %r, %u, %c2, %c0      (unit strides)

    tensor.insert_slice %u into %r[1] [4] [2]
    =>  stablehlo.select(pad(true, interior 1), pad(%u, interior 1), %r)  (strided)

    torch.aten.index_put %c, [%none, %pos], %k          (0-d runtime positions)
    =>  stablehlo.dynamic_update_slice %c, %k', %c0, %pos'

    torch.aten.index_put %b, [%none, %i, %j], %v        (integer index tensors)
    torch.operator "torch.aten.index_copy"(%b, %int1, %i, %v)   (index_fill, index_add)
    =>  stablehlo.scatter of whole slices of the other dimensions

    torch.aten.index_put %b, [%mask], %v                 (a bool mask)
    =>  torch.aten.where.self %mask, %v', %b
"""

from __future__ import annotations

import torch
from torch_mlir import ir, rewrite
from torch_mlir.extras.fx_importer import TORCH_DTYPE_TO_INT

from .. import torch_types
from ..op_registry import OPERATOR_TWINS, aten_name
from ..errors import UnsupportedMutationError, warn_out_of_bounds_policy
from ..indexing import constant_bound, from_end, index_entries
from ..ir_utils import (builtin_shape, constant_bool, constant_int, stablehlo_splat,
                        to_builtin, torch_constant, unnamed)
from .registry import Option, register_pass


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _scalar_constant(element: ir.Type, value: int | float | bool,
                     loc: ir.Location | None) -> ir.Value:
    return stablehlo_splat(ir.RankedTensorType.get([], element, loc=loc), value, loc)


def _static(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _dynamic_update_slice(dest: ir.Value, source: ir.Value, offsets: list[int],
                          loc: ir.Location) -> ir.Operation:
    starts = [_scalar_constant(_i64(), o, unnamed(loc)) for o in offsets]
    return ir.Operation.create("stablehlo.dynamic_update_slice", results=[dest.type],
                               operands=[dest, source, *starts], loc=loc)


def _pad(value: ir.Value, padding: ir.Value, low: list[int], high: list[int],
         interior: list[int], result: ir.Type, loc: ir.Location) -> ir.Value:
    return ir.Operation.create("stablehlo.pad", results=[result], operands=[value, padding],
                               attributes={
                                   "edge_padding_low": ir.DenseI64ArrayAttr.get(low),
                                   "edge_padding_high": ir.DenseI64ArrayAttr.get(high),
                                   "interior_padding": ir.DenseI64ArrayAttr.get(interior)},
                               loc=loc).result


def _strided_select(dest: ir.Value, source: ir.Value, offsets: list[int],
                    strides: list[int], loc: ir.Location) -> ir.Operation:
    dest_type = ir.RankedTensorType(dest.type)
    sizes = ir.RankedTensorType(source.type).shape
    high = [d - (o + (n - 1) * s + 1) for d, o, n, s in
            zip(dest_type.shape, offsets, sizes, strides)]
    interior = [s - 1 for s in strides]
    element = dest_type.element_type
    named, loc = loc, unnamed(loc)
    padded = _pad(source, _scalar_constant(element, 0, loc), offsets, high, interior,
                  dest.type, loc)
    i1 = ir.IntegerType.get_signless(1)
    ones = ir.Operation.create(
        "stablehlo.broadcast_in_dim", results=[ir.RankedTensorType.get(sizes, i1, loc=loc)],
        operands=[_scalar_constant(i1, 1, loc)],
        attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])}, loc=loc).result
    mask = _pad(ones, _scalar_constant(i1, 0, loc), offsets, high, interior,
                ir.RankedTensorType.get(dest_type.shape, i1, loc=loc), loc)
    return ir.Operation.create("stablehlo.select", results=[dest.type],
                               operands=[mask, padded, dest], loc=named)


def _indexed_windows(indexed: list[int], rank: int) -> bool:
    """Whether a scatter may index `indexed` alone, the other dimensions being whole
    windows: one dimension, or the leading ones. IREE 3.13 rejects other sets ("expected
    indices to be equal to batch rank or batch rank + 1"); there every element of the
    update gets its own index, a form XLA, IREE and the interpreter all take."""
    return len(indexed) == 1 or indexed == list(range(len(indexed)))


def _scatter_numbers(windows: list[int], indexed: list[int], index_vector_dim: int
                     ) -> ir.Attribute:
    return ir.Attribute.parse(
        f"#stablehlo.scatter<update_window_dims = {windows}, inserted_window_dims = "
        f"{indexed}, scatter_dims_to_operand_dims = {indexed}, "
        f"index_vector_dim = {index_vector_dim}>")


def _strided_form(dest_shape: list[int], offsets: list[int], sizes: list[int],
                  strides: list[int]) -> list[int]:
    """The dimensions a strided box's scatter indexes: the strided ones when the others
    are whole and `_indexed_windows` allows it, else all (one index per element)."""
    strided = [d for d in range(len(sizes)) if strides[d] != 1]
    whole = all(offsets[d] == 0 and sizes[d] == dest_shape[d]
                for d in range(len(sizes)) if d not in strided)
    return strided if whole and _indexed_windows(strided, len(sizes)) \
        else list(range(len(sizes)))


def _strided_scatter(dest: ir.Value, source: ir.Value, offsets: list[int],
                     strides: list[int], loc: ir.Location) -> ir.Operation:
    """A strided box as one scatter at iota-computed positions (offset + iota * stride),
    indexing only the strided dimensions when the others are whole windows."""
    sizes = ir.RankedTensorType(source.type).shape
    indexed = _strided_form(ir.RankedTensorType(dest.type).shape, offsets, sizes, strides)
    batch = [sizes[d] for d in indexed]
    with unnamed(loc):
        columns = [_iota_column(batch, i, offsets[d], strides[d])
                   for i, d in enumerate(indexed)]
        indices = _index_vectors(columns, batch)
    windows = [d for d in range(len(sizes)) if d not in indexed]
    return _scatter(dest, indices, source, _scatter_numbers(windows, indexed, len(batch)),
                    combine=None, unique=True, loc=loc)


def _iota_column(batch: list[int], dimension: int, offset: int, stride: int) -> ir.Value:
    """Indices `[*batch, 1]`: offset + iota * stride along batch dimension `dimension`."""
    column = ir.RankedTensorType.get(batch + [1], _i64())
    value = _stablehlo("iota", column, iota_dimension=ir.IntegerAttr.get(_i64(), dimension))
    for op, constant, neutral in (("multiply", stride, 1), ("add", offset, 0)):
        if constant != neutral:
            value = _stablehlo(op, column, value, _stablehlo(
                "broadcast_in_dim", column, _scalar_constant(_i64(), constant, None),
                broadcast_dimensions=ir.DenseI64ArrayAttr.get([])))
    return value


def _index_vectors(columns: list[ir.Value], batch: list[int]) -> ir.Value:
    """Scatter indices `[*batch, len(columns)]` from one `[*batch, 1]` column per
    operand dimension."""
    if len(columns) == 1:
        return columns[0]
    return _stablehlo("concatenate", ir.RankedTensorType.get(batch + [len(columns)], _i64()),
                      *columns, dimension=ir.IntegerAttr.get(_i64(), len(batch)))


def _scatter(dest: ir.Value, indices: ir.Value, updates: ir.Value, numbers: ir.Attribute,
             *, combine: str | None, unique: bool, loc: ir.Location) -> ir.Operation:
    """`stablehlo.scatter` whose body replaces the old element, or combines it with the
    update by the StableHLO op `combine` (add, multiply, maximum, minimum)."""
    scatter = ir.Operation.create(
        "stablehlo.scatter", results=[dest.type], operands=[dest, indices, updates],
        attributes={"scatter_dimension_numbers": numbers,
                    "indices_are_sorted": ir.BoolAttr.get(unique),
                    "unique_indices": ir.BoolAttr.get(unique)},
        regions=1, loc=loc)
    scalar = ir.RankedTensorType.get([], ir.RankedTensorType(dest.type).element_type)
    block = scatter.regions[0].blocks.append(scalar, scalar,
                                             arg_locs=[unnamed(loc), unnamed(loc)])
    with ir.InsertionPoint(block):
        old, new = block.arguments
        combined = _stablehlo(combine, scalar, old, new) if combine else new
        ir.Operation.create("stablehlo.return", operands=[combined])
    return scatter


def _scatter_is_cheaper(dest: ir.Value, source: ir.Value, offsets: list[int],
                        strides: list[int]) -> bool:
    """Bytes a strided update touches: a scatter reads its update and its indices and
    writes the update; pad+select reads and writes the whole destination."""
    dest_t, source_t = ir.RankedTensorType(dest.type), ir.RankedTensorType(source.type)
    element = max(1, dest_t.element_type.width // 8) if hasattr(
        dest_t.element_type, "width") else 4
    indexed = _strided_form(dest_t.shape, offsets, source_t.shape, strides)
    rows = _count([source_t.shape[d] for d in indexed])
    update = element * _count(source_t.shape)
    return 2 * update + 8 * rows * len(indexed) < 2 * element * _count(dest_t.shape)


def _count(shape: list[int]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def _insert_slice(op: ir.Operation, rewriter: rewrite.PatternRewriter,
                  strided: str = "cheaper") -> bool:
    """tensor.insert_slice with static offsets, sizes and strides -> StableHLO; a strided
    box as a scatter or pad+select, by `strided` ("cheaper" chooses by bytes touched)."""
    if len(op.operands) != 2:
        return True  # runtime offsets: not matched
    source, dest = op.operands[0], op.operands[1]
    if ir.RankedTensorType(source.type).rank != ir.RankedTensorType(dest.type).rank:
        return True
    offsets, strides = _static(op, "static_offsets"), _static(op, "static_strides")
    if source.type == dest.type:  # the whole of dest: offsets 0, sizes its shape
        rewriter.replace_op(op, [source])
        return False
    with rewriter.ip, op.location:
        if all(s == 1 for s in strides):
            new = _dynamic_update_slice(dest, source, offsets, op.location)
        elif strided == "scatter" or strided == "cheaper" and \
                _scatter_is_cheaper(dest, source, offsets, strides):
            new = _strided_scatter(dest, source, offsets, strides, op.location)
        else:
            new = _strided_select(dest, source, offsets, strides, op.location)
    rewriter.replace_op(op, new)
    return False


def _stablehlo(name: str, result: ir.Type, *operands: ir.Value,
               loc: ir.Location | None = None, **attributes: ir.Attribute) -> ir.Value:
    return ir.Operation.create(f"stablehlo.{name}", results=[result], operands=operands,
                               attributes=attributes, loc=loc).result


def _static_tensor(value: ir.Value) -> torch_types.TensorType | None:
    if not torch_types.is_tensor(value.type):
        return None
    t = torch_types.TensorType.of(value.type)
    if t.sizes is None or t.dtype is None or any(d < 0 for d in t.sizes):
        return None
    return t


def _integer_entries(indices: ir.Value) -> list[ir.Value | None] | None:
    """The entries of an index list (`indexing.index_entries`): None or a static integer
    tensor; None if the list is anything else."""
    entries = index_entries(indices)
    if entries is None or any(
            (t := _static_tensor(e)) is None or t.dtype.is_floating_point or
            t.dtype == torch.bool for e in entries if e is not None):
        return None
    return entries


def _positions(indices: ir.Value) -> list[ir.Value | None] | None:
    """The entries of an index list: None or a 0-d integer tensor; None if other."""
    entries = _integer_entries(indices)
    if entries is None or any(e is not None and _static_tensor(e).sizes != ()
                              for e in entries):
        return None
    return entries if any(e is not None for e in entries) else None


def _ranked_tensor(value: ir.Value) -> torch_types.TensorType | None:
    """A tensor's type with known rank and dtype; -1 for a dynamic dimension."""
    if not torch_types.is_tensor(value.type):
        return None
    t = torch_types.TensorType.of(value.type)
    return None if t.sizes is None or t.dtype is None else t


def _dynamic(*values: ir.Value | int | float | None) -> bool:
    """Whether any of `values` is a tensor with a dynamic dimension (dynamic_shapes)."""
    return any(isinstance(v, ir.Value) and (t := _ranked_tensor(v)) is not None and
               -1 in t.sizes for v in values)


def _dimension_size(tensor: ir.Value, dim: int, element: ir.Type) -> ir.Value:
    """The runtime size of a dynamic dimension, a 0-d tensor of `element`."""
    size = _stablehlo("get_dimension_size", ir.RankedTensorType.get(
        [], ir.IntegerType.get_signless(32)), tensor, dimension=ir.IntegerAttr.get(_i64(), dim))
    return size if element == size.type.element_type else \
        _stablehlo("convert", ir.RankedTensorType.get([], element), size)


def _start(position: ir.Value, size: ir.Value) -> ir.Value:
    """A runtime position as a dynamic_update_slice start; negative counts from the end
    (`size`: the dimension's size, a 0-d i64 tensor)."""
    i64 = ir.RankedTensorType.get([], _i64())
    start = to_builtin(position)
    if start.type != i64:
        start = _stablehlo("convert", i64, start)
    i1 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))
    negative = _stablehlo("compare", i1, start, _scalar_constant(_i64(), 0, None),
                          comparison_direction=ir.Attribute.parse(
                              "#stablehlo<comparison_direction LT>"))
    wrapped = _stablehlo("add", i64, start, size)
    return _stablehlo("select", i64, negative, wrapped, start)


def _index_put_at_positions(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`c[:, pos] = k` (index_put with 0-d integer indices) as dynamic_update_slice:

        %r = torch.aten.index_put %c, [%none, %pos], %k, %false
        =>  stablehlo.dynamic_update_slice %c, reshape(broadcast(%k)), %c0, select(%pos<0, ...)

    When `c` has a dynamic dimension (`?`, from dynamic_shapes), the update would have
    its runtime size there, which IREE does not take for dynamic_update_slice: the write
    is then one scatter of `k` as a window at the positions (`_positions_scatter`).
    """
    self, indices, values, accumulate = op.operands
    self_t, values_t = _ranked_tensor(self), _ranked_tensor(values)
    positions = _positions(indices)
    if self_t is None or values_t is None or positions is None or \
            len(positions) > len(self_t.sizes) or constant_bool(accumulate) is not False:
        return True
    positions = positions + [None] * (len(self_t.sizes) - len(positions))
    element = torch_types.element_type(self_t.dtype, signless=True)
    kept = [n for n, p in zip(self_t.sizes, positions) if p is None]
    # Sizes `?` of both agree at run time: torch.export's guards (checked at the call).
    if len(values_t.sizes) > len(kept) or any(
            v not in (1, k) for v, k in zip(reversed(values_t.sizes), reversed(kept))):
        return True
    dynamic = -1 in self_t.sizes
    warn_out_of_bounds_policy(op, "dropped" if dynamic else "clamped into range")
    with rewriter.ip, unnamed(op.location):
        dest = to_builtin(self)
        update = to_builtin(values)
        if values_t.dtype != self_t.dtype:
            update = _stablehlo("convert", ir.RankedTensorType.get(
                builtin_shape(values_t.sizes), element), update)
        starts = [None if p is None else
                  _start(p, _dimension_size(dest, d, _i64()) if n == -1 else
                         _scalar_constant(_i64(), n, None))
                  for d, (n, p) in enumerate(zip(self_t.sizes, positions))]
        if dynamic:
            new = _positions_scatter(dest, update, starts, op.location)
        else:
            offset = len(kept) - len(values_t.sizes)
            if list(values_t.sizes) != kept:
                update = _stablehlo("broadcast_in_dim", ir.RankedTensorType.get(
                    kept, element), update, broadcast_dimensions=ir.DenseI64ArrayAttr.get(
                        list(range(offset, len(kept)))))
            box = [1 if p is not None else n for n, p in zip(self_t.sizes, positions)]
            update = _stablehlo("reshape", ir.RankedTensorType.get(box, element), update)
            starts = [_scalar_constant(_i64(), 0, None) if s is None else s for s in starts]
            new = _stablehlo("dynamic_update_slice", dest.type, dest, update, *starts,
                             loc=op.location)
        result = ir.Operation.create("torch_c.from_builtin_tensor", results=[self.type],
                                     operands=[new])
    rewriter.replace_op(op, result)
    return False


def _positions_scatter(dest: ir.Value, update: ir.Value, starts: list[ir.Value | None],
                       loc: ir.Location) -> ir.Value:
    """`dest` with `update` written at `starts` (None: the whole dimension), as one
    scatter whose window is the update, broadcast to the dimensions not indexed. Sizes
    read with get_dimension_size make the broadcast of a dynamic update."""
    dest_type = ir.RankedTensorType(dest.type)
    element = dest_type.element_type
    indexed = [d for d, s in enumerate(starts) if s is not None]
    kept = [d for d, s in enumerate(starts) if s is None]
    window = [dest_type.shape[d] for d in kept]
    update_type = ir.RankedTensorType(update.type)
    if update_type.shape != window:
        i32 = ir.IntegerType.get_signless(32)
        entry = ir.RankedTensorType.get([1], i32)
        sizes = [_stablehlo("reshape", entry, _dimension_size(dest, d, i32))
                 if dest_type.is_dynamic_dim(d) else
                 _stablehlo("broadcast_in_dim", entry, _scalar_constant(
                     i32, dest_type.shape[d], None),
                     broadcast_dimensions=ir.DenseI64ArrayAttr.get([])) for d in kept]
        shape = sizes[0] if len(sizes) == 1 else _stablehlo(
            "concatenate", ir.RankedTensorType.get([len(sizes)], i32), *sizes,
            dimension=ir.IntegerAttr.get(_i64(), 0))
        offset = len(window) - update_type.rank
        # The update's dynamic dimensions are the destination's (torch.export's guards).
        same = [i for i in range(update_type.rank) if update_type.is_dynamic_dim(i)]
        update = _stablehlo("dynamic_broadcast_in_dim",
                            ir.RankedTensorType.get(window, element), update, shape,
                            broadcast_dimensions=ir.DenseI64ArrayAttr.get(
                                list(range(offset, len(window)))),
                            known_nonexpanding_dimensions=ir.DenseI64ArrayAttr.get(same))
    vector = ir.RankedTensorType.get([1], _i64())
    columns = [_stablehlo("reshape", vector, starts[d]) for d in indexed]
    indices = columns[0] if len(columns) == 1 else _stablehlo(
        "concatenate", ir.RankedTensorType.get([len(columns)], _i64()), *columns,
        dimension=ir.IntegerAttr.get(_i64(), 0))
    numbers = _scatter_numbers(list(range(len(kept))), indexed, 0)
    return _scatter(dest, indices, update, numbers, combine=None, unique=True,
                    loc=loc).result


def _index_tensors(indices: ir.Value, rank: int) -> list[ir.Value | None] | None:
    """The entries of an index list, one per dimension of self: None or a static integer
    tensor; None if the list is anything else or has no tensor."""
    entries = _integer_entries(indices)
    if entries is None or len(entries) > rank or all(e is None for e in entries):
        return None
    return entries + [None] * (rank - len(entries))


def _index_put_with_tensors(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`b[:, idx] = v`, `b[i, j] = v`, `b.index_put_((i,), v, accumulate=True)`:

        %r = torch.aten.index_put %b, [%none, %i, %j], %v, %accumulate
        =>  one scatter (`_scatter_at_indices`)
    """
    self, indices, values, accumulate = op.operands
    self_t = _ranked_tensor(self)
    entries = _index_tensors(indices, len(self_t.sizes)) if self_t is not None else None
    accumulating = constant_bool(accumulate)
    if entries is None or accumulating is None:
        return True
    return _scatter_at_indices(op, rewriter, entries, values, accumulating)


def _index_op(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`index_copy`, `index_fill`, `index_add` (torch-mlir has no op for them: they are
    `torch.operator`s, op_registry.OPERATOR_TWINS) as the index_put they are, indices on
    one dimension, then one scatter (`_scatter_at_indices`):

        torch.operator "torch.aten.index_copy"(%x, %int1, %i, %src)
        =>  index_put %x, [%none, %i], %src             (index_fill: the value, broadcast;
                                                          index_add: %src * alpha, adding)
    """
    name = aten_name(op)
    if name not in OPERATOR_TWINS:
        return True
    self, dim_value, index = op.operands[:3]
    self_t, index_t, dim = _ranked_tensor(self), _ranked_tensor(index), \
        constant_int(dim_value)
    if self_t is not None and not self_t.sizes:  # eager: one element; index_put: none
        raise UnsupportedMutationError.at(
            op, "it indexes a 0-d tensor along a dimension (eager takes it as one "
            "element); view it as x.view(1) first")
    if self_t is None or index_t is None or dim is None or len(index_t.sizes) > 1:
        return True
    entries: list[ir.Value | None] = [None] * len(self_t.sizes)
    entries[dim % len(self_t.sizes)] = index
    value: ir.Value | int | float = op.operands[3]
    if name == "torch.aten.index_fill.int_Scalar":
        value = _constant_number(value)
        if value is None:
            return True
    alpha = _constant_number(op.operands[4]) if name == "torch.aten.index_add" else 1
    if alpha is None:
        return True
    return _scatter_at_indices(op, rewriter, entries, value,
                               accumulating=name == "torch.aten.index_add", alpha=alpha,
                               one_dimensional=True)


def _constant_number(value: ir.Value) -> int | float | bool | None:
    if not isinstance(value, ir.OpResult):
        return None
    if value.owner.name == "torch.aten.Int.bool":  # a bool the importer passed as an int
        flag = _constant_number(value.owner.operands[0])
        return None if flag is None else int(flag)
    attribute = value.owner.attributes["value"] if "value" in value.owner.attributes \
        else None
    return {"torch.constant.int": lambda: ir.IntegerAttr(attribute).value,
            "torch.constant.float": lambda: ir.FloatAttr(attribute).value,
            "torch.constant.bool": lambda: ir.BoolAttr(attribute).value
            }.get(value.owner.name, lambda: None)()


def _wrapped(index: ir.Value, size: int | ir.Value) -> ir.Value:
    """`where(index < 0, index + size, index)`: a negative index counts from the end, as
    in eager (torch-mlir's lowerings and StableHLO's scatter drop it instead). Torch ops,
    which outofplace-fold-constants folds for a constant index; `size` a `!torch.int` for
    a dynamic dimension."""
    t = torch_types.TensorType.of(index.type)
    if not t.dtype.is_signed:
        return index
    loc, ip = ir.Location.current, ir.InsertionPoint.current
    zero, one = (torch_constant("int", v, loc, ip) for v in (0, 1))
    bound = size if isinstance(size, ir.Value) else torch_constant("int", size, loc, ip)
    negative = ir.Operation.create(
        "torch.aten.lt.Scalar", results=[t.with_dtype(torch.bool).to_ir()],
        operands=[index, zero]).result
    shifted = ir.Operation.create("torch.aten.add.Scalar", results=[index.type],
                                  operands=[index, bound, one]).result
    return ir.Operation.create("torch.aten.where.self", results=[index.type],
                               operands=[negative, shifted, index]).result


def _scatter_at_indices(op: ir.Operation, rewriter: rewrite.PatternRewriter,
                        entries: list[ir.Value | None], values: ir.Value | int | float,
                        accumulating: bool, alpha: int | float = 1,
                        one_dimensional: bool = False) -> bool:
    """Writes `values` (a tensor, or a number) at `self[entries]` (op.operands[0]; one
    entry per dimension, None or an integer index tensor) as one scatter whose windows
    are whole slices of the other dimensions (what JAX emits for `b.at[:, idx].set(v)`):

        stablehlo.scatter(%b, concatenate(broadcast(%i), broadcast(%j)), %v)
          update_window_dims = [0, ...], inserted_window_dims = [1, 2]
          ({ return %new }, or { add %old, %new } when accumulating)

    The index tensors broadcast together to the batch shape B. As in eager, B takes the
    place of the indexed dimensions in the shape of `b[indices]` (the shape `v` is
    broadcast to) when they are adjacent, and goes first when a slice separates them.
    On other sets of dimensions (`b[:, i, j]`, `b[i, :, j]`) each element of that shape
    gets its own index (`_indexed_windows`). Negative indices count from the end
    (`_wrapped`); indices out of range are dropped. `one_dimensional`: a 0-d index
    counts as one of one element (index_copy's, index_fill's, index_add's). The update
    is `values * alpha`.
    """
    self = op.operands[0]
    at_positions = op.name == "torch.aten.index_put" and not accumulating and \
        _positions(op.operands[1]) is not None
    if not at_positions and _dynamic(self, values, *entries):
        raise UnsupportedMutationError.at(
            op, "a write at index tensors (or accumulating) into a tensor with a dynamic "
            "dimension (dynamic_shapes): its scatter would need indices of runtime size; "
            "assign at 0-d tensor positions (`c[:, pos] = k`) or compile static shapes")
    self_t = _static_tensor(self)
    values_t = _static_tensor(values) if isinstance(values, ir.Value) else \
        torch_types.TensorType((), self_t.dtype if self_t is not None else None, True)
    if self_t is None or values_t is None:
        return True
    shape, rank = list(self_t.sizes), len(self_t.sizes)
    indexed = [d for d, e in enumerate(entries) if e is not None]
    index_shapes = [list(torch_types.TensorType.of(entries[d].type).sizes) or
                    ([1] if one_dimensional else []) for d in indexed]
    try:
        batch = list(torch.broadcast_shapes(*index_shapes))
    except RuntimeError:
        return True
    kept = [d for d in range(rank) if d not in indexed]
    first = indexed[0] if indexed == list(range(indexed[0], indexed[-1] + 1)) else 0
    before = [d for d in kept if d < first]
    after = [d for d in kept if d >= first]
    update_shape = [shape[d] for d in before] + batch + [shape[d] for d in after]
    windows = list(range(len(before))) + \
        list(range(len(before) + len(batch), len(update_shape)))
    offset = len(update_shape) - len(values_t.sizes)
    if offset < 0 or any(v not in (1, u) for v, u in zip(values_t.sizes,
                                                          update_shape[offset:])):
        return True
    element = torch_types.element_type(self_t.dtype, signless=True)
    with rewriter.ip, unnamed(op.location):
        if isinstance(values, ir.Value):
            update = to_builtin(values)
            if values_t.dtype != self_t.dtype:
                update = _stablehlo("convert", ir.RankedTensorType.get(
                    list(values_t.sizes), element), update)
        else:
            update = _scalar_constant(element, values, None)
        if alpha != 1:
            update = _stablehlo("multiply", update.type, update, _stablehlo(
                "broadcast_in_dim", update.type, _scalar_constant(element, alpha, None),
                broadcast_dimensions=ir.DenseI64ArrayAttr.get([])))
        if list(values_t.sizes) != update_shape:
            update = _stablehlo("broadcast_in_dim", ir.RankedTensorType.get(
                update_shape, element), update, broadcast_dimensions=ir.DenseI64ArrayAttr.get(
                    list(range(offset, len(update_shape)))))
        # Windows when _indexed_windows allows; else an index per element of the update:
        # the index tensors spread over its batch dimensions, iotas along the others.
        per_element = not _indexed_windows(indexed, rank)
        rows, start = (update_shape, len(before)) if per_element else (batch, 0)
        column_type = ir.RankedTensorType.get(rows + [1], _i64())
        columns = []
        for d in range(rank) if per_element else indexed:
            if d not in indexed:
                position = before.index(d) if d in before else \
                    len(before) + len(batch) + after.index(d)
                columns.append(_iota_column(update_shape, position, 0, 1))
                continue
            sizes = index_shapes[indexed.index(d)]
            column = to_builtin(_wrapped(entries[d], shape[d]))
            if ir.RankedTensorType(column.type).element_type != _i64():
                column = _stablehlo("convert", ir.RankedTensorType.get(
                    ir.RankedTensorType(column.type).shape, _i64()), column)
            if sizes == rows:
                column = _stablehlo("reshape", column_type, column)
            else:
                first = start + len(batch) - len(sizes)
                column = _stablehlo("broadcast_in_dim", column_type, column,
                                    broadcast_dimensions=ir.DenseI64ArrayAttr.get(
                                        list(range(first, first + len(sizes)))))
            columns.append(column)
        dest = to_builtin(self)
        numbers = _scatter_numbers([], list(range(rank)), len(rows)) if per_element \
            else _scatter_numbers(windows, indexed, len(rows))
        scatter = _scatter(dest, _index_vectors(columns, rows), update, numbers,
                           combine=None if not accumulating else
                           "or" if self_t.dtype == torch.bool else "add",
                           unique=False, loc=op.location)
        result = ir.Operation.create("torch_c.from_builtin_tensor", results=[op.result.type],
                                     operands=[scatter.result])
    rewriter.replace_op(op, result)
    return False


def _mask_entries(indices: ir.Value) -> list[ir.Value | None] | None:
    """The entries of an index list holding a bool mask: None or a ranked tensor; None
    if the list is anything else or has no bool tensor."""
    entries = index_entries(indices)
    tensors = [_ranked_tensor(e) for e in entries or () if e is not None]
    if entries is None or None in tensors or not any(t.dtype == torch.bool for t in tensors):
        return None
    return entries


def _torch(name: str, result: torch_types.TensorType, *operands: ir.Value) -> ir.Value:
    return ir.Operation.create(f"torch.aten.{name}", results=[result.to_ir()],
                               operands=operands).result


def _view(value: ir.Value, sizes: list[int]) -> ir.Value:
    loc, ip = ir.Location.current, ir.InsertionPoint.current
    shape = ir.Operation.create(
        "torch.prim.ListConstruct", results=[ir.Type.parse("!torch.list<int>")],
        operands=[torch_constant("int", n, loc, ip) for n in sizes]).result
    t = torch_types.TensorType.of(value.type)
    return _torch("view", torch_types.TensorType(tuple(sizes), t.dtype, True), value, shape)


def _index_put_with_mask(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`b[mask] = v` (index_put with one bool mask), a select over the whole of b; never
    nonzero, so shapes stay static. The value of the k-th true element is row k of v,
    found by a running count of the trues:

        %r = torch.aten.index_put %b, [%mask], %v, %false
        =>  where(mask, v, b)                                v broadcast over the trues
        =>  where(mask, index_select(v, cumsum(mask) - 1), b)   v holds a row per true

    (accumulating: where(mask, b + ..., b)). Torch ops, lowered by torch-mlir.
    """
    self, indices, values, accumulate = op.operands
    self_t, values_t = _static_tensor(self), _static_tensor(values)
    entries = _mask_entries(indices)
    accumulating = constant_bool(accumulate)
    if entries is not None and _dynamic(self, *entries):
        raise UnsupportedMutationError.at(
            op, "a write at a bool mask into a tensor with a dynamic dimension "
            "(dynamic_shapes): the running count of its trues would be of runtime size; "
            "write `torch.where(mask, v, x)` or compile static shapes")
    if self_t is None or values_t is None or entries is None or accumulating is None:
        return True
    masks = [k for k, e in enumerate(entries) if e is not None]
    if len(masks) > 1:
        raise UnsupportedMutationError.at(
            op, "a bool mask together with other index tensors in one index (the "
            "positions of its trues, as many as the data says, would broadcast with the "
            "other indices)")
    k = masks[0]
    mask = entries[k]
    if _static_tensor(mask) is None:
        return True
    mask_sizes = list(torch_types.TensorType.of(mask.type).sizes)
    shape = list(self_t.sizes)
    before, after = shape[:k], shape[k + len(mask_sizes):]
    if shape[k:k + len(mask_sizes)] != mask_sizes:
        return True
    if 0 in values_t.sizes:  # eager accepted it: the mask selects nothing
        rewriter.replace_op(op, [self])
        return False
    rows_dim = len(before)  # where the true elements are counted in b[mask]
    wide = [1] * (len(before) + 1 + len(after) - len(values_t.sizes)) + list(values_t.sizes)
    if len(wide) != len(before) + 1 + len(after):
        return True
    with rewriter.ip, unnamed(op.location):
        loc, ip = ir.Location.current, ir.InsertionPoint.current
        if values_t.dtype != self_t.dtype:
            none, false = torch_constant("none", None, loc, ip), \
                torch_constant("bool", False, loc, ip)
            values = _torch("to.dtype", values_t.with_dtype(self_t.dtype), values,
                            torch_constant("int", TORCH_DTYPE_TO_INT[self_t.dtype], loc, ip),
                            false, false, none)
        if wide[rows_dim] == 1:
            picked = _view(values, wide[:rows_dim] + [1] * len(mask_sizes) +
                           wide[rows_dim + 1:])
        else:
            flat = _view(mask, [_count(mask_sizes)])
            counts = torch_types.TensorType((_count(mask_sizes),), torch.int64, True)
            count = _torch("cumsum", counts, flat, torch_constant("int", 0, loc, ip),
                           torch_constant("int", TORCH_DTYPE_TO_INT[torch.int64], loc, ip))
            one, zero = torch_constant("int", 1, loc, ip), torch_constant("int", 0, loc, ip)
            position = _torch("clamp_min", counts, _torch("sub.Scalar", counts, count, one,
                                                          one), zero)
            rows = _torch("index_select", torch_types.TensorType(
                tuple(wide[:rows_dim] + [_count(mask_sizes)] + wide[rows_dim + 1:]),
                self_t.dtype, True), _view(values, wide),
                torch_constant("int", rows_dim, loc, ip), position)
            picked = _view(rows, wide[:rows_dim] + mask_sizes + wide[rows_dim + 1:])
        if accumulating:
            picked = _torch("add.Tensor", self_t.with_value_semantics(), self, picked,
                            torch_constant("int", 1, loc, ip))
        condition = _view(mask, mask_sizes + [1] * len(after))
        new = _torch("where.self", self_t.with_value_semantics(), condition, picked, self)
    rewriter.replace_op(op, [new])
    return False


_REDUCTIONS = {"sum": "add", "prod": "multiply", "amax": "maximum", "amin": "minimum"}


def _neutral(reduce: str, dtype: torch.dtype) -> int | float | bool:
    """The value that leaves any element unchanged under `reduce`."""
    if reduce in ("sum", "prod"):
        return 0 if reduce == "sum" else 1
    if dtype.is_floating_point:
        return float("-inf") if reduce == "amax" else float("inf")
    info = torch.iinfo(dtype) if dtype != torch.bool else None
    if info is None:
        return reduce == "amin"
    return info.min if reduce == "amax" else info.max


def _splat(element: ir.Type, value: int | float | bool, shape: list[int]) -> ir.Value:
    return _stablehlo("broadcast_in_dim", ir.RankedTensorType.get(shape, element),
                      _scalar_constant(element, value, None),
                      broadcast_dimensions=ir.DenseI64ArrayAttr.get([]))


def _constant_str(value: ir.Value) -> str | None:
    if isinstance(value, ir.OpResult) and value.owner.name == "torch.constant.str":
        return ir.StringAttr(value.owner.attributes["value"]).value
    return None


def _scatter_reduce(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`x.scatter_reduce_(d, idx, src, reduce)` (sum, prod, amax, amin), which torch-mlir
    does not lower to StableHLO, as a scatter of single elements whose body reduces:

        %r = torch.aten.scatter_reduce.two %x, %d, %idx, %src, "amax", %include_self
        =>  stablehlo.scatter(%x, [iota..., idx, iota...], %src) ({ maximum })

    Without include_self the targets are first set to the reduction's neutral element.
    "mean" is a sum divided by a count, as eager computes it (floor division for
    integers): the count scatter-adds ones into ones (include_self) or zeros, at least 1.
    """
    self, dim_value, index, src, reduce_value, include_value = op.operands
    self_t, index_t, src_t = (_static_tensor(v) for v in (self, index, src))
    dim, reduce = constant_int(dim_value), _constant_str(reduce_value)
    include_self = constant_bool(include_value)
    if None in (self_t, index_t, src_t, dim, include_self) or \
            reduce not in _REDUCTIONS and reduce != "mean":
        return True
    if reduce == "mean" and self_t.dtype == torch.bool:
        raise UnsupportedMutationError.at(
            op, 'reduce="mean" of a bool tensor, which eager does not implement either '
            "(scatter_gather_tensor_cpu_reduce_mean is not implemented for 'Bool')")
    combined = "sum" if reduce == "mean" else reduce  # what the scatter's body does
    rank = len(self_t.sizes)
    dim %= max(rank, 1)
    shape = list(index_t.sizes)
    element = torch_types.element_type(self_t.dtype, signless=True)
    with rewriter.ip, unnamed(op.location):
        updates = to_builtin(src)
        if list(src_t.sizes) != shape:
            updates = _stablehlo("slice", ir.RankedTensorType.get(
                shape, torch_types.element_type(src_t.dtype, signless=True)), updates,
                start_indices=ir.DenseI64ArrayAttr.get([0] * rank),
                limit_indices=ir.DenseI64ArrayAttr.get(shape),
                strides=ir.DenseI64ArrayAttr.get([1] * rank))
        if src_t.dtype != self_t.dtype:
            updates = _stablehlo("convert", ir.RankedTensorType.get(shape, element), updates)
        column = ir.RankedTensorType.get(shape + [1], _i64())
        positions = to_builtin(index)
        if ir.RankedTensorType(positions.type).element_type != _i64():
            positions = _stablehlo("convert", ir.RankedTensorType.get(shape, _i64()),
                                   positions)
        parts = [_stablehlo("reshape", column, positions) if d == dim else
                 _stablehlo("iota", column, iota_dimension=ir.IntegerAttr.get(_i64(), d))
                 for d in range(rank)]
        indices = _index_vectors(parts, shape)
        numbers = ir.Attribute.parse(
            f"#stablehlo.scatter<inserted_window_dims = {list(range(rank))}, "
            f"scatter_dims_to_operand_dims = {list(range(rank))}, index_vector_dim = {rank}>")
        dest = to_builtin(self)
        if not include_self:
            neutral = _splat(element, _neutral(combined, self_t.dtype), shape)
            dest = _scatter(dest, indices, neutral, numbers, combine=None, unique=False,
                            loc=unnamed(op.location)).result
        scatter = _scatter(dest, indices, updates, numbers,
                           combine=_REDUCTIONS[combined], unique=False,
                           loc=unnamed(op.location) if reduce == "mean" else op.location)
        new = scatter.result
        if reduce == "mean":
            full = list(self_t.sizes)
            count = _scatter(_splat(element, int(include_self), full), indices,
                             _splat(element, 1, shape), numbers, combine="add",
                             unique=False, loc=unnamed(op.location)).result
            count = _stablehlo("maximum", count.type, count, _splat(element, 1, full))
            new = _stablehlo("divide", count.type, new, count, loc=op.location)
            if not self_t.dtype.is_floating_point:  # floor, where divide truncates
                rest = _stablehlo("remainder", count.type, scatter.result, count)
                below = _stablehlo("compare", ir.RankedTensorType.get(
                    full, ir.IntegerType.get_signless(1)), rest, _splat(element, 0, full),
                    comparison_direction=ir.Attribute.parse(
                        "#stablehlo<comparison_direction LT>"))
                new = _stablehlo("select", count.type, below, _stablehlo(
                    "subtract", count.type, new, _splat(element, 1, full)), new,
                    loc=op.location)
        result = ir.Operation.create("torch_c.from_builtin_tensor", results=[self.type],
                                     operands=[new])
    rewriter.replace_op(op, result)
    return False


def _scatter_into_dimension(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`slice_scatter` (unit step) whose end is not a constant (`c[:, :L] = k` with L a
    dynamic length, which torch-mlir does not lower) and `select_scatter` into a tensor
    with a dynamic dimension, at a constant position: one scatter of the whole source as
    the window at that position (IREE takes no dynamic_update_slice of a source of
    runtime size).

        %r = torch.aten.slice_scatter %c, %k, %int1, %int0, %L, %int1
        =>  stablehlo.scatter(%c, [0], %k)  update_window_dims = [0, 1, 2],
              inserted_window_dims = [], scatter_dims_to_operand_dims = [1]
    """
    select = op.name == "torch.aten.select_scatter"
    self, src, dim_value, start_value = op.operands[:4]
    self_t, src_t = _ranked_tensor(self), _ranked_tensor(src)
    dim = constant_int(dim_value)
    start = constant_bound(start_value, 0)
    if self_t is None or src_t is None or dim is None or start is None or \
            self_t.dtype != src_t.dtype:
        return True
    if not select and constant_int(op.operands[5]) != 1:
        return True
    # Else torch-mlir's lowering (IREE rejects this scatter for a slice of static
    # length in a longer dimension: "mismatch in shape of indices and update value").
    if not (-1 in self_t.sizes if select else constant_int(op.operands[4]) is None):
        return True
    dim %= len(self_t.sizes)
    if self_t.sizes[dim] != -1:
        start = from_end(start, self_t.sizes[dim])
    if start < 0:
        return True
    with rewriter.ip, unnamed(op.location):
        index = ir.RankedTensorType.get([1], _i64())
        indices = _stablehlo("constant", index, value=ir.DenseElementsAttr.get_splat(
            index, ir.IntegerAttr.get(_i64(), start)))
        rank = len(src_t.sizes)
        numbers = ir.Attribute.parse(
            f"#stablehlo.scatter<update_window_dims = {list(range(rank))}, "
            f"inserted_window_dims = {[dim] if select else []}, "
            f"scatter_dims_to_operand_dims = [{dim}], index_vector_dim = 0>")
        scatter = _scatter(to_builtin(self), indices, to_builtin(src), numbers,
                           combine=None, unique=True, loc=op.location)
        result = ir.Operation.create("torch_c.from_builtin_tensor", results=[op.result.type],
                                     operands=[scatter.result])
    rewriter.replace_op(op, result)
    return False


@register_pass(
    "outofplace-lower-updates",
    "Lower update ops to dynamic_update_slice, scatter or pad+select",
    '`tensor.insert_slice` → `dynamic_update_slice` (unit stride), or (strided) a '
    '`scatter` at iota positions or pad+select, whichever touches fewer bytes; '
    '`index_put` at 0-d runtime positions → `dynamic_update_slice` with runtime '
    'starts; `index_put` with integer index tensors on any dimensions → one `scatter` '
    'of whole slices of the others, as are `index_copy`, `index_fill` and `index_add` '
    "(torch-mlir has no op for them: `torch.operator`s); negative index tensors count "
    "from the end; `index_put` with one bool mask → `where(mask, v, b)`, v's rows picked by "
    "a running count of the trues (never `nonzero`); `scatter_reduce` (sum, prod, amax, amin, mean; "
    'torch-mlir has no lowering) → a `scatter` whose body reduces; `slice_scatter` with a '
    'runtime end and `select_scatter` into a dynamic dimension → one `scatter` of the '
    'whole source; an insert of the whole destination → its source',
    options=[Option("strided", "cheaper", ("cheaper", "scatter", "select"),
                    "how a strided box is written: whichever touches fewer bytes, or "
                    "always a scatter, or always pad+select")])
def lower_updates(module: ir.Operation, strided: str = "cheaper") -> None:
    """Rewrites every update op of `module` into StableHLO."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("tensor.insert_slice",
                 lambda op, rewriter: _insert_slice(op, rewriter, strided))
    patterns.add("torch.aten.index_put", _index_put_at_positions)
    patterns.add("torch.aten.index_put", _index_put_with_tensors)
    patterns.add("torch.aten.index_put", _index_put_with_mask)
    patterns.add("torch.operator", _index_op)
    patterns.add("torch.aten.scatter_reduce.two", _scatter_reduce)
    patterns.add("torch.aten.slice_scatter", _scatter_into_dimension)
    patterns.add("torch.aten.select_scatter", _scatter_into_dimension)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
