"""Shardings on the StableHLO: a device mesh and one partition spec per argument.

`outofplace.compile(..., mesh={"dp": 2, "tp": 4}, shardings={"kv_cache": (None, "tp")})`
ends here, in the pass outofplace-sharding after the lowering. The mesh and the specs
come as attributes frontend/device_mesh.py put on the imported module (read and checked
once, right after the import), not as pass options: a spec per argument is data of this
program, too much for an option's fixed choices, and attributes travel with the module
through the pipeline, its dumps and `outofplace-opt` reproducers. The module gets what
XLA's SPMD partitioner reads:

    module attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}
    func.func @main(%kv_cache: tensor<2x8x16x4xf32>
                      {mhlo.sharding = "{devices=[1,4,1,1]<=[4]}", tf.aliasing_output = 1 : i32},
                    ...) -> (..., tensor<2x8x16x4xf32> {mhlo.sharding = "{devices=[1,4,1,1]<=[4]}"})

- every argument gets `mhlo.sharding`: its spec as an HloSharding, `{replicated}` if unnamed;
- every aliased result gets exactly its argument's sharding (a result left to propagation
  makes the donated buffer and its result differ in size, jax-ml/jax#25346); other results
  are `{replicated}`, so the caller reads them whole from any device;
- a `dynamic_update_slice` with a runtime start gets that start clamped explicitly to where
  the update fits. The partitioner turns an update of a sharded dimension into a
  shard-local one (local offset, owner predicate), but drops it when the start needed
  clamping (openxla/xla#49118); clamped first, the start is always in range. On one device
  and on dimensions that are not sharded the clamp changes nothing: the op clamps the same.
- a scatter into a reshape of the state that merges its leading dimensions, reshaped back
  (a paged pool's `[slots, heads, dim]` view), scatters into the state itself, one index
  per merged dimension: XLA:CPU copies a shard whose reshape back its layout assignment
  lays out otherwise (one head per device; `_scatter_without_merged_dims`).
- scatters and gathers index with 32 bits (the pass `outofplace-narrow-indices`,
  narrow_indices.py): with torch's 64-bit indices the partitioner can abort the process.

`mhlo.sharding` strings, not Shardy's `sdy.sharding`: torch-mlir's context has no `sdy`
dialect, and the HLO module proto (what Neuron ingests) carries HloShardings. These are
the only shardings written into a module: the mesh engine (backends/spmd) drops them from
the module it compiles and gives jax the same specs as `NamedSharding`s, which jax writes
as Shardy's (spmd/writes.py `engine_module` says why; docs/sharding.md).
"""

from __future__ import annotations

import math
from typing import Any

from torch_mlir import ir

from ..frontend.device_mesh import MESH_AXES, MESH_SHAPE, SHARDINGS, Spec
from ..ir_utils import all_operations, stablehlo_splat, unnamed
from ..signature import io_map_of, returned_state
from .narrow_indices import narrow_indices
from .registry import register_pass
def hlo_sharding(mesh: dict[str, int], spec: Spec | None) -> str:
    """The HloSharding text of `spec` on `mesh`, devices numbered row-major over the mesh.

    Tile dimension d holds the product of its axes' sizes; the axes no dimension names
    are the last, replicated tile dimension. The tile's devices are the iota over the
    mesh, transposed so the named axes come in the spec's order.
    """
    if spec is None or not any(spec):
        return "{replicated}"
    names = list(mesh)
    used = [a for axes in spec for a in axes]
    rest = [a for a in names if a not in used]
    tiles = [math.prod(mesh[a] for a in axes) for axes in spec]
    replicated = math.prod(mesh[a] for a in rest)
    if replicated > 1:
        tiles.append(replicated)
    perm = [names.index(a) for a in used + rest]
    devices = f"<=[{math.prod(mesh.values())}]"
    if perm != sorted(perm):
        devices = f"<=[{','.join(str(mesh[a]) for a in names)}]T({','.join(map(str, perm))})"
    last = " last_tile_dim_replicate" if replicated > 1 else ""
    return f"{{devices=[{','.join(map(str, tiles))}]{devices}{last}}}"


