"""Mutations outofplace cannot express must fail loudly, naming the op and the user's line.

Each program below holds the offending statement on the line right after its `def`, so
the line the error must point at is `co_firstlineno + 1`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import outofplace

THIS_FILE = os.path.basename(__file__)
NO_TWIN = "it has no out-of-place twin"
METADATA = "it changes the shape or strides of a tensor in place"


def normal_(x):
    x.normal_()
    return x + 1


def geometric_(x):
    x.geometric_(0.5)
    return x + 1


def cauchy_(x):
    x.cauchy_()
    return x + 1


def log_normal_(x):
    x.log_normal_()
    return x * 2


def t_(x):
    x.t_()
    return x + 1


def transpose_(x):
    x.transpose_(0, 1)
    return x + 1


def swapdims_(x):
    x.swapdims_(0, 1)
    return x.sum()


def squeeze_(x):
    x.squeeze_()
    return x + 1


def resize_(x):
    x.resize_(12)
    return x + 1


def as_strided_(x):
    x.as_strided_((4, 3), (1, 4))
    return x + 1


def set_(x):
    x.set_(torch.zeros(3, 4))
    return x + 1


CASES = [
    (normal_, (3, 4), "torch.aten.normal_", NO_TWIN),
    (geometric_, (3, 4), "torch.aten.geometric_", NO_TWIN),
    (cauchy_, (3, 4), "torch.aten.cauchy_", NO_TWIN),
    (log_normal_, (3, 4), "torch.aten.log_normal_", NO_TWIN),
    (t_, (3, 4), "torch.aten.t_", METADATA),
    (transpose_, (3, 4), "torch.aten.transpose_", METADATA),
    (swapdims_, (3, 4), "torch.aten.swapdims_", METADATA),
    (squeeze_, (1, 4), "torch.aten.squeeze_", METADATA),
    (resize_, (3, 4), "torch.aten.resize_", METADATA),
    (as_strided_, (3, 4), "torch.aten.as_strided_", METADATA),
    (set_, (3, 4), "torch.aten.set_.source_Tensor", METADATA),
]


def assert_error_at(error: outofplace.UnsupportedMutationError, op: str, reason: str,
                    line: int) -> None:
    message = str(error)
    where = f"{THIS_FILE}:{line}"
    assert f"unsupported mutation by {op}: {reason}" in message
    assert f"{where}: unsupported mutation by {op}" in message
    assert message.endswith(f"{where}: unsupported mutation by {op}: {reason}")
    assert error.op == op
    assert error.reason == reason
    assert error.location.endswith(where)
    assert os.path.samefile(error.location.rsplit(":", 1)[0], __file__)


@pytest.mark.parametrize("f, shape, op, reason", CASES, ids=[c[0].__name__ for c in CASES])
def test_unsupported_inplace_op(f, shape: tuple, op: str, reason: str) -> None:
    x = torch.randn(shape)
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(f, [x])
    assert_error_at(info.value, op, reason, f.__code__.co_firstlineno + 1)


def test_error_message_format_for_t_() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError,
                       match=r"test_errors\.py:\d+: unsupported mutation by torch\.aten\.t_: "
                             r"it changes the shape or strides of a tensor in place$"):
        outofplace.compile(t_, [torch.randn(3, 4)])


def squeeze_after_add(x):
    x.add_(1)
    x.squeeze_(0)
    return x


def test_metadata_mutation_after_supported_mutation() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(squeeze_after_add, [torch.randn(1, 4)])
    line = squeeze_after_add.__code__.co_firstlineno + 2
    assert_error_at(info.value, "torch.aten.squeeze_.dim", METADATA, line)


def test_error_does_not_touch_inputs() -> None:
    x = torch.randn(3, 4)
    before = x.clone()
    with pytest.raises(outofplace.UnsupportedMutationError):
        outofplace.compile(squeeze_after_add, [x[:1].clone()])
    with pytest.raises(outofplace.UnsupportedMutationError):
        outofplace.compile(normal_, [x])
    torch.testing.assert_close(x, before, rtol=0, atol=0)


class TransposesBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(3, 4))

    def forward(self, x):
        self.state.t_()
        return x


def test_module_buffer_metadata_mutation() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(TransposesBuffer(), [torch.randn(3)])
    line = TransposesBuffer.forward.__code__.co_firstlineno + 1
    assert_error_at(info.value, "torch.aten.t_", METADATA, line)


def test_random_op_refuses_to_run_in_the_interpreter() -> None:
    """The interpreter aborts the process on stablehlo.rng: refuse before calling it."""
    def f(x):
        x.uniform_()
        return x

    compiled = outofplace.compile(f, [torch.zeros(3)])
    with pytest.raises(NotImplementedError, match="cannot run stablehlo.rng"):
        compiled.run((torch.zeros(3),), engine="interpreter")
    if outofplace.xla.available():  # XLA runs it: uniform values land in [0, 1)
        x = torch.full((3,), -1.0)
        compiled.run((x,), engine="xla")
        assert bool(((x >= 0) & (x < 1)).all())


def test_failing_stage_writes_a_reproducer(tmp_path):
    """A lowering that fails on an op torch-mlir defines but cannot lower is refused at
    the user's line, naming the op, with the outofplace-opt command that reproduces it."""
    def f(w, i):
        return F.embedding_bag(i, w, torch.tensor([0, 2]), mode="max") * 2  # no lowering

    with pytest.raises(outofplace.UnsupportedMutationError) as caught:
        outofplace.compile(f, [torch.randn(10, 3), torch.tensor([1, 2, 4, 5])],
                           dump_ir=str(tmp_path), verify_each=False)
    assert "torch.aten.embedding_bag.padding_idx" in caught.value.op.split(", ")
    assert caught.value.location.endswith(f":{f.__code__.co_firstlineno + 1}")
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    before = tmp_path / "2-before-outofplace-lower-to-stablehlo.mlir"
    assert f"outofplace-opt {before} --pass-pipeline='builtin.module(" \
           "outofplace-lower-to-stablehlo)'" in notes
    assert before.exists() and (tmp_path / "0-torch-mutable.mlir").exists()


