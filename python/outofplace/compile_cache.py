"""The persistent compile cache: a second process compiling the same program reads what
the first one computed instead of computing it again (docs/api.md#compile-cache).

Two kinds of entries, each a file named by the SHA-256 of everything it depends on:

- "lowered": what outofplace's passes made of an imported program (the pipeline from
  inplace-to-outofplace to pure StableHLO), keyed by the imported torch-mlir module as
  the bindings print it with its locations, the compile options, and the versions below.
  The trace and the import still run: they give the key and the `ProgramSignature`
  (how the caller's Python values map to main's arguments), which holds live objects.
- "xla": the XLA:CPU executable of a StableHLO module (`backends/xla`), serialized by
  PJRT, keyed by the module's text, the compile options, the versions and the CPU.
- "spmd": a sharded program's executable (`backends/spmd`), serialized by jax, keyed
  by jax's lowered module, the devices, the options, the versions and the CPU.

Every key includes the versions of Python, torch, torch-mlir, jax, jaxlib, IREE, numpy and
ml_dtypes, and a hash of outofplace's own files (so an edit of a pass invalidates it too).
An entry is written to a temporary file and renamed into place, so processes writing the
same key at once are safe; one that does not read back whole (its checksum), parse or
load is ignored and compiled again, never an error.

Folder: `OUTOFPLACE_CACHE_DIR`, else `$XDG_CACHE_HOME/outofplace`, else
`~/.cache/outofplace`, created readable by its owner only: an XLA entry is native code
the process loads and runs, so the folder must be one only trusted users can write. Off
with `OUTOFPLACE_CACHE=0` or `outofplace.compile(..., cache=False)`. `stats` counts
hits, misses and writes per kind in this process.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import platform
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger("outofplace")

MAGIC = b"outofplace-cache 1\n"
# Distributions whose versions every key includes.
VERSIONED = ("torch", "torch-mlir", "jax", "jaxlib", "iree-base-compiler",
             "iree-base-runtime", "numpy", "ml_dtypes")

# "<kind> hit" / "<kind> miss" / "<kind> write" / "<kind> corrupt": this process's counts.
stats: collections.Counter = collections.Counter()


def enabled(option: bool | None = None) -> bool:
    """Whether compiles read and write the cache: `option` (compile's `cache=`) when
    given, else the environment (OUTOFPLACE_CACHE=0 turns it off)."""
    if option is not None:
        return bool(option)
    return os.environ.get("OUTOFPLACE_CACHE", "1").strip().lower() not in ("0", "false",
                                                                          "no", "off")


def directory() -> Path:
    """The cache's folder (not created until an entry is written)."""
    given = os.environ.get("OUTOFPLACE_CACHE_DIR")
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "outofplace"


@functools.cache
def versions() -> str:
    """The versions a compiled program depends on, one line each: Python's, the
    distributions of VERSIONED (absent: "-"), a digest of outofplace's own files."""
    lines = [f"python {sys.version}", f"machine {platform.machine()}"]
    for name in VERSIONED:
        try:
            lines.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"{name} -")
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".so", ".cpp", ".h") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(package)).encode() + b"\0")
            digest.update(path.read_bytes())
    lines.append(f"outofplace {digest.hexdigest()}")
    return "\n".join(lines)


