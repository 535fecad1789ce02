"""Mutated `.mlir` input never makes `outofplace-opt` print a traceback or abort.

A fixed seed and FIXED_CASES cases in `make test`; OUTOFPLACE_MLIR_FUZZ_CASES=N (and
OUTOFPLACE_MLIR_FUZZ_SEED) for a longer run, or `python test/fuzz/mlir_mutations.py`.
"""

import os

import mlir_mutations

FIXED_CASES = 300


def test_mutated_mlir_gives_one_line_errors_never_tracebacks():
    count = int(os.environ.get("OUTOFPLACE_MLIR_FUZZ_CASES") or 0) or FIXED_CASES
    seed = int(os.environ.get("OUTOFPLACE_MLIR_FUZZ_SEED") or 0)
    outcomes, counts = mlir_mutations.run(mlir_mutations.cases(count, seed))
    problems = [f"case {o.case.number} ({o.case.pipeline}): {o.problem}\n{o.case.text}"
                for o in outcomes if o.problem]
    assert not problems, f"{len(problems)} of {count} cases:\n\n" + "\n\n".join(problems[:5])
    assert counts["clean"] + counts["refused"] == count, counts
    print(f"{count} mutated inputs: {counts}")
