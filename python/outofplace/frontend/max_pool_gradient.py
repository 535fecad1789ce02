"""Max pooling's gradient without a scatter: `max_pool2d_with_indices_backward` of the
indices a `max_pool2d_with_indices` of the same input and window computed (as autograd
pairs them: frontend/saved_tensors.py replays the pooling with indices beside the
program's `max_pool2d`) becomes elementwise ops XLA fuses.

PyTorch's decomposition of the backward (which torch-mlir's path takes) scatters the
gradient into zeros at the flattened indices: XLA:CPU spent about 40 ms of a ResNet-18
step at 224x224 (8 images) on the indices made scatter indices, the zeros and the
scatter, where eager's backward takes 2-16 ms. JAX's form (`select_and_scatter`, no
indices) is slower still on XLA:CPU (120 ms for that backward alone). Here the gradient
of each input element is the sum of the gradients of the windows whose index is the
element's own: per residue of its padded position modulo the stride, the windows
reaching it are a shifted tile of the output (slices of one padded copy of the indices
and of the gradient), added in eager's order (the windows in row-major order, so the
sums are eager's bit for bit), then the residues interleaved by a stack and a reshape,
the padding cut off. The program's `max_pool2d` of the same operands reads the values
of the pooling with indices (`_share_values`: one reduce_window, not two), whose
indices are eager's (outofplace-upstream-max-pool-indices: torch-mlir's gave a window
of -inf index 0 and ignored NaN). Other indices (given by the program, or of another
operand or window) keep PyTorch's decomposition.

The gradient is kept whole (composites.py), this sum its decomposition: the XLA engine
calls eager's kernel of it (`max_pool2d_with_indices_backward.grad_input`, writing XLA's
buffer: transforms/composites_as_kernel_calls.py) with the indices the program computed,
eager's. XLA:CPU's fusions of the sum took 24 ms of a ResNet-18 step at 224x224 (the
stem's [8, 64, 112, 112]; 1 ms at 64x64), eager's kernel 2.3 (0.12). Tests:
test_max_pool_gradient.py.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx
import torch.nn.functional as F

from . import composites
from .fx_graph import source_line
from .inline import inline, trace

_FORWARD = torch.ops.aten.max_pool2d_with_indices.default
# A node's meta: the indices it holds are those of max_pool2d_with_indices(x, *args,
# **kwargs), the value (a ceil_mode pooling upstream/max_pool.py rewrote)
INDICES_OF = "outofplace.max_pool_indices_of"
_BACKWARD = torch.ops.aten.max_pool2d_with_indices_backward.default
# eager's kernel of the backward, writing XLA's buffer: its `out=` form, whose argument
# `grad_input` is at this schema position
_KERNEL = torch.ops.aten.max_pool2d_with_indices_backward.grad_input
_GRAD_INPUT = [a.name for a in _KERNEL._schema.arguments].index("grad_input")


def _pair(value: Any) -> tuple[int, int] | None:
    if isinstance(value, int):
        return value, value
    values = list(value)
    if len(values) == 1:
        return values[0], values[0]
    return tuple(values) if len(values) == 2 and all(isinstance(v, int) for v in values) \
        else None


def pooling_window(args: tuple, kwargs: dict) -> tuple | None:
    """(kernel, stride, padding, dilation, ceil_mode) of max_pool2d_with_indices'
    arguments after self, defaults filled in (an empty stride is the kernel's)."""
    names = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
    defaults = (None, [], 0, 1, False)
    values = [args[i] if i < len(args) else kwargs.get(name, default)
              for i, (name, default) in enumerate(zip(names, defaults))]
    kernel, stride, padding, dilation, ceil_mode = values
    kernel = _pair(kernel)
    stride = kernel if stride == [] or stride == () else _pair(stride)
    padding, dilation = _pair(padding), _pair(dilation)
    if None in (kernel, stride, padding, dilation):
        return None
    return kernel, stride, padding, dilation, bool(ceil_mode)


def _gradient(grad: torch.Tensor, indices: torch.Tensor, size: tuple, kernel: tuple,
              stride: tuple, padding: tuple, dilation: tuple) -> torch.Tensor:
    """max_pool2d_with_indices_backward(grad, x, ..., indices) for indices inside their
    windows; `size` is x's (height, width)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    height, width = size
    rows, cols = grad.shape[-2:]
    # the padded input every window lies in (ceil_mode's last window may pass its end),
    # cut in tiles of the stride's size
    padded = (max(height + 2 * padding[0], (rows - 1) * sh + (kh - 1) * dh + 1),
              max(width + 2 * padding[1], (cols - 1) * sw + (kw - 1) * dw + 1))
    tiles = (-(-padded[0] // sh), -(-padded[1] // sw))
    lead = grad.shape[:-2]
    # shifted by (i * dh // sh, j * dw // sw) tiles, as slices of one padded copy each
    # (XLA fuses slices into their reader, and materialized a pad for every shift)
    most = ((kh - 1) * dh // sh, (kw - 1) * dw // sw)
    pads = [most[1], tiles[1] - cols, most[0], tiles[0] - rows]
    indices, grad = F.pad(indices, pads, value=-2), F.pad(grad, pads)
    residues = []
    for r in range(sh):
        row = []
        for c in range(sw):
            # the index into x of the element at (r, c) of each tile; -1 in the padding
            h = torch.arange(tiles[0]) * sh + r - padding[0]
            w = torch.arange(tiles[1]) * sw + c - padding[1]
            inside = ((h >= 0) & (h < height))[:, None] & ((w >= 0) & (w < width))[None]
            own = torch.where(inside, h[:, None] * width + w[None], -1)
            total = grad.new_zeros((*lead, *tiles))
            # the window at (oh, ow) reaches padded position (sh * oh + i * dh, ...): in
            # tile (oh + i * dh // sh, ...) at residue (i * dh % sh, ...); the windows
            # reaching one element in row-major order are its positions (i, j) backwards
            for i in reversed(range(kh)):
                for j in reversed(range(kw)):
                    if (i * dh) % sh != r or (j * dw) % sw != c:
                        continue
                    at = (..., slice(most[0] - (i * dh) // sh,
                                     most[0] - (i * dh) // sh + tiles[0]),
                          slice(most[1] - (j * dw) // sw, most[1] - (j * dw) // sw + tiles[1]))
                    total = total + torch.where(indices[at] == own, grad[at], 0)
            row.append(total)
        residues.append(torch.stack(row, dim=-1))
    interleaved = torch.stack(residues, dim=-3).reshape(
        *lead, tiles[0] * sh, tiles[1] * sw)
    return interleaved[..., padding[0]:padding[0] + height, padding[1]:padding[1] + width]


def _max_pool_backward(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """max_pool2d_with_indices_backward(g, x, k, s, p, d, ceil, indices), the indices
    those of max_pool2d_with_indices(x, k, s, p, d, ceil)  =>  `_gradient(g, indices)`;
    the program's `max_pool2d(x, k, s, p, d, ceil)` then reads that pooling's values."""
    grad, x = node.args[:2]
    indices = node.args[7] if len(node.args) > 7 else node.kwargs.get("indices")
    window = pooling_window(node.args[2:], node.kwargs)
    forward = indices.args[0] if isinstance(indices, torch.fx.Node) and \
        indices.target is operator.getitem and indices.args[1] == 1 else None
    if isinstance(forward, torch.fx.Node) and forward.target is _FORWARD:
        pooled, args, kwargs = forward.args[0], forward.args[1:], forward.kwargs
    elif isinstance(indices, torch.fx.Node) and INDICES_OF in indices.meta:
        pooled, args, kwargs = indices.meta[INDICES_OF]  # a ceil_mode pooling's
        forward = None
    else:
        return None
    if window is None or pooled is not x or pooling_window(args, kwargs) != window or \
            x.meta["val"].dim() not in (3, 4) or \
            not x.meta["val"].dtype.is_floating_point:
        return None
    kernel, stride, padding, dilation, ceil_mode = window
    if forward is not None:
        _share_values(graph, forward, window)
    stack_trace = node.meta.get("stack_trace")
    given = (grad, indices, tuple(x.meta["val"].shape[-2:]), kernel, stride, padding,
             dilation)

    def body(region: torch.fx.Graph, tensors: list) -> list[torch.fx.Node]:
        traced, inputs = trace(graph, _gradient, given, {})
        placeholders = {grad: tensors[0], indices: tensors[2]}
        return [inline(region, traced, [placeholders[i] for i in inputs], stack_trace)]

    return composites.composite(
        graph, _BACKWARD, _KERNEL, {0: grad, 1: x, 7: indices},
        {"kernel_size": list(kernel), "stride": list(stride), "padding": list(padding),
         "dilation": list(dilation), "ceil_mode": ceil_mode},
        body, source_line(node), stack_trace, written=[_GRAD_INPUT])[0]


def _share_values(graph: torch.fx.Graph, forward: torch.fx.Node, window: tuple) -> None:
    """The program's own `max_pool2d` of the same operand and window, right before the
    pooling with indices autograd saved (replayed after it, frontend/saved_tensors.py;
    only getitems between, which write nothing): its values are the first result of
    that one, moved before it. XLA:CPU ran the two reduce_windows; the pooling with
    indices gives eager's values too (outofplace-upstream-max-pool-indices)."""
    plain = forward.prev
    while plain.op == "call_function" and plain.target is operator.getitem:
        plain = plain.prev
    if plain.op != "call_function" or \
            plain.target is not torch.ops.aten.max_pool2d.default or \
            plain.args[0] is not forward.args[0] or \
            pooling_window(plain.args[1:], plain.kwargs) != window:
        return
    plain.prepend(forward)
    with graph.inserting_after(forward):
        values = graph.call_function(operator.getitem, (forward, 0))
    values.meta = dict(plain.meta)
    plain.replace_all_uses_with(values)
    graph.erase_node(plain)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {_BACKWARD: _max_pool_backward}