def cpu() -> str:
    """What an XLA:CPU executable is compiled for: the CPU's model and feature flags, and
    the cores this process may run on (XLA splits a loop into as many parts as it has
    when compiling)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return f"{_cpu_model()}\nschedulable cores: {cores}"


@functools.cache
def _cpu_model() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    return "\n".join(sorted({line for line in info.splitlines()
                             if line.split(":")[0].strip() in wanted}))


def key(kind: str, *parts: str | bytes) -> str:
    """The entry of `kind` for `parts` (each hashed with its length: no two lists of
    parts share a key), under the versions."""
    digest = hashlib.sha256()
    for part in (kind, versions(), *parts):
        data = part.encode() if isinstance(part, str) else bytes(part)
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def _path(kind: str, entry: str) -> Path:
    return directory() / kind / entry


def read(kind: str, entry: str) -> tuple[dict, bytes] | None:
    """The entry's (metadata, blob), or None when there is none or it does not read back
    whole (then it is counted as corrupt, logged, and the caller compiles)."""
    path = _path(kind, entry)
    try:
        data = path.read_bytes()
    except OSError:
        stats[f"{kind} miss"] += 1
        return None
    try:
        if not data.startswith(MAGIC):
            raise ValueError("no header")
        checksum, body = data[len(MAGIC):len(MAGIC) + 64], data[len(MAGIC) + 64:]
        if hashlib.sha256(body).hexdigest().encode() != checksum:
            raise ValueError("checksum mismatch")
        size = int.from_bytes(body[:8], "little")
        metadata = json.loads(body[8:8 + size])
        blob = body[8 + size:]
    except Exception as error:  # a partial or foreign file: compile again
        stats[f"{kind} corrupt"] += 1
        logger.warning("outofplace compile cache: ignoring the unreadable entry %s (%s)",
                       path, error)
        return None
    stats[f"{kind} hit"] += 1
    logger.info("%s: read from the compile cache (%s)", kind, path)
    return metadata, blob


def write(kind: str, entry: str, metadata: dict, blob: bytes) -> None:
    """Writes the entry atomically (a temporary file renamed into place); a folder that
    cannot be written is logged, not raised."""
    path = _path(kind, entry)
    header = json.dumps(metadata).encode()
    body = len(header).to_bytes(8, "little") + header + blob
    data = MAGIC + hashlib.sha256(body).hexdigest().encode() + body
    try:
        path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{entry[:16]}-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as error:
        logger.warning("outofplace compile cache: could not write %s (%s)", path, error)
        return
    stats[f"{kind} write"] += 1
    logger.info("%s: written to the compile cache (%s)", kind, path)


# ---------------------------------------------------------------- the lowered program

def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _caller_level() -> int:
    """The stacklevel of a warning of `_replay`'s that names the first caller outside
    outofplace (the line calling `outofplace.compile`)."""
    package = str(Path(__file__).resolve().parent)
    frame, level = sys._getframe(2), 2  # _replay's caller
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _replay(recorded: list[tuple[str, str]]) -> None:
    """Warns again what the passes warned (an OutOfBoundsPolicyWarning at a line)."""
    level = _caller_level() if recorded else 1
    for category, message in recorded:
        module, _, name = category.partition(":")
        try:
            kind = functools.reduce(getattr, name.split("."), importlib.import_module(module))
        except Exception:
            kind = UserWarning
        warnings.warn(message, kind, stacklevel=level)


def _recorded(caught: list) -> list[tuple[str, str]]:
    return [(f"{w.category.__module__}:{w.category.__qualname__}", str(w.message))
            for w in caught]


def lowered(module: Any, entry: str | None, lower: Callable[[], tuple]) -> tuple:
    """`lower()` (outofplace's passes on `module`, in place: (module, io_map,
    input_types, result_types)) or, when the cache holds `entry`, what it returned
    then: the module parsed in the current context. The warnings of the passes are
    warned at each compile, read from the cache or not. `entry` None: no cache."""
    from torch_mlir import ir

    found = read("lowered", entry) if entry is not None else None
    if found is not None:
        metadata, blob = found
        try:
            result = (ir.Module.parse(blob), {int(a): r for a, r in metadata["io_map"]},
                      *([(tuple(shape), _torch_dtype(dtype)) for shape, dtype in types]
                        for types in (metadata["inputs"], metadata["results"])))
        except Exception as error:  # it read back whole, yet does not parse: recompile
            stats["lowered corrupt"] += 1
            logger.warning("outofplace compile cache: ignoring the entry %s (%s)",
                           entry, error)
        else:
            _replay([tuple(w) for w in metadata["warnings"]])
            return result
    caught: list = []
    try:  # (the filters in force decide what is recorded)
        with warnings.catch_warnings(record=True) as caught:
            result = lower()
    except BaseException:  # a refusal: the warnings before it are warned all the same
        _replay(_recorded(caught))
        raise
    recorded = _recorded(caught)
    if entry is not None:
        module, io_map, input_types, result_types = result
        import io

        bytecode = io.BytesIO()
        module.operation.write_bytecode(bytecode)
        write("lowered", entry, {
            "io_map": sorted(io_map.items()),
            "inputs": [(list(s), _dtype_name(d)) for s, d in input_types],
            "results": [(list(s), _dtype_name(d)) for s, d in result_types],
            "warnings": recorded}, bytecode.getvalue())
    _replay(recorded)
    return result


def lowered_key(module: Any, options: dict[str, Any]) -> str:
    """The "lowered" entry of an imported module under compile's `options` (their
    reprs: check_bounds, engine, mesh, shardings, dynamic_shapes...)."""
    text = module.operation.get_asm(enable_debug_info=True)
    return key("lowered", text, repr(sorted(options.items())))
