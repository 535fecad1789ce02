"""`outofplace-iree-copy-written-inputs`: an argument IREE may write though it is not
consumed is marked to be passed as a copy.

An argument whose value reaches, through ops IREE folds away (elementwise ops with
constants, reshapes, transposes of unit dimensions, a whole-tensor
dynamic_update_slice), the operand a dynamic_update_slice or scatter updates, or a
sort's operand: IREE 3.13 writes the update (or sorts) in the argument's buffer even
when it is not consumed (`w[0] = 1` on an input w copied into a written tensor first, or
multiplied by 1; `torch.quantile(x, 0.3)` sorted the caller's x). The symptom of
iree-org/iree#16168 (an input buffer written that should not be; closed, still there in
IREE 3.13: the canary). Such an argument that is not aliased gets `COPIED`; the engine
imports a copy of the caller's tensor for it. Canary:
test_iree_canaries.test_scatter_through_a_transpose_of_a_unit_dimension_writes_the_input.
"""

from __future__ import annotations

from torch_mlir import ir

from ...registry import register_pass
from .common import COPIED, _main, _update_targets, aliases, set_argument_attributes


@register_pass(
    "outofplace-iree-copy-written-inputs",
    "Mark the arguments IREE may write though they are not consumed, to be passed as "
    "copies",
    f"`{COPIED}` on each argument of `main` without an alias whose value reaches an "
    "update's operand or a sort through ops IREE folds away: IREE 3.13 writes such an "
    "update into the caller's buffer (a workaround, transforms/upstream/iree/)")
def copy_written_inputs(module: ir.Operation) -> None:
    main = _main(module)
    aliased = aliases(main)
    set_argument_attributes(main, {argument: {COPIED: ir.UnitAttr.get()} for argument in
                                   sorted(_update_targets(module) - aliased.keys())})
