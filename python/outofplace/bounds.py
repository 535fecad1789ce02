"""The checked mode, `outofplace.compile(..., check_bounds=True)`: a call whose runtime
indices are out of range raises IndexError naming the statement, before anything runs.

The frontend (frontend/bounds_checks.py) computes, next to each op with runtime index
tensors, whether all its indices are in range, and returns the flags as one more result
of `main`. After lowering, `split` takes that result off `main` (whose flag computation is
then dead and removed: the main program is the unchecked one) and makes a program of its
own of it, `main` with the flags as its only result and nothing aliased, the rest dead.
A call runs that program first, on the same engine and inputs; only when every flag is
set does the main program run. On XLA and IREE the main program updates the written
arguments in the caller's memory (donated buffers), so a check after it would come too
late; a check first leaves the caller's tensors as they were.
"""

from __future__ import annotations

from typing import Any

import torch
from torch_mlir import ir

from .backends import iree, xla
from .backends.interpreter import interpret
from .errors import UserIndexError
from .frontend.bounds_checks import Check
from .ir_utils import erase_unused, main_function, operations, terminator
from .transforms.inplace_to_outofplace import ALIASING_OUTPUT
from .transforms.specialize import is_dynamic, specialize

# StableHLO ops with effects beyond their results: never removed as dead.
_EFFECTS = frozenset({"stablehlo.custom_call", "stablehlo.send", "stablehlo.recv",
                      "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.rng",
                      "stablehlo.rng_bit_generator"})


def _keep_results(module: ir.Module, kept: list[int], aliases: bool) -> None:
    """Makes `main` return only the results `kept` (in that order), renumbering the
    `tf.aliasing_output` of its arguments, or dropping them all when `aliases` is False,
    then removes what became dead."""
    main = main_function(module)
    block = main.regions[0].blocks[0]
    ret = terminator(block)
    values = [ret.operands[i] for i in kept]
    ir.Operation.create("func.return", operands=values, loc=ret.location,
                        ip=ir.InsertionPoint(ret))
    ret.erase()
    new_index = {old: new for new, old in enumerate(kept)}
    context = module.context
    if "arg_attrs" in main.attributes:
        i32 = ir.IntegerType.get_signless(32, context)
        arg_attrs = []
        for attrs in main.arg_attrs:
            entries = {n.name: n.attr for n in ir.DictAttr(attrs)}
            if ALIASING_OUTPUT in entries:
                old = ir.IntegerAttr(entries.pop(ALIASING_OUTPUT)).value
                if aliases:
                    entries[ALIASING_OUTPUT] = ir.IntegerAttr.get(i32, new_index[old])
            arg_attrs.append(ir.DictAttr.get(entries, context=context))
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs, context=context)
    if "res_attrs" in main.attributes:
        res_attrs = list(ir.ArrayAttr(main.attributes["res_attrs"]))
        main.attributes["res_attrs"] = ir.ArrayAttr.get([res_attrs[i] for i in kept],
                                                        context=context)
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in values], context=context))
    erase_unused(operations(block), lambda op: op.name not in _EFFECTS)


def _drop_unused_arguments(module: ir.Module) -> list[int]:
    """Erases the arguments of `main` nothing reads; returns the positions of the rest."""
    main = main_function(module)
    block = main.regions[0].blocks[0]
    used = [i for i, a in enumerate(block.arguments) if list(a.uses)]
    attrs = list(main.arg_attrs) if "arg_attrs" in main.attributes else None
    for i in reversed(range(len(block.arguments))):
        if i not in used:
            block.erase_argument(i)
    if attrs is not None:
        main.attributes["arg_attrs"] = ir.ArrayAttr.get([attrs[i] for i in used])
    results = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).results
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], results))
    return used


def split(module: ir.Module, result: int) -> tuple[ir.Module, list[int]]:
    """Takes result `result` (the flags) off `main` of the lowered `module`; returns the
    program computing it alone, without aliased arguments, and the arguments of main it
    takes (the ones the flags read)."""
    with module.context:
        check = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
        count = len(terminator(main_function(module).regions[0].blocks[0]).operands)
        _keep_results(module, [i for i in range(count) if i != result], aliases=True)
        _keep_results(check, [result], aliases=False)
        return check, _drop_unused_arguments(check)


class BoundsCheck:
    """The flags program of a `Compiled` and what each flag checks; calling it on a
    call's inputs raises IndexError for the first check that fails."""

    def __init__(self, split: tuple[ir.Module, list[int]], checks: list[Check],
                 names: list[str], input_types: list[tuple[tuple[int, ...], torch.dtype]],
                 cache: bool | None = None) -> None:
        self.module, self.arguments = split  # the program, the arguments of main it takes
        self.cache = cache  # the compile cache (compile_cache.py); None: the environment
        self.checks = checks
        self.names = [names[i] for i in self.arguments]
        self.input_types = [input_types[i] for i in self.arguments]
        self._result_types = [((len(checks),), torch.bool)]
        self._engines: dict[str, Any] = {}

    @property
    def stablehlo(self) -> str:
        return self.module.operation.get_asm(use_name_loc_as_prefix=True)

    def flags(self, inputs: list[torch.Tensor], engine: str) -> torch.Tensor:
        """Runs the check program on `engine` ("xla", "iree" or "interpreter") for the
        arguments of main `inputs` (specialised to their shapes where the program has
        dynamic dimensions and the engine needs static ones)."""
        inputs = [inputs[i] for i in self.arguments]
        shapes = tuple(tuple(t.shape) for t in inputs)
        key = (engine, shapes if engine != "iree" and is_dynamic(self.module) else None)
        if key not in self._engines:
            module = self.module if key[1] is None else specialize(self.module, list(shapes))
            input_types = self.input_types if key[1] is None else \
                [(shape, dtype) for shape, (_, dtype) in zip(shapes, self.input_types)]
            asm = module.operation.get_asm(use_name_loc_as_prefix=True)
            if engine == "interpreter":
                self._engines[key] = lambda ins, m=module: interpret(m, ins, [torch.bool])[0]
            elif engine == "xla":
                executable = xla.CpuExecutable(asm, self.names, {}, input_types,
                                               self._result_types, cache=self.cache)
                self._engines[key] = lambda ins, e=executable: e(ins)[0]
            elif engine == "iree":
                executable = iree.compile(asm, {}, {"result_dtypes": [torch.bool]})
                self._engines[key] = lambda ins, e=executable: e(ins)[0]
            else:
                raise ValueError(f"unknown engine '{engine}'")
            if len(self._engines) > 16:  # a few shapes of a dynamic program
                self._engines.pop(next(iter(self._engines)))
        return self._engines[key](inputs)

    def __call__(self, inputs: list[torch.Tensor], engine: str) -> None:
        """Raises IndexError (outofplace.UserIndexError) naming the first statement whose
        runtime indices are out of range for these inputs."""
        flags = self.flags(inputs, engine)
        if not bool(flags.all()):
            failed = int((~flags).nonzero()[0, 0])
            raise UserIndexError(self.checks[failed].message())
