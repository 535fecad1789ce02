"""Models whose mutations live in buffers, run for several steps against eager."""

import copy
import functools

import pytest
import torch

import outofplace
from differential import assert_matches_eager, assert_module_state_matches, \
    assert_same_tree


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


@pytest.mark.parametrize("norm", [torch.nn.BatchNorm1d, torch.nn.BatchNorm2d])
@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm_with_cumulative_average(norm, affine):
    """momentum=None: the running statistics are the average of every batch's, with the
    factor 1 / num_batches_tracked (frontend/cumulative_batch_norm.py); several steps
    against eager on every engine, then eval mode reading them."""
    torch.manual_seed(0)
    shape = (6, 3) if norm is torch.nn.BatchNorm1d else (4, 3, 5, 5)
    model = norm(3, momentum=None, affine=affine).train()
    for step in range(3):
        assert_matches_eager(model, torch.randn(*shape) * (step + 1) + step)
    eager = copy.deepcopy(model)
    compiled = outofplace.compile(model, (torch.randn(*shape),))
    for step in range(3):
        x = torch.randn(*shape) + step
        assert_same_tree(compiled(x), eager(x), f"output at step {step}")
        assert_module_state_matches(model, eager, f"state at step {step}")
    model.eval()
    eager.eval()
    x = torch.randn(*shape)
    assert_same_tree(outofplace.compile(model, (x,))(x), eager(x), "eval output")


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


def _several_steps(model: torch.nn.Module, inputs: list[torch.Tensor]) -> None:
    eager = copy.deepcopy(model)
    compiled = outofplace.compile(model, (inputs[0].clone(),))
    for x in inputs:
        out = compiled(x.clone())
        with torch.no_grad():
            expected = eager(x.clone())
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        for name, buffer in eager.named_buffers():
            torch.testing.assert_close(dict(model.named_buffers())[name], buffer,
                                       rtol=1e-4, atol=1e-5)


class _Decoder(torch.nn.Module):
    """A U-Net decoder block in training mode: upsampling (nearest and bilinear),
    reflection padding, BatchNorm's running statistics, an in-place ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.norm = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        x = torch.nn.functional.interpolate(x, scale_factor=2)
        x = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
        x = torch.relu_(self.norm(self.conv(x)))
        return torch.nn.functional.interpolate(x, size=(5, 7), mode="bilinear",
                                               align_corners=True)


class _ShiftedWindows(torch.nn.Module):
    """Swin-style shifted windows over a feature map with an in-place running mean:
    roll, unfold into patches (im2col), fold back, replicate and circular padding."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(2))

    def forward(self, x):
        shifted = torch.roll(x, shifts=(1, -1), dims=(2, 3))
        patches = torch.nn.functional.unfold(shifted, 2, stride=2)
        self.mean.mul_(0.9).add_(patches.mean((0, 2)).view(2, 4).mean(1), alpha=0.1)
        folded = torch.nn.functional.fold(patches * 2, (4, 4), 2, stride=2)
        padded = torch.nn.functional.pad(folded, (1, 0, 0, 1), mode="replicate")
        return torch.nn.functional.pad(padded, (1, 1, 0, 0), mode="circular").logsumexp(-1)


@pytest.mark.parametrize("model, shape", [
    (_Decoder, (2, 3, 3, 4)), (_ShiftedWindows, (1, 2, 4, 4))],
    ids=["upsampling-decoder", "shifted-windows"])
def test_models_with_resampling_ops(model, shape):
    torch.manual_seed(0)
    _several_steps(model().train(), [torch.randn(shape) for _ in range(3)])


def test_transformer_encoder_layer_training_without_dropout():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.BatchNorm1d(3)).train()
    _several_steps(model, [torch.randn(2, 3, 8) for _ in range(3)])


class _Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        self.seen.add_(y.detach().sum(0))
        return y


def _apply(model, x):
    return model(x)


class _Caller:
    def __init__(self, model) -> None:
        self.model = model

    def __call__(self, x):
        return self.model(x)


def _defaulted(module):
    def apply(x, model=module):  # the module a default argument
        return model(x)
    return apply


FORMS = {  # a function reaching the module, and the input name of its weight
    "bound forward": (lambda m: m.forward, "self.lin.weight"),
    "partial": (lambda m: functools.partial(_apply, m), "model.lin.weight"),
    "called object": (lambda m: _Caller(m), "model.lin.weight"),
    "default argument": (_defaulted, "model.lin.weight"),
}


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("form", list(FORMS))
def test_module_reached_by_the_program_reads_the_current_weights(form, path, dtype):
    """`compile(model.forward, ...)`, `compile(functools.partial(f, model), ...)`, an
    object with `__call__`, a default argument (`def f(x, model=model)`): the module's
    parameters and buffers are the program's arguments, read at every call, so weights
    changed between calls are the ones used (they were baked in as constants, or the
    object refused with export's AttributeError)."""
    torch.manual_seed(0)
    model = _Counting().to(dtype)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 4, dtype=dtype)
    make, weight = FORMS[form]
    compiled = outofplace.compile(make(model), (x,)) if path == "compile" else \
        torch.compile(make(model), backend="outofplace")
    if path == "compile":
        assert weight in compiled.input_names
    for step in range(3):
        with torch.no_grad():
            for m in (model, eager):
                m.lin.weight.mul_(1.5)
        x = torch.randn(2, 4, dtype=dtype)
        assert_same_tree(compiled(x), eager(x), f"step {step} output")
        assert_module_state_matches(model, eager, f"step {step}")


class _Registry:
    """A class used as a namespace: the program reaches the module through no object it
    names (torch.export lifts its parameters as constants of the program)."""
    model = None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_constant_reached_through_a_class_attribute_written_since_is_refused(dtype):
    torch.manual_seed(0)
    _Registry.model = _Counting().lin.to(dtype)

    def apply(x):
        return _Registry.model(x) * 2

    x = torch.randn(2, 4, dtype=dtype)
    compiled = outofplace.compile(apply, (x,))
    assert_same_tree(compiled(x), apply(x), "before a write")
    with torch.no_grad():
        _Registry.model.weight.mul_(1.5)
    kept = _Registry.model.weight.clone()
    with pytest.raises(ValueError, match=r"shape \[3, 4\].*written or replaced since"):
        compiled(x)
    assert torch.equal(_Registry.model.weight, kept)
    # the torch.compile backend reads the attribute at each call (dynamo's guards)
    dynamo = torch.compile(apply, backend="outofplace")
    assert_same_tree(dynamo(x), apply(x), "torch.compile")
