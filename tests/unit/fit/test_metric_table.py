"""The tests' one copy of the metric table (tests/metric_table.py) stays independent of poslens, and agrees with it.

The references (naive_reference.py, the reference tests) read their metric names
and share relations from metric_table.py; a copy that imported poslens's own
lists would agree with the package by construction, and check nothing.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))
import metric_table  # noqa: E402

HERE = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """The top-level names of the modules a Python file imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    return {name.split(".")[0] for name in names}


def test_the_table_imports_nothing_of_poslens():
    assert imported_modules(HERE / "metric_table.py") <= {"__future__"}


def test_the_relations_hold_within_the_table():
    per_head = set(metric_table.PER_HEAD)
    assert len(per_head) == len(metric_table.PER_HEAD)
    for share, (numerator, denominator) in metric_table.SHARES.items():
        assert {share, numerator, denominator} <= per_head, share
    assert set(metric_table.ADDITIVE) == per_head - set(metric_table.SHARES)
    assert set(metric_table.PER_SEQUENCE) <= per_head and set(metric_table.SATURATED) <= per_head
    assert set(metric_table.DECOMPOSITION) <= per_head


def test_the_package_names_every_metric_of_the_table():
    """Every figure of the table has a glossary entry, and poslens aggregates exactly the table's shares as ratios."""
    from poslens.fit.metric_glossary import GLOSSARY
    from poslens.fit.metrics import RATIOS

    assert not set(metric_table.PER_HEAD) - set(GLOSSARY)
    assert dict(RATIOS) == metric_table.SHARES


def test_the_references_use_the_one_copy():
    """No helper of tests/ defines the share relations a second time."""
    relation = '"rho_mask_meanfield": ("c_mask_meanfield", "leakage_pattern")'
    restated = [
        path.name
        for path in sorted(HERE.rglob("*.py"))
        if path.name not in ("metric_table.py", Path(__file__).name) and relation in path.read_text(encoding="utf-8")
    ]
    assert not restated, f"these files restate the metric table's shares; import them from metric_table.py: {restated}"
