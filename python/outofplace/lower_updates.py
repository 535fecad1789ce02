"""The `outofplace-lower-updates` pass: value-semantic updates to StableHLO.

The inplace-to-outofplace pass writes a box of a root as `tensor.insert_slice` on builtin
tensors (between `torch_c.to_builtin_tensor` / `from_builtin_tensor`). These rewrite
patterns turn it into the StableHLO a backend updates in place, before torch-mlir lowers
everything else (torch-mlir leaves StableHLO between torch_c casts alone):

    tensor.insert_slice %u into %r[2, 0] [2, 4] [1, 1]
    =>  stablehlo.dynamic_update_slice %r, %u, %c2, %c0      (unit strides)

    tensor.insert_slice %u into %r[1] [4] [2]
    =>  stablehlo.select(pad(true, interior 1), pad(%u, interior 1), %r)  (strided)
"""

from __future__ import annotations

from torch_mlir import ir, rewrite



def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _scalar_constant(element: ir.Type, value: int | float | bool, loc: ir.Location
                     ) -> ir.Value:
    scalar = ir.RankedTensorType.get([], element, loc=loc)
    if isinstance(element, ir.FloatType):
        attr = ir.FloatAttr.get(element, float(value))
    else:
        attr = ir.IntegerAttr.get(element, int(value))
    return ir.Operation.create("stablehlo.constant", results=[scalar], attributes={
        "value": ir.DenseElementsAttr.get_splat(scalar, attr)}, loc=loc).result


def _static(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _dynamic_update_slice(dest: ir.Value, source: ir.Value, offsets: list[int],
                          loc: ir.Location) -> ir.Operation:
    starts = [_scalar_constant(_i64(), o, loc) for o in offsets]
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
                               operands=[mask, padded, dest], loc=loc)


def _insert_slice(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """tensor.insert_slice with static offsets, sizes and strides -> StableHLO."""
    if len(op.operands) != 2:
        return True  # runtime offsets: not matched
    source, dest = op.operands[0], op.operands[1]
    if ir.RankedTensorType(source.type).rank != ir.RankedTensorType(dest.type).rank:
        return True
    offsets, strides = _static(op, "static_offsets"), _static(op, "static_strides")
    with rewriter.ip, op.location:
        if all(s == 1 for s in strides):
            new = _dynamic_update_slice(dest, source, offsets, op.location)
        else:
            new = _strided_select(dest, source, offsets, strides, op.location)
    rewriter.replace_op(op, new)
    return False


def lower_updates(module: ir.Operation) -> None:
    """Rewrites every update op of `module` into StableHLO."""
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("tensor.insert_slice", _insert_slice)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
