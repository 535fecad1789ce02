"""`outofplace-fold-transposes-into-dots`: a transpose feeding a `dot_general` becomes the
dot's own dimension numbers.

torch-mlir lowers `nn.Linear` (`aten.linear`, `x @ w.t()`) to a transpose of the weight
and a dot contracting its first dimension:

    %t = stablehlo.transpose %w, dims = [1, 0] : (tensor<5632x2048xf32>) -> tensor<2048x5632xf32>
    %y = stablehlo.dot_general %x, %t, contracting_dims = [1] x [0]

XLA:CPU keeps the transpose as a copy of the whole weight on every call when it cannot
fuse it into the dot (a bias add fused into the dot's output is enough): a batch-1
`nn.Linear(2048, 5632)` took 47 ms a call where the dot alone takes 1.4 ms, and JAX's own
`x @ w.T + b` pays the same (docs/performance.md). The dot reads the weight where it is:

    %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [1]

A transpose is folded when the operand's free dimensions (neither batch nor contracting)
keep their order through it, so the dot's result is the same tensor; the transpose stays
for any other user.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite
from torch_mlir._mlir_libs import _stablehlo

from ..ir_utils import all_operations, erase_unused
from .registry import register_pass


def _folded(perm: list[int], batch: list[int], contracting: list[int]
            ) -> tuple[list[int], list[int]] | None:
    """The batch and contracting dimensions of a transpose's operand (the transpose's
    result dimension d is the operand's perm[d]), or None when the free dimensions would
    come out in another order."""
    named = set(batch) | set(contracting)
    free = [perm[d] for d in range(len(perm)) if d not in named]
    if free != sorted(free):
        return None
    return [perm[d] for d in batch], [perm[d] for d in contracting]


def _fold_transposes(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """dot_general(transpose(a), b) => dot_general(a, b), dimension numbers through the
    permutation; on either operand, or both."""
    numbers = _stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    sides = [[op.operands[0], list(numbers.lhs_batching_dimensions),
              list(numbers.lhs_contracting_dimensions)],
             [op.operands[1], list(numbers.rhs_batching_dimensions),
              list(numbers.rhs_contracting_dimensions)]]
    changed = False
    for side in sides:
        operand, batch, contracting = side
        owner = operand.owner if isinstance(operand, ir.OpResult) else None
        if owner is None or owner.name != "stablehlo.transpose":
            continue
        perm = list(ir.DenseI64ArrayAttr(owner.attributes["permutation"]))
        folded = _folded(perm, batch, contracting)
        if folded is None:
            continue
        side[:] = [owner.operands[0], *folded]
        changed = True
    if not changed:
        return True  # not matched
    (lhs, lhs_batch, lhs_contracting), (rhs, rhs_batch, rhs_contracting) = sides
    attributes = {name: op.attributes[name] for name in op.attributes}
    attributes["dot_dimension_numbers"] = _stablehlo.DotDimensionNumbers.get(
        lhs_batch, rhs_batch, lhs_contracting, rhs_contracting, context=op.context)
    with rewriter.ip:
        dot = ir.Operation.create("stablehlo.dot_general", results=[op.result.type],
                                  operands=[lhs, rhs], attributes=attributes,
                                  loc=op.location)
    rewriter.replace_op(op, dot)
    return False


@register_pass(
    "outofplace-fold-transposes-into-dots",
    "Fold transposes of dot_general operands into its dimension numbers",
    "`dot_general(transpose(w), x)` → `dot_general(w, x)` with the batch and contracting "
    "dimensions mapped through the permutation, when the operand's free dimensions keep "
    "their order: XLA:CPU otherwise copies a transposed weight (`nn.Linear`) on every call")
def fold_transposes_into_dots(module: ir.Operation) -> None:
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.dot_general", _fold_transposes)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
    # the transposes the folding left without users (pure: nothing else reads them)
    erase_unused(all_operations(module), lambda op: op.name == "stablehlo.transpose")
