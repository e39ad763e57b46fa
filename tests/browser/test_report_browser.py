"""The report page, made by `poslens report` on a tiny setting, opened in headless Chromium.

Checks: no console errors, every plotly figure rendered with non-empty plot
elements, the claims table present; the verdict summary's badges, and a rule
disclosure that a click opens. Saves screenshots next to the report and, for a
person to look at, under ``/tmp/screens`` (``report_top.png``, ``report_full.png``).

The two tests that open the page skip, with the reason, where chromium,
chromedriver or selenium is missing; under ``POSLENS_REQUIRE_BROWSER=1``
(``make test``) they fail instead (:func:`suite_kinds.require_browser`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from suite_kinds import require_browser
from typer.testing import CliRunner

from poslens.study.claims.table import CLAIM_COLUMNS, INPUT_COLUMNS
from poslens.study.cli import app

pytestmark = pytest.mark.embedded

TINY_REPORT = [
    "report",
    "--quick",
    "--n-seqs",
    "8",
    "--seq-len",
    "32",
    "--groups",
    "4",
    "--fingerprint-seqs",
    "8",
    "--fingerprint-len",
    "16",
    "--compare-seqs",
    "4",
    "--compare-len",
    "24",
]


@pytest.fixture(scope="module")
def browser() -> tuple[str, str]:
    """The paths of chromium and chromedriver, checked before the report is made (skip or fail: :func:`require_browser`)."""
    return require_browser()


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    result = CliRunner().invoke(app, TINY_REPORT + ["--out", str(out)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out


def _driver(browser: tuple[str, str]):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = browser
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,5000",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


def test_report_writes_every_artifact(report_dir):
    for name in ("leakage", "sinks", "bos-swap", "ablate-sinks", "fingerprint", "compare", "path-tests", "sink-split"):
        assert (report_dir / f"{name}.parquet").exists(), name
        assert (report_dir / f"{name}.csv").exists(), name
    claims = pd.read_csv(report_dir / "claims.csv")
    assert list(claims.columns) == CLAIM_COLUMNS
    assert list(pd.read_csv(report_dir / "claim_inputs.csv").columns) == INPUT_COLUMNS
    assert set(claims["claim"]) == {"C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8"}
    # C7 reads the relativize part, which the report runs only when its plan holds it
    measured = claims[claims["claim"] != "C7"] if "relativize" not in json.loads((report_dir / "run.json").read_text())["timings_seconds"] else claims
    assert set(measured["verdict"]) <= {"supported", "not supported", "inconclusive"}
    run = json.loads((report_dir / "run.json").read_text())
    assert run["models"] and all(m["sha256"] for name, m in run["models"].items() if name.startswith("smollm2"))
    parts = {"leakage", "sinks", "bos-swap", "ablate-sinks", "fingerprint", "relativize", "compare", "comparisons", "path-tests", "sink-split"}
    assert set(run["timings_seconds"]) == parts and set(run["parts"]) == parts
    assert run["parts"]["relativize"] == "relativize.parquet" and run["parts"]["comparisons"] == "comparisons.parquet"


def test_rerun_reuses_finished_parts(report_dir):
    before = {p.name: p.stat().st_mtime_ns for p in report_dir.glob("*.parquet")}
    result = CliRunner().invoke(app, TINY_REPORT + ["--out", str(report_dir)])
    assert result.exit_code == 0, result.output
    assert "computing" not in result.output and "reusing" in result.output
    assert before == {p.name: p.stat().st_mtime_ns for p in report_dir.glob("*.parquet")}


def test_report_notes_the_4bit_weights_of_the_embedded_models(report_dir):
    text = (report_dir / "report.html").read_text()
    note = "Figures from smollm2-135m and gemma3-270m come from 4-bit quantized (GGUF) weights dequantized to float32."
    assert f'<p class="note">{note}</p>' in text
    # the captions of the twelve smollm2-only figures (C1 heatmap, C2 and C3 by layer, C3 sinks, C3's three path-specific
    # figures: probe R² by edit, the split, the doses; C5 reductions, C6 fingerprint, C7 attribution and loss change;
    # C8's sink split) name smollm2 alone
    assert text.count("Figures from smollm2-135m come from 4-bit quantized") == 12


def test_report_renders_offline_without_console_errors(browser, report_dir):
    page = report_dir / "report.html"
    text = page.read_text()
    assert "<script src=" not in text and "<link" not in text, "the page must not load external scripts or styles"
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _driver(browser)
    try:
        driver.get(page.as_uri())
        expected = text.count('class="plotly-graph-div"')
        assert expected >= 5
        # implicitly_wait does not apply to execute_script: poll until every figure div has become a plotly
        # plot and each has drawn its elements (traces, heatmap images, points, bars), or give up after 30 s.
        count_drawn = (
            "return Array.from(document.querySelectorAll('.js-plotly-plot')).map("
            "d => d.querySelectorAll('g.trace, g.hm image, image, path.point, g.bars path').length)"
        )
        seen: list = []

        def all_drawn(drv) -> bool:
            seen[:] = [drv.execute_script(count_drawn)]
            return len(seen[0]) == expected and all(n > 0 for n in seen[0])

        try:
            WebDriverWait(driver, 30, poll_frequency=0.25).until(all_drawn)
        except TimeoutException:
            pytest.fail(f"after 30 s, element counts per plot: {seen[0] if seen else None} (expected {expected} plots, each > 0)")
        drawn = driver.execute_script(count_drawn)
        assert len(drawn) == driver.execute_script("return document.querySelectorAll('.js-plotly-plot').length") == expected
        assert all(n > 0 for n in drawn), drawn
        assert driver.execute_script("return document.querySelectorAll('table.claims tr').length") >= 7
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        driver.save_screenshot(str(report_dir / "report.png"))
    finally:
        driver.quit()
    assert (report_dir / "report.png").stat().st_size > 10_000


SCREENS = Path("/tmp/screens")


def test_report_summary_badges_and_a_rule_opened_by_a_click(browser, report_dir):
    from selenium.webdriver.common.by import By

    claims = pd.read_csv(report_dir / "claims.csv")
    driver = _driver(browser)
    try:
        driver.set_window_size(1400, 1000)
        driver.get((report_dir / "report.html").as_uri())
        summary = driver.find_element(By.CSS_SELECTOR, "table.summary")
        # the summary is what the reader meets first: above every figure and the long claims table
        first_figure = driver.find_element(By.CSS_SELECTOR, ".js-plotly-plot")
        assert summary.location["y"] < first_figure.location["y"]
        assert summary.location["y"] < driver.find_element(By.CSS_SELECTOR, "table.claims").location["y"]
        assert summary.location["y"] < 1000, "the summary starts within the first screen"
        rows = summary.find_elements(By.CSS_SELECTOR, "tr.verdict-row")
        cases = claims.assign(case=claims["group"])
        assert len(rows) == len(cases[["claim", "case"]].drop_duplicates()) >= 6
        for row in rows:
            badges = row.find_elements(By.CSS_SELECTOR, ".badge")
            assert len(badges) == 1 and badges[0].is_displayed()
            verdict = badges[0].text
            claim = row.get_attribute("data-claim")
            # the badge is the row's own verdict (its comparisons alone; for C4 the claim's verdict stands beside it)
            assert verdict in set(claims.loc[claims["claim"] == claim, "own_verdict"]), (claim, verdict)
            assert verdict.replace(" ", "-") in badges[0].get_attribute("class").split()
            colour = badges[0].value_of_css_property("background-color")
            assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), colour
        # one disclosure: the rule is hidden, a click on its summary shows it, with the words claims.csv holds
        first = rows[0]
        details = first.find_element(By.CSS_SELECTOR, "details.rule")
        rule_text = first.find_element(By.CSS_SELECTOR, "details.rule .rule-text")
        assert details.get_attribute("open") is None and not rule_text.is_displayed()
        SCREENS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENS / "report_top.png"))
        first.find_element(By.CSS_SELECTOR, "details.rule > summary").click()
        assert details.get_attribute("open") is not None and rule_text.is_displayed()
        rule = claims.loc[claims["claim"] == first.get_attribute("data-claim"), "rule"].iloc[0]
        assert rule in rule_text.text
        # the whole page, every figure drawn, for a person to look at
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1400, height + 100)
        time.sleep(2)
        driver.save_screenshot(str(SCREENS / "report_full.png"))
    finally:
        driver.quit()
    assert (SCREENS / "report_top.png").stat().st_size > 10_000 and (SCREENS / "report_full.png").stat().st_size > 10_000
