"""The report page, made by `poslens report` on a tiny setting, opened in headless Chromium.

Checks: no console errors, every plotly figure rendered with non-empty plot
elements, the claims table present; saves a screenshot next to the report.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from poslens.cli import app

pytestmark = pytest.mark.embedded

TINY_REPORT = [
    "report", "--quick", "--n-seqs", "8", "--seq-len", "32", "--groups", "4",
    "--fingerprint-seqs", "8", "--fingerprint-len", "16", "--compare-seqs", "4", "--compare-len", "24",
]


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    result = CliRunner().invoke(app, TINY_REPORT + ["--out", str(out)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.fail("Debian's chromium and chromium-driver are needed (the Makefile's set-up installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,5000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


def test_report_writes_every_artifact(report_dir):
    for name in ("leakage", "sinks", "bos-swap", "ablate-sinks", "fingerprint", "compare"):
        assert (report_dir / f"{name}.parquet").exists(), name
        assert (report_dir / f"{name}.csv").exists(), name
    claims = pd.read_csv(report_dir / "claims.csv")
    assert list(claims.columns) == ["claim", "statement", "model", "figure", "ci_low", "ci_high", "rule", "verdict"]
    assert set(claims["claim"]) == {"C1", "C2", "C3", "C4", "C5", "C6"}
    assert set(claims["verdict"]) <= {"supported", "not supported", "inconclusive"}
    run = json.loads((report_dir / "run.json").read_text())
    assert run["models"] and all(m["sha256"] for name, m in run["models"].items() if name.startswith("smollm2"))
    assert set(run["timings_seconds"]) == {"leakage", "sinks", "bos-swap", "ablate-sinks", "fingerprint", "compare"}


def test_rerun_reuses_finished_parts(report_dir):
    before = {p.name: p.stat().st_mtime_ns for p in report_dir.glob("*.parquet")}
    result = CliRunner().invoke(app, TINY_REPORT + ["--out", str(report_dir)])
    assert result.exit_code == 0, result.output
    assert "computing" not in result.output and "reusing" in result.output
    assert before == {p.name: p.stat().st_mtime_ns for p in report_dir.glob("*.parquet")}


def test_report_renders_offline_without_console_errors(report_dir):
    page = report_dir / "report.html"
    text = page.read_text()
    assert "<script src=" not in text and "<link" not in text, "the page must not load external scripts or styles"
    driver = _driver()
    try:
        driver.get(page.as_uri())
        driver.implicitly_wait(5)
        plot_count = driver.execute_script("return document.querySelectorAll('.js-plotly-plot').length")
        expected = text.count('class="plotly-graph-div"')
        assert plot_count == expected >= 5
        drawn = driver.execute_script(
            "return Array.from(document.querySelectorAll('.js-plotly-plot')).map("
            "d => d.querySelectorAll('g.trace, g.hm image, image, path.point, g.bars path').length)"
        )
        assert all(n > 0 for n in drawn), drawn
        assert driver.execute_script("return document.querySelectorAll('table.claims tr').length") >= 7
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        driver.save_screenshot(str(report_dir / "report.png"))
    finally:
        driver.quit()
    assert (report_dir / "report.png").stat().st_size > 10_000
