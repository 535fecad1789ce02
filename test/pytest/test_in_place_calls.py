"""Calls update the caller's tensors in place (issue 14): XLA:CPU writes into the caller's
own memory, returned mutated inputs are the caller's tensors, bad calls raise named errors
before anything changes, layouts are checked, and a failing call loses nothing."""

from __future__ import annotations

import contextlib
import threading
import warnings
from pathlib import Path

import pytest
import torch

import outofplace
from outofplace import UnsupportedMutationError
from outofplace.backends import xla

from test_models import _Counting
from differential import (assert_matches_eager, assert_refused_alike, assert_same,
                          assert_same_tree, count_planned_calls,
                          engine_failing_after_taking_buffers)

pytest.importorskip("jax")
pytestmark = pytest.mark.filterwarnings("ignore::outofplace.OutOfBoundsPolicyWarning")


@pytest.fixture(params=["C++", "Python"], autouse=True)
def planned_call(request, monkeypatch) -> str:
    """Every test runs with the planned calls of backends/planned_call.cpp and with their
    Python twin (used when the extension is not built)."""
    if request.param == "Python":  # the twin, reading the same plan
        monkeypatch.setattr(xla, "planned_call", lambda executable, layouts, written:
                            xla.planned.PlannedCall(xla.call_plan(executable, layouts, written)))
    return request.param


def test_planned_call_extension_is_built(planned_call) -> None:
    """`make` builds the C++ planned call (setup.py); without it calls take the Python
    twin, which is slower."""
    from outofplace.backends import _planned_call

    compiled = outofplace.compile(step, step_args())
    cache, pos, k = step_args()
    compiled(cache, pos, k)
    assert isinstance(compiled._planned, _planned_call.PlannedCall if planned_call == "C++"
                      else xla.planned.PlannedCall)


def step(cache, pos, k):
    cache[:, pos] = k
    return k.sum()


def step_args(seq: int = 16) -> tuple:
    return torch.randn(4, seq, 2, 8), torch.tensor(3), torch.randn(4, 2, 8)


def test_kv_step_runs_in_the_callers_memory() -> None:
    compiled = assert_matches_eager(step, *step_args())
    cache, _, k = step_args()
    view = cache[1]  # taken before the first call
    expected = cache.clone()
    for pos in (3, 7, 3):
        compiled(cache, torch.tensor(pos), k * pos)
        expected[:, pos] = k * pos
        if pos == 3:
            address = cache.data_ptr()
        assert cache.data_ptr() == address  # the same memory, call after call
    assert_same(cache, expected, "cache")
    assert_same(view, expected[1], "a view taken before the first call")
    assert compiled.in_place_report == {"cache": "in place"}


@pytest.mark.parametrize("dtype", [torch.bool, torch.bfloat16, torch.int64, torch.float16])
def test_state_of_other_dtypes_in_place(dtype) -> None:
    def update(state, value):
        state[2:4] = value
        return state.sum(dtype=torch.float32)

    def make():
        return torch.zeros(8, 16).to(dtype), torch.ones(2, 16).to(dtype)
    compiled = assert_matches_eager(update, *make())
    state, value = make()
    compiled(state, value)
    address = state.data_ptr()
    compiled(state, value)
    assert state.data_ptr() == address
    assert compiled.in_place_report == {"state": "in place"}


def returns_cache(cache, k):
    cache[:, 5] = k
    return cache, cache[0], cache.t()


def test_returned_mutated_input_is_the_callers_tensor() -> None:
    args = (torch.randn(4, 8), torch.randn(4))
    compiled = assert_matches_eager(returns_cache, *args)
    # One result in the module: the aliased cache is not returned a second time, and
    # the views are taken of the caller's tensor.
    assert compiled.stablehlo.count("tf.aliasing_output") == 1
    assert compiled.stablehlo.count("-> tensor<4x8xf32> {") == 1
    for engine in ("xla", "interpreter"):
        cache, k = (a.clone() for a in args)
        out, row, transposed = compiled.run((cache, k), engine=engine)
        assert out is cache
        assert row._base is cache and transposed._base is cache
        eager_cache = args[0].clone()
        eager = returns_cache(eager_cache, args[1])
        assert (row.stride(), row.storage_offset()) == \
            (eager[1].stride(), eager[1].storage_offset())
        assert_same_tree((out, row, transposed), eager, f"[{engine}] outputs")
        row.fill_(7)  # eager's views write through
        assert bool((cache[0] == 7).all())


def returns_list_and_position_views(cache, pos, k):
    cache[:, pos] = k
    return cache.chunk(2, 1)[1], cache.split(3)[0], cache.unbind(1)[2], cache[:, pos], \
        cache[pos]


def test_returned_list_and_position_views_are_views_of_the_callers_tensor() -> None:
    """Views eager returns through split, chunk and unbind, and at a runtime position
    (`cache[:, pos]`, a 0-d tensor argument), are those views of the caller's tensor,
    taken with this call's position: not results of main, and writes through them
    reach the cache (fuzzer, seeds 9,400,135 and 9,400,253)."""
    args = (torch.randn(4, 6), torch.tensor(2), torch.randn(4))
    compiled = assert_matches_eager(returns_list_and_position_views, *args)
    assert compiled.stablehlo.count("-> tensor<4x6xf32> {") == 1  # the cache alone
    for engine in ("xla", "interpreter"):
        cache = args[0].clone()
        eager_cache = args[0].clone()
        for pos in (1, 3, -1):
            outs = compiled.run((cache, torch.tensor(pos), args[2]), engine=engine)
            eager = returns_list_and_position_views(eager_cache, torch.tensor(pos), args[2])
            for out, expected in zip(outs, eager):
                assert out._base is cache
                assert (out.shape, out.stride(), out.storage_offset()) == \
                    (expected.shape, expected.stride(), expected.storage_offset())
            assert_same_tree(outs, eager, f"[{engine}] outputs at {pos}")
            outs[3].fill_(pos)  # eager's views write through
            eager[3].fill_(pos)
            assert_same(cache, eager_cache, f"[{engine}] cache written through a view")


