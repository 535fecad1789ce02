"""`outofplace-squeeze-state`: a written argument with dimensions of size 1 (a KV cache
[1, H, S, D] at batch 1) is passed, updated and returned without them, for XLA:CPU.

XLA:CPU copies such a cache on every call when attention reads it right after the
update: its dot canonicalization reads the batch-1 `dot_general`'s operand through a
bitcast dropping the unit dimensions, its fusion pass fuses a second copy of the
dynamic-update-slice into that bitcast (and into the bitcast of the output), and copy
insertion then copies the parameter, 786 KB a layer a token in a 148M Llama (JAX's own
program pays the same). With no bitcast between the parameter, the update, its readers
and the output, the update stays in place:

    func.func @main(%cache: tensor<1x12x256x64xf32> {tf.aliasing_output = 1 : i32}, ...)
      %u = "stablehlo.scatter"(%cache, %i, %k) ...  -> tensor<1x12x256x64xf32>
      %s = stablehlo.dot_general %q, %u, batching_dims = [0, 1] x [0, 1], ...
  =>
    func.func @main(%cache: tensor<12x256x64xf32> {tf.aliasing_output = 1 : i32}, ...)
      %u = "stablehlo.scatter"(%cache, %i, %k') ...  -> tensor<12x256x64xf32>
      %s' = stablehlo.dot_general %q, %u, batching_dims = [1] x [0], ...

A value a `stablehlo.while` carries and its body changes (a cache written in a decode
loop, transforms/lower_regions.py) loses them the same way, in the loop's regions too.

The argument and its aliased result lose their unit dimensions (the caller's buffer
holds the same bytes), a `reshape` gives the old type back at the top, and each
`dynamic_update_slice` and `scatter` whose operand is such a reshape is done on the
reshape's operand instead, its result reshaped for its readers (a `scatter` only when
the dimensions it drops are neither indexed nor batch dimensions: an index there could be
out of bounds). Reshapes of reshapes fold; `outofplace-fold-transposes-into-dots` then
reads the dots' operands through the remaining reshapes. Only the XLA engine runs it
(backends/xla): the program a user exports keeps the shapes the caller's tensors have.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo
from torch_mlir.dialects import func as func_d

from ..ir_utils import all_operations, operations, ranked_shape, reshape, retype_function
from ..signature import io_map_of
from .registry import register_pass


def inserted_unit_dims(source: list[int], result: list[int]) -> list[int] | None:
    """The dimensions of `result` a reshape of `source` inserts, when it only inserts
    dimensions of size 1 (`source` is `result` without them), else None."""
    inserted, j = [], 0
    for d, size in enumerate(result):
        if j < len(source) and source[j] == size:
            j += 1
        elif size == 1:
            inserted.append(d)
        else:
            return None
    return inserted if j == len(source) else None


def _tensor_type(shape: list[int], like: ir.Value) -> ir.Type:
    return ir.RankedTensorType.get(shape, ir.RankedTensorType(like.type).element_type)


def _unsqueezed_operand(op: ir.Operation) -> tuple[ir.Value, list[int]] | None:
    """(x, the dimensions inserted) when op's first operand is a reshape of x that only
    inserts unit dimensions."""
    operand = op.operands[0]
    if not isinstance(operand, ir.OpResult) or operand.owner.name != "stablehlo.reshape":
        return None
    source = operand.owner.operands[0]
    inserted = inserted_unit_dims(ranked_shape(source), ranked_shape(operand))
    return (source, inserted) if inserted else None


def _dropped(dims: list[int], removed: list[int]) -> list[int]:
    """Dimension numbers with `removed` taken out and the rest renumbered."""
    return [d - sum(r < d for r in removed) for d in dims if d not in removed]


def _squeeze_update(op: ir.Operation) -> bool:
    """A dynamic_update_slice or single scatter of a reshape inserting unit dimensions,
    done on the reshape's operand, its result reshaped for op's readers; False, nothing
    changed, when op is no such update."""
    found = _unsqueezed_operand(op)
    if found is None:
        return False
    source, removed = found
    loc, ip = op.location, ir.InsertionPoint(op)
    if op.name == "stablehlo.dynamic_update_slice":
        update = op.operands[1]
        update_shape = ranked_shape(update)
        if any(update_shape[d] != 1 for d in removed):
            return False
        starts = [s for d, s in enumerate(list(op.operands)[2:]) if d not in removed]
        kept = [n for d, n in enumerate(update_shape) if d not in removed]
        new = ir.Operation.create(
            "stablehlo.dynamic_update_slice", results=[source.type], loc=loc, ip=ip,
            operands=[source, reshape(update, kept, ip, loc), *starts])
        op.result.replace_all_uses_with(reshape(new.result, ranked_shape(op.result), ip, loc))
        op.erase()
        return True
    if op.name != "stablehlo.scatter" or len(op.operands) != 3:
        return False
    numbers = _stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    inserted = list(numbers.inserted_window_dims)
    batching = list(numbers.input_batching_dims)
    indexed = list(numbers.scattered_dims_to_operand_dims)
    if any(d in indexed or d in batching for d in removed):
        return False  # an index there may be out of bounds, where the scatter writes nothing
    rank = len(ranked_shape(op.operands[0]))
    windows = [d for d in range(rank) if d not in inserted and d not in batching]
    window_dims = list(numbers.update_window_dims)
    update = op.operands[2]
    update_shape = ranked_shape(update)
    gone = [window_dims[windows.index(d)] for d in removed if d in windows]
    if any(update_shape[u] != 1 for u in gone):
        return False
    kept = [n for u, n in enumerate(update_shape) if u not in gone]
    # changed where it is: the update body stays with the op
    op.operands[0] = source
    op.operands[2] = reshape(update, kept, ip, loc)
    op.attributes["scatter_dimension_numbers"] = _stablehlo.ScatterDimensionNumbers.get(
        _dropped(window_dims, gone), _dropped(inserted, removed), _dropped(batching, removed),
        list(numbers.scatter_indices_batching_dims), _dropped(indexed, removed),
        numbers.index_vector_dim, context=op.context)
    old_type = op.result.type
    op.result.set_type(source.type)
    reshaped = ir.Operation.create("stablehlo.reshape", results=[old_type],
                                   operands=[op.result], loc=loc,
                                   ip=ir.InsertionPoint.after(op))
    op.result.replace_all_uses_except(reshaped.result, reshaped)
    return True


def _fold_reshapes(function: ir.Operation) -> None:
    """reshape(reshape(x)) => reshape(x), and a reshape to x's own type => x; then the
    reshapes nothing reads are erased."""
    for op in all_operations(function):
        if op.name != "stablehlo.reshape":
            continue
        operand = op.operands[0]
        if isinstance(operand, ir.OpResult) and operand.owner.name == "stablehlo.reshape":
            op.operands[0] = operand.owner.operands[0]
        if op.operands[0].type == op.result.type:
            op.result.replace_all_uses_with(op.operands[0])
    for op in reversed(all_operations(function)):
        if op.name == "stablehlo.reshape" and not list(op.result.uses):
            op.erase()


def _squeeze_block_argument(block: ir.Block, index: int, new_type: ir.Type) -> None:
    """Block argument `index` retyped to `new_type` (its unit dimensions dropped), its
    uses reading it reshaped back at the top of the block."""
    argument = block.arguments[index]
    old_type = argument.type
    argument.set_type(new_type)
    first = block.operations[0]
    back = ir.Operation.create("stablehlo.reshape", results=[old_type], operands=[argument],
                              loc=first.location, ip=ir.InsertionPoint(first))
    argument.replace_all_uses_except(back.result, back)


def _squeeze_argument(function: func_d.FuncOp, argument: int, result: int) -> bool:
    """Argument `argument` and result `result` without their unit dimensions; False when
    they have none or differ in type."""
    block = function.entry_block
    value = block.arguments[argument]
    shape = ranked_shape(value)
    squeezed = [n for n in shape if n != 1]
    ret = block.operations[len(block.operations) - 1]
    if len(squeezed) == len(shape) or ret.operands[result].type != value.type:
        return False
    _squeeze_block_argument(block, argument, _tensor_type(squeezed, value))
    ret.operands[result] = reshape(ret.operands[result], squeezed, ir.InsertionPoint(ret),
                                   ret.location)
    return True


@register_pass(
    "outofplace-squeeze-state",
    "Pass, update and return written arguments without their unit dimensions (XLA:CPU)",
    "a written argument with dimensions of size 1 and its aliased result lose them; each "
    "`dynamic_update_slice` and `scatter` of a reshape adding unit dimensions is done on "
    "the reshape's operand (a scatter only where the dropped dimensions are not indexed): "
    "XLA:CPU otherwise copies a batch-1 KV cache that attention reads after the update "
    "(the XLA engine's legalization, backends/xla)")
def squeeze_state(module: ir.Operation) -> None:
    for op in operations(module.regions[0].blocks[0]):
        if op.name == "func.func":
            with op.location:  # (types need a location to be made)
                _squeeze(op.opview)


def _squeeze_carried(loop: ir.Operation) -> bool:
    """The values a `stablehlo.while` carries that its body changes (a cache written in
    a decode loop) without their unit dimensions, as arguments are: reshaped before the
    loop, at the top of its regions, before the body returns them and after the loop.
    False when it carries none."""
    body = loop.regions[1].blocks[0]
    ret = body.operations[len(body.operations) - 1]
    changed = False
    for i, value in enumerate(list(loop.operands)):
        shape = ranked_shape(value)
        squeezed = [n for n in shape if n != 1]
        if len(squeezed) == len(shape) or ret.operands[i] == body.arguments[i]:
            continue
        old_type, new_type = value.type, _tensor_type(squeezed, value)
        loop.operands[i] = reshape(value, squeezed, ir.InsertionPoint(loop), loop.location)
        for region in loop.regions:
            _squeeze_block_argument(region.blocks[0], i, new_type)
        ret.operands[i] = reshape(ret.operands[i], squeezed, ir.InsertionPoint(ret),
                                  ret.location)
        result = loop.results[i]
        result.set_type(new_type)
        after = ir.Operation.create("stablehlo.reshape", results=[old_type],
                                    operands=[result], loc=loop.location,
                                    ip=ir.InsertionPoint.after(loop))
        result.replace_all_uses_except(after.result, after)
        changed = True
    return changed


def _squeeze(function: func_d.FuncOp) -> None:
    io_map = io_map_of(function)
    changed = [a for a, r in sorted(io_map.items()) if _squeeze_argument(function, a, r)]
    loops = [_squeeze_carried(op) for op in all_operations(function.operation)
             if op.name == "stablehlo.while"]
    if not changed and not any(loops):
        return
    retype_function(function)
    for op in all_operations(function.operation):  # in program order: a chain of updates
        if op.name in ("stablehlo.dynamic_update_slice", "stablehlo.scatter"):
            _squeeze_update(op)
    _fold_reshapes(function.operation)
