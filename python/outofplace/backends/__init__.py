"""Stage 3: running and exporting pure StableHLO.

`interpreter` (StableHLO's reference interpreter), `xla` (XLA:CPU through jaxlib, and the
HLO module proto), `export` (portable artifact, `save`). Backends read StableHLO; they
import nothing from the stages before them but the checks those stages define.
"""
