"""Stage 3: running and exporting pure StableHLO.

`interpreter` (StableHLO's reference interpreter), `xla` (XLA:CPU through jaxlib, and the
HLO module proto), `iree` (IREE's llvm-cpu backend), `export` (portable artifact, `save`),
`hlo_proto` (the aliases of an HLO module proto). Each backend has its alias check.
Backends read StableHLO; they import nothing from the stages before them but the checks
those stages define.
"""
