"""Workarounds of IREE 3.13 bugs: the `legalize-for-iree` pipeline, which the IREE engine
(backends/iree/) runs on the StableHLO before IREE compiles it.

Kept apart as transforms/upstream/ keeps torch-mlir's: each module is a pass of its own,
registered like the others, whose docstring names the bug (the iree-org/iree issue, or
that none was found) with a minimal reproducer; test/<pass>.mlir pins the rewrite, and a
canary in test/pytest/test_iree_canaries.py runs the un-rewritten form through IREE and
fails once IREE is fixed: then delete the module, its pass from the pipeline
(transforms/pipelines.py) and its canary. docs/backends.md lists them from the registry.
"""

from . import (boolean_add, constant_updates, early_overwrites,  # noqa: F401
               f64_remainder, folded_results, gather_bounds, returned_arguments,
               scatter_bounds, scatter_indices, scatter_per_element, self_updates,
               serial_schedule, shared_sort_operands, sliced_operands, sorted_indices,
               writable_constants, written_inputs)

# The order the engine runs them in: the scatters and gathers first, then what decides
# which arguments keep their alias and which are passed as copies, then the barriers.
PASSES = [
    "outofplace-iree-scatter-windows-in-bounds",
    "outofplace-iree-clamp-gather-starts",
    "outofplace-iree-scatter-per-element",
    "outofplace-iree-boolean-add-as-or",
    "outofplace-iree-f64-remainder",
    "outofplace-iree-sort-behind-barrier",
    "outofplace-iree-copy-shared-sort-operands",
    "outofplace-iree-strip-returned-arguments",
    "outofplace-iree-unalias-early-overwrites",
    "outofplace-iree-copy-written-inputs",
    "outofplace-iree-copy-folded-results",
    "outofplace-iree-separate-scatter-indices",
    "outofplace-iree-copy-sliced-operands",
    "outofplace-iree-writable-constant-updates",
    "outofplace-iree-shield-constant-updates",
    "outofplace-iree-shield-self-updates",
    "outofplace-iree-serial-schedule",
]
