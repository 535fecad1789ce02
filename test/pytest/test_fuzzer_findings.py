"""What an independent differential fuzzer found (issue 21), each against eager.

Constants torch-mlir's folders misread, inputs at a storage offset, a dtype view under
as_strided, ops torch-mlir cannot lower, and the refusals that replace raw errors.
(assert_matches_eager keeps each input's layout and compares its whole storage.)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import sys
from typing import Callable

import pytest
import torch

import outofplace
from differential import assert_matches_eager


# --- constants: folded by PyTorch, or kept from torch-mlir's folders -------------------

def floor_divide_constant():
    t = torch.arange(5)
    t.floor_divide_(-2)
    return t


def div_floor_constant():
    t = torch.arange(5)
    t.div_(-2, rounding_mode="floor")
    return t


def div_trunc_constant():
    t = torch.arange(5)
    t.div_(-2, rounding_mode="trunc")
    return t


def div_functional_constant():
    return torch.div(torch.arange(4), -1, rounding_mode="floor")


def trunc_of_non_splat_constant():  # segfaulted in torch-mlir's comparison folder
    t = torch.arange(3.)
    t.add_(1)
    t.trunc_()
    return t


def trunc_of_splat_constant():  # -2 on some runs: the folder read an address
    t = torch.zeros(3)
    t.add_(2.5)
    t.trunc_()
    return t


def full_like_trunc(x):  # torch-mlir makes the full_like a literal of its own
    return torch.full_like(x, 2.5).trunc_()


def new_full_sgn(x):
    return x.new_full((4,), -2.5).sgn_()


def ones_like_floor_divide(x):
    return torch.ones_like(x).mul_(5).floor_divide_(-2)


def masked_fill_then_mask_write(c):  # wrong in about one fresh process in six
    c.view(2, 1, 2).masked_fill_(torch.linspace(-2, 2, 4).reshape(2, 1, 2).abs() > 0, 0.0)
    c[c[..., 0] > 0] = 0.25
    return c


def all_true_fill_then_trunc(c):  # torch-mlir folds the where to a literal, then sgn
    c.masked_fill_(torch.ones(4, dtype=torch.bool), 2.5)
    c.trunc_()
    return c


def all_true_fill_then_floor_divide(c):
    c.masked_fill_(torch.ones(4, dtype=torch.bool), 5)
    c.floor_divide_(-2)
    return c


CONSTANT_PROGRAMS = [
    (floor_divide_constant, ()), (div_floor_constant, ()), (div_trunc_constant, ()),
    (div_functional_constant, ()), (trunc_of_non_splat_constant, ()),
    (trunc_of_splat_constant, ()), (full_like_trunc, (torch.arange(1., 5.),)),
    (new_full_sgn, (torch.arange(1., 5.),)), (ones_like_floor_divide, (torch.arange(4),)),
    (masked_fill_then_mask_write, (torch.arange(1., 5.).reshape(2, 2),)),
    (all_true_fill_then_trunc, (torch.arange(1., 5.),)),
    (all_true_fill_then_floor_divide, (torch.arange(4),)),
]


@pytest.mark.parametrize("f, args", CONSTANT_PROGRAMS,
                         ids=[f.__name__ for f, _ in CONSTANT_PROGRAMS])
def test_constants_match_eager(f: Callable, args: tuple) -> None:
    assert_matches_eager(f, *args)


def _texts() -> None:
    """Prints a digest of the StableHLO of each constant program (run in a subprocess)."""
    for f, args in CONSTANT_PROGRAMS:
        text = outofplace.compile(f, [a.clone() for a in args]).stablehlo
        print(f.__name__, hashlib.sha256(text.encode()).hexdigest())


def test_compilation_is_the_same_in_a_fresh_process() -> None:
    """The same program compiles to the same text in this process and a fresh one
    (folders that read memory they should not gave answers that changed with the
    address layout)."""
    command = [sys.executable, "-c", "import test_fuzzer_findings as t; t._texts()"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    fresh = subprocess.run(command, env=environment, capture_output=True, text=True,
                           timeout=600, check=True).stdout
    here = io.StringIO()
    with contextlib.redirect_stdout(here):
        _texts()
    assert len(fresh.splitlines()) == len(CONSTANT_PROGRAMS)
    assert here.getvalue() == fresh


# --- inputs at a storage offset ---------------------------------------------------------

def _at_offset_3() -> torch.Tensor:
    return torch.full((9,), 7.)[3:7]


def as_strided_of_slice_written(a):
    a[3:].as_strided((1,), (1,)).fill_(1)
    return a


def unfold_of_slice_written(a):
    a[3:].unfold(0, 1, 3).fill_(1)
    return a


def as_strided_written(a):
    a.as_strided((2,), (2,)).fill_(1)
    return a


def as_strided_read(a):
    return a.as_strided((2,), (2,)) * 2


@pytest.mark.parametrize("f", [as_strided_of_slice_written, unfold_of_slice_written,
                               as_strided_written, as_strided_read])
def test_strided_views_of_an_input_at_a_storage_offset(f: Callable) -> None:
    """as_strided's storage_offset is absolute: re-rooted at an input at offset 3, a
    relative one moved the view to other elements."""
    assert_matches_eager(f, _at_offset_3())  # in its layout, whole storage compared


def test_as_strided_outside_the_input_is_refused() -> None:
    """Elements before the input's first one are storage the program does not receive."""
    def f(a):
        a.add_(1)
        return a.as_strided((2,), (2,), 1) * 2

    with pytest.raises(outofplace.UnsupportedMutationError,
                       match="as_strided: of elements outside the tensor it views"):
        outofplace.compile(f, [_at_offset_3()])


