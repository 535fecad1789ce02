"""What compiling holds besides the weights (issue 31 item 4, docs/models.md "Weights too
big for the host: compile on meta"): the peak resident growth of `outofplace.compile` and
of the first call of a transformers Llama decode step (static-cache export wrapper, batch
1, a cache of 256, random weights), by stage.

    .venv/bin/python bench/compile_memory.py 148M            # real weights
    .venv/bin/python bench/compile_memory.py 1.1B --meta     # compiled on meta, then loaded
    .venv/bin/python bench/compile_memory.py 7B --meta --no-call

With --meta the model is built under `torch.device("meta")` (its cache on the CPU),
compiled, then materialised (`to_empty`, weights drawn in place, the rotary frequencies
rebuilt) and called. Resident memory is sampled from /proc/self/statm every 3 ms; one
model a process, and one process at a time on a shared host (1.1B: 4.1 GiB of weights).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import threading
import time
import warnings
from typing import Any, Callable

warnings.filterwarnings("ignore")

CACHE = 256
DECODERS = {  # LlamaConfig fields
    "148M": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=14,
                 num_attention_heads=12, num_key_value_heads=12, vocab_size=32000),
    "1.1B": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                 num_attention_heads=32, num_key_value_heads=4, vocab_size=32000),
    "7B": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=32, vocab_size=32000),
}
GIB = 1 << 30


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Stages:
    """The peak resident memory while each stage runs (a stage: the outermost wrapped
    function running), sampled by a thread."""

    def __init__(self) -> None:
        self.stage, self.peaks = "other", {}
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            rss, stage = _rss(), self.stage
            self.peaks[stage] = max(self.peaks.get(stage, 0), rss)
            time.sleep(0.003)

    def wrap(self, owner: Any, name: str, stage: str) -> None:
        function = getattr(owner, name)

        @functools.wraps(function)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            outer, self.stage = self.stage, stage if self.stage == "other" else self.stage
            try:
                return function(*args, **kwargs)
            finally:
                self.stage = outer

        setattr(owner, name, wrapped)

    def measure(self, title: str, weights: int, run: Callable[[], Any]) -> Any:
        gc.collect()
        start = _rss()
        self.peaks.clear()
        began = time.perf_counter()
        result = run()
        seconds = time.perf_counter() - began
        time.sleep(0.02)
        peak = max(self.peaks.values())
        print(f"{title}: {seconds:.1f} s, peak growth {(peak - start) / GIB:.3f} GiB "
              f"({(peak - start) / weights:.1%} of the weights)")
        for stage, value in sorted(self.peaks.items(), key=lambda kv: kv[1]):
            print(f"    {stage:<34} {(value - start) / GIB:7.3f} GiB")
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("size", choices=DECODERS)
    parser.add_argument("--meta", action="store_true", help="compile on meta weights")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--no-call", action="store_true", help="compile only")
    options = parser.parse_args()

    import torch
    import transformers
    from transformers.integrations import executorch

    import outofplace
    from outofplace import compiled as compiled_module
    from outofplace.backends import xla
    from outofplace.frontend import importer, tracing

    stages = Stages()
    stages.wrap(tracing, "export", "torch.export")
    stages.wrap(importer, "import_program", "import into torch-mlir")
    stages.wrap(compiled_module, "run_stage", "passes and lowering")
    stages.wrap(xla, "legalize_for_cpu", "XLA engine's legalization")
    stages.wrap(xla, "compile_for_cpu", "XLA:CPU compiling")
    dtype = getattr(torch, options.dtype)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(max_position_embeddings=2 * CACHE,
                                      attn_implementation="sdpa", **DECODERS[options.size])
    with torch.device("meta" if options.meta else "cpu"):
        model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static")
    wrapper = executorch.TorchExportableModuleWithStaticCache(
        model, batch_size=1, max_cache_len=CACHE, device="cpu")
    weights = sum(p.nbytes for p in model.parameters())
    print(f"{options.size} Llama, {weights / GIB:.2f} GiB of {options.dtype} weights"
          f"{' on meta' if options.meta else ''}")
    ids, position = torch.tensor([[5]]), torch.tensor([CACHE // 2])
    with torch.no_grad():
        compiled = stages.measure("compile", weights, lambda: outofplace.compile(
            wrapper, (ids,), {"cache_position": position}))
        if options.no_call:
            return
        if options.meta:
            model.to_empty(device="cpu")
            for parameter in model.parameters():
                parameter.normal_(0, 0.02)
            model.model.rotary_emb = type(model.model.rotary_emb)(config).to(dtype)
        stages.measure("first call", weights,
                       lambda: compiled(ids, cache_position=position))
        stages.measure("second call", weights,
                       lambda: compiled(ids, cache_position=position + 1))


if __name__ == "__main__":
    sys.exit(main())
