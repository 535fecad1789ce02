"""The workaround of openxla/xla#49176 (open; jaxlib 0.10.2): XLA:CPU can fuse a read of a
buffer into the dynamic-update-slice that updates that buffer in place when the two reach
it through different bitcasts, and then overwrites elements before it reads them (plain
JAX programs hit it too). `without_misfusion` looks for such a fusion in the optimized
HLO and, when it finds one, compiles again with XLA's own option
`xla_disable_hlo_passes=fusion`: a compile option, not a pass, as the fusion exists only
in XLA's optimized HLO. Its canary, test_xla_canaries.py
`test_dynamic_update_slice_fusion_reads_its_own_output`, fails when XLA fixes the bug:
then delete this module and its two callers' use of it (compiler.py, spmd/executable.py).
"""

from __future__ import annotations

from typing import Any, Callable


def without_misfusion(build: Callable[[dict[str, Any]], Any], options: dict[str, Any]
                       ) -> Any:
    """`build(options)`, or, when its optimized HLO holds the misfusion (the module docstring),
    `build(options)` with the fusion pass disabled."""
    executable = build(options)
    if not any(reads_updated_buffer_through_another_alias(module)
               for module in executable_of(executable).hlo_modules()):
        return executable
    return build(with_pass_disabled(options, "fusion"))


def with_pass_disabled(options: dict[str, Any], hlo_pass: str) -> dict[str, Any]:
    """XLA's `options` with `hlo_pass` added to the passes they disable."""
    return {**options, "xla_disable_hlo_passes": ",".join(
        p for p in (options.get("xla_disable_hlo_passes", ""), hlo_pass) if p)}


def executable_of(compiled: Any) -> Any:
    """The loaded executable of a jax `Compiled` (or the executable itself)."""
    runtime = getattr(compiled, "runtime_executable", None)
    return runtime() if runtime is not None else compiled


def reads_updated_buffer_through_another_alias(module: Any) -> bool:
    """Whether a fused in-place update's buffer is also read through another bitcast of it.

    In a fusion, a dynamic-update-slice or scatter whose operand is (a chain of bitcasts
    of) a parameter writes that parameter's buffer in place. XLA's fusion pass checks the
    other users of that operand itself; users of the parameter or of another bitcast of
    it are reads of the same memory it does not check.
    """
    from jax._src.lib import xla_client

    opcode = xla_client.hlo.HloOpcode
    unfused = {computation.name for computation in module.make_nonfusion_computations()}
    for computation in module.computations():
        if computation.name in unfused:
            continue
        for update in computation.instructions():
            if update.opcode not in (opcode.kDynamicUpdateSlice, opcode.kScatter):
                continue
            target = update.operands()[0]
            path = [target]
            while path[-1].opcode == opcode.kBitcast:
                path.append(path[-1].operands()[0])
            if path[-1].opcode != opcode.kParameter:
                continue
            on_path = {op.name for op in path}
            aliases = list(path[1:])
            while aliases:
                alias = aliases.pop()
                for user in alias.users():
                    if user.name in on_path:
                        continue
                    if user.opcode != opcode.kBitcast:
                        return True
                    aliases.append(user)
    return False
