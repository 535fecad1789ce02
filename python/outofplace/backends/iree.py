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
import math
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
    results that are arguments returned as they came, or reshaped ({result: (argument,
    shape)}), which the vmfb does not return (`_strip_returned_arguments`), and the
    arguments IREE may write though they are not consumed (`_update_targets`), to be
    passed as copies.

    IREE 3.13 writes a consumed argument's buffer before every read of the argument's old
    value is done when that value is read by anything but the update itself
    (`y = x + 1; x.zero_(); return y` returns ones; `dst.copy_(src); src.mul_(2)` copies
    the doubled src), or when the update reads other elements of it. Such arguments
    (`_old_value_read_elsewhere`) are compiled without their alias: the caller's tensor
    is then updated by a copy, and that is reported. `_work_around_iree` rewrites the
    forms IREE 3.13 compiles wrongly or not at all."""
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

        module = ir.Module.parse(_scatters_per_element(stablehlo), session.context)
        _boolean_add_as_or(module)
        passthrough, kept = _strip_returned_arguments(module)
        renumbered = {argument: kept.index(result) for argument, result in io_map.items()
                      if result in kept}
        unaliased = _old_value_read_elsewhere(module, renumbered) | \
            (io_map.keys() - renumbered.keys())
        _drop_aliases(module, unaliased)
        targets = _update_targets(module)
        scratch = targets - (renumbered.keys() - unaliased)
        _copy_results_folded_to_arguments(module, targets, {
            result for argument, result in renumbered.items() if argument not in unaliased})
        _work_around_iree(module)
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


def _scatters_per_element(stablehlo: str) -> str:
    """The module with each scatter of whole windows that indexes a dimension other than
    the leading ones (`c[:, 0:64:8] = k`, `c.index_copy_(1, idx, k)`) rewritten as a
    scatter of single elements: IREE 3.13 updates the windowed form in a second buffer
    and copies it (0.1 s a step on a 64 MiB cache), the per-element one in place. The
    windowed form stays what outofplace emits: XLA runs it 5-20x faster.

    First, each combining scatter at indices computed at run time writes only in bounds
    (`_windows_in_bounds`), and each gather's such starts are clamped
    (`_gather_starts_clamped`)."""
    from torch_mlir import ir as mlir

    from outofplace.context import make_context
    from outofplace.ir_utils import all_operations

    context = make_context()
    module = mlir.Module.parse(stablehlo, context)
    guarded = [op for op in all_operations(module.operation)
               if op.name == "stablehlo.scatter" and _unguarded(op)]
    for scatter in guarded:
        with context, scatter.location, mlir.InsertionPoint(scatter):
            _windows_in_bounds(scatter)
    gathers = [op for op in all_operations(module.operation) if op.name ==
               "stablehlo.gather" and _reads_arguments(op.operands[1]) and all(
                   mlir.RankedTensorType(v.type).has_static_shape for v in op.operands)]
    for gather in gathers:
        with context, gather.location, mlir.InsertionPoint(gather):
            _gather_starts_clamped(gather)
    guarded += gathers
    scatters = [op for op in all_operations(module.operation)
                if op.name == "stablehlo.scatter" and _windows_off_the_lead(op)]
    if not scatters:
        return str(module) if guarded else stablehlo
    for scatter in scatters:
        with context, scatter.location, mlir.InsertionPoint(scatter):
            _one_index_per_element(scatter)
    return str(module)


# A scatter body of one op combining the old value and the update: the update that
# leaves the old value as it is.
_IDENTITIES = {"stablehlo.add": 0, "stablehlo.or": 0, "stablehlo.multiply": 1,
               "stablehlo.and": 1, "stablehlo.maximum": "lowest", "stablehlo.minimum": "highest"}


def _body(scatter: Any) -> str | None:
    """"replace" when the scatter writes its updates, the combining op's name when it
    is one op of the old value and the update, else None."""
    body = scatter.regions[0].blocks[0]
    ops = list(body.operations)
    old, new = body.arguments[0], body.arguments[1]
    if len(ops) == 1 and ops[0].operands[0] == new:
        return "replace"
    if len(ops) == 2 and ops[0].name in _IDENTITIES and \
            {v for v in ops[0].operands} == {old, new} and ops[1].operands[0] == ops[0].result:
        return ops[0].name
    return None


def _unguarded(scatter: Any) -> bool:
    """A scatter of one operand, static shapes, no batching dimensions, whose indices are
    not constants, and whose body combines (`index_add_`: `_windows_in_bounds` makes an
    index out of bounds harmless with the op's identity). Not one that replaces: making
    its indices harmless reads the operand, and IREE 3.13 then computed valid programs
    wrongly (test_views.py, `position_beside_index_tensors`)."""
    from torch_mlir import ir as mlir
    from torch_mlir._mlir_libs import _stablehlo

    if len(scatter.operands) != 3 or not all(
            mlir.RankedTensorType(v.type).has_static_shape for v in scatter.operands):
        return False
    numbers = _stablehlo.ScatterDimensionNumbers(
        scatter.attributes["scatter_dimension_numbers"])
    updates = mlir.RankedTensorType(scatter.operands[2].type)
    return not list(numbers.input_batching_dims) and _reads_arguments(scatter.operands[1]) \
        and _body(scatter) not in (None, "replace") and math.prod(updates.shape) > 0 and \
        isinstance(updates.element_type, (mlir.IntegerType, mlir.FloatType))


def _reads_arguments(value: Any) -> bool:
    """Whether `value` is computed from an argument of its function (not from constants
    and iotas alone: indices known when compiling, which the frontend made in range)."""
    from torch_mlir import ir as mlir

    seen: dict[int, Any] = {}  # id -> the operation, kept alive so that ids stay its
    pending = [value]
    while pending:
        value = pending.pop()
        if not isinstance(value, mlir.OpResult):
            return True
        owner = value.owner.operation
        if id(owner) in seen:
            continue
        seen[id(owner)] = owner
        pending.extend(owner.operands)
    return False


def _gather_starts_clamped(gather: Any) -> None:
    """Clamps a gather's start indices into [0, size - slice size], as StableHLO's gather
    does itself: IREE 3.13 read out of the operand's buffer instead when an index is out
    of range (`s[i]`, `torch.take`; iree-org/iree#24881), garbage or another element."""
    import numpy as np
    from torch_mlir import ir as mlir
    from torch_mlir._mlir_libs import _stablehlo

    from outofplace.ir_utils import stablehlo_splat

    operand, indices = gather.operands[0], gather.operands[1]
    numbers = _stablehlo.GatherDimensionNumbers(gather.attributes["dimension_numbers"])
    if list(numbers.operand_batching_dims):
        return
    starts, vector = list(numbers.start_index_map), numbers.index_vector_dim
    sizes = list(mlir.DenseI64ArrayAttr(gather.attributes["slice_sizes"]))
    shape = list(mlir.RankedTensorType(operand.type).shape)
    indices_t = mlir.RankedTensorType(indices.type)
    index = indices_t.element_type
    numpy_type = np.int64 if mlir.IntegerType(index).width == 64 else np.int32
    highest = np.array([shape[d] - sizes[d] for d in starts], dtype=numpy_type)
    vector_t = mlir.RankedTensorType.get([len(starts)], index)
    high = mlir.Operation.create("stablehlo.constant", results=[vector_t], attributes={
        "value": mlir.DenseElementsAttr.get(highest, type=vector_t)}).result
    if vector == indices_t.rank:  # one start an index: a [1] broadcast to the indices
        along = []
        high = mlir.Operation.create("stablehlo.reshape", results=[
            mlir.RankedTensorType.get([], index)], operands=[high]).result
    else:
        along = [vector]
    high = mlir.Operation.create("stablehlo.broadcast_in_dim", results=[indices_t],
                                 operands=[high], attributes={
                                     "broadcast_dimensions": mlir.DenseI64ArrayAttr.get(along)
                                 }).result
    clamped = mlir.Operation.create("stablehlo.clamp", results=[indices_t], operands=[
        stablehlo_splat(indices_t, 0), indices, high]).result
    gather.operands[1] = clamped


def _windows_in_bounds(scatter: Any) -> None:
    """Rewrites a scatter (`_unguarded`) so that every window it writes is in bounds.
    StableHLO skips a window out of bounds (the policy outofplace documents: "drops");
    IREE 3.13 writes it anyway, out of the operand's buffer (iree-org/iree#13580):
    another element's value, or memory past the buffer (heap corruption, the process
    aborts). Each index vector out of bounds is replaced by an in-bounds one whose write
    changes nothing: its clamped index and the combining op's identity (add, multiply,
    ...). The indices and updates become [N, K] and [N, window...]."""
    import numpy as np
    from torch_mlir import ir as mlir
    from torch_mlir._mlir_libs import _stablehlo

    from outofplace.ir_utils import stablehlo_splat

    operand, indices, updates = scatter.operands
    numbers = _stablehlo.ScatterDimensionNumbers(
        scatter.attributes["scatter_dimension_numbers"])
    window, inserted = list(numbers.update_window_dims), list(numbers.inserted_window_dims)
    indexed, vector = list(numbers.scattered_dims_to_operand_dims), numbers.index_vector_dim
    operand_t = mlir.RankedTensorType(operand.type)
    indices_t = mlir.RankedTensorType(indices.type)
    updates_t = mlir.RankedTensorType(updates.type)
    shape, index, element = list(operand_t.shape), indices_t.element_type, \
        updates_t.element_type
    i1 = mlir.IntegerType.get_signless(1)

    def op(name: str, result_shape: list[int], type: Any, *operands: Any,
           **attributes: Any) -> Any:
        return mlir.Operation.create(
            f"stablehlo.{name}", results=[mlir.RankedTensorType.get(result_shape, type)],
            operands=list(operands), attributes=attributes).result

    def dims(values: list[int]) -> Any:
        return mlir.DenseI64ArrayAttr.get(values)

    def splat(result_shape: list[int], type: Any, value: Any) -> Any:
        return stablehlo_splat(mlir.RankedTensorType.get(result_shape, type), value)

    def compare(direction: str, a: Any, b: Any, result_shape: list[int]) -> Any:
        return op("compare", result_shape, i1, a, b, comparison_direction=mlir.Attribute.parse(
            f"#stablehlo<comparison_direction {direction}>"))

    # the index vectors as rows: [N, K]
    ishape = list(indices_t.shape)
    if vector == len(ishape):
        ishape.append(1)
        indices = op("reshape", ishape, index, indices)
    batch = [d for d in range(len(ishape)) if d != vector]
    k = ishape[vector]
    n = math.prod(ishape[d] for d in batch)
    indices = op("transpose", [ishape[d] for d in batch] + [k], index, indices,
                 permutation=dims(batch + [vector]))
    rows = op("reshape", [n, k], index, indices)
    # the updates as one window a row: [N, window...]
    ushape = list(updates_t.shape)
    scattered = [d for d in range(len(ushape)) if d not in window]
    sizes = [ushape[d] for d in window]
    updates = op("transpose", [ushape[d] for d in scattered + window], element, updates,
                 permutation=dims(scattered + window))
    windows = op("reshape", [n] + sizes, element, updates)
    # each row in bounds: 0 <= start <= size - window, for each of its K entries
    extent = iter(sizes)
    window_size = [1 if d in inserted else next(extent) for d in range(len(shape))]
    highest = mlir.DenseElementsAttr.get(
        np.array([[shape[d] - window_size[d] for d in indexed]],
                 dtype=np.int64 if mlir.IntegerType(index).width == 64 else np.int32),
        type=mlir.RankedTensorType.get([1, k], index))
    high = mlir.Operation.create("stablehlo.constant", results=[highest.type],
                                 attributes={"value": highest}).result
    high = op("broadcast_in_dim", [n, k], index, high, broadcast_dimensions=dims([0, 1]))
    clamped = op("clamp", [n, k], index, splat([n, k], index, 0), rows, high)
    fits = compare("EQ", clamped, rows, [n, k])
    inside = None
    for column in range(k):
        part = op("slice", [n, 1], i1, fits, start_indices=dims([0, column]),
                  limit_indices=dims([n, column + 1]), strides=dims([1, 1]))
        part = op("reshape", [n], i1, part)
        inside = part if inside is None else op("and", [n], i1, inside, part)
    body = _body(scatter)
    row_mask = op("broadcast_in_dim", [n, k], i1, inside, broadcast_dimensions=dims([0]))
    window_mask = op("broadcast_in_dim", [n] + sizes, i1, inside,
                     broadcast_dimensions=dims([0]))
    identity = _IDENTITIES[body]
    if identity in ("lowest", "highest"):
        if isinstance(element, mlir.IntegerType):
            width = mlir.IntegerType(element).width
            unsigned = mlir.IntegerType(element).is_unsigned
            identity = (0 if unsigned else -(1 << (width - 1))) if identity == "lowest" \
                else ((1 << width) - 1 if unsigned else (1 << (width - 1)) - 1)
        else:
            identity = float("-inf") if identity == "lowest" else float("inf")
    instead = splat([n] + sizes, element, identity)
    rows = op("select", [n, k], index, row_mask, rows, clamped)
    windows = op("select", [n] + sizes, element, window_mask, windows, instead)
    scatter.operands[1] = rows
    scatter.operands[2] = windows
    scatter.attributes["scatter_dimension_numbers"] = _stablehlo.ScatterDimensionNumbers.get(
        update_window_dims=list(range(1, len(sizes) + 1)), inserted_window_dims=inserted,
        input_batching_dims=[], scatter_indices_batching_dims=[],
        scattered_dims_to_operand_dims=indexed, index_vector_dim=1)
    scatter.attributes["indices_are_sorted"] = mlir.BoolAttr.get(False)
    scatter.attributes["unique_indices"] = mlir.BoolAttr.get(False)


def _windows_off_the_lead(scatter: Any) -> bool:
    """A scatter of one operand, with windows, whose indexed dimensions are not the
    leading ones and each a single element of its window (so a window is in bounds
    exactly when each of its elements is)."""
    from torch_mlir._mlir_libs import _stablehlo

    from torch_mlir import ir as mlir

    if not all(mlir.RankedTensorType(v.type).has_static_shape for v in scatter.operands):
        return False  # a dynamic program: its indices would need an iota of runtime size
    numbers = _stablehlo.ScatterDimensionNumbers(
        scatter.attributes["scatter_dimension_numbers"])
    indexed = list(numbers.scattered_dims_to_operand_dims)
    return len(scatter.operands) == 3 and bool(list(numbers.update_window_dims)) and \
        not list(numbers.input_batching_dims) and \
        sorted(indexed) != list(range(len(indexed))) and \
        set(indexed) <= set(numbers.inserted_window_dims)


def _one_index_per_element(scatter: Any) -> None:
    """Rewrites a windowed `scatter` (`_windows_off_the_lead`) in place: its indices
    become one full index per update element (the update's shape, then the operand's
    rank), the operand dimension's index or an iota along the window dimension."""
    from torch_mlir import ir as mlir
    from torch_mlir._mlir_libs import _stablehlo

    numbers = _stablehlo.ScatterDimensionNumbers(
        scatter.attributes["scatter_dimension_numbers"])
    window, inserted = list(numbers.update_window_dims), list(numbers.inserted_window_dims)
    indexed, vector = list(numbers.scattered_dims_to_operand_dims), numbers.index_vector_dim
    operand, indices, updates = scatter.operands
    rank = mlir.RankedTensorType(operand.type).rank
    shape = list(mlir.RankedTensorType(updates.type).shape)
    indices_t = mlir.RankedTensorType(indices.type)
    element = indices_t.element_type
    batch = [d for d in range(len(shape)) if d not in window]  # the updates' indexed dims
    windowed = [d for d in range(rank) if d not in inserted]  # operand dims of a window

    def op(name: str, result_shape: list[int], *operands: Any, **attributes: Any) -> Any:
        return mlir.Operation.create(
            f"stablehlo.{name}", results=[mlir.RankedTensorType.get(result_shape, element)],
            operands=list(operands), attributes=attributes).result

    def dims(values: list[int]) -> Any:
        return mlir.DenseI64ArrayAttr.get(values)

    columns = []
    for d in range(rank):
        if d in indexed:
            column = indices
            if vector < indices_t.rank:  # the d-th entry of each index vector
                starts, limits = [0] * indices_t.rank, list(indices_t.shape)
                starts[vector], limits[vector] = indexed.index(d), indexed.index(d) + 1
                column = op("slice", [n if i != vector else 1 for i, n in enumerate(limits)],
                            column, start_indices=dims(starts), limit_indices=dims(limits),
                            strides=dims([1] * indices_t.rank))
                column = op("reshape", [n for i, n in enumerate(indices_t.shape)
                                        if i != vector], column)
            column = op("broadcast_in_dim", shape, column, broadcast_dimensions=dims(batch))
        elif d in windowed:
            column = op("iota", shape, iota_dimension=mlir.IntegerAttr.get(
                mlir.IntegerType.get_signless(64), window[windowed.index(d)]))
        else:  # a dimension of size-one windows no index names: always 0
            zero = mlir.Operation.create("stablehlo.constant", results=[
                mlir.RankedTensorType.get([], element)], attributes={
                "value": mlir.DenseElementsAttr.get_splat(
                    mlir.RankedTensorType.get([], element), mlir.IntegerAttr.get(element, 0))
            }).result
            column = op("broadcast_in_dim", shape, zero, broadcast_dimensions=dims([]))
        columns.append(op("reshape", shape + [1], column))
    scatter.operands[1] = op("concatenate", shape + [rank], *columns,
                             dimension=mlir.IntegerAttr.get(
                                 mlir.IntegerType.get_signless(64), len(shape)))
    scatter.attributes["scatter_dimension_numbers"] = _stablehlo.ScatterDimensionNumbers.get(
        update_window_dims=[], inserted_window_dims=list(range(rank)),
        input_batching_dims=[], scatter_indices_batching_dims=[],
        scattered_dims_to_operand_dims=list(range(rank)), index_vector_dim=len(shape))
    scatter.attributes["indices_are_sorted"] = mlir.BoolAttr.get(False)


def _strip_returned_arguments(module: Any
                              ) -> tuple[dict[int, tuple[int, list[int]]], list[int]]:
    """Removes the results of `main` that are one of its arguments as it came, or a
    reshape of it (`old = x.clone(); ...; return old`, `return x.flatten().clone()`):
    IREE 3.13 returns the argument's own buffer for them and may write into it, even
    when it is not consumed. Returns ({result: (argument, shape)} removed, the results
    kept in order); `tf.aliasing_output` is renumbered."""
    from iree.compiler import ir

    main = _main(module)
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    arguments = list(block.arguments)
    passthrough, kept = {}, []
    for index, value in enumerate(ret.operands):
        source = _through_reshapes(value)
        match = [a for a, argument in enumerate(arguments) if argument == source]
        if match:
            passthrough[index] = (match[0], list(ir.RankedTensorType(value.type).shape))
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
    """Arguments of `main` whose value reaches, through ops that keep each element in
    its place (`_same_places`, which IREE may fold away: `x * 1`, a reshape), a
    transpose or broadcast that moves only dimensions of size one (`_keeps_order`) or a
    dynamic_update_slice of the whole tensor (`_whole_update`), the
    operand a dynamic_update_slice or scatter updates, or a sort's operands. IREE 3.13
    writes such an update into the argument's buffer even when the argument is not
    consumed (`w[0] = 1` on an input w that is not written in eager, but copied into a
    written tensor first, or multiplied by 1), and sorts a sort's operands in their
    buffers (`torch.quantile(x, 0.3)` sorted the caller's x)."""
    main = _main(module)
    targets = set()
    for number, argument in enumerate(main.regions[0].blocks[0].arguments):
        values, seen = [argument], set()
        while values and number not in targets:
            value = values.pop()
            for use in value.uses:
                user = use.owner
                if user.name == "stablehlo.sort" or use.operand_number == 0 and \
                        user.name in ("stablehlo.dynamic_update_slice", "stablehlo.scatter"):
                    targets.add(number)
                elif (_same_places(user) or _keeps_order(user) or
                      _whole_update(user, use.operand_number)) and \
                        user.results[0] not in seen:
                    seen.add(user.results[0])
                    values.append(user.results[0])
    return targets


_ELEMENTWISE = frozenset("stablehlo." + name for name in """
    abs add and atan2 bitcast_convert cbrt ceil clamp compare complex convert cosine
    count_leading_zeros divide exponential exponential_minus_one floor imag is_finite log
    log_plus_one logistic maximum minimum multiply negate not or popcnt power real
    reduce_precision remainder reshape round_nearest_afz round_nearest_even rsqrt select
    shift_left shift_right_arithmetic shift_right_logical sign sine sqrt subtract tan tanh
    xor""".split())


def _same_places(op: Any) -> bool:
    """Whether each element of `op`'s one result is computed from the elements at the
    same place (in row-major order) of its operands: elementwise ops, reshapes, and a
    broadcast_in_dim, slice or transpose that leaves its operand as it is."""
    from iree.compiler import ir

    if len(op.results) != 1 or op.parent.name != "func.func":
        return False
    if op.name in _ELEMENTWISE:
        return op.name != "stablehlo.bitcast_convert" or \
            ir.RankedTensorType(op.operands[0].type).shape == \
            ir.RankedTensorType(op.results[0].type).shape
    if op.name not in ("stablehlo.broadcast_in_dim", "stablehlo.slice",
                       "stablehlo.transpose") or op.operands[0].type != op.results[0].type:
        return False
    rank = ir.RankedTensorType(op.results[0].type).rank
    identity = list(range(rank))
    if op.name == "stablehlo.slice":
        return list(ir.DenseI64ArrayAttr(op.attributes["strides"])) == [1] * rank
    name = "broadcast_dimensions" if op.name == "stablehlo.broadcast_in_dim" \
        else "permutation"
    return list(ir.DenseI64ArrayAttr(op.attributes[name])) == identity


def _keeps_order(op: Any) -> bool:
    """Whether `op` is a transpose or broadcast_in_dim that only moves or adds dimensions
    of size one: its result holds its operand's elements in the same row-major order, a
    reshape that IREE 3.13 folds to the operand's buffer (`t = x.clone(); t.t_();
    t.view(-1)[i] = 0` on a 1x5 x scattered into x's buffer)."""
    from iree.compiler import ir

    if op.name not in ("stablehlo.transpose", "stablehlo.broadcast_in_dim") or \
            len(op.results) != 1:
        return False
    operand = ir.RankedTensorType(op.operands[0].type)
    result = ir.RankedTensorType(op.results[0].type)
    if not (operand.has_static_shape and result.has_static_shape):
        return False
    if op.name == "stablehlo.transpose":
        order = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        moved = [d for d in order if operand.shape[d] != 1]
    else:  # as many elements: no dimension is broadcast
        if math.prod(operand.shape) != math.prod(result.shape):
            return False
        dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
        moved = [d for d, n in zip(dims, operand.shape) if n != 1]
    return moved == sorted(moved)


def _whole_update(op: Any, operand: int) -> bool:
    """Whether operand `operand` of `op` is a dynamic_update_slice's update as large as
    its result: the result is the update (IREE folds it so: `x1[:, pos] = w5` on a
    5x1 x1 wrote a later update of x1 into w5)."""
    return op.name == "stablehlo.dynamic_update_slice" and operand == 1 and \
        op.operands[1].type == op.results[0].type


def _copy_results_folded_to_arguments(module: Any, written: set[int],
                                      in_place: set[int]) -> None:
    """Puts behind a barrier each result of `main` (but the ones updated in place) that
    is one of the `written` arguments through ops IREE may fold away: `_same_places` or
    `_keeps_order` ops whose other operands are constants or the same value (`r = x * 1;
    x[:, 1] = 5; return r`). IREE 3.13 folds them, exports the argument's buffer as the
    result and writes the update into that same buffer, consumed or not: r came back
    with the 5. Behind the barrier, IREE computes the result into a buffer of its own."""
    main = _main(module)
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    arguments = [block.arguments[number] for number in sorted(written)]
    for index, value in enumerate(list(ret.operands)):
        if index not in in_place and _folded_source(value) in arguments:
            _behind_barrier(ret, index)


def _folded_source(value: Any) -> Any:
    """The value `value` is, through ops IREE may fold to their one non-constant
    operand (`_copy_results_folded_to_arguments`)."""
    while True:
        op = _defining_op(value)
        if op is None or not (_same_places(op) or _keeps_order(op)):
            return value
        operands = [v for v in op.operands if not _is_constant(v)]
        if not operands or any(v != operands[0] for v in operands):
            return value
        value = operands[0]


def _through_reshapes(value: Any) -> Any:
    while _defining_op(value) is not None and \
            _defining_op(value).name == "stablehlo.reshape":
        value = _defining_op(value).operands[0]
    return value


def _main(module: Any) -> Any:
    from iree.compiler import ir

    return next(op.operation for op in module.body.operations
                if ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")


def _old_value_read_elsewhere(module: Any, io_map: dict[int, int]) -> set[int]:
    """Mutated arguments whose value is not only the start of a chain of single-use ops
    ending in their updated value, each of which computes an element from the elements
    at its place (`_same_places`), or updates its first operand (dynamic_update_slice,
    scatter) (the StableHLO `module`'s main): the ones IREE 3.13 may overwrite too
    early. The updated value itself may be read by anything. A chain through a gather
    (`x.add_(x[0, :2])`) was computed in place wrongly; a flip is copied. Boolean
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
            if user is None or not (_same_places(user) or uses[0].operand_number == 0 and
                                    user.name in ("stablehlo.dynamic_update_slice",
                                                  "stablehlo.scatter") and
                                    len(user.results) == 1 and
                                    user.parent.name == "func.func"):
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


def _work_around_iree(module: Any) -> None:
    """Rewrites the StableHLO `module` where IREE 3.13 compiles it wrongly or not at all
    (each found by outofplace's fuzzer), with `stablehlo.optimization_barrier`s, which
    keep IREE from folding a value into its user:

    - A gather from a slice that is not contiguous (`x[:, -1:, idx]`): IREE folds the
      slice into the gather's load and fails to compile it (`LLVM Translation failed
      for operation: builtin.unrealized_conversion_cast`); a scatter into a reshaped
      slice (`x[1:2].view(1, 1).index_add_(0, i, w)`) fails the same way (`expected rank
      to be smaller or equal to the other rank`). A gather's or scatter's operand that is
      a slice (through reshapes and transposes; for a scatter, a slice of part of its
      operand: a barrier on all of a tensor written in place made IREE copy it onto
      itself) is put behind a barrier: the slice is copied out first.
      (Not every computed operand: a barrier on a value also returned in place made IREE
      copy it onto itself.) A scatter's such operand is also computed into a buffer of
      its own (`select(barrier(true), operand, zeros)`): behind a barrier alone, IREE
      still updated the slice where a later read of the same slice found it.
    - Two dynamic_update_slices of the same constant, the second just before the first
      (`x[5] = 0; x[4] = 0`): IREE merges the two fills at a wrong offset (`invalid
      Write access range`). A constant update is put behind a barrier.
    - A dynamic_update_slice whose update is read from the tensor it updates (`x[3] =
      x[3]`, a masked write whose mask is all false): IREE copies the buffer onto itself
      and fails at run time (`source and target ranges overlap`). Such an update is put
      behind a barrier: computed in its own buffer first.
    - A dynamic_update_slice of a constant as large as the tensor (`x[:, pos] = literal`
      covering all of x): IREE takes the constant's read-only buffer for the result and
      then updates it in place (`PERMISSION_DENIED; buffer allows READ`). It becomes
      `select(barrier(true), constant, x)`, computed into a buffer of its own.
    - Two scatters with one index tensor (`x.index_add_(0, i, v); y.index_add_(0, i,
      v)`): IREE narrows the indices to i32 for each and fails to compile (`failed to
      legalize unresolved source materialization from ('tensor<3x1xi64>') to
      ('tensor<3x1xi32>')`). Each scatter after the first takes the indices through a
      barrier of its own.

    And the module is scheduled without concurrency (IREE's `debug` partitioning): with
    it, IREE 3.13 moved a read of a tensor after an in-place update of that tensor when
    the program also returned a constant."""
    from iree.compiler import ir

    main = _main(module)
    scattered_at: list[Any] = []  # the index tensors of the scatters so far
    for op in list(_walk(main)):
        if op.name == "stablehlo.scatter":
            if any(op.operands[1] == indices for indices in scattered_at):
                _behind_barrier(op, 1)
            else:
                scattered_at.append(op.operands[1])
        source = _defining_op(op.operands[0]) \
            if op.name in ("stablehlo.gather", "stablehlo.scatter") else None
        while source is not None and source.name in ("stablehlo.reshape",
                                                     "stablehlo.transpose"):
            source = _defining_op(source.operands[0])
        if source is not None and source.name == "stablehlo.slice" and (
                op.name == "stablehlo.gather" or
                _elements(source.results[0]) < _elements(source.operands[0])):
            _behind_barrier(op, 0)
            if op.name == "stablehlo.scatter":
                _copied(op, 0)
        elif _whole_update(op, 1) and _is_constant(op.operands[1]):
            _selected_constant(op)
        elif op.name == "stablehlo.dynamic_update_slice" and (
                _is_constant(op.operands[1]) or _reads(op.operands[1], op.operands[0])):
            _behind_barrier(op, 1)
    module.operation.attributes["stream.partitioning"] = ir.Attribute.parse(
        '#stream.partitioning_config<"debug">', module.context)


def _selected_constant(op: Any) -> None:
    """`dynamic_update_slice(x, c, ...)` with `c` a constant of x's type  =>
    `select(barrier(true), c, x)`: the constant, in a buffer IREE may write."""
    update, operand = op.operands[1], op.operands[0]
    op.results[0].replace_all_uses_with(_opaque_select(op, update, operand))
    op.erase()


def _copied(op: Any, operand: int) -> None:
    """`op`'s operand as `select(barrier(true), operand, zeros)`: computed into a buffer
    of its own, which IREE cannot take for the operand's (a barrier alone, it can)."""
    from iree.compiler import ir

    value = op.operands[operand]
    type = ir.RankedTensorType(value.type)
    with op.location, ir.InsertionPoint(op):
        zero = ir.Operation.create("stablehlo.constant", results=[type], attributes={
            "value": ir.DenseElementsAttr.get_splat(type, _zero(type.element_type))})
    op.operands[operand] = _opaque_select(op, value, zero.results[0])


def _opaque_select(op: Any, on_true: Any, on_false: Any) -> Any:
    """`select(barrier(true), on_true, on_false)`, placed before `op`: on_true's value in
    a buffer of its own, as IREE cannot see through the barrier to fold the select."""
    from iree.compiler import ir

    with op.location, ir.InsertionPoint(op):
        flags = ir.RankedTensorType.get(ir.RankedTensorType(on_true.type).shape,
                                        ir.IntegerType.get_signless(1))
        true = ir.Operation.create("stablehlo.constant", results=[flags], attributes={
            "value": ir.DenseElementsAttr.get_splat(flags, ir.BoolAttr.get(True))})
        opaque = ir.Operation.create("stablehlo.optimization_barrier", results=[flags],
                                     operands=[true.results[0]])
        select = ir.Operation.create("stablehlo.select", results=[on_true.type],
                                     operands=[opaque.results[0], on_true, on_false])
    return select.results[0]


def _zero(element: Any) -> Any:
    from iree.compiler import ir

    if isinstance(element, ir.IntegerType):
        return ir.IntegerAttr.get(element, 0)
    return ir.FloatAttr.get(element, 0.0)


def _elements(value: Any) -> int:
    from iree.compiler import ir

    return math.prod(ir.RankedTensorType(value.type).shape)


def _behind_barrier(op: Any, operand: int) -> None:
    from iree.compiler import ir

    value = op.operands[operand]
    barrier = ir.Operation.create("stablehlo.optimization_barrier", results=[value.type],
                                  operands=[value], loc=op.location,
                                  ip=ir.InsertionPoint(op))
    op.operands[operand] = barrier.results[0]


def _is_constant(value: Any) -> bool:
    op = _defining_op(value)
    while op is not None and op.name in ("stablehlo.reshape", "stablehlo.broadcast_in_dim",
                                         "stablehlo.convert"):
        op = _defining_op(op.operands[0])
    return op is not None and op.name == "stablehlo.constant"


def _reads(value: Any, source: Any) -> bool:
    """Whether `value` is computed from `source`."""
    values, seen = [value], set()
    while values:
        value = values.pop()
        if value == source:
            return True
        op = _defining_op(value)
        if op is not None:
            for operand in op.operands:
                if operand not in seen:
                    seen.add(operand)
                    values.append(operand)
    return False


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
    """Whether IREE can take the tensor's memory as its values (not a lazily negated
    view, whose memory holds their negation)."""
    return tensor.device.type == "cpu" and tensor.is_contiguous() and \
        not tensor.is_neg() and tensor.data_ptr() % _ALIGNMENT == 0


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
        "the IREE engine is experimental: IREE 3.13 computes some forms wrongly, which "
        "the engine rewrites (docs/backends.md); each new fuzzer run on IREE found more "
        "until the last ones (850 programs, none wrong; docs/reliability.md), which are "
        "short beside the 10,000 on XLA; check results against engine='xla'",
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
        passed = {result: inputs[argument].detach().clone().reshape(shape)
                  for result, (argument, shape) in self._passthrough.items()}
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
