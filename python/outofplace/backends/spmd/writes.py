"""Where a call writes its state, so the host repeats the writes on the caller's tensor
instead of copying the state back: `expose_writes` makes the engine's module also return
where each `dynamic_update_slice` or `scatter` of a written argument wrote (or the host
computes it, host_scalars.py), and `written`, after a call, turns those into regions of
the caller's tensor (docs/sharding.md, "Running")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import host_scalars, xla
from .placement import Address, Region


@dataclass(frozen=True)
class Write:
    """A write of an aliased argument in the program, which tells the host where the
    caller's tensor changes: a `dynamic_update_slice` (results: a start per dimension),
    a `scatter` that replaces elements (results: the indices), or a `reshape` of the state
    between them (`dimensions`: the new shape). After a reshape the host cannot read the
    region from the devices' shards (they are in the state's own shape): the results
    then also hold the update, and the host writes it through a view of that shape.

    A scatter at one index the host computes (`c.index_copy_(2, pos, k)` with one
    position) is one window, given as a dynamic_update_slice is: `starts` and its shape
    (`update`); it is not clamped (out of bounds XLA skips it: the host then copies the
    state whole)."""

    op: str
    results: tuple[int, ...]  # the engine module's results that say what it wrote
    # scatter: update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims,
    # index_vector_dim; reshape: the shape
    dimensions: tuple = ()
    # the update's shape (scatter: the updates'; at one host-computed index, its window's)
    update: tuple[int, ...] = ()
    with_update: bool = False  # the last result is the update (after a reshape)
    # per dimension, a constant start, a function of the call's arguments
    # (host_scalars.py), or None: one of `results`; a scatter's only at one host index
    starts: tuple[int | host_scalars.Scalar | None, ...] = ()


def written(tensor: torch.Tensor, writes: list[Write], results: list[Any],
             inputs: list[torch.Tensor]) -> list[Region] | None:
    """Where the call wrote the state, in order: (the caller's tensor or a view of it,
    the region, its new value, or None to read it from the devices' shards). None when a
    scatter's writes are not plain (`_scatter_windows`) or the tensor's layout does not
    view as a shape the program reshapes the state to: the host then copies it all."""
    regions: list[Region] = []
    current = tensor
    for write in writes:
        if write.op == "reshape":  # a paged cache's pages and slots merged, or split
            try:
                current = current.view(write.dimensions)
            except RuntimeError:
                return None
            continue
        # replicated: one device's (`_fully_replicated_shard`: one array, not one a device)
        values = [results[r]._fully_replicated_shard() for r in write.results]
        update = xla.buffers.tensor_over(values.pop(), tensor.dtype) if write.with_update else None
        if write.starts:  # a dynamic_update_slice, or a scatter's one window
            given = iter(values)
            starts = [int(_read(next(given))) if s is None else
                      s if isinstance(s, int) else s(inputs) for s in write.starts]
            bounds = list(zip(starts, write.update, current.shape))
            if write.op == "scatter":  # out of bounds, skipped: all of it
                if any(s < 0 or s + u > n for s, u, n in bounds):
                    return None
            else:  # the op clamps its starts
                starts = [min(max(s, 0), n - u) for s, u, n in bounds]
            regions.append((current, tuple(slice(s, s + u)
                                           for s, u in zip(starts, write.update)), update))
            continue
        windows = _scatter_windows(tuple(current.shape), _read(values[0]),
                                   write.update, write.dimensions)
        if windows is None:
            return None
        rows: list[Any] = [None] * len(windows)
        if update is not None and windows:
            window_dims = write.dimensions[0]
            scattered = [d for d in range(update.dim()) if d not in window_dims]
            rows = list(update.permute(*scattered, *window_dims).reshape(
                len(windows), *[w.stop - w.start for w in windows[0]]))
        regions += [(current, where, row) for where, row in zip(windows, rows)]
    return regions


def _read(array: Any) -> np.ndarray:
    """A copy of a one-device array's values, read at its address (the call is over)."""
    if array.size == 0:
        return np.empty(array.shape, array.dtype)
    return np.array(Address(array.unsafe_buffer_pointer(), array.shape, array.dtype.str))


def _scatter_windows(shape: tuple[int, ...], indices: np.ndarray, updates: tuple[int, ...],
                     dimensions: tuple) -> list[tuple[slice, ...]] | None:
    """The windows a replacing scatter writes, in the order of its updates, or None when
    one is out of bounds (XLA skips it) or two are at one place (which XLA writes last is
    its choice). The scattered dimensions are inserted ones (`_replaces`): one start,
    one window."""
    window_dims, inserted, to_operand, vector_dim = dimensions
    if vector_dim == indices.ndim:
        indices = indices[..., None]
    indices = np.moveaxis(indices, vector_dim, -1)
    starts = indices.reshape(-1, indices.shape[-1]).tolist()
    sizes = iter(updates[d] for d in window_dims)
    window = [1 if d in inserted else next(sizes) for d in range(len(shape))]
    if len({tuple(s) for s in starts}) != len(starts):
        return None
    windows = []
    for start in starts:
        corner = [0] * len(shape)
        for k, d in enumerate(to_operand):
            corner[d] = start[k]
        if any(c < 0 or c + w > n for c, w, n in zip(corner, window, shape)):
            return None
        windows.append(tuple(slice(c, c + w) for c, w in zip(corner, window)))
    return windows



def engine_module(stablehlo: str, io_map: dict[int, int]
                  ) -> tuple[str, dict[int, list[Write] | None]]:
    """The module the engine compiles: the legalized program with what it writes into its
    state as results after its own (`expose_writes`), and without its `mhlo.sharding`
    attributes; with, per written argument, those writes (None: not a chain of writes the
    host can repeat).

    The shardings are written once, by transforms/sharding.py, as HloShardings: what
    every consumer of the exported program and the HLO module proto (Neuron) reads. The
    engine needs them in a second form anyway, jax `NamedSharding`s, to place arguments
    and results on the devices and to call the program under `jax.jit`, which writes
    them into the module it compiles as Shardy's `sdy.sharding` (executable.py `_jit`).
    Left in, the `mhlo.sharding` attributes make jaxlib 0.10.2 partition the whole
    program with GSPMD ("Module has GSPMD attrs or ops, but Shardy is enabled. Disabling
    Shardy"), which is deprecated; dropped, Shardy partitions it from jax's shardings,
    into the same program the same specs written as `sdy.sharding` gave.
    """
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir

    with jax_mlir.make_ir_context():
        module = ir.Module.parse(stablehlo)
        main = next(op for op in module.body.operations
                    if ir.StringAttr(op.attributes["sym_name"]).value == "main")
        writes = expose_writes(main, io_map)
        for kind in ("arg_attrs", "res_attrs"):
            if kind not in main.attributes:  # (a main without arguments, or results)
                continue
            entries = [ir.DictAttr(entry) for entry in ir.ArrayAttr(main.attributes[kind])]
            main.attributes[kind] = ir.ArrayAttr.get([ir.DictAttr.get(
                {entry[i].name: entry[i].attr for i in range(len(entry))
                 if entry[i].name != "mhlo.sharding"}) for entry in entries])
        return module.operation.get_asm(), writes


def expose_writes(main: Any, io_map: dict[int, int]) -> dict[int, list[Write] | None]:
    """For each written argument whose new value is a chain of `dynamic_update_slice`s,
    replacing `scatter`s and `reshape`s of it (and `optimization_barrier`s), returns where each write is (its starts or
    indices, and after a reshape its update) as replicated results after main's own; the
    chains by argument, None for the others."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import func, hlo

    block = main.regions[0].blocks[0]
    read_only = set(range(len(block.arguments))) - set(io_map)
    ret = block.operations[len(block.operations) - 1]
    returned = list(ret.operands)
    exposed: list[Any] = []
    chains: dict[int, list[Write] | None] = {}
    for arg, result in sorted(io_map.items()):
        ops, value = [], returned[result]
        while value != block.arguments[arg]:
            owner = value.owner
            if isinstance(owner, ir.Block):  # another argument
                break
            if owner.name in ("stablehlo.dynamic_update_slice", "stablehlo.reshape") or (
                    owner.name == "stablehlo.scatter" and _replaces(owner)):
                ops.append(owner)
                value = owner.operands[0]
            elif owner.name == "stablehlo.optimization_barrier" and len(owner.operands) == 1:
                value = owner.operands[0]  # (before a scatter: transforms/scatter_barriers.py)
            else:
                break
        if value != block.arguments[arg]:
            chains[arg] = None
            continue
        chains[arg], reshaped = [], False
        for op in reversed(ops):
            first = len(returned) + len(exposed)
            if op.name == "stablehlo.reshape":
                shape = tuple(ir.RankedTensorType(op.results[0].type).shape)
                chains[arg].append(Write("reshape", (), shape))
                reshaped = True
                continue
            starts: tuple[int | host_scalars.Scalar | None, ...] = ()
            if op.name == "stablehlo.dynamic_update_slice":
                update, dimensions = op.operands[1], ()
                # each start a constant, else computed on the host when it can be
                # (host_scalars.py), else returned
                given = list(op.operands)[2:]
                starts = tuple(host_scalars.host_scalar(v, read_only) if c is None else c
                               for v, c in zip(given, map(_constant, given)))
                values = [v for v, c in zip(given, starts) if c is None]
            else:
                numbers = hlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
                update, values = op.operands[2], [op.operands[1]]
                dimensions = (tuple(numbers.update_window_dims),
                              tuple(numbers.inserted_window_dims),
                              tuple(numbers.scattered_dims_to_operand_dims),
                              numbers.index_vector_dim)
                window = _one_window(op, dimensions, read_only) if not reshaped else None
                if window is not None:  # its index computed on the host
                    starts, window_shape = window
                    values = []
            shape = tuple(ir.RankedTensorType(update.type).shape)
            if starts and op.name == "stablehlo.scatter":
                shape = window_shape
            values += [update] if reshaped else []
            chains[arg].append(Write(
                op.name[len("stablehlo."):], tuple(range(first, first + len(values))),
                dimensions, shape, reshaped, starts))
            exposed += values
    if exposed:
        with ir.InsertionPoint(ret):
            func.ReturnOp(returned + exposed, loc=ret.location)
        ret.erase()
        function = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            function.inputs, list(function.results) + [v.type for v in exposed]))
        main.attributes["res_attrs"] = ir.ArrayAttr.get(
            list(ir.ArrayAttr(main.attributes["res_attrs"]))
            + [ir.DictAttr.get({})] * len(exposed))
    return chains


def _one_window(scatter: Any, dimensions: tuple, read_only: set[int]
                ) -> tuple[tuple, tuple[int, ...]] | None:
    """A replacing scatter at one index of one dimension that the host can compute from
    the call's arguments (host_scalars.py): the window's starts and shape, else None."""
    from jax._src.lib.mlir import ir

    window_dims, inserted, to_operand, _ = dimensions
    indices = ir.RankedTensorType(scatter.operands[1].type)
    if math.prod(indices.shape) != 1 or len(to_operand) != 1:
        return None
    index = host_scalars.host_scalar(scatter.operands[1], read_only)
    if index is None:
        return None
    operand = ir.RankedTensorType(scatter.operands[0].type).shape
    updates = ir.RankedTensorType(scatter.operands[2].type).shape
    sizes = iter(updates[d] for d in window_dims)
    shape = tuple(1 if d in inserted else next(sizes) for d in range(len(operand)))
    return tuple(index if d == to_operand[0] else 0 for d in range(len(operand))), shape


def _constant(value: Any) -> int | None:
    """A start index's value when it is a constant."""
    from jax._src.lib.mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "stablehlo.constant":
        return None
    return int(ir.DenseIntElementsAttr(owner.attributes["value"])[0])


def _replaces(scatter: Any) -> bool:
    """A scatter of one operand that writes its updates (no combining) with no batching
    dimensions, each scattered dimension an inserted one: one window per index."""
    from jax._src.lib.mlir.dialects import hlo

    if len(scatter.operands) != 3:
        return False
    numbers = hlo.ScatterDimensionNumbers(scatter.attributes["scatter_dimension_numbers"])
    if list(numbers.input_batching_dims) or \
            not set(numbers.scattered_dims_to_operand_dims) <= set(numbers.inserted_window_dims):
        return False
    body = scatter.regions[0].blocks[0]
    (ret, *rest) = list(body.operations)
    return not rest and len(ret.operands) == 1 and ret.operands[0] == body.arguments[1]


