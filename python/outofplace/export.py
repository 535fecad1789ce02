"""The files a backend compiler takes: portable artifact, HLO module proto, io_map.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from torch_mlir._mlir_libs import _stablehlo

from . import xla

if TYPE_CHECKING:
    from .compiled import Compiled

# The StableHLO version jaxlib 0.10.2 reads; torch-mlir's own (1.19) is newer.
DEFAULT_TARGET = "1.17.0"


def portable_artifact(stablehlo: str, target: str = DEFAULT_TARGET) -> bytes:
    """StableHLO as versioned (VHLO) bytecode that consumers of `target` can read."""
    return _stablehlo.serialize_portable_artifact_str(stablehlo, target)


def io_map_json(compiled: "Compiled") -> dict:
    """Argument and result names, and which argument each aliased result updates."""
    results = [f"output_{i}" for i in range(len(compiled.result_dtypes))]
    for arg, result in compiled.io_map.items():
        results[result] = f"{compiled.input_names[arg]}_modified"
    return {
        "inputs": compiled.input_names,
        "outputs": results,
        "aliases": [{"input": arg, "input_name": compiled.input_names[arg],
                     "output": result} for arg, result in sorted(compiled.io_map.items())],
    }


def save(compiled: "Compiled", directory: str | Path, target: str = DEFAULT_TARGET, *,
         hlo_proto: bool = True) -> list[Path]:
    """Writes main.mlir, main.mlirbc, main.hlo.pb (when jax is installed and `hlo_proto`),
    io_map.json."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    text = compiled.stablehlo
    written = [out / "main.mlir", out / "main.mlirbc", out / "io_map.json"]
    written[0].write_text(text)
    written[1].write_bytes(portable_artifact(text, target))
    written[2].write_text(json.dumps(io_map_json(compiled), indent=2) + "\n")
    if hlo_proto and xla.available():
        proto = out / "main.hlo.pb"
        proto.write_bytes(xla.hlo_module_proto(text))
        written.append(proto)
    return written
