"""The engines a compiled program runs on, by name.

Each engine is `compile(stablehlo, io_map, options) -> Executable`: the program's
StableHLO text, its io_map (written argument -> the result holding its new value) and a
dict of options: "names" (one per argument of main), "inputs" and "results" ((shape,
dtype) each) and "cache" (the compile cache, compile_cache.py; None: the environment).
An `Executable` is called on main's arguments, the caller's tensors:

    results = executable(inputs)  # runs main; every written argument holds its new value

It writes each written argument's new value into the caller's tensor itself (in place
where the engine can, else a copy), so that the result it returns for a written argument
is only informative (XLA returns None there). `Compiled.run` looks the engine up here;
the mesh engine (backends/spmd, which also takes "mesh" and "specs") keeps the same
contract.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from . import interpreter, iree, xla


class Executable(Protocol):
    def __call__(self, inputs: list[torch.Tensor]) -> list[Any]: ...


Compile = Callable[[str, dict[int, int], dict[str, Any]], Executable]

ENGINES: dict[str, Compile] = {"xla": xla.compile, "iree": iree.compile,
                               "interpreter": interpreter.compile}


def compile(engine: str, stablehlo: str, io_map: dict[int, int],
            options: dict[str, Any]) -> Executable:
    """The program compiled for `engine` (a name of ENGINES)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine '{engine}': use {', '.join(ENGINES)}")
    return ENGINES[engine](stablehlo, io_map, options)
