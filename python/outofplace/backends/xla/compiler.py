"""The XLA engine's compile: the legalization (`LEGALIZE_FOR_CPU`), XLA:CPU's compile with
outofplace's options (`COMPILE_OPTIONS`), safe from the misfusion (misfusion.py), the
compile cache, and the HLO module proto."""

from __future__ import annotations

from typing import Any

from ... import compile_cache, progress
from .. import custom_calls
from . import client as client_module
from . import temporaries
from .client import client, device_list, load_jax
from .misfusion import with_pass_disabled, without_misfusion
from .temporaries import KeptTemporaries


def hlo_module_proto(stablehlo: str) -> bytes:
    """The serialized `xla.HloModuleProto` of a StableHLO module, aliases included."""
    load_jax()
    from jax._src.lib import _jax as jaxlib

    computation = jaxlib.mlir.mlir_module_to_xla_computation(
        stablehlo, use_tuple_args=False, return_tuple=False)
    return computation.as_serialized_hlo_module_proto()


# The passes the XLA engine runs on the program before XLA:CPU compiles it: written
# arguments without their unit dimensions (a batch-1 KV cache that attention reads is
# copied otherwise), the dots then read through the reshapes that leaves and the
# transposes of weights, a vector's dot with a weight taken weight first (XLA:CPU
# copies the weight transposed otherwise), convolutions whose window is larger than
# their input are dots (XLA:CPU's convolution is hundreds of times slower there),
# larger convolutions and matrix products are eager's kernels, and so are large
# pointwise ops between them (ReLUs, their gradients, an optimizer's multiply-adds: on
# every core, where XLA's loop there runs on one), written arguments updated
# elementwise (an optimizer's) are flat (XLA:CPU vectorizes only a loop's innermost
# dimension), and bfloat16 ones updated in place (a cache) are their 16-bit integers
# (XLA:CPU converts the whole cache to float32 and back otherwise).
LEGALIZE_FOR_CPU = ("builtin.module(outofplace-composites-as-kernel-calls, "
                    "outofplace-squeeze-state, "
                    "outofplace-fold-transposes-into-dots, "
                    "outofplace-vector-dots-weight-first, "
                    "outofplace-convolutions-as-kernel-calls, "
                    "outofplace-small-convolutions-as-dots, "
                    "outofplace-dots-as-kernel-calls, "
                    "outofplace-pointwise-as-kernel-calls, "
                    "outofplace-transposed-kernel-operands, "
                    "outofplace-flatten-state, "
                    "outofplace-bfloat16-state-as-bits)")