def test_op_torch_mlir_does_not_define_is_refused_at_its_line():
    """An op torch-mlir has no definition of, and no table decomposes, is refused before
    the lowering (which would fail on its `torch.operator`)."""
    def f(x):
        return torch.special.zeta(x, x) + 1

    with pytest.raises(outofplace.UnsupportedMutationError) as caught:
        outofplace.compile(f, [torch.randn(3, 3)])
    assert caught.value.op == "prims.zeta"  # what PyTorch decomposes special_zeta into
    assert "no definition" in caught.value.reason
    assert caught.value.location.endswith(f":{f.__code__.co_firstlineno + 1}")


MASK = torch.tensor([True, False, True, True])


def position_with_mask(x, pos, m):
    x[m, pos] = 1


def test_runtime_position_with_mask_matches_eager() -> None:
    """`x[m, pos]` is `x[:, pos][m]` (eager selects at a 0-d integer tensor first): it was
    refused as "a runtime position ... together with a mask"."""
    from differential import assert_matches_eager
    assert_matches_eager(position_with_mask, torch.randn(4, 4), torch.tensor(1),
                         torch.rand(4) > 0.5)


def uint8_position(x, pos):
    return x[pos] * 2  # eager: a mask, shape [1, 4, 3]


def test_zero_dimensional_uint8_index_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(uint8_position, (torch.randn(4, 3), torch.tensor(1, dtype=torch.uint8)))
    error = info.value
    assert error.op == "torch.aten.index.Tensor" and error.index == "[<tensor [] uint8>]"
    assert error.reason.startswith("a 0-d uint8 tensor as an index, which eager takes as a mask")
    assert error.location.endswith(f"{THIS_FILE}:{uint8_position.__code__.co_firstlineno + 1}")


def mask_read(x, m):
    return x[m].sum()  # as many elements as m has trues


def nonzero_read(x):
    return torch.nonzero(x > 0).float().sum()


