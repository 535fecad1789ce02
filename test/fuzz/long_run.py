"""A long differential fuzzing run that survives crashes and keeps every finding.

    python test/fuzz/long_run.py --programs 10000 --workers 2 --seed 1 --out test/Output/long

Program `i` is drawn from the hypothesis strategy with seed `seed + i`, so any finding is reproduced by
its number alone (`--only i`). Each worker process checks programs one after another
exactly as test_fuzz.py does (compiled against eager on every engine) and appends one JSON
line per program to its log: passed, refused (with the reason) or failed (with the error
and the runnable reproducer). A program that kills its worker (an abort in native code) is
logged as a crash by the runner, which starts a new worker after it. Nothing is shrunk:
the reproducers are minimised by hand into regression tests. The counts go to
summary.txt. Each passing program's record holds a digest of its StableHLO; `--recheck
K` compiles the first K passing programs again in a fresh process (on a finished run
too) and counts those whose StableHLO differs: compiling must not depend on the process. With the engine "dynamo", a program outofplace.compile
refuses goes through torch.compile(backend="outofplace") too: compiled there alone, it
is a failure of the run ("one-path", issue 32: one behaviour on both paths), unless
dynamo hands the backend no graph holding the refused statement (it runs it eagerly
between two graphs: "split", counted apart);
`--other-path-of-refused` does that for the refused programs of a run made before. A
program whose torch.compile path differs from eager under torch's own backends too
("eager", "aot_eager") is PyTorch's ("upstream", counted apart). A module program whose
float values differ from eager's only within eager's own rounding of the program run in
float64 (fuzz_modules_check._within_eager_rounding) is "rounding", counted apart with
where it differed.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pytest")]


def _draw(number: int, seed: int):
    """Program `number` of the run, drawn from the strategy with its own random seed.

    Drawn outside hypothesis's engine (ConjectureData with a seeded Random): the engine
    starts every run from the simplest example, so one example per seed would always be
    the same small program.
    """
    import random

    from hypothesis.control import BuildContext
    from hypothesis.internal.conjecture.data import ConjectureData

    from fuzz_modules import module_programs
    from fuzz_programs import programs

    data = ConjectureData(random=random.Random(seed + number))
    with BuildContext(data, wrapped_test=_draw):
        return data.draw(module_programs() if MODULES else programs())


# --modules: nn.Modules with state called several times (fuzz_modules.py) on both paths
MODULES = os.environ.get("OUTOFPLACE_FUZZ_MODULES") == "1"


def check_module(program) -> dict:
    """A module program on every path of fuzz_modules_check.PATHS, as test_fuzz_modules.py
    checks it."""
    import outofplace
    from fuzz_modules_check import (SplitByDynamo, UpstreamDivergence,
                                    assert_module_matches_eager, eager_rejects)
    from test_fuzz import refusal_reason

    cls, held, calls = program.build()
    if eager_rejects(cls, held, calls):
        return {"outcome": "eager-rejects"}
    start = time.perf_counter()
    rounded: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_module_matches_eager(cls, held, calls, rounded=rounded)
        outcome = {"outcome": "rounding", "where": rounded[:8],
                   "reproducer": program.reproducer()} if rounded else {"outcome": "passed"}
    except UpstreamDivergence as error:
        outcome = {"outcome": "upstream", "reason": refusal_reason(error),
                   "error": str(error)[:2000], "reproducer": program.reproducer()}
    except outofplace.UnsupportedMutationError as error:
        outcome = {"outcome": "refused", "reason": refusal_reason(error),
                   "source": program.reproducer()}
    except SplitByDynamo as error:
        outcome = {"outcome": "split", "reason": refusal_reason(error.refusal),
                   "reproducer": program.reproducer()}
    except Exception as error:  # noqa: BLE001 - every other exception is a finding
        outcome = {"outcome": "failed", "error": f"{type(error).__name__}: {error}"[:2000],
                   "where": traceback.format_exc().splitlines()[-3:],
                   "reproducer": program.reproducer()}
    outcome["seconds"] = time.perf_counter() - start
    return outcome


def check(program) -> dict:
    """One program against eager: what happened, as a JSON-able record."""
    import both_paths
    import differential
    import outofplace
    from fuzz_programs import assert_program_matches_eager
    from test_fuzz import refusal_reason

    if MODULES:
        return check_module(program)
    f, args, kwargs = program.build()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f(*args, **kwargs)
    except Exception:  # noqa: BLE001 - not a valid eager program
        return {"outcome": "eager-rejects"}
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = assert_program_matches_eager(program)
        outcome = {"outcome": "passed",
                   "digest": hashlib.sha256(compiled.stablehlo.encode()).hexdigest()[:16]}
    except outofplace.UnsupportedMutationError as error:
        outcome = {"outcome": "refused", "reason": refusal_reason(error),
                   "source": program.function_source()}
        if "dynamo" in differential.ENGINES:
            outcome.update(both_paths.other_path(f, args, kwargs, error,
                                                 program.reproducer))
    except Exception as error:  # noqa: BLE001 - every other exception is a finding
        outcome = {"outcome": "failed", "error": f"{type(error).__name__}: {error}"[:2000],
                   "where": traceback.format_exc().splitlines()[-3:],
                   "reproducer": program.reproducer()}
        if isinstance(error, AssertionError) and str(error).startswith("[dynamo") and \
                both_paths.upstream(f, args, kwargs):
            outcome["outcome"] = "upstream"
    outcome["seconds"] = time.perf_counter() - start
    return outcome


def worker(numbers: list[int], seed: int, log: Path) -> None:
    with open(log, "a") as out:
        for number in numbers:
            try:
                program = _draw(number, seed)
            except Exception as error:  # noqa: BLE001 - the strategy gave up on this seed
                out.write(json.dumps({"number": number, "outcome": "no-program",
                                      "error": f"{type(error).__name__}: {error}"}) + "\n")
                continue
            out.write(json.dumps({"number": number, "outcome": "started",
                                  "reproducer": program.reproducer()}) + "\n")
            out.flush()
            record = check(program)
            record["number"] = number
            out.write(json.dumps(record) + "\n")
            out.flush()


def _records(directory: Path) -> dict[int, dict]:
    """The last record of every program logged so far."""
    last: dict[int, dict] = {}
    for log in sorted(directory.glob("worker-*.jsonl")):
        for line in log.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                last[record["number"]] = record
    return last


def _environment(engines: str | None) -> dict[str, str]:
    """A worker's environment: every lowering pass verified, on the chosen engines."""
    env = dict(os.environ, OUTOFPLACE_VERIFY_EACH="1")
    if engines:
        env["OUTOFPLACE_TEST_ENGINES"] = engines
    return env


