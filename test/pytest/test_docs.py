"""Every Python sample in the README and the guides in docs/ runs as written."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Pages whose ```python blocks form one runnable program, top to bottom.
PAGES = ["README.md", "docs/api.md", "docs/models.md", "docs/backends.md"]


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)


@pytest.mark.parametrize("page", PAGES)
def test_samples_run(page, tmp_path, monkeypatch):
    blocks = _blocks(page)
    assert blocks, f"{page} has no Python sample"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_sample"}
    for block in blocks:
        exec(compile(block, page, "exec"), namespace)
