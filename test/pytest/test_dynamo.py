"""torch.compile(..., backend="outofplace") mutates the caller's tensors like eager."""

import copy
import warnings

import numpy as np

import pytest
import torch
import torch._dynamo

from differential import assert_module_state_matches, squared_mean_step


def test_backend_is_registered_by_entry_point():
    assert "outofplace" in torch._dynamo.list_backends()


class CacheModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 8))
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x, pos):
        self.cache[:, pos] = x.sum(-1)
        y = self.linear(self.cache)
        y.add_(1)
        return y.relu_()


def test_module_with_setitem_on_buffer():
    torch._dynamo.reset()
    model = CacheModel()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="outofplace", dynamic=False)
    for pos in range(3):
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x, pos), eager(x, pos))
        assert_module_state_matches(model, eager, f"step {pos}")


def slice_then_scale(buf, v):
    buf[1:3] = v
    buf.mul_(2)
    return buf.sum()


def test_function_mutating_its_argument():
    torch._dynamo.reset()
    compiled = torch.compile(slice_then_scale, backend="outofplace", dynamic=False)
    buf, v = torch.randn(5), torch.randn(2)
    eager_buf = buf.clone()
    torch.testing.assert_close(compiled(buf, v), slice_then_scale(eager_buf, v))
    torch.testing.assert_close(buf, eager_buf)


def with_graph_break(x):
    x.add_(1)
    torch._dynamo.graph_break()
    x.mul_(2)
    return x.t()


def test_graph_break_between_mutations():
    torch._dynamo.reset()
    compiled = torch.compile(with_graph_break, backend="outofplace", dynamic=False)
    x, eager_x = torch.ones(2, 3), torch.ones(2, 3)
    torch.testing.assert_close(compiled(x), with_graph_break(eager_x))
    torch.testing.assert_close(x, eager_x)


# torch.compile's defaults (no `dynamic=`): a dimension that changes becomes symbolic.
def prefix_update(cache, x):
    cache[: x.shape[0]] += x
    return (cache * 2).sum(0)


def test_default_arguments_across_shapes_match_eager():
    torch._dynamo.reset()
    compiled = torch.compile(prefix_update, backend="outofplace")
    for n in (2, 3, 5, 3, 7):
        cache, x = torch.randn(8, 4), torch.randn(n, 4)
        eager_cache = cache.clone()
        torch.testing.assert_close(compiled(cache, x), prefix_update(eager_cache, x))
        torch.testing.assert_close(cache, eager_cache, msg=f"rows {n}")


def test_symbolic_graph_compiles_once_per_shape():
    from outofplace.dynamo import ShapeSpecializing

    graphs = []

    def spy(gm, example_inputs):
        runner = torch._dynamo.lookup_backend("outofplace")(gm, example_inputs)
        graphs.append(runner)
        return runner

    torch._dynamo.reset()
    compiled = torch.compile(prefix_update, backend=spy)
    for n in (2, 3, 4, 3, 4, 2):
        compiled(torch.zeros(8, 4), torch.ones(n, 4))
    symbolic = [g for g in graphs if isinstance(g, ShapeSpecializing)]
    # The first call compiled a static graph; dynamo sends every later call to the
    # symbolic one, which compiles once for each of 3, 4 and 2 rows, not per call.
    assert len(symbolic) == 1 and symbolic[0].compilations == 3
    assert sorted(key[1][0][0] for key in symbolic[0].programs) == [2, 3, 4]


def decode_step(cache, pos, k):
    cache.index_copy_(1, pos, k)
    return k.sum()


