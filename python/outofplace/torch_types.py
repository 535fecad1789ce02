"""Torch dialect tensor types: `!torch.tensor<[4,8],f32>` and `!torch.vtensor<[4,8],f32>`.

The wheel's bindings expose no Python classes for torch dialect types, so this module is
the one place that reads and builds them, from their textual form, with the bindings'
own parser (`ir.Type.parse`) doing the building.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch_mlir import ir

# The torch dialect's element type of each dtype, and the number (c10's ScalarType) its
# ops take for a dtype (`torch.aten.to.dtype %x, %int6`): torch_mlir.extras.fx_importer's
# tables (TORCH_DTYPE_TO_MLIR_TYPE_ASM, TORCH_DTYPE_TO_INT), whose import (ml_dtypes)
# would cost a tool that only runs passes half a second at each start; test_cli.py
# checks they are the same.
TORCH_DTYPE_TO_MLIR_TYPE_ASM = {
    torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
    torch.float64: "f64", torch.uint8: "ui8", torch.uint32: "ui32", torch.int8: "si8",
    torch.int16: "si16", torch.int32: "si32", torch.int64: "si64", torch.bool: "i1",
    torch.qint8: "!torch.qint8", torch.quint8: "!torch.quint8",
    torch.complex32: "complex<f16>", torch.complex64: "complex<f32>",
    torch.complex128: "complex<f64>", torch.float8_e5m2: "f8E5M2",
    torch.float8_e4m3fn: "f8E4M3FN", torch.float8_e5m2fnuz: "f8E5M2FNUZ",
    torch.float8_e4m3fnuz: "f8E4M3FNUZ", torch.float8_e8m0fnu: "f8E8M0FNU",
    torch.float4_e2m1fn_x2: "f4E2M1FN",
}
TORCH_DTYPE_TO_INT = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.complex32: 9,
    torch.complex64: 10, torch.bool: 11, torch.bfloat16: 15, torch.uint32: 28,
    torch.float8_e5m2: 23, torch.float8_e4m3fn: 24, torch.float8_e5m2fnuz: 25,
    torch.float8_e4m3fnuz: 26, torch.float8_e8m0fnu: 44, torch.float4_e2m1fn_x2: 45,
}

_NONVALUE = "!torch.tensor"
_VALUE = "!torch.vtensor"
_ASM_TO_DTYPE = {asm: dtype for dtype, asm in TORCH_DTYPE_TO_MLIR_TYPE_ASM.items()}


# Types are uniqued by their context, so a cached type stays the one it was (and keeps its
# context alive): reading a type's text once instead of on every check.
@functools.lru_cache(maxsize=8192)
def _kind(t: ir.Type) -> str | None:
    text = str(t)
    for kind in (_VALUE, _NONVALUE):
        if text == kind or text.startswith(kind + "<"):
            return kind
    return None


def is_tensor(t: ir.Type) -> bool:
    return _kind(t) is not None


def is_nonvalue_tensor(t: ir.Type) -> bool:
    """True for `!torch.tensor`: a tensor that may be mutated or alias a mutated tensor."""
    return _kind(t) == _NONVALUE


def is_value_tensor(t: ir.Type) -> bool:
    return _kind(t) == _VALUE


@dataclass(frozen=True)
class TensorType:
    """A torch dialect tensor type, split into its parts."""

    sizes: tuple[int, ...] | None  # None when unranked; -1 for a dynamic dimension
    dtype: torch.dtype | None  # None when unknown
    value_semantics: bool  # vtensor (True) or tensor (False)

    @staticmethod
    @functools.lru_cache(maxsize=8192)
    def of(t: ir.Type) -> "TensorType":
        kind = _kind(t)
        if kind is None:
            raise TypeError(f"not a torch tensor type: {t}")
        text = str(t)
        body = text[len(kind) + 1:-1] if text.endswith(">") else ""
        sizes: tuple[int, ...] | None = None
        dtype = None
        if body:
            dims, _, elem = body.rpartition(",")
            if dims.startswith("["):
                inner = dims[1:-1]
                sizes = tuple(-1 if d == "?" else int(d) for d in inner.split(",") if d)
            dtype = _ASM_TO_DTYPE.get(elem)
        return TensorType(sizes, dtype, kind == _VALUE)

    @property
    def is_empty(self) -> bool:
        """Whether the tensor is known to have no elements."""
        return self.sizes is not None and 0 in self.sizes

    def with_value_semantics(self, value: bool = True) -> "TensorType":
        return TensorType(self.sizes, self.dtype, value)

    def with_dtype(self, dtype: torch.dtype) -> "TensorType":
        return TensorType(self.sizes, dtype, self.value_semantics)

    def to_ir(self, context: ir.Context | None = None) -> ir.Type:
        kind = _VALUE if self.value_semantics else _NONVALUE
        if self.sizes is None and self.dtype is None:
            return ir.Type.parse(kind, context)
        dims = "*" if self.sizes is None else \
            "[" + ",".join("?" if d < 0 else str(d) for d in self.sizes) + "]"
        elem = "unk" if self.dtype is None else TORCH_DTYPE_TO_MLIR_TYPE_ASM[self.dtype]
        return ir.Type.parse(f"{kind}<{dims},{elem}>", context)


def value_type(t: ir.Type) -> ir.Type:
    """The `!torch.vtensor` twin of a tensor type."""
    return TensorType.of(t).with_value_semantics(True).to_ir(t.context)


def nonvalue_type(t: ir.Type) -> ir.Type:
    """The `!torch.tensor` twin of a tensor type."""
    return TensorType.of(t).with_value_semantics(False).to_ir(t.context)


_INT_BITS = {torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64}
# Element types numpy has no dtype for: handed over bit for bit as this integer type.
BITCAST_DTYPES = {torch.bfloat16: torch.int16}
_FLOATS = {torch.float16: ir.F16Type, torch.bfloat16: ir.BF16Type, torch.float32: ir.F32Type,
           torch.float64: ir.F64Type}


def element_type(dtype: torch.dtype, *, signless: bool) -> ir.Type:
    """The builtin element type of a dtype: signed integers (si64) inside torch literals,
    signless ones (i64) in StableHLO."""
    if dtype in _FLOATS:
        return _FLOATS[dtype].get()
    if dtype == torch.bool:
        return ir.IntegerType.get_signless(1)
    if dtype == torch.uint8:
        return ir.IntegerType.get_unsigned(8)
    if dtype in _INT_BITS:
        bits = _INT_BITS[dtype]
        return ir.IntegerType.get_signless(bits) if signless else \
            ir.IntegerType.get_signed(bits)
    raise TypeError(f"no element type for {dtype}")
