"""Stage 2: passes on MLIR, from mutable torch IR to pure StableHLO.

One pass a module (`inplace_to_outofplace`, `empty_tensors`, `diagonal`, `lower_updates`,
`constant_folding`, `lowering`), each tested by the lit test of its pass name;
`pipelines` registers them by name and mixes them with MLIR's own passes.
"""
