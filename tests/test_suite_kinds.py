"""The suite's kinds of test (tests/suite_kinds.py): every test gets one kind marker, and the browser guard skips or fails.

The guard is run with a stub in place of :func:`shutil.which`, with and without
``POSLENS_REQUIRE_BROWSER=1``: without the flag a missing browser skips the test
with its reason, with it (``make test``) the same absence is a failure.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from suite_kinds import DEFAULT_KIND, FILE_KINDS, KINDS, REQUIRE_BROWSER, SLOW_TESTS, kind_of, require_browser

ROOT = Path(__file__).resolve().parents[1]


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


def test_kinds_by_file():
    assert kind_of("tests/test_sums.py", embedded=False) == DEFAULT_KIND == "unit"
    assert kind_of("tests/test_sums.py", embedded=True) == "integration"
    # a file's own kind wins over embedded: the browser test uses the embedded models, and is a browser test
    assert kind_of("tests/test_report_browser.py", embedded=True) == "browser"
    assert kind_of("tests/test_notebooks.py", embedded=True) == "notebooks"


def test_every_slow_test_exists_and_is_integration():
    for key, kind in SLOW_TESTS.items():
        name, function = key.split("::")
        assert kind == "integration" and name not in FILE_KINDS, key
        assert f"def {function}(" in (ROOT / "tests" / name).read_text(encoding="utf-8"), f"SLOW_TESTS names {key}, which is not there"
        assert kind_of(f"tests/{name}", embedded=False, function=function) == "integration"
        assert kind_of(f"tests/{name}", embedded=False, function=function + "_other") == "unit"


def test_every_listed_file_exists_and_every_kind_is_registered(pytestconfig: pytest.Config):
    assert set(FILE_KINDS.values()) <= set(KINDS)
    missing = sorted(name for name in FILE_KINDS if not (ROOT / "tests" / name).exists())
    assert not missing, f"suite_kinds.FILE_KINDS names files that are not in tests/: {missing}"
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
