"""The showcase of control flow with in-place state (examples/decode_loop.py): N greedy
decode steps of a transformers Llama with a static cache in one `while_loop`, N a
runtime input, against eager's Python loop calling the model N times."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import outofplace  # noqa: E402
from decode_loop import DecodeLoop, eager_loop, tiny_llama  # noqa: E402
from outofplace.backends import xla  # noqa: E402

CACHES = {f"step.{kind}_{layer}" for kind in ("key_cache", "value_cache")
          for layer in range(2)}


def test_decode_loop_tokens_and_caches_equal_eager() -> None:
    step = tiny_llama()
    reference = copy.deepcopy(step)
    out = torch.zeros(16, dtype=torch.int64)
    compiled = outofplace.compile(DecodeLoop(step), (torch.tensor([[3]]), torch.tensor(0),
                                                     torch.tensor(2), out.clone()))
    assert CACHES <= {compiled.input_names[i] for i in compiled.io_map}
    token, expected_token, start = torch.tensor([[3]]), torch.tensor([[3]]), 0
    for n in (5, 0, 7):  # one program: runtime trip counts, none, the cache carried on
        out, expected = torch.zeros(16, dtype=torch.int64), torch.zeros(16, dtype=torch.int64)
        token = compiled(token, torch.tensor(start), torch.tensor(n), out)
        expected_token = eager_loop(reference, expected_token, start, n, expected)
        assert torch.equal(out, expected) and torch.equal(token, expected_token)
        start += n
        for name, value in step.named_buffers():
            assert torch.allclose(value, dict(reference.named_buffers())[name],
                                  rtol=1e-4, atol=1e-5), name
    assert (out[:7] != 0).any()
    assert all(compiled.in_place_report[name] == "in place" for name in CACHES)


def test_decode_loop_caches_are_not_copied_per_iteration() -> None:
    """XLA:CPU's optimized program: the while carries every cache, and no copy of a
    cache's shape exists anywhere (entry or loop body). (At these shapes XLA:CPU copied
    each cache in every iteration, 12 copies, until outofplace-squeeze-state dropped the
    carried caches' unit dimension as it does arguments'.)"""
    step = tiny_llama(max_cache_len=64, hidden_size=128, num_attention_heads=2,
                      num_key_value_heads=2, intermediate_size=128)
    compiled = outofplace.compile(DecodeLoop(step), (torch.tensor([[3]]), torch.tensor(0),
                                                     torch.tensor(2),
                                                     torch.zeros(16, dtype=torch.int64)))
    assert compiled.alias_problems("xla") == []
    hlo = "\n".join(m.to_string() for m in xla.compile_for_cpu(
        xla.legalize_for_cpu(compiled.stablehlo)[0]).hlo_modules())
    assert " while(" in hlo
    shape = "x".join(map(str, step.key_cache_0.shape))
    assert f"tensor<{shape}xf32>" in compiled.stablehlo
    hlo_shape = ",".join(map(str, [d for d in step.key_cache_0.shape if d != 1]))
    assert not re.search(rf"f32\[(1,)*{hlo_shape}\]\{{[0-9,]*\}} copy\(", hlo)


def test_decode_loop_through_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same loop through `torch.compile(backend="outofplace")` (with gradients off:
    dynamo takes writes in a region only then): one graph holding the while, compiled
    by outofplace; tokens and caches equal eager's."""
    import outofplace.dynamo

    programs = []
    compile_program = outofplace.dynamo.compile_program

    def spy(*args: object, **kwargs: object) -> outofplace.Compiled:
        programs.append(compile_program(*args, **kwargs))
        return programs[-1]

    monkeypatch.setattr(outofplace.dynamo, "compile_program", spy)
    torch._dynamo.reset()
    step = tiny_llama()
    reference = copy.deepcopy(step)
    loop = torch.compile(DecodeLoop(step), backend="outofplace")
    token, expected_token, start = torch.tensor([[3]]), torch.tensor([[3]]), 0
    for n in (4, 0, 3):
        out, expected = torch.zeros(16, dtype=torch.int64), torch.zeros(16, dtype=torch.int64)
        with torch.no_grad():
            token = loop(token, torch.tensor(start), torch.tensor(n), out)
        expected_token = eager_loop(reference, expected_token, start, n, expected)
        assert torch.equal(out, expected) and torch.equal(token, expected_token)
        start += n
    for name, value in step.named_buffers():
        assert torch.allclose(value, dict(reference.named_buffers())[name],
                              rtol=1e-4, atol=1e-5), name
    assert len(programs) == 1 and "stablehlo.while" in programs[0].stablehlo
