"""Write the findings page (``docs/findings.md``) from the tables of a ``poslens report`` run folder.

Reads what ``poslens report`` writes into its folder: ``claims.csv`` and
``claim_inputs.csv`` (the verdicts and the figures each rests on, with their
roles: the page reads those columns, never a rule's words), ``run.json`` and the parts ``leakage``, ``sinks``, ``bos-swap``,
``ablate-sinks``, ``fingerprint`` and ``compare`` (``.parquet``: the tidy
table and its provenance, as :meth:`poslens.measurement.result.Result.load` reads them,
without the cell sums). Every figure on the page is taken from
those tables; the page only selects and formats them. A part that is missing
from the folder is named as such on the page instead of failing.

Usage::

    .venv/bin/python docs/make_findings.py [--results results/full] [--out docs/findings.md] [--summary-in README.md docs/index.md]

``--summary-in`` also writes the short claims table (one row per claim and
case, :func:`claims_summary`) between the markers ``<!-- claims-summary:start -->``
and ``<!-- claims-summary:end -->`` of each named page; ``tests/docs/test_docs.py``
checks that README.md and docs/index.md hold the table of ``docs/findings_data``.

The page is meant for the full run (``poslens report --full --out results/full``).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import platform
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from poslens.measurement.result import Result
from poslens.measurement.result_files import META_KEY
from poslens.mechanisms.attribution_table import LOSS_METRIC, OLD_FILES, R_METRIC, read_old_layout
from poslens.mechanisms.comparisons import comparison_table
from poslens.mechanisms.sink_split import split_offset_of
from poslens.study.claims.rules import INCONCLUSIVE, NOT_MEASURED, NOT_SUPPORTED, SUPPORTED, joint
from poslens.study.claims.table import CLAIMS_FILE, INPUTS_FILE, Claims
from poslens.study.claims.text import quoted_inputs, split_sentence, summary_rows

PARTS = ("leakage", "sinks", "bos-swap", "ablate-sinks", "path-tests", "sink-split", "fingerprint", "compare", "comparisons")
# the relativize part: relativize.parquet, or in a folder of table format 1 its four attribution* files
ATTRIBUTION_FILES = ("relativize.parquet", *OLD_FILES[1:], OLD_FILES[0])
FIGURES = Path(__file__).parent / "img" / "findings"  # written by docs/make_findings_figures.py
MODE_TEXT = {
    "none": "unedited",
    "all": "every column",
    "key0": "key 0 only",
    "all-but-key0": "every column but key 0",
    "placebo:all": "placebo (relative, norm of 'every column')",
    "placebo:key0": "placebo (relative, norm of 'key 0 only')",
    "placebo:all-but-key0": "placebo (relative, norm of 'every column but key 0')",
}
WINDOW_TEXT = {"early": "early queries (1 ≤ i < Q)", "all": "all queries (1 ≤ i < T)"}


# --------------------------------------------------------------------------- formatting


def decimals(x: float) -> int:
    """Decimals that show four significant digits of ``x`` (4 for zero, at most 8)."""
    if x == 0 or not math.isfinite(x):
        return 4
    return min(8, max(1, 3 - math.floor(math.log10(abs(x)))))


def num(x: Any, places: int | None = None) -> str:
    """A figure with four significant digits (or ``places`` decimals); missing values as an em dash."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    x = float(x)
    text = f"{x:.{decimals(x) if places is None else places}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def count(x: Any) -> str:
    """A count (stored as float in the tidy table)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return str(int(round(float(x))))


def with_interval(value: Any, low: Any, high: Any) -> str:
    """``value [low, high]``, all three with the decimals that show four significant digits of the value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"— [{num(low)}, {num(high)}]"
    places = decimals(float(value))
    return f"{num(value, places)} [{num(low, places)}, {num(high, places)}]"


def cell(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: Iterable[list[Any]], align: list[str] | None = None) -> str:
    """A Markdown table; ``align`` holds ``l`` or ``r`` per column (default: first left, rest right)."""
    align = align or ["l"] + ["r"] * (len(header) - 1)
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def layer_order(layers: Iterable[int]) -> list[int]:
    """Layers 0, 1, … then the aggregate −1 last."""
    return sorted(set(int(x) for x in layers), key=lambda layer: (layer < 0, layer))


def layer_name(layer: int) -> str:
    return "layers ≥ 1 (aggregate)" if layer == -1 else str(layer)


# --------------------------------------------------------------------------- loading


def load_table(path: Path) -> Result:
    """A part's tidy table and provenance, without its cell sums.

    :meth:`Result.load` also reads the ``.sums.npz`` twin, which this page never
    needs and which an older or newer poslens may refuse to read; the table and
    its metadata are all the page uses.
    """
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(META_KEY)
    return Result(table.to_pandas(), json.loads(raw) if raw else {})


def load_parts(folder: Path) -> dict[str, Result]:
    """Each part present in ``folder`` as a Result (table and metadata)."""
    parts = {}
    for name in PARTS:
        path = folder / f"{name}.parquet"
        if path.exists():
            parts[name] = load_table(path)
    return parts


def rows_of(result: Result, metric: str, **where: Any) -> pd.DataFrame:
    """Rows of ``metric`` with column == value for each keyword (``query_window``, ``layer``, ``head``, …)."""
    t = result.table
    t = t[t["metric"] == metric]
    for column, wanted in where.items():
        t = t[t[column] == wanted]
    return t


def missing(name: str) -> str:
    return f"*`{name}.parquet` is not in this run folder: not measured.*\n"


# --------------------------------------------------------------------------- sections