def test_one_element_position_tensor_compiles_once_for_every_position():
    # A position held in a one-element 1-d tensor is data to the graph: one program
    # serves every position. (A 0-d integer tensor used as an index is specialized by
    # dynamo itself, one graph per value: docs/api.md.)
    compilations = []

    def spy(gm, example_inputs):
        compilations.append(gm)
        return torch._dynamo.lookup_backend("outofplace")(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(decode_step, backend=spy)
    cache, eager = torch.zeros(2, 8, 4), torch.zeros(2, 8, 4)
    for pos in (0, 3, 7, 5, 1):
        k = torch.randn(2, 1, 4)
        torch.testing.assert_close(compiled(cache, torch.tensor([pos]), k),
                                   decode_step(eager, torch.tensor([pos]), k))
    assert torch.equal(cache, eager)
    assert len(compilations) == 1


class GrowingBatch(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(4))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.seen.add_(x.sum(0))
        self.count += x.shape[0]
        y = x * self.seen
        torch._dynamo.graph_break()
        y.mul_(2)
        return y


def test_module_buffers_across_shapes_and_a_graph_break():
    torch._dynamo.reset()
    model, eager = GrowingBatch(), GrowingBatch()
    compiled = torch.compile(model, backend="outofplace")
    for batch in (1, 2, 3, 5):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(compiled(x), eager(x))
        assert_module_state_matches(model, eager, f"batch {batch}")


class BatchNormMLP(torch.nn.Module):
    """An MLP with BatchNorm in train mode: its running statistics are written."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _mse(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def _cross_entropy(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def _cnn():
    from test_training_step import CNN
    return CNN()


TRAINING = {"batchnorm-mlp": (BatchNormMLP, _mse,
                              lambda: (torch.randn(4, 6), torch.randn(4, 3))),
            "cnn": (_cnn, _cross_entropy,
                    lambda: (torch.randn(2, 3, 8, 8), torch.randint(5, (2,))))}


@pytest.mark.parametrize("case", list(TRAINING))
def test_training_with_backward_and_optimizer_matches_eager(case, monkeypatch):
    """`loss.backward()` on a compiled model: AOTAutograd's forward and backward graphs
    are both compiled by outofplace; gradients, parameters after SGD steps and the
    running statistics match eager."""
    import outofplace.dynamo

    graphs = []
    compile_program = outofplace.dynamo.compile_program

    def spy(gm, args):
        graphs.append(gm)
        return compile_program(gm, args)

    monkeypatch.setattr(outofplace.dynamo, "compile_program", spy)
    torch._dynamo.reset()
    torch.manual_seed(0)
    make_model, loss_of, data = TRAINING[case]
    model = make_model().train()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="outofplace")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, eager)]
    for step in range(3):
        x, y = data()
        losses = []
        for m, opt in zip((compiled, eager), opts):
            opt.zero_grad()
            loss = loss_of(m, x, y)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1])
        for (name, p), e in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, e.grad, msg=f"step {step} {name}.grad")
        assert_module_state_matches(model, eager, f"step {step}")
    assert len(graphs) == 2, "one forward and one backward graph, compiled once"


class CachedProjection(torch.nn.Module):
    """A decode step of a model not under no_grad: its parameters require gradients, its
    KV cache (a buffer) does not."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(16, 8))

    def forward(self, x, pos):
        k = self.proj(x)
        self.cache[pos] = k.detach()
        return (self.cache[: pos + 1].sum(0) * k).sum()


def test_cache_written_with_gradients_enabled_stays_in_the_compiled_graph(monkeypatch):
    """Gradients enabled (the graph goes through AOTAutograd): the cache write is in the
    forward graph outofplace compiles, an aliased input updated in the cache's own
    memory, not copied back by AOTAutograd's wrapper; cache and gradients match eager."""
    import outofplace.dynamo

    programs = []
    compile_program = outofplace.dynamo.compile_program

    def spy(gm, args):
        programs.append(compile_program(gm, args))
        return programs[-1]

    monkeypatch.setattr(outofplace.dynamo, "compile_program", spy)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = CachedProjection()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="outofplace", dynamic=False)
    addresses = set()
    for pos in range(4):
        x = torch.randn(8)
        for m in (compiled, eager):
            m.zero_grad()
            m(x, pos).backward()
        torch.testing.assert_close(model.cache, eager.cache)
        torch.testing.assert_close(model.proj.weight.grad, eager.proj.weight.grad)
        if pos:  # (the first call adopts the cache into memory XLA owns: docs/api.md)
            addresses.add(model.cache.data_ptr())
    assert len(addresses) == 1, "the cache is updated in its own memory, call after call"
    forward = programs[0]
    written = [forward.input_names[i] for i in forward.io_map]
    assert any(forward.input_types[i][0] == (16, 8) for i in forward.io_map), written
    assert all(v == "in place" for v in forward.in_place_report.values()), \
        forward.in_place_report


def test_tiny_llama_trained_through_torch_compile_matches_eager():
    """A one-layer Llama trained with `torch.compile(backend="outofplace")`: forward and
    backward graphs compiled, SGD with momentum run eagerly; losses, gradients and
    parameters match eager over steps. (SGD: Adam's first steps move a parameter by
    the learning rate times the sign of its gradient, which rounding decides for a
    gradient near zero: docs/training.md.)"""
    transformers = pytest.importorskip("transformers")
    torch._dynamo.reset()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=32,
        attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config).train()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="outofplace", dynamic=False)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, eager)]
    for step in range(3):
        ids = torch.randint(64, (2, 6))
        losses = []
        for m, opt in zip((compiled, eager), opts):
            opt.zero_grad()
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1], msg=f"step {step} loss")
        for (name, p), e in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, e.grad, msg=f"step {step} {name}.grad")
            torch.testing.assert_close(p, e, msg=f"step {step} {name}")