def test_input_returned_twice_and_unwritten_input_returned() -> None:
    def f(cache, x):
        cache.add_(x)
        return cache, cache, x
    compiled = assert_matches_eager(f, torch.randn(4), torch.randn(4))
    cache, x = torch.randn(4), torch.randn(4)
    a, b, c = compiled(cache, x)
    assert a is cache and b is cache and c is x


class Decoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 32, 8))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x, pos):
        self.cache[:, pos] = self.proj(x)
        return self.cache[:, :, 0].sum(-1)


def test_module_buffer_updated_in_place() -> None:
    torch.manual_seed(0)
    compiled = assert_matches_eager(Decoder(), torch.randn(2, 8), torch.tensor(4))
    model = Decoder()
    compiled = outofplace.compile(model, (torch.randn(2, 8), torch.tensor(0)))
    eager = Decoder()
    eager.load_state_dict(model.state_dict())
    for pos in range(3):
        x = torch.randn(2, 8)
        assert_same(compiled(x, torch.tensor(pos)), eager(x, torch.tensor(pos)), "output")
        if pos == 0:
            address = model.cache.data_ptr()
    assert model.cache.data_ptr() == address
    assert_same(model.cache, eager.cache, "cache")
    assert compiled.in_place_report == {"cache": "in place"}


def test_torch_compile_backend_in_place() -> None:
    torch._dynamo.reset()
    run = torch.compile(returns_cache, backend="outofplace", dynamic=False)
    cache, k = torch.randn(4, 8), torch.randn(4)
    eager_cache = cache.clone()
    out = run(cache, k)
    expected = returns_cache(eager_cache, k)
    assert out[0] is cache
    assert_same_tree(out, expected, "outputs")
    address = cache.data_ptr()
    run(cache, k * 2)
    returns_cache(eager_cache, k * 2)
    assert cache.data_ptr() == address
    assert_same(cache, eager_cache, "cache")


def make_cache(k):
    return torch.zeros(4, 8) + k  # a new tensor, over the buffer XLA wrote it in


def write_row(cache, k, pos):
    cache[pos] = k
    return cache.sum()


def test_a_result_written_by_another_program_is_taken_over() -> None:
    """A cache one program makes (a prefill creating StaticCache's tensors) and another
    writes (the decode steps): the result's XLA buffer is memory no one else sees, taken
    over once and then updated in place, without a warning, on the planned calls too."""
    make = outofplace.compile(make_cache, (torch.randn(8),))
    write = outofplace.compile(write_row, (torch.zeros(4, 8), torch.randn(8), torch.tensor(0)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for round in range(3):  # the first call of `make` is checked, the later planned
            k = torch.randn(8)
            cache, expected = make(k), make_cache(k)
            addresses = set()
            for pos in (1, 3, 1):
                v = torch.randn(8)
                assert_same(write(cache, v, torch.tensor(pos)),
                            write_row(expected, v, torch.tensor(pos)), "sum")
                addresses.add(cache.data_ptr())
            assert_same(cache, expected, f"cache, round {round}")
            assert len(addresses) == 1  # taken over once, then written in place
    assert not [w for w in caught if "copied" in str(w.message)], \
        [str(w.message) for w in caught]
    assert write.in_place_report["cache"] == "in place"


def test_memory_numpy_shares_is_still_copied() -> None:
    """Memory another owner sees (numpy's) is never taken over: the owner keeps seeing
    the tensor's values."""
    write = outofplace.compile(write_row, (torch.zeros(64, 256), torch.randn(256),
                                           torch.tensor(0)))
    array = torch.zeros(64, 256).numpy()  # 64 KiB: a copy worth a warning
    cache = torch.from_numpy(array)
    with pytest.warns(UserWarning, match="another owner allocated"):
        write(cache, torch.ones(256), torch.tensor(2))
    assert array[2].tolist() == [1.0] * 256


@pytest.mark.parametrize("family,dtype", [("Llama", torch.float32),
                                          ("Llama", torch.bfloat16),
                                          ("Mixtral", torch.bfloat16)])
def test_generate_through_the_torch_compile_backend_in_place(family, dtype,
                                                             monkeypatch) -> None:
    """transformers' documented path: `model.forward = torch.compile(model.forward,
    backend="outofplace")` and `generate` with a static cache. The caches the prefill graph
    creates are updated in place by the decode graph: the same tokens as eager, no copy
    (in bfloat16 too: outofplace-bfloat16-state-as-bits). Mixtral's experts count their
    tokens with histc and multiply with grouped_mm (frontend/upstream/; in float32
    transformers' own custom op, test_training_step.py's Mixtral step takes that path
    through torch.compile)."""
    transformers = pytest.importorskip("transformers")
    torch._dynamo.reset()
    torch.manual_seed(0)
    experts = {"num_local_experts": 4, "num_experts_per_tok": 2} if family == "Mixtral" \
        else {}
    config = getattr(transformers, f"{family}Config")(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=64, **experts)
    model = getattr(transformers, f"{family}ForCausalLM")(config).to(dtype).eval()
    prompt = torch.tensor([[1, 5, 9, 2]])
    monkeypatch.setattr(xla.executable, "WARN_BYTES", 0)  # these caches' few bytes too

    def generate():
        return model.generate(prompt, max_new_tokens=6, do_sample=False,
                              cache_implementation="static")

    with torch.no_grad():
        expected = generate()
        model.forward = torch.compile(model.forward, backend="outofplace")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):  # the second generate's prefill is a planned call
                assert torch.equal(generate(), expected)
    assert not [w for w in caught if "copied" in str(w.message)], \
        [str(w.message) for w in caught]


def test_non_adoptable_input_is_copied_with_one_warning() -> None:
    compiled = outofplace.compile(step, step_args())
    base = torch.randn(4, 2, 8, 16)
    cache = base.permute(0, 3, 1, 2)  # not contiguous: traced again for it, then copied
    eager_cache = cache.clone()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for pos in (1, 2):
            k = torch.randn(4, 2, 8)
            compiled(cache, torch.tensor(pos), k)
            step(eager_cache, torch.tensor(pos), k)
    copies = [w for w in caught if "copied on every call" in str(w.message)]
    assert len(copies) == 1 and "'cache'" in str(copies[0].message)
    assert_same(cache, eager_cache, "cache")
    relaid = next(iter(compiled._relaid.values()))
    assert relaid.in_place_report["cache"].startswith("copied 8192 bytes per call")


def write_then_read(c, n):
    c[:, :, 100] = n
    return c[:, :, 0].sum()


def read_then_write(c, n):
    s = c[:, :, 100].sum()
    c[:, :, 100] = n
    return s


def write_then_read_all(c, n):
    c[:, :, 100] = n
    return (c * 2).sum()


@pytest.mark.parametrize("f", [write_then_read, read_then_write, write_then_read_all])
def test_program_reading_its_cache_updates_it_in_place(f) -> None:
    """XLA:CPU copies a donated buffer the program also reads unless copy insertion uses
    its region analysis; the report reads the optimized HLO."""
    args = (torch.randint(-4, 4, (2, 2, 128, 4)).float(),  # exact sums in any order
            torch.randint(-4, 4, (2, 2, 4)).float())
    compiled = assert_matches_eager(f, *args)
    assert compiled.in_place_report == {"c": "in place"}
    # Without the option, the copy is there, and it is found and reported.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        default = xla.CpuExecutable(compiled.stablehlo, compiled.input_names,
                                    compiled.io_map, compiled.input_types,
                                    compiled.result_types, options={})
        default([a.clone() for a in args])  # (the first call warns of what it copies)
    if f is read_then_write:  # at this size, XLA:CPU copies the cache for this one
        assert default.report["c"] == (
            "copied 8192 bytes per call: XLA:CPU's optimized program copies it "
            "(a `copy` of the donated buffer in its HLO)")
        assert any("'c' is copied on every call (8192 bytes)" in str(w.message)
                   for w in caught)