def test_read_with_a_bool_mask_is_refused() -> None:
    """Its shape depends on the data; torch-mlir's lowering of it summed wrong values."""
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(mask_read, (torch.randn(4), torch.tensor([True, False, True,
                                                                     True])))
    error = info.value
    assert error.op == "torch.aten.index.Tensor" and error.index == "[<tensor [4] bool>]"
    assert error.reason.startswith("reading x[mask] with a bool mask: its shape depends on "
                                   "the mask's values")
    assert error.location.endswith(f"{THIS_FILE}:{mask_read.__code__.co_firstlineno + 1}")


def test_data_dependent_shape_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(nonzero_read, (torch.randn(5),))
    assert_error_at(info.value, "torch.aten.nonzero",
                    "its result's shape depends on the data (a dynamic shape); outofplace "
                    "compiles shapes that follow the arguments' only",
                    nonzero_read.__code__.co_firstlineno + 1)


def branch_on_data(x):
    if x.sum() > 0:
        x.add_(1)
    return x


def test_branch_on_data_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(branch_on_data, (torch.randn(4),))
    assert_error_at(info.value, "torch.export",
                    "a value read from a tensor's data decides a shape, an index or a branch "
                    "here (GuardOnDataDependentSymNode); outofplace compiles programs whose "
                    "shapes and control flow do not depend on the data",
                    branch_on_data.__code__.co_firstlineno + 1)


def test_branch_on_data_inside_a_torch_layer_names_the_layers_line() -> None:
    """AdaptiveLogSoftmaxWithLoss skips a cluster when no target falls in it (a branch on
    the targets' values): no frame of the user's is on the traceback, and generated code
    (`<string>`) is no location."""
    layer = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4])
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(layer, (torch.randn(5, 8), torch.tensor([1, 5, 9, 0, 3])))
    assert str(info.value).startswith(
        str(Path(torch.nn.modules.adaptive.__file__))), str(info.value)
    assert "GuardOnDataDependentSymNode" in str(info.value)


def test_verify_each_runs_every_lowering_pass_as_a_stage(tmp_path):
    """The debug mode: one stage (and IR dump) per pass, each checked by the verifier."""
    def f(x):
        x[1:3].mul_(2)
        return x.diagonal(0, 0, 1) + 0

    compiled = outofplace.compile(f, (torch.randn(4, 4),), dump_ir=str(tmp_path),
                                  verify_each=True)
    dumps = sorted((p.name for p in tmp_path.iterdir()), key=lambda n: int(n.split("-")[0]))
    assert "2-after-outofplace-lower-regions.mlir" in dumps
    assert "3-after-outofplace-fold-empty-tensors.mlir" in dumps
    assert "4-after-outofplace-decompose-diagonal.mlir" in dumps
    assert dumps[-3].endswith("-after-outofplace-verify-stablehlo.mlir")
    assert dumps[-2].endswith("-after-outofplace-split-bounds-check.mlir")
    assert dumps[-1].endswith("-after-outofplace-sharding.mlir")
    assert "stablehlo.dynamic_update_slice" in compiled.stablehlo


def test_a_pass_that_breaks_the_ir_is_named(tmp_path):
    """The verifier after each pass catches invalid IR; the error names the stage and the
    command that reproduces it."""
    from outofplace.transforms import diagnostics, pipelines

    @pipelines.register_pass("test-break-return", "Returns a value of the wrong type")
    def _break(module):
        for op in outofplace.ir_utils.all_operations(module):
            if op.name == "func.return":
                op.operands[0] = op.operands[1]  # a [3] tensor where main returns a [] one

    try:
        def f(x, y):
            x.add_(1)
            return x.sum(), y * 2

        module = outofplace.import_torch(f, (torch.randn(4), torch.randn(3)))
        with pytest.raises(pipelines.PipelineError) as info, module.context:
            diagnostics.run_stage(module, 1, "test-break-return", str(tmp_path))
    finally:
        del pipelines.PASSES["test-break-return"]
    notes = "\n".join(info.value.__notes__)
    assert "internal error: stage 'test-break-return' failed, a bug of outofplace's" in notes
    assert "reproduce with:" in notes
    assert str(tmp_path / "1-before-test-break-return.mlir") in notes