class NumpyCache(torch.nn.Module):
    """A cache over memory numpy owns (copied on every call, so warned of), and a
    counter per layer with one new value."""

    def __init__(self) -> None:
        super().__init__()
        # 4 KiB: copies under xla.WARN_BYTES in all are said in the report, not warned
        self.register_buffer("cache", torch.from_numpy(np.zeros((128, 8), np.float32)))
        self.register_buffer("steps_0", torch.zeros(512, dtype=torch.int64))
        self.register_buffer("steps_1", torch.zeros(512, dtype=torch.int64))
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x, pos):
        self.cache[pos] = self.linear(x)
        self.steps_0.add_(1)
        self.steps_1.copy_(self.steps_0)
        return self.cache.sum()


def test_copy_warnings_name_the_users_tensors_once_per_compile():
    """One warning per compiled graph, naming the module's buffers (not dynamo's
    `args_3`), each with its true reason."""
    torch._dynamo.reset()
    model = NumpyCache()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="outofplace", dynamic=False)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(8)
            torch.testing.assert_close(compiled(x, 1), eager(x, 1))
    assert_module_state_matches(model, eager, "state")
    copies = [str(w.message) for w in caught if "copied on every call" in str(w.message)]
    assert len(copies) == 1, copies
    assert "'cache' (8192 bytes): it is memory another owner allocated" in copies[0]
    assert "'steps_1' (4096 bytes): the program gives it the same new value as argument " \
           "'steps_0'" in copies[0]


