"""Python numbers of an optimizer step kept tensors while tracing (training.py's
`OptimizerSteps` enters these modes): `.item()` as the 0-d tensor itself, and foreach
ops given lists of such numbers as the 1-d tensor of them."""

from __future__ import annotations

import traceback
from typing import Any, Callable

import torch

from .runtime_positions import user_line


class ItemAsTensor(torch.overrides.TorchFunctionMode):
    """`t.item()` while tracing is the 0-d tensor itself, as wide as the Python number
    (float64, int64, bool): arithmetic on it stays tensor arithmetic read at every call,
    where tracing would bake in the value it had. An op that needs a Python number then
    fails the trace; `lines` keeps where each `.item()` was, to name it."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.item and not kwargs and len(args) == 1:
            value = args[0]
            self.lines.append(user_line(traceback.extract_stack()))
            wide = torch.float64 if value.is_floating_point() else \
                torch.bool if value.dtype == torch.bool else \
                torch.complex128 if value.is_complex() else torch.int64
            # prims' convert marks the number for optimizer_ops.numbers_at_their_ops_dtype
            return torch.ops.prims.convert_element_type.default(value.reshape(()), wide)
        return func(*args, **kwargs)


class ScalarTensorLists(torch.overrides.TorchFunctionMode):
    """`torch._foreach_addcdiv_(p, a, b, scalars)` with one scalar per tensor in a 1-d
    tensor (Adam's foreach step when traced) as `p + scalars[i] * a / b` with lists of 0-d
    tensors: tracing the op itself fails ("Expected scalars to be on CPU, got meta").

    Eager's foreach steps pass Python numbers computed from steps read with `.item()`,
    which stay 0-d tensors here: a list of tensors is no `Scalar[]`, and the call fails
    parsing its arguments, before any mode sees it. While entered, `torch._foreach_addc*`
    stack such a list into the 1-d tensor this mode takes."""

    _OPS = {torch._foreach_addcdiv_: (torch._foreach_div_, True),
            torch._foreach_addcdiv: (torch._foreach_div_, False),
            torch._foreach_addcmul_: (torch._foreach_mul_, True),
            torch._foreach_addcmul: (torch._foreach_mul_, False)}

    def __enter__(self) -> "ScalarTensorLists":
        self.originals = {op.__name__: op for op in self._OPS}
        for name, op in self.originals.items():
            setattr(torch, name, _stacking_scalars(op))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for name, op in self.originals.items():
            setattr(torch, name, op)
        if self in torch.overrides._get_current_function_mode_stack():
            super().__exit__(*exc)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in self._OPS and len(args) == 4 and isinstance(args[3], torch.Tensor):
            combine, inplace = self._OPS[func]
            terms = torch._foreach_mul(args[1], list(args[3].unbind()))
            combine(terms, args[2])
            if inplace:
                return torch._foreach_add_(args[0], terms)
            return torch._foreach_add(args[0], terms)
        return func(*args, **kwargs)


def _stacking_scalars(op: Callable[..., Any]) -> Callable[..., Any]:
    def stacking(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 4 and isinstance(args[3], (list, tuple)) and args[3] and \
                all(isinstance(s, torch.Tensor) for s in args[3]):
            args = (*args[:3], torch.stack([s.reshape(()) for s in args[3]]))
        return op(*args, **kwargs)
    return stacking