def write_then_attend(c, pos, q, u):
    c.index_copy_(2, pos, u)
    return q @ c


@pytest.mark.parametrize("batch", [1, 2])
def test_attention_after_the_write_at_batch_one_stays_in_place(batch) -> None:
    """At batch 1, XLA:CPU read `q @ c` through a bitcast that drops the unit dimension,
    fused a second dynamic-update-slice into it and copied the cache; the XLA engine
    passes a written argument without its unit dimensions (outofplace-squeeze-state), so
    the cache stays in place at batch 1 as at batch 2, and nothing warns."""
    args = (torch.randint(-4, 4, (batch, 4, 8, 8)).float(), torch.tensor([2]),
            torch.randint(-4, 4, (batch, 4, 1, 8)).float(),
            torch.randint(-4, 4, (batch, 4, 1, 8)).float())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        compiled = assert_matches_eager(write_then_attend, *args)
        assert compiled.in_place_report == {"c": "in place"}


# ----------------------------------------------------------------------- bad calls
@pytest.mark.parametrize("call, error, words", [
    (lambda c, cache, pos, k: c(cache, pos), TypeError,
     ["3 positional arguments", "cache, pos, k", "got 2"]),
    (lambda c, cache, pos, k: c(cache, pos, k[:, :1]), ValueError,
     ["'k'", "torch.float32 [4, 2, 8]", "torch.float32 [4, 1, 8]"]),
    (lambda c, cache, pos, k: c(cache.double(), pos, k), ValueError,
     ["'cache'", "torch.float32 [4, 16, 2, 8]", "torch.float64 [4, 16, 2, 8]"]),
    (lambda c, cache, pos, k: c(cache, 3, k), TypeError, ["'pos'", "tensor", "int"]),
    (lambda c, cache, pos, k: c(cache.requires_grad_(), pos, k), ValueError,
     ["'cache'", "requires grad", "in place"]),
    (lambda c, cache, pos, k: c(*_partly_overlapping(cache, pos, k)),
     UnsupportedMutationError, ["`values`", "shares memory with the tensor it writes"]),
    (lambda c, cache, pos, k: c(cache, pos, k, k), TypeError,
     ["3 positional arguments", "got 4"]),
    (lambda c, cache, pos, k: c(cache, pos.float(), k), ValueError,
     ["'pos'", "torch.int64 []", "torch.float32 []"]),
])
def test_bad_call_raises_named_error_before_changing_anything(call, error, words) -> None:
    compiled = outofplace.compile(step, step_args())
    cache, pos, k = step_args()
    compiled(cache, pos, k)  # adopted, and the next calls planned (`Compiled._planned`)
    assert compiled._planned is not None
    before = cache.clone()
    with pytest.raises(error) as raised:
        call(compiled, cache, torch.tensor(5), k + 1)
    message = str(raised.value)
    for word in words:
        assert word in message
    assert "XLA" not in message and "INVALID_ARGUMENT" not in message
    assert_same(cache.detach(), before, "cache")


def _partly_overlapping(cache, pos, k):
    """The cache laid out as planned and k in one buffer, k's first half the cache's last
    elements, its second half beyond them: neither views the other. Both are taken from
    the storage they span (graph_preparation._take_input_views), and the write of k into
    the cache it overlaps is eager's order of writes: refused, when traced again."""
    buffer = torch.cat([cache.reshape(-1), k.reshape(-1)])
    start = cache.numel() - k.numel() // 2
    return (buffer[:cache.numel()].view(cache.shape), pos,
            buffer[start:start + k.numel()].view(k.shape))


