"""IREE (the `iree` extra): StableHLO compiled in process for llvm-cpu, run on the CPU.

`iree.compiler.compile_str` runs the `iree-compile` binary in a subprocess; this module
drives libIREECompiler in the process instead (iree.compiler.api), in two halves split at
IREE's `stream` phase. Between the halves `alias_problems` reads the stream-phase program,
where IREE has decided which buffer each value lives in, and the second half compiles that
same module to the vmfb. `tf.aliasing_output` arrives as IREE's `iree.abi.output`: the
argument's buffer is consumed and the result is written into it.

Calls import the caller's tensors as IREE buffers without a copy (the local device's
memory is host memory), so a mutated argument is updated in the caller's own tensor; a
tensor IREE cannot import (not contiguous, not 64-byte aligned) goes through a copy.
Results come back through DLPack, also without a copy.

One VmInstance and one device per process, never freed: a result tensor keeps its IREE
buffer, and releasing a buffer after its device is gone crashes the process.
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from typing import Any

import torch

FLAGS = [
    "--iree-input-type=stablehlo",
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
    "--iree-input-demote-f64-to-f32=false",  # IREE computes float64 in float32 by default
]
DRIVER = "local-sync"  # the calling thread runs the program: no thread pool next to torch's
_ALIGNMENT = 64  # what IREE requires of an imported host buffer
_DLPACK_CPU = 1
_ELEMENT_TYPES = {
    torch.float32: "FLOAT_32", torch.float64: "FLOAT_64", torch.float16: "FLOAT_16",
    torch.bfloat16: "BFLOAT_16", torch.int64: "SINT_64", torch.int32: "SINT_32",
    torch.int16: "SINT_16", torch.int8: "SINT_8", torch.uint8: "UINT_8",
    torch.bool: "BOOL_8", torch.complex64: "COMPLEX_64", torch.complex128: "COMPLEX_128"}


def available() -> bool:
    try:
        import iree.compiler.api  # noqa: F401
        import iree.runtime  # noqa: F401
    except ImportError:
        return False
    return True


class IreeCompileError(RuntimeError):
    """IREE rejected the module; the message holds its diagnostics."""


_DIAGNOSTIC = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                               ctypes.c_void_p)
_SEVERITY = {0: "note", 1: "warning", 2: "error", 3: "remark"}


@functools.cache
def _compiler() -> Any:
    """libIREECompiler, with the entry points iree.compiler.api does not wrap."""
    try:
        from iree.compiler.api import ctypes_dl
    except ImportError as error:
        raise RuntimeError("the IREE engine needs the 'iree' extra: "
                           "pip install 'outofplace[iree]'") from error
    library = ctypes_dl._dylib  # loaded when iree.compiler.api is imported
    for name in ("ireeCompilerInvocationSetCompileToPhase",
                 "ireeCompilerInvocationSetCompileFromPhase"):
        function = getattr(library, name)
        function.restype, function.argtypes = ctypes.c_bool, [ctypes.c_void_p, ctypes.c_char_p]
    function = library.ireeCompilerInvocationEnableCallbackDiagnostics
    function.restype = None
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, _DIAGNOSTIC, ctypes.c_void_p]
    return library


def compile_stablehlo(stablehlo: str, io_map: dict[int, int]
                      ) -> tuple[bytes, list[str], dict[int, int], set[int]]:
    """The vmfb of a StableHLO module, `alias_problems` of its stream-phase program, the
    results that are arguments returned as they came ({result: argument}), which the
    vmfb does not return (`_strip_returned_arguments`), and the arguments IREE may write
    though they are not consumed (`_update_targets`), to be passed as copies.

    IREE 3.13 writes a consumed argument's buffer before every read of the argument's old
    value is done when that value is read by anything but the update itself
    (`y = x + 1; x.zero_(); return y` returns ones; `dst.copy_(src); src.mul_(2)` copies
    the doubled src). Such arguments (`_old_value_read_elsewhere`) are compiled without
    their alias: the caller's tensor is then updated by a copy, and that is reported."""
    from iree.compiler import ir
    from iree.compiler.api import Output, Session

    library = _compiler()
    session = Session()
    try:
        session.set_flags(*FLAGS)
        messages: list[str] = []

        @_DIAGNOSTIC
        def diagnostic(severity: int, message: bytes, size: int, _: Any) -> None:
            text = ctypes.string_at(message, size).decode(errors="replace")
            messages.append(f"{_SEVERITY.get(severity, severity)}: {text}")

        def run(module: Any, phase_setter: str) -> Any:
            invocation = session.invocation()
            library.ireeCompilerInvocationEnableCallbackDiagnostics(
                invocation._inv_p, 0, diagnostic, None)
            getattr(library, phase_setter)(invocation._inv_p, b"stream")
            invocation.import_module(module)
            if not invocation.execute():
                raise IreeCompileError("IREE could not compile the module:\n" +
                                       "\n".join(messages))
            return invocation

        module = ir.Module.parse(stablehlo, session.context)
        _boolean_add_as_or(module)
        passthrough, kept = _strip_returned_arguments(module)
        renumbered = {argument: kept.index(result) for argument, result in io_map.items()
                      if result in kept}
        unaliased = _old_value_read_elsewhere(module, renumbered) | \
            (io_map.keys() - renumbered.keys())
        _drop_aliases(module, unaliased)
        scratch = _update_targets(module) - (renumbered.keys() - unaliased)
        run(module.operation, "ireeCompilerInvocationSetCompileToPhase")
        problems = [f"argument {argument}: compiled without its alias (IREE 3.13 would "
                    "update it wrongly in place)" for argument in sorted(unaliased)]
        problems += alias_problems(module.operation, {
            argument: result for argument, result in renumbered.items()
            if argument not in unaliased})
        output = Output.open_membuffer()
        run(module.operation, "ireeCompilerInvocationSetCompileFromPhase"
            ).output_vm_bytecode(output)
        vmfb = bytes(output.map_memory())
        output.close()
        return vmfb, problems, passthrough, scratch
    finally:
        session.close()


