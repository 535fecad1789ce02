"""`outofplace export` on a model file, as docs/cli.md shows it; errors without tracebacks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "outofplace.tools.cli"]


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_export_writes_every_format(tmp_path):
    result = _run("export", "examples/export_model.py:kv_cache", "-o", str(tmp_path),
                  "--dump-ir", str(tmp_path / "ir"), "--print-names")
    assert result.returncode == 0, result.stderr
    assert "%kv_cache_modified" in result.stdout or "%kv_cache" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "io_map.json", "main.hlo.pb", "main.mlir", "main.mlirbc"]
    io_map = json.loads((tmp_path / "io_map.json").read_text())
    assert io_map["inputs"] == ["kv_cache", "step", "q", "k", "pos"]
    assert [a["input_name"] for a in io_map["aliases"]] == ["kv_cache", "step"]
    assert (tmp_path / "ir" / "1-after-inplace-to-outofplace.mlir").exists()
    assert "aliases: kv_cache -> result 1, step -> result 2" in result.stderr


def test_export_without_hlo_proto(tmp_path):
    """--no-hlo: the StableHLO formats only, nothing that needs jaxlib."""
    result = _run("export", "examples/export_model.py:kv_cache", "-o", str(tmp_path),
                  "--no-hlo")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "io_map.json", "main.mlir", "main.mlirbc"]


@pytest.mark.parametrize("args, message", [
    (["export", "missing.py:f"], "outofplace: error: no such file: missing.py"),
    (["export", "examples/export_model.py:nope"], "has no function 'nope'"),
    (["export", "examples/export_model.py"], "expected FILE.py:FACTORY"),
    (["export", "examples/export_model.py:kv_cache", "--bogus"],
     "unrecognized arguments: --bogus"),
    ([], "the following arguments are required: command"),
])
def test_errors_are_one_line(args, message):
    result = _run(*args)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_unsupported_program_names_the_line(tmp_path):
    (tmp_path / "bad.py").write_text(
        "import torch\n"
        "def f(x):\n"
        "    x.t_()\n"
        "def factory():\n"
        "    return f, (torch.zeros(2, 3),)\n")
    result = _run("export", f"{tmp_path / 'bad.py'}:factory", "-o", str(tmp_path / "o"))
    assert result.returncode == 1
    assert "UnsupportedMutationError" in result.stderr and "bad.py:3" in result.stderr
    assert "Traceback" not in result.stderr
