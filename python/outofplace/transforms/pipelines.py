"""Our Python passes and named pipelines, mixed with any torch-mlir or MLIR pass.

A textual pipeline `builtin.module(inplace-to-outofplace, canonicalize, ...)` is split into
its top-level elements: our names become Python passes (`PassManager.add(callable)`) or
expand to their pipelines, and every other element goes to MLIR's own parser.
"""

from __future__ import annotations

from typing import Callable

from torch_mlir import ir, passmanager

from . import lowering
from ..context import load_torch_conversion
from .diagonal import decompose_diagonal
from .empty_tensors import fold_empty_tensors
from .constant_folding import fold_constants
from .constant_shields import shield_constants, strip_constant_shields
from .inplace_to_outofplace import inplace_to_outofplace
from .lower_updates import lower_updates

PassFn = Callable[[ir.Operation], None]

PASSES: dict[str, tuple[PassFn, str]] = {}
PIPELINES: dict[str, tuple[list[str], str]] = {}


def register_pass(argument: str, description: str) -> Callable[[PassFn], PassFn]:
    def register(fn: PassFn) -> PassFn:
        PASSES[argument] = (fn, description)
        return fn
    return register


def register_pipeline(argument: str, elements: list[str], description: str) -> None:
    PIPELINES[argument] = (elements, description)


# Our passes, in pipeline order; each takes the module operation. (inplace_to_outofplace
# also returns the io_map, which a pass has no use for.)
for _argument, _fn, _description in [
        ("inplace-to-outofplace", inplace_to_outofplace,
         "Rewrite in-place ops and writes through views to value semantics"),
        ("outofplace-fold-empty-tensors", fold_empty_tensors,
         "Replace tensors without elements by empty literals"),
        ("outofplace-decompose-diagonal", decompose_diagonal,
         "Rewrite diagonal as permute, view and a strided slice"),
        ("outofplace-lower-updates", lower_updates,
         "Lower update ops to dynamic_update_slice, scatter or pad+select"),
        ("outofplace-fold-constants", fold_constants,
         "Fold constant tensor computations with PyTorch (torch-mlir folds some wrongly)"),
        ("outofplace-shield-constants", shield_constants,
         "Hide tensor literals from torch-mlir's folders behind optimization barriers"),
        ("outofplace-strip-constant-shields", strip_constant_shields,
         "Remove the constant shields and fold reshapes and broadcasts of constants"),
        ("outofplace-stablehlo-constants", lowering.stablehlo_constants,
         "Turn tensor arith.constant into stablehlo.constant"),
        ("outofplace-refuse-unknown-shapes", lowering.refuse_unknown_shapes,
         "Refuse tensors of unknown rank or size before the lowering to StableHLO"),
        ("outofplace-verify-stablehlo", lowering.check_pure_stablehlo,
         "Fail unless the module is pure StableHLO")]:
    register_pass(_argument, _description)(_fn)  # type: ignore[arg-type]
del _argument, _fn, _description


register_pipeline(
    "outofplace-lower-to-stablehlo",
    ["outofplace-fold-empty-tensors", "outofplace-decompose-diagonal",
     "outofplace-lower-updates", "outofplace-fold-constants",
     "outofplace-shield-constants",
     lowering.TORCH_TO_STABLEHLO[0], "outofplace-refuse-unknown-shapes",
     lowering.TORCH_TO_STABLEHLO[1],
     "outofplace-stablehlo-constants",
     "outofplace-strip-constant-shields",
     "outofplace-verify-stablehlo"],
    "Lower value-semantic torch IR to pure StableHLO")
register_pipeline(
    "inplace-to-stablehlo-pipeline",
    ["inplace-to-outofplace", "outofplace-lower-to-stablehlo"],
    "Mutable torch IR all the way to StableHLO with input/output aliases")


class PipelineError(Exception):
    """A pipeline that cannot be parsed or that failed while running; `diagnostic` is the
    first error diagnostic of a failed run (its `.location`, `.message`), else None."""

    def __init__(self, message: str, diagnostic: object = None) -> None:
        super().__init__(message)
        self.diagnostic = diagnostic


