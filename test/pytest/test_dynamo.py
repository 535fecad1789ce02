"""torch.compile(..., backend="outofplace") mutates the caller's tensors like eager."""

import copy

import torch
import torch._dynamo

from differential import assert_module_state_matches


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
