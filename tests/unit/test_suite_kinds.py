"""The suite's kinds of test (tests/suite_kinds.py): the kind is the folder, every test gets one kind marker, and the browser guard skips or fails.

The guard is run with a stub in place of :func:`shutil.which`, with and without
``POSLENS_REQUIRE_BROWSER=1``: without the flag a missing browser skips the test
with its reason, with it (``make test``) the same absence is a failure.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from suite_kinds import DEFAULT_KIND, KINDS, REQUIRE_BROWSER, kind_of, require_browser

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def nothing_installed(name: str) -> None:
    return None


def only_chromium(name: str) -> str | None:
    return "/usr/bin/chromium" if name == "chromium" else None


def test_a_missing_browser_skips_with_the_reason():
    with pytest.raises(pytest.skip.Exception, match="chromium and chromedriver not installed.*make setup installs them"):
        require_browser(environ={}, which=nothing_installed)
    with pytest.raises(pytest.skip.Exception, match="^chromedriver not installed"):
        require_browser(environ={REQUIRE_BROWSER: "0"}, which=only_chromium)


def test_the_flag_turns_the_skip_into_a_failure():
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_BROWSER}=1 \\(make test\\) but chromedriver not installed"):
        require_browser(environ={REQUIRE_BROWSER: "1"}, which=only_chromium)


def test_a_present_browser_passes_with_or_without_the_flag():
    def both(name: str) -> str:
        return f"/opt/{name}"

    for environ in ({}, {REQUIRE_BROWSER: "1"}):
        assert require_browser(environ=environ, which=both) == ("/opt/chromium", "/opt/chromedriver")


def test_kinds_by_folder():
    assert kind_of("unit/fit/test_sums.py", embedded=False) == DEFAULT_KIND == "unit"
    assert kind_of("unit/test_version.py", embedded=False) == "unit"
    # a unit test that uses an embedded model, or is marked integration in its source, is integration
    assert kind_of("unit/fit/test_sums.py", embedded=True) == "integration"
    assert kind_of("unit/fit/test_sums.py", embedded=False, marked_integration=True) == "integration"
    assert kind_of("integration/test_zoo.py", embedded=False) == "integration"
    # a folder's own kind wins over embedded: the browser test uses the embedded models, and is a browser test
    assert kind_of("browser/test_report_browser.py", embedded=True) == "browser"
    assert kind_of("notebooks/test_notebooks.py", embedded=True) == "notebooks"
    assert kind_of("docs/test_docs.py", embedded=False) == "docs"


def test_a_file_outside_the_kind_folders_or_a_docs_test_marked_integration_is_refused():
    with pytest.raises(pytest.UsageError, match=r"tests/test_new\.py lies in no kind folder: move it into tests/unit/<area>/"):
        kind_of("test_new.py", embedded=False)
    with pytest.raises(pytest.UsageError, match="lies in no kind folder"):
        kind_of("slow/test_new.py", embedded=False)
    with pytest.raises(pytest.UsageError, match="only a unit test can be marked integration"):
        kind_of("docs/test_docs.py", embedded=False, marked_integration=True)


def test_every_test_file_lies_in_a_kind_folder_with_a_unique_name():
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 50
    outside = [path.relative_to(TESTS).as_posix() for path in files if path.relative_to(TESTS).parts[0] not in KINDS]
    assert not outside, f"test files outside the kind folders {KINDS}: {outside}"
    names = [path.name for path in files]
    assert len(names) == len(set(names)), "test file base names must be unique across tests/ (pytest imports each by its name)"
    assert not list(TESTS.rglob("__init__.py"))


def test_the_unit_folders_mirror_the_package():
    areas = {path.name for path in (TESTS / "unit").iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert areas, "tests/unit has no area folder"
    for area in sorted(areas):
        assert (ROOT / "poslens" / area / "__init__.py").exists(), f"tests/unit/{area}/ names no subpackage of poslens"


def test_only_unit_and_integration_tests_are_marked_integration():
    for kind in set(KINDS) - {"unit", "integration"}:
        for path in (TESTS / kind).rglob("test_*.py"):
            assert "@pytest.mark.integration" not in path.read_text(encoding="utf-8"), path


@pytest.mark.integration
def test_an_explicit_mark_makes_this_unit_test_integration(request: pytest.FixtureRequest):
    assert [kind for kind in KINDS if request.node.get_closest_marker(kind)] == ["integration"]


def test_every_test_the_docs_cite_exists():
    """A test cited as tests/<path>.py, test_x.py or test_x.py::test_y in the docs and CONTRIBUTING is there."""
    files = {path.name: path for path in TESTS.rglob("test_*.py")}
    pages = [ROOT / "CONTRIBUTING.md", ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    stale = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"(?<![\w./-])(tests/[\w/]+\.py)\b", text):
            if not (ROOT / path).exists():
                stale.append(f"{page.relative_to(ROOT)}: {path}")
        for name, function in re.findall(r"(?<![\w-])(test_\w+\.py)(?:::(test_\w+))?", text):
            if name not in files:
                stale.append(f"{page.relative_to(ROOT)}: {name}")
            elif function and f"def {function}(" not in files[name].read_text(encoding="utf-8"):
                stale.append(f"{page.relative_to(ROOT)}: {name}::{function}")
    assert not stale, f"the docs cite tests that are not there: {stale}"


def test_every_kind_is_registered(pytestconfig: pytest.Config):
    registered = {line.split(":")[0] for line in pytestconfig.getini("markers")}  # pyproject's [tool.pytest.ini_options]
    assert set(KINDS) | {"embedded", "tl3"} <= registered


def test_this_test_has_its_kind_marker(request: pytest.FixtureRequest):
    kinds = [kind for kind in KINDS if request.node.get_closest_marker(kind)]
    assert kinds == ["unit"]


def test_the_makefile_runs_unit_tests_fast_and_requires_the_browser_in_make_test():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    fast = re.search(r"^test-fast:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert fast and "-m unit" in fast.group(1)
    full = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert full and f"{REQUIRE_BROWSER}=1" in full.group(1)
    # make test leaves the slow integration tests to make test-integration, which runs every one of them
    assert full.group(1).count('-m "not integration') == 2
    integration = re.search(r"^test-integration:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert integration and "-m integration" in integration.group(1) and '-m "integration and' in integration.group(1)
    # the TransformerLens 3.9 pass names its files by path: every one is there
    listed = re.search(r"^TL3_TESTS := ((?:.*\\\n)*.*)$", makefile, re.M)
    assert listed
    for path in listed.group(1).replace("\\", " ").split():
        assert (ROOT / path).exists(), f"the Makefile's TL3_TESTS names {path}, which is not there"
