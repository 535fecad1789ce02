"""Programs whose parameters and buffers are on the meta device (docs/models.md, "Weights
too big for the host: compile on meta").

A model built under `with torch.device("meta"):` holds shapes, dtypes and strides and no
data. Tracing needs no more: torch.export reads every parameter and buffer as a fake
tensor. But a fake tensor of a meta tensor is on the meta device, and the program traced
would be another one than the CPU program the caller runs once the weights are loaded:
`torch.arange(n, device=x.device)` would make meta tensors, an op mixing a meta weight
and a CPU input would be refused. `traced_as_cpu` makes each meta tensor's fake a CPU
tensor, so the trace is the CPU program's; its values stay unknown, and whatever would
read them fails loudly (`refuse_meta_constant`).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorConverter

from ..errors import UnsupportedMutationError

_CPU = torch.device("cpu")


@contextlib.contextmanager
def traced_as_cpu() -> Iterator[None]:
    """While active, the fake tensor torch.export makes of a meta tensor (a parameter, a
    buffer, a tensor a plain Python object holds) is a CPU tensor."""
    original = FakeTensorConverter.from_real_tensor

    def from_real_tensor(self: Any, fake_mode: Any, t: torch.Tensor, *args: Any,
                         **kwargs: Any) -> FakeTensor:
        fake = original(self, fake_mode, t, *args, **kwargs)
        if t.is_meta and not isinstance(t, FakeTensor) and fake.fake_device.type == "meta":
            fake.fake_device = _CPU
        return fake

    FakeTensorConverter.from_real_tensor = from_real_tensor
    try:
        yield
    finally:
        FakeTensorConverter.from_real_tensor = original


def refuse_meta_constant(name: str, value: torch.Tensor) -> None:
    """Refuses a tensor the program takes as a constant, its values part of the program
    (an inline literal), when it is on the meta device: it has no values."""
    if isinstance(value, torch.Tensor) and value.is_meta:
        raise UnsupportedMutationError(
            "torch.export", f"the program reads `{name}` as a constant (a tensor that "
            "is neither a parameter nor a buffer of the module, nor an argument: its "
            "values become part of the compiled program), and it is on the meta device, "
            "without values: make it a buffer (read at every call), or materialise it "
            "before compiling")


def refuse_meta_device(error: RuntimeError) -> None:
    """Refuses a trace that failed on a tensor the program made on the meta device: with
    a device it holds as a value (HF's StaticCache records the device it was built on),
    it is not the CPU program, and no call could run it."""
    text = str(error)
    if re.search(r"\bmeta\b", text) and "device" in text:
        raise UnsupportedMutationError(
            "torch.export", "the program makes or moves a tensor to the meta device (a "
            "device it holds as a value, recorded when it was built under "
            "torch.device('meta')), which no call can run: build what holds the program's "
            f"state on the CPU (transformers' TorchExportableModuleWithStaticCache(..., "
            f"device='cpu')), only the weights on meta ({text.splitlines()[0]})") from error
