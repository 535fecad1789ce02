"""The fuzzer reuses the differential helpers of test/pytest."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pytest"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