def provenance(folder: Path, run: dict[str, Any], parts: dict[str, Result]) -> str:
    """Command, date, machine, software and models of the run."""
    lines = ["## The run", ""]

    command = run.get("command")
    if isinstance(command, list):
        command = " ".join(str(c) for c in command)
    if command:
        lines.append(f"- **Command:** `{command}`")
    elif run.get("preset"):
        lines.append(
            f"- **Command:** `poslens report --{run['preset']} --out {folder}` "
            "(reconstructed from the preset recorded in `run.json`, which does not record the command line)"
        )
    else:
        lines.append("- **Command:** not recorded in `run.json`")

    date = run.get("date") or run.get("created") or run.get("finished") or run.get("started")
    if date:
        lines.append(f"- **Date:** {date}")
    else:
        created = sorted({str(p.meta.get("created")) for p in parts.values() if p.meta.get("created")})
        for p in parts.values():
            created += [str(m.get("created")) for m in p.meta.get("parts", []) if m.get("created")]
        created = sorted(set(created))
        if created:
            span = created[0] if len(created) == 1 else f"{created[0]} to {created[-1]}"
            lines.append(f"- **Date:** {span} (the `created` times of the parts' metadata; `run.json` records no date)")
        else:
            lines.append("- **Date:** not recorded")

    machine = run.get("machine") or run.get("host") or run.get("platform")
    if machine:
        if isinstance(machine, dict):
            machine = ", ".join(f"{k}: {v}" for k, v in machine.items())
        lines.append(f"- **Machine:** {machine}")
    else:
        gpu = "no CUDA GPU"
        try:
            import torch

            if torch.cuda.is_available():
                gpu = f"{torch.cuda.device_count()} CUDA GPU(s): {torch.cuda.get_device_name(0)}"
        except Exception:  # torch missing or broken: say nothing more than "no CUDA GPU" found
            pass
        lines.append(
            f"- **Machine:** not recorded in `run.json`; the machine that generated this page is "
            f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, {gpu} "
            "(assumed to be the machine of the run)"
        )

    if run.get("poslens_version"):
        lines.append(f"- **poslens:** {run['poslens_version']}")
    versions = run.get("versions") or {}
    if versions:
        lines.append("- **Software:** " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    timings = run.get("timings_seconds") or {}
    if timings:
        total = sum(float(v) for v in timings.values())
        lines.append(
            "- **Compute time per part (s):** "
            + ", ".join(f"{k} {float(v):.0f}" for k, v in timings.items())
            + f"; total {total:.0f} s ({total / 3600:.2f} h)"
        )
    settings = run.get("settings") or {}
    if settings:
        shown = {
            k: v
            for k, v in settings.items()
            if k
            in (
                "model",
                "corpus",
                "n_seqs",
                "seq_len",
                "groups",
                "early",
                "seed",
                "tau",
                "replacements",
                "fingerprint_seqs",
                "fingerprint_len",
                "compare_seqs",
                "compare_len",
            )
        }
        lines.append("- **Settings:** " + ", ".join(f"{k} = {v}" for k, v in shown.items()))
    corpus = run.get("corpus") or {}
    if corpus:
        lines.append("- **Corpus:** " + ", ".join(f"{k} = {v}" for k, v in corpus.items() if not isinstance(v, (list, dict))))

    models = recorded_models(run, parts)
    if models:
        lines += ["", "Models" + ("" if run.get("models") else " (from the parts' metadata)") + ":", ""]
        lines.append(
            markdown_table(
                ["model (variant)", "weights", "source sha256"],
                [[name, info.get("quantized") or "not quantized", (info.get("sha256") or "—")[:16]] for name, info in models.items()],
                ["l", "l", "l"],
            )
        )
    lines.append("")
    return "\n".join(lines)


def recorded_models(run: dict[str, Any], parts: dict[str, Result]) -> dict[str, dict[str, Any]]:
    """The models of the run: from ``run.json``, else from the parts' metadata (as ``poslens report`` gathers them)."""
    if run.get("models"):
        return run["models"]
    models = {}
    for result in parts.values():
        for meta in [result.meta] + list(result.meta.get("parts", [])):
            described = meta.get("model")
            if isinstance(described, dict) and "model" in described:
                models[f"{described['model']} ({described.get('variant', 'base')})"] = {
                    "source": described.get("source"),
                    "sha256": described.get("source_sha256"),
                    "quantized": described.get("quantized"),
                }
    return models


def weights_note(models: dict[str, dict[str, Any]]) -> str:
    """The note on quantized weights, from the models the run records."""
    quantized = {name: info.get("quantized") for name, info in models.items() if info.get("quantized")}
    if not models:
        return "Figures come from the 4-bit quantized embedded models (the run records no models, so this is the page's default note)."
    if len(quantized) == len(models):
        return "Figures come from the 4-bit quantized embedded models: " + "; ".join(f"{name}: {q}" for name, q in quantized.items()) + "."
    plain = [name for name in models if name not in quantized]
    return (
        "Figures from "
        + ", ".join(quantized)
        + " come from 4-bit quantized weights ("
        + "; ".join(quantized.values())
        + "); "
        + ", ".join(plain)
        + " ran unquantized."
    )


def figure_label(source: Any) -> str:
    """Which figure an input is (``metric, layers, window``), from its fields in the inputs table; '' for a threshold.

    ``source`` is one row of ``claim_inputs.csv`` (:data:`poslens.study.claims.table.INPUT_COLUMNS`).
    """
    metric = source["metric"]
    if source["statistic"] == "threshold" or not isinstance(metric, str) or not metric:
        return ""
    parts = [f"`{metric}`"]
    if source["statistic"] == "max over layers":
        parts.append("max over layers")
    elif source["statistic"] == "slope over layers":
        parts.append(f"layers {int(source['layer_first'])}..{int(source['layer_last'])}")
    elif not pd.isna(source["layer"]):
        parts.append("layers ≥ 1" if int(source["layer"]) == -1 else f"layer {int(source['layer'])}")
    elif not pd.isna(source["layer_first"]):  # a figure over the layers from one on (C3's and C7's r: layers ≥ 2)
        parts.append(f"layers ≥ {int(source['layer_first'])}")
    window = source["query_window"]
    if isinstance(window, str) and window:
        parts.append(f"{window} queries")
    return ", ".join(parts)


def input_text(source: Any) -> str:
    """An input in words: ``name = value [low, high] (role)``, or without the interval for a point value."""
    if pd.isna(source["ci_low"]) and pd.isna(source["ci_high"]):
        number = num(source["value"])
    else:
        number = with_interval(source["value"], source["ci_low"], source["ci_high"])
    return f"{source['name']} = {number} ({source['role']})"


def read_claims(folder: Path) -> Claims | None:
    """The claims of the run folder (``claims.csv`` and ``claim_inputs.csv``), or None when either is missing."""
    if not all((folder / name).exists() for name in (CLAIMS_FILE, INPUTS_FILE)):
        return None
    return Claims.read(folder)


def _own(row: Any) -> str:
    """A claims row's own verdict: its comparison alone (C4), the claim's verdict for the other claims."""
    own = row["own_verdict"]
    return str(row["verdict"]) if own is None or pd.isna(own) else str(own)


def claims_section(folder: Path) -> str:
    lines = ["## Claims", ""]
    claims = read_claims(folder)
    if claims is None:
        return "\n".join(lines + [f"*`{CLAIMS_FILE}` or `{INPUTS_FILE}` is not in this run folder (run `poslens claims --out {folder}`).*", ""])
    lines.append(
        "Each verdict is computed from the figures by the rule stated with it (methodology §9); "
        "none is written by hand. A claim can rest on several figures, one row each. Intervals are 95%. "
        "*This row* is the verdict of the row's own figure by its rule; *the claim* is the claim's verdict, the same "
        "on each of its rows: C4's comes from all its comparisons together (one against the claim makes it not supported)."
    )
    lines.append("")
    rows, seen = [], set()
    for _, r in claims.table.iterrows():
        figure = "—" if pd.isna(r["figure"]) else with_interval(r["figure"], r["ci_low"], r["ci_high"])
        statement = "" if r["claim"] in seen else r["statement"]
        seen.add(r["claim"])
        inputs = claims.inputs_of(r["key"])
        shown = inputs[inputs["name"] == r["figure_name"]]
        rows.append(
            [
                f"**{r['claim']}**" if statement else r["claim"],
                statement,
                r["model"] if r["model"] is not None and not pd.isna(r["model"]) else "—",
                figure_label(shown.iloc[0]) if len(shown) else "",
                figure,
                f"**{_own(r)}**",
                str(r["verdict"]),
            ]
        )
    lines.append(
        markdown_table(
            ["claim", "statement", "model / comparison", "figure", "value [95%]", "this row", "the claim"], rows, ["l", "l", "l", "l", "r", "l", "l"]
        )
    )
    # The rule of a claim is shared by its rows: give each distinct rule, with the inputs it read, once. Plain HTML
    # inside <details>: Markdown in a raw HTML block is not rendered (no md_in_html), HTML is, on the docs site and on
    # GitHub alike.
    items = []
    for claim, part in claims.table.groupby("claim", sort=False):
        texts = []
        for _, r in part.iterrows():
            inputs = claims.inputs_of(r["key"])
            listed = "; ".join(input_text(i) for _, i in inputs.iterrows())
            texts.append(f"{r['rule']}. inputs: {listed}" if listed else str(r["rule"]))
        items.append(f"<li><b>{html.escape(str(claim))}</b>: " + "<br>".join(html.escape(t) for t in dict.fromkeys(texts)) + "</li>")
    lines += [
        "",
        "<details><summary>The rule behind each verdict, with the figures it read (and their role)</summary><ul>"
        + "".join(items)
        + "</ul></details>",
        "",
    ]
    return "\n".join(lines)


SUMMARY_START = "<!-- claims-summary:start -->"
SUMMARY_END = "<!-- claims-summary:end -->"


def claims_summary(folder: Path, findings_link: str = "docs/findings.md") -> str:
    """The short claims table: one row per claim and case, the headline figure with its interval, and the verdict.

    A claim's rows share one joint verdict; the headline is the input whose role
    is ``headline`` (C1: held-out leakage, C3: the reduction by sink-path
    ablation, ...), read from ``claim_inputs.csv``; the findings page gives the others.
    """
    claims = Claims.read(folder)
    table = claims.table
    rows = []
    for (claim, model), part in table.groupby(["claim", table["model"].fillna("—")], sort=False):
        first = part.iloc[0]
        top = claims.headline(first["key"])
        if top is None or pd.isna(top["value"]):
            figure, label = "—", ""
        else:
            figure, label = with_interval(top["value"], top["ci_low"], top["ci_high"]), figure_label(top)
        own = joint(_own(r) for _, r in part.iterrows()) if first["verdict"] != NOT_MEASURED else NOT_MEASURED
        verdict = f"**{own}**" if own == first["verdict"] else f"**{own}** (the claim: {first['verdict']})"
        rows.append([f"**{claim}**", first["statement"], model, f"{label}: {figure}" if label else figure, verdict])
    table = markdown_table(["claim", "statement", "model / case", "headline figure [95%]", "verdict"], rows, ["l", "l", "l", "l", "l"])
    note = (
        f"*From the full run's tables (`docs/findings_data`, 4-bit quantized weights), written by "
        f"`docs/make_findings.py`; the [findings]({findings_link}) give every figure and rule.*"
    )
    return f"{SUMMARY_START}\n{table}\n\n{note}\n{SUMMARY_END}"


def replace_summary(page: str, summary: str) -> str:
    """``page`` with the text between the claims-summary markers replaced by ``summary`` (markers included)."""
    start, end = page.index(SUMMARY_START), page.index(SUMMARY_END) + len(SUMMARY_END)
    return page[:start] + summary + page[end:]


def leakage_section(parts: dict[str, Result]) -> str:
    lines = ["## Leakage and its decomposition (baseline model)", ""]
    if "leakage" not in parts:
        return "\n".join(lines + [missing("leakage")])
    result = parts["leakage"]
    model = result.meta.get("model", {})
    lines.append(
        f"Model {model.get('model', '?')} ({model.get('variant', 'base')}); aggregates over heads and "
        "over layers ≥ 1 (layer −1 of the tables). L(log a) is the binned ΔR² of the pattern (methodology §3.1); "
        "C_res and C_mask are its residual-stream and mask components (methodology §4, version 2, per-sequence "
        "counterfactual); probe R² is held out (methodology §3.3)."
    )
    lines.append("")
    metrics = [
        ("leakage_pattern", "L(log a)"),
        ("leakage_pattern_heldout", "L(log a), held out"),
        ("c_res", "C_res"),
        ("c_mask", "C_mask"),
        ("rho_res", "ρ_res"),
        ("c_res_meanfield", "C_res, mean-field"),
        ("probe_r2", "probe R²"),
    ]
    rows = []
    for metric, label in metrics:
        cells = []
        for window in ("early", "all"):
            r = rows_of(result, metric, query_window=window, layer=-1, head=-1)
            cells.append(with_interval(*r[["value", "ci_low", "ci_high"]].iloc[0]) if len(r) else "—")
        if any(c != "—" for c in cells):
            rows.append([f"{label} (`{metric}`)"] + cells)
    lines.append(markdown_table(["figure", WINDOW_TEXT["early"], WINDOW_TEXT["all"]], rows))
    lines.append("")
    return "\n".join(lines)


def compare_section(parts: dict[str, Result], page: Path) -> str:
    lines = ["## C_res and C_mask by layer, per architecture case (C4)", ""]
    if "compare" not in parts:
        return "\n".join(lines + [missing("compare")])
    result = parts["compare"]
    cases = {(c.get("model"), c.get("variant")): c for c in result.meta.get("cases", [])}
    t = result.table
    t = t[(t["head"] == -1) & (t["query_window"] == "all") & t["metric"].isin(["c_res", "c_mask"])]
    lines.append(
        "All queries (1 ≤ i < T), aggregated over heads; the last row of each table aggregates over layers ≥ 1. "
        "Intervals are 95% (jackknife over groups of sequences). Inference-time variants are labelled as such."
    )
    lines.append("")
    for name, caption in (
        (
            "sources_native.png",
            "C_res and C_mask by layer, all queries: the native models, SmolLM2-135M (standard RoPE) "
            "and Gemma 3 270M (native sliding window), 4-bit quantized weights.",
        ),
        (
            "sources_ntk.png",
            "C_res and C_mask by layer, all queries: SmolLM2-135M and its NTK-scaled variants "
            "(inference-time, never trained with α), 4-bit quantized weights.",
        ),
        (
            "sources_window.png",
            "C_res and C_mask by layer, all queries: SmolLM2-135M with imposed sliding windows (inference-time), 4-bit quantized weights.",
        ),
    ):
        lines.append(image(name, caption, page))
    for (model, variant), part in t.groupby(["model", "variant"], sort=False):
        case = cases.get((model, variant), {})
        kind = "inference-time variant" if variant not in ("base", "") else "native"
        title = f"### {model}, {variant}"
        if case.get("case"):
            title += f": {case['case']} case ({kind})"
        lines += [title, ""]
        rows = []
        for layer in layer_order(part["layer"]):
            row = [layer_name(layer)]
            for metric in ("c_res", "c_mask"):
                r = part[(part["layer"] == layer) & (part["metric"] == metric)]
                row.append(with_interval(*r[["value", "ci_low", "ci_high"]].iloc[0]) if len(r) else "—")
            rows.append(row)
        lines.append(markdown_table(["layer", "C_res [95%]", "C_mask [95%]"], rows))
        lines.append("")
    return "\n".join(lines)


def image(name: str, caption: str, page: Path) -> str:
    """A figure of ``docs/make_findings_figures.py`` with its caption, or a line saying it was not drawn."""
    path = FIGURES / name
    if not path.exists():
        return f"*Figure `{name}` is not drawn: run `.venv/bin/python docs/make_findings_figures.py`.*\n"
    link = os.path.relpath(path, page.parent.resolve()).replace(os.sep, "/")
    return f"![{caption}]({link})\n\n*{caption}*\n"


def comparisons_section(parts: dict[str, Result], page: Path) -> str:
    """C4's paired differences, dose-response trends, independent differences and depth slopes (methodology §9.1)."""
    lines = ["## C4 by differences: paired, dose-responses, depth slopes (methodology §9.1)", ""]
    if "compare" not in parts:
        return "\n".join(lines + [missing("compare")])
    c = comparison_table(parts.get("comparisons", parts["compare"]))  # or a compare part of table format 1
    c = c[c["metric"].isin(["c_res", "c_res_depth_slope"]) & (c["query_window"] == "all") & (c["layer"] == -1) & (c["head"] == -1)]
    c = c.sort_values("metric", kind="stable")
    if c.empty:
        return "\n".join(lines + ["*`compare.parquet` records no comparisons (saved by an older poslens).*", ""])
    lines.append(
        "C_res over layers ≥ 1 (`c_res`) and its depth slope (`c_res_depth_slope`: the least-squares slope of "
        "per-layer C_res on the fraction of depth), all queries. A variant of one model is compared with its base on the same "
        "token ids and groups (paired delete-one-group jackknife); the dose-responses are least-squares "
        "slopes of those differences per doubling of α or W; models with different tokenizers are compared "
        "as independent samples (Welch); depth slopes compare how C_res changes per fraction of depth. "
        "'Detectable' is the minimum detectable difference, (t₀.₉₇₅ + t₀.₈₀)·se: a true difference of that "
        "size would give an interval that excludes 0 with probability 80%."
    )
    lines.append("")
    rows = []
    for _, r in c.iterrows():
        name = f"{r['model']} ({r['variant']})" if r["kind"] == "depth-slope" else r["comparison"]  # one per model
        rows.append([f"`{r['metric']}`", r["kind"], cell(name), with_interval(r["value"], r["ci_low"], r["ci_high"]), num(r["detectable"])])
    lines.append(markdown_table(["figure", "kind", "comparison", "value [95%]", "detectable |difference|"], rows, ["l", "l", "l", "r", "r"]))
    lines += [
        "",
        image(
            "dose_response.png",
            "C4's dose-responses: each inference-time variant's C_res minus its base "
            "model's on the same tokens, against NTK α and window W, with paired 95% intervals; the panel "
            "titles give the slope per doubling (4-bit SmolLM2).",
            page,
        ),
    ]
    return "\n".join(lines)


def read_attribution(folder: Path) -> Result | None:
    """The relativize part of the run folder (either layout), or None when its files are missing."""
    if (folder / "relativize.parquet").exists():
        return load_table(folder / "relativize.parquet")
    if not all((folder / name).exists() for name in OLD_FILES):
        return None
    return read_old_layout(folder)


def _with_mode(rows: pd.DataFrame) -> pd.DataFrame:
    """The relativize part's rows with the mode of each edit (``relativize:<mode>`` → ``<mode>``; ``none``, placebos as they are)."""
    return rows.assign(mode=rows["intervention"].astype(str).str.removeprefix("relativize:"))


def attribution_section(folder: Path, page: Path) -> str:
    """The cumulative relativization (methodology §11): r per mode, L(log a) per layer, the loss change."""
    lines = ["## Relativizing the forward pass (C7, and C3's causal figure)", ""]
    a = read_attribution(folder)
    if a is None:
        return "\n".join(lines + ["*The relativize part (`relativize.parquet`) is not in this run folder: not measured.*", ""])
    settings = a.meta.get("settings") or {}
    corpus = a.meta.get("corpus") or {}
    lines.append(
        "Every layer's scores are edited so that their absolute logit component is gone, and each layer is "
        "captured before its own edit, so layer l is measured with layers < l edited (methodology §11). "
        "r = 1 − mean over layers ≥ 2 of the edited L(log a) over the unedited one, with a paired "
        "delete-one-group jackknife 95% interval; the edit is fitted on a calibration corpus disjoint "
        "from the measured one, at two sizes for 'every column' (the calibration's own noise). "
        f"Measured corpus: {corpus.get('n_seqs', '?')} sequences × {corpus.get('seq_len', '?')} tokens; "
        f"settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items() if not isinstance(v, (list, dict))) + "."
    )
    lines.append("")
    table = _with_mode(a.table)
    summary = table[(table["metric"] == R_METRIC) & (table["query_window"] == "all")]
    loss = table[table["metric"] == LOSS_METRIC]
    rows = [
        [MODE_TEXT.get(str(r["mode"]), str(r["mode"])), count(r["calibration_size"]), with_interval(r["value"], r["ci_low"], r["ci_high"])]
        for _, r in summary.iterrows()
    ]
    lines.append(markdown_table(["edit", "calibration sequences", "r, all queries [95%]"], rows, ["l", "r", "r"]))
    lines.append("")
    levels = table[(table["metric"] == "leakage_pattern") & (table["kind"] == "level") & (table["query_window"] == "all")]
    largest = levels.groupby("mode")["calibration_size"].transform("max")
    levels = levels[levels["calibration_size"] == largest]
    modes = [m for m in MODE_TEXT if m in set(levels["mode"])]
    rows = []
    for layer in layer_order(levels["layer"]):
        row = [layer_name(layer)]
        for mode in modes:
            r = levels[(levels["mode"] == mode) & (levels["layer"] == layer)]
            row.append(with_interval(*r[["value", "ci_low", "ci_high"]].iloc[0]) if len(r) else "—")
        rows.append(row)
    lines.append("L(log a) per layer, all queries, unedited and under each edit (largest calibration size):")
    lines.append("")
    lines.append(markdown_table(["layer"] + [MODE_TEXT[m] for m in modes], rows))
    lines.append("")
    lines.append(
        image(
            "attribution.png",
            "L(log a) by layer, all queries, unedited and with every layer relativized in "
            "each mode, beside the purely relative placebo of matched norm; layer 0 is the negative control "
            "(4-bit SmolLM2).",
            page,
        )
    )
    if len(loss):
        rows = []
        for _, r in loss[loss["query_bin"] == -1].iterrows():
            rows.append([MODE_TEXT.get(str(r["mode"]), str(r["intervention"])), with_interval(r["value"], r["ci_low"], r["ci_high"])])
        lines.append("Change in next-token loss (nats per token, all positions; per query bin in the figure):")
        lines.append("")
        lines.append(markdown_table(["edit", "Δ loss [95%]"], rows, ["l", "r"]))
        lines += [
            "",
            image(
                "loss_change.png",
                "Change in next-token loss per query bin under each edit, beside its purely relative placebo of matched norm (4-bit SmolLM2).",
                page,
            ),
        ]
    return "\n".join(lines)


def _input(claims: Claims, claim: str, name: str) -> pd.Series | None:
    """The first input called ``name`` among the rows of ``claim``, or None."""
    t = claims.inputs
    rows = t[(t["claim"] == claim) & (t["name"] == name)]
    return rows.iloc[0] if len(rows) else None


def _quote(row: pd.Series | None, percent: bool = False) -> str:
    if row is None:
        return "—"
    scale, unit = (100.0, "%") if percent else (1.0, "")
    if pd.isna(row["ci_low"]):
        return f"{num(row['value'] * scale)}{unit}".replace("-", "−")
    places = decimals(float(row["value"]) * scale)
    text = f"{num(row['value'] * scale, places)}{unit} [{num(row['ci_low'] * scale, places)}{unit}, {num(row['ci_high'] * scale, places)}{unit}]"
    return text.replace("-", "−")  # the minus of the report's sentences


def _scope(run: dict[str, Any]) -> str:
    settings = run.get("settings") or {}
    return (
        f"one model, {settings.get('model', '?')}, with 4-bit quantized weights, on "
        f"{settings.get('n_seqs', '?')} sequences × {settings.get('seq_len', '?')} tokens of CPython's documentation"
    )


def _mode_split(parts: dict[str, Any]) -> str:
    """r under the key-0-only and all-but-key-0 edits, in words (the attribution's summary), or '' when absent."""
    a = parts.get("relativize")
    if a is None:
        return ""
    table = _with_mode(a.table)
    rows = table[(table["metric"] == R_METRIC) & (table["query_window"] == "all") & table["mode"].isin(["key0", "all-but-key0"])]
    said = []
    for mode, words in (("all-but-key0", "every column but key 0"), ("key0", "key 0's term alone")):
        r = rows[rows["mode"] == mode]
        if not len(r):
            continue
        r = r[r["calibration_size"] == r["calibration_size"].max()].iloc[0]
        verb = "raises" if r["ci_high"] < 0 else "lowers" if r["ci_low"] > 0 else "changes by an amount not told from 0"
        said.append(f"relativizing {words} {verb} it (r = {_quote(r, percent=True)})")
    return "split by mode, " + " and ".join(said) if said else ""


def _c4_reading(claims: Claims) -> str:
    """C4's comparisons sorted by what each said: as claimed, against the claim, undecided (with what it could detect)."""
    rows = claims.table[claims.table["claim"] == "C4"]
    buckets: dict[str, list[str]] = {SUPPORTED: [], NOT_SUPPORTED: [], INCONCLUSIVE: []}
    for _, r in rows.iterrows():
        name = str(r["figure_name"])
        text = f"{name} = {_quote(_input(claims, 'C4', name))}"
        detectable = _input(claims, "C4", f"detectable |{name}|")
        if r["own_verdict"] == INCONCLUSIVE and detectable is not None:
            text += f" (could detect {num(detectable['value'])})"
        buckets.setdefault(str(r["own_verdict"]), []).append(text)
    said = []
    for verdict, words in ((SUPPORTED, "As claimed"), (NOT_SUPPORTED, "Against the claim"), (INCONCLUSIVE, "Undecided")):
        if buckets.get(verdict):
            said.append(f"{words}: " + "; ".join(dict.fromkeys(buckets[verdict])) + ".")
    for _, r in rows.iterrows():  # the dose-responses in words: which way the figure moves with α or W
        name, figure = str(r["figure_name"]), _input(claims, "C4", str(r["figure_name"]))
        if figure is None or "slope on log2" not in name or not (figure["ci_low"] > 0 or figure["ci_high"] < 0):
            continue
        up = figure["ci_low"] > 0
        if "window" in name:
            said.append(
                f"The window's dose-response: {name.split(' (')[0]} {'grows' if up else 'falls'} with W, so a "
                f"narrower window {'accumulates less' if up else 'accumulates more'} (the claim expects more)."
            )
        else:
            said.append(f"The NTK dose-response: {name.split(' (')[0]} {'grows' if up else 'falls'} as α grows (the claim expects it to fall).")
    joint_verdict = str(rows["verdict"].iloc[0]) if len(rows) else NOT_MEASURED
    rule = {
        NOT_SUPPORTED: "one comparison against the claim makes the claim not supported",
        SUPPORTED: "every comparison is as claimed",
        INCONCLUSIVE: "no comparison is against the claim, but not every one is as claimed",
    }.get(joint_verdict, "")
    lead = f"C4 is decided by all its comparisons together ({rule})." if rule else ""
    return " ".join([lead] + said)


def _open_questions(claim: str, claims: Claims, parts: dict[str, Result], run: dict[str, Any]) -> str:
    """What the data of ``claim`` could not decide, from the same tables (one or two sentences)."""
    rows = claims.table[claims.table["claim"] == claim]
    verdicts = set(rows["verdict"])
    if verdicts == {NOT_MEASURED}:
        return "Nothing: the claim was not measured in this run."
    if claim == "C1":
        return (
            f"The figures come from {_scope(run)}: they say that this model's patterns carry position, not how "
            "large the signal is in other models or at other lengths."
        )
    if claim == "C2":
        return (
            "That the mask source exists is true by construction; the figures measure its size. They do not say "
            "how much of the later layers' absolute position the mask wrote there in earlier layers (C_res counts "
            "that too, methodology §4.6): that is C7's question."
        )
    if claim == "C3":
        fall = _input(claims, "C3", "fall")
        if fall is None:
            return "Nothing: the path-specific tests were not measured in this run."
        mask = _input(claims, "C3", "resid_probe_r2_ge2: sink-ablation − sink-mask-only:1")
        pieces = [
            "What the freeze isolates: the position that reaches the residual stream through the RoPE phase of the "
            "key-0 logit, against the same freeze on key 1 (a key whose offset also tracks i but that is not the sink)",
            "what it leaves: the position the mask writes through the sink by diluting a_i0 over more keys, which the "
            "mask-only profile measures beside it"
            + (f" (the mask's channel through the sink moved the probe by {_quote(mask)})" if mask is not None else ""),
            "that a frozen phase also sets the sink's level to the one at offset D, so the freeze changes how much the "
            "later layers read key 0 as well as whether its logit tracks i: the dose over D shows how much that matters",
        ]
        return "; ".join(pieces) + f". The figures come from {_scope(run)}."
    if claim == "C4":
        return (
            "The NTK and window cases are inference-time variants of a model trained with neither, so the "
            "figures say what α and W do to SmolLM2 as trained, not what a model trained with them shows; "
            "Gemma 3 differs from SmolLM2 in size, data and training as well as in its window. A true difference "
            "smaller than a comparison's detectable one would be missed four times in five."
        )
    if claim == "C5":
        return (
            "Why the replacements differ: each writes another vector at position 0, and the reduction measures "
            "what C_res does afterwards, not which direction of the BOS residual the sink heads read. A reduction "
            "above 100% means C_res changed sign, which no target of 40% anticipates."
        )
    if claim == "C6":
        return (
            f"The figures come from {_scope(run)}; the readout reads the sink-reading heads together, so they do "
            "not say which head carries the fingerprint."
        )
    if claim == "C8":
        total = _input(claims, "C8", "sink_total (V)")
        if total is None:
            return "Nothing: the sink path's split was not measured in this run."
        no_share = claims.inputs[(claims.inputs["claim"] == "C8") & claims.inputs["name"].astype(str).str.startswith("no share:")]
        pieces = [
            "Two readouts answer two questions: V reads position along the code the unedited model writes, so an edit "
            "can lower it while a probe refitted on the edited run (R²) still reads position in another direction; the "
            "split is decided on V and R²'s reading stands beside it"
        ]
        if len(no_share):
            pieces.append(str(no_share["name"].iloc[0]))
        pieces.append(
            "the split covers the sink-reading heads at τ; freezing key 0's phase in every head, reported beside it, "
            "reaches the heads that are not sink-reading too"
        )
        return "; ".join(pieces) + f". The figures come from {_scope(run)}."
    if claim == "C7":
        r = _input(claims, "C7", "r (all)")
        if r is None:
            return "Nothing: the relativization was not measured."
        pieces = []
        if r["ci_high"] < -0.10:
            pieces.append(
                "The rule is two-sided: an r wholly below −10% says that removing the earlier layers' absolute logits "
                "added to the later layers' absolute position, so those logits counteract it (the sink logits not "
                "decaying work against the mask's count term), not that they carry it"
            )
        split = _mode_split(parts)
        if split:
            pieces.append(split)
        text = "; ".join(pieces) + ". " if pieces else ""
        return text + (
            "What the data cannot tell apart: later layers that rebuild absolute position from the edited "
            "residual stream, and a model pushed off its distribution by the edit, which the loss change "
            "beside the placebo bounds but does not exclude."
        )
    return ""


def split_headline(folder: Path, parts: dict[str, Result]) -> str:
    """The page's opening: the sink path's split (C8) in sentences a researcher can quote, from the claims' inputs."""
    lines = ["## Where the residual stream's position comes from: the sink path's split", ""]
    claims = read_claims(folder)
    inputs = None if claims is None else claims.inputs[claims.inputs["claim"] == "C8"]
    if inputs is None or inputs.empty or "sink-split" not in parts:
        return "\n".join(lines + ["*The sink path's split (`sink-split`, C8) is not in this run folder.*", ""])
    quoted = quoted_inputs(inputs)
    split = parts["sink-split"]
    model = split.table["model"].iloc[0] if len(split.table) else "the model"
    verdict = claims.table.loc[claims.table["claim"] == "C8", "verdict"].iloc[0]
    c8 = split.meta.get("c8", {})
    lines += [
        f"**{split_sentence(quoted, where=f'In the sink-reading heads of {model}')}.**",
        "",
        f"C8 (the sink path's position runs mostly through the mask's count, not key 0's RoPE phase) is **{verdict}**: "
        f"read on V, the split's own verdict is *{c8.get('verdict')}* ({c8.get('reason')}).",
        "",
        "V is the position code as the unedited model writes it (the probe fitted on the unedited run, applied to the "
        "edited one); R² is position content (the probe refitted on the edited run). Both are means over layers ≥ 2 of "
        "the residual stream entering each block, with 95% paired group-jackknife intervals (methodology §13). "
        "Sentences generated by `poslens.study.claims.text.split_sentence` from the claims' inputs table.",
        "",
    ]
    return "\n".join(lines)


def split_section(parts: dict[str, Result]) -> str:
    """The sink-split part's figures: each run's f on both readouts, and the split's derived figures."""
    lines = ["## The sink path's split (C8, methodology §13)", ""]
    if "sink-split" not in parts:
        return "\n".join(lines + [missing("sink-split"), ""])
    split = parts["sink-split"]
    t = split.table[split.table["layer"] == -1]
    settings = split.meta.get("settings", {})
    lines.append(
        f"In the {len(split.meta.get('sink_heads', []))} sink-reading heads (τ = {settings.get('tau')}), key 0's phase "
        f"frozen at D = {split_offset_of(split)}; means over layers ≥ 2; 95% intervals. Δ: each run minus the unedited "
        "run, paired over the groups."
    )
    lines.append("")

    def cell(rows: pd.DataFrame) -> str:
        return "" if rows.empty else with_interval(rows["value"].iloc[0], rows["ci_low"].iloc[0], rows["ci_high"].iloc[0])

    rows = []
    for run in t.loc[t["kind"] == "level", "intervention"].drop_duplicates():
        r = t[t["intervention"] == run]
        pick = [("f", "V"), ("f_change", "V"), ("f", "R2"), ("f_change", "R2"), ("loss_change", "loss")]
        rows.append([f"`{run}`", *(cell(r[(r["metric"] == m) & (r["readout"] == k)]) for m, k in pick)])
    lines.append(markdown_table(["run", "V", "ΔV", "R²", "ΔR²", "Δ loss (nats)"], rows, ["l", "r", "r", "r", "r", "r"]))
    lines.append("")
    derived = t[t["kind"] == "derived"]
    rows = [
        [f"`{metric}`", cell(part[part["readout"] == "V"]), cell(part[part["readout"] == "R2"])]
        for metric, part in derived.groupby("metric", sort=False)
    ]
    lines.append(markdown_table(["figure", "V", "R²"], rows, ["l", "r", "r"]))
    lines.append("")
    for readout in ("V", "R2"):
        said = split.meta.get("split", {}).get(readout, {}).get("no_share")
        if said:
            lines.append(f"- No share on {readout}: {said}.")
    for edit, flag in split.meta.get("split", {}).get("flags", {}).items():
        lines.append(f"- `{edit}`: {flag}.")
    lines.append("")
    return "\n".join(lines)


def decided_section(folder: Path, parts: dict[str, Result], run: dict[str, Any]) -> str:
    """One paragraph per claim: what the data decided (the report's sentences) and what they could not."""
    lines = ["## What the data decided, claim by claim", ""]
    claims = read_claims(folder)
    if claims is None:
        return "\n".join(lines + [f"*`{CLAIMS_FILE}` or `{INPUTS_FILE}` is not in this run folder.*", ""])
    lines.append(
        "Each paragraph is generated from the claims and inputs tables: first the verdict of each case with "
        "the figures it read (the sentences of the HTML report), then what those figures could not decide. "
        "Rules and margins were fixed in code before the run."
    )
    lines.append("")
    by_claim: dict[str, list[dict[str, Any]]] = {}
    for row in summary_rows(claims, str(folder), present=list(parts), settings=run.get("settings") or {}):
        by_claim.setdefault(row["claim"], []).append(row)
    for claim, rows in by_claim.items():
        if len({r["verdict"] for r in rows}) == 1:
            verdicts = rows[0]["verdict"]
        else:
            verdicts = ", ".join(f"{r['verdict']} ({r['case']})" for r in rows)
        said = _c4_reading(claims) if claim == "C4" and rows[0]["verdict"] != NOT_MEASURED else " ".join(r["sentence"] for r in rows)
        lines.append(f"**{claim}: {verdicts}.** {said} {_open_questions(claim, claims, parts, run)}")
        lines.append("")
    return "\n".join(lines)


def reduction_rows(result: Result) -> list[list[str]]:
    rows = []
    t = result.table
    t = t[(t["metric"] == "reduction") & (t["layer"] == -1) & (t["head"] == -1)]
    for intervention in dict.fromkeys(t["intervention"]):
        row = [f"`{intervention}`"]
        for window in ("early", "all"):
            r = t[(t["intervention"] == intervention) & (t["query_window"] == window)]
            row.append(with_interval(*r[["value", "ci_low", "ci_high"]].iloc[0]) if len(r) else "—")
        rows.append(row)
    return rows


def bos_section(parts: dict[str, Result]) -> str:
    lines = ["## BOS-embedding replacement (C5)", ""]
    if "bos-swap" not in parts:
        return "\n".join(lines + [missing("bos-swap")])
    result = parts["bos-swap"]
    lines.append(
        "Reduction = 1 − C_res(after) / C_res(before), aggregated over layers ≥ 1, with 95% paired "
        "jackknife intervals (methodology §7). The replacement is written into the embedding output at "
        "position 0 before the first block."
    )
    lines.append("")
    lines.append(markdown_table(["replacement", f"reduction, {WINDOW_TEXT['early']}", f"reduction, {WINDOW_TEXT['all']}"], reduction_rows(result)))
    described = result.meta.get("replacements") or []
    if described:
        lines += [
            "",
            "Replacements as recorded: " + "; ".join(", ".join(f"{k} = {v}" for k, v in d.items() if v is not None) for d in described) + ".",
        ]
    lines.append("")
    return "\n".join(lines)


def ablation_section(parts: dict[str, Result]) -> str:
    lines = ["## Sink-path ablation (C3)", ""]
    if "ablate-sinks" not in parts:
        return "\n".join(lines + [missing("ablate-sinks")])
    result = parts["ablate-sinks"]
    heads = (result.meta.get("ablation") or {}).get("heads")
    if result.table.empty:
        return "\n".join(lines + ["*No head reached the sink threshold: nothing was ablated.*", ""])
    text = (
        "In every sink-reading head, a_i0 is replaced by the head's mean over queries and the rest of the row "
        "rescaled (methodology §7). Reduction of C_res over layers ≥ 1, 95% paired jackknife intervals"
    )
    text += f"; {len(heads)} heads ablated." if isinstance(heads, list) else "."
    lines += [text, ""]
    lines.append(markdown_table(["intervention", f"reduction, {WINDOW_TEXT['early']}", f"reduction, {WINDOW_TEXT['all']}"], reduction_rows(result)))
    lines.append("")
    return "\n".join(lines)


PATH_READOUTS = (
    ("resid_probe_r2_ge2", "residual probe R²"),
    ("attn_out_probe_r2_ge2", "attention-output probe R²"),
    ("resid_eta2_ge2", "residual η²"),
    ("leakage_pattern_ge2", "L(log a)"),
    ("leakage_pattern_numerator_ge2", "‖P(log a)‖² per pair"),
    ("leakage_pattern_sst_ge2", "SST(log a) per pair"),
)


def _path_cell(rows: pd.DataFrame, intervention: str, reference: str, metric: str, kind: str = "difference", qbin: int = -1) -> str:
    hit = rows[
        (rows["intervention"] == intervention)
        & (rows["reference"].fillna("") == reference)
        & (rows["metric"] == metric)
        & (rows["kind"] == kind)
        & (rows["query_bin"] == qbin)
    ]
    return with_interval(*hit[["value", "ci_low", "ci_high"]].iloc[0]) if len(hit) else "—"


def path_section(parts: dict[str, Result], page: Path) -> str:
    """The path-specific tests (methodology §12): each edit's paired changes, the split of the sink path, the doses."""
    lines = ["## Path-specific causal tests (C3, methodology §12)", ""]
    if "path-tests" not in parts:
        return "\n".join(lines + [missing("path-tests")])
    result = parts["path-tests"]
    t = result.table
    t = t[(t["layer"] == -1) & (t["query_window"] == "all")]
    meta = result.meta
    heads = meta.get("sink_heads") or []
    lines += [
        "One full forward pass per edit over the leakage part's corpus, each read against the unedited pass on the "
        "same tokens and groups, the mean over layers ≥ 2 (each layer read with the layers below it edited). "
        "`key0-phase:D=…` freezes the RoPE phase of every key-0 logit at offset D in every layer; `key1-phase:D=…` "
        "is the same on key 1, the sham; `sink-mask-only:λ` moves the sink-reading heads' a_i0 λ of the way to the "
        f"mask-only counterfactual's; `sink-ablation` fixes it at its mean ({len(heads)} sink-reading heads at "
        f"τ = {(meta.get('settings') or {}).get('tau')}). Probe intervals from the folds, the rest paired "
        "delete-one-group jackknife, 95%.",
        "",
        "Unedited levels: " + ", ".join(f"{words} {_path_cell(t, 'none', '', metric, kind='level')}" for metric, words in PATH_READOUTS[:4]) + ".",
        "",
    ]
    header = ["edit", "against"] + [f"Δ {words}" for _, words in PATH_READOUTS] + ["Δ loss (nats)"]
    rows = []
    pairs = list(dict.fromkeys(zip(t.loc[t["kind"] == "difference", "intervention"], t.loc[t["kind"] == "difference", "reference"], strict=False)))
    for intervention, reference in pairs:
        cells = [_path_cell(t, intervention, reference, metric) for metric, _ in PATH_READOUTS]
        cells.append(_path_cell(t, intervention, reference, "next_token_loss"))
        rows.append([f"`{intervention}`", f"`{reference}`", *cells])
    lines += [markdown_table(header, rows), ""]
    doses = meta.get("dose_responses") or []
    if doses:
        lines += ["Dose-responses (the change against the unedited run at each dose; for λ, from λ = 0):", ""]
        lines.append(
            markdown_table(
                ["edit", "readout", "doses", "changes", "direction"],
                [
                    [
                        f"`{d['edit']}`",
                        f"`{d['metric']}`",
                        f"{d['dose_name']} = {d['doses']}",
                        d["changes"],
                        f"{d['direction']} {d['where_not']}".strip(),
                    ]
                    for d in doses
                ],
            )
        )
        lines.append("")
    lines.append(image("path_probe.png", "Residual probe R² by layer: unedited, key 0's phase frozen at each D, and the key-1 sham", page))
    lines.append(image("path_split.png", "The sink path split, beside the freeze and the sham (paired changes, layers ≥ 2)", page))
    lines.append(image("path_doses.png", "Dose-responses of the residual probe R² over D and λ", page))
    return "\n".join(lines)


def sinks_section(parts: dict[str, Result], run: dict[str, Any]) -> str:
    lines = ["## Sink-reading heads (methodology §6)", ""]
    if "sinks" not in parts:
        return "\n".join(lines + [missing("sinks")])
    result = parts["sinks"]
    t = result.table
    counts = t[(t["metric"] == "sink_heads") & (t["head"] == -1)]
    scores = t[(t["metric"] == "sink_score") & (t["head"] >= 0)]
    model = result.meta.get("model", {})
    n_heads = model.get("n_heads")
    tau = (result.meta.get("settings") or {}).get("tau", (run.get("settings") or {}).get("tau"))
    lines.append(
        f"Model {model.get('model', '?')} ({model.get('variant', 'base')}). A head is sink-reading if its sink "
        "score (mean over queries i ≥ 1 of a_i0) is at least τ"
        + (f" = {tau}" if tau is not None else "")
        + ". Low: heads whose score interval lies wholly above τ; "
        "high: heads whose interval reaches τ."
    )
    lines.append("")
    rows = []
    for layer in layer_order(counts["layer"]):
        r = counts[counts["layer"] == layer].iloc[0]
        heads_here = scores[scores["layer"] == layer] if layer >= 0 else scores
        total = len(heads_here) if len(heads_here) else (n_heads if layer >= 0 else None)
        name = "all layers" if layer == -1 else str(layer)
        top = heads_here["value"].max() if len(heads_here) else float("nan")
        rows.append([name, count(r["value"]), f"[{count(r['ci_low'])}, {count(r['ci_high'])}]", str(total) if total is not None else "—", num(top)])
    lines.append(markdown_table(["layer", "sink-reading heads", "interval [low, high]", "heads measured", "highest sink score"], rows))
    lines.append("")
    return "\n".join(lines)


def fingerprint_section(parts: dict[str, Result]) -> str:
    lines = ["## Position-0 fingerprint (C6)", ""]
    if "fingerprint" not in parts:
        return "\n".join(lines + [missing("fingerprint")])
    t = parts["fingerprint"].table
    t = t[(t["layer"] == -1) & (t["head"] == -1)]
    if t.empty:
        return "\n".join(lines + ["*The fingerprint table has no layer −1 aggregate rows.*", ""])
    lines.append("Aggregates over layers (layer −1 of the table), 95% intervals, per setting of position 0 (methodology §8).")
    lines.append("")
    rows = []
    for (intervention, metric, window), part in t.groupby(["intervention", "metric", "query_window"], sort=False):
        r = part.iloc[0]
        rows.append([f"`{intervention}`", f"`{metric}`", window, with_interval(r["value"], r["ci_low"], r["ci_high"])])
    lines.append(markdown_table(["position 0", "metric", "window", "value [95%]"], rows, ["l", "l", "l", "r"]))
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- page


def build(folder: Path, out: Path = Path("docs/findings.md")) -> str:
    run_path = folder / "run.json"
    run = json.loads(run_path.read_text()) if run_path.exists() else {}
    parts = load_parts(folder)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [
        "# Findings",
        "",
        f"*Generated on {generated} by `.venv/bin/python docs/make_findings.py --results {folder}` from the tables "
        f"of the run folder `{folder}` ("
        + ", ".join(
            f"`{name}`"
            for name in [CLAIMS_FILE, INPUTS_FILE, "run.json"] + [f"{p}.parquet" for p in parts] + list(ATTRIBUTION_FILES)
            if (folder / name).exists()
        )
        + "). Every figure below is read from those tables; none is typed in. The images are drawn from the same "
        f"tables by `.venv/bin/python docs/make_findings_figures.py --results {folder}`. " + weights_note(recorded_models(run, parts)) + "*",
        "",
    ]
    if not run_path.exists():
        head += ["*`run.json` is missing from the run folder: the run's provenance is incomplete.*", ""]
    sections = [
        split_headline(folder, parts),
        claims_section(folder),
        decided_section(folder, {**parts, **({"relativize": a} if (a := read_attribution(folder)) else {})}, run),
        provenance(folder, run, parts),
        leakage_section(parts),
        compare_section(parts, out),
        comparisons_section(parts, out),
        attribution_section(folder, out),
        bos_section(parts),
        ablation_section(parts),
        path_section(parts, out),
        split_section(parts),
        sinks_section(parts, run),
        fingerprint_section(parts),
    ]
    return "\n".join(head) + "\n" + "\n".join(sections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("results/full"), help="run folder written by poslens report")
    parser.add_argument("--out", type=Path, default=Path("docs/findings.md"), help="Markdown page to write")
    parser.add_argument(
        "--summary-in",
        type=Path,
        nargs="*",
        default=[],
        help="pages whose claims-summary markers receive the short claims table (README.md, docs/index.md)",
    )
    args = parser.parse_args()
    if not args.results.is_dir():
        parser.error(f"{args.results} is not a folder; run `poslens report --full --out {args.results}` first")
    text = build(args.results, args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} from {args.results}")
    for page in args.summary_in:
        link = "findings.md" if page.parent.name == "docs" else "docs/findings.md"
        page.write_text(replace_summary(page.read_text(encoding="utf-8"), claims_summary(args.results, link)), encoding="utf-8")
        print(f"wrote the claims summary into {page}")


if __name__ == "__main__":
    main()
