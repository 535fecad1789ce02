"""`outofplace-iree-copy-folded-results`: a result that is a written argument through
ops IREE folds away is computed into a buffer of its own.

`r = x * 1; x[:, 1] = 5; return r`: IREE 3.13 folds `x * 1` to x, exports the argument's
buffer as r and writes the update of x into that same buffer, consumed or not: r comes
back with the 5. No IREE issue was found. Such a result (not one updated in place) is
put behind a `stablehlo.optimization_barrier`, which IREE does not fold. Canary:
test_iree_canaries.test_result_folded_to_an_argument_is_written_by_its_update.
"""

from __future__ import annotations

from typing import Any

from torch_mlir import ir

from ...registry import register_pass
from .common import (_behind_barrier, _defining_op, _is_constant, _keeps_order, _main,
                     _same_places, _update_targets, aliases)


@register_pass(
    "outofplace-iree-copy-folded-results",
    "Put behind a barrier each result that is a written argument through ops IREE folds "
    "(IREE returns the argument's buffer)",
    "each result of `main` not updated in place that is, through elementwise ops with "
    "constants, reshapes or unit transposes, an argument some update writes → "
    "`stablehlo.optimization_barrier` of it: IREE 3.13 folds it to the argument's buffer "
    "and writes the update into it (a workaround, transforms/upstream/iree/)")
def copy_folded_results(module: ir.Operation) -> None:
    _copy_results_folded_to_arguments(module, _update_targets(module),
                                      set(aliases(_main(module)).values()))


def _copy_results_folded_to_arguments(module: Any, written: set[int],
                                      in_place: set[int]) -> None:
    """Puts behind a barrier each result of `main` (but the ones updated in place) that
    is one of the `written` arguments through ops IREE may fold away: `_same_places` or
    `_keeps_order` ops whose other operands are constants or the same value (`r = x * 1;
    x[:, 1] = 5; return r`). IREE 3.13 folds them, exports the argument's buffer as the
    result and writes the update into that same buffer, consumed or not: r came back
    with the 5. Behind the barrier, IREE computes the result into a buffer of its own."""
    main = _main(module)
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    arguments = [block.arguments[number] for number in sorted(written)]
    for index, value in enumerate(list(ret.operands)):
        if index not in in_place and _folded_source(value) in arguments:
            _behind_barrier(ret, index)


def _folded_source(value: Any) -> Any:
    """The value `value` is, through ops IREE may fold to their one non-constant
    operand (`_copy_results_folded_to_arguments`)."""
    while True:
        op = _defining_op(value)
        if op is None or not (_same_places(op) or _keeps_order(op)):
            return value
        operands = [v for v in op.operands if not _is_constant(v)]
        if not operands or any(v != operands[0] for v in operands):
            return value
        value = operands[0]

