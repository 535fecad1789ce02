"""A Hugging Face Llama decoding through a `StaticCache`, run for several steps against eager.

`TorchExportableModuleWithStaticCache` (transformers' torch.export recipe) registers every
layer's key/value cache and its `cumulative_length` counter as buffers of the wrapper; its
forward resets the counters to `cache_position[0]`, then each layer writes its new keys
and values with `index_copy_` at the positions the counter gives and advances the counter.
The compiled program must return eager's logits and leave every buffer as eager does.
"""

import copy
import functools
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
executorch = pytest.importorskip("transformers.integrations.executorch")

import outofplace  # noqa: E402
from differential import assert_module_state_matches, assert_same, assert_same_tree  # noqa: E402

LAYERS = 2
MAX_CACHE_LEN = 8
VOCAB = 64
ATTENTION = pytest.mark.parametrize("attention", ["eager", "sdpa"])


def _llama(attention: str) -> torch.nn.Module:
    """A tiny random Llama in transformers' static-cache export wrapper, batch size 1."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
        max_position_embeddings=32, attn_implementation=attention)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static")
    return executorch.TorchExportableModuleWithStaticCache(
        model, batch_size=1, max_cache_len=MAX_CACHE_LEN)


def _cache_buffers() -> set[str]:
    return {f"{name}_{layer}" for layer in range(LAYERS)
            for name in ("key_cache", "value_cache", "cumulative_length")}


def _compile(model: torch.nn.Module, tokens: int, start: int) -> outofplace.Compiled:
    """The forward on `tokens` tokens at positions start, start + 1, ...: it writes every
    cache buffer and nothing else, and compiling leaves the module's state alone."""
    before = {n: t.detach().clone() for n, t in model.named_buffers()}
    input_ids = torch.randint(VOCAB, (1, tokens))
    cache_position = torch.arange(start, start + tokens)
    compiled = outofplace.compile(model, (input_ids,), {"cache_position": cache_position})
    mutated = {compiled.input_names[i] for i in compiled.io_map}
    assert mutated == _cache_buffers()
    for name, value in model.named_buffers():
        assert_same(value.detach(), before[name], f"'{name}' after compile")
    return compiled


def _step(compiled: outofplace.Compiled, model: torch.nn.Module, eager: torch.nn.Module,
          tokens: list[int], start: int, what: str) -> None:
    """One forward of both on the same tokens; logits and every buffer must agree."""
    input_ids = torch.tensor([tokens])
    cache_position = torch.arange(start, start + len(tokens))
    with torch.no_grad():
        expected = eager(input_ids.clone(), cache_position=cache_position.clone())
    actual = compiled(input_ids, cache_position=cache_position)
    assert_same_tree(actual, expected, f"{what} logits")
    assert_module_state_matches(model, eager, what)
    for layer in range(LAYERS):  # the counter ends past the tokens written
        counter = dict(model.named_buffers())[f"cumulative_length_{layer}"]
        assert counter.item() == start + len(tokens), f"{what} cumulative_length_{layer}"


@ATTENTION
def test_llama_static_cache_decode_several_steps(attention):
    model = _llama(attention)
    eager = copy.deepcopy(model)
    decode = _compile(model, tokens=1, start=0)
    for position, token in enumerate([5, 17, 3, 42]):
        _step(decode, model, eager, [token], position, f"decode step {position}")


@ATTENTION
def test_llama_static_cache_prefill_then_decode(attention):
    model = _llama(attention)
    eager = copy.deepcopy(model)
    prefill = _compile(model, tokens=4, start=0)
    decode = _compile(model, tokens=1, start=4)
    _step(prefill, model, eager, [7, 1, 60, 23], 0, "prefill")
    for position, token in enumerate([9, 33, 2], start=4):
        _step(decode, model, eager, [token], position, f"decode at {position}")


def _example(tokens: int, start: int) -> tuple[tuple, dict]:
    return (torch.randint(VOCAB, (1, tokens)),), \
        {"cache_position": torch.arange(start, start + tokens)}


def test_llama_shape_family_prefills_at_two_lengths_then_decodes(tmp_path):
    """One family over one static cache: chunked prefill of 3 then 2 tokens, decode."""
    model = _llama("sdpa")
    eager = copy.deepcopy(model)
    family = outofplace.compile_family(model, [_example(3, 0), _example(2, 3),
                                               _example(1, 5)])
    assert len(family.members) == 3
    assert {family.input_names[i] for i in family.members[0].io_map} == _cache_buffers()
    _step(family, model, eager, [7, 1, 60], 0, "prefill of 3")
    _step(family, model, eager, [23, 4], 3, "prefill of 2")
    for position, token in enumerate([9, 33], start=5):
        _step(family, model, eager, [token], position, f"decode at {position}")
    with pytest.raises(ValueError, match=r"no program of this family takes inputs of "
                                         r"shapes \[\[1, 4\], \[4\]\]"):
        family(torch.tensor([[1, 2, 3, 4]]), cache_position=torch.arange(4))
    manifest = json.loads(family.save(str(tmp_path), hlo_proto=False).read_text())
    assert [m["input_shapes"] for m in manifest["members"]] == [
        {"input_ids": [1, n], "cache_position": [n]} for n in (3, 2, 1)]
    assert set(manifest["aliased_inputs"]) == _cache_buffers()
    assert (tmp_path / "member_2" / "main.mlir").exists()


