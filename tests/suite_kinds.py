"""The kinds of test in this suite, and the browser guard: which marker each test gets, and when a missing browser skips.

Every test gets exactly one kind marker, assigned in ``conftest.py`` from the first folder under ``tests/`` that holds
its file:

- ``unit/``: fast tests on synthetic data and tiny random models (``make test-fast`` runs these alone), in
  ``tests/unit/<area>/`` after the subpackage of poslens they test (``tests/unit/`` itself for the top-level modules
  and the suite's own checks). Two kinds of unit test are ``integration`` instead: a test that uses an embedded 4-bit
  model (it keeps the ``embedded`` marker as well), and a single slow test marked ``@pytest.mark.integration`` in its
  source;
- ``integration/``: end to end, slow: the whole commands (the wheel build, torchrun, the zoo's training), the
  compatibility matrix and the dense references on tiny models;
- ``notebooks/``: the tutorial notebooks and notebooks run in a real Jupyter kernel;
- ``docs/``: the docs site build, the API pages, the docstrings and their examples, the maths and the § references;
- ``browser/``: the report opened in headless Chromium.

Select with ``pytest -m unit``, ``-m "not integration"``, ``-m docs`` and so on. The helpers (this module,
``conftest.py``, the independent references, the compatibility matrix) stay in ``tests/``, on ``sys.path`` from
every folder (pyproject's ``pythonpath``); test files have no ``__init__.py``, so their base names are unique.

A test that needs a browser calls :func:`require_browser`: it skips with the reason where no chromium or
chromedriver is installed, and fails instead when ``POSLENS_REQUIRE_BROWSER=1`` (``make test`` sets it, so a
machine that has the browser cannot pass the suite by skipping the browser test).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

KINDS = ("unit", "integration", "notebooks", "docs", "browser")
DEFAULT_KIND = "unit"
REQUIRE_BROWSER = "POSLENS_REQUIRE_BROWSER"


def kind_of(path: str | Path, embedded: bool, marked_integration: bool = False) -> str:
    """The kind marker of a test in the file ``path``: its first folder under ``tests/``.

    Args:
        path: the test file, relative to ``tests/`` (``unit/fit/test_sums.py``).
        embedded: whether the test uses an embedded model (has the ``embedded`` marker).
        marked_integration: whether the test carries ``@pytest.mark.integration`` in its source.

    Returns:
        One of :data:`KINDS`: the folder's kind, except ``integration`` for a test of ``unit/`` that is embedded or
        marked integration.

    Raises:
        pytest.UsageError: the file lies in no kind folder, or a test outside ``unit/`` and ``integration/`` is marked
            integration.

    Example:
        >>> kind_of("unit/fit/test_sums.py", embedded=False), kind_of("unit/fit/test_sums.py", embedded=True)
        ('unit', 'integration')
        >>> kind_of("docs/test_docs.py", embedded=False)
        'docs'
    """
    parts = Path(path).parts
    kind = parts[0] if len(parts) > 1 else ""
    if kind not in KINDS:
        raise pytest.UsageError(
            f"tests/{Path(path).as_posix()} lies in no kind folder: move it into tests/unit/<area>/ (the subpackage "
            f"it tests) or tests/{{{','.join(KINDS[1:])}}}/ (see tests/suite_kinds.py)"
        )
    if marked_integration and kind not in ("unit", "integration"):
        raise pytest.UsageError(f"tests/{Path(path).as_posix()} is a {kind} test; only a unit test can be marked integration")
    return "integration" if kind == DEFAULT_KIND and (embedded or marked_integration) else kind


def require_browser(environ: Mapping[str, str] = os.environ, which: Callable[[str], str | None] = shutil.which) -> tuple[str, str]:
    """The paths of chromium and chromedriver; skip the calling test where either (or selenium) is missing.

    Args:
        environ: the environment to read :data:`REQUIRE_BROWSER` from.
        which: finds a program on the PATH (:func:`shutil.which`; a test passes a stub).

    Returns:
        ``(chromium, chromedriver)``, the two paths.

    Raises:
        pytest.skip.Exception: something the browser test needs is missing, and ``POSLENS_REQUIRE_BROWSER`` is not ``1``.
        pytest.fail.Exception: something is missing and ``POSLENS_REQUIRE_BROWSER=1`` (``make test``).

    Example:
        >>> require_browser(which=lambda name: f"/usr/bin/{name}")
        ('/usr/bin/chromium', '/usr/bin/chromedriver')
    """
    found = {name: which(name) for name in ("chromium", "chromedriver")}
    missing = [name for name, path in found.items() if not path]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium")
    if missing:
        reason = (
            f"{' and '.join(missing)} not installed: the browser test needs Debian's chromium and chromium-driver "
            "and the selenium package (make setup installs them)"
        )
        if environ.get(REQUIRE_BROWSER) == "1":
            pytest.fail(f"{REQUIRE_BROWSER}=1 (make test) but {reason}", pytrace=False)
        pytest.skip(reason)
    return found["chromium"], found["chromedriver"]
