"""Stage 2: passes on MLIR, from mutable torch IR to pure StableHLO.

One pass a module, named after it (`outofplace-fold-empty-tensors` in
fold_empty_tensors.py, `outofplace-lower-updates` in the package lower_updates/), each
tested by the lit test of its pass name (a module of two passes says why at its top);
`pipelines` registers them by name and mixes them with MLIR's own passes.
"""
