"""Indexing at runtime positions: `cache[:, pos] = k` and `cache[:, pos]` with `pos` a
0-d integer tensor.

Eager PyTorch turns such a position into a Python int (`.item()`), which torch.export
cannot trace: the bounds check guards on a data-dependent value. While tracing, the
`RuntimePositions` mode splits the key into its basic part (slices, `None`, `...`) and its
positions, and writes the same thing with ops that take the positions as tensors:

    cache[1:, pos] = k   ->  index_put_(cache[1:, :], [None, pos], k)   (a dynamic_update_slice)
    y = cache[1:, pos]   ->  index(cache[1:, :], [None, pos])           (a gather)

Plain ints beside a position stay positions (0-d constants), so the whole write is one
update at runtime starts. A read traces as `index`, a copy where eager returns a view
(a select at a runtime index): inplace-to-outofplace takes it as a view again
(op_registry.is_position_view), so a write into it reaches the tensor and a read after a
write of the tensor sees it. A 0-d uint8 index, a mask in eager, is refused.

Beside index tensors a position is one more (0-d) index tensor, but eager applies it as
an int, before the index tensors; the two orders place the broadcast index dimensions
differently when the position separates index tensors from slices, so the values
(written) or the result (read) are permuted between the two layouts:

    x[i, :, pos] = v   ->  index_put_(x, [i, None, pos], v.permute(1, 0))

Keys that mix positions with masks are refused here.

The traced read is a new, dense tensor; eager's view has the strides of the indexed
tensor, with gaps where the positions were, so eager may copy where the trace aliases
(`x[..., pos].contiguous()` of a row-major x: eager copies, and a write into the copy
leaves x alone). The mode keeps, for each read whose eager layout differs from the
traced one and for the views taken of it, a meta tensor with eager's layout
(`_EagerLayouts`): a layout-dependent op (`contiguous`, `reshape`, `view`, `flatten`) on
one is decided as eager decides it, a copy traced as a clone, and refused where eager
would alias and the trace copies.
"""

from __future__ import annotations

import linecache
import re
import traceback
import weakref
from pathlib import Path
from typing import Any

import torch

from .. import op_registry
from ..errors import UnsupportedMutationError
from ..indexing import expand_ellipsis, key_items

_PACKAGE = Path(__file__).resolve().parent.parent  # outofplace
_TORCH = Path(torch.__file__).resolve().parent
_FRAME = re.compile(r'File "([^"]+)", line ([0-9]+)')  # of an FX node's stack trace


def is_position(item: Any) -> bool:
    """A 0-d integer tensor used as an index (eager takes a 0-d uint8 one as a mask)."""
    return isinstance(item, torch.Tensor) and item.dim() == 0 and \
        not item.is_floating_point() and not item.is_complex() and \
        item.dtype not in (torch.bool, torch.uint8)


def _is_int(item: Any) -> bool:
    return isinstance(item, int) and not isinstance(item, bool)


def _users_generated_code(filename: str) -> bool:
    return filename != "<string>" and not filename.startswith("<eval_with_key") and \
        filename in linecache.cache


def user_line(frames: traceback.StackSummary | None = None) -> str:
    """`file:line` of the innermost frame outside torch and outofplace (of the current
    stack, or of `frames`), torch's generated code (`<string>`, `<eval_with_key>`)
    skipped, code compiled from a string the user registered in linecache (`<name>`)
    kept, as FX stack traces keep it; else of the innermost frame in torch.nn (the layer
    the user's model calls). While a torch.compile graph runs (tracing.py runs its nodes
    with their metadata), the current stack is its caller's: the line is the innermost of
    the node's own stack trace."""
    if frames is None:
        node_frames = _FRAME.findall(
            torch.fx.traceback.get_current_meta().get("stack_trace") or "")
        if node_frames:
            return f"{node_frames[-1][0]}:{node_frames[-1][1]}"
    frames = list(reversed(frames if frames is not None else traceback.extract_stack()))
    paths = [None if f.filename.startswith("<") else Path(f.filename).resolve()
             for f in frames]
    for frame, path in zip(frames, paths):
        if path is None and _users_generated_code(frame.filename) or path is not None \
                and _PACKAGE not in path.parents and _TORCH not in path.parents:
            return f"{frame.filename}:{frame.lineno}"
    for frame, path in zip(frames, paths):
        if path is not None and _TORCH / "nn" in path.parents:
            return f"{frame.filename}:{frame.lineno}"
    return ""


