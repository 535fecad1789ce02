"""Real models through the user's path: transformers Llama decoders at three sizes and a
ResNet-18 training step, against eager and inductor in one run (docs/performance.md,
"Real models").

    .venv/bin/python bench/real_models.py                 # every row, markdown on stdout
    .venv/bin/python bench/real_models.py --only 12.7M    # one row, JSON on stdout

Each model runs in a process of its own, so that its peak resident memory is its own: the
parent starts one per row (`--only`), each with an empty compile cache (compile times are
a first compile's; bench/compile_cache.py measures a second process), and renders the
rows. Weights are random (no
downloads); a decoder is transformers' `LlamaForCausalLM` in its static-cache export
wrapper (`TorchExportableModuleWithStaticCache`, docs/models.md), batch 1, a cache of
`CACHE` positions, timed on one decode step at a time as a serving loop calls it. Every
row times eager, outofplace and inductor in turns (`_interleaved`), so that the three meet
the same phases of a shared machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

warnings.filterwarnings("ignore")

CACHE = 256
ROUNDS = 8  # turns of eager, outofplace and inductor in a row (`_interleaved`)
DECODERS = {  # name: LlamaConfig fields (the names are the parameter counts; "family"
    # another transformers decoder's config and model)
    "12.7M": dict(hidden_size=256, intermediate_size=1536, num_hidden_layers=6,
                  num_attention_heads=8, num_key_value_heads=4, vocab_size=8192),
    "148M": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=14,
                 num_attention_heads=12, num_key_value_heads=12, vocab_size=32000),
    "1.1B": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,  # TinyLlama
                 num_attention_heads=32, num_key_value_heads=4, vocab_size=32000),
}
# The 148M decoder in bfloat16, weights and cache (how decoders are served): its
# projections are eager's kernels called from the program (XLA:CPU's bfloat16 dot reads
# a weight at 1.5 GB/s, transforms/vector_dots_weight_first.py).
DECODERS["148M bfloat16"] = dict(DECODERS["148M"], dtype="bfloat16")
# A mixture of experts (Mixtral's shape scaled down: 8 experts, 2 a token) in bfloat16:
# transformers' grouped experts, whose weights the XLA engine's call of eager's
# grouped_mm reads in place (frontend/upstream/grouped_mm.py)
DECODERS["153M mixtral bfloat16"] = dict(
    family="Mixtral", hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
    num_attention_heads=8, num_key_value_heads=4, vocab_size=8192, num_local_experts=8,
    num_experts_per_tok=2, dtype="bfloat16")
# ResNet-18's training step: (side, batch); at batch 16, 224x224, keeping every kernel
# result would hold more than twice XLA's temporaries (backends/xla/temporaries.py)
RESNET = {"resnet18 64x64": (64, 8), "resnet18 224x224": (224, 8),
          "resnet18 224x224 batch 16": (224, 16)}
# A decoder's training step: the 12.7M Llama (its config above), a batch of 4 sequences
# of 64 tokens, its causal-LM loss, AdamW
LLAMA_TRAINING = {"12.7M llama": dict(batch=4, tokens=64)}
ROWS = [*DECODERS, *RESNET, *LLAMA_TRAINING]


def _rss() -> int:
    """Resident memory now, bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    """The process's peak resident memory so far, bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _Peak:
    """The peak resident growth over a block, sampled by a thread every 5 ms."""

    def __enter__(self) -> "_Peak":
        import threading

        gc.collect()
        self.start, self.peak, self._done = _rss(), _rss(), False

        def sample() -> None:
            while not self._done:
                self.peak = max(self.peak, _rss())
                time.sleep(0.005)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done = True
        self._thread.join()
        self.peak = max(self.peak, _rss())
        self.growth = self.peak - self.start


def _times(step: Callable[[], Any], calls: int, budget: float) -> list[float]:
    """Seconds per call of `step`, after one warm-up call, up to `calls` or `budget` s."""
    step()
    out, end = [], time.perf_counter() + budget
    while len(out) < calls and (not out or time.perf_counter() < end):
        start = time.perf_counter()
        step()
        out.append(time.perf_counter() - start)
    return out


def _interleaved(steps: dict[str, Callable[[], Any]], rounds: int, per_round: int
                 ) -> dict[str, list[float]]:
    """Seconds per call of each step, measured in turns: each round calls every step
    `per_round` times, one step after the other, so that all meet the same phases of a
    shared machine (its speed drifts by 10-20% over tens of seconds, and a step measured
    whole before another would meet other phases than it); one warm-up call each."""
    for step in steps.values():
        step()
    out: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            for _ in range(per_round):
                start = time.perf_counter()
                step()
                out[name].append(time.perf_counter() - start)
    return out


def copy_bandwidth() -> float:
    """Bytes a second the machine reads and writes copying 256 MiB (read + write)."""
    import torch

    src, dst = torch.ones(64 << 20), torch.empty(64 << 20)
    best = min(_times(lambda: dst.copy_(src), 10, 5.0))
    return 2 * src.nbytes / best


def _decoder(name: str, meta: bool = False) -> Any:
    import torch
    import transformers
    from transformers.integrations import executorch

    torch.manual_seed(0)
    fields = dict(DECODERS[name])
    dtype = getattr(torch, fields.pop("dtype", "float32"))
    family = fields.pop("family", "Llama")
    config = getattr(transformers, f"{family}Config")(
        max_position_embeddings=2 * CACHE, attn_implementation="sdpa", **fields)
    model = getattr(transformers, f"{family}ForCausalLM")(config).to(dtype).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static", max_new_tokens=8)
    wrapper = executorch.TorchExportableModuleWithStaticCache(
        model, batch_size=1, max_cache_len=CACHE)
    return model, wrapper


def _decode_row(name: str, calls: int) -> dict[str, Any]:
    import torch

    import outofplace

    model, wrapper = _decoder(name)
    row: dict[str, Any] = {"row": name, "kind": "decode",
                           "parameters": sum(p.numel() for p in model.parameters())}
    row["weight_bytes"] = sum(p.nbytes for p in model.parameters())
    # what a token reads: of a mixture of experts' weights, its experts' share
    experts = getattr(model.config, "num_local_experts", None)
    row["read_bytes"] = row["weight_bytes"] - sum(
        p.nbytes * (1 - model.config.num_experts_per_tok / experts)
        for n, p in model.named_parameters() if experts and ".experts." in n)
    row["cache_bytes"] = sum(b.nbytes for n, b in wrapper.named_buffers() if "cache" in n)
    ids, position = torch.tensor([[5]]), torch.tensor([CACHE // 2])

    def eager() -> Any:
        return wrapper(ids, cache_position=position)

    with torch.no_grad():
        eager()
        with _Peak() as peak:
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                compiled = outofplace.compile(wrapper, (ids,), {"cache_position": position})
                row["compile_s"] = time.perf_counter() - start
        row["compile_growth"] = peak.growth
        with _Peak() as peak:
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as first_warnings:
                warnings.simplefilter("always")
                compiled(ids, cache_position=position)
            row["first_call_s"] = time.perf_counter() - start
        row["first_call_growth"] = peak.growth
        row["peak_rss"] = _peak_rss()  # outofplace's: before inductor compiles
        report = compiled.in_place_report
        caches = {n: v for n, v in report.items() if "cache" in n}
        row["caches"] = len(caches)
        row["caches_copied"] = sorted(n for n, v in caches.items() if v != "in place")
        row["others_copied"] = sorted(n for n, v in report.items()
                                      if n not in caches and v != "in place")
        row["warnings"] = len(caught) + len(first_warnings)
        steps = {"eager": eager, "outofplace": lambda: compiled(ids, cache_position=position)}
        try:
            inductor = torch.compile(wrapper, backend="inductor")
            start = time.perf_counter()
            inductor(ids, cache_position=position)
            row["inductor_compile_s"] = time.perf_counter() - start
            steps["inductor"] = lambda: inductor(ids, cache_position=position)
        except Exception as error:  # a row says why it has no inductor column
            row["inductor_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        # in turns, as a training row (`_interleaved`): eager, outofplace and inductor
        # timed one after the other met phases of the machine 10-25% apart
        times = _interleaved(steps, ROUNDS, max(2, calls // 4))
        row.update({name: statistics.median(t) for name, t in times.items()})
        compiled = inductor = None  # the compiled programs released before generate
        gc.collect()
    if row["parameters"] < 5e8:
        row.update(_generate(model))
    return row


def _generate(model: Any) -> dict[str, Any]:
    """`generate` of 16 new tokens with a static cache, eager and with the forward through
    the torch.compile backend (transformers' documented path), wall time of a second
    generate (the first compiles)."""
    import torch

    prompt = torch.tensor([[1, 5, 9, 2]])
    out: dict[str, Any] = {}

    def run() -> Any:
        return model.generate(prompt, max_new_tokens=16, do_sample=False,
                              cache_implementation="static")

    with torch.no_grad():
        run()
        start = time.perf_counter()
        expected = run()
        out["generate_eager_s"] = time.perf_counter() - start
        forward = model.forward
        try:
            model.forward = torch.compile(forward, backend="outofplace")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run()
                start = time.perf_counter()
                tokens = run()
                out["generate_outofplace_s"] = time.perf_counter() - start
            out["generate_same_tokens"] = bool(torch.equal(tokens, expected))
            out["generate_copy_warnings"] = sum("copied" in str(w.message) for w in caught)
        except Exception as error:
            out["generate_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        finally:
            model.forward = forward
    return out


def resnet18() -> Any:
    """ResNet-18 from torch.nn layers (torchvision does not import beside this torch)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def _training_case(name: str) -> tuple[Any, tuple, Callable, Callable]:
    """A training row's model, inputs, optimizer and loss: ResNet-18 with SGD (momentum)
    and cross entropy, or the 12.7M Llama with AdamW and its causal-LM loss."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    if name in RESNET:
        side, batch = RESNET[name]
        inputs = (torch.randn(batch, 3, side, side), torch.randint(1000, (batch,)))
        return (resnet18(), inputs,
                lambda net: torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9),
                lambda net, x, y: F.cross_entropy(net(x), y))
    import transformers

    shape = LLAMA_TRAINING[name]
    config = transformers.LlamaConfig(max_position_embeddings=2 * CACHE,
                                      attn_implementation="sdpa",
                                      **DECODERS[name.split()[0]])
    ids = torch.randint(config.vocab_size, (shape["batch"], shape["tokens"]))
    return (transformers.LlamaForCausalLM(config).train(), (ids,),
            lambda net: torch.optim.AdamW(net.parameters(), lr=1e-4),
            lambda net, ids: net(input_ids=ids, labels=ids).loss)


def _training_row(name: str, calls: int) -> dict[str, Any]:
    import copy

    import torch

    import outofplace

    model, inputs, optimizer, loss_of = _training_case(name)
    row: dict[str, Any] = {"row": name, "kind": "training",
                           "parameters": sum(p.numel() for p in model.parameters())}
    row["weight_bytes"] = sum(p.nbytes for p in model.parameters())

    def step_of(net: Any) -> Callable[..., Any]:
        opt = optimizer(net)

        def train(*inputs: torch.Tensor) -> torch.Tensor:
            opt.zero_grad()
            loss = loss_of(net, *inputs)
            loss.backward()
            opt.step()
            return loss.detach()
        train(*inputs)  # the state the compiled step updates
        return train

    eager = step_of(copy.deepcopy(model))
    train = step_of(copy.deepcopy(model))
    start = time.perf_counter()
    compiled = outofplace.compile(train, inputs)
    row["compile_s"] = time.perf_counter() - start
    compiled(*inputs)
    row["peak_rss"] = _peak_rss()  # outofplace's: before inductor compiles
    steps = {"eager": lambda: eager(*inputs), "outofplace": lambda: compiled(*inputs)}
    try:
        inductor_step = step_of(copy.deepcopy(model))
        inductor = torch.compile(inductor_step)
        start = time.perf_counter()
        inductor(*inputs)
        row["inductor_compile_s"] = time.perf_counter() - start
        steps["inductor"] = lambda: inductor(*inputs)
    except Exception as error:
        row["inductor_error"] = f"{type(error).__name__}: {str(error)[:200]}"
    # in turns (`_interleaved`): eager measured first and whole met other phases of the
    # machine than the compiled step after it, by as much as the difference measured
    times = _interleaved(steps, ROUNDS, max(2, calls // 4))
    row.update({name: statistics.median(t) for name, t in times.items()})
    return row


def measure(name: str, calls: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    row = _decode_row(name, calls) if name in DECODERS else _training_row(name, calls)
    row["bandwidth"] = copy_bandwidth()
    return row


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.1f} ms"


def _gb(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e9:.2f} GB"


def render(rows: list[dict[str, Any]], load: tuple) -> str:
    lines = ["## Real models", "",
             "Random-weight models on the path a user takes (bench/real_models.py, each in "
             "a process of its own), against eager and inductor in the same run. A "
             "decoder is transformers' `LlamaForCausalLM` (or `MixtralForCausalLM`, a "
             "mixture of experts) in its static-cache export "
             f"wrapper, batch 1, a {CACHE}-position cache, one decode step a call; "
             "the limit is the weights' bytes read once (of a mixture of "
             "experts', the chosen experts' share) at the machine's copy "
             "bandwidth (a 256 MiB `copy_`, bytes read and written a second). A training "
             "step is forward, backward and SGD with momentum on ResNet-18 built from "
             "torch.nn layers, batch 8 (16 where the row says), or forward, backward "
             "and AdamW on the 12.7M Llama (its causal-LM loss, 4 sequences of 64 "
             "tokens). In every row eager, "
             "inductor and outofplace run in turns "
             f"({ROUNDS} rounds; the median of every call), so that the three "
             "meet the same phases of the shared machine; peak RSS is outofplace's, "
             "before inductor compiles. "
             f"Load average over the run: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.",
             "", "| model | parameters | eager | inductor | outofplace | outofplace / "
             "eager | limit | outofplace / limit | caches copied |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['row']} | — | — | — | — | — | — | — | "
                         f"failed: {row['error']} |")
            continue
        limit = row["read_bytes"] / row["bandwidth"] if row["kind"] == "decode" else None
        copied = (f"{len(row['caches_copied'])} of {row['caches']}"
                  if row["kind"] == "decode" else "—")
        inductor = _ms(row["inductor"]) if "inductor" in row else \
            f"failed ({row.get('inductor_error', '')[:60]})"
        of_limit = "—" if limit is None else f"{row['outofplace'] / limit:.1f}x"
        lines.append(
            f"| {row['row']} {row['kind']} | {row['parameters'] / 1e6:,.1f}M | "
            f"{_ms(row['eager'])} | {inductor} | {_ms(row['outofplace'])} | "
            f"{row['outofplace'] / row['eager']:.2f}x | {_ms(limit)} | {of_limit} | "
            f"{copied} |")
    lines += ["", "| model | weights | compile | compile growth | first call | first-call "
              "growth | peak RSS | inductor compile | generate 16 tokens: eager / "
              "outofplace backend (same tokens; copy warnings) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        if "error" in row:
            continue
        generate = "—"
        if "generate_eager_s" in row:
            generate = (f"{row['generate_eager_s']:.2f} s / "
                        + (f"{row['generate_outofplace_s']:.2f} s "
                           f"({'same' if row['generate_same_tokens'] else 'DIFFERENT'}; "
                           f"{row['generate_copy_warnings']})"
                           if "generate_outofplace_s" in row
                           else f"failed: {row.get('generate_error', '')[:80]}"))
        inductor_compile = f"{row['inductor_compile_s']:.1f} s" \
            if "inductor_compile_s" in row else "—"
        lines.append(
            f"| {row['row']} | {_gb(row['weight_bytes'])} | {row['compile_s']:.1f} s | "
            f"{_gb(row.get('compile_growth'))} | {_ms(row.get('first_call_s'))} | "
            f"{_gb(row.get('first_call_growth'))} | {_gb(row['peak_rss'])} | "
            f"{inductor_compile} | {generate} |")
    return "\n".join(lines) + "\n"


def run(names: list[str], calls: int, log: Callable[[str], None] = print) -> str:
    """Every row in a process of its own; the section's markdown."""
    import tempfile

    rows = []
    for name in names:
        log(f"real models: {name}")
        with tempfile.TemporaryDirectory() as cache:  # compiles from nothing: a cold cache
            done = subprocess.run([sys.executable, __file__, "--only", name, "--calls",
                                   str(calls)], capture_output=True, text=True,
                                  env={**os.environ, "OUTOFPLACE_CACHE_DIR": cache})
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append({"row": name, "error": last[:200]})
            continue
        rows.append(json.loads(lines[-1]))
    return render(rows, os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=ROWS, help="one row, as JSON")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    if args.only:
        print(json.dumps(measure(args.only, args.calls)))
        return
    sys.stdout.write(run(args.rows.split(","), args.calls,
                         lambda m: print(m, file=sys.stderr, flush=True)))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
