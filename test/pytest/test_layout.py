"""The package reads as the pipeline: stage folders, data flowing one way.

frontend (torch program -> mutable torch IR) -> transforms (MLIR passes) -> backends
(engines and exports). The modules at the top are the public API and what runs it
(compiled, program, call_checks, call_outputs, bounds, families, dynamo) and what every
stage shares (compile_cache, context, errors, indexing, ir_utils, memory,
op_registry, progress, signature (the runtime contract), symbolic_sizes, torch_types).
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "outofplace"
STAGES = {"frontend": 1, "transforms": 2, "backends": 3}
SHARED = {"compile_cache", "context", "errors", "indexing", "ir_utils", "kernels",
          "memory", "op_registry", "progress", "signature", "symbolic_sizes", "torch_types"}


def _imports() -> dict[str, set[str]]:
    """Module name -> the package's modules it imports (relative imports, at any depth)."""
    files = {".".join(p.relative_to(PACKAGE).with_suffix("").parts): p
             for p in PACKAGE.rglob("*.py")}
    modules = {name.removesuffix(".__init__").removesuffix("__init__") for name in files}
    graph = {}
    for name, path in files.items():
        module = name.removesuffix(".__init__").removesuffix("__init__")
        parts = name.split(".")[:-1]  # the package the file is in
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = parts[:len(parts) - node.level + 1] + (
                    node.module.split(".") if node.module else [])
                for alias in node.names:
                    target = ".".join(base + [alias.name])
                    deps.add(target if target in modules else ".".join(base))
        graph[module] = deps & modules - {module}
    return graph


def _stage(module: str) -> int | None:
    return STAGES.get(module.split(".")[0])


def test_no_import_cycle():
    graph = _imports()
    done, path = set(), []

    def visit(module):
        assert module not in path, f"import cycle: {' -> '.join(path + [module])}"
        if module in done:
            return
        path.append(module)
        for dep in sorted(graph[module]):
            visit(dep)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def test_no_stage_imports_a_later_one():
    for module, deps in _imports().items():
        stage = _stage(module)
        if stage is None:
            continue
        for dep in deps:
            if dep.split(".")[0] in SHARED or dep == "":
                continue
            assert _stage(dep) is not None and _stage(dep) <= stage, \
                f"{module} (a stage) imports {dep}"


def test_shared_modules_import_no_stage():
    for module, deps in _imports().items():
        if module in SHARED:
            assert all(dep in SHARED for dep in deps), f"{module} imports {deps - SHARED}"
