"""What a plain XLA:CPU consumer of the exported program keeps in place: the checks
`Compiled.alias_problems("xla")` and `save()` report (docs/export.md)."""

from __future__ import annotations

from typing import Any

from .. import hlo_proto
from .client import client, device_list
from .compiler import options_of


# What a plain consumer needs to keep the exported program's updates in place: its
# default copy insertion copies a donated buffer the program also reads, where XLA cannot
# order the read before the update (openxla/xla#20440, open: an independent read of the
# old value; a read of the new one, into which XLA's fusion duplicates the update, is one
# too). No form of the update avoids it on XLA:CPU 0.10.2 (`bench/exports.py` measures it).
CONSUMER_OPTION = "xla_cpu_copy_insertion_use_region_analysis"
CONSUMER_HINT = (f"{CONSUMER_OPTION}=true keeps it in place "
                 f"(XLA_FLAGS=--{CONSUMER_OPTION}=true, or jax.jit(..., "
                 f"compiler_options={{'{CONSUMER_OPTION}': True}}); openxla/xla#20440)")


def plain_problems(stablehlo: str, io_map: dict[int, int], options: dict[str, Any]
                    ) -> tuple[list[str], set[int]]:
    """The alias problems and the copied arguments of `stablehlo` compiled as it is, with
    `options` only (no legalization, no misfusion check), on a plain XLA:CPU client."""
    executable = client().compile_and_load(stablehlo, device_list(), options_of(options))
    problems, copied = [], set()
    for module in executable.hlo_modules():
        proto = module.as_serialized_hlo_module_proto()
        problems += hlo_proto.alias_problems(proto, io_map)
        copied |= {a for a in hlo_proto.copied_parameters(proto) if a in io_map}
    return problems, copied


def alias_problems(stablehlo: str, io_map: dict[int, int]) -> list[str]:
    """What a plain XLA:CPU consumer of the exported text does not keep of `io_map`; []
    when it keeps all: compiled as it is with default options, its input_output_alias is
    io_map (each mutated argument's buffer donated to its result) and no `copy` reads a
    donated parameter (XLA keeps no copy of the old value, as it does when the update
    cannot happen in place). A copy says whether `CONSUMER_OPTION` would avoid it. A
    program that copies the state itself (`old = x.clone()`) is reported too: the check
    cannot tell the two copies apart."""
    problems, copied = plain_problems(stablehlo, io_map, {})
    if copied:
        _, still = plain_problems(stablehlo, io_map, {CONSUMER_OPTION: True})
    for argument in sorted(copied):
        problems.append(f"argument {argument}: a plain XLA:CPU consumer (default options) "
                        f"copies the donated buffer" +
                        ("" if argument in still else f"; {CONSUMER_HINT}"))
    return problems


def consumer_checks(stablehlo: str, io_map: dict[int, int]) -> list[dict[str, Any]]:
    """Which consumers the exported artifacts were checked on, for `Compiled.save`: a
    plain XLA:CPU client with default options, and with `CONSUMER_OPTION`; each with
    whether every written argument stays in place and what does not."""
    from jax._src.lib import version_str

    checks = []
    for options in ({}, {CONSUMER_OPTION: True}):
        problems, copied = plain_problems(stablehlo, io_map, options)
        problems += [f"argument {a}: copied" for a in sorted(copied)]
        checks.append({"consumer": f"XLA:CPU (jaxlib {version_str})",
                       "options": options, "in_place": not problems,
                       "problems": problems})
    return checks
