"""`outofplace export` on a model file, as docs/cli.md shows it; errors without tracebacks;
what `outofplace-opt` imports (its lit tests start it about eighty times)."""

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


def test_opt_imports_the_passes_alone():
    """outofplace-opt imports the passes, not the frontend's tracing and import, the
    engines, sympy or ml_dtypes (torch-mlir's fx_importer): each is a part of a second at
    every start."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, outofplace.tools.opt; print(sorted(m for m in "
         "sys.modules if m.split('.')[0] in ('sympy', 'ml_dtypes', 'jax') or m in ("
         "'outofplace.frontend.tracing', 'outofplace.frontend.importer', "
         "'outofplace.backends', 'outofplace.compiled', "
         "'torch_mlir.extras.fx_importer')))"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


def test_dtype_tables_are_torch_mlirs():
    """torch_types' tables, kept so that the passes need not import fx_importer, are
    torch-mlir's."""
    from torch_mlir.extras import fx_importer

    from outofplace import torch_types

    assert torch_types.TORCH_DTYPE_TO_MLIR_TYPE_ASM == fx_importer.TORCH_DTYPE_TO_MLIR_TYPE_ASM
    assert torch_types.TORCH_DTYPE_TO_INT == fx_importer.TORCH_DTYPE_TO_INT