def _clamp_runtime_starts(main: Any) -> None:
    """Clamps each runtime start of a dynamic_update_slice to [0, size - update size]."""
    for op in all_operations(main.operation):
        if op.name != "stablehlo.dynamic_update_slice":
            continue
        operand = ir.RankedTensorType(op.operands[0].type).shape
        update = ir.RankedTensorType(op.operands[1].type).shape
        loc = unnamed(op.location)
        for dim, start in enumerate(list(op.operands)[2:]):
            room = operand[dim] - update[dim]
            if room == 0 or (isinstance(start, ir.OpResult)
                             and start.owner.name == "stablehlo.constant"):
                continue
            with ir.InsertionPoint(op), loc:
                low, high = (stablehlo_splat(start.type, bound) for bound in (0, room))
                clamped = ir.Operation.create("stablehlo.clamp", results=[start.type],
                                              operands=[low, start, high])
            op.operands[2 + dim] = clamped.result


def _scatter_without_merged_dims(main: Any) -> None:
    """Scatters into the state's own shape where the program scatters into a reshape of it
    that merges its leading dimensions and reshapes the result back (a paged pool's
    `pool.view(-1, H, D).index_copy_(0, slots, k)`): each flat index becomes one index per
    merged dimension (divide and remainder by the dimensions after it).

    Sharded over the heads with one head per device, each device's shard has a unit
    dimension, and XLA:CPU's layout assignment lays out the reshape back with that unit
    dimension elsewhere and copies the shard into the result's layout every call (JAX's own
    program does the same); the scatter into the state itself stays in place. The indices
    mean the same: one out of range (or negative) has a component out of range, and XLA
    skips such a window either way.
    """
    from torch_mlir._mlir_libs import _stablehlo

    for op in [o for o in all_operations(main.operation) if o.name == "stablehlo.scatter"]:
        if len(op.operands) != 3:
            continue
        operand, indices, _ = op.operands
        if not isinstance(operand, ir.OpResult) or operand.owner.name != "stablehlo.reshape":
            continue
        source = operand.owner.operands[0]
        whole = list(ir.RankedTensorType(source.type).shape)
        merged = list(ir.RankedTensorType(operand.type).shape)
        indices_t = ir.RankedTensorType(indices.type)
        m = len(whole) - len(merged) + 1
        numbers = _stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
        vector = numbers.index_vector_dim
        users = [use.owner for use in op.result.uses]
        if not (m >= 2 and whole[m:] == merged[1:] and math.prod(whole[:m]) == merged[0]
                and indices_t.has_static_shape
                and list(numbers.inserted_window_dims) == [0]
                and list(numbers.scattered_dims_to_operand_dims) == [0]
                and not list(numbers.input_batching_dims)
                and vector < indices_t.rank and indices_t.shape[vector] == 1
                and users and all(u.name == "stablehlo.reshape" and
                                  list(ir.RankedTensorType(u.results[0].type).shape) == whole
                                  for u in users)):
            continue
        element = indices_t.element_type
        shape = list(indices_t.shape)
        with ir.InsertionPoint(op), unnamed(op.location):
            def binary(name: str, a: Any, b: Any) -> Any:
                return ir.Operation.create(f"stablehlo.{name}", results=[indices_t],
                                           operands=[a, b]).result

            columns = []
            for d in range(m):
                column, inner = indices, math.prod(whole[d + 1:m])
                if inner > 1:
                    column = binary("divide", column, stablehlo_splat(indices_t, inner))
                if d:  # the first keeps what is out of range out of range
                    column = binary("remainder", column, stablehlo_splat(indices_t, whole[d]))
                columns.append(column)
            vector_shape = list(shape)
            vector_shape[vector] = m
            op.operands[1] = ir.Operation.create(
                "stablehlo.concatenate",
                results=[ir.RankedTensorType.get(vector_shape, element)], operands=columns,
                attributes={"dimension": ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), vector)}).result
        op.operands[0] = source
        op.attributes["scatter_dimension_numbers"] = _stablehlo.ScatterDimensionNumbers.get(
            update_window_dims=list(numbers.update_window_dims),
            inserted_window_dims=list(range(m)), input_batching_dims=[],
            scatter_indices_batching_dims=[], scattered_dims_to_operand_dims=list(range(m)),
            index_vector_dim=vector)
        op.result.set_type(source.type)
        for user in users:
            user.results[0].replace_all_uses_with(op.result)
            user.erase()
        if not list(operand.uses):
            operand.owner.erase()


