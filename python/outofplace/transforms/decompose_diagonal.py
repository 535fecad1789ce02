"""`diagonal` as ops torch-mlir lowers, for reads and for writes through it.

torch-mlir lowers neither `aten.diagonal` nor `aten.diagonal_scatter` to StableHLO. With
static sizes, the diagonal of dimensions (d1, d2) is a strided slice of the tensor with
d1 and d2 moved last and flattened together: element (i, i + offset) of an n x m matrix
sits at i * (m + 1) + offset of its row-major flattening.

    %d = torch.aten.diagonal %x, %offset, %d1, %d2
    =>  %p = permute %x, [others..., d1, d2];  %f = view %p, [..., n * m]
        %d = slice.Tensor %f, -1, start, end, m + 1

A write through the diagonal is the same path backwards, with a slice_scatter.
The pass `outofplace-decompose-diagonal` rewrites the reads; views.py the writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from .. import torch_types
from ..errors import UnsupportedMutationError
from ..indexing import inverse_permutation
from ..ir_utils import all_operations, constant_int, int_list, torch_constant
from .registry import register_pass


@dataclass(frozen=True)
class _Diagonal:
    sizes: tuple[int, ...]  # of the tensor the diagonal is taken of
    permutation: list[int]  # moves d1, d2 last
    start: int  # in the flattened last dimension
    length: int
    step: int

    @property
    def permuted(self) -> list[int]:
        return [self.sizes[d] for d in self.permutation]

    @property
    def flat(self) -> list[int]:
        *batch, n, m = self.permuted
        return [*batch, n * m]

    @property
    def inverse(self) -> list[int]:
        return inverse_permutation(self.permutation)


def _plan(op: ir.Operation, source: ir.Value) -> _Diagonal:
    sizes = torch_types.TensorType.of(source.type).sizes
    offset, dim1, dim2 = (constant_int(v) for v in op.operands[1:4])
    if sizes is None or any(d < 0 for d in sizes) or None in (offset, dim1, dim2):
        raise UnsupportedMutationError.at(
            op, "diagonal of a dynamic shape or with runtime arguments")
    rank = len(sizes)
    dim1, dim2 = dim1 % rank, dim2 % rank
    permutation = [d for d in range(rank) if d not in (dim1, dim2)] + [dim1, dim2]
    n, m = sizes[dim1], sizes[dim2]
    if offset >= 0:
        length, start = max(0, min(n, m - offset)), offset
    else:
        length, start = max(0, min(n + offset, m)), -offset * m
    return _Diagonal(tuple(sizes), permutation, start if length else 0, length, m + 1)


def _tensor(like: ir.Value, sizes: list[int]) -> ir.Type:
    t = torch_types.TensorType.of(like.type)
    return torch_types.TensorType(tuple(sizes), t.dtype, True).to_ir(like.context)


def _op(name: str, operands: list[ir.Value], result: ir.Type, loc: ir.Location,
        ip: ir.InsertionPoint) -> ir.Value:
    return ir.Operation.create(name, results=[result], operands=operands, loc=loc,
                               ip=ip).result


def _flatten(x: ir.Value, plan: _Diagonal, loc: ir.Location, ip: ir.InsertionPoint
             ) -> ir.Value:
    permuted = _op("torch.aten.permute", [x, int_list(plan.permutation, loc, ip)],
                   _tensor(x, plan.permuted), loc, ip)
    return _op("torch.aten.view", [permuted, int_list(plan.flat, loc, ip)],
               _tensor(x, plan.flat), loc, ip)


def _bounds(plan: _Diagonal, loc: ir.Location, ip: ir.InsertionPoint) -> list[ir.Value]:
    last = len(plan.sizes) - 2
    end = plan.start + (plan.length - 1) * plan.step + 1 if plan.length else 0
    return [torch_constant("int", v, loc, ip) for v in (last, plan.start, end, plan.step)]


def read(op: ir.Operation, x: ir.Value, loc: ir.Location, ip: ir.InsertionPoint
         ) -> ir.Value:
    """The diagonal `op` takes, of `x`."""
    plan = _plan(op, x)
    flat = _flatten(x, plan, loc, ip)
    result = [*plan.flat[:-1], plan.length]
    return _op("torch.aten.slice.Tensor", [flat, *_bounds(plan, loc, ip)],
               _tensor(x, result), loc, ip)


def write_back(op: ir.Operation, base: ir.Value, src: ir.Value, loc: ir.Location,
               ip: ir.InsertionPoint) -> ir.Value:
    """`base` with the diagonal `op` takes replaced by `src`."""
    plan = _plan(op, base)
    flat = _flatten(base, plan, loc, ip)
    updated = _op("torch.aten.slice_scatter", [flat, src, *_bounds(plan, loc, ip)],
                  flat.type, loc, ip)
    permuted = _op("torch.aten.view", [updated, int_list(plan.permuted, loc, ip)],
                   _tensor(base, plan.permuted), loc, ip)
    return _op("torch.aten.permute", [permuted, int_list(plan.inverse, loc, ip)],
               torch_types.value_type(base.type), loc, ip)


@register_pass(
    "outofplace-decompose-diagonal", "Rewrite diagonal as permute, view and a strided slice",
    '`diagonal` → `permute`, `view` and a strided `slice.Tensor` (torch-mlir does not '
    'lower `diagonal`)')
def decompose_diagonal(module: ir.Operation) -> None:
    """Every value-semantic `torch.aten.diagonal` as permute, view and strided slice."""
    for op in all_operations(module):
        if op.name != "torch.aten.diagonal" or \
                not torch_types.is_value_tensor(op.result.type):
            continue
        with op.location:
            op.result.replace_all_uses_with(
                read(op, op.operands[0], op.location, ir.InsertionPoint(op)))
        op.erase()
