"""A call's output built from main's results as the program's signature says: the
program's pytree of results of main, the caller's own tensors where main's result is the
new value of a written argument, views of arguments taken of the caller's tensors as eager
takes them, complex outputs as complex tensors, other results laid out as eager lays
them out (strides, storage offset)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from .memory import element_offsets
from .signature import Input, ProgramSignature, Result


def as_complex(pairs: torch.Tensor) -> torch.Tensor:
    """The complex tensor of real pairs [..., 2]: the caller's own tensor when `pairs` is
    its `view_as_real`, else a complex view of the pairs (a copy where they cannot be
    viewed so)."""
    base = pairs._base
    if base is not None and base.is_complex() and base.shape == pairs.shape[:-1] and \
            base.data_ptr() == pairs.data_ptr() and \
            torch.view_as_real(base).stride() == pairs.stride():
        return base
    try:
        return torch.view_as_complex(pairs)
    except RuntimeError:
        return torch.view_as_complex(pairs.contiguous())


def _laid_out(result: torch.Tensor, strides: tuple, offset: int, storage: int
              ) -> torch.Tensor:
    """A result of main (contiguous) in the layout eager gives that output. Where that
    layout has elements sharing memory (an expand's stride 0), each memory location
    takes the value of one of them (eager's elements there are one, so their values
    are too); copy_ refuses to write such a tensor."""
    tensor = torch.empty(storage, dtype=result.dtype, device=result.device)
    laid_out = tensor.as_strided(result.shape, strides, offset)
    if torch._debug_has_internal_overlap(laid_out) == 0:  # (0: no element shares memory)
        return laid_out.copy_(result)
    tensor.index_put_((element_offsets(laid_out),), result.reshape(-1))
    return laid_out


def _take_views(tensor: torch.Tensor, views: tuple, inputs: list[torch.Tensor],
                results: list[Any]) -> torch.Tensor:
    """The view of `tensor` that `views` take ((view op, its other arguments, kwargs),
    innermost first), a position tensor among them given as the call's `signature.Input`
    or main's `signature.Result`."""
    for view, view_args, view_kwargs in views:
        view_args = [inputs[a.index] if type(a) is Input else
                     results[a.index] if type(a) is Result else a
                     for a in view_args]
        tensor = view(tensor, *view_args, **view_kwargs)
    return tensor


class Outputs:
    """How a program's output is made of main's results (`signature.output_leaves`)."""

    def __init__(self, signature: ProgramSignature, io_map: dict[int, int]) -> None:
        self.signature = signature
        # result index -> the argument it is the new value of
        self.written = {result: arg for arg, result in io_map.items()}

    def __call__(self, inputs: list[torch.Tensor], results: list[Any]) -> Any:
        """The program's output: a result of main, the caller's own tensor where main's
        result is aliased with it, or a view of an argument, taken of the caller's tensor
        as eager takes it."""
        written = self.written
        signature = self.signature
        complex_results = signature.complex_results
        leaves: list[Any] = []
        output_views = []
        laid_out: dict[int, torch.Tensor] = {}  # a result given twice is one tensor
        for kind, value, *views in signature.output_leaves:
            if kind == "result":
                leaves.append(inputs[written[value]] if value in written else results[value])
                if value in complex_results:
                    leaves[-1] = as_complex(leaves[-1])
                elif views[0] is not None and value not in written:
                    if value not in laid_out:
                        laid_out[value] = _laid_out(leaves[-1], *views[0])
                    leaves[-1] = laid_out[value]
            elif kind == "argument":
                tensor = inputs[value]
                if value in signature.complex_arguments:
                    tensor = as_complex(tensor)
                leaves.append(_take_views(tensor, views[0], inputs, results))
            elif kind == "view":  # of a result no leaf is: a tensor two outputs view
                if value not in laid_out:
                    laid_out[value] = results[value] if views[0] is None else \
                        _laid_out(results[value], *views[0])
                leaves.append(_take_views(laid_out[value], views[1], inputs, results))
            elif kind == "output":  # a view of another leaf, taken once that one is
                output_views.append((len(leaves), value, views[0]))
                leaves.append(None)
            else:
                leaves.append(value)
        while output_views:  # bases first: a leaf's base may be a view of a third
            index, base, views = output_views.pop(0)
            if leaves[base] is None:
                output_views.append((index, base, views))
                continue
            leaves[index] = _take_views(leaves[base], views, inputs, results)
        spec = signature.out_spec
        if spec is None:
            return leaves
        if self._flat_output is not None:
            return self._flat_output(leaves)
        return pytree.tree_unflatten(leaves, spec)

    @functools.cached_property
    def _flat_output(self) -> Callable[[list], Any] | None:
        """How leaves become the output without pytree when the output is one tensor or
        a flat tuple or list of them (a torch.compile graph's tuple), else None."""
        spec = self.signature.out_spec
        if spec.is_leaf():
            return lambda leaves: leaves[0]
        if spec.type in (tuple, list) and \
                all(spec.child(i).is_leaf() for i in range(spec.num_children)):
            return spec.type
        return None
