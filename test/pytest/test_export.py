"""Exports: portable artifact and HLO proto load in jaxlib and keep the aliases."""

import json

import pytest
import torch

import outofplace

jax = pytest.importorskip("jax")

from jax._src.interpreters import mlir as jax_mlir  # noqa: E402
from jax._src.lib import _jax  # noqa: E402

from test_xla import hlo_aliases  # noqa: E402


def kv_step(cache, pos, k):
    cache[:, pos] = k
    return cache.sum()


def _compiled() -> outofplace.Compiled:
    return outofplace.compile(kv_step, (torch.randn(2, 8), torch.tensor(3), torch.randn(2)))


def test_portable_artifact_loads_in_jaxlib_with_aliases():
    artifact = _compiled().portable_artifact()
    with jax_mlir.make_ir_context():
        module = _jax.mlir.deserialize_portable_artifact(artifact)
        text = str(module)
    assert "tf.aliasing_output = 1 : i32" in text
    assert "stablehlo.dynamic_update_slice" in text


def test_portable_artifact_rejects_unknown_target():
    with pytest.raises(Exception):
        _compiled().portable_artifact(target="99.0.0")


def test_hlo_module_proto_carries_input_output_alias():
    entries = hlo_aliases(_compiled().hlo_module_proto())
    assert [(e["parameter_number"], e["output_shape_index"]) for e in entries] == [(0, [1])]


def test_save_writes_every_format(tmp_path):
    compiled = _compiled()
    written = compiled.save(tmp_path)
    assert sorted(p.name for p in written) == ["io_map.json", "main.hlo.pb", "main.mlir",
                                               "main.mlirbc"]
    assert (tmp_path / "main.mlir").read_text() == compiled.stablehlo
    names = json.loads((tmp_path / "io_map.json").read_text())
    checked = names.pop("checked")
    assert names == {
        "inputs": ["cache", "pos", "k"],
        "outputs": ["output_0", "cache_modified"],
        "aliases": [{"input": 0, "input_name": "cache", "output": 1}],
    }
    # which consumers the artifacts were checked on: a plain XLA:CPU client, with its
    # default options and with the option outofplace's engine compiles with
    assert [c["options"] for c in checked] == [
        {}, {"xla_cpu_copy_insertion_use_region_analysis": True}]
    assert all(c["consumer"].startswith("XLA:CPU (jaxlib ") for c in checked)
    assert checked[1] == {**checked[1], "in_place": True, "problems": []}
    assert hlo_aliases((tmp_path / "main.hlo.pb").read_bytes())[0]["parameter_number"] == 0
