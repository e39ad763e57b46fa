"""Draw the findings page's figures (``docs/img/findings/*.png``) from the tables of a ``poslens report`` run folder.

Usage::

    .venv/bin/python docs/make_findings_figures.py [--results docs/findings_data] [--out docs/img/findings]

Each figure is drawn by poslens's own plotting functions (:mod:`poslens.measurement.plots`,
the ones the HTML report uses) from the same tables that ``docs/make_findings.py``
reads, written as a standalone HTML page with plotly.js inline, and captured
with headless Chromium (Debian's ``chromium`` and ``chromedriver``): no network
and no kaleido are needed. A figure whose tables are not in the run folder is
skipped and named. ``docs/make_findings.py`` embeds the PNGs it finds in the
output folder (:data:`FIGURES` gives their names).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from plotly.graph_objects import Figure

sys.path.insert(0, str(Path(__file__).parent))
from make_findings import load_parts, read_attribution, recorded_models  # noqa: E402

from poslens.measurement import intervention_plots, path_plots, plots  # noqa: E402
from poslens.measurement.result import Result  # noqa: E402
from poslens.mechanisms.comparisons import comparison_table  # noqa: E402


def _compare_rows(parts: dict[str, Any], keep: Callable[[str, str], bool]) -> pd.DataFrame | None:
    """The compare table's rows of the cases ``keep(model, variant)`` selects, or None when there is none."""
    if "compare" not in parts:
        return None
    t = parts["compare"].table
    rows = t[[keep(str(m), str(v)) for m, v in zip(t["model"], t["variant"], strict=False)]]
    return rows if len(rows) else None


def _sources(parts: dict[str, Any], keep: Callable[[str, str], bool], title: str) -> Figure | None:
    rows = _compare_rows(parts, keep)
    return None if rows is None else plots.sources_by_layer(rows, "all", title)


def _is_smollm(model: str) -> bool:
    return model.startswith("smollm2")


def _dose_response(parts: dict[str, Any]) -> Figure | None:
    if "compare" not in parts:
        return None
    comparisons = comparison_table(parts.get("comparisons", parts["compare"]))  # or a compare part of table format 1
    paired = comparisons[comparisons["kind"] == "paired"]
    if not any(str(v).startswith(("ntk:", "window:")) for v in paired["variant"]):
        return None
    return intervention_plots.plot_dose_response(comparisons, "c_res", "all")


def _attribution(folder: Path) -> Result | None:
    return read_attribution(folder)  # relativize.parquet, or the four attribution* files of table format 1


def _loss_change(a: Result) -> Figure | None:
    return intervention_plots.plot_loss_change(a.table) if (a.table["metric"] == "loss_change").any() else None