def run(total: int, workers: int, seed: int, directory: Path,
        per_process: int = 200, engines: str | None = None) -> dict[int, dict]:
    """Runs programs 0..total-1 over `workers` processes, restarting after crashes.

    A worker process checks at most `per_process` programs and exits: the memory one
    process keeps from program to program (about 2 MB each) would otherwise fill the
    machine in a run of 10,000, and slow it down well before."""
    directory.mkdir(parents=True, exist_ok=True)
    env = _environment(engines)
    while True:
        records = _records(directory)
        # A program whose last record is "started" killed its worker.
        for number, record in records.items():
            if record["outcome"] == "started":
                with open(directory / "worker-crashes.jsonl", "a") as out:
                    out.write(json.dumps({"number": number, "outcome": "crashed",
                                          "reproducer": record["reproducer"]}) + "\n")
        todo = [n for n in range(total) if n not in records]
        if not todo:
            return _records(directory)
        batch = todo[:workers * per_process]
        shares = [batch[k::workers] for k in range(workers)]
        processes = [subprocess.Popen(
            [sys.executable, __file__, "--worker", ",".join(map(str, share)),
             "--seed", str(seed), "--out", str(directory / f"worker-{k}.jsonl")], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for k, share in enumerate(shares) if share]
        for process in processes:
            process.wait()


def recheck(records: dict[int, dict], count: int, seed: int, directory: Path,
            engines: str | None = None) -> list[int]:
    """Compiles again, in a fresh process, the first `count` programs that passed, and
    returns those whose StableHLO differs from the first compilation's (compiling must
    not depend on the process: addresses, hash seeds)."""
    numbers = sorted(n for n, r in records.items() if r.get("digest"))[:count]
    log = directory / "recheck.jsonl"
    log.unlink(missing_ok=True)
    subprocess.run([sys.executable, __file__, "--worker", ",".join(map(str, numbers)),
                    "--seed", str(seed), "--out", str(log)],
                   env=_environment(engines),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    again = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        record = json.loads(line)
        again[record["number"]] = record
    return [n for n in numbers
            if again.get(n, {}).get("digest") != records[n]["digest"]]


def other_path_of_refused(records: dict[int, dict], seed: int, directory: Path,
                          engines: str | None = None) -> dict[int, dict]:
    """Checks again, in a fresh process, every program the run logged as refused, now
    also through torch.compile (`both_paths.other_path`, engine "dynamo"): for a run made before
    that check. Its records (worker-refused.jsonl) replace the refusals'."""
    numbers = sorted(n for n, r in records.items() if r["outcome"] == "refused")
    log = directory / "worker-refused.jsonl"
    log.unlink(missing_ok=True)
    subprocess.run([sys.executable, __file__, "--worker", ",".join(map(str, numbers)),
                    "--seed", str(seed), "--out", str(log)], env=_environment(engines),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return _records(directory)


def summary(records: dict[int, dict], seed: int) -> str:
    counts = collections.Counter(r["outcome"] for r in records.values())
    reasons = collections.Counter(r["reason"] for r in records.values()
                                  if r["outcome"] == "refused")
    seconds = [r["seconds"] for r in records.values() if "seconds" in r]
    programs = sum(counts[k] for k in ("passed", "rounding", "refused", "one-path", "split",
                                       "upstream", "failed", "crashed"))
    lines = [f"{programs} programs (seeds {seed}..{seed + len(records) - 1}): "
             f"{counts['passed']} match eager, "
             f"{counts['rounding']} match but for values within eager's own rounding of "
             "the program in float64, "
             f"{counts['refused']} refused, "
             f"{counts['one-path']} refused by outofplace.compile and compiled by "
             "torch.compile alone, "
             f"{counts['split']} refused at a statement dynamo runs eagerly between two "
             "graphs, "
             f"{counts['upstream']} fail on torch's own aot_eager too (PyTorch's bugs), "
             f"{counts['failed']} failed, {counts['crashed']} crashed a worker, "
             f"{counts['eager-rejects']} rejected by eager and {counts['no-program']} "
             "seeds without a program (not counted); "
             f"{sum(seconds) / max(len(seconds), 1):.2f} s per program"]
    lines += [f"  {n:6d} refused  {reason}" for reason, n in reasons.most_common()]
    one_path = collections.Counter(
        (r["reason"], bool(r["graph_breaks"])) for r in records.values()
        if r["outcome"] == "one-path")
    lines += [f"  {n:6d} torch.compile alone ({'with' if breaks else 'without'} a graph "
              f"break)  {reason}" for (reason, breaks), n in one_path.most_common()]
    split = collections.Counter(r["reason"] for r in records.values()
                                if r["outcome"] == "split")
    lines += [f"  {n:6d} split by dynamo  {reason}" for reason, n in split.most_common()]
    for record in records.values():
        if record["outcome"] in ("failed", "crashed", "upstream"):
            lines += ["", f"--- program {record['number']}: {record['outcome']} "
                          f"{record.get('error', '')}", record["reproducer"]]
        if record["outcome"] == "rounding":
            lines += ["", f"--- program {record['number']}: within eager's rounding at "
                          + "; ".join(record["where"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=str(HERE.parent / "Output" / "long"))
    parser.add_argument("--per-process", type=int, default=200,
                        help="programs a worker process checks before a fresh one takes over")
    parser.add_argument("--recheck", type=int, default=0, metavar="K",
                        help="compile the first K passing programs again in a fresh "
                        "process and compare the StableHLO (also on a finished run)")
    parser.add_argument("--engines", help="the engines to check on, comma-separated "
                        "(default: every one installed: interpreter, xla, iree; \"mesh\" adds "
                        "the program compiled again on 2 or 4 XLA:CPU devices)")
    parser.add_argument("--optimizer", action="store_true",
                        help="end a quarter of the programs with an optimizer-style "
                        "update (foreach lists, .item() arithmetic, a gradient then an "
                        "in-place update)")
    parser.add_argument("--position-views", action="store_true",
                        help="views at runtime positions (x[:, pos]) in view chains")
    parser.add_argument("--modules", action="store_true",
                        help="nn.Modules with state, called several times, on both paths "
                        "(fuzz_modules.py) instead of functions")
    parser.add_argument("--only", type=int, help="check program ONLY and print it")
    parser.add_argument("--other-path-of-refused", action="store_true",
                        help="on a finished run: check every refused program again, also "
                        "through torch.compile (with --engines including dynamo)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.optimizer:  # read by fuzz_programs in every worker (their environment)
        os.environ["OUTOFPLACE_FUZZ_OPTIMIZER"] = "1"
    if options.position_views:
        os.environ["OUTOFPLACE_FUZZ_POSITION_VIEWS"] = "1"
    if options.modules:
        os.environ["OUTOFPLACE_FUZZ_MODULES"] = "1"
        global MODULES
        MODULES = True
    if options.worker is not None:
        worker([int(n) for n in options.worker.split(",")], options.seed, Path(options.out))
        return 0
    if options.only is not None:
        program = _draw(options.only, options.seed)
        print(program.reproducer())
        print(json.dumps(check(program), indent=1))
        return 0
    directory = Path(options.out)
    records = run(options.programs, options.workers, options.seed, directory,
                  options.per_process, options.engines)
    if options.other_path_of_refused:
        records = other_path_of_refused(records, options.seed, directory, options.engines)
    text = summary(records, options.seed)
    if options.engines:
        text = f"engines: {options.engines}\n" + text
    differing: list[int] = []
    if options.recheck:
        differing = recheck(records, options.recheck, options.seed, directory,
                            options.engines)
        text += (f"\nrecompiled in a fresh process: the first {options.recheck} passing "
                 f"programs, {len(differing)} with other StableHLO"
                 + (f": {differing}" if differing else ""))
    (directory / "summary.txt").write_text(text + "\n")
    print(text)
    bad = sum(r["outcome"] in ("failed", "crashed", "one-path") for r in records.values())
    return 1 if bad or differing else 0


if __name__ == "__main__":
    sys.exit(main())
