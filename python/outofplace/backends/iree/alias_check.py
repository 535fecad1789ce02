"""The stream-phase alias check: what IREE's program, stopped at its `stream` phase where
IREE has decided which buffer each value lives in, does not prove of the aliases
(`alias_problems`). Read with IREE's own MLIR bindings (iree.compiler.ir)."""

from __future__ import annotations

from typing import Any

from .errors import IreeCompileError


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

