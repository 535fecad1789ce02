"""Models whose mutations live in buffers, run for several steps against eager."""

import copy

import pytest
import torch

import outofplace
from differential import assert_module_state_matches, assert_same_tree


def _cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(inplace=True),
        torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5), torch.nn.BatchNorm1d(5),
        torch.nn.ReLU(inplace=True))


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_batchnorm_cnn_several_steps(train):
    torch.manual_seed(0)
    model = _cnn().train(train)
    eager = copy.deepcopy(model)
    compiled = outofplace.compile(model, (torch.randn(4, 3, 8, 8),))
    if train:  # running_mean, running_var, num_batches_tracked of both norms
        assert len(compiled.io_map) == 6
    for _ in range(3):
        x = torch.randn(4, 3, 8, 8)
        out = compiled(x)
        with torch.no_grad():
            expected = eager(x)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        for name, buffer in eager.named_buffers():
            torch.testing.assert_close(dict(model.named_buffers())[name], buffer,
                                       rtol=1e-4, atol=1e-5)


class PagedKVCache(torch.nn.Module):
    """vLLM's cache write: a flat view of the paged cache indexed by slot."""

    def __init__(self, blocks: int = 4, block_size: int = 16, heads: int = 2,
                 dim: int = 8) -> None:
        super().__init__()
        self.register_buffer("key_cache", torch.zeros(blocks, block_size, heads, dim))

    def forward(self, key, slot_mapping):
        heads, dim = key.shape[1], key.shape[2]
        self.key_cache.view(-1, heads, dim)[slot_mapping] = key
        return self.key_cache.sum(dim=(1, 2, 3))


def test_paged_kv_cache_write_several_steps():
    model, eager = PagedKVCache(), PagedKVCache()
    compiled = outofplace.compile(model, (torch.randn(3, 2, 8), torch.tensor([3, 17, 40])))
    assert compiled.io_map == {0: 1}
    for step in range(3):
        key = torch.randn(3, 2, 8)
        slots = torch.tensor([step, 20 + step, 63 - step])
        assert_same_tree(compiled(key, slots), eager(key, slots), f"step {step}")
        assert_module_state_matches(model, eager, f"step {step}")
