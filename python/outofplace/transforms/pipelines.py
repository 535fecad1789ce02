"""Our Python passes and named pipelines, mixed with any torch-mlir or MLIR pass.

A textual pipeline `builtin.module(inplace-to-outofplace, canonicalize, ...)` is split into
its top-level elements: our names become Python passes (`PassManager.add(callable)`) or
expand to their pipelines, and every other element goes to MLIR's own parser.
"""

from __future__ import annotations

import logging
from typing import Callable

from torch_mlir import ir, passmanager

from . import (bfloat16_state_as_bits, collectives,  # noqa: F401
               composites_as_kernel_calls,
               convolutions_as_kernel_calls,
               decompose_diagonal, dots_as_kernel_calls, dynamic_broadcasts,
               dynamic_shapes, flatten_state, fold_constants, fold_empty_tensors,
               fold_transposes_into_dots, inplace_to_outofplace,
               kernel_calls, kernel_results_as_state,
               lower_regions, lower_updates, narrow_indices, refuse_unknown_shapes,
               pointwise_as_kernel_calls, round_through_float32, scatter_barriers,
               sharding,
               small_convolutions_as_dots, split_bounds_check, squeeze_state,
               stablehlo_constants, transposed_kernel_operands,
               vector_dots_weight_first,
               verify_stablehlo)  # (they register passes)
from .upstream import (fill_tensor, fmod, max_pool_indices,  # noqa: F401
                       nan_order, negative_indices, shield_constants, static_slices,
                       strip_constant_shields, unsigned_integers)
from .upstream import iree as iree_workarounds
from .. import progress
from ..context import load_torch_conversion
from . import registry
from .registry import PASSES, PIPELINES, Pass, register_pass, register_pipeline  # noqa: F401

# torch-mlir's own pipelines from value-semantic torch IR to StableHLO, which do the bulk
# of the lowering; outofplace-refuse-unknown-shapes runs between them.
TORCH_TO_STABLEHLO = ("torchdynamo-export-to-torch-backend-pipeline",
                      "torch-backend-to-stablehlo-backend-pipeline")

register_pipeline(
    "outofplace-lower-to-stablehlo",
    ["outofplace-lower-regions",
     "outofplace-fold-empty-tensors", "outofplace-decompose-diagonal",
     "outofplace-lower-updates", "outofplace-lower-collectives", "outofplace-kernel-calls",
     "outofplace-upstream-static-slices",
     "outofplace-upstream-wrap-negative-indices", "outofplace-upstream-fill-tensor",
     "outofplace-fold-constants", "outofplace-upstream-fmod",
     "outofplace-shield-constants",
     TORCH_TO_STABLEHLO[0], "outofplace-refuse-unknown-shapes",
     TORCH_TO_STABLEHLO[1],
     "outofplace-stablehlo-constants", "outofplace-round-through-float32",
     # dynamic dimensions: shape computations as StableHLO (get_dimension_size)
     "outofplace-dynamic-shapes", "func.func(shape-legalize-to-stablehlo)",
     "reconcile-unrealized-casts",
     "outofplace-dynamic-broadcasts",
     "outofplace-strip-constant-shields",
     "outofplace-upstream-unsigned-integers",
     "outofplace-upstream-max-pool-indices",
     "outofplace-upstream-nan-order",
     "outofplace-name-kernel-results",
     "outofplace-verify-stablehlo",
     # where the module asks for them (its attributes): on the StableHLO
     "outofplace-split-bounds-check", "outofplace-sharding"],
    "Lower value-semantic torch IR to pure StableHLO (the checked mode's flags split "
    "off and the shardings added where the module asks for them)")
register_pipeline(
    "inplace-to-stablehlo-pipeline",
    ["inplace-to-outofplace", "outofplace-lower-to-stablehlo"],
    "Mutable torch IR all the way to StableHLO with input/output aliases (what "
    "`outofplace.compile` runs)")
