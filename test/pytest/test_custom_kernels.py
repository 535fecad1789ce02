"""Custom ops whose schema writes an argument (`Tensor(a!)`), against eager PyTorch.

Each program runs several calls on XLA:CPU on the same tensors as eager does on its own
copies; after each call the results and every written tensor equal eager's, and the
caller's cache stays in its memory (the kernel writes XLA's aliased buffer, which is the
caller's tensor). Engines that cannot call a kernel refuse at compile time.
"""

from __future__ import annotations

import inspect
import json
import threading

import pytest
import torch

import outofplace
from outofplace import kernels
from outofplace.backends import custom_calls, hlo_proto

pytestmark = pytest.mark.skipif(
    not outofplace.xla.available() or custom_calls.extension() is None,
    reason="needs jax and the kernel handler (backends/kernel_call.cpp)")


@torch.library.custom_op("oop_test::write_rows", mutates_args=("cache",))
def write_rows(cache: torch.Tensor, idx: torch.Tensor, rows: torch.Tensor,
               scale: float) -> None:
    """A paged-cache writer: rows of `cache` at `idx` become `rows * scale`."""
    cache.index_copy_(0, idx, rows * scale)


@torch.library.custom_op("oop_test::write_kv", mutates_args=("k_cache", "v_cache"))
def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, idx: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Writes two caches and returns a tensor of its own (their old rows' sum at idx)."""
    old = k_cache[idx].sum() + v_cache[idx].sum()
    k_cache.index_copy_(0, idx, k)
    v_cache.index_copy_(0, idx, v)
    return old.reshape(1)


@write_kv.register_fake
def _(k_cache, v_cache, idx, k, v):
    return k_cache.new_empty(1)


@torch.library.custom_op("oop_test::row_sums", mutates_args=())
def row_sums(x: torch.Tensor) -> torch.Tensor:
    """A kernel that writes nothing (it reads a cache written before it)."""
    return x.sum(-1)


@row_sums.register_fake
def _(x):
    return x.new_empty(x.shape[:-1])


torch.library.define("oop_test::scale_", "(Tensor(a!) x, float s) -> ()")


@torch.library.impl("oop_test::scale_", "CompositeExplicitAutograd")
def _scale(x, s):
    x.mul_(s)


@torch.library.register_fake("oop_test::scale_")
def _(x, s):
    return None


torch.library.define("oop_test::first_row", "(Tensor(a) x) -> Tensor(a)")


@torch.library.impl("oop_test::first_row", "CompositeExplicitAutograd")
def _first_row(x):
    return x[0]


@torch.library.register_fake("oop_test::first_row")
def _(x):
    return x[0]


def paged_write(pool, idx, k):
    write_rows(pool.view(-1, pool.shape[-1]), idx, k, 2.0)  # pages seen as rows
    return pool.sum(-1)


def sliced_write(cache, idx, k):
    write_rows(cache[1:7], idx, k, 0.5)  # a slice of the cache
    return cache[0] + 1


def two_caches(k_cache, v_cache, idx, k, v):
    k_cache.mul_(0.5)                    # an ordinary write before the kernel
    old = write_kv(k_cache, v_cache, idx, k, v)
    v_cache[0] = 1.0                     # and one after
    return old, k_cache.sum(0) + v_cache.sum(0)


def read_after(cache, idx, k):
    before = cache.sum()
    write_rows(cache, idx, k, 1.0)
    return before, cache[idx] * 2, row_sums(cache)  # reads see the kernel's write


def twice(cache, i, j, k):
    write_rows(cache, i, k, 1.0)
    write_rows(cache, j, k * 3, 1.0)     # the second call overwrites the first's rows
    return cache.sum()


def halves(kv, idx, k, v):
    write_kv(kv[0], kv[1], idx, k, v)    # two written arguments, disjoint views of kv
    return kv.sum(1)


def reads_itself(cache, idx):
    write_rows(cache[2:], idx, cache[:2], 0.5)  # it reads a part of the tensor it writes
    return cache.sum()


def at_position(cache, pos, idx, k):
    write_rows(cache[pos], idx, k, 1.0)  # a view at a runtime position: written back
    return cache.sum(-1)


def cpp_op(pool, idx, k):
    # a C++ op with Tensor(a!) (backends/kernel_call.cpp registers it), through a view
    torch.ops.outofplace_demo.write_rows_(pool.view(-1, 8), idx, k)
    return pool.sum(-1)


def defined_op(x, y):
    torch.ops.oop_test.scale_(x, 3.0)    # a `torch.library.define` op with Tensor(a!)
    return x + y


def _step_args(f, dtype, step):
    g = torch.Generator().manual_seed(step)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)

    if f in (paged_write, cpp_op):
        return [torch.tensor([step, 9 - step]), r(2, 8)]
    if f is sliced_write:
        return [torch.tensor([step % 6, 5 - step % 6]), r(2, 8)]
    if f is two_caches:
        return [torch.tensor([step + 1, 7 - step]), r(2, 8), r(2, 8)]
    if f is read_after:
        return [torch.tensor([step, 4]), r(2, 8)]
    if f is twice:
        return [torch.tensor([step, 2]), torch.tensor([2, 5]), r(2, 8)]
    if f is halves:
        return [torch.tensor([step, 6]), r(2, 8), r(2, 8)]
    if f is reads_itself:
        return [torch.tensor([step + 1, 4])]
    if f is at_position:
        return [torch.tensor(step % 4), torch.tensor([step, 6]), r(2, 8)]
    return [r(4, 8)]


