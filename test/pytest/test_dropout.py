"""Dropout in a compiled training step (frontend/dropout.py): the mask the forward drew is
the one its backward reads, on both paths, float32 and float64.

The compiled program draws its own numbers (not eager's generator), so each check reads
the mask back from the step's output and holds the step to what eager computes with
that mask: the output `x / (1 - p)` where kept and 0 elsewhere, the parameter's SGD
update from the gradient through the same elements; a feature dropout's mask one value
per sample and channel; a new mask at each call. `p = 0`, `p = 1` and evaluation draw
nothing: those steps are eager's exactly.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import outofplace

DTYPES = [torch.float32, torch.float64]
PATHS = ["compile", "torch.compile"]
FORMS = {  # name: (dropout, p, the weight's and input's shape, a feature's spatial dims)
    "nn.Dropout": (nn.Dropout(0.3), 0.3, (32, 128), None),
    "F.dropout in place": (lambda x: F.dropout(x, 0.25, training=True, inplace=True), 0.25,
                           (32, 128), None),
    "nn.Dropout2d": (nn.Dropout2d(0.5), 0.5, (8, 16, 3, 3), (2, 3)),
    "F.dropout1d unbatched": (lambda x: F.dropout1d(x, 0.5, training=True), 0.5, (64, 5),
                              (1,)),
    "F.dropout3d": (lambda x: F.dropout3d(x, 0.4, training=True), 0.4, (4, 32, 2, 2, 2),
                    (2, 3, 4)),
    "nn.AlphaDropout": (nn.AlphaDropout(0.2), 0.2, (32, 128), None),
    "F.feature_alpha_dropout in place": (
        lambda x: F.feature_alpha_dropout(x, 0.3, training=True, inplace=True), 0.3,
        (16, 32, 4), (2,)),
}
ALPHA = 1.7580993408473766  # eager's alpha dropout: kept a * x + alpha * a * p, dropped
# alpha * a * (p - 1), with a = 1 / sqrt((alpha^2 p + 1)(1 - p))


class Dropped(nn.Module):
    def __init__(self, dropout, shape, dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(shape, dtype=dtype))
        self.dropout = dropout

    def forward(self, x, c):
        y = self.dropout(x * self.weight)
        return y, (y * c).sum()


class Forms(nn.Module):
    """Several `Dropped` weights in one program (one compile for all): each reads its own
    input (lists `x`, `c`) or all the same one."""

    def __init__(self, forms) -> None:
        super().__init__()
        self.forms = nn.ModuleList(forms)

    def forward(self, x, c):
        xs, cs = (x, c) if isinstance(x, list) else ([x] * len(self.forms),
                                                    [c] * len(self.forms))
        outputs = [form(x, c) for form, x, c in zip(self.forms, xs, cs)]
        return [y for y, _ in outputs], sum(loss for _, loss in outputs)


def _step(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(*args):
        opt.zero_grad()
        y, loss = model(*args)
        loss.backward()
        opt.step()
        return [t.detach() for t in y] if isinstance(y, list) else y.detach()
    return step


def _compiled(step, args, path):
    step(*args)  # (the state a compiled step updates: `.grad`)
    if path == "compile":
        return outofplace.compile(step, args, cache=False)
    return torch.compile(step, backend="outofplace", options={"cache": False})


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_backward_reads_the_forwards_mask(dtype, path):
    """Every form of FORMS (one program): kept elements `x * scale` (an alpha dropout's
    shifted), dropped ones 0 (its constant), the weight's update through the same
    mask, one draw per sample and channel for a feature dropout, another mask at the
    next call."""
    torch.manual_seed(0)
    model = Forms(Dropped(dropout, shape, dtype) for dropout, _, shape, _ in FORMS.values())
    # positive inputs and weights, small updates: no kept element near a dropped one's
    # value (an alpha dropout's is negative)
    xs, cs = [], []
    for form, (_, _, shape, _) in zip(model.forms, FORMS.values()):
        with torch.no_grad():
            form.weight.copy_(torch.rand(shape, dtype=dtype) + 0.5)
        xs.append(torch.rand(shape, dtype=dtype) + 0.5)
        cs.append(0.1 * torch.randn(shape, dtype=dtype))
    compiled = _compiled(_step(model), (xs, cs), path)
    masks = []
    for _ in range(2):
        befores = [form.weight.detach().clone() for form in model.forms]
        ys = compiled(xs, cs)
        masks.append([])
        for name, form, before, x, c, y in zip(FORMS, model.forms, befores, xs, cs, ys):
            _, p, _, feature = FORMS[name]
            if "lpha" in name:
                scale = 1 / (((ALPHA * ALPHA * p + 1) * (1 - p)) ** 0.5)
                dropped, shift = ALPHA * scale * (p - 1), ALPHA * scale * p
            else:
                scale, dropped, shift = 1 / (1 - p), 0.0, 0.0
            kept = (y - dropped).abs() > 1e-3
            torch.testing.assert_close(y, torch.where(kept, x * before * scale + shift,
                                                      dropped), msg=name)
            torch.testing.assert_close(form.weight.detach(), before - 0.1 * torch.where(
                kept, c * x * scale, 0), msg=name)
            if feature is not None:  # one draw per sample and channel
                assert torch.equal(kept, kept.any(dim=feature, keepdim=True).expand_as(
                    kept)), name
            masks[-1].append(kept)
    for name, first, second in zip(FORMS, *masks):
        assert not torch.equal(first, second), f"{name}: the same mask at two calls"


@pytest.mark.parametrize("path", PATHS)
def test_the_kept_fraction_is_one_minus_p(path):
    torch.manual_seed(0)
    model = Dropped(nn.Dropout(0.3), (64, 64), torch.float32)
    x, c = torch.randn(64, 64), torch.randn(64, 64)
    compiled = _compiled(_step(model), (x, c), path)
    kept = torch.stack([(compiled(x, c) != 0).float().mean() for _ in range(3)])
    assert ((kept - 0.7).abs() < 0.05).all(), kept  # (7 standard deviations)


def _drawing_nothing(dtype) -> Forms:
    """Dropouts that draw nothing: p = 0 and p = 1 in training, p = 0.5 in evaluation."""
    return Forms(Dropped(lambda x, p=p, training=training: F.dropout(x, p, training=training),
                         (4, 6), dtype)
                 for p, training in [(0.0, True), (1.0, True), (0.5, False)])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_steps_that_draw_nothing_are_eagers(dtype, path):
    torch.manual_seed(0)
    models = [_drawing_nothing(dtype) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    x, c = torch.randn(4, 6, dtype=dtype), torch.randn(4, 6, dtype=dtype)
    eager, step = _step(models[0]), _step(models[1])
    eager(x, c)
    compiled = _compiled(step, (x, c), path)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, c), eager(x, c), rtol=0, atol=0)
        for got, expected in zip(models[1].parameters(), models[0].parameters()):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_transformers_decoder_with_its_dropout_trains():
    """GPT-2's configuration drops 10% of its attention weights, residuals and
    embeddings: its step compiles, and its loss falls as eager's does."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2,
                                     n_positions=16)
    model = transformers.GPT2LMHeadModel(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 64, (4, 12))

    def step(ids):
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = step(ids)
        compiled = outofplace.compile(step, (ids,), cache=False)
        losses = [compiled(ids) for _ in range(6)]
    assert torch.isfinite(torch.stack(losses)).all() and losses[-1] < first - 0.5, losses