# --- as_strided of a dtype view ---------------------------------------------------------

def test_as_strided_of_a_dtype_view_reads_the_bits() -> None:
    def f(a):
        a.add_(1)
        return a.view(torch.int32).as_strided((2,), (1,)) + 0

    assert_matches_eager(f, torch.ones(3))


def test_write_through_as_strided_of_a_dtype_view_is_refused() -> None:
    """It stored the float 1.0, not the bit pattern; a write through view(dtype) is
    refused, through as_strided of one too."""
    def f(a):
        a.view(torch.int32).as_strided((2,), (1,))[0] = 1
        return a

    with pytest.raises(outofplace.UnsupportedMutationError, match="torch.aten.view.dtype"):
        outofplace.compile(f, [torch.zeros(3)])


# --- ops torch-mlir cannot lower, decomposed --------------------------------------------

def fmod_scalar_inplace(x):
    x.fmod_(1.5)
    return x


def fmod_scalar(x):
    return torch.fmod(x, -1.5)


def ravel_of_transpose_written(a):
    r = a.t().ravel()
    r.add_(1)
    return a, r


def ravel_written(a):  # a view of a contiguous tensor
    r = a.ravel()
    r.add_(1)
    return a, r


def cumsum_of_0d(x):
    return torch.cumsum(x, 0)


def cumsum_of_0d_inplace(x):
    x.cumsum_(0)
    return x


def cumsum_of_0d_int(x):
    return torch.cumsum(x, -1)


