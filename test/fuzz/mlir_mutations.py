"""Hostile input for `outofplace-opt`: mutated `.mlir` files must give one line on stderr
and exit code 1 (or a clean run), never a traceback and never an abort.

Cases are the chunks of the lit tests under test/ with random mutations: characters and
spans deleted, duplicated or replaced, lines swapped, the text truncated, and tokens
(types, shapes, op names, numbers, SSA names) swapped for others of the corpus, which
keeps much of the input parsable so the passes, not only the parser, see it. Each is run
with one of a few pipelines.

A worker process runs `outofplace.tools.opt.main` on one case after another with file
descriptors 1 and 2 captured (so MLIR's own C++ diagnostics are seen too); the runner
feeds it and restarts it when a case kills it, which is then reported as an abort.

    python test/fuzz/mlir_mutations.py --cases 1000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ["builtin.module(inplace-to-outofplace)",
             "builtin.module(inplace-to-stablehlo-pipeline)",
             "builtin.module(inplace-to-outofplace, canonicalize, outofplace-lower-to-stablehlo)",
             "builtin.module(outofplace-fold-empty-tensors, outofplace-decompose-diagonal)"]
_TOKEN = re.compile(r"%[\w.$-]+|!torch\.\w+(?:<[^>\n]*>)?|\b(?:si|ui|i|f|bf)\d+\b|"
                    r"\[[\d,?]*\]|\btorch(?:_c)?\.[\w.]+|\bstablehlo\.\w+|-?\b\d+\b")
_CHARS = "%:<>()[]{},!\"=-?x0123456789 \n"
CASE_SECONDS = 60


def corpus() -> list[str]:
    """The chunks of every .mlir lit test, RUN and CHECK lines dropped."""
    chunks = []
    for path in sorted((ROOT / "test").rglob("*.mlir")):
        if "Output" in path.parts:
            continue
        for chunk in path.read_text().split("// -----"):
            lines = [ln for ln in chunk.splitlines() if not ln.lstrip().startswith("//")]
            if any(ln.strip() for ln in lines):
                chunks.append("\n".join(lines) + "\n")
    return chunks


def mutate(text: str, rng: random.Random, tokens: list[str]) -> str:
    """A few random mutations of `text` (mostly one, so that much still parses)."""
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        if not text:
            break
        kind = rng.randrange(9)
        at = rng.randrange(len(text))
        if kind == 0:  # delete a span
            text = text[:at] + text[at + rng.randint(1, 40):]
        elif kind == 1:  # duplicate a span
            end = at + rng.randint(1, 80)
            text = text[:end] + text[at:end] + text[end:]
        elif kind == 2:  # replace a character
            text = text[:at] + rng.choice(_CHARS) + text[at + 1:]
        elif kind == 3:  # swap two lines
            lines = text.splitlines(keepends=True)
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "".join(lines)
        elif kind == 4:  # truncate
            text = text[:at]
        else:  # swap a token for another of the corpus
            found = list(_TOKEN.finditer(text))
            if found:
                match = rng.choice(found)
                text = text[:match.start()] + rng.choice(tokens) + text[match.end():]
    return text


@dataclass
class Case:
    number: int
    text: str
    pipeline: str


def cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    chunks = corpus()
    tokens = sorted({m.group(0) for c in chunks for m in _TOKEN.finditer(c)})
    return [Case(n, mutate(rng.choice(chunks), rng, tokens), rng.choice(PIPELINES))
            for n in range(count)]


# ------------------------------------------------------------------------------ worker
def _capture(fd: int, path: str) -> int:
    saved = os.dup(fd)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(target, fd)
    os.close(target)
    return saved


def worker() -> None:
    """Reads cases (JSON lines) on stdin; answers each on the original stdout."""
    from outofplace.tools.opt import main

    answers = os.fdopen(os.dup(1), "w")
    directory = tempfile.mkdtemp(prefix="outofplace-mlir-fuzz-")
    source, out, err = (os.path.join(directory, n) for n in ("in.mlir", "out", "err"))
    for line in sys.stdin:
        case = json.loads(line)
        Path(source).write_text(case["text"])
        sys.stdout.flush()
        sys.stderr.flush()
        saved = (_capture(1, out), _capture(2, err))
        try:
            code = main([source, f"--pass-pipeline={case['pipeline']}"])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException as error:  # noqa: BLE001 - what the CLI would show as a traceback
            code = f"escaped {type(error).__name__}: {error}"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        answers.write(json.dumps({"code": code, "stderr": Path(err).read_text(
            errors="replace")}) + "\n")
        answers.flush()


# ------------------------------------------------------------------------------ runner
@dataclass
class Outcome:
    case: Case
    problem: str  # "" when the tool behaved


def judge(code: object, stderr: str) -> str:
    """What is wrong with the tool's behaviour on one case, or ''."""
    if not isinstance(code, int):
        return str(code)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if code == 0:
        return "" if not lines or not any("Traceback" in ln for ln in lines) else \
            "a traceback on success"
    if code != 1:
        return f"exit code {code}"
    if "Traceback" in stderr or "LLVM ERROR" in stderr:
        return "a traceback or LLVM error: " + " | ".join(lines[-3:])
    if len(lines) != 1 or not lines[0].startswith("outofplace-opt: "):
        return f"not one 'outofplace-opt:' line on stderr: {' | '.join(lines[:3])}"
    return ""


def run(all_cases: list[Case]) -> tuple[list[Outcome], dict[str, int]]:
    """Runs the cases in a worker, restarted after any case that kills it."""
    outcomes: list[Outcome] = []
    counts = {"clean": 0, "refused": 0, "problems": 0}
    process = None
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for case in all_cases:
        if process is None or process.poll() is not None:
            process = subprocess.Popen([sys.executable, __file__, "--worker"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True, env=env)
        process.stdin.write(json.dumps({"text": case.text, "pipeline": case.pipeline})
                            + "\n")
        process.stdin.flush()
        answer = process.stdout.readline()
        if not answer:
            process.wait()
            problem = f"the process died (signal/exit {process.returncode})"
        else:
            result = json.loads(answer)
            problem = judge(result["code"], result["stderr"])
            counts["clean" if result["code"] == 0 else "refused"] += not problem
        counts["problems"] += bool(problem)
        outcomes.append(Outcome(case, problem))
    if process is not None and process.poll() is None:
        process.stdin.close()
        process.wait(timeout=CASE_SECONDS)
    return outcomes, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        worker()
        return 0
    outcomes, counts = run(cases(options.cases, options.seed))
    for outcome in outcomes:
        if outcome.problem:
            print(f"case {outcome.case.number} ({outcome.case.pipeline}): "
                  f"{outcome.problem}\n{outcome.case.text}\n")
    print(f"{len(outcomes)} mutated inputs (seed {options.seed}): {counts['clean']} ran, "
          f"{counts['refused']} refused with one line and exit code 1, "
          f"{counts['problems']} problems")
    return 1 if counts["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