def write_into_unfold(x):
    x.unfold(0, 2, 1).zero_()


def test_write_into_unfold_windows_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(write_into_unfold, (torch.randn(5),))
    assert_error_at(info.value, "torch.aten.unfold", "writing into unfold windows, which "
                    "overlap", write_into_unfold.__code__.co_firstlineno + 1)


def mask_values_returned(x, m):
    y = x[m]
    y += 1
    x[m] = y
    return y


def mask_values_paired_with_masked_length(x, m, w):
    x[m] += w  # w has one value per true element


def test_masked_values_paired_with_one_value_per_true_match_eager() -> None:
    """The k-th true takes w[k], as eager pairs them (test_parity.py: both paths)."""
    from differential import assert_matches_eager
    assert_matches_eager(mask_values_paired_with_masked_length, torch.randn(4), MASK,
                         torch.randn(3))


def mask_values_copied_elsewhere(x, y, m):
    y.copy_(x[m])  # with an all-true example mask the shapes agree; other masks would not


@pytest.mark.parametrize("f, args, reason", [
    (mask_values_copied_elsewhere, (torch.randn(4), torch.randn(4),
                                    torch.ones(4, dtype=torch.bool)),
     "copy_ writes it into another tensor"),
    (mask_values_returned, (torch.randn(4), MASK), "the masked values are returned"),
])
def test_masked_values_used_beyond_elementwise_are_refused(f, args, reason) -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(f, args)
    assert reason in info.value.reason
    assert info.value.shape_from_values  # what torch.compile's dynamo runs eagerly
    assert info.value.location.endswith(f"{THIS_FILE}:{f.__code__.co_firstlineno + 1}")


def mask_with_index_tensor(x, m):
    x[m, [0, 2]] = 1


def test_mask_with_index_tensor_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(mask_with_index_tensor, (torch.randn(2, 3),
                                                    torch.tensor([True, False])))
    # (refused by outofplace-lower-updates, where the op is index_put_'s twin)
    assert_error_at(info.value, "torch.aten.index_put", "a bool mask together with index "
                    "tensors of more than one element in one index (the positions of its "
                    "trues, as many as the data says, would broadcast with the other "
                    "indices)",
                    mask_with_index_tensor.__code__.co_firstlineno + 1)


def mask_store_into_expanded(x, m):
    x.expand(3)[m] -= 1


def test_mask_store_into_expanded_tensor_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(mask_store_into_expanded,
                           (torch.tensor(0.0), torch.tensor([False, False, False])))
    error = info.value
    assert error.reason == "writing through a mask into an expanded tensor: its elements " \
                           "share memory"
    line = mask_store_into_expanded.__code__.co_firstlineno + 1
    assert error.location.endswith(f"{THIS_FILE}:{line}")


def shifted_add(x):
    x[:, 1:] += x[:, :-1]  # eager adds running sums here, element after element


def index_put_of_own_column(x, i):
    x[:, 1].index_put_((i,), x[:, 1].t(), accumulate=True)


def transpose_into_self(x):
    x.add_(x.t())


def disjoint_rows(x):
    x[0] += x[1]
    x[:, 0].mul_(x[:, 1])
    x.mul_(x.detach())  # the same elements: one meaning


@pytest.mark.parametrize("f, args, op, operand", [
    (shifted_add, (torch.randn(2, 5),), "torch.aten.add_.Tensor", "other"),
    (index_put_of_own_column, (torch.randn(3, 3), torch.tensor([2, 0, 1])),
     "torch.aten.index_put_", "values"),
    (transpose_into_self, (torch.randn(3, 3),), "torch.aten.add_.Tensor", "other"),
], ids=["shifted_add", "index_put_of_own_column", "transpose_into_self"])
def test_operand_overlapping_what_is_written_is_refused(f, args, op, operand) -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(f, args)
    assert_error_at(info.value, op, f"its operand `{operand}` shares memory with the tensor "
                    "it writes: eager's result then depends on the order it writes the "
                    "elements in; clone the operand first", f.__code__.co_firstlineno + 1)