def split_key(rank: int, index: Any, op: str) -> tuple[tuple, list] | None:
    """`(basic, indices)` such that `t[index]` is `t[basic]` indexed by `indices`, or None
    when the key holds no runtime position.

    `basic` keeps the dimensions the positions index as full slices; `indices` has one
    entry per dimension of `t[basic]`: a 0-d tensor or None.
    """
    items = key_items(index)
    if any(isinstance(item, torch.Tensor) and item.dtype == torch.uint8 and not item.dim()
           for item in items):
        raise UnsupportedMutationError(
            op, "a 0-d uint8 tensor as an index, which eager takes as a mask (deprecated), "
            "not as a position; index with a bool mask or an int64 position",
            index=describe_index(items), location=user_line())
    if not any(is_position(item) for item in items):
        return None
    # A list of ints (or bools) indexes as the tensor it spells, in eager too (an empty
    # one as an empty int64 tensor, not torch.tensor([])'s float one).
    items = [torch.tensor(item, dtype=None if item else torch.int64)
             if isinstance(item, list) else item for item in items]
    for item in items:
        if not (is_position(item) or _is_int(item) or _is_index_tensor(item) or
                isinstance(item, slice) or item is None or item is Ellipsis):
            raise UnsupportedMutationError(
                op, "a runtime position (a 0-d integer tensor) in one index together "
                f"with {_kind(item)}",
                index=describe_index(items), location=user_line(),
                shape_from_values=isinstance(item, torch.Tensor) and item.dtype == torch.bool)
    items = expand_ellipsis(items, rank)
    basic: list[Any] = []
    indices: list[Any] = []
    for item in items:
        if is_position(item) or _is_index_tensor(item):
            basic.append(slice(None))
            # `index` takes int64 and int32 indices only; eager's x[pos] any integer pos.
            indices.append(item.long() if is_position(item) and
                           item.dtype not in (torch.int64, torch.int32) else item)
        elif _is_int(item):
            basic.append(slice(None))
            indices.append(torch.tensor(item))
        else:  # a slice or None: a dimension of the view, not indexed
            basic.append(item)
            indices.append(None)
    return tuple(basic), indices


def _is_index_tensor(item: Any) -> bool:
    """An integer tensor of one or more dimensions used as an index."""
    return isinstance(item, torch.Tensor) and item.dim() > 0 and \
        not item.is_floating_point() and not item.is_complex() and item.dtype != torch.bool


def _layout(indices: list, indexed: list[int], batch: int) -> list[Any]:
    """The dimensions of `view[indices]` when the `indexed` dimensions hold its index
    tensors: the view's other dimensions by number, then the `batch` broadcast index
    dimensions as ("batch", k), in place of the indexed dimensions when no other
    dimension separates them, first otherwise (PyTorch's and NumPy's rule)."""
    kept = [d for d, index in enumerate(indices) if index is None]
    if not indexed:
        return kept
    between = [d for d in kept if indexed[0] < d < indexed[-1]]
    first = indexed[0] if not between else -1
    return [d for d in kept if d < first] + [("batch", k) for k in range(batch)] + \
        [d for d in kept if d > first]


def _layouts(view: torch.Tensor, indices: list) -> tuple[list, list, list[int]]:
    """The layout of `view[indices]` as eager produces it (positions applied as ints
    first), the layout of indexing by all of `indices` at once, and eager's shape."""
    tensors = [d for d, index in enumerate(indices) if index is not None and index.dim()]
    batch = list(torch.broadcast_shapes(*(indices[d].shape for d in tensors)))
    eager = _layout(indices, tensors, len(batch))
    together = _layout(indices, [d for d, i in enumerate(indices) if i is not None],
                       len(batch))
    shape = [batch[slot[1]] if isinstance(slot, tuple) else view.shape[slot]
             for slot in eager]
    return eager, together, shape