#: name → (what it shows, how it is drawn from the parts and the run folder, width in px, which of the run's models it
#: draws: a test on their names as run.json records them, "smollm2-135m (ntk:4)"; its note on 4-bit weights names those).
FIGURES: dict[str, tuple[str, Callable[[dict[str, Any], Path], Figure | None], int, Callable[[str], bool]]] = {
    "sources_ntk.png": (
        "C_res and C_mask by layer: SmolLM2 standard RoPE and its NTK variants",
        lambda parts, folder: _sources(
            parts,
            lambda m, v: _is_smollm(m) and (v == "base" or v.startswith("ntk:")),
            "C_res and C_mask by layer, all queries: standard RoPE and NTK α (inference-time)",
        ),
        1500,
        _is_smollm,
    ),
    "sources_window.png": (
        "C_res and C_mask by layer: SmolLM2 with imposed sliding windows",
        lambda parts, folder: _sources(
            parts,
            lambda m, v: _is_smollm(m) and (v == "base" or v.startswith("window:")),
            "C_res and C_mask by layer, all queries: standard RoPE and imposed windows W (inference-time)",
        ),
        1800,
        _is_smollm,
    ),
    "sources_native.png": (
        "C_res and C_mask by layer: SmolLM2 against Gemma 3 (native sliding window)",
        lambda parts, folder: _sources(parts, lambda m, v: v == "base", "C_res and C_mask by layer, all queries: the native models"),
        1100,
        lambda name: name.endswith("(base)"),
    ),
    "dose_response.png": (
        "C4's dose-responses: paired differences of C_res against NTK α and window W",
        lambda parts, folder: _dose_response(parts),
        1100,
        _is_smollm,
    ),
    "attribution.png": (
        "Cumulative relativization: L(log a) by layer, unedited and under each mode, with the placebo",
        lambda parts, folder: (a := _attribution(folder)) and intervention_plots.plot_attribution(a.table, "all"),
        1100,
        _is_smollm,
    ),
    "path_probe.png": (
        "Residual probe R² by layer: unedited, key 0's phase frozen at each D, and the key-1 sham",
        lambda parts, folder: "path-tests" in parts and path_plots.plot_path_probe(parts["path-tests"].table, "resid_probe_r2") or None,
        1100,
        _is_smollm,
    ),
    "path_split.png": (
        "The sink path split, beside the freeze and the sham (paired changes, layers ≥ 2)",
        lambda parts, folder: "path-tests" in parts and path_plots.plot_path_split(parts["path-tests"].table) or None,
        1400,
        _is_smollm,
    ),
    "path_doses.png": (
        "Dose-responses of the residual probe R² over D and λ",
        lambda parts, folder: "path-tests" in parts and path_plots.plot_path_doses(parts["path-tests"].table) or None,
        1100,
        _is_smollm,
    ),
    "loss_change.png": (
        "What each edit costs: change in next-token loss per query bin, beside the placebo",
        lambda parts, folder: (a := _attribution(folder)) and _loss_change(a),
        1100,
        _is_smollm,
    ),
}


def capture(figures: dict[str, tuple[Figure, int]], out: Path) -> list[Path]:
    """Write each figure as a PNG in ``out`` (headless Chromium screenshots of the plot)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--window-size=2000,1400",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    written = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, (fig, width) in figures.items():
                fig.update_layout(width=width, template="plotly_white")
                page = Path(tmp) / f"{name}.html"
                page.write_text(fig.to_html(full_html=True, include_plotlyjs=True, config={"staticPlot": True}), encoding="utf-8")
                driver.get(page.as_uri())
                for _ in range(50):  # plotly draws on load; wait for its SVG
                    if driver.find_elements(By.CSS_SELECTOR, ".plotly-graph-div .main-svg"):
                        break
                    time.sleep(0.1)
                time.sleep(0.3)
                path = out / name
                driver.find_element(By.CSS_SELECTOR, ".plotly-graph-div").screenshot(str(path))
                written.append(path)
    finally:
        driver.quit()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("docs/findings_data"), help="run folder written by poslens report")
    parser.add_argument("--out", type=Path, default=Path("docs/img/findings"), help="folder for the PNGs")
    args = parser.parse_args()
    if not args.results.is_dir():
        parser.error(f"{args.results} is not a folder")
    parts = load_parts(args.results)
    run_path = args.results / "run.json"
    run = json.loads(run_path.read_text()) if run_path.exists() else {}
    models = recorded_models(run, parts)
    drawn = {}
    for name, (what, draw, width, drawn_models) in FIGURES.items():
        quantized = sorted(
            {f"{model.split(' (')[0]}: {info['quantized']}" for model, info in models.items() if drawn_models(model) and info.get("quantized")}
        )
        fig = draw(parts, args.results)
        if fig is None:
            print(f"skipped {name} ({what}): its tables are not in {args.results}")
            continue
        if quantized:  # figures from the embedded models say so on the image itself
            title = fig.layout.title.text or ""
            fig.update_layout(title_text=f"{title}<br><sup>4-bit quantized embedded models: {'; '.join(quantized)}</sup>", margin_t=110)
        drawn[name] = (fig, width)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in capture(drawn, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