register_pipeline(
    "legalize-for-iree", iree_workarounds.PASSES,
    "The StableHLO the IREE engine compiles: IREE 3.13's bugs worked around",
    "what backends/iree/ runs on a module before IREE compiles it; each pass is a "
    "workaround of an IREE bug, pinned by a canary (transforms/upstream/iree/)")


def in_pipeline_order() -> list:
    """Our passes in the order the whole pipeline runs them, then the others by name
    (whichever module registered first), then the pipelines: the order of
    `outofplace-opt --help` and docs/passes.md."""
    order = [e for e in pipeline_elements(
        "builtin.module(inplace-to-stablehlo-pipeline, legalize-for-iree)") if e in PASSES]
    return [PASSES[name] for name in order] + \
        [PASSES[name] for name in sorted(PASSES) if name not in order] + \
        list(PIPELINES.values())


class PipelineError(Exception):
    """A pipeline that cannot be parsed or that failed while running; `diagnostic` is the
    first error diagnostic (its `.location`, `.message`) of a failure in MLIR's or
    torch-mlir's passes, None for one of ours (each is verified as it ends)."""

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
            expanded.extend(_expand(PIPELINES[element].elements))
        else:
            expanded.append(element)
    return expanded


def _python_pass(registered: Pass, options: dict[str, str],
                 failures: list[BaseException]) -> Callable[[ir.Operation, object], None]:
    def run(op: ir.Operation, pass_: object) -> None:
        try:
            with op.context, progress.stage(registered.argument, logging.DEBUG):
                # (a pass may run outside the caller's `with context`)
                registered.run(op.operation, options)
                try:  # here, so that invalid IR is ours, not the next (torch-mlir) pass's
                    op.operation.verify()
                except ir.MLIRError as error:
                    raise PipelineError(f"'{registered.argument}' left invalid IR: "
                                        f"{_first_diagnostic(error)}") from None
        except Exception as error:  # reported after PassManager.run returns
            failures.append(error)
            pass_.signal_pass_failure()  # type: ignore[attr-defined]
    run.__name__ = registered.argument
    return run


def _our_element(element: str) -> tuple[Pass, dict[str, str]] | None:
    """Our pass named by `element` (`name` or `name{option=value ...}`) with its options;
    None for any other pass."""
    name = element.split("(")[0].split("{")[0].strip()
    if name in PIPELINES:  # (a pipeline's plain name was expanded)
        raise PipelineError(f"'{name}' takes no options")
    if name not in PASSES:
        return None
    registered = PASSES[name]
    _, brace, rest = element.partition("{")
    if "(" in element or brace and not rest.rstrip().endswith("}"):
        raise PipelineError(f"malformed options of '{name}': '{element}'")
    known = {option.name: option for option in registered.options}
    options = {}
    for item in rest.rstrip()[:-1].split() if brace else []:
        key, equals, value = item.partition("=")
        option = known.get(key)
        if option is None or not equals:
            takes = ", ".join(known) or "no options"
            raise PipelineError(f"'{name}' has no option '{item}' (it takes {takes})")
        if value not in option.choices:
            raise PipelineError(f"option '{key}' of '{name}' is one of "
                                f"{', '.join(option.choices)}, not '{value}'")
        options[key] = value
    return registered, options


def build_pass_manager(text: str, context: ir.Context, failures: list[BaseException]
                       ) -> passmanager.PassManager:
    """A PassManager for a textual pipeline mixing our passes with MLIR's."""
    load_torch_conversion(context)  # before the pass manager runs multithreaded
    with context:
        pm = passmanager.PassManager("builtin.module")
        for element in pipeline_elements(text):
            ours = _our_element(element)
            if ours is not None:
                registered, options = ours
                pm.add(_python_pass(registered, options, failures),
                       name=registered.argument, argument=registered.argument)
                continue
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


registry.run_pipeline = run_pipeline


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
