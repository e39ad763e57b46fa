"""Load the repository's scripts (benchmarks, docs builders) as modules, so tests can call their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[1]


def load_script(relative_path: str) -> ModuleType:
    """Import the script at ``relative_path`` (from the repository root) as a module named after its file.

    The script's folder goes on ``sys.path`` first, as when the script runs, so that it can import its neighbours
    (``benchmarks/groups_tradeoff.py`` takes its helpers from ``benchmarks/bench_notebook.py``).

    Args:
        relative_path: e.g. ``"benchmarks/notebook_phases.py"``.

    Returns:
        The executed module.

    Example:
        >>> load_script("benchmarks/groups_tradeoff.py").WIDTH_METRICS
        ('leakage_pattern', 'c_res', 'c_mask')
    """
    path = ROOT / relative_path
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