def test_operands_disjoint_from_what_is_written_are_compiled() -> None:
    from differential import assert_matches_eager
    assert_matches_eager(disjoint_rows, torch.randn(3, 4))


def copy_onto_itself_through_expand(x):
    x.expand(2, -1).copy_(x.expand(2, -1))  # eager returns early: src is dst


def test_write_into_expanded_view_that_tracing_rejects_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(copy_onto_itself_through_expand, (torch.randn(3),))
    assert_error_at(info.value, "torch.export", "writing into a tensor whose elements share "
                    "memory (an expanded view), which tracing refuses as eager refuses most "
                    "such writes", copy_onto_itself_through_expand.__code__.co_firstlineno + 1)


def as_strided_of_an_empty_view(x):
    x.diagonal(1)[:, :0].as_strided((1,), (1,)).fill_(2.5)  # tracing misplaced its start


def test_as_strided_of_an_empty_view_is_refused() -> None:
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(as_strided_of_an_empty_view, (torch.zeros(3, 1, 4),))
    assert_error_at(info.value, "torch.aten.as_strided", "of a view without elements: where "
                    "it starts in storage is not known while tracing",
                    as_strided_of_an_empty_view.__code__.co_firstlineno + 1)


def scale_first_read_second(a, b):
    a.mul_(2)  # eager's write shows through b when b shares a's memory
    return b + 1


def _sharing_reason(written: str, other: str) -> str:
    return (f"it writes argument `{written}`, which shares memory with argument `{other}`: "
            f"eager's write shows through `{other}`, separate arguments of the compiled "
            "program cannot; pass tensors that do not share memory (a clone)")


def assert_sharing_refused(error, op: str, pair: tuple[str, str], line: int) -> None:
    """The refusal names the pair in either order: passed one tensor twice, torch.export
    keeps one of the two arguments, which then is the one written."""
    written = pair[0] if f"argument `{pair[0]}`, which" in error.reason else pair[1]
    other = pair[1] if written == pair[0] else pair[0]
    assert_error_at(error, op, _sharing_reason(written, other), line)


@pytest.mark.parametrize("second", [lambda x: x[3:], lambda x: x.view(2, 3).t()[1:]],
                         ids=["overlapping a slice", "overlapping a transpose"])
def test_written_argument_overlapping_another_in_part_matches_eager(second) -> None:
    """Two arguments partly overlapping, neither viewing the other: both are taken from a
    tensor of the storage they span, one more argument of main (they were refused)."""
    from differential import assert_matches_eager
    x = torch.randn(8)
    compiled = assert_matches_eager(scale_first_read_second, x[:6], second(x[2:]))
    assert compiled.input_names == ["a", "b", "memory_of_a_b"]


def test_written_argument_sharing_memory_in_another_dtype_is_refused() -> None:
    """Arguments sharing memory in two dtypes: no tensor of one dtype holds both."""
    x = torch.randn(6)
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(scale_first_read_second, (x, x.view(torch.int32)))
    assert_sharing_refused(info.value, "torch.aten.mul_.Tensor", ("a", "b"),
                           scale_first_read_second.__code__.co_firstlineno + 1)
    assert not info.value.shape_from_values


def test_call_with_arguments_sharing_memory_is_refused() -> None:
    """Compiled with separate tensors, called with two sharing memory in two dtypes."""
    compiled = outofplace.compile(scale_first_read_second,
                                  (torch.randn(6), torch.randn(6).view(torch.int32)))
    x = torch.randn(6)
    before = x.clone()
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        compiled(x, x.view(torch.int32))
    assert_error_at(info.value, "torch.aten.mul_.Tensor", _sharing_reason("a", "b"),
                    scale_first_read_second.__code__.co_firstlineno + 1)
    assert torch.equal(x, before)  # refused before anything ran


