"""The process groups a rank-local program's collectives run over, read from
torch.distributed when the program is imported.

torch.export and dynamo trace `dist.all_reduce(y, group=g)` (and `all_gather_into_tensor`,
`reduce_scatter_tensor`, `all_to_all_single` into preallocated outputs) as PyTorch's
functional collectives, `_c10d_functional.all_reduce(y, "sum", group_name)` then
`wait_tensor`, and a `copy_` into the written tensor, which inplace-to-outofplace handles
as any other write. The group is only a name there. `annotate` records on the module, for
each group a collective names, the replica groups XLA needs (every rank's group of the
same layout: the tensor-parallel rows of a data x tensor layout, a DeviceMesh dimension)
and the world's size, which transforms/collectives.py reads. They become part of the
module, so of the compile cache's key: a program traced in a 2-rank job is not a 4-rank
job's.
"""

from __future__ import annotations

from typing import Any, Callable

from torch_mlir import ir

from ..errors import UnsupportedMutationError
from ..ir_utils import all_operations

PREFIX = "torch._c10d_functional."
GROUPS = "outofplace.process_groups"  # module attribute: {group name: [[ranks], ...]}
WORLD = "outofplace.world_size"  # module attribute: the number of ranks (replicas)
# The functional collectives outofplace lowers, and the operand naming each one's group.
GROUP_OPERAND = {"all_reduce": 2, "all_reduce_": 2, "all_gather_into_tensor": 2,
                 "reduce_scatter_tensor": 3, "all_to_all_single": 3, "wait_tensor": None}


def collective_name(op: ir.Operation) -> str | None:
    """The functional collective an op calls (`all_reduce`), or None."""
    if op.name != "torch.operator":
        return None
    name = ir.StringAttr(op.attributes["name"]).value
    return name[len(PREFIX):] if name.startswith(PREFIX) else None


def replica_groups(ranks: list[int], world: int) -> list[list[int]]:
    """Every rank's group of the layout this group is one of: the groups of the same
    size and stride tiling the world (`[2, 3]` of 4 → [[0, 1], [2, 3]]; `[1, 3]` →
    [[0, 2], [1, 3]]), as `new_group` over a regular layout and DeviceMesh dimensions
    make them; a group of no such layout is given alone (each rank's program names only
    the group it is in, which is all XLA's rendezvous reads)."""
    size = len(ranks)
    stride = ranks[1] - ranks[0] if size > 1 else 1
    regular = size > 0 and stride > 0 and world % size == 0 and \
        ranks == [ranks[0] + i * stride for i in range(size)]
    if regular:
        groups, seen = [], set()
        for start in range(world):
            if start in seen:
                continue
            group = [start + i * stride for i in range(size)]
            if group[-1] >= world or seen & set(group):
                break
            seen.update(group)
            groups.append(group)
        if len(seen) == world and ranks in groups:
            return groups
    return [list(ranks)]


def annotate(module: ir.Module) -> None:
    """Records the process groups `module`'s collectives name (see above); nothing for a
    program without collectives. A collective while torch.distributed is not
    initialised, or naming a group this process is not in, is refused."""
    operations = [op for op in all_operations(module.operation)
                  if collective_name(op) not in (None, "wait_tensor")]
    if not operations:
        return
    import torch.distributed as dist
    from torch._C._distributed_c10d import _resolve_process_group

    names: dict[str, list[list[int]]] = {}
    for op in operations:
        if not dist.is_available() or not dist.is_initialized():
            raise UnsupportedMutationError.at(
                op, "collective: torch.distributed is not initialised in this process "
                "(init_process_group before compiling a program with collectives)")
        position = GROUP_OPERAND.get(collective_name(op))
        if position is None:  # (refused by the lowering, naming the op)
            continue
        value = op.operands[position]
        if not isinstance(value, ir.OpResult) or value.owner.name != "torch.constant.str":
            continue
        group = ir.StringAttr(value.owner.attributes["value"]).value
        if group in names:
            continue
        try:
            ranks = dist.get_process_group_ranks(_resolve_process_group(group))
        except Exception as error:
            raise UnsupportedMutationError.at(
                op, f"collective: process group '{group}' is not one this process is in "
                f"({error})") from error
        names[group] = replica_groups(list(ranks), dist.get_world_size())
    with module.context:
        module.operation.attributes[GROUPS] = ir.DictAttr.get(
            {name: ir.ArrayAttr.get([ir.DenseI64ArrayAttr.get(g) for g in groups])
             for name, groups in names.items()})
        module.operation.attributes[WORLD] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), dist.get_world_size())


def rank_local(module: Any) -> Any:
    """The rank-local program of a module `torch.distributed.tensor.parallel.
    parallelize_module` made tensor-parallel with `ColwiseParallel` / `RowwiseParallel`
    (their default layouts) on a 1-D mesh, in place: each `nn.Linear` with DTensor
    parameters holds its local shard instead; a column-parallel one (weight `Shard(0)`)
    computes its shard of the outputs, a row-parallel one (`Shard(1)`) its partial sums,
    then `dist.all_reduce` over the mesh's group. parallelize_module's hooks on those
    linears (DTensor in, local out) are removed. torch.export does not trace DTensors;
    this is the program eager runs, each rank's, with its collectives in place. Returns
    `module`. Other DTensor modules, placements and a row-parallel bias are refused."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard

    def all_reduce(group: Any) -> Callable:
        def hook(_: Any, __: Any, output: torch.Tensor) -> torch.Tensor:
            dist.all_reduce(output, group=group)  # row-parallel: partial sums
            return output
        return hook

    for name, sub in module.named_modules():
        sharded = {n: p for n, p in sub.named_parameters(recurse=False)
                   if isinstance(p, DTensor)}
        if not sharded:
            continue
        weight = sharded.get("weight")
        if not isinstance(sub, torch.nn.Linear) or weight is None or \
                weight.device_mesh.ndim != 1 or \
                list(weight.placements) not in ([Shard(0)], [Shard(1)]):
            raise ValueError(f"'{name}': rank_local takes the nn.Linear modules of "
                             "ColwiseParallel / RowwiseParallel on a 1-D mesh (weights "
                             "Shard(0) or Shard(1))")
        row = list(weight.placements) == [Shard(1)]
        if row and sub.bias is not None:
            raise ValueError(f"'{name}': a row-parallel linear with a bias (the bias would "
                             "be summed over the ranks)")
        for n, p in sharded.items():
            setattr(sub, n, torch.nn.Parameter(p.to_local(), requires_grad=p.requires_grad))
        sub._forward_pre_hooks.clear()  # parallelize_module's: DTensor inputs, local outputs
        sub._forward_hooks.clear()
        if row:
            sub.register_forward_hook(all_reduce(weight.device_mesh.get_group()))
    return module
