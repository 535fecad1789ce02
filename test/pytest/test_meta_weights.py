"""Compiling a module whose weights are on the meta device, calling it once they are loaded
(docs/models.md, "Weights too big for the host: compile on meta"), and compiling without
copying the weights."""

import pytest
import torch

import outofplace
from differential import assert_module_state_matches, assert_same, assert_same_tree
from outofplace.errors import UnsupportedMutationError


def _load(module: torch.nn.Module, real: torch.nn.Module, assign: bool) -> None:
    """Gives `module` (on meta) the weights of `real`, as a user loads a checkpoint: in
    place into empty tensors (`to_empty` + `load_state_dict`), or by handing over the
    tensors (`assign=True`). Buffers outside the state dict (non-persistent: rotary
    frequencies) are set as the model's own initialisation would."""
    if assign:
        module.load_state_dict(real.state_dict(), assign=True)
    else:
        module.to_empty(device="cpu")
        module.load_state_dict(real.state_dict())
    persistent = real.state_dict().keys()
    for name, buffer in real.named_buffers():
        if name not in persistent:
            owner, _, leaf = name.rpartition(".")
            module.get_submodule(owner).register_buffer(leaf, buffer.clone(),
                                                        persistent=False)


class _Net(torch.nn.Module):
    """Buffers written in place: BatchNorm's running statistics (train mode) and a cache
    row written at a runtime position."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(6)
        self.fc = torch.nn.Linear(6, 4)
        self.register_buffer("seen", torch.zeros(3, 4))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.fc(self.bn(x))
        self.seen[pos] = y.sum(0)
        return y, self.seen.sum(0)


@pytest.mark.parametrize("assign", [False, True], ids=["to_empty", "assign"])
def test_module_with_buffers_written_compiled_on_meta_matches_eager(assign):
    torch.manual_seed(0)
    eager = _Net().train()
    with torch.device("meta"):
        net = _Net().train()
    compiled = outofplace.compile(net, (torch.randn(5, 6), torch.tensor(0)))
    assert {compiled.input_names[i] for i in compiled.io_map} == {
        "bn.running_mean", "bn.running_var", "bn.num_batches_tracked", "seen"}
    _load(net, eager, assign)
    for step in range(3):
        x, pos = torch.randn(5, 6), torch.tensor(step)
        expected = eager(x.clone(), pos.clone())
        assert_same_tree(compiled(x, pos), expected, f"step {step}")
        assert_module_state_matches(net, eager, f"step {step}")


def test_call_before_the_weights_are_loaded_says_so():
    with torch.device("meta"):
        net = _Net().train()
    compiled = outofplace.compile(net, (torch.randn(5, 6), torch.tensor(0)))
    with pytest.raises(ValueError, match=r"'bn.weight' is on meta.*load the weights"):
        compiled(torch.randn(5, 6), torch.tensor(0))


try:
    import transformers
    from transformers.integrations import executorch
except ImportError:
    transformers = None
NEEDS_TRANSFORMERS = pytest.mark.skipif(transformers is None, reason="needs transformers")

CACHE = 8


def _llama(device: str) -> torch.nn.Module:
    """A tiny random Llama (seeded: the same weights each time on the CPU), on `device`."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=32,
        attn_implementation="sdpa")
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static")
    return model


def _wrapper(model: torch.nn.Module) -> torch.nn.Module:
    """The static-cache export wrapper; its cache on the CPU, whatever the weights are on."""
    return executorch.TorchExportableModuleWithStaticCache(
        model, batch_size=1, max_cache_len=CACHE, device="cpu")


@NEEDS_TRANSFORMERS
@pytest.mark.parametrize("assign", [False, True], ids=["to_empty", "assign"])
def test_llama_compiled_on_meta_then_loaded_matches_eager(assign):
    model = _llama("meta")
    wrapper = _wrapper(model)
    assert all(p.is_meta for p in model.parameters())
    with torch.no_grad():
        compiled = outofplace.compile(wrapper, (torch.tensor([[1]]),),
                                      {"cache_position": torch.tensor([0])})
    real = _llama("cpu")
    eager = _wrapper(real)
    _load(model, real, assign)
    with torch.no_grad():
        for position, token in enumerate([5, 17, 3, 42]):
            ids, cache_position = torch.tensor([[token]]), torch.tensor([position])
            expected = eager(ids.clone(), cache_position=cache_position.clone())
            actual = compiled(ids, cache_position=cache_position)
            assert_same(actual, expected, f"logits at {position}")
            assert_module_state_matches(wrapper, eager, f"state at {position}")