@pytest.mark.parametrize("second", [lambda x: x, lambda x: x[1:], lambda x: x.view(2, 3)[0],
                                    lambda x: x.view(2, 3).t()[1:]],
                         ids=["same", "slice", "view", "transpose"])
def test_written_argument_viewed_by_another_matches_eager(second) -> None:
    """An argument viewing the written one is taken from it inside the program, so the
    write shows through it as in eager (these were refused as sharing memory)."""
    from differential import assert_matches_eager
    x = torch.randn(6)
    compiled = assert_matches_eager(scale_first_read_second, x, second(x))
    assert compiled.signature.input_views


def add_both(a, b):
    return a + b


def test_arguments_sharing_memory_without_writes_are_compiled() -> None:
    from differential import assert_matches_eager
    x = torch.randn(6)
    assert_matches_eager(add_both, x, x)
    assert_matches_eager(scale_first_read_second, torch.randn(6), x[1:].clone())
    assert_matches_eager(scale_first_read_second, x[:3], x[3:])  # one storage, disjoint


class BufferAlsoPassed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        self.total.add_(x)  # eager's write shows through x when x is total
        return x * 2


def test_written_buffer_passed_as_an_argument_matches_eager() -> None:
    """`m(m.total)`: the argument views the buffer the module writes, and is taken from
    it inside the program (it was refused as sharing memory)."""
    module, eager = BufferAlsoPassed(), BufferAlsoPassed()
    compiled = outofplace.compile(module, (module.total,))
    for _ in range(2):
        assert torch.equal(compiled(module.total), eager(eager.total))
        assert torch.equal(module.total, eager.total)


def test_a_changed_non_tensor_argument_is_refused_at_the_call():
    """The trace specializes on ints: calling with another value would run the old one
    silently (it wrote c[0:2] for start=4); it raises before touching the caller's tensors."""
    def f(c, x, start):
        c[start:start + 2] = x
        return c.sum()

    compiled = outofplace.compile(f, (torch.zeros(8), torch.ones(2), 0))
    c = torch.zeros(8)
    compiled(c, torch.ones(2), 0)
    assert c.tolist() == [1, 1, 0, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="argument 'start' was compiled as the constant 0 "
                                         "and is 4 now"):
        compiled(c, torch.ones(2) * 5, 4)
    assert c.tolist() == [1, 1, 0, 0, 0, 0, 0, 0]


def test_refusals_are_user_errors_and_get_no_reproducer(tmp_path):
    """A refusal is the user's to fix at their line: a UserError, without the internal-error
    note and reproducer a bug of ours gets."""
    def f(x):
        x.normal_()

    with pytest.raises(outofplace.UserError) as info:
        outofplace.compile(f, (torch.randn(3),), dump_ir=str(tmp_path))
    assert isinstance(info.value, outofplace.UnsupportedMutationError)
    assert not getattr(info.value, "__notes__", None)

    def g(b):
        b[:, 5] = 1

    with pytest.raises(IndexError) as index_error:
        outofplace.compile(g, (torch.randn(2, 3),))
    assert not getattr(index_error.value, "__notes__", None)


def _opt_with_pass(tmp_path, capsys, fn):
    """outofplace-opt running the pass `fn` (registered for the test) on a small module:
    its exit code and its stderr lines."""
    from outofplace.tools import opt
    from outofplace.transforms import pipelines

    pipelines.register_pass("test-raising-pass", "Raises")(fn)
    source = tmp_path / "in.mlir"
    source.write_text("func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
                      "  return %x : tensor<2xf32>\n}\n")
    try:
        code = opt.main([str(source), "--pass-pipeline=builtin.module(test-raising-pass)"])
    finally:
        del pipelines.PASSES["test-raising-pass"]
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_opt_reports_a_bug_of_ours_as_an_internal_error_with_a_reproducer(tmp_path, capsys):
    """A bare IndexError from a pass is a bug of ours, not bad input: one line that says
    so, with a copy of the input and the command that reproduces it."""
    def broken(module):
        return [][0]

    code, lines = _opt_with_pass(tmp_path, capsys, broken)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("outofplace-opt: error: internal error (IndexError): list "
                               "index out of range; a bug of outofplace's"), lines[0]
    command = lines[0].split("reproduce with: ")[1]
    assert command.endswith("--pass-pipeline='builtin.module(test-raising-pass)'")
    copy = command.split()[1]
    assert open(copy).read() == (tmp_path / "in.mlir").read_text()