def _state(f, dtype):
    if f in (paged_write, cpp_op):
        return [torch.zeros(3, 4, 8, dtype=dtype)]
    if f is two_caches:
        return [torch.ones(8, 8, dtype=dtype), torch.zeros(8, 8, dtype=dtype)]
    if f is defined_op:
        return [torch.arange(32, dtype=dtype).reshape(4, 8)]
    if f is halves:
        return [torch.zeros(2, 8, 8, dtype=dtype)]
    if f is at_position:
        return [torch.zeros(4, 8, 8, dtype=dtype)]
    return [torch.arange(64, dtype=dtype).reshape(8, 8)]


def _assert_same(actual, expected, what, exact=False):
    """Equal (`exact`: the kernel's writes), or close (sums: XLA adds in its own order)."""
    if isinstance(expected, tuple):
        assert len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            _assert_same(a, e, f"{what}[{i}]", exact)
    else:
        assert actual.dtype == expected.dtype, what
        tolerance = {"rtol": 0, "atol": 0} if exact else {}
        torch.testing.assert_close(actual, expected, msg=what, **tolerance)


def _calls_match_eager(compiled, f, dtype, steps=3, check_place=True):
    state, eager_state = _state(f, dtype), _state(f, dtype)
    addresses = None
    for step in range(steps):
        args = _step_args(f, dtype, step)
        result = compiled(*state, *args)
        expected = f(*eager_state, *[a.clone() for a in args])
        _assert_same(result, expected, f"{f.__name__} step {step}: result")
        for i, (mine, theirs) in enumerate(zip(state, eager_state)):
            _assert_same(mine, theirs, f"{f.__name__} step {step}: state {i}",
                         exact=f is not defined_op)
        if check_place:  # the first call may adopt the tensor into XLA's memory
            now = [t.data_ptr() for t in state]
            assert addresses is None or now == addresses, f"step {step}: moved"
            addresses = now


PROGRAMS = [paged_write, sliced_write, two_caches, read_after, twice, halves, reads_itself,
            at_position, cpp_op, defined_op]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_kernels_match_eager_in_place(f, dtype):
    args = (*_state(f, dtype), *_step_args(f, dtype, 0))
    compiled = outofplace.compile(f, args, engine="xla")
    _calls_match_eager(compiled, f, dtype)
    written = sorted(compiled.io_map)
    assert written == list(range(len(_state(f, dtype))))
    # a plain XLA:CPU consumer keeps each written root in place, with the option XLA's
    # copy insertion needs where the program reads the root after writing it
    assert all(outofplace.xla.CONSUMER_HINT in problem
               for problem in compiled.alias_problems("xla"))
    report = compiled.in_place_report
    assert all(report[compiled.input_names[i]] == "in place" for i in written), report


def test_paged_writer_is_an_aliased_custom_call():
    """The kernel is given the pool itself and where its argument lies in it (the view
    `pool.view(-1, 8)`: offset 0, sizes [12, 8], strides [8, 1]), and writes it in place:
    the call's result is the pool's new version, aliased to the pool."""
    pool = torch.zeros(3, 4, 8)
    compiled = outofplace.compile(paged_write, (pool, *_step_args(paged_write,
                                                                  torch.float32, 0)))
    text = compiled.stablehlo
    assert compiled.io_map == {0: 1}
    assert '%pool_modified = stablehlo.custom_call @"oop_test::write_rows"(%pool, %idx, ' \
        '%k)' in text
    assert "output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_" \
        "indices = [], operand_index = 0, operand_tuple_indices = []>]" in text
    assert "outofplace.view.0 = array<i64: 0, 12, 8, 8, 1>" in text
    assert "scale = 2.000000e+00 : f64" in text  # the float argument, in backend_config
    assert "has_side_effect" not in text  # false: the schema says nothing of effects
    assert "tf.aliasing_output = 1" in text