def test_family_members_must_update_the_same_arguments():
    def step(cache, x):
        if x.shape[0] > 1:
            cache.add_(x.sum())
        return x * 2

    with pytest.raises(ValueError, match=r"updates \[\], the first \['cache'\]"):
        outofplace.compile_family(step, [(torch.zeros(4), torch.ones(2)),
                                         (torch.zeros(4), torch.ones(1))])


DECODERS = {  # family: (config class, model class, extra config)
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 16}),
    # mixture of experts: transformers' grouped experts (histc and, in bfloat16,
    # grouped_mm: frontend/upstream/)
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                {"num_local_experts": 4, "num_experts_per_tok": 2}),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family,kv_heads", [("llama", 4), ("llama", 2), ("qwen2", 1),
                                             ("gemma", 2), ("mixtral", 2)],
                         ids=["llama-mha", "llama-gqa", "qwen2-mqa", "gemma-gqa",
                              "mixtral-moe"])
def test_decoders_at_batch_one_keep_every_cache_in_place(family, kv_heads, dtype):
    """A batch-1 decode step of transformers' decoders (MHA and grouped-query), in float32
    and bfloat16: logits as eager's over steps, and XLA:CPU updates every key and value
    cache in place (the attention that reads a cache right after its update once made
    XLA:CPU copy it; in bfloat16, its float normalization did,
    outofplace-bfloat16-state-as-bits)."""
    config_class, model_class, extra = DECODERS[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, vocab_size=128, max_position_embeddings=64, **extra)
    model = getattr(transformers, model_class)(config).to(dtype).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static")
    wrapper = executorch.TorchExportableModuleWithStaticCache(model, batch_size=1,
                                                              max_cache_len=32)
    eager = copy.deepcopy(wrapper)
    # (XLA's bfloat16 products and sums round apart from eager's by an ulp or two: one
    # ulp at magnitude 1)
    close = torch.testing.assert_close if dtype == torch.float32 else \
        functools.partial(torch.testing.assert_close, rtol=1.6e-2, atol=1e-2)
    with torch.no_grad():
        compiled = outofplace.compile(wrapper, (torch.tensor([[5]]),),
                                      {"cache_position": torch.tensor([0])})
        for position, token in enumerate([3, 9, 4]):
            ids, where = torch.tensor([[token]]), torch.tensor([position])
            close(compiled(ids, cache_position=where), eager(ids, cache_position=where))
    for (name, actual), expected in zip(wrapper.named_buffers(), eager.buffers()):
        close(actual, expected, msg=f"buffer '{name}'")
    caches = {n: v for n, v in compiled.in_place_report.items() if "cache" in n}
    assert len(caches) == 4 and all(v == "in place" for v in caches.values()), caches


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_left_padded_batch_generates_eager_tokens(dtype):
    """A batch of prompts of two lengths, left-padded, through `generate` with the
    torch.compile backend: the padding positions' queries have every key masked in the
    prefill, where eager's attention reads zeros (softmax alone gives NaNs, which reached
    every later position through those positions' keys and values: token 0 emitted)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=32, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    prompts = torch.tensor([[0, 0, 5, 9], [7, 1, 5, 2]])
    mask = (prompts != 0).long()

    def generate():
        return model.generate(prompts, attention_mask=mask, max_new_tokens=5,
                              do_sample=False, cache_implementation="static")

    with torch.no_grad():
        expected = generate()
        model.forward = torch.compile(model.forward, backend="outofplace")
        assert torch.equal(generate(), expected)


def test_a_decoder_reading_its_cache_length_as_a_number_is_refused_at_its_line():
    """OPT's forward slices its positions at the cache's length read as a Python number
    (`position_ids[:, past_seen_tokens:]`), which torch.export's tracer cannot take (a
    raw RuntimeError of its own): refused naming the model's line."""
    torch.manual_seed(0)
    config = transformers.OPTConfig(hidden_size=32, ffn_dim=64, word_embed_proj_dim=32,
                                    num_hidden_layers=1, num_attention_heads=4,
                                    vocab_size=VOCAB, max_position_embeddings=32)
    model = transformers.OPTForCausalLM(config).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static")
    wrapper = executorch.TorchExportableModuleWithStaticCache(model, batch_size=1,
                                                              max_cache_len=MAX_CACHE_LEN)
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=r"modeling_opt\.py:\d+: .*decides a shape, an index or a branch"):
        outofplace.compile(wrapper, (torch.tensor([[5]]),),
                           {"cache_position": torch.tensor([0])})