def legalize_for_cpu(stablehlo: str) -> tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The StableHLO the XLA engine compiles for a module (`LEGALIZE_FOR_CPU`), and the
    shapes of its arguments and results: a written argument's without its unit
    dimensions, or flat (the caller's buffer holds the same bytes)."""
    text, inputs, results, _, _ = legalized(stablehlo)
    return text, [shape for shape, _ in inputs], [shape for shape, _ in results]


TensorType = tuple[tuple[int, ...], str]  # (shape, element type: "f32", "bf16", "i16")


def legalized(stablehlo: str, pipeline: str = LEGALIZE_FOR_CPU
              ) -> tuple[str, list[TensorType], list[TensorType], dict[int, int], bool]:
    """The module after `pipeline` (`LEGALIZE_FOR_CPU`, or the mesh's), the types of its
    arguments and results, each result that returns the same value as an earlier
    result ({result: that earlier result}), and whether it calls eager's kernels
    (`dots_as_kernel_calls.calls_eager_kernels`: it runs at home, `options_for`)."""
    from torch_mlir import ir

    from ...context import make_context
    from ...ir_utils import main_function
    from ...transforms.dots_as_kernel_calls import calls_eager_kernels
    from ...transforms.pipelines import run_pipeline

    if not custom_calls.register_eager():  # no handler built: XLA's convolutions and dots
        for kind in ("composites", "convolutions", "dots", "pointwise"):
            pipeline = pipeline.replace(f"outofplace-{kind}-as-kernel-calls, ", "")
    with make_context():
        module = ir.Module.parse(stablehlo)
        run_pipeline(module, pipeline)
        main = main_function(module)
        function_type = ir.FunctionType(main.type)
        types = [[(tuple(ir.RankedTensorType(t).shape), str(ir.RankedTensorType(t).element_type))
                  for t in ts] for ts in (function_type.inputs, function_type.results)]
        returned = list(main.regions[0].blocks[0].operations)[-1].operands
        first: dict[Any, int] = {}
        same = {r: first.setdefault(v, r) for r, v in enumerate(returned)}
        return module.operation.get_asm(), *types, \
            {r: f for r, f in same.items() if f != r}, calls_eager_kernels(module.operation)


def options_of(options: dict[str, Any]) -> Any:
    from jax._src.lib import xla_client

    compile_options = xla_client.CompileOptions()
    compile_options.env_option_overrides = list(options.items())
    if client_module.COLLECTIVES is not None:  # every rank a replica
        client_module.COLLECTIVES.place(compile_options)
    return compile_options


def compile_for_cpu(stablehlo: str, options: dict[str, Any] = None) -> Any:
    """The loaded XLA:CPU executable of a StableHLO module on outofplace's client, safe from
    the misfusion above, compiled with `options` (default: `COMPILE_OPTIONS`)."""
    def build(options: dict[str, Any]) -> Any:
        try:
            return client().compile_and_load(stablehlo, device_list(), options_of(options))
        except Exception as error:  # XLA's own text: our StableHLO is at fault
            raise XlaCompileError(stablehlo, error) from error

    return without_misfusion(build, COMPILE_OPTIONS if options is None else options)


def cached_compile_for_cpu(stablehlo: str, options: dict[str, Any], cache: bool | None
                           ) -> tuple[Any, list[TensorType], list[TensorType], dict[int, int]]:
    """`compile_for_cpu` of `legalized(stablehlo)`: the executable, the types of its
    arguments and results and the results returning an earlier one's value; or, when the
    compile cache holds them (compile_cache.py, on unless `cache` is False), the
    executable PJRT serialized then, deserialized, and the rest as they were. An
    executable that keeps temporaries between calls (temporaries.py) is a
    `KeptTemporaries`, taking and returning the program's own arguments and results."""
    import os

    # (whether the kernel handler is there: an executable compiled with it calls it, one
    # compiled without it has XLA's convolutions; its file's digest is in every key, but
    # a file present may still fail to load)
    handler = "kernel handler " + ("registered" if custom_calls.register_eager()
                                   else "absent")
    entry = compile_cache.key(
        "xla", stablehlo, LEGALIZE_FOR_CPU, temporaries.POLICY,
        repr(temporaries.CANDIDATES), repr(sorted(options.items())),
        os.environ.get("XLA_FLAGS", ""),
        client().platform_version, compile_cache.cpu(), handler) \
        if compile_cache.enabled(cache) and client_module.COLLECTIVES is None else None
    found = compile_cache.read("xla", entry) if entry is not None else None
    if found is not None:
        metadata, blob = found
        try:
            executable = client().deserialize_executable(blob, device_list(),
                                                          options_of(options))
            kept = [(tuple(shape), dtype) for shape, dtype in metadata["temporaries"]]
            if kept:
                executable = KeptTemporaries(executable, kept)
            return executable, *([(tuple(s), e) for s, e in metadata[k]]
                                 for k in ("inputs", "results")), \
                {int(r): f for r, f in metadata["same_results"]}
        except Exception as error:  # read back whole, yet PJRT refuses it: compile
            compile_cache.stats["xla corrupt"] += 1
            compile_cache.logger.warning("outofplace compile cache: ignoring the entry "
                                         "%s (%s)", entry, error)
    with progress.stage("xla compile"):
        text, inputs, results, same_results, calls_eager = legalized(stablehlo)
        options = options_for(options, calls_eager)
        executable = compile_for_cpu(text, options)
        kept = temporaries.kept(text, executable, options, compile_for_cpu)
        if kept is not None:
            executable, kept_temporaries = kept
    if entry is not None:
        compile_cache.write("xla", entry, {"inputs": inputs, "results": results,
                                           "same_results": sorted(same_results.items()),
                                           "temporaries": [] if kept is None
                                           else kept_temporaries},
                            executable.serialize())
    if kept is not None:
        executable = KeptTemporaries(executable, kept_temporaries)
    return executable, inputs, results, same_results


def options_for(options: dict[str, Any], calls_eager: bool) -> dict[str, Any]:
    """XLA's `options` for a program; one that calls eager's kernels (`calls_eager`)
    without XLA's parallel task assignment (`UNSPLIT`)."""
    return with_pass_disabled(options, UNSPLIT) if calls_eager else options


class XlaCompileError(RuntimeError):
    """XLA:CPU rejected the StableHLO outofplace emitted: a bug of outofplace's. The
    message names a file holding the module, to report and reproduce it with."""

    def __init__(self, stablehlo: str, error: Exception) -> None:
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".mlir", prefix="outofplace-xla-",
                                         delete=False) as file:
            file.write(stablehlo)
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        super().__init__(f"internal error: XLA:CPU could not compile the StableHLO "
                         f"outofplace emitted, a bug of outofplace's (please report it "
                         f"with {file.name}): {first}")


