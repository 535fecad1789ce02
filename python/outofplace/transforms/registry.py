"""The registry of our passes: each module registers its pass where it defines it, with
its options; pipelines.py runs them by name and docs/passes.md is generated from here
(tools/passes_doc.py).

    @register_pass("outofplace-lower-updates", "Lower update ops to StableHLO",
                   options=[Option("strided", "cheaper", ("cheaper", "scatter", "select"),
                                   "how a strided box is written")])
    def lower_updates(module, strided="cheaper"): ...

An option is given in a pipeline as `outofplace-lower-updates{strided=scatter}` and
reaches the function as a keyword argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch_mlir import ir

PassFn = Callable[..., object]


@dataclass(frozen=True)
class Option:
    """A pass option: its name in the pipeline text (and, with `-` as `_`, the keyword
    argument), its default, the values it takes and what it chooses."""
    name: str
    default: str
    choices: tuple[str, ...]
    help: str


@dataclass(frozen=True)
class Pass:
    argument: str
    fn: PassFn
    summary: str
    details: str = ""
    options: tuple[Option, ...] = ()

    def run(self, module: ir.Operation, given: dict[str, str]) -> None:
        self.fn(module, **{k.replace("-", "_"): v for k, v in given.items()})


@dataclass(frozen=True)
class Pipeline:
    argument: str
    elements: list[str]
    summary: str
    details: str = ""


PASSES: dict[str, Pass] = {}
PIPELINES: dict[str, Pipeline] = {}
# Runs a textual pipeline on a module: pipelines.run_pipeline, set when pipelines.py is
# imported, for a pass that lowers a part of the module as a program of its own
# (lower_regions.py) without importing pipelines.py, which imports every pass.
run_pipeline: Callable[[ir.Module, str], None] | None = None


def register_pass(argument: str, summary: str, details: str = "",
                  options: list[Option] | tuple[Option, ...] = ()
                  ) -> Callable[[PassFn], PassFn]:
    """Registers the decorated function, which takes the module operation (and its
    options as keyword arguments), as the pass `argument`."""
    def register(fn: PassFn) -> PassFn:
        PASSES[argument] = Pass(argument, fn, summary, details, tuple(options))
        return fn
    return register


def register_pipeline(argument: str, elements: list[str], summary: str,
                      details: str = "") -> None:
    PIPELINES[argument] = Pipeline(argument, list(elements), summary, details)
