"""XLA through jaxlib (the `xla` extra): the CPU engine and the HLO module proto.

Compiling the StableHLO text with XLA turns `tf.aliasing_output` into the HLO module's
`input_output_alias`, so the buffers of mutated arguments are donated: XLA updates a
KV cache in place instead of copying it.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch


def available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _jax() -> Any:
    try:
        import jax
    except ImportError as error:
        raise RuntimeError("the XLA engine needs the 'xla' extra: "
                           "pip install 'outofplace[xla]'") from error
    jax.config.update("jax_enable_x64", True)  # or int64 inputs are narrowed
    return jax


def hlo_module_proto(stablehlo: str) -> bytes:
    """The serialized `xla.HloModuleProto` of a StableHLO module, aliases included."""
    _jax()
    from jax._src.lib import _jax as jaxlib

    computation = jaxlib.mlir.mlir_module_to_xla_computation(
        stablehlo, use_tuple_args=False, return_tuple=False)
    return computation.as_serialized_hlo_module_proto()


class CpuExecutable:
    """A StableHLO module compiled once for XLA:CPU."""

    def __init__(self, stablehlo: str) -> None:
        jax = _jax()
        from jax._src import xla_bridge
        from jax._src.lib import xla_client

        self._jax = jax
        self._device = xla_bridge.get_backend("cpu").local_devices()[0]
        self._executable = xla_bridge.get_backend("cpu").compile_and_load(
            stablehlo, xla_client.DeviceList((self._device,)), xla_client.CompileOptions())

    def __call__(self, inputs: list[torch.Tensor], result_dtypes: list[torch.dtype]
                 ) -> list[torch.Tensor]:
        arrays = [self._jax.device_put(_to_numpy(t), self._device) for t in inputs]
        results = self._executable.execute(arrays)
        return [_from_numpy(np.asarray(r), d) for r, d in zip(results, result_dtypes)]


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    data = tensor.detach().contiguous().cpu()
    if data.dtype == torch.bfloat16:
        import ml_dtypes  # a dependency of jax

        return data.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return data.numpy()


def _from_numpy(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bfloat16:
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy()).to(dtype)