# A call of step(cache, pos, k) made bad one way each: (cache, pos, k) -> (args, kwargs),
# `cache` the tensor the first call adopted, so that a call laid out as planned reaches
# the planned call's own checks (a written argument XLA's already, requiring grad or
# sharing its memory with another argument).
BAD_CALLS = {
    "too few": lambda cache, pos, k: ((cache, pos), {}),
    "too many": lambda cache, pos, k: ((cache, pos, k, k), {}),
    "unknown keyword": lambda cache, pos, k: ((cache, pos, k), {"v": k}),
    "another shape": lambda cache, pos, k: ((cache, pos, k[:, :1]), {}),
    "another dtype": lambda cache, pos, k: ((cache.double(), pos, k), {}),
    "an index's dtype": lambda cache, pos, k: ((cache, pos.float(), k), {}),
    "not a tensor": lambda cache, pos, k: ((cache, 3, k), {}),
    "on meta": lambda cache, pos, k: ((cache.to("meta"), pos, k), {}),
    "a written leaf requiring grad": lambda cache, pos, k: (
        (cache.requires_grad_(), pos, k), {}),
    "a written non-leaf requiring grad": lambda cache, pos, k: (
        (cache.clone().requires_grad_() * 1, pos, k), {}),
    "written sharing memory": lambda cache, pos, k: (_partly_overlapping(cache, pos, k), {}),
}


@pytest.mark.parametrize("bad", BAD_CALLS)
def test_bad_calls_are_refused_alike_by_the_planned_call_and_python(bad) -> None:
    """One predicate decides a refusal (call_checks.py): each bad call raises the same
    error through the planned call (C++ or its Python twin, by the fixture) as through
    Python's checked path, the planned call handing it back untouched; the caller's
    tensors keep their values."""
    compiled = outofplace.compile(step, step_args())
    cache, pos, k = step_args()
    compiled(cache, pos, k)  # adopted, and the next calls planned
    assert compiled._planned is not None
    before = cache.clone()
    args, kwargs = BAD_CALLS[bad](cache, torch.tensor(5), k + 1)
    assert_refused_alike(compiled, args, kwargs)
    cache.requires_grad_(False)
    assert_same(cache, before, "cache")
    assert_same(compiled(cache, pos, k), step(before, pos, k), "a good call after")
    assert_same(cache, before, "cache after a good call")


def test_written_inference_tensor_is_refused_alike() -> None:
    """The planned call made inside inference mode hands a call outside it back, and
    Python refuses it the same way as when no planned call was made."""
    compiled = outofplace.compile(step, step_args())
    with torch.inference_mode():
        cache, pos, k = step_args()
        compiled(cache, pos, k)  # adopted, and the next calls planned
    assert compiled._planned is not None
    before = cache.clone()
    error = assert_refused_alike(compiled, (cache, pos, k))
    assert "inference tensor" in str(error)
    assert_same(cache, before, "cache")


def test_another_layout_of_an_exported_program_is_refused_alike() -> None:
    """An ExportedProgram cannot be traced again: another layout is refused, the same
    way through the planned call as through Python's path."""
    exported = torch.export.export(Scale(), (torch.randn(4, 3), torch.randn(4, 3)))
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    compiled = outofplace.compile(exported, (x, y))
    compiled(x, y)
    assert compiled._planned is not None
    error = assert_refused_alike(compiled, (torch.randn(3, 4).t(), y))
    assert "cannot be traced again" in str(error)


class Scale(torch.nn.Module):
    def forward(self, x, y):
        x.mul_(y)
        return y.sum()


def test_planned_calls_match_eager_as_arguments_change() -> None:
    """Calls after the first go straight to XLA (`Compiled._planned`) while they look like
    it; a new cache (adopted then), a read-only argument in another layout or one with
    torch's lazy negation, a cache reassigned in a module, each match eager."""
    compiled = outofplace.compile(step, step_args())
    cache, pos, k = step_args()
    expected = cache.clone()
    other = torch.randn(4, 16, 2, 8)
    expected_other = other.clone()
    calls = [(cache, expected, k), (other, expected_other, k * 2),
             (cache, expected, torch._neg_view(k)), (cache, expected, k * 3)]
    for target, eager, update in calls:
        out = compiled(target, pos, update)
        assert_same(out, step(eager, pos, update.resolve_neg()), "output")
        assert_same(target, eager, "cache")
        pos = pos + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(cache, pos, torch.randn(2, 4, 8).transpose(0, 1))  # traced again
    assert len(compiled._relaid) == 1

    class Cached(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(4, 16, 2, 8))

        def forward(self, pos, k):
            self.cache[:, pos] = k
            return self.cache.sum()

    module = Cached()
    compiled = outofplace.compile(module, (pos, k))
    for value in (1.0, 2.0):
        compiled(torch.tensor(0), k)
        module.cache = torch.full((4, 16, 2, 8), value)  # read again at the next call
        eager = Cached()
        eager.cache = module.cache.clone()
        out = compiled(torch.tensor(1), k)
        assert_same(out, eager(torch.tensor(1), k), "sum")
        assert_same(module.cache, eager.cache, "the reassigned cache, written")


