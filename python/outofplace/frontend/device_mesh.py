"""torch's DeviceMesh and DTensor placements as `compile`'s `mesh` and `shardings`.

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    outofplace.compile(f, args, mesh=mesh, shardings={"cache": [Replicate(), Shard(1)]})

is `mesh={"dp": 2, "tp": 4}, shardings={"cache": (None, "tp", None, None)}`:

- a `DeviceMesh` gives its shape and `mesh_dim_names` (`dim0`, `dim1`, ... when it has
  none); not its ranks: the engine lays the mesh row-major over its own first devices;
- a sharding is a list of placements, one per mesh dimension, or `(DeviceMesh,
  placements)`, or a DTensor (its mesh and placements): `Shard(d)` on mesh dimension i
  puts axis i at the tensor's dimension d (mesh dimensions in order, the first major),
  `Replicate()` puts nothing. `Partial` and the other placements are refused: the
  argument is a whole value here, not a pending reduction.

A DTensor argument is refused: the engine shards the full value itself, and a DTensor
holds one rank's shard (under the fake process group, rank 0's).

torch.distributed is not imported here: a placement or a DTensor exists only once the
user has imported torch.distributed.tensor.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch_mlir import ir

from .. import torch_types
from ..ir_utils import main_function


def _device_mesh_type() -> type | None:
    module = sys.modules.get("torch.distributed.device_mesh")
    return getattr(module, "DeviceMesh", None)


def _tensor_module() -> Any:
    return sys.modules.get("torch.distributed.tensor")


def _is_dtensor(value: Any) -> bool:
    module = _tensor_module()
    return module is not None and isinstance(value, module.DTensor)


def _axis_sizes(device_mesh: Any) -> dict[str, int]:
    names = device_mesh.mesh_dim_names or tuple(f"dim{i}" for i in range(device_mesh.ndim))
    return dict(zip(names, device_mesh.shape))


def _placements(value: Any) -> tuple[Any, tuple] | None:
    """(its DeviceMesh or None, its placements) if `value` is a placement sharding."""
    module = _tensor_module()
    if module is None:
        return None
    if isinstance(value, module.DTensor):
        return value.device_mesh, tuple(value.placements)
    mesh_type = _device_mesh_type()
    if isinstance(value, (tuple, list)) and len(value) == 2 and \
            isinstance(value[0], mesh_type):
        return value[0], tuple(value[1])
    if isinstance(value, (tuple, list)) and value and \
            all(isinstance(p, module.placement_types.Placement) for p in value):
        return None, tuple(value)
    return None


def read_mesh(mesh: Any, shardings: dict[str, Any] | None) -> dict[str, int] | None:
    """`mesh` as axis name -> size: a dict as given, a DeviceMesh's names and shape, or,
    when None, the DeviceMesh the placement shardings name. They must all be one mesh."""
    mesh_type = _device_mesh_type()
    if mesh_type is not None and isinstance(mesh, mesh_type):
        mesh = _axis_sizes(mesh)
    for name, value in (shardings or {}).items():
        found = _placements(value)
        if found is None or found[0] is None:
            continue
        theirs = _axis_sizes(found[0])
        if mesh is None:
            mesh = theirs
        elif list(dict(mesh).items()) != list(theirs.items()):
            raise ValueError(f"the sharding of '{name}' is on the mesh {theirs}, "
                             f"the program's mesh is {dict(mesh)}")
    return mesh


def to_specs(shardings: dict[str, Any] | None, mesh: dict[str, int],
             input_names: list[str], shapes: list[list[int]]) -> dict[str, Any] | None:
    """`shardings` with each placement sharding made a partition spec of its argument's
    rank; partition specs as given (`_normalize` checks them all)."""
    if not shardings:
        return shardings
    module = _tensor_module()
    specs = {}
    for name, value in shardings.items():
        found = _placements(value)
        if found is None or name not in input_names:
            specs[name] = value
            continue
        placements = found[1]
        axes = list(mesh)
        if len(placements) != len(axes):
            raise ValueError(f"the sharding of '{name}' has {len(placements)} placements, "
                             f"one per dimension of the mesh {mesh} is needed")
        rank = len(shapes[input_names.index(name)])
        spec = [[] for _ in range(rank)]
        for axis, placement in zip(axes, placements):
            if isinstance(placement, module.Replicate):
                continue
            if not isinstance(placement, module.Shard):
                what = "Partial: a pending sum, not a value" \
                    if isinstance(placement, module.Partial) else repr(placement)
                raise ValueError(f"the sharding of '{name}' places {what} on mesh axis "
                                 f"'{axis}'; only Shard(d) and Replicate() are read")
            if not -rank <= placement.dim < rank:
                raise ValueError(f"the sharding of '{name}' has {placement} on mesh axis "
                                 f"'{axis}', its shape {shapes[input_names.index(name)]} "
                                 f"has {rank} dimensions")
            spec[placement.dim % rank].append(axis)
        specs[name] = tuple(tuple(a) if a else None for a in spec)
    return specs


# One entry per dimension: the mesh axes it is split over, major first; () is whole.
Spec = tuple[tuple[str, ...], ...]


def _normalize(mesh: dict[str, int], shardings: dict[str, Any] | None,
              input_names: list[str], shapes: list[list[int]]) -> dict[int, Spec]:
    """Argument index -> spec, checked against the mesh and the argument's shape.

    `shardings` maps an argument name to one entry per dimension: an axis name, a tuple of
    names, or None. Arguments not named are replicated (absent from the result).
    """
    if not mesh or any(not isinstance(n, str) or not isinstance(s, int) or s < 1
                       for n, s in mesh.items()):
        raise ValueError(f"mesh must map axis names to positive sizes, got {mesh!r}")
    for name, shape in zip(input_names, shapes):
        if any(n < 0 for n in shape):  # a dynamic dimension (dynamic_shapes)
            raise ValueError(
                f"argument '{name}' has a dynamic dimension "
                f"({[n if n >= 0 else -1 for n in shape]}, -1 dynamic): a "
                "program on a mesh has static shapes (each call would run on one device, "
                "its shardings not checked); compile one program per shape")
    specs = {}
    for name, entries in (shardings or {}).items():
        if name not in input_names:
            raise ValueError(f"shardings names '{name}', which is not an argument; "
                             f"the arguments are {input_names}")
        index = input_names.index(name)
        shape = shapes[index]
        if len(entries) != len(shape):
            raise ValueError(f"the spec of '{name}' has {len(entries)} entries, "
                             f"its shape {shape} has {len(shape)} dimensions")
        spec, used = [], set()
        for dim, entry in enumerate(entries):
            axes = () if entry is None else (entry,) if isinstance(entry, str) \
                else tuple(entry)
            for axis in axes:
                if axis not in mesh:
                    raise ValueError(f"the spec of '{name}' names axis '{axis}', "
                                     f"not in the mesh {list(mesh)}")
                if axis in used:
                    raise ValueError(f"the spec of '{name}' uses axis '{axis}' twice")
                used.add(axis)
            parts = math.prod(mesh[a] for a in axes)
            if shape[dim] % parts:
                raise ValueError(f"dimension {dim} of '{name}' ({shape[dim]}) does not "
                                 f"split into {parts} equal shards over {axes}")
            spec.append(axes)
        if used:
            specs[index] = tuple(spec)
    return specs


def refuse_dtensors(f: Any, args: tuple, kwargs: dict | None) -> None:
    """Raises ValueError naming the first DTensor among the arguments, the module's
    parameters and buffers, saying what to pass instead."""
    if _tensor_module() is None:
        return
    named = [(f"positional argument {i}", leaf) for i, a in enumerate(args)
             for leaf in pytree.tree_leaves(a)]
    named += [(f"keyword argument '{k}'", leaf) for k, a in (kwargs or {}).items()
              for leaf in pytree.tree_leaves(a)]
    if isinstance(f, torch.nn.Module):
        named += [(f"'{n}'", t) for n, t in f.named_parameters()]
        named += [(f"'{n}'", t) for n, t in f.named_buffers()]
    for where, value in named:
        if _is_dtensor(value):
            raise ValueError(
                f"{where} is a DTensor ({list(value.placements)} on {value.device_mesh}): "
                "outofplace shards the whole value itself over its own devices, and a "
                "DTensor holds one rank's shard (under the fake process group, to_local() "
                "is rank 0's). Pass the full tensor (dtensor.full_tensor()) with "
                "mesh=dtensor.device_mesh and shardings={name: dtensor.placements}, or "
                "shardings={name: dtensor} (docs/sharding.md)")


# On the imported module, for the pass outofplace-sharding (transforms/sharding.py): the
# mesh's axis names and sizes, and one entry per argument of main: [] when it is
# replicated, else one array of mesh axes per dimension.
MESH_AXES = "outofplace.mesh_axes"
MESH_SHAPE = "outofplace.mesh_shape"
SHARDINGS = "outofplace.shardings"


def place(module: ir.Module, input_names: list[str], mesh: Any,
          shardings: dict[str, Any] | None) -> tuple[dict[str, int] | None, dict[int, Spec]]:
    """`compile`'s `mesh` and `shardings` read once, right after the import: the mesh as
    axis name -> size (`read_mesh`), and argument index -> spec (placements made specs,
    every spec checked against the mesh and its argument's shape), both written on
    `module` for outofplace-sharding. (None, {}) without a mesh."""
    mesh = read_mesh(mesh, shardings)
    if mesh is None:
        if shardings:
            raise ValueError("shardings need a mesh")
        return None, {}
    mesh = dict(mesh)
    shapes = [list(torch_types.TensorType.of(a.type).sizes or ())
              for a in main_function(module).arguments]
    specs = _normalize(mesh, to_specs(shardings, mesh, input_names, shapes), input_names,
                       shapes)
    with module.context:
        def strings(names: Any) -> ir.ArrayAttr:
            return ir.ArrayAttr.get([ir.StringAttr.get(n) for n in names])

        attributes = module.operation.attributes
        attributes[MESH_AXES] = strings(mesh)
        attributes[MESH_SHAPE] = ir.DenseI64ArrayAttr.get(list(mesh.values()))
        attributes[SHARDINGS] = ir.ArrayAttr.get([
            ir.ArrayAttr.get([strings(axes) for axes in specs.get(i, ())])
            for i in range(len(input_names))])
    return mesh, specs
