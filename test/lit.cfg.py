# -*- Python -*-
"""lit configuration: .mlir tests through outofplace-opt, .py tests from torch to IR."""

import os
import sys

import lit.formats

config.name = "outofplace"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "pytest", "fuzz", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"
config.environment["PATH"] = os.pathsep.join(
    [os.path.dirname(sys.executable), os.environ.get("PATH", "")])
# The package of this tree, not whichever one the venv installed (lit passes no
# PYTHONPATH of its own through).
config.environment["PYTHONPATH"] = os.pathsep.join(
    [os.path.join(os.path.dirname(os.path.dirname(__file__)), "python"),
     os.environ.get("PYTHONPATH", "")])
config.substitutions.append(("%PYTHON", sys.executable))
config.substitutions.append((r"\bFileCheck\b", "filecheck"))
