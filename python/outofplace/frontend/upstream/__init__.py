"""FX rewrites that exist only because torch-mlir (its FxImporter, or its lowering of
torch to StableHLO) lacks or mis-lowers an op, kept apart from the rewrites that carry
outofplace's semantics (frontend/decompositions.py).

Each module names the torch-mlir issue (or says none was found) and is pinned by a
canary in test/pytest/test_fx_upstream_canaries.py that imports or lowers the op
without the workaround and asserts torch-mlir still gets it wrong: when a canary fails,
upstream fixed it; delete the module's entry, then the canary.

| module | rewrite | torch-mlir's fault |
|---|---|---|
| `undefined_ops.py` | ravel, mT/swapaxes/..., squeeze.dims, real conjugations, _efficientzerotensor | not defined by the dialect |
| `unlowered_ops.py` | ops decomposed by torch-mlir's and PyTorch's tables; the undefined rest refused | not defined, or not lowered (`NOT_LOWERED`), or lowered wrongly |
| `scalar_operands.py` | Python scalars as 0-d tensors; bitwise Scalar forms as Tensor forms | the importer's float32/bool scalars; no bitwise Scalar forms |
| `attention.py` | scaled_dot_product_attention, eager's CPU attention kernel and its backward (autograd's graphs) → matmul, softmax | masked or causal attention does not lower; PyTorch's decomposition of the kernel gives the weights for its logsumexp |
| `remainder.py` | remainder → fmod and a sign fix; fmod.Scalar → fmod.Tensor | remainder with C's sign; fmod.Scalar does not lower |
| `scans.py` | logcumsumexp, cumprod, cummax and cummin as doubling scans; cumsum of a 0-d tensor | log(cumsum(exp)) overflows; cumprod and 0-d cumsum do not lower; cummax and cummin not defined |
| `scatters.py` | as_strided_scatter → index_put; select_scatter index from the end; slice_scatter bounds clamped | no lowering; no scatter indices; unbounded allocation |
| `max_pool.py` | max_pool2d_with_indices stride [] → the kernel; ceil_mode's partial windows → the input padded with -inf | an empty stride read as 1; ceil_mode's windows start early (wrong values) or fail to verify |
| `bool_clamp.py` | clamp of bools → and/or | the missing bound filled with False |
| `convolution_backward.py` | convolution_backward as JAX's transposes, a transposed convolution's too | a weight gradient grouped by the batch (3x slower); a transposed convolution's backward does not lower |
| `activations.py` | softshrink, prelu → eager's expressions | softshrink's sign below -λ; prelu's weights along the last dimension (wrong values) |
| `grouped_mm.py` | _grouped_mm → products with each row's group read from the offsets | not defined |
| `unsorted_topk.py` | topk(sorted=False) → topk(sorted=True), one of the orders eager gives | no pattern for `sorted=false` |
| `special_functions.py` | lgamma, digamma, polygamma(1, x), erfinv, erfc, i0, i0e, i1, i1e, hypot → their approximations in elementwise ops (eager's own algorithms for trigamma, erfinv and the Bessel functions) | not defined (erfinv: not lowered) |
| `order_statistics.py` | median, nanmedian, kthvalue → a sort and the position of the element picked (eager's `(value, index)` order) | not defined (kthvalue: not lowered) |
| `searchsorted.py` | searchsorted → eager's binary search, unrolled (a sequence of any rank, a sorter) | not defined |
| `distances.py` | _cdist_forward, _cdist_backward (`torch.cdist`) → eager's choice of a matrix product or each pair's p-norm, and its gradient; _pdist_forward, _pdist_backward (`torch.pdist`) → each pair's p-norm, and its gradient | not defined |
| `float_equality.py` | eq of floats → not ne | `eq(x, x)` folded to true (NaN) |
| `rms_norm.py` | rms_norm without eps → with eager's (the machine epsilon) | eps=None taken as 0 (NaN for a row of zeros) |
| `index_reduce.py` | index_reduce, index_reduce_ → scatter_reduce of the index spread along the source | not defined |
| `bool_extremes.py` | max.dim, min.dim of bools → of uint8 | a max of bools from the init true (True at index 0 for every row) |
| `histc.py` | histc → a scatter-add of ones at each element's bin (eager's arithmetic) | not defined |
| `embedding_bag.py` | embedding_bag (sum, mean) and its gradient → gathers of the weight's rows and scatter-adds into each bag (found by a running count of the offsets) | the lowering fails to verify; no gradient |
| `nextafter.py` | nextafter → a step of one in the float's bits (a bitcast) | not defined |
| `unsigned_abs.py` | abs of uint8 → a copy; abs_ → nothing | `stablehlo.abs` takes no unsigned integers (the lowering fails) |
| `certain_dropout.py` | native_dropout with p = 1 → the input times 0, a mask of False | 0 / 0 (NaN) where eager's kernel scales by 0 |
| `same_padding.py` | conv{1,2,3}d with an uneven `padding="same"` → the input padded by the excess, then the convolution | the same padding on both sides (one output too few: the lowering fails to verify) |
| `avg_pool.py` | avg_pool{2,3}d_backward, avg_pool{2,3}d with ceil_mode → convolutions by ones; adaptive_avg_pool of uneven windows and its gradient → products by ones | the backward does not lower; ceil_mode's reduce_window has the wrong type; uneven adaptive pooling and adaptive pooling's gradient do not lower |
"""

from __future__ import annotations

from typing import Any, Callable

from . import (activations, attention, avg_pool, bool_clamp, bool_extremes,
               certain_dropout, convolution_backward, distances, embedding_bag,
               float_equality, grouped_mm, histc, index_reduce, max_pool, nextafter,
               order_statistics, remainder, rms_norm, same_padding, scans, scatters,
               searchsorted, special_functions, undefined_ops, unsigned_abs, unsorted_topk)

# op -> rewrite, for frontend/decompositions.py's `decompose` (a rewrite returns the
# node's replacement, a tuple for an op of several results, or None: declined).
DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    op: fn for module in (undefined_ops, attention, remainder, scans, scatters,
                          max_pool, bool_clamp, convolution_backward, avg_pool,
                          activations, grouped_mm, histc, unsorted_topk,
                          special_functions, order_statistics, searchsorted, distances,
                          float_equality, rms_norm, index_reduce, bool_extremes,
                          unsigned_abs, embedding_bag, nextafter, same_padding,
                          certain_dropout)
    for op, fn in module.DECOMPOSITIONS.items()}