def test_views_of_one_root_are_one_operand():
    args = (*_state(halves, torch.float32), *_step_args(halves, torch.float32, 0))
    text = outofplace.compile(halves, args).stablehlo
    assert '%write_kv:2 = stablehlo.custom_call @"oop_test::write_kv"(%kv, %idx, %k, %v)' \
        in text
    assert "outofplace.operands = array<i64: 0, 0, 1, 2, 3>" in text
    assert "outofplace.view.0 = array<i64: 0, 8, 8, 8, 1>" in text
    assert "outofplace.view.1 = array<i64: 64, 8, 8, 8, 1>" in text


def test_two_written_arguments_alias_their_results():
    dtype = torch.float32
    args = (*_state(two_caches, dtype), *_step_args(two_caches, dtype, 0))
    text = outofplace.compile(two_caches, args).stablehlo
    call = next(line for line in text.splitlines() if "stablehlo.custom_call" in line)
    # results: the op's own tensor, then k_cache's and v_cache's new values
    assert "output_tuple_indices = [1], operand_index = 0" in call
    assert "output_tuple_indices = [2], operand_index = 1" in call
    assert "-> (tensor<1xf32>, tensor<8x8xf32>, tensor<8x8xf32>)" in call


def test_torch_compile_backend_matches_eager():
    torch._dynamo.reset()
    compiled = torch.compile(paged_write, backend="outofplace", dynamic=False)
    _calls_match_eager(compiled, paged_write, torch.float32, check_place=False)
    torch._dynamo.reset()
    compiled = torch.compile(two_caches, backend="outofplace", dynamic=False)
    _calls_match_eager(compiled, two_caches, torch.float32, check_place=False)


def _with_position(cache, pos, idx, k):
    cache[pos] = 0.0
    write_rows(cache, idx, k, 1.0)
    return cache.sum()


def test_check_bounds_raises_before_the_kernel_writes():
    cache = torch.zeros(8, 8)
    args = (cache, torch.tensor(3), torch.tensor([1, 2]), torch.ones(2, 8))
    compiled = outofplace.compile(_with_position, args, check_bounds=True)
    eager = cache.clone()
    assert torch.equal(compiled(cache, *args[1:]), _with_position(eager, *args[1:]))
    assert torch.equal(cache, eager)
    before = cache.clone()
    with pytest.raises(IndexError, match="test_custom_kernels.py"):
        compiled(cache, torch.tensor(8), torch.tensor([1, 2]), torch.full((2, 8), 5.0))
    assert torch.equal(cache, before)


def test_a_failing_kernel_raises_and_leaves_what_eager_leaves():
    """A kernel that raises (index_copy_ at an index out of range): the call raises
    naming the op, the cache stays the caller's memory and holds what eager's cache holds
    after the same error (index_copy_ wrote the rows before the bad one), and the next
    call runs."""
    cache, eager = torch.zeros(8, 8), torch.zeros(8, 8)
    compiled = outofplace.compile(read_after, (cache, torch.tensor([1, 2]),
                                               torch.ones(2, 8)))
    compiled(cache, torch.tensor([1, 2]), torch.ones(2, 8))
    read_after(eager, torch.tensor([1, 2]), torch.ones(2, 8))
    address = cache.data_ptr()
    bad = (torch.tensor([1, 99]), torch.full((2, 8), 7.0))
    with pytest.raises(IndexError):
        read_after(eager, *bad)
    with pytest.raises(custom_calls.KernelFailed, match="oop_test::write_rows failed"):
        compiled(cache, *bad)
    assert torch.equal(cache, eager) and cache.data_ptr() == address
    compiled(cache, torch.tensor([3, 4]), torch.ones(2, 8))
    read_after(eager, torch.tensor([3, 4]), torch.ones(2, 8))
    assert torch.equal(cache, eager)