class Attending(nn.Module):
    def __init__(self, dtype) -> None:
        super().__init__()
        self.query = nn.Parameter(torch.randn(2, 3, 5, 8, dtype=dtype))

    def forward(self, key, value, c):
        y = F.scaled_dot_product_attention(self.query, key, value, dropout_p=0.4,
                                           is_causal=True, scale=0.3)
        return y, (y * c).sum()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_attention_dropout_reads_the_forwards_mask_in_the_backward(dtype, path):
    """Attention weights dropped with `dropout_p` (causal, a scale): read back through a
    value that is the identity (the output is the dropped weights), the output is
    eager's weights / (1 - p) where kept, and the query's SGD update is eager's gradient
    through the same mask."""
    torch.manual_seed(0)
    model = Attending(dtype)
    key = torch.randn(2, 3, 5, 8, dtype=dtype)
    value = torch.eye(5, dtype=dtype).expand(2, 3, 5, 5)
    c = torch.randn(2, 3, 5, 5, dtype=dtype)
    compiled = _compiled(_step(model), (key, value, c), path)
    before = model.query.detach().clone()
    y = compiled(key, value, c)
    query = before.clone().requires_grad_()
    weights = torch.softmax((query @ key.transpose(-2, -1) * 0.3).masked_fill(
        ~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")), -1)
    kept = (y != 0) | (weights == 0)  # (a masked key's weight is 0 either way)
    expected = torch.where(kept, weights / 0.6, 0)
    torch.testing.assert_close(y, expected)
    (expected * c).sum().backward()
    torch.testing.assert_close(model.query.detach(), before - 0.1 * query.grad)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rrelu_slopes_are_the_backwards(dtype, path):
    """`nn.RReLU` in training (in place and not): each element at most 0 times a slope
    drawn from [lower, upper), read back from the output; the weight's update is the
    gradient through the same slopes (1 for the positive elements)."""
    torch.manual_seed(0)
    model = Forms(Dropped(nn.RReLU(0.1, 0.3, inplace=inplace), (16, 32), dtype)
                  for inplace in (False, True))
    x, c = torch.randn(16, 32, dtype=dtype), torch.randn(16, 32, dtype=dtype)
    compiled = _compiled(_step(model), (x, c), path)
    befores = [form.weight.detach().clone() for form in model.forms]
    for form, before, y in zip(model.forms, befores, compiled(x, c)):
        z = x * before
        slope = torch.where(z <= 0, y / z, 1.0)
        assert ((slope >= 0.1 - 1e-6) & (slope <= 0.3 + 1e-6) | (z > 0)).all()
        assert slope[z < 0].unique().numel() > 1  # drawn, not the mean slope
        torch.testing.assert_close(form.weight.detach(), before - 0.1 * slope * c * x)


def test_a_random_op_autograd_saves_is_refused_at_its_line():
    """A random op inside a composite op that the tracer does not see (ATen's `dropout`
    called as `torch.ops`), whose draw autograd saves: refused, named at the user's
    line, not replayed (a second draw would differ from the forward's)."""
    model = Dropped(lambda x: torch.ops.aten.dropout.default(x, 0.5, True), (4, 6),
                    torch.float32)
    step = _step(model)
    x, c = torch.randn(4, 6), torch.randn(4, 6)
    step(x, c)
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=r"test_dropout\.py:\d+: .*native_dropout: it draws random "
                             r"numbers inside a composite op whose result autograd saves"):
        outofplace.compile(step, (x, c), cache=False)


class SelfAttending(nn.Module):
    def __init__(self, dtype) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 1, dropout=0.3, bias=False,
                                               batch_first=True).to(dtype)

    def forward(self, x, c):
        _, weights = self.attention(x, x, x)  # one head: the dropped weights themselves
        return weights, (weights * c).sum()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_multihead_attention_dropout_reads_the_forwards_mask_in_the_backward(dtype, path):
    """`nn.MultiheadAttention(dropout=...)` (F.multi_head_attention_forward, whose own
    dropout call the mode would not see): the weights it returns are eager's softmax /
    (1 - p) where kept, and the projection's SGD update is eager's gradient through the
    same mask."""
    torch.manual_seed(0)
    model = SelfAttending(dtype)
    x, c = torch.randn(2, 5, 8, dtype=dtype), torch.randn(2, 5, 5, dtype=dtype)
    compiled = _compiled(_step(model), (x, c), path)
    before = model.attention.in_proj_weight.detach().clone()
    y = compiled(x, c)
    projection = before.clone().requires_grad_()
    q, k, _ = F.linear(x, projection).chunk(3, dim=-1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, -1)
    kept = y != 0
    expected = torch.where(kept, weights / 0.7, 0)
    torch.testing.assert_close(y, expected)
    (expected * c).sum().backward()
    torch.testing.assert_close(model.attention.in_proj_weight.detach(),
                               before - 0.1 * projection.grad)


@pytest.mark.parametrize("path", PATHS)
def test_transformer_layers_with_dropout_train(path):
    """nn.TransformerEncoderLayer and nn.TransformerDecoderLayer with their dropouts (their
    attention's among them): the steps compile and their losses stay finite."""
    torch.manual_seed(0)
    layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.2, batch_first=True)
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    opt = torch.optim.SGD(layer.parameters(), lr=0.05)

    def step(x, memory):
        opt.zero_grad()
        loss = layer(x, memory).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = _compiled(step, (x, memory), path)
    assert torch.isfinite(torch.stack([compiled(x, memory) for _ in range(3)])).all()