def _strip_returned_arguments(module: Any) -> tuple[dict[int, int], list[int]]:
    """Removes the results of `main` that are one of its arguments as it came
    (`old = x.clone(); ...; return old`): IREE 3.13 returns the argument's own buffer for
    them and may write into it, even when it is not consumed. Returns ({result:
    argument} removed, the results kept in order); `tf.aliasing_output` is renumbered."""
    from iree.compiler import ir

    main = _main(module)
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    arguments = list(block.arguments)
    passthrough, kept = {}, []
    for index, value in enumerate(ret.operands):
        match = [a for a, argument in enumerate(arguments) if argument == value]
        if match:
            passthrough[index] = match[0]
        else:
            kept.append(index)
    if not passthrough:
        return passthrough, kept
    with module.context:
        ir.Operation.create("func.return", operands=[ret.operands[i] for i in kept],
                            loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.erase()
        function_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            function_type.inputs, [function_type.results[i] for i in kept]))
        if "res_attrs" in main.attributes:
            attrs = list(ir.ArrayAttr(main.attributes["res_attrs"]))
            main.attributes["res_attrs"] = ir.ArrayAttr.get([attrs[i] for i in kept])
        if "arg_attrs" in main.attributes:
            renumbered = []
            for attrs in ir.ArrayAttr(main.attributes["arg_attrs"]):
                entries = {named.name: named.attr for named in ir.DictAttr(attrs)}
                if "tf.aliasing_output" in entries:
                    result = ir.IntegerAttr(entries.pop("tf.aliasing_output")).value
                    if result in kept:
                        entries["tf.aliasing_output"] = ir.IntegerAttr.get(
                            ir.IntegerType.get_signless(32), kept.index(result))
                renumbered.append(ir.DictAttr.get(entries))
            main.attributes["arg_attrs"] = ir.ArrayAttr.get(renumbered)
    return passthrough, kept


