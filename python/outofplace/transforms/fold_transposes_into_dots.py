"""`outofplace-fold-transposes-into-dots`: the transposes and unit-dimension broadcasts
feeding a `dot_general` become the dot's own dimension numbers.

torch-mlir lowers `nn.Linear` (`aten.linear`, `x @ w.t()`) to a transpose of the weight,
for a 3-d input broadcast to a batch of one, and a dot contracting its first dimension:

    %t = stablehlo.transpose %w, dims = [1, 0] : (tensor<5632x2048xf32>) -> tensor<2048x5632xf32>
    %b = stablehlo.broadcast_in_dim %t, dims = [1, 2] : (...) -> tensor<1x2048x5632xf32>
    %y = stablehlo.dot_general %x, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1]

XLA:CPU keeps the transpose as a copy of the whole weight on every call when it cannot
fuse it into the dot (a bias add fused into the dot's output is enough): a batch-1
`nn.Linear(2048, 5632)` took 25 ms a call where the dot alone takes 1.4 ms, and JAX's own
`x @ w.T + b` pays the same (docs/performance.md). The dot reads the weight where it is:

    %d = stablehlo.dot_general %x, %w, contracting_dims = [2] x [1]
    %y = stablehlo.reshape %d : (tensor<1x1x5632xf32>) -> tensor<1x1x5632xf32>

Each operand is followed back through transposes, `broadcast_in_dim`s that only reorder
or add dimensions, and reshapes that only add or drop dimensions of
size 1, to the tensor they start from; each of
the dot's dimensions is then a dimension of that tensor or a unit dimension the chain
added. A pair of batch or contracting dimensions that lost one side is a unit dimension,
or a batch dimension the chain broadcast (torch-mlir broadcasts a 3-d `nn.Linear`'s weight
to the input's batch, [64, 2048, 5632] floats for a batch of 64, which XLA:CPU
materialises: 17 s a call): its other side becomes a free dimension. The fold is made when the result's
dimensions longer than 1 keep their order, so the new dot's result is the old one up to
unit dimensions: a `reshape` (a bitcast for XLA) gives it back its type. The transposes
stay for any other user.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite
from torch_mlir._mlir_libs import _stablehlo

from ..ir_utils import all_operations, erase_unused, ranked_shape
from .registry import register_pass


def _root(value: ir.Value) -> tuple[ir.Value, list[int | None]]:
    """The tensor `value` starts from through transposes and broadcasts that move no
    element, and, per dimension of `value`, the dimension of that tensor it is (None: a
    unit dimension the chain added)."""
    dims: list[int | None] = list(range(len(ranked_shape(value))))
    while isinstance(value, ir.OpResult):
        op = value.owner
        if op.name == "stablehlo.transpose":
            perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
            dims = [None if d is None else perm[d] for d in dims]
        elif op.name == "stablehlo.broadcast_in_dim":
            source, result = ranked_shape(op.operands[0]), ranked_shape(op.result)
            placed = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
            if any(source[j] != result[r] for j, r in enumerate(placed)):
                break  # it repeats elements
            where = {r: j for j, r in enumerate(placed)}
            dims = [None if d is None else where.get(d) for d in dims]
        elif op.name == "stablehlo.reshape":
            source, result = ranked_shape(op.operands[0]), ranked_shape(op.result)
            long_source = [j for j, n in enumerate(source) if n != 1]
            long_result = [r for r, n in enumerate(result) if n != 1]
            if [source[j] for j in long_source] != [result[r] for r in long_result]:
                break  # it merges or splits dimensions
            where = dict(zip(long_result, long_source))  # unit dimensions: added
            dims = [None if d is None else where.get(d) for d in dims]
        else:
            break
        value = op.operands[0]
    return value, dims


class _Side:
    """One operand of the dot, as its root tensor and the root's batch, contracting and
    free dimensions."""

    def __init__(self, operand: ir.Value, batch: list[int], contracting: list[int]) -> None:
        self.operand, self.batch, self.contracting = operand, batch, contracting
        self.root, self.dims = _root(operand)
        named = set(batch) | set(contracting)
        # (the operand's free dimensions, in order: the dot's result dimensions)
        self.free = [self.dims[d] for d in range(len(self.dims)) if d not in named]

    @property
    def folds(self) -> bool:
        return self.root is not self.operand


def _fold(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    numbers = _stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lhs = _Side(op.operands[0], list(numbers.lhs_batching_dimensions),
                list(numbers.lhs_contracting_dimensions))
    rhs = _Side(op.operands[1], list(numbers.rhs_batching_dimensions),
                list(numbers.rhs_contracting_dimensions))
    if not (lhs.folds or rhs.folds):
        return True  # not matched
    pairs = {}
    for kind in ("batch", "contracting"):
        kept = [(lhs.dims[a], rhs.dims[b])
                for a, b in zip(getattr(lhs, kind), getattr(rhs, kind))]
        pairs[kind] = [(a, b) for a, b in kept if a is not None and b is not None]
    # The root dimensions the dot names; the rest are free, in the root's order.
    named = [{a for pair in pairs.values() for a, _ in pair},
             {b for pair in pairs.values() for _, b in pair}]
    free = [[d for d in range(len(ranked_shape(side.root))) if d not in named[n]]
            for n, side in enumerate((lhs, rhs))]
    # The old result's dimensions as root dimensions, and the new one's, each tagged with
    # its side: the same sequence once the unit dimensions are left out. A batch pair
    # whose side the chain broadcast (a 3-d `nn.Linear`'s weight broadcast to the batch)
    # is the other side's dimension, free in the new dot.
    old = [("l", lhs.dims[a]) if lhs.dims[a] is not None else ("r", rhs.dims[b])
           for a, b in zip(lhs.batch, rhs.batch)] + \
        [("l", d) for d in lhs.free] + [("r", d) for d in rhs.free]
    new = [("l", a) for a, _ in pairs["batch"]] + [("l", d) for d in free[0]] + \
        [("r", d) for d in free[1]]
    sizes = {"l": ranked_shape(lhs.root), "r": ranked_shape(rhs.root)}
    if any(d is None and n != 1 for (_, d), n in zip(old, ranked_shape(op.result))):
        return True  # a result dimension both sides broadcast: the dot repeats elements

    def long(dims: list) -> list:
        return [(s, d) for s, d in dims if d is not None and sizes[s][d] != 1]

    if long(old) != long(new):
        return True  # the fold would reorder the result (or contract a broadcast)
    element = ir.RankedTensorType(op.result.type).element_type
    new_shape = [sizes[s][d] for s, d in new]
    attributes = {name: op.attributes[name] for name in op.attributes}
    attributes["dot_dimension_numbers"] = _stablehlo.DotDimensionNumbers.get(
        [a for a, _ in pairs["batch"]], [b for _, b in pairs["batch"]],
        [a for a, _ in pairs["contracting"]], [b for _, b in pairs["contracting"]],
        context=op.context)
    with rewriter.ip, op.location:
        dot = ir.Operation.create(
            "stablehlo.dot_general", results=[ir.RankedTensorType.get(new_shape, element)],
            operands=[lhs.root, rhs.root], attributes=attributes, loc=op.location)
        result = dot
        if new_shape != ranked_shape(op.result):
            result = ir.Operation.create("stablehlo.reshape", results=[op.result.type],
                                         operands=[dot.result], loc=op.location)
    rewriter.replace_op(op, result)
    return False


@register_pass(
    "outofplace-fold-transposes-into-dots",
    "Fold transposes and unit broadcasts of dot_general operands into its dimension numbers",
    "`dot_general(transpose(w), x)` → `dot_general(w, x)` with the batch and contracting "
    "dimensions mapped through the transposes, `broadcast_in_dim`s and reshapes that only "
    "add (or, reshapes, drop) unit dimensions, when the result's dimensions longer than 1 keep their order (a "
    "`reshape` restores the unit ones): XLA:CPU otherwise copies a transposed weight "
    "(`nn.Linear`) on every call (the XLA engine's legalization, backends/xla; on a "
    "mesh, a batch-1 key cache read through the folded dot would be copied)")
def fold_transposes_into_dots(module: ir.Operation) -> None:
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.dot_general", _fold)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
    # the transposes and broadcasts the folding left without users (pure ops)
    erase_unused(all_operations(module), lambda op: op.name in (
        "stablehlo.transpose", "stablehlo.broadcast_in_dim", "stablehlo.reshape"))
