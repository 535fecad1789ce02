"""The files a backend compiler takes: portable artifact, HLO module proto, io_map.json."""

from __future__ import annotations

import json
from pathlib import Path
from torch_mlir._mlir_libs import _stablehlo

from . import xla

# The StableHLO version jaxlib 0.10.2 reads; torch-mlir's own (1.19) is newer.
DEFAULT_TARGET = "1.17.0"


def portable_artifact(stablehlo: str, target: str = DEFAULT_TARGET) -> bytes:
    """StableHLO as versioned (VHLO) bytecode that consumers of `target` can read."""
    return _stablehlo.serialize_portable_artifact_str(stablehlo, target)


def io_map_json(input_names: list[str], result_count: int, io_map: dict[int, int]) -> dict:
    """Argument and result names, and which argument each aliased result updates."""
    results = [f"output_{i}" for i in range(result_count)]
    for arg, result in io_map.items():
        results[result] = f"{input_names[arg]}_modified"
    return {
        "inputs": input_names,
        "outputs": results,
        "aliases": [{"input": arg, "input_name": input_names[arg],
                     "output": result} for arg, result in sorted(io_map.items())],
    }


def save(directory: str | Path, text: str, names: dict, target: str = DEFAULT_TARGET, *,
         hlo_proto: bool = True) -> list[Path]:
    """Writes main.mlir, main.mlirbc, main.hlo.pb (when jax is installed and `hlo_proto`),
    io_map.json (`names`, from `io_map_json`) for the StableHLO `text`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "main.mlir", out / "main.mlirbc", out / "io_map.json"]
    written[0].write_text(text)
    written[1].write_bytes(portable_artifact(text, target))
    written[2].write_text(json.dumps(names, indent=2) + "\n")
    if hlo_proto and xla.available():
        proto = out / "main.hlo.pb"
        proto.write_bytes(xla.hlo_module_proto(text))
        written.append(proto)
    return written
