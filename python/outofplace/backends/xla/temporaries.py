"""Temporaries kept between calls: a program whose XLA:CPU temporaries glibc would map
fresh at every call writes its kernels' large results into buffers the executable keeps
(`kept`, the pass outofplace-kernel-results-as-state), passed again at each call
(`KeptTemporaries`).

XLA:CPU allocates a program's temporaries as one buffer at each call, on the thread
that runs the program, and frees it after. glibc serves an allocation over its largest
mmap threshold (32 MiB) with fresh pages from the kernel, zeroed at first touch, and
nothing a library can set in a running process changes that for the threads XLA runs
on (docs/backends.md). A ResNet-18 training step at 224x224 has 210 MB of them:
54,000 page faults a call. Its kernels' results (convolutions, batch norm, their
gradients) are most of those bytes; returned through donated arguments, they are
written into buffers that stay mapped from call to call.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from .buffers import owned_copy

logger = logging.getLogger("outofplace")

# glibc's largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit): a larger
# allocation is always mapped fresh.
MAPPED_FRESH = 32 << 20
# outofplace-kernel-results-as-state's choices tried in turn (its `results` option)
CANDIDATES = ("all", "at-peaks")
POLICY = f"kernel results kept over {MAPPED_FRESH}"  # (in cache keys, with CANDIDATES)

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)

Temporary = tuple[tuple[int, ...], str]  # (shape, torch dtype name)


def kept(text: str, executable: Any, options: dict[str, Any],
         compile: Callable[[str, dict[str, Any]], Any]
         ) -> tuple[Any, list[Temporary]] | None:
    """For a legalized module `text` compiled as `executable`: the executable
    (`compile`) of the module with its large kernel results kept
    (outofplace-kernel-results-as-state), and its kept temporaries; None when the
    temporaries are under `MAPPED_FRESH` or the module has no such result. Every large
    result is kept where that shrinks XLA's temporaries and holds at most twice their
    bytes between calls; else those alive where the most bytes are (`results=at-peaks`:
    a training step's activations, not its gradients, whose bytes XLA reuses), on the
    same terms; else none."""
    before = executable.get_compiled_memory_stats().temp_size_in_bytes
    if before < MAPPED_FRESH:
        return None
    for results in CANDIDATES:
        found = _with_results_kept(text, results)
        if found is None:
            return None
        new_text, temporaries = found
        held = sum(_nbytes(t) for t in temporaries)
        candidate = compile(new_text, options) if held <= 2 * before else None
        after = candidate.get_compiled_memory_stats().temp_size_in_bytes \
            if candidate is not None else 0
        if candidate is not None and after < before and after + held <= 2 * before:
            logger.info("outofplace: %d kernel results (%d MB) kept between calls: XLA's "
                        "temporaries %d MB -> %d MB", len(temporaries), held >> 20,
                        before >> 20, after >> 20)
            return candidate, temporaries
        logger.info("outofplace: XLA's temporaries of %d MB are mapped at each call; "
                    "keeping %s of its kernels' results (%d MB) would %s: not kept",
                    before >> 20, "all" if results == "all" else "those alive at its peaks",
                    held >> 20, f"leave {after >> 20} MB" if candidate is not None else
                    "hold more than twice that")
    return None


def _with_results_kept(text: str, results: str) -> tuple[str, list[Temporary]] | None:
    """`text` after outofplace-kernel-results-as-state{results=...}, and its kept
    temporaries; None when it keeps none (or one of a dtype a tensor cannot hold)."""
    from torch_mlir import ir

    from ...context import make_context
    from ...ir_utils import main_function
    from ...torch_types import element_type
    from ...transforms.kernel_results_as_state import TEMPORARY
    from ...transforms.pipelines import run_pipeline

    with make_context():
        module = ir.Module.parse(text)
        run_pipeline(module, "builtin.module(outofplace-kernel-results-as-state"
                             f"{{results={results}}})")
        main = main_function(module)
        if "arg_attrs" not in main.attributes:
            return None
        elements = {str(element_type(d, signless=True)): d for d in _DTYPES}
        temporaries = []
        for argument, attrs in zip(main.entry_block.arguments, main.arg_attrs):
            if TEMPORARY in ir.DictAttr(attrs):
                type_ = ir.RankedTensorType(argument.type)
                dtype = elements.get(str(type_.element_type))
                if dtype is None:
                    return None
                temporaries.append((tuple(type_.shape), str(dtype).removeprefix("torch.")))
        new_text = module.operation.get_asm()
    return (new_text, temporaries) if temporaries else None


def _nbytes(temporary: Temporary) -> int:
    shape, dtype = temporary
    return torch.Size(shape).numel() * getattr(torch, dtype).itemsize


class KeptTemporaries:
    """A loaded executable whose last arguments are its kept temporaries: its
    `execute_sharded` takes the program's own arguments, adds the temporaries' buffers
    (made at the first call), and its results' `consume_with_handlers` returns the
    program's own results, keeping the temporaries' (the same buffers: donated and
    aliased) for the next call. Anything else is the executable's."""

    def __init__(self, executable: Any, temporaries: list[Temporary]) -> None:
        from jax._src.lib import xla_client

        from .buffers import numpy_dtype
        from .client import device_sharding, load_jax

        self._executable = executable
        self.temporaries = temporaries
        self._arrays: list[Any] | None = None
        self._handlers = [xla_client.array_result_handler(
            load_jax().core.ShapedArray(shape, numpy_dtype(getattr(torch, dtype))),
            device_sharding(), committed=True, _skip_checks=True)
            for shape, dtype in temporaries]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._executable, name)

    def execute_sharded(self, arguments: list[Any]) -> "_Results":
        if self._arrays is None:  # the first call, or the last one failed
            self._arrays = [owned_copy(torch.empty(shape, dtype=getattr(torch, dtype)))
                            for shape, dtype in self.temporaries]
        arrays, self._arrays = self._arrays, None  # (donated: XLA's until it returns)
        return _Results(self, self._executable.execute_sharded([*arguments, *arrays]))


class _Results:
    """The results of a call of a `KeptTemporaries`."""

    def __init__(self, owner: KeptTemporaries, results: Any) -> None:
        self._owner, self._results = owner, results

    def consume_with_handlers(self, handlers: list[Any]) -> list[Any]:
        arrays = self._results.consume_with_handlers([*handlers, *self._owner._handlers])
        self._owner._arrays = arrays[len(handlers):]
        return arrays[:len(handlers)]
