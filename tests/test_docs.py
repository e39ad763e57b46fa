"""The documentation site builds with ``mkdocs build --strict``, and holds every page it should.

Strict mode turns every warning into an error (without ``-q``: mkdocs's ``-q`` drops
warnings before strict mode counts them): a broken link, a nav entry
without a file, a docstring that mkdocstrings cannot render. The tutorials are
rendered as committed (``execute: false``); tests/test_notebooks.py runs them.
"""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Modules without an API page: the command line (its reference is ``poslens --help``) and the version constant.
NO_PAGE = {"study.cli", "version"}
#: Every module of the package, as its path below ``poslens`` ("fit.stats"); its page is docs/api/fit/stats.md.
API_MODULES = sorted(
    info.name.removeprefix("poslens.")
    for info in pkgutil.walk_packages([str(ROOT / "poslens")], prefix="poslens.")
    if not info.ispkg and info.name.removeprefix("poslens.") not in NO_PAGE
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return out


def test_strict_build(site: Path) -> None:
    assert (site / "index.html").exists()


def test_built_site_has_no_external_scripts_and_no_raw_maths(site: Path) -> None:
    """Every page works offline: no CDN script, no MathJax; the maths is MathML made at build time."""
    from test_math_rendering import _external_references

    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    bad = {str(p.relative_to(site)): refs for p in pages if (refs := _external_references(p.read_text(encoding="utf-8")))}
    assert not bad, bad
    page = (site / "methodology" / "index.html").read_text(encoding="utf-8")
    assert page.count("<math") > 100 and "arithmatex" not in page
    assert 'href="#s4.4"' in page


@pytest.mark.parametrize("page", ["quickstart", "methodology", "architecture", "benchmarks", "reliability"])
def test_pages(site: Path, page: str) -> None:
    assert (site / page / "index.html").exists()


def test_tutorials_rendered(site: Path) -> None:
    notebooks = sorted((ROOT / "docs" / "tutorials").glob("*.ipynb"))
    assert notebooks
    for nb in notebooks:
        page = site / "tutorials" / nb.stem / "index.html"
        assert page.exists(), f"{nb.name} is not rendered; add it to the nav in mkdocs.yml"
        assert "poslens" in page.read_text()


@pytest.mark.parametrize("module", API_MODULES)
def test_api_page(site: Path, module: str) -> None:
    page = site / "api" / module.replace(".", "/") / "index.html"
    assert page.exists(), f"no API page for poslens.{module}"
    html = page.read_text()
    assert f"poslens.{module}" in html
    # Doctests under "Example:" must render as code (docs/_ext/griffe_examples.py), not as
    # Markdown, where ">>> x" becomes nested block quotes and x["a"][0] a reference link.
    assert "<blockquote" not in html, f"poslens.{module}: a doctest is rendered as Markdown prose"


def _make_findings():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_findings", ROOT / "docs" / "make_findings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page, link", [("README.md", "docs/findings.md"), ("docs/index.md", "findings.md")])
def test_claims_summary_is_the_full_runs(page: str, link: str) -> None:
    # The README and the home page show the full run's claims; the table must be the one its tables give.
    findings = _make_findings()
    text = (ROOT / page).read_text(encoding="utf-8")
    want = findings.claims_summary(ROOT / "docs" / "findings_data", link)
    assert findings.replace_summary(text, want) == text, (
        f"{page}'s claims summary is stale: run .venv/bin/python docs/make_findings.py --results docs/findings_data "
        "--summary-in README.md docs/index.md"
    )
    assert "| **C1** |" in text and "supported" in text


def test_findings_linked_from_readme_and_home() -> None:
    assert "](docs/findings.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](findings.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
