"""`outofplace-iree-boolean-add-as-or`: `stablehlo.add` of booleans as `stablehlo.or`.

StableHLO's spec (and XLA, and its interpreter) define `add` of `i1` as a logical or;
IREE 3.13 adds them modulo 2 (an exclusive or): `add(true, true)` is false. No IREE issue
was found (nod-ai/amd-shark-ai#341 works around the same behaviour of iree-compile;
openxla/stablehlo#2630 asked the spec, which stands). Canary:
test_iree_canaries.test_boolean_add_is_an_exclusive_or.
"""

from __future__ import annotations

from torch_mlir import ir

from ...registry import register_pass
from .common import _walk


@register_pass(
    "outofplace-iree-boolean-add-as-or",
    "Rewrite stablehlo.add of booleans as stablehlo.or (IREE adds them modulo 2)",
    "`stablehlo.add` of `i1` → `stablehlo.or`: StableHLO's add of booleans is a logical "
    "or, IREE 3.13 computes an exclusive or (a workaround, transforms/upstream/iree/)")
def boolean_add_as_or(module: ir.Operation) -> None:
    adds = [op for op in _walk(module) if op.name == "stablehlo.add" and
            str(ir.RankedTensorType(op.results[0].type).element_type) == "i1"]
    for add in adds:
        logical = ir.Operation.create("stablehlo.or", results=[add.results[0].type],
                                      operands=list(add.operands), loc=add.location,
                                      ip=ir.InsertionPoint(add))
        add.results[0].replace_all_uses_with(logical.results[0])
        add.erase()