@pytest.mark.parametrize("engine", ["interpreter", "iree"])
def test_other_engines_refuse_at_compile_time(engine):
    args = (torch.zeros(3, 4, 8), *_step_args(paged_write, torch.float32, 0))
    line = inspect.getsourcelines(paged_write)[1] + 1
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=rf"test_custom_kernels.py:{line}.*oop_test::write_rows: "
                             rf"engine '{engine}'"):
        outofplace.compile(paged_write, args, engine=engine)


def test_a_result_viewing_an_argument_is_refused():
    def f(x):
        r = torch.ops.oop_test.first_row(x)  # eager: a view of x's first row
        r.add_(1)
        return x.sum()

    line = inspect.getsourcelines(f)[1] + 1
    x = torch.zeros(3, 4)
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=rf"test_custom_kernels.py:{line}.*view of its argument 'x'"):
        outofplace.compile(f, (x,))


def test_custom_op_returning_a_view_is_refused_as_eager_refuses():
    @torch.library.custom_op("oop_test::flat_view", mutates_args=())
    def flat_view(x: torch.Tensor) -> torch.Tensor:
        return x.view(-1)

    @flat_view.register_fake
    def _(x):
        return x.new_empty(x.numel())

    def f(x):
        return flat_view(x) * 2

    with pytest.raises(RuntimeError, match="may not alias any inputs"):
        f(torch.ones(2, 2))  # eager
    compiled = outofplace.compile(f, (torch.ones(2, 2),))
    with pytest.raises(custom_calls.KernelFailed, match="may not alias any inputs"):
        compiled(torch.ones(2, 2))  # the same kernel, called by XLA: the same error


def _neuron_config(arguments):
    return json.dumps({"kernel": "write_rows_nki", "scale": arguments["scale"]})


def test_foreign_target_is_carried_by_the_exports(tmp_path):
    kernels.register_foreign_target(write_rows, "AwsNeuronCustomNativeKernel",
                                    _neuron_config)
    try:
        args = (torch.zeros(3, 4, 8), *_step_args(paged_write, torch.float32, 0))
        compiled = outofplace.compile(paged_write, args)
        assert "oop_test::write_rows" in compiled.stablehlo  # what XLA:CPU runs
        proto = compiled.hlo_module_proto()
        assert b"AwsNeuronCustomNativeKernel" in proto
        assert b"oop_test::write_rows" not in proto
        assert b'{"kernel": "write_rows_nki", "scale": 2.0}' in proto
        assert hlo_proto.alias_problems(proto, compiled.io_map) == []
        assert compiled.alias_problems("neuron") == []
        compiled.save(str(tmp_path))
        text = (tmp_path / "main.mlir").read_text()
        # the foreign kernel gets its argument as the op's signature has it: the pool
        # as rows (a reshape, a bitcast), its result reshaped back into the pool
        assert "stablehlo.reshape %pool : (tensor<3x4x8xf32>) -> tensor<12x8xf32>" in text
        assert 'stablehlo.custom_call @AwsNeuronCustomNativeKernel' in text
        assert 'backend_config = "{\\22kernel\\22: \\22write_rows_nki\\22, ' in text
        assert "output_operand_alias<output_tuple_indices = [], operand_index = 0" in text
        assert "(tensor<12x8xf32>, tensor<2xi64>, tensor<2x8xf32>) -> tensor<12x8xf32>" \
            in text
        assert "outofplace." not in text.split("AwsNeuronCustomNativeKernel")[1][:400]
        sliced = outofplace.compile(sliced_write, (*_state(sliced_write, torch.float32),
                                                   *_step_args(sliced_write,
                                                               torch.float32, 0)))
        with pytest.raises(outofplace.UnsupportedMutationError,
                           match="view of part of a tensor .* AwsNeuronCustomNativeKernel"):
            sliced.portable_artifact()
        pool = torch.zeros(3, 4, 8)  # and the program still runs the CPU kernel
        expected = paged_write(torch.zeros(3, 4, 8), *_step_args(paged_write,
                                                                torch.float32, 0))
        assert torch.equal(compiled(pool, *_step_args(paged_write, torch.float32, 0)),
                           expected)
    finally:
        kernels.unregister_foreign_target(write_rows)


def test_without_the_handler_compiling_for_xla_refuses(monkeypatch):
    """No extension (installed without a compiler or jaxlib): refused when compiling,
    naming the op and the line, not at the call."""
    monkeypatch.setattr(custom_calls, "extension", lambda: None)
    args = (torch.zeros(3, 4, 8), *_step_args(paged_write, torch.float32, 0))
    line = inspect.getsourcelines(paged_write)[1] + 1
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=rf"test_custom_kernels.py:{line}.*oop_test::write_rows: "
                             "outofplace's kernel handler .* is not built"):
        outofplace.compile(paged_write, args, engine="xla")