def _positions_as_tensors(indices: list) -> list:
    """Beside index tensors, positions as one-element index tensors, which broadcast the
    same (torch-mlir's gather lowering gets 0-d ones wrong when a slice follows them)."""
    if all(index is None or index.dim() == 0 for index in indices):
        return indices
    return [index.reshape(1) if index is not None and index.dim() == 0 else index
            for index in indices]


def _kind(item: Any) -> str:
    if isinstance(item, torch.Tensor):
        return "a mask" if item.dtype == torch.bool else "an index tensor"
    return f"an index of type {type(item).__name__}"


def describe_index(items: list[Any]) -> str:
    def one(item: Any) -> str:
        if item is Ellipsis:
            return "..."
        if isinstance(item, slice):
            parts = ["" if v is None else str(v) for v in (item.start, item.stop, item.step)]
            return ":".join(parts[:2] if item.step is None else parts)
        if isinstance(item, torch.Tensor):
            return f"<tensor {list(item.shape)} {str(item.dtype).removeprefix('torch.')}>"
        return repr(item)
    return "[" + ", ".join(one(item) for item in items) + "]"


def _view(target: torch.Tensor, basic: tuple) -> torch.Tensor:
    if all(isinstance(item, slice) and item == slice(None) for item in basic):
        return target
    return target[basic]


def setitem(target: torch.Tensor, basic: tuple, indices: list, value: Any) -> None:
    """`target[key] = value` for the split key."""
    view = _view(target, basic)
    if not isinstance(value, torch.Tensor):
        value = torch.tensor(value, dtype=target.dtype)
    eager, together, shape = _layouts(view, indices)
    indices = _positions_as_tensors(indices)
    while value.dim() > len(shape) and value.shape[0] == 1:  # eager drops leading 1s
        value = value[0]
    if eager != together:
        value = value.expand(shape).permute([eager.index(slot) for slot in together])
    torch.ops.aten.index_put_(view, indices, value.to(target.dtype))


def getitem(target: torch.Tensor, basic: tuple, indices: list) -> torch.Tensor:
    """`target[key]` for the split key: a copy of the indexed elements."""
    view = _view(target, basic)
    eager, together, _ = _layouts(view, indices)
    result = torch.ops.aten.index.Tensor(view, _positions_as_tensors(indices))
    if eager != together:
        result = result.permute([together.index(slot) for slot in eager])
    return result


def eager_view(target: torch.Tensor, basic: tuple, indices: list) -> torch.Tensor | None:
    """A meta tensor laid out as eager's `target[key]` when the key holds positions
    only (eager's view: the positions applied as ints), else None (eager copies)."""
    if any(index is not None and index.dim() for index in indices):
        return None
    with _untraced():
        meta = torch.empty_strided(target.shape, target.stride(), dtype=target.dtype,
                                   device="meta")
        view = _view(meta, basic)
        return view[tuple(slice(None) if index is None else 0 for index in indices)]


