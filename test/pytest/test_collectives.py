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


def launch(world: int, cases: list) -> list[list]:
    """Runs `cases` in `world` rank processes; each rank's results, in rank order. A
    rank that fails or outlives TIMEOUT_S ends the launch (the others are killed)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE.parent.parent / "python"), os.environ.get("PYTHONPATH", "")]),
        OUTOFPLACE_CACHE="0", OUTOFPLACE_COLLECTIVES_TIMEOUT="60")
    port = str(_free_port())
    ranks = [subprocess.Popen(
        [sys.executable, str(HERE / "collective_programs.py"), str(r), str(world), port,
         json.dumps(cases)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for r in range(world)]
    outputs = []
    try:
        for process in ranks:
            out, err = process.communicate(timeout=TIMEOUT_S)
            if process.returncode:
                raise AssertionError(f"a rank failed ({process.returncode}):\n{err[-3000:]}")
            outputs.append([json.loads(line[len("RESULT "):])
                            for line in out.splitlines() if line.startswith("RESULT ")])
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return outputs


def check_megatron(outputs: list[list], world: int) -> None:
    for results in outputs:
        assert results, "a rank printed no result"
        for case, dtype, path, result in results:
            assert result["worst"] < (1e-5 if dtype == "float32" else 1e-12), \
                (case, dtype, path, result["worst"])
            assert result["in_place"], (case, dtype, path)
            if result["collectives"] is not None:
                found = result["collectives"]
                assert [c["op"] for c in found] == ["stablehlo.all_reduce"] * 2
                assert all(c["groups"] == [list(range(world))] for c in found)
                assert len({c["channel"] for c in found}) == 2


def test_megatron_block_two_ranks() -> None:
    """A Megatron block per rank (column-parallel q/k/v/up, row-parallel o/down with an
    in-place dist.all_reduce, a rank-local KV cache written at the step's position) over
    4 decode steps: outofplace.compile float32 and torch.compile float64."""
    outputs = launch(2, [["megatron", "float32", 4, "compile"],
                         ["megatron", "float64", 4, "dynamo"]])
    check_megatron(outputs, 2)
    assert len(outputs[0]) == 2


def test_megatron_block_four_ranks() -> None:
    outputs = launch(4, [["megatron", "float64", 3, "compile"]])
    check_megatron(outputs, 4)
