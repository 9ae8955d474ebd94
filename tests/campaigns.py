"""The campaign tools (``tools/fuzz_import.py``, ``tools/crash_matrix.py``,
``tools/search_differential.py``) as modules, for the seeded fast subsets in
``tests/test_fuzz_import.py``, ``tests/test_crash_matrix.py`` and
``tests/analysis/test_search_differential.py``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

fuzz_import = importlib.import_module("fuzz_import")
crash_matrix = importlib.import_module("crash_matrix")
search_differential = importlib.import_module("search_differential")
