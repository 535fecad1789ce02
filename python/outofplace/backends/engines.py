"""The engines a compiled program runs on, by name.

Each engine is `compile(stablehlo, io_map, options) -> Executable`: the program's
StableHLO text, its io_map (written argument -> the result holding its new value) and a
dict of options: "names" (one per argument of main), "inputs" and "results" ((shape,
dtype) each) and "cache" (the compile cache, compile_cache.py; None: the environment).
An `Executable` is called on main's arguments, the caller's tensors:

    results = executable(inputs)  # runs main; every written argument holds its new value

It writes each written argument's new value into the caller's tensor itself (in place
where the engine can, else a copy) and returns one entry per result of main, where the
result holding a written argument's new value (`io_map[argument]`) is that caller's
tensor itself (`results[io_map[a]] is inputs[a]`), never a copy or None; every other
result is a tensor of its own. Every engine keeps it: the interpreter, xla (and its
planned call, backends/planned_call.cpp), iree, and the mesh engine (backends/spmd,
which also takes "mesh" and "specs"; its planned call, sharded_call.cpp);
test_engines.py checks it. `Compiled.run` looks the engine up here.
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
