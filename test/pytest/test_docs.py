"""Every code sample in the README and docs/ runs as written.

- README, api, models, backends: the ```python blocks of a page form one program, run top
  to bottom.
- index-categories: each ```python block is a program `f` with example `args`, compiled
  and run against eager on every engine.
- passes: the ```sh commands run on a lit test's input; cli: the factory shown is the one
  in examples/export_model.py (test_cli.py runs `outofplace export` on it).
"""

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from differential import assert_matches_eager

ROOT = Path(__file__).resolve().parents[2]
# Pages whose ```python blocks form one runnable program, top to bottom.
PAGES = ["README.md", "docs/api.md", "docs/models.md", "docs/backends.md", "docs/shapes.md",
         "docs/sharding.md", "docs/training.md"]


def _blocks(page: str, language: str = "python") -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / page).read_text(), re.S)


@pytest.mark.parametrize("page", PAGES)
def test_samples_run(page, tmp_path, monkeypatch):
    """Each page's samples run top to bottom, without a warning (a sample that shows one
    catches it itself)."""
    blocks = _blocks(page)
    assert blocks, f"{page} has no Python sample"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_sample"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for block in blocks:
            exec(compile(block, page, "exec"), namespace)
    ours = [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught
            if "outofplace" in w.filename or w.filename == page]
    assert not ours, f"{page}'s samples warn:\n" + "\n".join(ours)


CATEGORY_SAMPLES = _blocks("docs/index-categories.md")


@pytest.mark.parametrize("number", range(len(CATEGORY_SAMPLES)))
def test_index_category_sample_matches_eager(number):
    namespace: dict = {"torch": torch}
    exec(compile(CATEGORY_SAMPLES[number], "docs/index-categories.md", "exec"), namespace)
    assert_matches_eager(namespace["f"], *namespace["args"])


def test_pass_pipeline_commands_run(tmp_path):
    """docs/passes.md's commands, on the first program of a lit test as `in.mlir`."""
    lit_test = (ROOT / "test" / "inplace-to-stablehlo-pipeline.mlir").read_text()
    (tmp_path / "in.mlir").write_text(lit_test.split("// -----")[0])
    commands = [line for block in _blocks("docs/passes.md", "sh")
                for line in block.splitlines() if line.strip()]
    assert commands
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                                f"{os.environ['PATH']}")
    for command in commands:
        result = subprocess.run(command, shell=True, cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{command}: {result.stderr}"
    assert "stablehlo.add" in (tmp_path / "out.mlir").read_text()


def test_cli_factory_sample_is_the_example():
    example = (ROOT / "examples" / "export_model.py").read_text()
    for block in _blocks("docs/cli.md"):
        assert block in example, f"docs/cli.md shows code not in export_model.py:\n{block}"
    assert shutil.which("outofplace", path=str(Path(sys.executable).parent))


def test_demo_runs():
    """`make demo` (the README's first command) runs examples/kv_cache.py."""
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "kv_cache.py")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]


# A cited path names a file of the project, found from the repository's root, the
# package or one of its stages, docs/, test/ or the citing file's folders. These are outputs a page shows a
# command writing, not files of the project.
_OUTPUTS = ("out/", "path/to/", "member_0/", "family_out/", "test/Output/")
_CITED_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.(?:py|md|mlir|cpp|h|toml|cfg|"
                         r"txt|json|sh))(?![\w/])")
_CITED_PAGE = re.compile(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)")
# Paths inside other projects (torch-mlir's, PyTorch's) that pages cite.
_OTHER_PROJECTS = ("torch/", "lib/", "torch_mlir/", "jax/", "xla/", "iree/")


def _citing_texts():
    """(file, text) of each docs page and the README, and each module docstring of the
    package, the tests and the benchmarks; the changelog is history, left out."""
    import ast

    package = ROOT / "python" / "outofplace"
    for page in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        if page.name != "changelog.md":
            yield page, page.read_text()
    for module in [*sorted(package.rglob("*.py")), *sorted((ROOT / "test").rglob("*.py")),
                   *sorted((ROOT / "bench").glob("*.py"))]:
        yield module, ast.get_docstring(ast.parse(module.read_text())) or ""


def test_every_cited_file_exists():
    """A path (`frontend/upstream/scans.py`, `test/pytest/test_docs.py`, a page link) cited
    by a page or a module docstring names a file the project has."""
    package = ROOT / "python" / "outofplace"
    bases = [ROOT, package, *(package / stage for stage in ("frontend", "transforms",
                                                            "backends")),
             ROOT / "python", ROOT / "docs", ROOT / "test", ROOT / "test" / "pytest"]
    missing = []
    for source, text in _citing_texts():
        for cited in [m.group(1) for m in _CITED_PATH.finditer(text)] + \
                [m.group(1) for m in _CITED_PAGE.finditer(text)]:
            if cited.startswith(_OUTPUTS + _OTHER_PROJECTS):
                continue
            folders = [p for p in source.parents if ROOT in (p, *p.parents)]
            if not any((base / cited).exists() for base in bases + folders):
                missing.append(f"{source.relative_to(ROOT)}: {cited}")
    assert not missing, "cited files that do not exist:\n" + "\n".join(missing)