@pytest.mark.parametrize("mesh", [None, {"x": 2}])
def test_planned_calls_take_keyword_tensors(mesh) -> None:
    """A program called with keyword tensors (as transformers' decoders take
    `cache_position`) goes to the planned call too, the keywords in any order, on one
    device and on a mesh; a missing or unknown keyword is still refused by name."""
    def keyword_step(cache, k, *, pos, scale):
        cache[:, pos] = k * scale
        return cache.sum(dim=1)

    cache, pos, k = step_args()
    shardings = {"cache": ("x", None, None, None)} if mesh else None
    compiled = outofplace.compile(keyword_step, (cache.clone(), k),
                                  {"pos": pos, "scale": torch.tensor(2.0)},
                                  mesh=mesh, shardings=shardings)
    expected = cache.clone()
    taken = []
    for call, p in enumerate([1, 5, 15, 0]):
        kwargs = {"pos": torch.tensor(p), "scale": torch.tensor(float(p))}
        if call % 2:
            kwargs = dict(reversed(kwargs.items()))
        out = compiled(cache, k, **kwargs)
        assert_same(out, keyword_step(expected, k, **kwargs), f"output {call}")
        assert_same(cache, expected, f"cache after call {call}")
        if call == 0:
            count_planned_calls(compiled, taken)
    assert taken == [True, True, True]
    with pytest.raises(TypeError, match="scale"):
        compiled(cache, k, pos=pos)
    with pytest.raises(TypeError, match="other"):  # eager's default, maybe not traced
        compiled(cache, k, pos=pos, scale=torch.tensor(1.0), other=pos)


def test_written_input_bumps_its_version_as_eager() -> None:
    """A write autograd must see: a backward through a tensor saved before the call
    raises, as after eager's write, on the first call (adopting) and planned ones."""
    compiled = outofplace.compile(step, step_args())
    cache, pos, k = step_args()
    for _ in range(3):
        weight = torch.ones((), requires_grad=True)
        saved = (weight * cache).sum()  # saves cache for its backward
        compiled(cache, pos, k)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            saved.backward()


# -------------------------------------------------------------------------- layouts
def reshape_then_write(x):
    y = x.reshape(-1)  # a view of a contiguous x, a copy of a transposed one
    y[0] = 5.0
    return y * 2


def contiguous_then_write(x):
    y = x.contiguous()  # x itself when contiguous, a copy otherwise
    y[0, 0] = 5.0
    return y.sum()


@pytest.mark.parametrize("f", [reshape_then_write, contiguous_then_write])
@pytest.mark.parametrize("traced_transposed", [False, True])
def test_other_layout_is_traced_again(f, traced_transposed) -> None:
    def make(transposed):
        x = torch.randn(4, 6)
        return x.t().contiguous().t() if transposed else x

    compiled = outofplace.compile(f, (make(traced_transposed),))
    for transposed in (traced_transposed, not traced_transposed, traced_transposed):
        x = make(transposed)
        eager_x = x.clone(memory_format=torch.preserve_format)
        assert eager_x.stride() == x.stride()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = compiled(x)
        assert_same(out, f(eager_x), f"output (transposed={transposed})")
        assert_same(x, eager_x, f"input after the call (transposed={transposed})")
    assert len(compiled._relaid) == 1


def test_exported_program_called_in_another_layout_is_refused() -> None:
    class M(torch.nn.Module):
        def forward(self, x):
            return reshape_then_write(x)

    program = torch.export.export(M(), (torch.randn(4, 6),))
    compiled = outofplace.compile(program, (torch.randn(4, 6),))
    x = torch.randn(6, 4).t()
    before = x.clone()
    with pytest.raises(ValueError, match="argument 'x' has strides \\[1, 4\\].*traced "
                       "with strides \\[6, 1\\].*cannot be traced again"):
        compiled(x)
    assert_same(x, before, "x")


