"""The `outofplace-lower-updates` pass: value-semantic updates to StableHLO.

The inplace-to-outofplace pass writes a box of a root as `tensor.insert_slice` on builtin
tensors (between `torch_c.to_builtin_tensor` / `from_builtin_tensor`). These rewrite
patterns turn it into the StableHLO a backend updates in place, before torch-mlir lowers
everything else (torch-mlir leaves StableHLO between torch_c casts alone):

    tensor.insert_slice %u into %r[2, 0] [2, 4] [1, 1]
    =>  stablehlo.dynamic_update_slice %r, %u, %c2, %c0      (unit strides)

    tensor.insert_slice %u into %r[1] [4] [2]
    =>  stablehlo.select(pad(true, interior 1), pad(%u, interior 1), %r)  (strided)

    torch.aten.slice_scatter %z, %g, %int3, %int0, %int32, %int1   (constant bounds)
    =>  stablehlo.dynamic_update_slice %z, %g, %c0, %c0, %c0, %c0   (as insert_slice)

    torch.aten.index_put %c, [%none, %pos], %k          (0-d runtime positions)
    =>  stablehlo.dynamic_update_slice %c, %k', %c0, %pos'

    torch.aten.index_put %b, [%none, %i, %j], %v        (integer index tensors)
    torch.operator "torch.aten.index_copy"(%b, %int1, %i, %v)   (index_fill, index_add)
    =>  stablehlo.scatter of whole slices of the other dimensions

    torch.aten.index_put %b, [%mask], %v                 (a bool mask)
    =>  torch.aten.where.self %mask, %v', %b

One pass, one rewrite pattern per update form, a module per concern: boxes.py
(insert_slice, slice_scatter of constant bounds), positions.py (0-d runtime positions),
index_tensors.py (integer index tensors and the index_* ops), masks.py (a bool mask),
reductions.py (scatter_reduce and the scatters into a dimension); common.py holds the
StableHLO builders they share.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from ..registry import Option, register_pass
from .boxes import _insert_slice, _slice_scatter
from .index_tensors import _index_op, _index_put_with_tensors
from .masks import _index_put_with_mask
from .positions import _index_put_at_positions
from .reductions import _scatter_into_dimension, _scatter_reduce


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
    "a running count of the trues (never `nonzero`), index tensors of one element beside "
    "it made part of the mask; `scatter_reduce` (sum, prod, amax, amin, mean; "
    'torch-mlir has no lowering) → a `scatter` whose body reduces; `slice_scatter` of '
    'constant bounds between static shapes (autograd\'s backward of a slice) → the box '
    'it writes, as `tensor.insert_slice`; `slice_scatter` with a runtime end and '
    '`select_scatter` into a dynamic dimension → one `scatter` of the '
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
    patterns.add("torch.aten.slice_scatter",
                 lambda op, rewriter: _slice_scatter(op, rewriter, strided))
    patterns.add("torch.aten.slice_scatter", _scatter_into_dimension)
    patterns.add("torch.aten.select_scatter", _scatter_into_dimension)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
