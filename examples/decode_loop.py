"""N greedy decode steps of a transformers Llama with a static cache as one program:
a `while_loop` whose body runs the decoder on the last token, writes the model's key and
value caches in place, picks the next token and feeds it back. N is a runtime input.

    .venv/bin/python examples/decode_loop.py

prints the tokens of the compiled loop beside eager's (the same Python loop calling
the model N times) and each cache's `in_place_report`.
"""

from __future__ import annotations

import copy

import torch
from torch._higher_order_ops import while_loop


class DecodeLoop(torch.nn.Module):
    """`step` is transformers' `TorchExportableModuleWithStaticCache` (its forward takes
    `input_ids` and `cache_position` and writes its caches). forward(token, start, n, out)
    decodes n tokens greedily after `token` (shape [1, 1]) at positions start,
    start + 1, ...; token i goes to out[i]; returns the last one."""

    def __init__(self, step: torch.nn.Module) -> None:
        super().__init__()
        self.step = step

    def forward(self, token: torch.Tensor, start: torch.Tensor, n: torch.Tensor,
                out: torch.Tensor) -> torch.Tensor:
        def cond_fn(i: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
            return i < n

        def body_fn(i: torch.Tensor, token: torch.Tensor) -> tuple:
            logits = self.step(input_ids=token, cache_position=(start + i).reshape(1))
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            out.index_copy_(0, i.reshape(1), next_token[0])
            return i + 1, next_token.clone()

        _, token = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), token))
        return token


def eager_loop(step: torch.nn.Module, token: torch.Tensor, start: int, n: int,
               out: torch.Tensor) -> torch.Tensor:
    """What DecodeLoop computes, as a Python loop calling the model n times."""
    with torch.no_grad():
        for i in range(n):
            logits = step(input_ids=token, cache_position=torch.tensor([start + i]))
            token = logits[:, -1].argmax(-1, keepdim=True)
            out[i] = token[0, 0]
    return token


def tiny_llama(max_cache_len: int = 32, **config: int) -> torch.nn.Module:
    """A random-weight Llama in transformers' static-cache export wrapper, batch 1."""
    import transformers
    from transformers.integrations import executorch

    torch.manual_seed(0)
    fields = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    fields.update(config)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        max_position_embeddings=2 * max_cache_len, attn_implementation="sdpa",
        **fields)).eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static")
    return executorch.TorchExportableModuleWithStaticCache(
        model, batch_size=1, max_cache_len=max_cache_len)


def main() -> None:
    import outofplace

    step = tiny_llama()
    reference = copy.deepcopy(step)
    loop = DecodeLoop(step)
    out = torch.zeros(16, dtype=torch.int64)
    compiled = outofplace.compile(loop, (torch.tensor([[3]]), torch.tensor(0),
                                         torch.tensor(1), out))
    compiled(torch.tensor([[3]]), torch.tensor(0), torch.tensor(10), out)
    expected = torch.zeros(16, dtype=torch.int64)
    eager_loop(reference, torch.tensor([[3]]), 0, 10, expected)
    print("compiled loop:", out[:10].tolist())
    print("eager loop:   ", expected[:10].tolist())
    print("in place:", compiled.in_place_report)


if __name__ == "__main__":
    main()