def _update_targets(module: Any) -> set[int]:
    """Arguments of `main` that a dynamic_update_slice or scatter updates, or a sort
    sorts (directly or through reshapes). IREE 3.13 writes such an update into the
    argument's buffer even when the argument is not consumed (`w[0] = 1` on an input w
    that is not written in eager, but copied into a written tensor first), and sorts a
    sort's operands in their buffers (`torch.quantile(x, 0.3)` sorted the caller's x)."""
    main = _main(module)
    arguments = list(main.regions[0].blocks[0].arguments)
    targets = set()
    for op in _walk(main):
        if op.name in ("stablehlo.dynamic_update_slice", "stablehlo.scatter"):
            values = [op.operands[0]]
        elif op.name == "stablehlo.sort":
            values = list(op.operands)
        else:
            continue
        for value in values:
            while _defining_op(value) is not None and \
                    _defining_op(value).name == "stablehlo.reshape":
                value = _defining_op(value).operands[0]
            targets.update(a for a, argument in enumerate(arguments) if argument == value)
    return targets


def _main(module: Any) -> Any:
    from iree.compiler import ir

    return next(op.operation for op in module.body.operations
                if ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")


def _old_value_read_elsewhere(module: Any, io_map: dict[int, int]) -> set[int]:
    """Mutated arguments whose value is not only the start of a chain of single-use ops
    ending in their updated value (the StableHLO `module`'s main): the ones IREE 3.13 may
    overwrite too early. The updated value itself may be read by anything. Boolean
    arguments too: `x.logical_xor_(y); return x.logical_not()` returned not(old x)."""
    from iree.compiler import ir

    main = _main(module)
    block = main.regions[0].blocks[0]
    returned = list(block.operations)[-1].operands
    unsafe = set()
    for argument, result in io_map.items():
        value, target = block.arguments[argument], returned[result]
        if str(ir.RankedTensorType(value.type).element_type) == "i1":
            unsafe.add(argument)  # IREE 3.13 computes in-place boolean updates wrongly
            continue
        while value != target:  # (reading its size, with dynamic shapes, reads no data)
            uses = [u for u in value.uses if u.owner.name != "stablehlo.get_dimension_size"]
            user = uses[0].owner if len(uses) == 1 else None
            if user is None or user.name == "func.return" or len(user.results) != 1 or \
                    user.parent.name != "func.func":
                unsafe.add(argument)
                break
            value = user.results[0]
    return unsafe


def _boolean_add_as_or(module: Any) -> None:
    """`stablehlo.add` of booleans is a logical or (StableHLO's spec, XLA); IREE 3.13 adds
    them modulo 2. Rewritten to `stablehlo.or`."""
    from iree.compiler import ir

    adds = [op for op in _walk(module.operation) if op.name == "stablehlo.add" and
            str(ir.RankedTensorType(op.results[0].type).element_type) == "i1"]
    for add in adds:
        logical = ir.Operation.create("stablehlo.or", results=[add.results[0].type],
                                      operands=list(add.operands), loc=add.location,
                                      ip=ir.InsertionPoint(add))
        add.results[0].replace_all_uses_with(logical.results[0])
        add.erase()


def _drop_aliases(module: Any, arguments: set[int]) -> None:
    """Removes `tf.aliasing_output` from these arguments of `main`."""
    from iree.compiler import ir

    if not arguments:
        return
    main = _main(module)
    attrs = list(ir.ArrayAttr(main.attributes["arg_attrs"]))
    for argument in arguments:
        kept = {named.name: named.attr for named in ir.DictAttr(attrs[argument])
                if named.name != "tf.aliasing_output"}
        attrs[argument] = ir.DictAttr.get(kept, context=module.context)
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs, context=module.context)


# --------------------------------------------------------------------- the alias check
def _walk(op: Any):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from _walk(child.operation)


def _defining_op(value: Any) -> Any:
    owner = value.owner
    return getattr(owner, "operation", None) if hasattr(owner, "name") else None


def _constant(value: Any) -> int | None:
    from iree.compiler import ir

    op = _defining_op(value)
    if op is not None and op.name == "arith.constant":
        return ir.IntegerAttr(op.attributes["value"]).value
    return None


def _storage(value: Any) -> Any:
    """The resource a value is, through the `stream.timepoint.await`s that pass it on."""
    from iree.compiler import ir

    op = _defining_op(value)
    while op is not None and op.name == "stream.timepoint.await":
        value = op.operands[ir.OpResult(value).result_number]
        op = _defining_op(value)
    return value