@pytest.mark.parametrize("f, args", [
    (fmod_scalar_inplace, (torch.linspace(-3, 3, 5),)),
    (fmod_scalar, (torch.linspace(-3, 3, 7),)),
    (ravel_of_transpose_written, (torch.arange(6.).reshape(2, 3),)),
    (ravel_written, (torch.arange(6.).reshape(2, 3),)),
    (cumsum_of_0d, (torch.tensor(2.5),)),
    (cumsum_of_0d_inplace, (torch.tensor(2.5),)),
    (cumsum_of_0d_int, (torch.tensor(3, dtype=torch.int32),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_decomposed_ops_match_eager(f: Callable, args: tuple) -> None:
    assert_matches_eager(f, *args)


# --- refusals in place of raw errors ----------------------------------------------------

def unsqueeze_input(x):
    x.unsqueeze_(0)
    return x


def narrow_at_runtime_position(x, pos):
    x.narrow(0, pos, 1).add_(1)
    return x


def scatter_reduce_mean_of_bool(x, index, src):
    x.scatter_reduce_(0, index, src, "mean")
    return x


def as_strided_between_elements(x):
    return x.as_strided((3,), (1,)) * 2  # program 4433: x every other element of storage


BOOLS = (torch.tensor([False, True, False]), torch.tensor([0, 2, 2]),
         torch.tensor([True, False, True]))


@pytest.mark.parametrize("f, args, message", [
    (unsqueeze_input, (torch.ones(3),),
     "torch.aten.unsqueeze_: it changes the shape or strides of a tensor in place"),
    (narrow_at_runtime_position, (torch.zeros(4), torch.tensor(2)),
     "torch.export: a value read from a tensor's data decides a shape"),
    (as_strided_between_elements, (torch.arange(14.0)[::2],),
     "torch.aten.as_strided: of storage between the elements of the strided tensor"),
    (scatter_reduce_mean_of_bool, BOOLS,
     # (refused by outofplace-lower-updates, where the op is the twin)
     'torch.aten.scatter_reduce.two: reduce="mean" of a bool tensor'),
], ids=lambda v: getattr(v, "__name__", ""))
def test_refused_with_a_reason(f: Callable, args: tuple, message: str) -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(f, list(args))
    assert message in str(info.value)
    line = f.__code__.co_firstlineno + 1
    assert f"{__file__}:{line}" in str(info.value)


def test_eager_refuses_bool_scatter_mean_too() -> None:
    """The refusal above mirrors eager, which does not implement it either."""
    x, index, src = (t.clone() for t in BOOLS)
    with pytest.raises(NotImplementedError):
        x.scatter_reduce_(0, index, src, "mean")


# --- found by the widened fuzzer --------------------------------------------------------

def test_as_strided_of_a_written_constant_local() -> None:
    """`torch.tensor([...])` is a constant and its `lift_fresh_copy`, a copy; tracing gave
    both one fake storage, so torch-mlir's as_strided rewrite read the constant, not the
    written copy (and its importer failed: "Node already has a value")."""
    def f(pos):
        c = torch.tensor([[-6.0, -2.5, 7.0], [4.0, -5.0, -1.0]])
        c.ceil_()
        t = c * 2
        t[:, pos] = -1.5
        t[:, -1] = c.as_strided((1,), (1,))
        return c, t

    assert_matches_eager(f, torch.tensor(1))


def flatten_of_resized_out(x, w):
    o = torch.empty(0)
    torch.add(x, 2, out=o)
    o.flatten()[7] = w  # a copy when `o` is laid out like a transposed x, else a view
    return o


def transposed(shape: tuple) -> torch.Tensor:
    """A tensor of `shape` whose last two dimensions are laid out transposed."""
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape) \
        .transpose(-1, -2).contiguous().transpose(-1, -2)


def test_resized_out_of_a_pointwise_op_on_transposed_inputs_is_refused() -> None:
    """Program 2727 of the 10,000-program run: eager lays out the resized `out` of a
    pointwise op like its inputs, torch.export's fake tensors as contiguous, so the
    trace took `o.flatten()` for a view where eager copies (the write was kept, eager
    drops it). Refused, naming both layouts; contiguous inputs compile and match."""
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=r"torch.aten.add.out: its `out=` tensor is resized .*\(strides "
                       r"\[12, 1, 3\]\), torch.export's trace as contiguous"):
        outofplace.compile(flatten_of_resized_out, (transposed((3, 3, 4)), torch.tensor(0.)))
    eager = flatten_of_resized_out(transposed((3, 3, 4)), torch.tensor(0.))
    assert eager.flatten()[7] != 0  # the write went into a copy, as said above
    assert_matches_eager(flatten_of_resized_out, torch.randn(3, 3, 4), torch.tensor(0.))


def _write_through_position_of_as_strided(x, pos, w):
    x.as_strided((2,), (2,))[pos].add_(w)
    return x * 1


def _read_as_strided_after_position_write(x, pos):
    v = x.as_strided((2,), (1,))
    x[pos].add_(1)
    return v * 1


@pytest.mark.parametrize("f, args", [
    (_write_through_position_of_as_strided,
     (torch.arange(6.0).reshape(2, 3), torch.tensor(1), torch.tensor(10.0))),
    (_read_as_strided_after_position_write, (torch.arange(3.0), torch.tensor(0))),
])
def test_position_views_are_views_before_import(f: Callable, args: tuple) -> None:
    """`v[pos]` (pos a 0-d tensor) is a view in the FX analyses too (fx_graph's
    is_position_view): a write through it into an as_strided view reached the gathered
    copy only, and an as_strided read was not re-taken after a write through it; both
    silently kept the old values (fuzzer, seed 9,700,469)."""
    assert_matches_eager(f, *args)


def add_into_prefix(cache, x):
    cache[: x.shape[0]] += x  # a slice bounded by x's dynamic size (aten.sym_size.int)
    return cache.sum(0)


def test_slice_bounded_by_a_dynamic_size() -> None:
    """`sym_size.int` has a CompositeImplicitAutograd kernel, so the pass decomposing ops
    torch-mlir does not lower traced it, got the size of the trace (a constant) and
    failed on its two users with a bare AssertionError. (IREE does not compile the
    scatter of a dynamic window this writes: IreeCompileError.)"""
    from differential import ENGINES, assert_call_matches_eager
    from torch.export import Dim

    compiled = outofplace.compile(add_into_prefix, (torch.zeros(8, 4), torch.ones(3, 4)),
                                  dynamic_shapes={"cache": None,
                                                  "x": {0: Dim("n", min=1, max=8)}})
    for engine in (e for e in ENGINES if e != "iree"):
        for n in (1, 3, 8):
            assert_call_matches_eager(compiled, add_into_prefix,
                                      (torch.randn(8, 4), torch.randn(n, 4)), {}, engine)


SHIFT = torch.tensor([1.0, 2.0, 3.0, 4.0])  # a global the program reads


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.tensor(2.0)  # a plain tensor attribute: not a buffer

    def forward(self, x):
        x.mul_(self.scale)
        return x + SHIFT


@pytest.mark.parametrize("change", [
    lambda m: m.scale.fill_(3.0), lambda m: setattr(m, "scale", torch.tensor(2.0)),
    lambda m: SHIFT.add_(1), lambda m: setattr(m.scale, "data", torch.tensor(2.0))])
def test_constants_the_caller_changed_are_refused(change) -> None:
    """torch.export lifts a module's plain tensor attribute and a global tensor as
    constants, literals of the program: a call after the caller wrote or replaced one used
    the values it had when compiled. Such a call raises, before anything is written."""
    saved = SHIFT.clone()
    model = Scaled()
    try:
        compiled = outofplace.compile(model, (torch.randn(4),))
        assert compiled.input_names == ["x"]  # still literals
        x = torch.randn(4)
        for _ in range(2):  # unchanged, the first call and a planned one
            expected = x.clone()
            torch.testing.assert_close(compiled(x), Scaled()(expected))
            torch.testing.assert_close(x, expected)
        change(model)
        before = x.clone()
        with pytest.raises(ValueError, match="is a constant of the compiled program.*"
                           "written or replaced since"):
            compiled(x)
        torch.testing.assert_close(x, before)
    finally:
        SHIFT.copy_(saved)


def copy_then_add(x, y, z):
    x.copy_(y)
    return z + 1


def test_one_tensor_given_for_two_read_arguments() -> None:
    """torch.export makes one input of a tensor given twice: compiled with `y` and `z`
    the same tensor, the program read `z` for both, and a call given two tensors copied
    z into x. (A call in another layout compiles again with the call's tensors, so a
    later call in that layout hit it too.)"""
    t = torch.randn(4)
    compiled = outofplace.compile(copy_then_add, (torch.randn(4), t, t))
    x, y, z = torch.zeros(4), torch.ones(4), torch.full((4,), 5.0)
    assert torch.equal(compiled(x, y, z), z + 1)
    assert torch.equal(x, y)
    compiled = outofplace.compile(copy_then_add, (t, t, torch.randn(4)))  # x views y
    mine, theirs = torch.randn(4), torch.randn(4)
    mine_z = theirs_z = torch.randn(4)
    theirs = mine.clone()
    assert torch.equal(compiled(mine, mine, mine_z), copy_then_add(theirs, theirs, theirs_z))
    assert torch.equal(mine, theirs)


# --- issue 32: the module fuzzer (test/fuzz/fuzz_modules.py) ---------------------------

class _Float64Stats(torch.nn.Module):
    """A float64 running statistic updated from float32 inputs, as eager computes it: the
    product in float64 (the dtype of all three), not in the operands' float32."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op
        self.register_buffer("var", torch.linspace(1, 2, 6, dtype=torch.float64))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        getattr(self.var.mul_(0.9), self.op)(x, y, value=1 - 0.9)
        return x + 1


@pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax (the xla extra)")
@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("op", ["addcmul_", "addcdiv_"])
def test_float64_addcmul_of_float32_operands(op: str, path: str) -> None:
    x = torch.linspace(1, 7, 6) / 3
    y = torch.linspace(3, 9, 6) / 7
    eager, model = _Float64Stats(op), _Float64Stats(op)
    run = outofplace.compile(model, (x, y)) if path == "compile" else \
        torch.compile(model, backend="outofplace", dynamic=False)
    for _ in range(3):
        torch.testing.assert_close(run(x, y), eager(x, y))
    # float32 products were off by about 1e-8 relative
    torch.testing.assert_close(model.var, eager.var, rtol=1e-13, atol=0)


class _RingWithWeights(torch.nn.Module):
    """A buffer written at a position held in a buffer, beside a parameter that needs
    gradients: under torch.compile AOTAutograd writes the write as as_strided_scatter,
    at the row dynamo read from `ptr`. (Moving `ptr` on between calls gives wrong rows
    on backend="aot_eager" too: dynamo does not guard on the value it read.)"""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("ring", torch.arange(12.0).reshape(3, 4))
        self.register_buffer("ptr", torch.tensor(1))
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ring[self.ptr % 3].add_(x)
        return self.ring.sum(0) * self.w


@pytest.mark.skipif(not outofplace.xla.available(), reason="needs jax (the xla extra)")
@pytest.mark.parametrize("path", ["compile", "torch.compile"])
def test_position_write_beside_a_parameter_that_needs_gradients(path: str) -> None:
    eager, model = _RingWithWeights(), _RingWithWeights()
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    run = outofplace.compile(model, (x,)) if path == "compile" else \
        torch.compile(model, backend="outofplace", dynamic=False)
    for step in range(4):
        torch.testing.assert_close(run(x * step), eager(x * step))
        torch.testing.assert_close(model.ring, eager.ring)
        torch.testing.assert_close(model.ptr, eager.ptr)


def _as_strided_scatter(b: torch.Tensor, x: torch.Tensor) -> tuple:
    row = torch.ops.aten.as_strided.default(b, [4], [1], 4)
    block = torch.ops.aten.as_strided.default(b, [2, 2], [4, 1], 1)
    written = torch.ops.aten.as_strided_scatter.default(b, row + x, [4], [1], 4)
    written = torch.ops.aten.as_strided_scatter.default(written, block * 2, [2, 2], [4, 1], 1)
    return written.sum(0), written


def test_as_strided_scatter_is_an_index_put() -> None:
    """torch-mlir has no lowering of as_strided_scatter: an index_put at its elements."""
    assert_matches_eager(_as_strided_scatter, torch.arange(12.0).reshape(3, 4),
                         torch.tensor([1.0, -2.0, 3.0, 0.5]))


def _bfloat16_out_then_strided_write(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    o = torch.empty(0, dtype=torch.bfloat16)
    torch.add(x, 2, out=o)
    o[::3] = w
    return o


def test_reduced_precision_op_keeps_the_storage_its_views_see() -> None:
    """The both-paths fuzzer (seed 616,161): a bfloat16 `add` reading a number is computed
    in float32 and converted back (reduced_precision.py); the converted result took a
    fake value of its own, so `o[::3]` no longer looked like a view of it and the write
    went into a copy: [5, 3, 1, 4, 2] where eager gives [1, 3, 1, 1, 2]."""
    assert_matches_eager(_bfloat16_out_then_strided_write,
                         torch.tensor([3.0, 1.0, -1.0, 2.0, 0.0], dtype=torch.bfloat16),
                         torch.tensor(1.0, dtype=torch.bfloat16))


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
def test_index_put_into_a_runtime_position_read_of_values_viewing_it(path: str) -> None:
    """Fuzzer seed 73000144: `c[:, :, pos].index_put_((i,), c.select(-1, 1),
    accumulate=True)` writes eager's view of c at a runtime position from a view of c,
    row by row in the order of i (each row added to another already written or not): the
    traced read at the position was a copy, so the overlap went unseen and both paths
    computed value semantics, another result than eager's for i = [1, 0, 2] (in the
    fuzzer's program the torch.compile path refused, its graph otherwise). Refused on
    both now."""
    def f(c, pos, i):
        c[:, :, pos].index_put_((i,), c.select(-1, 1), accumulate=True)
        return c

    args = (torch.arange(24.0).reshape(3, 4, 2), torch.tensor(1), torch.tensor([1, 0, 2]))
    with pytest.raises(Exception, match="its operand `values` shares memory with the "
                                        "tensor it writes") as info:
        if path == "compile":
            outofplace.compile(f, list(args))
        else:
            torch._dynamo.reset()
            torch.compile(f, backend="outofplace", dynamic=False)(*args)
    assert f"{__file__}:{f.__code__.co_firstlineno + 1}" in str(info.value)