def _local(x, idx, k):
    buf = x.clone()                      # a tensor the program makes, written by a kernel
    write_rows(buf.view(-1, 8), idx, k, 3.0)
    return buf * 2


class PagedModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("pool", torch.zeros(2, 4, 8))

    def forward(self, idx, k):
        write_rows(self.pool.view(-1, 8), idx, k, 1.0)
        return self.pool.sum()


def test_a_local_tensor_and_a_module_buffer():
    x, idx, k = torch.randn(2, 4, 8), torch.tensor([0, 7]), torch.randn(2, 8)
    compiled = outofplace.compile(_local, (x, idx, k))
    assert compiled.io_map == {}
    torch.testing.assert_close(compiled(x, idx, k), _local(x, idx, k), rtol=0, atol=0)
    model, eager = PagedModule(), PagedModule()
    compiled = outofplace.compile(model, (idx, k))
    for step in range(3):
        i, rows = torch.tensor([step, 7 - step]), torch.randn(2, 8)
        torch.testing.assert_close(compiled(i, rows), eager(i, rows))
        assert torch.equal(model.pool, eager.pool)


class TrainedWriter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("pool", torch.zeros(4, 4, 8))

    def forward(self, idx, x):
        k = self.lin(x)
        write_rows(self.pool.view(-1, 8), idx, k.detach(), 1.0)
        return self.pool.sum() + k.sum()


def test_torch_compile_with_gradients_matches_eager():
    """A graph needing gradients: AOTAutograd functionalizes the kernel
    (auto_functionalized_v2), which the frontend inlines as PyTorch's own dense
    implementation records it (clone, the op on views of the clone); the pool is still
    written by the kernel in place (no copy warning) and equals eager's."""
    import copy
    import warnings

    torch._dynamo.reset()
    model = TrainedWriter()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="outofplace")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call")
        for step in range(3):
            idx, x = torch.tensor([step, 9 - step]), torch.randn(2, 8)
            out, expected = compiled(idx, x), eager(idx, x)
            out.backward()
            expected.backward()
            torch.testing.assert_close(out, expected)
            torch.testing.assert_close(model.pool, eager.pool)
            torch.testing.assert_close(model.lin.weight.grad, eager.lin.weight.grad)


@torch.library.custom_op("oop_test::write_rows_with", mutates_args=("cache",))
def write_rows_with(cache: torch.Tensor, idx: torch.Tensor, rows: torch.Tensor,
                    bias: torch.Tensor | None, dims: list[int], negate: bool,
                    mode: str, steps: int) -> None:
    """Non-tensor arguments of each kind the handler decodes from backend_config."""
    if mode != "copy" or list(dims) != [1, 8]:
        raise ValueError(f"unexpected arguments {mode!r} {dims!r}")
    values = rows if bias is None else rows + bias
    cache.index_copy_(0, idx, -values * steps if negate else values * steps)


def _with_arguments(cache, idx, rows, bias):
    write_rows_with(cache, idx, rows, None, [1, 8], True, "copy", 3)
    write_rows_with(cache, idx + 2, rows, bias, [1, 8], False, "copy", 2)
    return cache.sum()


def test_non_tensor_arguments_reach_the_kernel():
    args = (torch.zeros(8, 8), torch.tensor([0, 3]), torch.randn(2, 8), torch.randn(8))
    compiled = outofplace.compile(_with_arguments, args)
    text = compiled.stablehlo
    assert 'dims = array<i64: 1, 8>, mode = "copy", negate = true' in text
    assert "steps = 3 : i64" in text and "bias" not in text.split("write_rows_with")[1]
    cache, eager = torch.zeros(8, 8), torch.zeros(8, 8)
    torch.testing.assert_close(compiled(cache, *args[1:]), _with_arguments(eager, *args[1:]))
    assert torch.equal(cache, eager)


def test_a_runtime_position_view_beside_its_root_is_refused():
    def f(cache, pos, idx):
        write_rows(cache[pos], idx, cache[0, :2], 1.0)  # cache[0, :2] shares cache's memory
        return cache.sum()

    line = inspect.getsourcelines(f)[1] + 1
    args = (torch.zeros(4, 8, 8), torch.tensor(1), torch.tensor([0, 3]))
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=rf"test_custom_kernels.py:{line}.*runtime position"):
        outofplace.compile(f, args)