def _entry_point(module: Any) -> tuple[Any, list[Any], list[Any]]:
    """(the public function, its ops, the resource each result is exported from; an
    argument returned as it came counts as its imported resource)."""
    functions = [op.operation for op in module.regions[0].blocks[0].operations
                 if op.operation.name == "util.func" and
                 "iree.abi.stub" in op.operation.attributes]
    if len(functions) != 1:
        raise IreeCompileError(f"expected one public entry point, found {len(functions)}")
    ops = list(_walk(functions[0]))
    arguments = list(functions[0].regions[0].blocks[0].arguments)
    imported = {arguments.index(op.operands[0]): op.results[0] for op in ops
                if op.name == "stream.tensor.import" and op.operands[0] in arguments}
    exported = []
    for value in [op for op in ops if op.name == "util.return"][0].operands:
        op = _defining_op(value)
        if op is not None and op.name == "stream.tensor.export":
            exported.append(_storage(op.operands[0]))
        else:  # an argument's buffer view returned as it came
            exported.append(imported.get(arguments.index(value)) if value in arguments
                            else None)
    return functions[0], ops, exported


def _imported(ops: list[Any], main: Any, argument: int) -> list[Any]:
    return [op for op in ops if op.name == "stream.tensor.import" and
            op.operands[0] == main.regions[0].blocks[0].arguments[argument]]


def alias_problems(module: Any, io_map: dict[int, int]) -> list[str]:
    """What IREE's stream-phase `module` does not prove of `io_map`; [] when it proves all.

    For each mutated argument: its buffer is imported with `consume` (IREE may write it),
    the result of `io_map[argument]` is exported from that same resource (so the caller
    gets its own buffer back), no `stream.cmd.copy` writes all of it (the value was not
    computed elsewhere and copied in), and no allocation as large as it exists that is not
    another result (no temporary copy of it), and no other result is exported from it."""
    main, ops, exported = _entry_point(module)
    problems = []
    for argument, result in sorted(io_map.items()):
        name = f"argument {argument} (result {result})"
        imports = _imported(ops, main, argument)
        if len(imports) != 1:
            problems.append(f"{name}: imported {len(imports)} times")
            continue
        resource, size = imports[0].results[0], _constant(imports[0].operands[-1])
        if "consume" not in imports[0].attributes:
            problems.append(f"{name}: its buffer is not consumed (IREE may not write it)")
        if exported[result] is None or exported[result] != resource:
            problems.append(f"{name}: the result is not the argument's buffer")
        problems += [f"{name}: result {index} is exported from the same buffer"
                     for index, other in enumerate(exported)
                     if index != result and other is not None and other == resource]
        for copy in (op for op in ops if op.name == "stream.cmd.copy"):
            execute = copy.parent
            while execute.name != "stream.cmd.execute":
                execute = execute.parent
            targets = [block_argument for block_argument, operand in
                       zip(execute.regions[0].blocks[0].arguments, execute.operands)
                       if operand == resource]
            length = _constant(copy.operands[6])  # source, size, offset, target, size, offset, length
            if copy.operands[3] in targets and (length is None or size is None or
                                                length >= size):
                problems.append(f"{name}: a copy writes all of it")
        for alloc in (op for op in ops if op.name in ("stream.resource.alloca",
                                                      "stream.resource.alloc")):
            allocated = _constant(alloc.operands[0])
            if any(e is not None and e == alloc.results[0] for e in exported):
                continue
            if allocated is None or size is None or allocated >= size:
                problems.append(f"{name}: a buffer of {allocated} bytes is allocated "
                                f"(the argument has {size})")
    return problems


# ------------------------------------------------------------------------------ running
@functools.cache
def _runtime() -> tuple[Any, Any, Any]:
    """(iree.runtime, the VmInstance, the device): one of each per process, never freed."""
    import iree.runtime as rt

    return rt, rt.VmInstance(), rt.get_driver(DRIVER).create_default_device()


