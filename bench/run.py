"""`make bench`: emitted-code and compile-time benchmarks, written to docs/performance.md.

    .venv/bin/python bench/run.py --output docs/performance.md
    .venv/bin/python bench/run.py --sizes 64 --compile-ns 250,500 --output /tmp/p.md

Everything is measured in one run, side by side; the report states the machine, the
versions, the load on the machine while it ran, and checks each target against the numbers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore")

import calls  # noqa: E402
import compile_time  # noqa: E402
import custom_kernels  # noqa: E402
import emitted  # noqa: E402
import exports  # noqa: E402
import iree_kv  # noqa: E402
import loop_program  # noqa: E402
import op_classes  # noqa: E402
import real_models  # noqa: E402
import report  # noqa: E402
import tensor_parallel  # noqa: E402

# Sections a run may regenerate alone (`--sections`), in place in the existing report,
# between `<!-- section: NAME -->` and `<!-- end: NAME -->`.
SECTIONS = {"real-models": lambda log: real_models.run(real_models.ROWS, 20, log),
            "op-classes": lambda log: op_classes.run(log=log),
            "exports": lambda log: exports.run(log=log),
            "custom-kernels": lambda log: custom_kernels.run(log=log),
            "decode-loop": lambda log: loop_program.run(log),
            "tensor-parallel": lambda log: tensor_parallel.run(log)}


def _framed(name: str, text: str) -> str:
    return f"<!-- section: {name} -->\n{text.rstrip()}\n<!-- end: {name} -->\n"


def replace_section(document: str, name: str, text: str) -> str:
    """`document` with section `name` replaced by `text` (appended when it has none)."""
    begin, end = f"<!-- section: {name} -->", f"<!-- end: {name} -->"
    if begin not in document:
        return document.rstrip() + "\n\n" + _framed(name, text)
    head, rest = document.split(begin, 1)
    return head + _framed(name, text) + rest.split(end, 1)[1].lstrip("\n")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="docs/performance.md")
    parser.add_argument("--sizes", type=_ints, default=[64, 256, 1024],
                        help="cache sizes in MiB (default 64,256,1024)")
    parser.add_argument("--patterns", type=lambda s: s.split(","), default=None,
                        help="only these update patterns")
    parser.add_argument("--compile-ns", type=_ints,
                        default=[250, 500, 1000, 1200, 2000, 4000, 8000, 16000])
    parser.add_argument("--torch-mlir-ns", type=_ints,
                        default=[1200, 250, 500, 1000, 2000, 4000],
                        help="N for torch-mlir's default path, in the order tried "
                        "(1200 first: the target is defined there)")
    parser.add_argument("--budget-minutes", type=float, default=13.5,
                        help="wall-clock budget; compile-time programs projected past it "
                        "are skipped and say so")
    parser.add_argument("--call-sizes", type=_ints, default=[16, 256, 1024],
                        help="cache sizes in MiB of the user's-path calls (default 16,256,1024)")
    parser.add_argument("--skip", choices=["emitted", "iree", "compile", "calls", "sharded",
                                           *SECTIONS],
                        action="append",
                        default=[])
    parser.add_argument("--sections", type=lambda s: s.split(","), default=None,
                        help=f"only these sections ({', '.join(SECTIONS)}), rewritten in "
                        "place in the existing --output")
    args = parser.parse_args()

    start = time.time()
    if args.sections:
        out = Path(args.output)
        document = out.read_text()
        for name in args.sections:
            document = replace_section(document, name, SECTIONS[name](
                lambda m: print(f"[{time.time() - start:6.1f}s] {m}", flush=True)))
        out.write_text(document)
        return
    deadline = start + args.budget_minutes * 60 - 20  # leave time to write the report
    machine = report.machine_info()

    def log(message: str) -> None:
        print(f"[{time.time() - start:6.1f}s] {message}", flush=True)

    log(f"load average at start: {os.getloadavg()}")
    rows, floor = [], {}
    if "emitted" not in args.skip:
        rows, floor = emitted.run([s << 20 for s in args.sizes], emitted.Settings(), log,
                                  args.patterns)
    iree_rows = []
    if "iree" not in args.skip:
        from outofplace.backends import iree

        if iree.available():
            iree_rows = iree_kv.run([s << 20 for s in args.sizes], log, args.patterns)
    load_after_emitted = os.getloadavg()
    call_rows: tuple = ([], [], None)
    if "calls" not in args.skip:
        call_rows = calls.run([s << 20 for s in args.call_sizes], log)
    compile_rows, torch_mlir, program_ok = [], {}, None
    if "compile" not in args.skip:
        compile_rows, torch_mlir, program_ok = compile_time.run(
            args.compile_ns, args.torch_mlir_ns, deadline, log)
    sharded = ""
    if "sharded" not in args.skip:  # its own process: jax fixes the device count at start
        log("sharded KV update on 4 devices")
        sharded = subprocess.run([sys.executable, str(Path(__file__).parent / "sharded.py")],
                                 capture_output=True, text=True, check=True).stdout
    sections = "".join("\n" + _framed(name, run(log)) for name, run in SECTIONS.items()
                       if name not in args.skip)
    elapsed = time.time() - start
    load_end = os.getloadavg()
    text = report.render(machine=machine, rows=rows, floor=floor,
                         iree_section=iree_kv.render(iree_rows) if iree_rows else "",
                         compile_rows=compile_rows, torch_mlir=torch_mlir,
                         program_ok=program_ok, elapsed=elapsed, calls=call_rows,
                         loads={"start": machine["load"], "after emitted code":
                                load_after_emitted, "end": load_end},
                         command=" ".join(["bench/run.py", *sys.argv[1:]]))
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + ("\n" + sharded if sharded else "") + sections)
    log(f"wrote {out} ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