def test_opt_reports_a_user_error_as_one_line_without_reproducer(tmp_path, capsys):
    def refusing(module):
        raise outofplace.errors.UserIndexError("index 5 is out of bounds")

    code, lines = _opt_with_pass(tmp_path, capsys, refusing)
    assert code == 1
    assert lines == ["outofplace-opt: error: index 5 is out of bounds"]


@pytest.mark.parametrize("engine,extra,kwargs", [
    ("iree", "iree", {}), ("xla", "xla", {}), ("auto", "xla", {"mesh": {"x": 2}})])
def test_missing_extra_is_named_at_compile_time(engine, extra, kwargs, monkeypatch):
    """An engine whose extra is not installed: a named error when compiling, saying what
    to install, not a ModuleNotFoundError at the first call."""
    from outofplace.backends import iree, xla

    monkeypatch.setattr(iree if extra == "iree" else xla, "available", lambda: False)
    traced = []
    with pytest.raises(outofplace.EngineUnavailableError,
                       match=rf"pip install 'outofplace\[{extra}\]'"):
        outofplace.compile(lambda x: traced.append(x) or x.add_(1), (torch.zeros(2),),
                           engine=engine, **kwargs)
    assert not traced  # refused before tracing


def test_unknown_engine_is_refused_at_compile_time():
    with pytest.raises(outofplace.EngineUnavailableError, match="unknown engine 'xal'"):
        outofplace.compile(lambda x: x.add_(1), (torch.zeros(2),), engine="xal")


def test_a_refusal_in_code_compiled_from_a_string_names_its_line_not_outofplace() -> None:
    """Code compiled from a string the user registered in linecache (`<name>`) is named
    as FX's stack traces name it; unregistered, the line is the caller's, never a file
    of outofplace (it named compiled.py for a refusal made while tracing)."""
    import linecache
    source = "def f(x, m):\n    y = x.clone()\n    return y[m]\n"
    for name, registered in (("<generated-f>", True), ("<string>", False)):
        if registered:
            linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        namespace: dict = {}
        exec(compile(source, name, "exec"), namespace)
        with pytest.raises(outofplace.UnsupportedMutationError) as info:
            outofplace.compile(namespace["f"], (torch.randn(3), torch.tensor([True, False,
                                                                             True])))
        location = info.value.location
        if registered:
            assert location == f"{name}:3"
        else:  # the line calling outofplace.compile
            assert os.path.basename(location.rsplit(":", 1)[0]) == THIS_FILE, location


class GradientThroughPlainBatchNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(4, affine=False)

    def forward(self, x, grad):
        x = x.detach().requires_grad_()
        return torch.autograd.grad(self.bn(x), [x], grad)


def test_a_program_torch_export_leaves_a_traced_constant_in_is_refused_at_its_forward():
    """torch.export leaves a tensor of the trace as a constant of the program (and raised
    a RuntimeError asking to file an issue): refused, naming the module's forward."""
    args = (torch.randn(2, 4, 3, 3), torch.randn(2, 4, 3, 3))
    before = [a.clone() for a in args]
    with pytest.raises(outofplace.UnsupportedMutationError) as info:
        outofplace.compile(GradientThroughPlainBatchNorm(), args)
    assert_error_at(info.value, "torch.export", "torch.export cannot trace this program: "
                    "a tensor made while tracing it stays in it as a constant (torch.export "
                    "alone fails alike; with autograd.grad through a batch norm without "
                    "affine parameters, for one)",
                    GradientThroughPlainBatchNorm.forward.__code__.co_firstlineno)
    assert all(torch.equal(a, b) for a, b in zip(args, before))
