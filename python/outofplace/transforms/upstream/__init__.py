"""Workarounds of torch-mlir bugs and gaps, kept apart from the core passes.

Each module is a pass of its own (registered like the others, run by
outofplace-lower-to-stablehlo), says what upstream does wrong with a minimal reproducer
or the upstream issue, and is pinned by a canary in test/pytest/test_upstream_canaries.py
that runs torch-mlir on that reproducer and fails once upstream is fixed: then delete the
module, its pass from the pipeline and its canary.

| module | pass | torch-mlir's fault |
|---|---|---|
| `shield_constants.py` | outofplace-shield-constants | folders misread constants (float storage read as int, int64 divided as unsigned): literals hidden from them |
| `strip_constant_shields.py` | outofplace-strip-constant-shields | (the same) the literals bared again after torch-mlir's pipelines, moves of constants folded |
| `static_slices.py` | outofplace-upstream-static-slices | the folder of a strided slice of a constant reads out of bounds (a crash) |
| `negative_indices.py` | outofplace-upstream-wrap-negative-indices | the StableHLO lowering of `index.Tensor` gathers at a negative index as given (clamped to 0) |
| `fill_tensor.py` | outofplace-upstream-fill-tensor | no StableHLO lowering of `aten.fill.Tensor` |
| `unsigned_integers.py` | outofplace-upstream-unsigned-integers | unsigned integers compared and right-shifted as signed |
| `max_pool_indices.py` | outofplace-upstream-max-pool-indices | max pooling with indices: index 0 for a window of -inf, NaN ignored |
"""