def _untraced() -> Any:
    """A context in which ops on meta tensors stay out of the trace (export's fake and
    proxy modes set aside)."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def _strides(t: torch.Tensor) -> tuple[int, ...]:
    """The strides that matter to a layout decision: of the dimensions longer than 1."""
    return tuple(stride for size, stride in zip(t.shape, t.stride()) if size > 1)


def _aliases(result: Any, source: torch.Tensor) -> bool:
    if result is source:
        return True
    base = source._base if source._base is not None else source
    return isinstance(result, torch.Tensor) and result._base is base


# Ops whose result is a view or a copy depending on the layout, by the function called.
_LAYOUT_DEPENDENT = {torch.Tensor.contiguous, torch.Tensor.reshape, torch.reshape,
                     torch.Tensor.view, torch.Tensor.flatten, torch.flatten,
                     torch.Tensor.reshape_as, torch.Tensor.view_as}


class _EagerLayouts:
    """Traced tensors (reads at runtime positions and views of them) whose eager layout
    differs from the traced one, each with a meta tensor in eager's layout (None where
    it could not be followed)."""

    def __init__(self) -> None:
        self._meta: dict[int, tuple[Any, torch.Tensor | None]] = {}

    def track(self, traced: torch.Tensor, meta: torch.Tensor | None) -> None:
        if meta is None or _strides(meta) != _strides(traced) or \
                meta.shape != traced.shape:
            self._meta[id(traced)] = (weakref.ref(traced), meta)

    def tracked(self, args: tuple) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The first argument and its eager layout, when it is tracked."""
        if not args or not isinstance(args[0], torch.Tensor):
            return None
        entry = self._meta.get(id(args[0]))
        if entry is None or entry[0]() is not args[0]:
            return None
        return args[0], entry[1]

    def call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """`func(*args, **kwargs)` on a tracked first argument, as eager lays it out."""
        traced, meta = self.tracked(args)
        rest = tuple(a.shape if func in (torch.Tensor.reshape_as, torch.Tensor.view_as)
                     and isinstance(a, torch.Tensor) else a for a in args[1:])
        if func in _LAYOUT_DEPENDENT:
            name = getattr(func, "__name__", str(func))
            if meta is None:
                raise UnsupportedMutationError(
                    f"torch.aten.{name}", "a layout-dependent op on a view of a read at a "
                    "runtime position whose layout in eager the trace could not follow: "
                    "eager may copy or alias; clone() it first",
                    location=user_line())
            as_shape = {torch.Tensor.reshape_as: torch.Tensor.reshape,
                        torch.Tensor.view_as: torch.Tensor.view}.get(func, func)
            with _untraced():
                eager = as_shape(meta, *rest, **kwargs)  # raises where eager raises
            result = func(*args, **kwargs)
            if _aliases(eager, meta) and not _aliases(result, traced):
                raise UnsupportedMutationError(
                    f"torch.aten.{name}", "eager's x[pos] here is a view whose layout "
                    "makes this op alias it, where the traced read (a copy) makes it copy; "
                    "clone() it first if a copy is meant", location=user_line())
            if not _aliases(eager, meta) and _aliases(result, traced):
                return as_shape(traced.clone(), *rest, **kwargs)  # eager copies
            if _aliases(result, traced):
                self.track(result, eager)
            return result
        result = func(*args, **kwargs)
        if result is traced and \
                not op_registry.changes_shape_in_place(getattr(func, "__name__", "")):
            return result  # an in-place op: the layout stays
        if isinstance(result, torch.Tensor) and _aliases(result, traced):
            try:
                with _untraced():
                    follows = func(meta, *args[1:], **kwargs) if meta is not None else None
            except Exception:  # noqa: BLE001 - an op the meta tensor cannot follow
                follows = None
            self.track(result, follows if isinstance(follows, torch.Tensor) else None)
        return result


class RuntimePositions(torch.overrides.TorchFunctionMode):
    """While tracing: setitem and getitem at runtime positions, as index_put_ and index;
    layout-dependent ops on such reads decided as eager decides them."""

    def __init__(self) -> None:
        super().__init__()
        self.layouts = _EagerLayouts()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if func is torch.Tensor.__setitem__ and not kwargs:
            target, index, value = args
            split = split_key(target.dim(), index, "torch.aten.index_put_")
            if split is not None:
                setitem(target, *split, value)
                return None
        elif func is torch.Tensor.__getitem__ and not kwargs:
            target, index = args
            split = split_key(target.dim(), index, "torch.aten.index.Tensor")
            if split is not None:
                result = getitem(target, *split)
                known = self.layouts.tracked(args)
                eager = eager_view(target, *split) if known is None else None
                if known is not None or eager is not None:  # a view in eager
                    self.layouts.track(result, eager)
                return result
        if self.layouts.tracked(args) is not None:
            return self.layouts.call(func, args, kwargs or {})
        return func(*args, **(kwargs or {}))
