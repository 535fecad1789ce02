"""The engines a compiled program runs on, by name.

Each engine is `compile(stablehlo, io_map, options) -> Executable`: the program's
StableHLO text, its io_map (written argument -> the result holding its new value) and
`Options`. An `Executable` is called on main's arguments, the caller's tensors:

    results = executable(inputs)  # runs main; every written argument holds its new value

It writes each written argument's new value into the caller's tensor itself (in place
where the engine can, else a copy), so that the result it returns for a written argument
is only informative (XLA returns None there). `Compiled.run` looks the engine up here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

from . import interpreter, xla

TensorTypes = list[tuple[tuple[int, ...], torch.dtype]]


@dataclass(frozen=True)
class Options:
    """What an engine may need besides the program and its io_map."""

    input_names: list[str]  # one per argument of main: what errors and reports name
    input_types: TensorTypes  # (shape, dtype) per argument of main
    result_types: TensorTypes  # (shape, dtype) per result of main
    cache: bool | None = None  # the compile cache (compile_cache.py); None: the environment


class Executable(Protocol):
    def __call__(self, inputs: list[torch.Tensor]) -> list[Any]: ...


Compile = Callable[[str, dict[int, int], Options], Executable]


def _xla(stablehlo: str, io_map: dict[int, int], options: Options) -> Executable:
    """XLA:CPU (backends/xla.py): written arguments updated in their own memory."""
    return xla.CpuExecutable(stablehlo, options.input_names, io_map, options.input_types,
                             options.result_types, cache=options.cache)


def _interpreter(stablehlo: str, io_map: dict[int, int], options: Options) -> Executable:
    """The StableHLO reference interpreter (backends/interpreter.py): new values copied
    into the written arguments."""
    return interpreter.Executable(stablehlo, io_map, [d for _, d in options.result_types])


ENGINES: dict[str, Compile] = {"xla": _xla, "interpreter": _interpreter}


def compile(engine: str, stablehlo: str, io_map: dict[int, int],
            options: Options) -> Executable:
    """The program compiled for `engine` (a name of ENGINES)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine '{engine}': use {', '.join(ENGINES)}")
    return ENGINES[engine](stablehlo, io_map, options)