@pytest.mark.parametrize("engine", ["interpreter", "iree"])
def test_running_on_another_engine_refuses_before_writing(engine):
    pool = torch.zeros(3, 4, 8)
    args = (pool, *_step_args(paged_write, torch.float32, 0))
    compiled = outofplace.compile(paged_write, args)
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=rf"oop_test::write_rows: engine '{engine}'"):
        compiled.run(args, engine=engine)
    assert not pool.any()


def test_a_seeded_random_kernel_has_a_side_effect():
    @torch.library.custom_op("oop_test::noisy_rows", mutates_args=("cache",),
                             tags=(torch.Tag.nondeterministic_seeded,))
    def noisy_rows(cache: torch.Tensor, idx: torch.Tensor) -> None:
        cache.index_fill_(0, idx, 1.0)

    def f(cache, idx):
        noisy_rows(cache, idx)
        return cache.sum()

    text = outofplace.compile(f, (torch.zeros(4, 4), torch.tensor([1]))).stablehlo
    assert 'has_side_effect = true' in text.split('@"oop_test::noisy_rows"')[1]
    assert 'has_side_effect' not in outofplace.compile(
        paged_write, (torch.zeros(3, 4, 8), *_step_args(paged_write, torch.float32, 0))
    ).stablehlo


_KERNEL_THREADS: list[int] = []


@torch.library.custom_op("oop_test::scale_noting_thread", mutates_args=("cache",))
def scale_noting_thread(cache: torch.Tensor, s: float) -> None:
    """Scales `cache` in place, noting the thread its kernel runs on."""
    _KERNEL_THREADS.append(threading.get_ident())
    cache.mul_(s)


def _noting_thread(*caches):
    # sixteen kernels that do not wait for each other: XLA:CPU runs such work on its
    # threads (two of them ran these kernels before kernel_home.h); the convolution is
    # eager's kernel (convolutions_as_kernel_calls), which takes the program home
    for cache in caches:
        scale_noting_thread(cache, 2.0)
    image = caches[0][:64].reshape(4, 64, 16, 16)
    features = torch.nn.functional.conv2d(image, caches[1][:36].reshape(64, 64, 3, 3))
    return sum(cache.sin() for cache in caches).sum() + features.sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_kernels_run_on_the_thread_that_called_the_program(path, dtype):
    """Kernels run on the caller's thread, as in eager, not on XLA's (kernel_home.h:
    one OpenMP team in the process), from the main thread and from another; each call's
    values are eager's."""
    import torch._dynamo

    torch._dynamo.reset()

    def arguments():
        return [torch.randn(256, 1024, dtype=dtype) for _ in range(16)]

    compiled = torch.compile(_noting_thread, backend="outofplace", dynamic=False) \
        if path == "torch.compile" else outofplace.compile(_noting_thread, arguments())
    try:
        for caller in ("main", "thread"):
            given = arguments()
            expected_state = [t.clone() for t in given]
            expected = _noting_thread(*expected_state)
            _KERNEL_THREADS.clear()
            out, ident = {}, {}

            def call():
                ident["caller"] = threading.get_ident()
                out["result"] = compiled(*given)

            if caller == "main":
                call()
            else:
                worker = threading.Thread(target=call)
                worker.start()
                worker.join()
            assert len(_KERNEL_THREADS) == 16 and \
                set(_KERNEL_THREADS) == {ident["caller"]}, caller
            torch.testing.assert_close(out["result"], expected)
            for actual, wanted in zip(given, expected_state):
                torch.testing.assert_close(actual, wanted, rtol=0, atol=0)
    finally:
        torch._dynamo.reset()


def test_only_programs_calling_eagers_convolutions_run_at_home():
    """A program calling eager's convolution runs through the handler's `at_home`; one
    whose only kernels are custom ops', or without kernels, runs as it is (no helper
    thread: a small kernel's call would cost two thread handoffs)."""
    def custom_only(*caches):
        for cache in caches:
            scale_noting_thread(cache, 2.0)
        return sum(caches)

    def plain(*caches):
        caches[0].mul_(2.0)
        return sum(caches)

    for program, at_home in ((_noting_thread, True), (custom_only, False), (plain, False)):
        made = [torch.randn(256, 1024) for _ in range(16)]
        compiled = outofplace.compile(program, made)
        compiled(*[torch.randn(256, 1024) for _ in range(16)])
        assert (compiled._xla.at_home is not None) == at_home, program.__name__
