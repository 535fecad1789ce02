"""`outofplace-iree-serial-schedule`: the module is scheduled without concurrency.

With a constant among the results, IREE 3.13's concurrent schedule ran an in-place
update of a tensor before a read of its old value (`r = x[1:] - 1` read x after `x[1, 0]
*= 2.5`): a wrong result. No IREE issue was found. The module gets IREE's `debug`
partitioning (`stream.partitioning`), one command at a time. Canary:
test_iree_canaries.test_read_is_scheduled_after_the_in_place_update_beside_a_constant_result.
"""

from __future__ import annotations

from torch_mlir import ir

from ...registry import register_pass

PARTITIONING = '#stream.partitioning_config<"debug">'


@register_pass(
    "outofplace-iree-serial-schedule",
    "Schedule the module without concurrency (IREE reorders a read after an update)",
    f"the module gets `stream.partitioning = {PARTITIONING}` (IREE's own attribute, "
    "kept opaque here): IREE 3.13's concurrent schedule ran an in-place update before a "
    "read of the old value (a workaround, transforms/upstream/iree/)")
def serial_schedule(module: ir.Operation) -> None:
    context = module.context
    allowed = context.allow_unregistered_dialects
    context.allow_unregistered_dialects = True  # IREE's stream dialect is not loaded here
    try:
        module.attributes["stream.partitioning"] = ir.Attribute.parse(PARTITIONING)
    finally:
        context.allow_unregistered_dialects = allowed