@NEEDS_TRANSFORMERS
def test_program_making_tensors_on_meta_is_refused():
    """Built whole under torch.device("meta"), HF's StaticCache records the meta device
    and makes its positions there: no call could run that program."""
    model = _llama("meta")
    with torch.device("meta"):
        wrapper = executorch.TorchExportableModuleWithStaticCache(
            model, batch_size=1, max_cache_len=CACHE)
    with pytest.raises(UnsupportedMutationError, match=r"meta device.*device='cpu'"):
        with torch.no_grad():
            outofplace.compile(wrapper, (torch.tensor([[1]]),),
                               {"cache_position": torch.tensor([0])})


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = torch.ones(4)  # neither a parameter nor a buffer: a constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


def test_meta_constant_is_refused_naming_it():
    with torch.device("meta"):
        module = _Scaled()
    with pytest.raises(UnsupportedMutationError, match=r"reads `scale` as a constant.*"
                                                       r"on the meta device"):
        outofplace.compile(module, (torch.ones(2, 4),))


class _Gated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.register_buffer("enabled", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) if self.enabled.item() > 0 else x


def test_meta_buffer_deciding_a_branch_is_refused():
    with torch.device("meta"):
        module = _Gated()
    with pytest.raises(UnsupportedMutationError, match=r"test_meta_weights.py:[0-9]+: .*"
                                                       r"a value read from a tensor's data"):
        outofplace.compile(module, (torch.ones(2, 4),))


class _Big(torch.nn.Module):
    """A weight, a read-only buffer and a written one, 16 MiB each."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(n, n, bias=False)
        self.register_buffer("table", torch.ones(n, n))
        self.register_buffer("cache", torch.zeros(n, n))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) + self.table[0]
        self.cache[pos] = y[0]
        return y


def test_meta_weights_of_4_gib_compile():
    """A meta weight that would not fit alongside the rest of the tests: compiling reads
    no data of it (a read fails on meta) and allocates none."""
    with torch.device("meta"):
        module = torch.nn.Linear(1 << 15, 1 << 15, bias=False)
    compiled = outofplace.compile(module, (torch.ones(1, 1 << 15),))
    assert compiled.input_types[0] == ((1 << 15, 1 << 15), torch.float32)


def test_compile_allocates_nothing_of_the_weights_size():
    """Compiling with real weights copies none of them: no CPU allocation as large as a
    weight or buffer (the profiler records every one; tracing used to clone them all)."""
    from torch.profiler import ProfilerActivity, profile

    module = _Big(2048)
    smallest = min(t.nbytes for t in (*module.parameters(), *module.buffers()))
    args = (torch.ones(1, 2048), torch.tensor(1))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        compiled = outofplace.compile(module, args)
    large = [(e.name, e.cpu_memory_usage) for e in prof.events()
             if e.cpu_memory_usage >= smallest]
    assert large == []
    eager = _Big(2048)
    eager.load_state_dict(module.state_dict())
    x = torch.randn(1, 2048)
    assert_same(compiled(x, torch.tensor(2)), eager(x, torch.tensor(2)), "output")
    assert_module_state_matches(module, eager)


class _Listed(torch.nn.Module):
    """A 4 MiB cache and a counter reached through a plain Python list, as HF's
    StaticCache holds them (torch.export lifts them as constants, traced as fakes that
    count versions of the real ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.arange(1 << 20, dtype=torch.float32))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.held = [self.cache, self.count]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cache, count = self.held
        cache.mul_(2).add_(x.sum())
        count.add_(1)
        return cache[:4] * count


def test_compiling_leaves_large_buffers_it_does_not_copy_as_they_were():
    """Tracing writes only fakes of a buffer over COPIED_BYTES, so compiling, which no
    longer copies it to restore it, leaves its values as they were; a small one is
    restored from its copy."""
    module, eager = _Listed(), _Listed()
    assert module.cache.nbytes > outofplace.frontend.training.COPIED_BYTES
    compiled = outofplace.compile(module, (torch.ones(3),))
    assert_module_state_matches(module, eager, "after compiling")
    for step in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), eager(x), f"step {step}")
        assert_module_state_matches(module, eager, f"step {step}")
