"""Every docstring example in the package runs and prints what it says.

The examples are the API reference's usage lines (docs/api/); an example whose
printed value went stale would mislead a reader. Examples that need an
embedded model or a GPU are marked ``# doctest: +SKIP``; the rest run here,
many of them on tiny models saved to temporary folders.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import poslens

MODULES = sorted(["poslens"] + [info.name for info in pkgutil.walk_packages(poslens.__path__, prefix="poslens.") if not info.ispkg])
#: Modules with no example that runs here: the CLI's examples are shell commands; the others' need a
#: measured result of an embedded model. Every other module must run at least one example.
NOTHING_RUNS = {"poslens.study.cli", "poslens.mechanisms.effects", "poslens.measurement.plots"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples in {name} failed (printed above)"
    if name not in NOTHING_RUNS:
        assert result.attempted > 0, f"no docstring example of {name} runs (all are skipped or there are none)"