def test_training_graphs_name_the_users_tensors():
    """AOTAutograd's forward graph takes dynamo's inputs as `primals_1`, ...: messages
    name the module's buffers."""
    torch._dynamo.reset()
    model = NumpyCache()
    compiled = torch.compile(model, backend="outofplace", dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(torch.randn(8), 1).backward()
    copies = [str(w.message) for w in caught if "copied on every call" in str(w.message)]
    assert copies and all("'steps_1'" in c and "primals_" not in c for c in copies), copies


def write_at(c, k, p):
    c[:, p] = k  # the line messages name
    return c.sum()


def test_messages_name_the_users_line():
    """A torch.compile graph is traced op by op with its nodes' stack traces: messages
    name the user's line, not the graph's generated code (`<eval_with_key>`)."""
    torch._dynamo.reset()
    run = torch.compile(write_at, backend="outofplace", dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(torch.randn(4, 8), torch.randn(4), torch.tensor(3))
    policy = [str(w.message) for w in caught if "out of bounds" in str(w.message)]
    line = write_at.__code__.co_firstlineno + 1
    assert policy and all(m.startswith(f"{__file__}:{line}:") for m in policy), policy


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_a_float_dynamo_makes_an_input_is_read_at_every_call(dtype):
    """A Python float that changes between calls becomes, at dynamo's recompile, a 0-d
    tensor input read with `.item()` in the graph: the program reads it at every call
    (it raised DataDependentOutputException, refusing what `backend="eager"` runs), and
    one more program serves every later value."""
    import outofplace.dynamo

    torch._dynamo.reset()
    w = torch.randn(4, 4, dtype=dtype)
    compiles = []
    compile_graph = outofplace.dynamo._compile_graph

    def counting(*args, **kwargs):
        compiles.append(1)
        return compile_graph(*args, **kwargs)

    def f(x, decay):
        return x.add(w, alpha=decay) * 2

    compiled = torch.compile(f, backend="outofplace")
    try:
        outofplace.dynamo._compile_graph = counting
        for decay in (0.1, 0.2, 0.3, 0.45):
            x = torch.randn(4, 4, dtype=dtype)
            torch.testing.assert_close(compiled(x, decay), f(x, decay), rtol=0, atol=0)
    finally:
        outofplace.dynamo._compile_graph = compile_graph
    assert len(compiles) == 2  # the first value's, then the one reading the input


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_training_step_with_a_learning_rate_scheduler(dtype, foreach):
    """SGD with momentum and weight decay, its learning rate halved after every step
    (StepLR): dynamo makes the rate an input after its first change; the parameters and
    losses as eager's over five steps. The foreach step takes the rate, a number read
    from that input, as its `_foreach_add_`'s alpha (it was refused at the second step:
    no per-parameter `add_` took a number that is a node of the graph)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 3)).to(dtype)
    x = torch.randn(5, 6, dtype=dtype)

    def training(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3,
                              foreach=foreach)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
        return squared_mean_step(m, opt), scheduler
    eager_model = copy.deepcopy(model)
    (eager, eager_scheduler), (step, scheduler) = training(eager_model), training(model)
    compiled = torch.compile(step, backend="outofplace")
    tolerance = dict(rtol=1e-6, atol=1e-7) if dtype == torch.float32 else \
        dict(rtol=1e-14, atol=1e-15)
    for _ in range(5):
        torch.testing.assert_close(compiled(x), eager(x), **tolerance)
        scheduler.step()
        eager_scheduler.step()
        for got, expected in zip(model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(got, expected, **tolerance)


class TransposedAverage(torch.nn.Module):
    """An average buffer updated from a float64 parameter and returned transposed (eager
    lays that output out over the buffer's storage), beside a write through `split`'s
    view; the input is not read."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(6, dtype=torch.float64).view(3, 2) - 2)
        self.register_buffer("ema", torch.arange(6.0).view(3, 2) - 3)
        self.register_buffer("b", torch.arange(9.0).view(3, 3) - 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        with torch.no_grad():
            self.ema.copy_(0.9 * self.ema + (1 - 0.9) * self.w)
        for part in self.b.split(3, 1):
            part.neg_()
        return self.ema.t(),


def test_output_laid_out_over_a_storage_of_symbolic_size_matches_eager():
    """After a recompile for another layout of its input (dynamic shapes, the default),
    the output's storage had a symbolic size though its layout is concrete: laying the
    output out raised PyTorch's "SymIntArrayRef expected to contain only concrete
    integers"; it is the elements the view reaches."""
    torch._dynamo.reset()
    eager, compiled = TransposedAverage(), TransposedAverage()
    run = torch.compile(compiled, backend="outofplace")
    x = torch.arange(8.0).view(2, 1, 2, 2) - 3
    for layout in (x.contiguous(memory_format=torch.channels_last), x.transpose(2, 3),
                   x.contiguous()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (got,), (expected,) = run(layout), eager(layout)
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert_module_state_matches(compiled, eager)


class DoubledThroughData(torch.nn.Module):
    """A parameter that needs gradients doubled through `.data`, beside a product of the
    inputs, which arrive as views into longer tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.0, -1.0, 1.0]))

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = s * x[0]
        self.w.data.mul_(2)
        return self.w[1:], self.w, y


def _stepped(t: torch.Tensor) -> torch.Tensor:  # every other element of a longer tensor
    return torch.stack([t, torch.full_like(t, 99)], -1).flatten(-2)[..., ::2]


def _sliced(t: torch.Tensor) -> torch.Tensor:  # rows 1.. of a tensor with two more rows
    return torch.cat([torch.full_like(t[:1], 99), t, torch.full_like(t[:1], 99)])[1:-1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_input_of_symbolic_storage_in_a_graph_with_gradients_matches_eager(dtype):
    """After dynamo's recompile for another layout of an input (a view at another offset
    into a longer tensor), the forward graph AOTAutograd makes takes that input with a
    storage of symbolic size: it was traced from a meta tensor of that size, and
    torch.export raised "Expect size to be a plain tuple of ints"; it is the elements the
    view reaches (fuzz modules 3443 of seed 61003000)."""
    torch._dynamo.reset()
    eager, compiled = DoubledThroughData(), DoubledThroughData()
    run = torch.compile(compiled, backend="outofplace")
    xs = [torch.tensor(v, dtype=dtype) for v in ([-2.0, 0.0, 1.0, -1.0, 2.0],
                                                  [0.0, 2.0, 3.0, -1.0, 1.0],
                                                  [1.0, -2.0, -1.0, 2.0, 0.0])]
    ss = [torch.tensor([[[0.0, 2.0, 1.0]]], dtype=torch.float16),
          torch.tensor([[[1.0, 0.0, -1.0]]], dtype=torch.float16),
          torch.tensor([[[1.0, 0.0, -1.0]]], dtype=torch.float16)]
    for x, s in zip((_stepped(xs[0]), _sliced(xs[1]), xs[2]),
                    (_stepped(ss[0]), ss[1], _sliced(ss[2]))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, expected = run(x, s), eager(x, s)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=0, atol=0)
        assert_module_state_matches(compiled, eager)
