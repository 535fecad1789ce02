"""The aliases of a serialized `xla.HloModuleProto` (what the Neuron compiler ingests).

jaxlib ships no hlo_pb2 and outofplace needs no protobuf package: the few fields read here
are taken straight off the wire. Field numbers are those of xla/service/hlo.proto:

    HloModuleProto.input_output_alias = 8            (HloInputOutputAliasProto)
    HloInputOutputAliasProto.entries = 1             (AliasEntryProto, repeated)
    AliasEntryProto: output_shape_index = 1 (repeated int64), parameter_number = 2,
                     parameter_shape_index = 3 (repeated int64), kind = 4 (Kind enum)
    HloModuleProto.computations = 3, entry_computation_id = 6
    HloComputationProto.instructions = 2, id = 5, root_id = 6
    HloInstructionProto: opcode = 2 (string), parameter_number = 9, id = 35,
                         operand_ids = 36 (repeated int64), custom_call_target = 28
"""

from __future__ import annotations

HLO_MODULE_COMPUTATIONS, HLO_MODULE_ENTRY_ID, HLO_MODULE_INPUT_OUTPUT_ALIAS = 3, 6, 8
HLO_COMPUTATION_ID, HLO_COMPUTATION_ROOT_ID, HLO_COMPUTATION_INSTRUCTIONS = 5, 6, 2
HLO_INSTRUCTION_OPCODE, HLO_INSTRUCTION_CUSTOM_CALL_TARGET = 2, 28
MAY_ALIAS, MUST_ALIAS = 1, 2


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field of a serialized message."""
    fields, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
        fields.append((number, wire, value))
    return fields


def _repeated_int(fields: list, number: int) -> list[int]:
    values: list[int] = []
    for n, wire, value in fields:
        if n != number:
            continue
        if wire == 2:  # packed
            pos = 0
            while pos < len(value):
                v, pos = _varint(value, pos)
                values.append(v)
        else:
            values.append(value)
    return values


def aliases(proto: bytes) -> list[dict]:
    """The input_output_alias entries of a serialized HloModuleProto."""
    entries = []
    for number, _, alias in _fields(proto):
        if number != HLO_MODULE_INPUT_OUTPUT_ALIAS:
            continue
        for entry_number, _, entry in _fields(alias):
            if entry_number != 1:
                continue
            fields = _fields(entry)
            scalars = {n: v for n, w, v in fields if w == 0}
            entries.append({
                "output_shape_index": _repeated_int(fields, 1),
                "parameter_number": scalars.get(2, 0),
                "parameter_shape_index": _repeated_int(fields, 3),
                "kind": scalars.get(4, 0),
            })
    return entries


def alias_problems(proto: bytes, io_map: dict[int, int]) -> list[str]:
    """Where the proto's input_output_alias differs from `io_map`; [] when it is io_map:
    each mutated argument (a whole, untupled parameter) aliases its result, and nothing
    else is aliased. A module with one result is not a tuple: its output index is []."""
    found = {}
    problems = []
    for entry in aliases(proto):
        argument, output = entry["parameter_number"], entry["output_shape_index"]
        if entry["parameter_shape_index"] or len(output) > 1:
            problems.append(f"unexpected alias entry {entry}")
            continue
        found[argument] = output[0] if output else 0
    for argument, result in sorted(io_map.items()):
        if found.get(argument) != result:
            problems.append(f"argument {argument}: the proto aliases "
                            f"{found.get(argument)}, io_map says result {result}")
    problems += [f"argument {argument}: aliased to result {result}, not in io_map"
                 for argument, result in sorted(found.items()) if argument not in io_map]
    return problems


def _scalars(fields: list) -> dict[int, int]:
    return {n: v for n, w, v in fields if w == 0}


def copied_parameters(proto: bytes, aliases: dict[int, int] | None = None) -> set[int]:
    """The parameters of the entry computation a `copy` instruction reads (directly or
    through bitcasts), and those of `aliases` (parameter number -> output index) whose
    output is a `copy` (the root tuple's operand, through bitcasts)."""
    module = _fields(proto)
    entry = _scalars(module).get(HLO_MODULE_ENTRY_ID, 0)
    instructions: dict[int, dict] = {}
    root = None
    for number, _, computation in module:
        fields = _fields(computation) if number == HLO_MODULE_COMPUTATIONS else []
        if not fields or _scalars(fields).get(HLO_COMPUTATION_ID, 0) != entry:
            continue
        root = _scalars(fields).get(HLO_COMPUTATION_ROOT_ID)
        for instruction in (v for n, _, v in fields if n == 2):
            parts = _fields(instruction)
            opcode = next(v for n, _, v in parts if n == 2).decode()
            instructions[_scalars(parts).get(35, 0)] = {
                "opcode": opcode, "parameter": _scalars(parts).get(9, 0),
                "operands": _repeated_int(parts, 36)}

    def source(instruction: dict) -> dict:
        while instruction["opcode"] == "bitcast":
            instruction = instructions[instruction["operands"][0]]
        return instruction

    copied = set()
    for instruction in instructions.values():
        if instruction["opcode"] != "copy":
            continue
        found = source(instructions[instruction["operands"][0]])
        if found["opcode"] == "parameter":
            copied.add(found["parameter"])
    if aliases and root in instructions and instructions[root]["opcode"] == "tuple":
        outputs = {index: parameter for parameter, index in aliases.items()}
        for index, operand in enumerate(instructions[root]["operands"]):
            if index in outputs and source(instructions[operand])["opcode"] == "copy":
                copied.add(outputs[index])
    return copied


def custom_call_targets(proto: bytes) -> set[str]:
    """The targets of the module's `custom-call` instructions, in any computation."""
    targets = set()
    for number, _, computation in _fields(proto):
        if number != HLO_MODULE_COMPUTATIONS:
            continue
        for field, _, instruction in _fields(computation):
            if field != HLO_COMPUTATION_INSTRUCTIONS:
                continue
            parts = _fields(instruction)
            if (HLO_INSTRUCTION_OPCODE, 2, b"custom-call") in parts:
                targets.update(value.decode() for n, _, value in parts
                               if n == HLO_INSTRUCTION_CUSTOM_CALL_TARGET)
    return targets