def _importable(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and tensor.is_contiguous() and \
        tensor.data_ptr() % _ALIGNMENT == 0


def _import(tensor: torch.Tensor, copy: bool = False) -> tuple[torch.Tensor, Any]:
    """(the tensor IREE reads and writes, its buffer view): the tensor itself when IREE can
    import its memory and `copy` is not asked for, else a contiguous copy. (A DLPack import would do for reading, but
    IREE cannot discard-write such a buffer, which it does to a consumed argument.)"""
    rt, _, device = _runtime()
    data = tensor.detach()
    if copy or not _importable(data):
        data = torch.empty_like(data, memory_format=torch.contiguous_format).copy_(data)
    buffer = device.allocator.import_host_allocation(
        # contiguous: its elements are dense, whatever the stride of a size-1 dimension
        data.as_strided((data.numel(),), (1,)).view(torch.uint8).numpy(),
        rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE, rt.BufferUsage.DEFAULT)
    element = getattr(rt.HalElementType, _ELEMENT_TYPES[data.dtype])
    return data, rt.HalBufferView(buffer, list(data.shape), element)


def _to_torch(view: Any, dtype: torch.dtype) -> torch.Tensor:
    """A result as a tensor on its IREE buffer (DLPack); booleans, which torch misreads
    through IREE's DLPack export, as a copy of their bytes."""
    _, _, device = _runtime()
    if dtype == torch.bool:
        import numpy as np

        data = view.map().asarray(list(view.shape), np.dtype(np.uint8))
        return torch.from_numpy(np.array(data)).view(torch.bool)
    return torch.from_dlpack(device.create_dlpack_capsule(view, _DLPACK_CPU, 0))


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    return tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()


@functools.cache
def _warn_experimental() -> None:
    warnings.warn(
        "the IREE engine is experimental: outofplace's widened fuzzer still finds programs "
        "IREE 3.13 computes wrongly (about 1 in 150, docs/backends.md) where XLA and the "
        "StableHLO interpreter match eager; check results against engine='xla'",
        UserWarning, stacklevel=4)


class Executable:
    """A StableHLO module compiled once for IREE's llvm-cpu backend."""

    def __init__(self, stablehlo: str, io_map: dict[int, int]) -> None:
        _warn_experimental()
        self.io_map = dict(io_map)
        self.vmfb, self.alias_problems, self._passthrough, self._scratch = \
            compile_stablehlo(stablehlo, self.io_map)
        rt, instance, device = _runtime()
        module = rt.VmModule.copy_buffer(instance, self.vmfb)
        self._context = rt.VmContext(instance, [rt.create_hal_module(instance, device),
                                                module])
        self._main = module.lookup_function("main")

    def __call__(self, inputs: list[torch.Tensor], result_dtypes: list[torch.dtype]
                 ) -> list[torch.Tensor]:
        """Runs `main`. A mutated argument IREE updated in the caller's tensor comes back
        as that tensor itself; every other result owns its memory."""
        rt, _, device = _runtime()
        # Results that are an argument as it came: its value before the call.
        passed = {result: inputs[argument].detach().clone()
                  for result, argument in self._passthrough.items()}
        imported, views = zip(*(_import(t, copy=i in self._scratch)
                                for i, t in enumerate(inputs))) if inputs else ((), ())
        arguments = rt.VmVariantList(len(views))
        for view in views:
            arguments.push_ref(view.ref)
        outputs = rt.VmVariantList(len(result_dtypes))
        self._context.invoke(self._main, arguments, outputs)
        returned = iter(range(len(result_dtypes) - len(passed)))
        results = [passed[i] if i in passed else
                   _to_torch(outputs.get_as_object(next(returned), rt.HalBufferView), dtype)
                   for i, dtype in enumerate(result_dtypes)]
        in_place = {result: argument for argument, result in self.io_map.items()
                    if result not in passed and inputs[argument].numel()
                    and imported[argument].data_ptr() == inputs[argument].data_ptr()
                    and results[result].data_ptr() == inputs[argument].data_ptr()}
        # IREE's result buffers do not keep an imported copy alive: results in it, or in
        # an input, are cloned.
        taken = [_span(t) for t in (*inputs, *imported) if t.numel()]
        for index, tensor in enumerate(results):
            if index in in_place:
                results[index] = inputs[in_place[index]]
                continue
            start, end = _span(tensor)
            if index not in passed and tensor.numel() and \
                    any(start < e and s < end for s, e in taken):
                tensor = tensor.clone()  # never a view of an input or another result
                start, end = _span(tensor)
            taken.append((start, end))
            results[index] = tensor if tensor.dtype == result_dtypes[index] \
                else tensor.to(result_dtypes[index])
        return results
