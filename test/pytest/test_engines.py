"""The engine contract (backends/engines.py): every engine's executable, and the planned
calls, write each written argument's new value into the caller's tensor and return that
tensor itself as the written argument's result; every other result is a tensor of its
own. Values against eager."""

from __future__ import annotations

import pytest
import torch

import outofplace
from outofplace.backends import iree, xla

from differential import assert_same

pytestmark = pytest.mark.filterwarnings("ignore::outofplace.OutOfBoundsPolicyWarning")

ENGINES = ["interpreter",
           pytest.param("xla", marks=pytest.mark.skipif(not xla.available(),
                                                        reason="needs the xla extra")),
           pytest.param("iree", marks=pytest.mark.skipif(not iree.available(),
                                                         reason="needs the iree extra")),
           pytest.param("mesh", marks=pytest.mark.skipif(not xla.available(),
                                                         reason="needs the xla extra"))]


def write(cache, pos, k):
    cache[:, pos] = k
    return k.sum(), k * 2


def _args(dtype: torch.dtype) -> tuple:
    return (torch.randn(4, 8, 3, dtype=dtype), torch.tensor(5),
            torch.randn(4, 3, dtype=dtype))


def _compile(engine: str, args: tuple) -> outofplace.Compiled:
    if engine == "mesh":
        return outofplace.compile(write, args, mesh={"x": 2},
                                  shardings={"cache": ("x", None, None)})
    return outofplace.compile(write, args, engine=engine)


def _assert_contract(results: list, inputs: list, io_map: dict, expected: tuple) -> None:
    assert len(results) == 3
    for argument, result in io_map.items():
        assert results[result] is inputs[argument], \
            f"result {result} is {type(results[result]).__name__}, not the caller's tensor"
    others = [r for i, r in enumerate(results) if i not in io_map.values()]
    for actual, value in zip(others, expected):
        assert isinstance(actual, torch.Tensor)
        assert all(actual.data_ptr() != t.data_ptr() for t in inputs if t.numel())
        assert_same(actual, value, "result")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_written_arguments_result_is_the_callers_tensor(engine, dtype) -> None:
    args = _args(dtype)
    compiled = _compile(engine, args)
    assert compiled.io_map == {0: 2}
    cache, pos, k = _args(dtype)
    eager = cache.clone()
    expected = write(eager, pos, k)
    inputs = compiled._arguments((cache, pos, k), {})
    executable = compiled._sharded() if engine == "mesh" else compiled._executable(engine)
    results = executable(inputs)
    _assert_contract(results, inputs, compiled.io_map, expected)
    assert_same(cache, eager, "cache")


@pytest.mark.skipif(not xla.available(), reason="needs the xla extra")
@pytest.mark.parametrize("planned", ["C++", "Python", "mesh"])
def test_the_planned_calls_keep_the_contract(planned) -> None:
    """The planned calls (planned_call.cpp and its Python twin, sharded_call.cpp) return
    the same as the executable they stand for."""
    if planned != "Python" and xla.extension() is None:
        pytest.skip("the C++ extension is not built")
    args = _args(torch.float32)
    compiled = _compile("mesh" if planned == "mesh" else "xla", args)
    cache, pos, k = _args(torch.float32)
    compiled(cache, pos, k)  # adopted (or resident), and the next calls planned
    call = compiled._planned
    assert call is not None
    if planned == "Python":
        executable = compiled._executable("xla")
        call = xla.planned.PlannedCall(xla.call_plan(executable, _layouts(cache, pos, k),
                                                     [0]))
    eager = cache.clone()
    pos = torch.tensor(2)
    expected = write(eager, pos, k)
    inputs = [cache, pos, k]
    results = call(inputs)
    assert results is not None, "the planned call handed a call like the last back"
    _assert_contract(results, inputs, compiled.io_map, expected)
    assert_same(cache, eager, "cache")


def _layouts(*tensors: torch.Tensor) -> list[tuple]:
    return [(t.dtype, tuple(t.shape), t.stride(), t.storage_offset()) for t in tensors]
