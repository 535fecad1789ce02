"""XLA through jaxlib (the `xla` extra): the CPU engine and the HLO module proto.

Compiling the StableHLO text with XLA turns `tf.aliasing_output` into the HLO module's
`input_output_alias`, so the buffers of mutated arguments are donated: XLA updates a
KV cache in place instead of copying it.

XLA:CPU (jaxlib 0.10.2) can fuse a read of a buffer into the dynamic-update-slice that
updates that buffer in place when the two reach it through different bitcasts, and then
overwrites elements before it reads them (plain JAX programs hit it too; the example is in
docs/reliability.md). `compile_for_cpu` looks for such a fusion in the optimized HLO and,
when it finds one, compiles again without the fusion pass.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from . import hlo_proto


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


def compile_for_cpu(stablehlo: str) -> Any:
    """The loaded XLA:CPU executable of a StableHLO module, safe from the misfusion above."""
    _jax()
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    backend = xla_bridge.get_backend("cpu")
    devices = xla_client.DeviceList((backend.local_devices()[0],))
    executable = backend.compile_and_load(stablehlo, devices, xla_client.CompileOptions())
    if not any(_reads_updated_buffer_through_another_alias(module)
               for module in executable.hlo_modules()):
        return executable
    options = xla_client.CompileOptions()
    options.env_option_overrides = [("xla_disable_hlo_passes", "fusion")]
    return backend.compile_and_load(stablehlo, devices, options)


def _reads_updated_buffer_through_another_alias(module: Any) -> bool:
    """Whether a fused in-place update's buffer is also read through another bitcast of it.

    In a fusion, a dynamic-update-slice or scatter whose operand is (a chain of bitcasts
    of) a parameter writes that parameter's buffer in place. XLA's fusion pass checks the
    other users of that operand itself; users of the parameter or of another bitcast of
    it are reads of the same memory it does not check.
    """
    from jax._src.lib import xla_client

    opcode = xla_client.hlo.HloOpcode
    unfused = {computation.name for computation in module.make_nonfusion_computations()}
    for computation in module.computations():
        if computation.name in unfused:
            continue
        for update in computation.instructions():
            if update.opcode not in (opcode.kDynamicUpdateSlice, opcode.kScatter):
                continue
            target = update.operands()[0]
            path = [target]
            while path[-1].opcode == opcode.kBitcast:
                path.append(path[-1].operands()[0])
            if path[-1].opcode != opcode.kParameter:
                continue
            on_path = {op.name for op in path}
            aliases = list(path[1:])
            while aliases:
                alias = aliases.pop()
                for user in alias.users():
                    if user.name in on_path:
                        continue
                    if user.opcode != opcode.kBitcast:
                        return True
                    aliases.append(user)
    return False


def alias_problems(stablehlo: str, io_map: dict[int, int]) -> list[str]:
    """What XLA:CPU's optimized program does not prove of `io_map`; [] when it proves all:
    its input_output_alias is io_map (the buffer of each mutated argument is donated to its
    result) and no `copy` reads a donated parameter (XLA did not keep a copy of the old
    value, which it does when the update cannot happen in place). A program that copies
    the state itself (`old = x.clone()`) is reported too: the check cannot tell the two
    copies apart."""
    problems = []
    for module in compile_for_cpu(stablehlo).hlo_modules():
        proto = module.as_serialized_hlo_module_proto()
        problems += hlo_proto.alias_problems(proto, io_map)
        problems += [f"argument {argument}: XLA copies the donated buffer"
                     for argument in sorted(hlo_proto.copied_parameters(proto))
                     if argument in io_map]
    return problems


class CpuExecutable:
    """A StableHLO module compiled once for XLA:CPU."""

    def __init__(self, stablehlo: str) -> None:
        from jax._src import xla_bridge

        self._jax = _jax()
        self._device = xla_bridge.get_backend("cpu").local_devices()[0]
        self._executable = compile_for_cpu(stablehlo)

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
