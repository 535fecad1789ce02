"""`outofplace-iree-writable-constant-updates`: a dynamic_update_slice of a constant as
large as the tensor becomes a select of the constant, computed into a buffer IREE may
write.

`x[:, pos] = literal` covering all of x, then another update of it: IREE 3.13 takes the
constant's read-only buffer for the result and then updates it in place, and the call
fails (`PERMISSION_DENIED; buffer allows READ`). No IREE issue was found. The update
becomes `select(barrier(true), constant, x)`. Canary:
test_iree_canaries.test_update_of_a_whole_constant_writes_its_read_only_buffer.
"""

from __future__ import annotations

from typing import Any

from torch_mlir import ir

from ...registry import register_pass
from .common import _is_constant, _main, _opaque_select, _walk, _whole_update


@register_pass(
    "outofplace-iree-writable-constant-updates",
    "Rewrite a dynamic_update_slice of a whole-tensor constant as a select (IREE writes "
    "the constant's read-only buffer)",
    "`dynamic_update_slice(x, c, ...)` with `c` a constant of x's type → "
    "`select(barrier(true), c, x)`: IREE 3.13 takes the constant's read-only buffer for "
    "the result and updates it in place (a workaround, transforms/upstream/iree/)")
def writable_constant_updates(module: ir.Operation) -> None:
    for op in _walk(_main(module)):
        if _whole_update(op, 1) and _is_constant(op.operands[1]):
            _selected_constant(op)


def _selected_constant(op: Any) -> None:
    """`dynamic_update_slice(x, c, ...)` with `c` a constant of x's type  =>
    `select(barrier(true), c, x)`: the constant, in a buffer IREE may write."""
    update, operand = op.operands[1], op.operands[0]
    op.results[0].replace_all_uses_with(_opaque_select(op, update, operand))
    op.erase()