# XLA:CPU's copy insertion, by default, copies a donated buffer that the program also reads
# (a slice before or after the update, attention over the whole cache): a copy of the whole
# state every call. Its region analysis proves these reads safe and leaves the update in
# place (docs/backends.md). With excess precision allowed (XLA's default), XLA drops the
# rounding to bfloat16/float16 between two ops (a float32 -> bfloat16 -> float32 convert
# pair), where eager rounds after every op: results differ from eager's in a third of the
# elements of `x * 0.1 + y * 3.3 - 0.2` in bfloat16. XLA's reshape mover sinks the reshape
# of a non-flat operand of a flat update (outofplace-flatten-state) below the ops that
# read it: a gradient's square in Adam's `v.mul_(b2).addcmul_(g, g, ...)` became a product
# of the gradient's shape beside the flat state, which XLA's fusion emitter did not
# contract into the add as eager's fused multiply-add does (a third of a convolution
# weight's second moment one rounding off); without it the update is one flat loop.
COMPILE_OPTIONS = {"xla_cpu_copy_insertion_use_region_analysis": True,
                   "xla_allow_excess_precision": False,
                   "xla_disable_hlo_passes": "reshape-mover"}

# XLA:CPU splits a large loop fusion in two, one half run by the thread running the
# program, the other handed to XLA's thread pool (its parallel task assignment: the
# fusion's `outer_dimension_partitions`). A program that calls eager's kernels runs them
# on the caller's OpenMP team, and its fusions on the caller's thread between them
# (kernel_home.h), while the team's other thread spins on the second core waiting for
# the next kernel (libgomp's wait policy, which eager's own loops rely on): the half
# XLA hands its pool shares that core with the spinner, and the fusion waits for it.
# Whole, a fusion is done sooner: ResNet-18's 64x64 training step (batch 8, SGD) spent
# 13.8-15.2 ms a step in fusions split, 10.6 unsplit (jax.profiler, one process each);
# the 12.7M Llama's training step took 1.09x and 1.13x eager's time unsplit against 1.23x
# and 1.24x split (bench/real_models.py rows, alternating processes; decode rows within
# the machine's spread). A program without eager's kernels keeps the split: nothing of
# outofplace's spins beside it.
UNSPLIT = "cpu-parallel-task-assigner"
