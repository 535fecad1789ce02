"""Tracing a Python function on the fake values of FX nodes and inlining the ATen graph
it records in place of a node: how PyTorch's decompositions and the regions of
higher-order ops (`torch.autocast`, `torch.enable_grad`) enter the exported graph.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Mapping

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import make_fx

from .fx_graph import fake_mode_of


def trace(graph: torch.fx.Graph, fn: Callable[..., Any], args: tuple, kwargs: dict,
          decompositions: Mapping[Any, Callable[..., Any]] | None = None,
          preserve_meta: bool = False) -> tuple[torch.fx.GraphModule, list[torch.fx.Node]]:
    """`fn(*args, **kwargs)` traced to ATen on the fake values of the nodes among
    `args`, `kwargs`: the graph, and those nodes in the order of its placeholders.

    With `preserve_meta`, `fn` may run an FX interpreter whose nodes' stack traces go
    to the nodes they record."""
    flat, spec = pytree.tree_flatten((args, kwargs))
    positions = [i for i, v in enumerate(flat) if isinstance(v, torch.fx.Node)]

    def traced(*tensors: torch.Tensor) -> Any:
        values = list(flat)
        for i, tensor in zip(positions, tensors):
            values[i] = tensor
        call_args, call_kwargs = pytree.tree_unflatten(values, spec)
        return fn(*call_args, **call_kwargs)

    fake_mode = fake_mode_of(graph)
    fakes = [_without_constant(flat[i].meta["val"], fake_mode) for i in positions]
    meta = torch.fx.traceback.preserve_node_meta() if preserve_meta \
        else contextlib.nullcontext()
    with fake_mode, meta:
        gm = make_fx(traced, decomposition_table=decompositions)(*fakes)
    return gm, [flat[i] for i in positions]


def _without_constant(value: torch.Tensor, fake_mode: Any) -> torch.Tensor:
    """A fake tensor of `value`'s layout that holds no real tensor. torch.export fakes a
    lifted constant (optimizer state) with the caller's real tensor as its `constant`,
    and fake-tensor propagation runs in-place ops on that: tracing a region on it would
    change the caller's state while compiling."""
    if isinstance(value, FakeTensor) and value.constant is None:
        return value
    with fake_mode:
        storage = torch.empty(value.untyped_storage().nbytes() // value.element_size(),
                              dtype=value.dtype)
        return storage.as_strided(value.shape, value.stride(), value.storage_offset())


def inline(graph: torch.fx.Graph, traced: torch.fx.GraphModule,
           inputs: list[torch.fx.Node], stack_trace: str | None = None) -> Any:
    """Copies `traced` into `graph` at its insertion point, its placeholders bound to
    `inputs` and its constants made buffers of `graph`'s module; returns what its output
    returns (nodes). Nodes without a stack trace take `stack_trace`."""
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    copies: dict[torch.fx.Node, torch.fx.Node] = dict(zip(placeholders, inputs))
    module = graph.owning_module
    for node in traced.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op == "get_attr":
            name = f"_outofplace_constant_{len(module._buffers)}"
            value = getattr(traced, node.target)
            module.register_buffer(name, value)
            copy = graph.get_attr(name)
            copy.meta["val"] = fake_mode_of(graph).from_tensor(value, static_shapes=True)
        else:
            copy = graph.node_copy(node, lambda n: copies[n])
        if not copy.meta.get("stack_trace"):
            copy.meta["stack_trace"] = stack_trace
        copies[node] = copy
    output = next(n for n in traced.graph.nodes if n.op == "output")
    return torch.fx.node.map_arg(output.args[0], lambda n: copies[n])


def inline_call(graph: torch.fx.Graph, node: torch.fx.Node, fn: Callable[..., Any],
                *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` traced on the fake values of the nodes among its arguments
    and inlined at the insertion point, with `node`'s stack trace."""
    gm, inputs = trace(graph, fn, args, kwargs)
    return inline(graph, gm, inputs, node.meta.get("stack_trace"))