def split_top_level(text: str) -> list[str]:
    """Splits `a, b{x=1,y=2}, func.func(c, d)` at the commas outside brackets."""
    elements, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{char}' in pass pipeline")
        elif char == "," and depth == 0:
            elements.append(text[start:i].strip())
            start = i + 1
    if depth != 0:
        raise PipelineError("unbalanced brackets in pass pipeline")
    last = text[start:].strip()
    if last:
        elements.append(last)
    return [e for e in elements if e]


def pipeline_elements(text: str) -> list[str]:
    """The elements of `builtin.module(...)`, with our named pipelines expanded."""
    text = text.strip()
    prefix = "builtin.module("
    if not (text.startswith(prefix) and text.endswith(")")):
        raise PipelineError(
            f"expected a pipeline of the form 'builtin.module(...)', got '{text}'")
    return _expand(split_top_level(text[len(prefix):-1]))


def _expand(elements: list[str]) -> list[str]:
    expanded: list[str] = []
    for element in elements:
        if element in PIPELINES:
            expanded.extend(_expand(PIPELINES[element][0]))
        else:
            expanded.append(element)
    return expanded


def _python_pass(fn: PassFn, argument: str, failures: list[BaseException]
                 ) -> Callable[[ir.Operation, object], None]:
    def run(op: ir.Operation, pass_: object) -> None:
        try:
            with op.context:  # a pass may run outside the caller's `with context`
                fn(op.operation)
        except Exception as error:  # reported after PassManager.run returns
            failures.append(error)
            pass_.signal_pass_failure()  # type: ignore[attr-defined]
    run.__name__ = argument
    return run


def build_pass_manager(text: str, context: ir.Context, failures: list[BaseException]
                       ) -> passmanager.PassManager:
    """A PassManager for a textual pipeline mixing our passes with MLIR's."""
    load_torch_conversion(context)  # before the pass manager runs multithreaded
    with context:
        pm = passmanager.PassManager("builtin.module")
        for element in pipeline_elements(text):
            if element in PASSES:
                fn, _ = PASSES[element]
                pm.add(_python_pass(fn, element, failures), name=element, argument=element)
                continue
            name = element.split("(")[0].split("{")[0].strip()
            if name in PASSES or name in PIPELINES:
                raise PipelineError(f"'{name}' takes no options")
            try:
                pm.add(element)
            except ValueError as error:
                detail = str(error).strip().splitlines()[0]
                raise PipelineError(f"unknown or malformed pass '{element}': {detail}"
                                    ) from None
    return pm


def run_pipeline(module: ir.Module | ir.Operation, text: str,
                 print_ir_after_all: bool = False) -> None:
    """Runs a textual pipeline on `module`, raising the first pass's own error."""
    operation = module.operation if isinstance(module, ir.Module) else module
    failures: list[BaseException] = []
    pm = build_pass_manager(text, operation.context, failures)
    if print_ir_after_all:
        pm.enable_ir_printing(print_after_change=False)
    try:
        pm.run(operation)
    except ir.MLIRError as error:
        if failures:
            raise failures[0] from None
        diagnostics = getattr(error, "error_diagnostics", None)
        raise PipelineError(_first_diagnostic(error),
                            diagnostics[0] if diagnostics else None) from None
    if failures:
        raise failures[0]


def _first_diagnostic(error: ir.MLIRError) -> str:
    diagnostics = getattr(error, "error_diagnostics", None)
    if diagnostics:
        first = diagnostics[0]
        return f"{first.location}: {first.message}"
    return str(error).strip().splitlines()[0]


def lower_to_stablehlo(module: ir.Module) -> ir.Module:
    """Lowers a value-semantic torch module to pure StableHLO, in place, and returns it."""
    run_pipeline(module, "builtin.module(outofplace-lower-to-stablehlo)")
    return module
