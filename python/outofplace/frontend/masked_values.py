"""Reads through a bool mask that are only computed on and stored back: `x[m] *= 2`,
`x[m] = x[m] + y[m]`.

`x[mask]` has as many elements as the mask has trues, a shape that depends on the data,
which StableHLO cannot express. But when the selected values only flow through
elementwise ops into a store at the same mask, the masked positions never need to be
gathered: while tracing, the `MaskedValues` mode reads `x[mask]` as the whole view it
selects from (a full-shape copy), lets elementwise ops compute on every position, and
turns the store into a select:

    x[m] *= 2         ->  v = x.clone();  v.mul_(2);  x.copy_(where(m, v, x))
    x[0, m] = y[0, m] + 1   ->  x[0].copy_(where(m, y[0] + 1, x[0]))

Elementwise means each result element depends only on the same element of each masked
operand; unmasked operands may only broadcast over the dimensions after the mask. Any
other use of a masked value (a reduction, its shape, returning it) is refused: there the
full-shape stand-in would differ from eager's compacted tensor.

A mask the program spells (`x[torch.tensor([True, False, True])]`) has values known
when tracing, so its shape is too: it indexes as the positions of its trues
(`x[torch.tensor([0, 2])]`), which is what eager's indexing does with any mask, and
what dynamo compiles it to.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import UnsupportedMutationError
from ..indexing import expand_ellipsis, key_items
from .runtime_positions import describe_index, is_position, user_line

# What Python names (`x.add_`, `torch.where`, `x.__iadd__`) are elementwise: a result
# element depends only on the same element of each operand. PyTorch's pointwise ops
# (torch.Tag.pointwise, not random), and casts, copies and fills, which carry no tag.
_UNTAGGED = frozenset({"floor_divide", "copy", "fill", "zero", "to", "type_as",
                       "contiguous", "detach", "float", "half", "bfloat16", "double",
                       "long", "int", "bool"})
_REFLECTED = frozenset({"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and",
                        "or", "xor", "lshift", "rshift"})
_DUNDERS = {"truediv": "div", "floordiv": "floor_divide", "mod": "remainder",
            "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
            "invert": "bitwise_not", "lshift": "bitwise_left_shift",
            "rshift": "bitwise_right_shift"}


@functools.cache
def _is_elementwise(name: str) -> bool:
    if name.startswith("__") and name.endswith("__"):  # __iadd__, __radd__ -> add
        name = name[2:-2]
        if name[:1] in ("i", "r") and name[1:] in _REFLECTED:
            name = name[1:]
        name = _DUNDERS.get(name, name)
    elif name.endswith("_"):  # in place
        name = name[:-1]
    if name in _UNTAGGED:
        return True
    packet = getattr(torch.ops.aten, name, None)
    tags = [getattr(packet, o).tags for o in packet.overloads()] if packet is not None \
        else []
    return any(torch.Tag.pointwise in t for t in tags) and \
        not any(torch.Tag.nondeterministic_seeded in t for t in tags)


@dataclass
class _Selection:
    """What a masked value selects: the view `target[basic]` at `mask`, placed from
    dimension `first` of the view."""

    key: tuple  # the index items, compared by identity for tensors
    mask: torch.Tensor
    first: int
    shape: torch.Size  # of the view
    line: str = ""  # where the user read it

    @property
    def trailing(self) -> int:
        """Dimensions after the mask: where unmasked operands may broadcast."""
        return len(self.shape) - self.first - self.mask.dim()

    def same_as(self, other: "_Selection") -> bool:
        return self.shape == other.shape and self.first == other.first and \
            len(self.key) == len(other.key) and all(
                a is b if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)
                else a == b for a, b in zip(self.key, other.key))


def _split(target: torch.Tensor, index: Any) -> tuple[tuple, torch.Tensor, int] | None:
    """`(basic, mask, first)` for a key holding one bool mask among basic items."""
    items = key_items(index)
    masks = [i for i, item in enumerate(items)
             if isinstance(item, torch.Tensor) and item.dtype == torch.bool]
    if not masks:
        return None
    basic_only = all(isinstance(item, (slice, int, type(None), type(Ellipsis))) and
                     not isinstance(item, bool)
                     for i, item in enumerate(items) if i != masks[0])
    if len(masks) > 1 or not basic_only:
        raise _refusal(items, "a bool mask together with other index tensors (beside "
                       "it, indices of one element are taken where they select as eager "
                       "does: next to the mask, or after a mask that comes first)")
    mask = items[masks[0]]
    items = expand_ellipsis(items, target.dim())
    at = next(i for i, item in enumerate(items) if item is mask)
    first = sum(1 for item in items[:at] if item is None or isinstance(item, slice))
    basic = tuple(items[:at]) + (slice(None),) * mask.dim() + tuple(items[at + 1:])
    return basic, mask, first


def _refusal(items: list, reason: str, line: str | None = None
             ) -> UnsupportedMutationError:
    return UnsupportedMutationError(
        "torch.aten.index.Tensor", f"reading x[mask] with a bool mask: its shape depends "
        f"on the mask's values; {reason}; only elementwise ops on it, stored back at the "
        "same mask, are compiled (x[m] *= 2, x[m] = y[m] + 1)",
        index=describe_index(items), location=user_line() if line is None else line,
        shape_from_values=True)


def _positions_first(target: torch.Tensor, index: Any) -> tuple[tuple, tuple] | None:
    """For a key with a bool mask and runtime positions (0-d integer tensors), the keys
    (outer, inner) such that `target[index]` is `target[outer][inner]`: eager selects at
    a 0-d integer tensor as at an int, before it indexes with the mask, so the positions
    take a view (runtime_positions.py) that the mask then indexes (`x[m, 2:, pos]` is
    `x[:, :, pos][m, 2:]`). None for another key."""
    items = key_items(index)
    if not any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.dim()
               for i in items) or not any(is_position(i) for i in items) or \
            any(isinstance(i, bool) or isinstance(i, torch.Tensor) and not is_position(i)
                and i.dtype != torch.bool for i in items):
        return None
    outer: list[Any] = []
    inner: list[Any] = []
    for item in expand_ellipsis(items, target.dim()):
        if isinstance(item, torch.Tensor) and item.dtype == torch.bool:
            outer += [slice(None)] * max(item.dim(), 1)
            inner.append(item)
        elif is_position(item) or isinstance(item, int):
            outer.append(item)  # its dimension is gone
        else:  # a slice or None: a dimension of the view
            outer.append(item)
            inner.append(slice(None))
    return tuple(outer), tuple(inner)


def _one_element(item: Any) -> Any:
    """An index of one element as the int or 0-d tensor that selects it (a list of one
    int, a 1-d integer tensor of one element); None for any other item."""
    if isinstance(item, (list, tuple)) and len(item) == 1 and isinstance(item[0], int) \
            and not isinstance(item[0], bool):
        return item[0]
    if isinstance(item, torch.Tensor) and item.dim() == 1 and item.numel() == 1 and \
            is_position(item.reshape(())):
        return item.reshape(())
    return None


def _single_indices_as_positions(index: Any) -> Any:
    """A key holding one bool mask and indices of one element each (`x[m, [2]]`), with
    each of those as the int or 0-d tensor that selects it, where that takes the same
    elements in eager's order: the mask and those adjacent (the trues' dimension where
    they were), or the mask first (eager puts the trues' dimension first, and the mask's
    stays first once the others select); any other key as it is."""
    items = key_items(index)
    masks = [i for i, item in enumerate(items) if isinstance(item, torch.Tensor) and
             item.dtype == torch.bool and item.dim()]
    singles = {i: one for i, item in enumerate(items)
               if (one := _one_element(item)) is not None}
    others = [item for i, item in enumerate(items) if i not in singles and i not in masks
              and isinstance(item, (list, tuple, torch.Tensor)) and not is_position(item)]
    if len(masks) != 1 or not singles or others:
        return index
    advanced = sorted([*masks, *singles])
    if advanced != list(range(advanced[0], advanced[-1] + 1)) and masks[0] != 0:
        return index
    return tuple(singles.get(i, item) for i, item in enumerate(items))


def _trues(data: Any, at: tuple) -> list[tuple] | None:
    """The positions of the true elements of nested lists of Python scalars, in order
    (row-major, as `nonzero`); None for anything else (a tensor among them)."""
    if isinstance(data, (list, tuple)):
        found: list[tuple] = []
        for i, element in enumerate(data):
            inner = _trues(element, (*at, i))
            if inner is None:
                return None
            found += inner
        return found
    if isinstance(data, (bool, int, float)):
        return [at] if data else []
    return None


class MaskedValues(torch.overrides.TorchFunctionMode):
    """While tracing: masked reads as full-shape stand-ins, stored back with a select."""

    def __init__(self) -> None:
        super().__init__()
        self.selections: dict[int, tuple[torch.Tensor, _Selection]] = {}
        # masks the program spells: id -> (the traced tensor, its values)
        self.spelled: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _spell(self, args: tuple, kwargs: dict) -> torch.Tensor:
        """`torch.tensor(data)`: a bool one's trues are kept (`_as_positions`)."""
        result = torch.tensor(*args, **kwargs)
        if result.dtype == torch.bool and result.dim() and args and \
                isinstance(args[0], (list, tuple)):
            trues = _trues(args[0], ())
            if trues is not None:
                self.spelled[id(result)] = (result, trues)
        return result

    def _as_positions(self, index: Any) -> Any:
        """The key with each mask the program spelled as the positions of its trues,
        one int64 tensor per dimension it takes, as eager indexes with a mask. Not
        beside another tensor (a runtime position: dynamo does not trace that pair as
        one graph either)."""
        items, changed = [], False
        if any(isinstance(item, torch.Tensor) and (entry := self.spelled.get(id(item))) is
               None or entry[0] is not item for item in key_items(index)
               if isinstance(item, torch.Tensor)):
            return index
        for item in key_items(index):
            entry = self.spelled.get(id(item)) if isinstance(item, torch.Tensor) else None
            if entry is None or entry[0] is not item:
                items.append(item)
                continue
            changed = True
            items += [torch.tensor([t[d] for t in entry[1]], dtype=torch.int64,
                                   device=item.device) for d in range(item.dim())]
        return tuple(items) if changed else index

    def _selection(self, value: Any) -> _Selection | None:
        entry = self.selections.get(id(value))
        return entry[1] if entry is not None and entry[0] is value else None

    def _track(self, value: torch.Tensor, selection: _Selection) -> None:
        self.selections[id(value)] = (value, selection)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.tensor:
            return self._spell(args, kwargs)
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and \
                self._selection(args[0]) is None:
            args = (args[0], _single_indices_as_positions(args[1]), *args[2:])
            keys = _positions_first(args[0], args[1])
            if keys is not None:  # x[pos, m] is x[pos][m]
                return self.__torch_function__(func, types,
                                               (args[0][keys[0]], keys[1], *args[2:]), kwargs)
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and self.spelled:
            args = (args[0], self._as_positions(args[1]), *args[2:])
        if func is torch.Tensor.__getitem__ and self._selection(args[0]) is None:
            target, index = args
            split = _split(target, index)
            if split is not None:
                basic, mask, first = split
                view = target[basic]
                stand_in = view.clone()
                key = index if isinstance(index, tuple) else (index,)
                self._track(stand_in, _Selection(key, mask, first, view.shape,
                                                 user_line()))
                return stand_in
        tracked = [(v, s) for v in pytree.tree_leaves((args, kwargs))
                   if (s := self._selection(v)) is not None]
        if not tracked:
            return func(*args, **kwargs)
        if func is torch.Tensor.__setitem__ and self._selection(args[0]) is None:
            return self._store(*args)
        return self._elementwise(func, args, kwargs, tracked)

    def _store(self, target: torch.Tensor, index: Any, value: torch.Tensor) -> None:
        """`target[mask key] = value`, value a masked value of the same selection."""
        selection = self._selection(value)
        split = _split(target, index)
        key = index if isinstance(index, tuple) else (index,)
        if split is None or not selection.same_as(
                _Selection(key, split[1], split[2], target[split[0]].shape)):
            raise _refusal(list(key), "here the masked values are stored at another index")
        basic, mask, first = split
        view = target[basic]
        if any(stride == 0 and size > 1 for stride, size in zip(view.stride(), view.shape)):
            raise UnsupportedMutationError(
                "torch.aten.index_put_", "writing through a mask into an expanded tensor: "
                "its elements share memory", index=describe_index(list(key)),
                location=user_line())
        condition = mask.reshape((1,) * first + tuple(mask.shape) + (1,) * selection.trailing)
        view.copy_(torch.where(condition, value.to(view.dtype), view))

    def _elementwise(self, func: Any, args: tuple, kwargs: dict,
                     tracked: list[tuple[torch.Tensor, _Selection]]) -> Any:
        name = getattr(func, "__name__", str(func))
        selection = tracked[0][1]
        if not _is_elementwise(name) or not all(s.same_as(selection) for _, s in tracked):
            raise _refusal(list(selection.key), f"here it is used by {name}")
        inplace = name.startswith("__i") or name.endswith("_") and not name.endswith("__")
        if "out" in kwargs or inplace and self._selection(args[0]) is None:
            raise _refusal(list(selection.key), f"{name} writes it into another tensor")
        if any(self._meets_the_count_with_none(value, selection)
               for value in pytree.tree_leaves((args, kwargs))):
            return self._on_no_element(func, args, kwargs, selection, inplace)

        def unmasked(value: Any) -> Any:
            """An operand not masked: its dimension meeting the masked values' count is
            1 (a `[1]` beside `x[m]`: broadcast against the count, whatever the mask),
            made one per mask dimension of the stand-in, or has a value for each true of
            the mask, in order (eager pairs them only when there are as many), gathered
            to the trues' places; its dimensions before that one meet those before the
            mask, as in eager; those after, the ones after it."""
            if not isinstance(value, torch.Tensor) or self._selection(value) is not None \
                    or value.dim() <= selection.trailing:
                return value
            extra = value.dim() - selection.trailing
            if value.dim() > selection.first + 1 + selection.trailing:
                raise _refusal(list(selection.key), f"{name} pairs it with a tensor of "
                               f"shape {list(value.shape)}, more dimensions than the "
                               "masked values")
            count, mask = value.shape[extra - 1], selection.mask
            if count == 1:
                return value.reshape(value.shape[:extra - 1] + (1,) * mask.dim() +
                                     value.shape[extra:])
            # the k-th true takes the k-th value, as `b[mask] = vals` does (eager pairs
            # them only when the mask has as many trues as there are values)
            rank = (mask.reshape(-1).long().cumsum(0) - 1).clamp(0, count - 1)
            return value.index_select(extra - 1, rank).reshape(
                value.shape[:extra - 1] + tuple(mask.shape) + value.shape[extra:])

        args, kwargs = pytree.tree_map(unmasked, (args, kwargs))
        result = func(*args, **kwargs)
        for value in pytree.tree_leaves(result):
            if isinstance(value, torch.Tensor):
                self._track(value, selection)
        return result

    def _meets_the_count_with_none(self, value: Any, selection: _Selection) -> bool:
        """An unmasked operand of size 0 in the dimension that meets the masked values'
        count (`x[m] += torch.empty(0)`)."""
        if not isinstance(value, torch.Tensor) or self._selection(value) is not None or \
                value.dim() <= selection.trailing:
            return False
        return value.shape[value.dim() - selection.trailing - 1] == 0

    def _on_no_element(self, func: Any, args: tuple, kwargs: dict, selection: _Selection,
                       inplace: bool) -> Any:
        """An op pairing the masked values with an operand of no element there, which
        eager broadcasts only when the mask selects none (or one, into a new tensor: of
        no element either). In place, it changes nothing; out of place, it makes eager's
        tensor of no element, computed on masked values of none (no longer masked), as
        eager broadcasts them (raising where it raises)."""
        def none_selected(value: Any) -> Any:
            if self._selection(value) is None:
                return value
            shape = value.shape
            return value.new_empty(shape[:selection.first] + (0,) +
                                   shape[selection.first + selection.mask.dim():])
        result = func(*pytree.tree_map(none_selected, args),
                      **pytree.tree_map(none_selected, kwargs))
        return args[0] if inplace else result

    def refuse_escaping(self, output: Any) -> None:
        """A masked value in the program's output would have the wrong shape."""
        for value in pytree.tree_leaves(output):
            selection = self._selection(value)
            if selection is not None:
                raise _refusal(list(selection.key), "the masked values are returned",
                               selection.line)
