"""`outofplace-iree-shield-self-updates`: a dynamic_update_slice's update read from the
tensor it updates is computed into a buffer of its own first.

`x[3] = x[3]`, or a masked write whose mask is all false: IREE 3.13 copies the buffer
onto itself and the call fails (`source and target ranges overlap`): the error of
iree-org/iree#17316 (an in-place `index_copy_`; closed, still there in IREE 3.13 for
this form: the canary). The update is put behind a `stablehlo.optimization_barrier`. Canary:
test_iree_canaries.test_update_read_from_its_own_place_copies_a_buffer_onto_itself.
"""

from __future__ import annotations

from torch_mlir import ir

from ...registry import register_pass
from .common import _behind_barrier, _main, _reads, _walk


@register_pass(
    "outofplace-iree-shield-self-updates",
    "Put a dynamic_update_slice's update read from its operand behind a barrier (IREE "
    "copies a buffer onto itself)",
    "the update of a `stablehlo.dynamic_update_slice` computed from its operand → "
    "`stablehlo.optimization_barrier` of it: IREE 3.13 copies the buffer onto itself and "
    "fails at run time (a workaround, transforms/upstream/iree/)")
def shield_self_updates(module: ir.Operation) -> None:
    for op in _walk(_main(module)):
        if op.name == "stablehlo.dynamic_update_slice" and \
                _reads(op.operands[1], op.operands[0]):
            _behind_barrier(op, 1)
