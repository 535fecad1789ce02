"""docs/passes.md's table is the pass registry's: regenerate it after changing a
registration (`python -m outofplace.tools.passes_doc`)."""

from pathlib import Path

from outofplace.tools import passes_doc
from outofplace.transforms.pipelines import PASSES, PIPELINES

DOC = Path(__file__).resolve().parents[2] / "docs" / "passes.md"


def test_passes_md_is_generated_from_the_registry():
    assert passes_doc.main([str(DOC), "--check"]) == 0, \
        "docs/passes.md is stale: run python -m outofplace.tools.passes_doc"


def test_a_changed_registration_makes_the_doc_stale(tmp_path):
    copy = tmp_path / "passes.md"
    copy.write_text(DOC.read_text())
    registered = PASSES["outofplace-verify-stablehlo"]
    PASSES["outofplace-verify-stablehlo"] = type(registered)(
        registered.argument, registered.fn, registered.summary, "something else")
    try:
        assert passes_doc.main([str(copy), "--check"]) == 1
        assert passes_doc.main([str(copy)]) == 0
        assert "| `outofplace-verify-stablehlo` | pass | something else |" in copy.read_text()
    finally:
        PASSES["outofplace-verify-stablehlo"] = registered


def test_every_pass_and_pipeline_has_a_row():
    text = DOC.read_text()
    for name in [*PASSES, *PIPELINES]:
        assert f"| `{name}` |" in text


def test_backends_md_lists_the_iree_workarounds_from_the_registry():
    backends = DOC.parent / "backends.md"
    assert passes_doc.main([str(backends), "--check"]) == 0, \
        "docs/backends.md is stale: run python -m outofplace.tools.passes_doc"
    text = backends.read_text()
    for name in PIPELINES["legalize-for-iree"].elements:
        assert f"| `{name}` |" in text


def test_every_pass_has_a_lit_test_of_its_name():
    """One name shared by a pass and its lit test (test/<pass name>.mlir)."""
    tests = DOC.parents[1] / "test"
    missing = [name for name in PASSES if not (tests / f"{name}.mlir").exists()]
    assert not missing, f"passes without a lit test of their name: {missing}"
