"""`outofplace-iree-unalias-early-overwrites`: a written argument whose old value is read
by more than the chain that updates it loses its alias; the engine updates the caller's
tensor by a copy instead, and reports it (`alias_problems("iree")`).

IREE 3.13 writes a consumed argument's buffer before every read of the argument's old
value is done when that value is read by anything but the update itself (`y = x + 1;
x.zero_(); return y` returns ones; `dst.copy_(src); src.mul_(2)` copies the doubled
src), or when the update reads other elements of it (`x.add_(x[0, :2])`). Boolean
arguments too: `x.logical_xor_(y); return x.logical_not()` returned not(old x). No IREE
issue was found. Canary:
test_iree_canaries.test_a_consumed_argument_is_overwritten_before_it_is_read.
"""

from __future__ import annotations

from typing import Any

from torch_mlir import ir

from ...registry import register_pass
from .common import ALIASING_OUTPUT, _main, _same_places, aliases, set_argument_attributes


@register_pass(
    "outofplace-iree-unalias-early-overwrites",
    "Drop the alias of a written argument whose old value is read elsewhere (IREE "
    "overwrites it before the read)",
    "`tf.aliasing_output` removed from each argument of `main` whose value is read by "
    "anything but a chain of single-use elementwise ops and updates ending in its new "
    "value, and from boolean ones: IREE 3.13 overwrites the consumed buffer before those "
    "reads (a workaround, transforms/upstream/iree/)")
def unalias_early_overwrites(module: ir.Operation) -> None:
    main = _main(module)
    unsafe = _old_value_read_elsewhere(module, aliases(main))
    set_argument_attributes(main, {argument: {ALIASING_OUTPUT: None}
                                   for argument in unsafe})


def _old_value_read_elsewhere(module: Any, io_map: dict[int, int]) -> set[int]:
    """Mutated arguments whose value is not only the start of a chain of single-use ops
    ending in their updated value, each of which computes an element from the elements
    at its place (`_same_places`), or updates its first operand (dynamic_update_slice,
    scatter) (the StableHLO `module`'s main): the ones IREE 3.13 may overwrite too
    early. The updated value itself may be read by anything. A chain through a gather
    (`x.add_(x[0, :2])`) was computed in place wrongly; a flip is copied. Boolean
    arguments too: `x.logical_xor_(y); return x.logical_not()` returned not(old x)."""
    main = _main(module)
    block = main.regions[0].blocks[0]
    returned = list(block.operations)[-1].operands
    unsafe = set()
    for argument, result in io_map.items():
        value, target = block.arguments[argument], returned[result]
        if str(ir.RankedTensorType(value.type).element_type) == "i1":
            unsafe.add(argument)  # IREE 3.13 computes in-place boolean updates wrongly
            continue
        while value != target:  # (reading its size, with dynamic shapes, reads no data)
            uses = [u for u in value.uses if u.owner.name != "stablehlo.get_dimension_size"]
            user = uses[0].owner if len(uses) == 1 else None
            if user is None or not (_same_places(user) or uses[0].operand_number == 0 and
                                    user.name in ("stablehlo.dynamic_update_slice",
                                                  "stablehlo.scatter") and
                                    len(user.results) == 1 and
                                    user.parent.name == "func.func"):
                unsafe.add(argument)
                break
            value = user.results[0]
    return unsafe

