"""No module of poslens over 600 lines unless its docstring says why, and the command line's wiring under 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "poslens"
LIMIT = 600


def test_no_module_is_over_the_limit_without_a_reason():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if lines > LIMIT and "Longer than" not in docstring:
            bad.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines, and its docstring does not say why")
    assert not bad, "\n".join(bad)


def test_the_cli_is_wiring_under_the_limit():
    assert (PACKAGE / "study" / "cli.py").read_text(encoding="utf-8").count("\n") < LIMIT
