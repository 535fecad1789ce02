"""Tensor-parallel programs with collectives, run across processes (docs/sharding.md,
"Tensor-parallel programs with collectives"): each rank process (collective_programs.py)
compiles its rank's program and runs it on XLA:CPU, the collectives crossing the
processes through XLA:CPU's gloo collectives, against eager with torch.distributed's gloo
in the same processes. Loopback only, each launch bounded in time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")
import torch.distributed as dist  # noqa: E402

if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

HERE = Path(__file__).parent
TIMEOUT_S = 150


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world: int, cases: list, **environment: str) -> list[list]:
    """Runs `cases` in `world` rank processes; each rank's results, in rank order. A
    rank that fails ends the launch at once, the others killed (one waiting in a
    collective for it would wait forever); so does TIMEOUT_S."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE.parent.parent / "python"), os.environ.get("PYTHONPATH", "")]),
        OUTOFPLACE_CACHE="0", OUTOFPLACE_COLLECTIVES_TIMEOUT="60", **environment)
    port = str(_free_port())
    with tempfile.TemporaryDirectory() as folder:
        logs = [(Path(folder) / f"{r}.out", Path(folder) / f"{r}.err") for r in range(world)]
        ranks = []
        try:
            for r, (out, err) in enumerate(logs):
                with out.open("w") as stdout, err.open("w") as stderr:
                    ranks.append(subprocess.Popen(
                        [sys.executable, str(HERE / "collective_programs.py"), str(r),
                         str(world), port, json.dumps(cases)],
                        env=env, stdout=stdout, stderr=stderr))
            deadline = time.monotonic() + TIMEOUT_S
            while any(p.poll() is None for p in ranks):
                failed = [r for r, p in enumerate(ranks) if p.poll()]
                if failed or time.monotonic() > deadline:
                    why = f"rank {failed[0]} failed ({ranks[failed[0]].returncode})" \
                        if failed else f"the ranks ran past {TIMEOUT_S} s"
                    raise AssertionError(f"{why}:\n" + logs[failed[0] if failed else 0][1]
                                         .read_text()[-3000:])
                time.sleep(0.2)
            for r, p in enumerate(ranks):
                assert p.returncode == 0, \
                    f"rank {r} failed ({p.returncode}):\n{logs[r][1].read_text()[-3000:]}"
            return [[json.loads(line[len("RESULT "):])
                     for line in out.read_text().splitlines() if line.startswith("RESULT ")]
                    for out, _ in logs]
        finally:
            for p in ranks:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def check(outputs: list[list], cases: list, groups: dict[str, list]) -> None:
    """Every rank ran every case; each matched eager (relative to the outputs' scale for
    the blocks) with its state in place; its StableHLO (outofplace.compile's) holds the
    collectives `groups` names for the case, each its replica groups, each all_reduce,
    all_gather and reduce_scatter its own channel."""
    for results in outputs:
        assert [r[:3] for r in results] == [[c[0], c[1], c[3]] for c in cases]
        for case, dtype, path, result in results:
            assert result["worst"] < (1e-5 if dtype == "float32" else 1e-12), \
                (case, dtype, path, result["worst"])
            assert result["in_place"], (case, dtype, path)
            if path == "compile":
                found = result["collectives"]
                assert [(c["op"], c["groups"]) for c in found] == groups[case]
                channels = [c["channel"] for c in found if c["channel"] is not None]
                assert len(set(channels)) == len(channels) == \
                    sum(c["op"] != "stablehlo.all_to_all" for c in found)


def test_two_ranks() -> None:
    """On 2 ranks: a Megatron block per rank (column-parallel q/k/v/up, row-parallel
    o/down each followed by an in-place dist.all_reduce, a rank-local KV cache written at
    the step's position) over 4 decode steps, and the in-place c10d calls into
    preallocated outputs (all_gather_into_tensor into a buffer, reduce_scatter_tensor,
    all_to_all_single, all_reduce max and avg): outofplace.compile in float32,
    torch.compile in float64; a tiny transformers Llama made tensor-parallel by
    parallelize_module (its rank-local program, outofplace.rank_local) over 3 decode
    steps of its static cache."""
    cases = [["megatron", "float32", 4, "compile"], ["megatron", "float64", 4, "dynamo"],
             ["collectives", "float32", 2, "compile"],
             ["collectives", "float64", 2, "dynamo"], ["llama", "float32", 3, "compile"]]
    world = [[0, 1]]
    check(launch(2, cases), cases, {
        "megatron": [("stablehlo.all_reduce", world)] * 2,
        "llama": [("stablehlo.all_reduce", world)] * 4,
        "collectives": [("stablehlo.all_gather", world), ("stablehlo.reduce_scatter", world),
                        ("stablehlo.all_to_all", world), ("stablehlo.all_reduce", world),
                        ("stablehlo.all_reduce", world)]})


def test_four_ranks(tmp_path: Path) -> None:
    """On 4 ranks: the Megatron block over the world (float64); over the "tp" dimension
    of a 2 x 2 DeviceMesh with its output averaged over "dp" (float32); as one program
    for every rank, a rank input picking each rank's shard of the whole weights (the
    same StableHLO on every rank), saved: each rank's artifacts in its folder, with its
    replica groups and aliases."""
    cases = [["megatron", "float64", 3, "compile"], ["mesh", "float32", 3, "compile"],
             ["one_program", "float32", 3, "compile"]]
    tp, dp, world = [[0, 1], [2, 3]], [[0, 2], [1, 3]], [[0, 1, 2, 3]]
    outputs = launch(4, cases, OUTOFPLACE_TEST_SAVE=str(tmp_path))
    check(outputs, cases, {
        "megatron": [("stablehlo.all_reduce", world)] * 2,
        "mesh": [("stablehlo.all_reduce", tp)] * 2 + [("stablehlo.all_reduce", dp)],
        "one_program": [("stablehlo.all_reduce", world)] * 2})
    assert len({results[2][3]["digest"] for results in outputs}) == 1
    for rank in range(4):
        saved = json.loads((tmp_path / f"rank{rank}" / "io_map.json").read_text())
        assert saved["collectives"] == {"rank": rank, "world": 4,
                                        "process_groups": {"0": world}}
        assert {a["input_name"] for a in saved["aliases"]} == {"k_cache", "v_cache"}
        text = (tmp_path / f"rank{rank}" / "main.mlir").read_text()
        assert text.count("stablehlo.all_reduce") == 2 and "mhlo.num_replicas = 4" in text
        assert (tmp_path / f"rank{rank}" / "main.hlo.pb").stat().st_size > 0