# ------------------------------------------------------------------------- failures
def test_failure_after_the_engine_ran_names_what_was_updated(monkeypatch) -> None:
    def f(cache, small, k):
        cache[:, 2] = k
        small.add_(1)
        return k * 2

    compiled = outofplace.compile(f, (torch.randn(4, 8), torch.randn(3, 4)[:, 0],
                                      torch.randn(4)))
    cache, small, k = torch.randn(4, 8), torch.randn(3, 4)[:, 0], torch.randn(4)
    eager_cache, eager_small = cache.clone(), small.clone()
    f(eager_cache, eager_small, k)
    small_before = small.clone()

    def broken(viewer, array):  # turning a result into a tensor fails
        raise RuntimeError("injected")
    compiled._xla_executable()  # compiled before the failure is injected
    monkeypatch.setattr(xla.buffers.Viewer, "__call__", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(xla.CallFailed, match="injected.*arguments 'cache' already "
                           "hold the call's new values.*arguments 'small' keep their "
                           "values from before the call"):
            compiled(cache, small, k)
    assert_same(cache, eager_cache, "cache (updated, as the error says)")
    assert_same(small, small_before, "small (kept, as the error says)")
    monkeypatch.undo()
    compiled(cache, small, k)  # and the next call works
    f(eager_cache, eager_small, k)
    assert_same(cache, eager_cache, "cache after the next call")


def test_planned_call_failing_after_the_engine_ran(monkeypatch) -> None:
    """A planned call failing after XLA wrote the cache in place, while making its
    other result a tensor: the error says the cache holds the new value, and it does."""
    from jax._src.array import ArrayImpl

    compiled = outofplace.compile(step, step_args())
    cache, pos, k = step_args()
    compiled(cache, pos, k)  # adopted; the next call is planned
    eager = cache.clone()
    step(eager, torch.tensor(5), k + 1)
    pointer = ArrayImpl.unsafe_buffer_pointer

    def broken(array):  # the 0-d result (k.sum()) fails to become a tensor
        if array.ndim == 0:
            raise RuntimeError("injected")
        return pointer(array)
    monkeypatch.setattr(ArrayImpl, "unsafe_buffer_pointer", broken)
    with pytest.raises(xla.CallFailed, match="injected.*arguments 'cache' already hold "
                       "the call's new values"):
        compiled(cache, torch.tensor(5), k + 1)
    monkeypatch.undo()
    assert_same(cache, eager, "cache (updated, as the error says)")
    assert_same(compiled(cache, pos, k), step(eager, pos, k), "the next call")
    assert_same(cache, eager, "cache after the next call")


def test_engine_failing_after_taking_the_buffer_says_so() -> None:
    compiled = outofplace.compile(step, step_args())
    cache, pos, k = step_args()
    compiled(cache, pos, k)
    with engine_failing_after_taking_buffers(compiled), \
            pytest.raises(xla.CallFailed, match="arguments 'cache': their values are lost"):
        compiled(cache, pos, k)
    assert bool((cache == 0).all())  # usable memory, not a dangling pointer
    compiled(cache, pos, k)
    assert_same(cache[:, 3], k, "cache after the next call")


def test_two_threads_on_one_compiled() -> None:
    compiled = outofplace.compile(step, step_args())
    caches = [torch.zeros(4, 16, 2, 8) for _ in range(2)]
    expected = [c.clone() for c in caches]
    updates = [[torch.randn(4, 2, 8) for _ in range(40)] for _ in range(2)]

    def work(cache, ks):
        for pos, k in enumerate(ks):
            compiled(cache, torch.tensor(pos % 16), k)

    threads = [threading.Thread(target=work, args=(c, u)) for c, u in zip(caches, updates)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for cache, target, ks in zip(caches, expected, updates):
        for pos, k in enumerate(ks):
            step(target, torch.tensor(pos % 16), k)
        assert_same(cache, target, "cache")


def test_read_only_inputs_and_results_are_not_shared_between_calls() -> None:
    """A small read-only argument goes through a buffer kept from call to call, a large one
    through a view of torch memory: a result that is such an argument's value (a clone
    XLA may forward) is still the call's own after later calls."""
    def f(cache, x, big):
        cache.add_(x)
        return x.clone(), x * 2, big.clone()

    n = xla.STAGED_BYTES // 4 * 2  # big: twice the size of a kept buffer
    compiled = outofplace.compile(f, (torch.zeros(4), torch.ones(4), torch.ones(n)),
                                  engine="xla")
    cache = torch.zeros(4)
    calls = [(torch.full((4,), float(v)), torch.full((n,), float(v))) for v in (1, 3, 5)]
    outs = [compiled(cache, *call) for call in calls]
    for (x, big), (same, double, big_same) in zip(calls, outs):
        assert_same(same, x, "the clone of x, after later calls")
        assert_same(double, x * 2, "x * 2, after later calls")
        assert_same(big_same, big, "the clone of big, after later calls")
        big.fill_(-1)  # the caller's memory changes: the result does not
        assert_same(big_same, x[0].expand(n), "the clone of big, its input overwritten")
    assert_same(cache, torch.full((4,), 9.0), "cache")


def scale(x, y):
    x.mul_(y)
    return y.sum()


def test_written_non_leaf_requiring_grad_is_refused() -> None:
    """Eager records `x.mul_(y)` in the autograd history of a non-leaf x; a compiled call
    cannot, and a backward through x would give the gradient of x before the call
    (silently wrong): refused while grad is enabled, on the first call and planned ones;
    under no_grad it runs as eager does."""
    compiled = outofplace.compile(scale, (torch.randn(5), torch.randn(5)))
    weight, y = torch.randn(5, requires_grad=True), torch.randn(5)
    with torch.no_grad():
        x = weight * 1
    compiled(x, y)  # adopted; the next call is planned
    for _ in range(2):
        x = weight * 1
        before = x.detach().clone()
        with pytest.raises(ValueError, match="argument 'x' requires grad and the program "
                           "writes it in place.*torch.no_grad"):
            compiled(x, y)
        assert_same(x.detach(), before, "x")
    x, eager = weight.detach() * 1, weight.detach() * 1
    with torch.no_grad():
        for _ in range(2):
            assert_same(compiled(x, y), scale(eager, y), "output")
            assert_same(x, eager, "x")


def test_written_inference_tensor_outside_inference_mode_is_refused() -> None:
    """Eager refuses an in-place write of an inference tensor outside inference mode; a
    call raised torch's error only after XLA had written it (bumping its version), and a
    planned call did the same. Inside inference mode it runs as eager does."""
    compiled = outofplace.compile(scale, (torch.randn(5), torch.randn(5)))
    with torch.inference_mode():
        x, y = torch.randn(5), torch.randn(5)
        eager = x.clone()
    for call in range(4):
        if call in (1, 3):  # the second one planned
            before = x.clone()
            with pytest.raises(ValueError, match="argument 'x' is an inference tensor.*"
                               "outside inference mode"):
                compiled(x, y)
            assert_same(x, before, "x")
        else:
            with torch.inference_mode():
                assert_same(compiled(x, y), scale(eager, y), "output")
            assert_same(x, eager, "x")


def add_then_double(x, y):
    x.add_(y)
    return y * 2, x.sum()


def test_lazily_negated_views_give_their_values() -> None:
    """A tensor from `torch._neg_view` holds the negation of its values in its memory. XLA
    read that memory as the values for a large read-only argument (taken without a
    copy) and a written one (adopted or copied), and a negated view of an adopted
    tensor passed as the written argument ran on the adopted buffer as it is."""
    n = xla.STAGED_BYTES // 4 * 2  # a read-only argument this large is not staged
    compiled = outofplace.compile(add_then_double, (torch.randn(n), torch.randn(n)))
    x, base = torch.randn(n), torch.randn(n)
    eager_x, eager_base = x.clone(), base.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for written, read in [(lambda x, b: x, lambda x, b: torch._neg_view(b)),  # read
                              (lambda x, b: torch._neg_view(b), lambda x, b: x),  # copied
                              (lambda x, b: x, lambda x, b: b),  # x adopted, planned next
                              (lambda x, b: torch._neg_view(x), lambda x, b: b),
                              (lambda x, b: torch._neg_view(x), lambda x, b: b)]:
            out = compiled(written(x, base), read(x, base))
            expected = add_then_double(written(eager_x, eager_base),
                                       read(eager_x, eager_base))
            assert_same_tree(out, expected, "outputs")
            assert_same(x, eager_x, "x")
            assert_same(base, eager_base, "base")


def test_lazily_negated_views_on_every_engine() -> None:
    """IREE imported a contiguous negated view's memory as its values (and a written one
    failed with torch's error on `view`); every engine reads and writes the values."""
    from differential import ENGINES

    compiled = outofplace.compile(add_then_double, (torch.randn(8), torch.randn(8)))
    for engine in ENGINES:
        x, base = torch.randn(8), torch.randn(8)
        eager_x, eager_base = x.clone(), base.clone()
        for written, read in [(lambda x, b: x, lambda x, b: torch._neg_view(b)),
                              (lambda x, b: torch._neg_view(b), lambda x, b: x)]:
            out = compiled.run((written(x, base), read(x, base)), engine=engine)
            expected = add_then_double(written(eager_x, eager_base),
                                       read(eager_x, eager_base))
            assert_same_tree(out, expected, f"[{engine}] outputs")
            assert_same(x, eager_x, f"[{engine}] x")
            assert_same(base, eager_base, f"[{engine}] base")


def test_optimizer_settings_changed_since_compiling_are_refused() -> None:
    """An SGD step's `lr` is a Python number the trace made a constant: after a
    learning-rate scheduler changed it, calls silently kept stepping with the old one."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train(x, y):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()

    x, y = torch.randn(3, 4), torch.randn(3, 2)
    train(x, y)  # creates the momentum buffers
    compiled = outofplace.compile(train, (x, y))
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)  # adds `initial_lr`
    compiled(x, y)  # the planned call's first
    compiled(x, y)
    scheduler.step()
    before = model.weight.detach().clone()
    with pytest.raises(ValueError, match=r"compiled with SGD param_groups\[0\]\['lr'\] = "
                       r"0.1, and it is 0.05 now"):
        compiled(x, y)
    assert_same(model.weight.detach(), before, "weight")


def scale_then_add(x, z):
    x.add_(1)
    z.mul_(0.5)
    return x.sum()


def test_written_argument_with_overlapping_elements_is_refused() -> None:
    """An expanded tensor for an argument the program writes across its copies: eager
    raises at that write; a call wrote the other written arguments, then failed copying
    the result back into the expanded tensor. The program is traced again for it (taken
    from the memory it spans, as the torch.compile path takes it) and refused at the
    write's line, before anything runs."""
    compiled = outofplace.compile(scale_then_add, (torch.randn(4), torch.randn(4)))
    x, z = torch.randn(4), torch.randn(4)
    compiled(x, z)  # adopted; the next call would be planned
    before = x.clone()
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match="writing into an expanded tensor") as error:
        compiled(x, torch.randn(1).expand(4))
    line = scale_then_add.__code__.co_firstlineno + 2
    assert f"{__file__}:{line}:" in str(error.value)
    assert_same(x, before, "x")


def test_written_argument_expanded_written_in_one_copy() -> None:
    """An expanded tensor written in one copy of its broadcast dimension (`cache[:, pos]
    = k` on `c[:, :1].expand(...)`): eager writes the memory the copies share, once; so
    does the program traced again for it, through the planned call and Python's path."""
    compiled = outofplace.compile(step, step_args())
    cache, pos, k = step_args()
    compiled(cache, pos, k)  # adopted, and the next calls planned
    for _ in range(2):
        base, k = torch.randn(4, 1, 2, 8), torch.randn(4, 2, 8)
        expected = base.clone()
        eager = step(expected.expand(4, 16, 2, 8), torch.tensor(5), k)
        with pytest.warns(UserWarning, match="compiling it again") if _ == 0 else \
                contextlib.nullcontext():
            result = compiled(base.expand(4, 16, 2, 8), torch.tensor(5), k)
        assert_same(result, eager, "result")
        assert_same(base, expected, "the expanded tensor's memory")


def test_large_read_only_argument_seen_as_it_is_at_each_call() -> None:
    """A weight is viewed in place, and the view kept for the next call at the same
    address: a weight changed in place, or replaced by another tensor, between calls is
    read as it is at the call."""
    def exact(*shape):  # small integers: sums exact in any order
        return torch.randint(-3, 4, shape).float()

    linear = torch.nn.Linear(512, 512)  # a 1 MiB weight: viewed, not staged
    assert linear.weight.nbytes > xla.STAGED_BYTES
    with torch.no_grad():
        linear.weight.copy_(exact(512, 512))
        linear.bias.copy_(exact(512))
    compiled = outofplace.compile(linear, (exact(2, 512),))
    x = exact(2, 512)
    with torch.no_grad():
        for change in (lambda: None, lambda: linear.weight.mul_(-2),
                       lambda: setattr(linear.weight, "data", exact(512, 512)),
                       lambda: linear.weight.add_(1)):
            change()
            assert_same(compiled(x), linear(x), "output")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_state_replaced_between_calls_is_read_at_each_call(dtype) -> None:
    """The state is read off the module's tree at each call (signature.StateReader, each
    submodule once for the targets under it): a parameter replaced, a submodule replaced
    and a state dict loaded between calls are what the next call reads, on both paths,
    and the reader finds what reading each name alone finds."""
    from outofplace.signature import state_tensor

    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(6, 6)
            self.register_buffer("count", torch.zeros(6))

        def forward(self, x):
            self.count.add_(1)
            return self.proj(x).relu() + self.count

    def model() -> torch.nn.Module:
        return torch.nn.Sequential(Block(), torch.nn.Linear(6, 6), Block()).to(dtype)

    x = torch.randn(3, 6, dtype=dtype)
    changes = (lambda m: None,
               lambda m: setattr(m[0].proj, "weight", torch.nn.Parameter(
                   torch.randn(6, 6, dtype=dtype))),
               lambda m: m.__setitem__(1, torch.nn.Linear(6, 6).to(dtype)),
               lambda m: m.load_state_dict({k: torch.randn_like(v)
                                            for k, v in m.state_dict().items()}))
    for path in ("compile", "torch.compile"):
        eager, mine = model(), model()
        mine.load_state_dict(eager.state_dict())
        compiled = outofplace.compile(mine, (x,)) if path == "compile" else \
            torch.compile(mine, backend="outofplace", dynamic=False)
        for change in changes:
            change(eager)
            change(mine)  # (new tensors of their own values,
            mine.load_state_dict(eager.state_dict())  # then eager's values copied in)
            with torch.no_grad():
                assert_same(compiled(x), eager(x), f"{path}: output")
            assert_same(mine[2].count, eager[2].count, f"{path}: buffer")
        if path == "compile":
            signature = compiled.signature
            read = signature.state_reader(mine)
            alone = [state_tensor(mine, t) for t in signature.state_targets]
            assert len(read) == len(alone) == 8 and all(a is b for a, b in zip(read, alone))


def test_the_cpp_reads_only_the_plans_fields() -> None:
    """planned_call.cpp and sharded_call.cpp read outofplace's objects through one frozen
    plan each (xla.CallPlan, spmd.ShardedPlan): every `plan.attr("...")` they read is a
    field of it, and they read no private name of outofplace's (the `_`-names left are
    jax's Array internals, named in calls.h)."""
    import dataclasses
    import re

    from outofplace.backends import spmd

    backends = Path(xla.__file__).parent.parent
    for source, plan in (("planned_call.cpp", xla.CallPlan),
                         ("sharded_call.cpp", spmd.ShardedPlan)):
        text = (backends / source).read_text()
        read = set(re.findall(r'plan\.attr\("(\w+)"\)', text))
        assert read and read <= {f.name for f in dataclasses.fields(plan)}, (source, read)
        assert not re.findall(r'attr\("_\w+"\)', text), source
    private = set(re.findall(r'"(_\w+)"', (backends / "calls.h").read_text()))
    assert private == {"_arrays", "_fully_replicated_shard"}  # jax.Array's own


# What the C++ reads of outofplace's objects other than the plans, by class: each name
# must be an attribute those classes set (jax's and Python's own names are not listed).
_READ_OF = {
    "array": ("xla.buffers.Holder", "xla.buffers.Stage", "spmd.placement.Stage", "spmd.placement.Resident"),
    "ptr": ("xla.buffers.Holder", "xla.buffers.Stage"), "nbytes": ("xla.buffers.Holder", "xla.buffers.Stage", "spmd.placement.Stage"),
    "executable": ("xla.CpuExecutable",), "shape": ("xla.buffers.Viewer",),
    "dtype": ("xla.buffers.Viewer",),
    "distinct": ("spmd.placement.Placement",), "boxes": ("spmd.placement.Placement",),
    "whole": ("spmd.placement.Stage",), "addresses": ("spmd.placement.Stage",),
    "holds": ("spmd.placement.Resident",), "version": ("spmd.placement.Resident",),
    "op": ("host_scalars.Scalar",), "bits": ("host_scalars.Scalar",),
    "unsigned": ("host_scalars.Scalar",), "value": ("host_scalars.Scalar",),
    "operands": ("host_scalars.Scalar",),
}
_NOT_OURS = {"acquire", "release", "consume_with_handlers", "execute_sharded",
             "unsafe_buffer_pointer", "block_until_ready", "_arrays", "_fully_replicated_shard"}


def test_every_name_the_cpp_reads_is_set_by_its_class() -> None:
    import dataclasses
    import inspect
    import re

    from outofplace.backends import host_scalars, spmd

    modules = {"xla": xla, "spmd": spmd, "host_scalars": host_scalars}
    backends = Path(xla.__file__).parent.parent
    plans = {f.name for plan in (xla.CallPlan, spmd.ShardedPlan)
             for f in dataclasses.fields(plan)}
    read = set()
    for source in ("planned_call.cpp", "sharded_call.cpp", "calls.h"):
        text = (backends / source).read_text()
        read |= set(re.findall(r'attr\("(\w+)"\)', text)) | \
            set(re.findall(r'\w+\{"(\w+)"\}', text))
    for name in sorted(read - _NOT_OURS):
        if name in _READ_OF:
            for owner in _READ_OF[name]:
                module, *path = owner.split(".")
                klass = modules[module]
                for part in path:
                    klass = getattr(klass, part)
                fields = {f.name for f in dataclasses.fields(klass)} \
                    if dataclasses.is_dataclass(klass) else set()
                assert name in fields or hasattr(klass, name) or re.search(
                    rf"self\.{name}\b[^(]", inspect.getsource(klass)), (name, owner)
        else:
            assert name in plans, f"the C++ reads `{name}`, which no plan has"


def test_state_replaced_after_compiling_is_read_at_the_next_call() -> None:
    """A call finds the module's parameters, buffers and submodules as they are then
    (signature.attribute_of reads the module's tables): a weight, a buffer and a whole
    submodule replaced between calls are the ones the next call reads and writes."""
    torch.manual_seed(0)
    model, x = _Counting(), torch.randn(3, 4)
    twin = _Counting()
    twin.load_state_dict(model.state_dict())
    compiled = outofplace.compile(model, (x,))
    for replace in (lambda m: setattr(m.lin, "weight", torch.nn.Parameter(torch.ones(3, 4))),
                    lambda m: m.register_buffer("seen", torch.full((3,), 2.0)),
                    lambda m: setattr(m, "lin", torch.nn.Linear(4, 3))):
        torch.manual_seed(1)
        replace(model)
        torch.manual_seed(1)
        replace(twin)
        with torch.no_grad():
            assert_same(compiled(x), twin(x), "output")
        assert_same(model.seen, twin.seen, "the buffer after the call")