def _read_placement(module: ir.Operation) -> tuple[dict[str, int], dict[int, Spec]] | None:
    """The mesh and the argument specs frontend/device_mesh.py wrote on the module (and
    taken off it), or None."""
    attributes = module.attributes
    if MESH_AXES not in attributes:
        return None
    axes = [ir.StringAttr(a).value for a in ir.ArrayAttr(attributes[MESH_AXES])]
    mesh = dict(zip(axes, ir.DenseI64ArrayAttr(attributes[MESH_SHAPE])))
    specs = {}
    for index, entry in enumerate(ir.ArrayAttr(attributes[SHARDINGS])):
        spec = tuple(tuple(ir.StringAttr(a).value for a in ir.ArrayAttr(dim))
                     for dim in ir.ArrayAttr(entry))
        if spec:
            specs[index] = spec
    for name in (MESH_AXES, MESH_SHAPE, SHARDINGS):
        del attributes[name]
    return mesh, specs


@register_pass(
    "outofplace-sharding",
    "Shard main over the device mesh the module names",
    "with a mesh (the module's `outofplace.mesh_axes`, `outofplace.mesh_shape` and "
    "`outofplace.shardings`, one spec per argument, written by frontend/device_mesh.py): "
    "`mhlo.num_partitions`, an `mhlo.sharding` on every argument (`{replicated}` where "
    "unnamed) and result (an aliased result its argument's, the others `{replicated}`), "
    "each runtime start of a `dynamic_update_slice` clamped to where the update fits, a "
    "scatter into a reshape merging the state's leading dimensions made one into the "
    "state, scatter and gather indices narrowed to 32 bits: what XLA's SPMD partitioner "
    "reads (backends/spmd); nothing without the attributes")
def sharding(module: ir.Operation) -> None:
    placement = _read_placement(module)
    if placement is None:
        return
    mesh, specs = placement
    main = next(op for op in module.regions[0].blocks[0].operations
                if op.operation.name == "func.func" and
                ir.StringAttr(op.attributes["sym_name"]).value == "main").opview
    context = module.context
    i32 = ir.IntegerType.get_signless(32, context)
    module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(
        i32, math.prod(mesh.values()))
    module.operation.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
    arguments = list(main.arguments)
    results = ir.FunctionType(main.type).results
    argument_shardings = [hlo_sharding(mesh, specs.get(i)) for i in range(len(arguments))]
    result_shardings = ["{replicated}"] * len(results)
    for result, arg in returned_state(main, io_map_of(main)).items():
        result_shardings[result] = argument_shardings[arg]
    for attr, shardings in (("arg_attrs", argument_shardings),
                            ("res_attrs", result_shardings)):
        old = list(ir.ArrayAttr(main.attributes[attr])) if attr in main.attributes \
            else [ir.DictAttr.get({}, context)] * len(shardings)
        new = []
        for entry, sharding in zip(old, shardings):
            entry = ir.DictAttr(entry)
            fields = {entry[i].name: entry[i].attr for i in range(len(entry))}
            fields["mhlo.sharding"] = ir.StringAttr.get(sharding, context)
            new.append(ir.DictAttr.get(fields, context))
        main.attributes[attr] = ir.ArrayAttr.get(new, context)
    _clamp_runtime_starts(main)
    _scatter_without_merged_dims(main)
    narrow_indices(module.operation)
