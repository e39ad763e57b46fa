"""Write the zoo page (``docs/zoo.md``) and its figures (``docs/img/zoo/*.svg``) from the committed tables.

Reads what ``poslens zoo-measure`` wrote into ``docs/zoo_data`` (``runs.csv``,
``emergence.csv``, ``figures.csv``, ``family.csv``, ``claims.csv``,
``claim_inputs.csv``, ``parts.csv``, ``measure.json``) from the stored family
(``docs/zoo_family``), the first family's tables and the power table computed
from them before this family was trained (``docs/zoo_data/first_family``), and,
for C4's inference-time verdicts, the findings run's claims (``docs/findings_data``).
Every number on the page comes from those tables; the page only selects and
formats them. The figures are SVG line charts drawn here, in plain Python,
from ``emergence.csv``: the same tables give the same bytes, so the test suite
regenerates both the page and the figures and compares them with the committed ones.

Usage::

    .venv/bin/python docs/make_zoo.py [--data docs/zoo_data] [--findings docs/findings_data] [--out docs/zoo.md]
"""

from __future__ import annotations

import argparse
import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from poslens.study.claims.c4_zoo import ZOO_COMPARISONS, inference_time_beside
from poslens.study.claims.table import Claims
from poslens.study.claims.text import summary_rows
from poslens.study.part_registry import zoo_parts
from poslens.study.zoo_decisions import decide_family, decision_sentence
from poslens.study.zoo_plan import RECORDED_SECONDS, plan_family
from poslens.study.zoo_power import POWER_FILE, TARGET_RULE, power_markdown
from poslens.zoo.family import MEMBERS, NOPE_NOTE

ROOT = Path(__file__).resolve().parents[1]
FIGURES = Path(__file__).parent / "img" / "zoo"
#: One colour per member (the same on every figure).
COLOURS = {"standard": "#1f77b4", "large-base-trained": "#d62728", "sliding": "#2ca02c"}
DASHES = ("", "6,3", "2,3", "8,3,2,3")


def _num(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.{digits}g}".replace("-", "−")


def _interval(value: float, low: float, high: float) -> str:
    return f"{_num(value)} [{_num(low)}, {_num(high)}]"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (first column left-aligned, the others right-aligned)."""
    cells = lambda row: "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |"  # noqa: E731
    return "\n".join([cells(header), "|" + ":---|" + "---:|" * (len(header) - 1), *[cells(r) for r in rows]])


# ---------------------------------------------------------------------------------------------------------- figures


def line_chart(
    series: list[dict], title: str, x_label: str, y_label: str, threshold: float | None = None, width: int = 640, height: int = 300
) -> str:
    """An SVG line chart: each series ``{"x", "y", "colour", "dash", "label"}``; ``threshold`` draws a dotted level.

    Args:
        series: The lines.
        title: The chart's title.
        x_label: The x axis's label.
        y_label: The y axis's label.
        threshold: A level drawn as a grey dotted line (τ), or None.
        width: Pixels.
        height: Pixels.

    Returns:
        The SVG text.
    """
    left, right, top, bottom = 58, 180, 30, 42
    mid = (top + height - bottom) / 2
    xs = [x for s in series for x in s["x"]] or [0.0, 1.0]
    ys = [y for s in series for y in s["y"] if math.isfinite(y)] + ([threshold] if threshold is not None else []) + [0.0]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1
    y1 += 0.05 * (y1 - y0)
    px = lambda x: left + (x - x0) / (x1 - x0) * (width - left - right)  # noqa: E731
    py = lambda y: height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="18" font-size="13">{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{py(y0):.1f}" x2="{width - right}" y2="{py(y0):.1f}" stroke="#444"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#444"/>',
    ]
    for k in range(5):
        y = y0 + (y1 - y0) * k / 4
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{html.escape(_num(y, 2))}</text>')
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{width - right}" y2="{py(y):.1f}" stroke="#eee"/>')
    integral = all(float(x).is_integer() for x in xs)
    ticks = [float(x) for x in range(int(x0), int(x1) + 1)] if integral and x1 - x0 <= 8 else [x0 + (x1 - x0) * k / 4 for k in range(5)]
    for x in ticks:
        shown = f"{x:.0f}" if integral else _num(x, 3)
        out.append(f'<text x="{px(x):.1f}" y="{height - bottom + 15}" text-anchor="middle">{html.escape(shown)}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.1f}" y="{height - 8}" text-anchor="middle">{html.escape(x_label)}</text>')
    out.append(f'<text x="14" y="{mid:.1f}" text-anchor="middle" transform="rotate(-90 14 {mid:.1f})">{html.escape(y_label)}</text>')
    if threshold is not None:
        out.append(f'<line x1="{left}" y1="{py(threshold):.1f}" x2="{width - right}" y2="{py(threshold):.1f}" stroke="#888" stroke-dasharray="1,3"/>')
        out.append(f'<text x="{width - right - 4}" y="{py(threshold) - 4:.1f}" text-anchor="end" fill="#666">τ = {_num(threshold)}</text>')
    for k, s in enumerate(series):
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(s["x"], s["y"], strict=True) if math.isfinite(y))
        dash = f' stroke-dasharray="{s["dash"]}"' if s["dash"] else ""
        out.append(f'<polyline points="{points}" fill="none" stroke="{s["colour"]}" stroke-width="1.6"{dash}/>')
        ly = top + 14 * k + 6
        out.append(f'<line x1="{width - right + 10}" y1="{ly}" x2="{width - right + 34}" y2="{ly}" stroke="{s["colour"]}" stroke-width="1.6"{dash}/>')
        out.append(f'<text x="{width - right + 38}" y="{ly + 4}">{html.escape(s["label"])}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def emergence_figures(data: Path) -> dict[str, str]:
    """The emergence curves, by file name: the sink count at τ and the key-0 mass per checkpoint, one line per run.

    Args:
        data: The tables' folder.

    Returns:
        ``{file name: SVG text}``.
    """
    log = pd.read_csv(data / "emergence.csv")
    options = json.loads((data / "measure.json").read_text())
    tau = float(options["zoo"]["settings"]["tau"])
    seeds = sorted(log["seed"].unique())
    figures = {}
    for name, metric, y_label, threshold in (
        ("emergence_sinks.svg", "sink_heads", f"heads with sink score ≥ τ = {_num(tau)}", None),
        ("emergence_key0.svg", "max_sink_score", "largest sink score of a head", tau),
        ("emergence_loss.svg", "held_out_loss", "held-out loss (nats per token)", None),
    ):
        series = []
        for member in [m for m in MEMBERS if m in set(log["member"])]:
            for k, seed in enumerate(seeds):
                run = log[(log["member"] == member) & (log["seed"] == seed)].sort_values("step")
                series.append(
                    dict(
                        x=run["step"].tolist(),
                        y=run[metric].astype(float).tolist(),
                        colour=COLOURS[member],
                        dash=DASHES[k % len(DASHES)],
                        label=f"{member}, seed {seed}",
                    )
                )
        figures[name] = line_chart(series, f"{y_label.split(' (')[0]}, per checkpoint", "training step", y_label, threshold)
    return figures


def layer_figures(data: Path) -> dict[str, str]:
    """C_res and C_mask by layer (all queries, unedited), one line per run, from ``figures.csv``.

    Args:
        data: The tables' folder.

    Returns:
        ``{file name: SVG text}``.
    """
    figures = pd.read_csv(data / "figures.csv")
    rows = figures[
        (figures["part"] == "leakage") & (figures["layer"] >= 0) & (figures["query_window"] == "all") & (figures["intervention"] == "none")
    ]
    seeds = sorted(rows["seed"].unique())
    out = {}
    for name, metric, label in (("c_res_by_layer.svg", "c_res", "C_res (ΔR²)"), ("c_mask_by_layer.svg", "c_mask", "C_mask (ΔR²)")):
        series = []
        for member in [m for m in MEMBERS if m in set(rows["member"])]:
            for k, seed in enumerate(seeds):
                run = rows[(rows["member"] == member) & (rows["seed"] == seed) & (rows["metric"] == metric)].sort_values("layer")
                series.append(
                    dict(
                        x=run["layer"].astype(float).tolist(),
                        y=run["value"].astype(float).tolist(),
                        colour=COLOURS[member],
                        dash=DASHES[k % len(DASHES)],
                        label=f"{member}, seed {seed}",
                    )
                )
        out[name] = line_chart(series, f"{label.split(' (')[0]} by layer, all queries", "layer", label)
    return out


def zoo_figures(data: Path) -> dict[str, str]:
    """Every figure of the page, by file name: the emergence curves and the figures by layer.

    Args:
        data: The tables' folder.

    Returns:
        ``{file name: SVG text}``.
    """
    return {**emergence_figures(data), **layer_figures(data)}


def write_figures(data: Path, folder: Path = FIGURES) -> list[Path]:
    """Draw :func:`zoo_figures` into ``folder``.

    Args:
        data: The tables' folder.
        folder: Where the SVG files go.

    Returns:
        The files written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in zoo_figures(data).items():
        (folder / name).write_text(text, encoding="utf-8")
        written.append(folder / name)
    return written


# ---------------------------------------------------------------------------------------------------------- page


def _runs_table(runs: pd.DataFrame, emergence: pd.DataFrame, tau: float) -> str:
    rows = []
    for r in runs.itertuples():
        log = emergence[(emergence["member"] == r.member) & (emergence["seed"] == r.seed) & (emergence["sink_heads"] >= 1)]
        first = str(int(log["step"].min())) if len(log) else "none"
        rows.append(
            [
                f"`{r.member}`",
                r.seed,
                r.steps,
                f"{r.tokens:,}",
                _num(r.held_out_loss, 4),
                r.sink_heads,
                first,
                _num(r.key0_mass),
                _num(r.max_sink_score),
            ]
        )
    header = [
        "member",
        "seed",
        "steps",
        "tokens",
        "held-out loss",
        f"sink heads (τ = {_num(tau)})",
        "first step with one",
        "key-0 mass",
        "largest sink score",
    ]
    return markdown_table(header, rows)


def _sinks_sentence(runs: pd.DataFrame, tau: float) -> str:
    formed = runs[runs["sink_heads"] >= 1]
    missing = runs[runs["sink_heads"] < 1]
    members = [m for m in MEMBERS if m in set(runs["member"])]
    every = [m for m in members if (runs[runs["member"] == m]["sink_heads"] >= 1).all()]
    none = [m for m in members if (runs[runs["member"] == m]["sink_heads"] < 1).all()]
    text = (
        f"At the last checkpoint, {len(formed)} of {len(runs)} runs have at least one head with a sink score ≥ τ = {_num(tau)} "
        "on the held-out sequences. "
    )
    if len(missing) == 0:
        return text + "Every member formed sinks in every seed."
    parts = []
    if every:
        parts.append("every seed of " + ", ".join(f"`{m}`" for m in every) + " formed sinks")
    if none:
        parts.append("no seed of " + ", ".join(f"`{m}`" for m in none) + " did")
    rest = [m for m in members if m not in every and m not in none]
    if rest:
        parts.append("some seeds of " + ", ".join(f"`{m}`" for m in rest) + " did")
    return text + "; ".join(parts)[:1].upper() + "; ".join(parts)[1:] + ". A member without sinks is a finding of this family, not tuned away."


_FAMILY_FIGURES = [
    ("leakage", "c_res", "all", "none", "C_res, layers ≥ 1, all queries"),
    ("leakage", "c_mask", "all", "none", "C_mask, layers ≥ 1, all queries"),
    ("leakage", "c_res_depth_slope", "all", "none", "depth slope of C_res"),
    ("leakage", "leakage_pattern_heldout", "all", "none", "held-out ΔR² of log attention on position"),
    ("leakage", "probe_r2", "all", "none", "probe of position, held-out R²"),
    ("sinks", "sink_heads", "all", "none", "sink-reading heads (τ)"),
    ("sinks", "key0_mass", "all", "none", "key-0 mass, mean over heads"),
    ("bos-swap", "reduction", "early", "bos:mean", "BOS → mean embedding: reduction of C_res, early queries"),
    ("bos-swap", "reduction", "early", "bos:zero", "BOS → zero: reduction of C_res, early queries"),
    ("ablate-sinks", "reduction", "early", None, "sink-path ablation: reduction of C_res, early queries"),
    ("relativize", "reduction_ge2", "all", "relativize:all", "relativized, every column: r over layers ≥ 2"),
    ("relativize", "reduction_ge2", "all", "relativize:key0", "relativized, key 0 only: r over layers ≥ 2"),
    ("path-tests", "resid_probe_r2_ge2", "all", "key0-phase:D=64", "key-0 phase frozen at D = 64: change of the residual probe R², layers ≥ 2"),
    ("path-tests", "resid_probe_r2_ge2", "all", "key0-phase:D=64 − key1-phase:D=64", "the same, minus the key-1 sham's change"),
    ("path-tests", "leakage_pattern_ge2", "all", "sink-mask-only:1", "mask-only sink profile: change of L(log a), layers ≥ 2"),
    ("path-tests", "next_token_loss", "all", "key0-phase:D=64", "key-0 phase frozen at D = 64: change of next-token loss (nats)"),
]


def _family_tables(family: pd.DataFrame) -> tuple[str, str]:
    """The members side by side (mean ± sd over seeds [range]) and the differences from standard (t interval, detectable)."""
    members = [m for m in MEMBERS if m in set(family["member"])]
    side, diff = [], []
    for part, metric, window, intervention, label in _FAMILY_FIGURES:
        rows = family[(family["part"] == part) & (family["metric"] == metric) & (family["query_window"] == window)]
        if intervention is not None:
            rows = rows[rows["intervention"] == intervention]
        if rows.empty:
            side.append([label] + ["not measured"] * len(members))
            continue
        cells, dcells = [], []
        for m in members:
            r = rows[rows["member"] == m]
            if r.empty:
                cells.append("—")
                dcells.append("—")
                continue
            r = r.iloc[0]
            cells.append(f"{_num(r['mean'])} ± {_num(r['sd'])} [{_num(r['min'])}, {_num(r['max'])}]")
            if m != "standard":
                dcells.append(f"{_interval(r['difference'], r['difference_ci_low'], r['difference_ci_high'])}; detects {_num(r['detectable'])}")
        side.append([label, *cells])
        diff.append([label, *dcells])
    head = [f"`{m}` (n = seeds)" for m in members]
    dhead = [f"`{m}` − `standard`" for m in members if m != "standard"]
    return markdown_table(["figure", *head], side), markdown_table(["figure", *dhead], diff)


def _detectable_sentence(family: pd.DataFrame) -> str:
    """The smallest difference in C_res (all queries) the family could detect, per member, beside the seeds' spread."""
    rows = family[
        (family["part"] == "leakage") & (family["metric"] == "c_res") & (family["query_window"] == "all") & (family["intervention"] == "none")
    ]
    said = []
    for r in rows.itertuples():
        if r.member != "standard" and math.isfinite(r.detectable):
            said.append(f"`{r.member}` − `standard`: {_num(r.detectable)} (its observed difference {_num(r.difference)})")
    spread = ", ".join(f"`{r.member}` {_num(r.sd)}" for r in rows.itertuples())
    if not said:
        return ""
    return (
        "**The smallest difference in C_res (layers ≥ 1, all queries) the family could detect:** "
        + "; ".join(said)
        + f". The seeds' own spread (standard deviation of C_res over seeds): {spread}."
    )


def _no_sink_note(runs: pd.DataFrame, emergence: pd.DataFrame, settings: dict, tau: float) -> str:
    """Where no run formed a sink: how far the largest sink score stayed from τ, beside a uniform head's score."""
    if (runs["sink_heads"] >= 1).any():
        return ""
    last = emergence[emergence["step"] == emergence["step"].max()]
    window = _window(settings)
    parts = []
    for member, rows in last.groupby("member", sort=False):
        uniform = _uniform(window) if MEMBERS[member].windowed else _uniform(settings["seq_len"])
        parts.append(f"`{member}` {_num(rows['max_sink_score'].max())} (a uniform head: {_num(uniform)})")
    return (
        f"**No run formed a sink, so C4 could not be read in this family.** At step {int(last['step'].iloc[0])} the largest sink "
        f"score of any head, over the seeds, is: {'; '.join(parts)}, against τ = {_num(tau)}: every head's attention to "
        "key 0 stayed near what a head attending uniformly gives it. The family was fixed before training and is reported "
        "as it came out; its weights are kept, so longer training or another shape can be compared with it."
    )


def _window(settings: dict) -> int:
    """The sliding member's window: the family's ``window`` setting, else T/8 (families trained before it could be set)."""
    return int(settings.get("window") or max(2, settings["seq_len"] // 8))


def _window_words(settings: dict) -> str:
    """The window as the page names it: "T/8 = 16" or "T/2 = 32" (W = T/k), else "W = 24"."""
    t, w = int(settings["seq_len"]), _window(settings)
    return f"T/{t // w} = {w}" if t % w == 0 else f"W = {w}"


#: The learning-rate schedule after the warmup, as the page names it.
SCHEDULE_WORDS = {"cosine": "cosine decay to a tenth", "constant": "then constant"}
#: How close to a uniform head's sink score a head counts as attending uniformly.
UNIFORM_WITHIN = 0.002


def _uniform_heads_note(runs: pd.DataFrame, settings: dict, emergence: pd.DataFrame) -> str:
    """Where runs formed no sink: how many of their heads ended at a uniform head's sink score (the runs' own logs)."""
    sinkless = runs[runs["sink_heads"] < 1]
    if sinkless.empty or not (ROOT / STORED / "hashes.json").exists():
        return ""
    said = []
    for member, rows in sinkless.groupby("member", sort=False):
        uniform = _uniform(_window(settings)) if MEMBERS[member].windowed else _uniform(int(settings["seq_len"]))
        near = total = 0
        for r in rows.itertuples():
            lines = (ROOT / STORED / f"{r.member}-s{r.seed}" / "log.jsonl").read_text(encoding="utf-8").splitlines()
            scores = [x for layer in json.loads(lines[-1])["sink_scores"] for x in layer]
            near += sum(abs(x - uniform) <= UNIFORM_WITHIN for x in scores)
            total += len(scores)
        seeds = ", ".join(str(s) for s in rows["seed"])
        said.append(f"`{member}` (seed{'s' if len(rows) > 1 else ''} {seeds}): {near} of {total} heads")
    formed = runs[runs["sink_heads"] >= 1]
    if len(formed) and sinkless["held_out_loss"].min() > formed["held_out_loss"].max():
        return _plateau_note(sinkless, formed, said, emergence)
    return (
        "**Where no sink formed, many heads attend uniformly.** At the last checkpoint, the heads whose sink score is within "
        f"{UNIFORM_WITHIN:g} of a uniform head's, in the runs without a sink: {'; '.join(said)}. Those heads' queries and keys"
        " no longer tell the keys apart; the others do, and still put little weight on key 0 (the largest sink scores above)."
        " One reading, not tested here: the MLP after the head that copies can use its output at triggers alone, so the head"
        " need not be dormant, and under a window that hides BOS from most queries that route is the one learned."
    )


def _plateau_note(sinkless: pd.DataFrame, formed: pd.DataFrame, said: list[str], emergence: pd.DataFrame) -> str:
    """Where every run without a sink also ended at a higher held-out loss than every run with one: they did not learn the task."""
    early = emergence[emergence["step"] == sorted(emergence["step"].unique())[1]]
    return (
        "**Where no sink formed, the run did not learn the task.** The runs without a sink ended at a held-out loss of "
        f"{_num(sinkless['held_out_loss'].min(), 4)}–{_num(sinkless['held_out_loss'].max(), 4)}, every run with one at "
        f"{_num(formed['held_out_loss'].min(), 4)}–{_num(formed['held_out_loss'].max(), 4)}; at step {int(early['step'].iloc[0])} the "
        f"family's runs stood at {_num(early['held_out_loss'].min(), 4)}–{_num(early['held_out_loss'].max(), 4)}, and the runs without a "
        "sink never went much below that. In them, the heads within "
        f"{UNIFORM_WITHIN:g} of a uniform head's sink score: {'; '.join(said)}: their queries and keys tell no key apart. These are "
        "runs that stayed on the early plateau (held-out loss, emergence figure above) to the last step, not runs that learned the"
        " task without a sink; C4 leaves their seeds out, as it leaves out every run without a sink."
    )


def _uniform(keys: int) -> float:
    """The sink score of a uniform head over queries 1 ≤ i < ``keys`` (weight 1/(i + 1) on key 0)."""
    return sum(1 / (i + 1) for i in range(1, keys)) / (keys - 1)


def _window_note(settings: dict, family: pd.DataFrame, runs: pd.DataFrame, figures: pd.DataFrame) -> str:
    """Why the sliding member's key-0 mass differs between the training log and the measured family."""
    t = int(settings["seq_len"])
    w = _window(settings)
    measured = family[(family["part"] == "sinks") & (family["metric"] == "key0_mass") & (family["member"] == "sliding")]
    logged = runs[runs["member"] == "sliding"]["key0_mass"]
    if measured.empty or logged.empty:
        return ""
    return (
        f"**The sliding member's key-0 mass, two ways.** The training log scores a head over the queries that can see key 0"
        f" (i < W = {w}): {_num(float(logged.mean()))} on average for `sliding`, against {_num(_uniform(w))} for a uniform head. The measured"
        " family uses poslens's sink score, the mean over every query i ≥ 1, where a query that cannot see key 0 counts 0:"
        f" {_num(float(measured['mean'].iloc[0]))}, that is (W − 1)/(T − 1) = {w - 1}/{t - 1} of it. "
        + _sliding_sinks_two_ways(runs, figures)
        + _unwindowed_sinks_two_ways(runs, figures)
    )


def _unwindowed_sinks_two_ways(runs: pd.DataFrame, figures: pd.DataFrame) -> str:
    """The runs of the unwindowed members whose sink count at τ differs between the training log and the measurement.

    Without a window the two scores are the same mean over the queries i ≥ 1, taken on different held-out sequences
    (the training log's last checkpoint and the sequences zoo-measure reads), so a head near τ can fall either side.
    """
    measured = figures[(figures["part"] == "sinks") & (figures["layer"] == -1) & (figures["metric"].isin(["sink_heads", "max_sink_score"]))]
    reaching = measured[measured["metric"] == "sink_heads"].set_index(["member", "seed"])["ci_high"]
    measured = measured.pivot_table(index=["member", "seed"], columns="metric", values="value")
    differ = []
    for r in runs[runs["member"] != "sliding"].itertuples():
        if (r.member, r.seed) not in measured.index:
            continue
        now = measured.loc[(r.member, r.seed)]
        if (r.sink_heads >= 1) != (now["sink_heads"] >= 1):
            differ.append(
                f"`{r.member}` seed {r.seed} (largest sink score {_num(r.max_sink_score)} in the training log,"
                f" {_num(now['max_sink_score'])} measured, where {_num(reaching.get((r.member, r.seed), np.nan))} heads reach τ within"
                " their intervals)"
            )
    if not differ:
        return ""
    return (
        " Without a window the two scores are one mean over the same queries, on other held-out sequences (the training log's"
        " last checkpoint against the sequences measured), and a head near τ can fall either side: "
        + "; ".join(differ)
        + f". {'It has' if len(differ) == 1 else 'They have'} a sink by the training log's count, which C4's zoo case reads,"
        " and none by the measured count's point estimate."
    )


def _sliding_sinks_two_ways(runs: pd.DataFrame, figures: pd.DataFrame) -> str:
    """How many runs of `sliding` have a head at τ by the training log's score and by poslens's sink score."""
    logged = runs[runs["member"] == "sliding"]
    counts = figures[(figures["member"] == "sliding") & (figures["part"] == "sinks") & (figures["metric"] == "sink_heads") & (figures["layer"] == -1)]
    by_log, by_sinks = int((logged["sink_heads"] >= 1).sum()), int((counts["value"] >= 1).sum())
    if by_log == 0 and by_sinks == 0:
        return "Either way no head of `sliding` reaches τ."
    return (
        f"By the training log's score {by_log} of the {len(logged)} runs of `sliding` have a head at τ "
        f"({int(logged['sink_heads'].sum())} heads in all), by poslens's sink score {by_sinks} ({int(counts['value'].sum())} heads): "
        "C4's zoo case reads the training log's count, the one that does not count the queries the window keeps from key 0."
    )


def _c4_table(claims: Claims) -> str:
    rows = []
    for r in claims.table.itertuples():
        detectable = claims.inputs_of(r.key)
        detectable = detectable[detectable["name"].str.startswith("detectable")]
        seeds = claims.inputs_of(r.key)
        seeds = seeds[seeds["name"].str.contains(", seed ")]
        rows.append(
            [
                r.model,
                f"`{r.case}`",
                _interval(r.figure, r.ci_low, r.ci_high),
                ", ".join(_num(v) for v in seeds["value"]),
                _num(detectable["value"].iloc[0]) if len(detectable) else "—",
                f"**{r.own_verdict}**",
            ]
        )
    return markdown_table(["comparison", "case", "mean over seeds [95% t interval]", "per seed", "detectable", "this comparison"], rows)


def build(data: Path, findings: Path) -> str:
    """The zoo page's Markdown from the tables in ``data`` (and C4's inference-time verdicts from ``findings``).

    Args:
        data: ``docs/zoo_data``.
        findings: ``docs/findings_data``.

    Returns:
        The page.
    """
    measured = json.loads((data / "measure.json").read_text())
    settings, task = measured["zoo"]["settings"], measured["zoo"]["data"]
    options = measured["options"]
    runs = pd.read_csv(data / "runs.csv")
    family = pd.read_csv(data / "family.csv")
    parts = pd.read_csv(data / "parts.csv")
    zoo_claims = Claims.read(data)
    tau = float(settings["tau"])
    side, diff = _family_tables(family)
    summary = [r for r in summary_rows(zoo_claims) if r["claim"] == "C4"]
    overall = summary[0]["verdict"] if summary else "not measured"
    inference = Claims.read(findings)
    beside = inference_time_beside(zoo_claims, inference)
    inference_overall = inference.table.loc[inference.table["claim"] == "C4", "verdict"].iloc[0]
    record = measured["zoo"]
    failed = parts[parts["status"] != "ok"]
    flags = " ".join(
        f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in (
            ("task", settings["task"]),
            ("members", settings["members"]),
            ("seeds", settings["seeds"]),
            ("steps", settings["steps"]),
            ("seq_len", settings["seq_len"]),
            ("width", settings["width"]),
            ("depth", settings["depth"]),
            ("heads", settings["heads"]),
            ("batch_size", settings["batch_size"]),
            ("lr", settings["lr"]),
            ("warmup", settings["warmup"]),
            ("schedule", settings["schedule"]),
            ("weight_decay", settings["weight_decay"]),
            ("eval_every", settings["eval_every"]),
            ("eval_seqs", settings["eval_seqs"]),
        )
    )
    if settings.get("window"):
        flags = flags.replace(" --width ", f" --window {settings['window']} --width ", 1)
    if settings.get("time_budget"):
        flags += f" --time-budget {settings['time_budget']:g}"
    lines = [
        "# The model zoo: a controlled family",
        "",
        "<!-- Generated by docs/make_zoo.py from docs/zoo_data (and docs/findings_data); do not edit by hand. -->",
        "",
        "A family of small models that differ only in their position scheme, trained on this project's CPU on a synthetic",
        "task on which attention sinks can form, its seeds set by a power analysis made before training, kept in the",
        "repository, and measured with the parts of poslens: C4 decided inside the family where its runs formed sinks.",
        "",
        '!!! note "A synthetic task, on the CPU"',
        "    The family on this page is trained on **Bigram-Backcopy**, a synthetic task, on 2 shared CPU cores. The",
        "    natural-text family (`--task stdlib`, below) was trained in the planned shape, in which no run formed a sink; no",
        "    GPU was lent to this work, so `bash benchmarks/zoo_gpu.sh` stays prepared (its CPU dry run is checked).",
        "",
        "## Why",
        "",
        "Claim C4 (NTK suppresses the residual source, a sliding window lets it accumulate, standard RoPE in between) is",
        "otherwise decided on models that differ in everything (SmolLM2 against Gemma 3) and on inference-time variants",
        "(`ntk:α`, `window:W`) of a model never trained with them. A controlled family removes both: the same task, data,",
        "data order, initial weights and size, only the position scheme changed, and several seeds, so that a difference",
        "between members can be set beside the spread between training runs.",
        "",
        "## The task: Bigram-Backcopy",
        "",
        "After Guo et al. (2024), *Active-Dormant Attention Heads*. The vocabulary is "
        f"{task['n_plain']} plain tokens (`w0` … `w{task['n_plain'] - 1}`) and {task['n_triggers']} trigger tokens "
        f"(`q0` … `q{task['n_triggers'] - 1}`), with BOS, EOS, pad and unk: {task['vocab_size']} ids. After a plain token the",
        "next one is drawn from its row of a fixed random bigram table: a trigger with probability "
        f"ρ = {task['trigger_rate']:g} (shared equally), else a plain token from a Dirichlet({task['concentration']:g}) row "
        f"(table seed {task['table_seed']}). After a trigger the next token is a **copy of the token before the trigger**.",
        "So a trigger is always between two plain tokens, and ρ/(1 + ρ) = "
        f"{task['trigger_rate'] / (1 + task['trigger_rate']):.3f} of all tokens are triggers.",
        "",
        "**Why sinks are useful on it.** Predicting a copy needs a head that, at a trigger, reads the token two back. At",
        "every other position (about nine in ten) that head has nothing to add, and the cheapest way to add nothing is to",
        "park its attention on BOS, whose value it can make small: the head is *dormant*. Guo et al. show heads of one- to",
        "three-layer transformers becoming such BOS sinks on this task.",
        "",
        "**Why absolute position is not part of the task.** Each training sequence is BOS and T − 1 tokens of a long",
        f"chain ({task['train_chains']} chains of {task['chain_len']:,} tokens, seed {task['train_seed']}) at a uniform offset; each chain ran",
        f"{task['burn_in']} steps before its first kept token and the bigram rows are dense, so the chain is stationary: every",
        "position has the same distribution of tokens, triggers included. The best prediction at position i depends on the",
        "tokens at i − 1 and i − 2 alone, by the same rule at every i; only positions 1 and 2 lack that context. T =",
        f"{settings['seq_len']} is far longer than that two-token dependency, and the sliding window of {_window_words(settings)}"
        f" keys still holds both tokens the task needs (it hides only BOS, from queries i ≥ {_window(settings)}).",
        "",
        f"The held-out text is one more chain ({task['held_out_tokens']:,} tokens, seed {task['held_out_seed']}), written as",
        "space-separated token names in `held_out.jsonl`. Each model folder carries the task's word-level tokenizer, which",
        "maps that text back to the same ids, so the measuring commands read the task's own sequences: `--corpus",
        "held_out.jsonl` cuts windows of T − 1 tokens end to end and puts BOS at position 0.",
        "",
        "## The family",
        "",
        "Every member is a `MistralForCausalLM` (its config holds both `rope_theta` and `sliding_window`, and poslens",
        "loads and bridges it, its window included):",
        "",
        markdown_table(
            ["member", "RoPE base θ", "sliding window"],
            [
                [
                    f"`{m}`",
                    f"{MEMBERS[m].rope_theta:.0e}".replace("e+0", "e"),
                    f"{_window_words(settings)} keys, every layer" if MEMBERS[m].windowed else "none",
                ]
                for m in settings["members"]
            ],
        ),
        "",
        "`large-base-trained` is *trained* with θ = 10⁶: it is not NTK scaling applied at inference time.",
        "",
        f"**No NoPE member.** {NOPE_NOTE}",
        "",
        f"The same for every member: the task and its data, width {settings['width']}, {settings['depth']} layers of",
        f"{settings['heads']} head{'s' if settings['heads'] > 1 else ''}, T = {settings['seq_len']}, batch {settings['batch_size']},",
        f"AdamW (peak rate {settings['lr']:g}, {settings['warmup']} warmup steps, {SCHEDULE_WORDS[settings['schedule']]}, weight decay",
        f"{settings['weight_decay']:g}, gradient clipping at {settings['grad_clip']:g}), float32 on the CPU. A seed fixes the initial weights",
        "(the same for every member) and the order of the batches; all runs train in lockstep, each step giving one batch",
        f"per seed to every member of that seed. Seeds: {', '.join(map(str, settings['seeds']))}.",
        "",
        "## Training",
        "",
        "```bash",
        f"poslens zoo --out results/zoo_bb {flags} --device cpu",
        "```",
        "",
    ]
    if record.get("wall_seconds"):
        lines += [
            f"It took {record.get('wall_seconds', float('nan')):.0f} s of wall time for the {len(runs)} runs"
            f" ({record.get('cpu_threads')} torch thread), on 2 CPU cores shared with other work: the",
            f"load average (1, 5, 15 min) was {', '.join(map(str, record.get('load_average_start', [])))} at the start and"
            f" {', '.join(map(str, record.get('load_average_end', [])))} at the end.",
            "",
        ]
    lines += [
        f"At step 0, every {settings['eval_every']} steps and at the last step, each run logs its held-out loss and the",
        f"sink score of every head on {settings['eval_seqs']} held-out sequences: the mean attention to key 0 over the",
        "queries i ≥ 1 that can see it (under the window, the queries i < W; the measured family below uses poslens's",
        "sink score, where a query that cannot see key 0 counts 0). A uniform head",
        f"scores about {_uniform(settings['seq_len']):.3f} at T = {settings['seq_len']} and {_uniform(_window(settings)):.3f} under the window.",
        "",
        "### Sink emergence",
        "",
        "![Sink-reading heads per checkpoint, one line per run](img/zoo/emergence_sinks.svg)",
        "",
        "![Largest sink score of a head per checkpoint, against τ](img/zoo/emergence_key0.svg)",
        "",
        "![Held-out loss per checkpoint](img/zoo/emergence_loss.svg)",
        "",
        "*Colour: the member (standard blue, large base red, sliding green); line style: the seed. Drawn by",
        "`docs/make_zoo.py` from `docs/zoo_data/emergence.csv`.*",
        "",
        _runs_table(runs, pd.read_csv(data / "emergence.csv"), tau),
        "",
        _sinks_sentence(runs, tau),
        "",
        _no_sink_note(runs, pd.read_csv(data / "emergence.csv"), settings, tau),
        "",
        _uniform_heads_note(runs, settings, pd.read_csv(data / "emergence.csv")),
        "",
        "## The family measured",
        "",
        f"Each run was measured by `poslens zoo-measure` through the same parts as `poslens report`, on {options['n_seqs']}",
        f"held-out sequences of T = {options['seq_len']} ({options['groups']} groups for the delete-one-group jackknife,",
        f"early queries 1 ≤ i < {options['early']}, τ = {_num(options['tau'])}; the relativization on {options['relativize_seqs']}",
        "sequences with as many for its calibration). The parts: " + ", ".join(measured["parts"]) + ".",
    ]
    if "path-tests" in measured["parts"]:
        lines[-1] += (
            " The path-specific tests freeze key 0's RoPE phase at D = 8, T/2 and 64 beside the same freeze of key 1 (the"
            " sham), and, in a run with sink-reading heads, swap their key-0 weights for the mask-only profile and ablate"
            " the sink path; `figures.csv` holds every edit, the tables below show D = 64, the offset C3 reads."
        )
    if len(failed):
        lines += ["", "Parts that did not finish: " + "; ".join(f"{r.run} {r.part}: {r.status}" for r in failed.itertuples()) + "."]
    lines += [
        "",
        "**Each figure per member: mean ± standard deviation over the seeds [smallest, largest].**",
        "",
        side,
        "",
        "**Each member against `standard`, paired by seed: the mean difference [95% t interval over the seeds], and the",
        "smallest difference the family could detect** (two-sided 5%, power 80%: (t₀.₉₇₅ + t₀.₈₀) · se with n − 1 degrees",
        f"of freedom; with {len(settings['seeds'])} seeds that is {_num(_t_factor(len(settings['seeds'])))} standard errors):",
        "",
        diff,
        "",
        _detectable_sentence(family),
        "",
        "![C_res by layer, one line per run](img/zoo/c_res_by_layer.svg)",
        "",
        "![C_mask by layer, one line per run](img/zoo/c_mask_by_layer.svg)",
        "",
        "Every figure of every run, per layer included, is in `docs/zoo_data/figures.csv`; `family.csv` holds the two tables above for every figure.",
        "",
        _window_note(settings, family, runs, pd.read_csv(data / "figures.csv")),
        "",
        "## C4 inside the family",
        "",
        "C4's zoo case (`poslens.study.claims.c4_zoo`, fixed before the family was measured) compares the members with the",
        "rules of C4 by differences: each comparison is decided by its sign rule in the direction C4 predicts, and the",
        "comparisons together by the joint rule. The larger trained base speaks for C4's `ntk` case (the claim is about a",
        "larger base); the seeds are the replicates. Comparisons: "
        + "; ".join(
            f"`{c.member}`" + (f" − `{c.reference}`" if c.reference else "") + f" ({c.metric}, expected {'>' if c.direction > 0 else '<'} 0)"
            for c in ZOO_COMPARISONS
        )
        + ".",
        "",
        _c4_table(zoo_claims),
        "",
        f"**C4 in the zoo: {overall}.**",
        "",
        *_decision_section(zoo_claims, data),
        "### Beside the inference-time variants",
        "",
        f"The full run's C4 (SmolLM2 with `ntk:α` and `window:W` applied at inference time; `docs/findings.md`) is **{inference_overall}**.",
        "Each zoo comparison beside the rows of the same case, kind and metric there, each with its own verdict:",
        "",
        markdown_table(
            ["zoo comparison", "zoo: this comparison", "inference-time rows (own verdict)", "where they stand"],
            [
                [f"{r.comparison} ({r.case})", f"{r.zoo_figure}: **{r.zoo_verdict}**", r.inference_rows or "—", r.agreement]
                for r in beside.itertuples()
            ],
        ),
        "",
        _agreement_sentence(beside),
        "",
        *_power_section(data),
        *_weights_section(data),
        *_four_head_family_section(data),
        *_one_head_family_section(data),
        *_planned_family_section(data),
        *_natural_text_section(data),
        *_first_family_section(data),
        "## What the zoo can and cannot say",
        "",
        "- **Can:** inside this family, a difference between members is the position scheme's, trained in, not an",
        "  inference-time edit of a model trained otherwise, and it is set beside the spread over seeds. The smallest",
        "  differences it could detect are in the tables above.",
        "- **Cannot:** say how large natural-text models behave. The task is synthetic, its sinks serve one",
        "  known purpose (dormant copy heads), its context is short and its dependencies two tokens long; the models have",
        f"  {settings['depth']} layers of width {settings['width']}. What C4 says about accumulation over depth is tested on",
        f"  {settings['depth'] - 1} layers ≥ 1. With {len(settings['seeds'])} seeds the t intervals are wide: a difference",
        "  smaller than the detectable one would be missed more often than found. The natural-text family",
        "  (`--task stdlib`) is the step between this and the pretrained models.",
        "",
        "## Running it",
        "",
        "Train (as above), then measure every run and write the tables, then this page:",
        "",
        "```bash",
        f"poslens zoo-measure --zoo results/zoo_bb --out docs/zoo_data --work results/zoo_bb_measure {_measure_flags(measured)}",
        ".venv/bin/python docs/make_zoo.py",
        "```",
        "",
        "The natural-text family stays as it was: `poslens zoo --task stdlib …` (the default task) and, on a CUDA GPU,",
        "`bash benchmarks/zoo_gpu.sh` (at most 7 minutes on one H200; `ZOO_DEVICE=cpu ZOO_SMALL=1 bash benchmarks/zoo_gpu.sh`",
        "is its CPU dry run, which checks the script, not the science).",
        "",
        "`poslens zoo` writes, per run, `<member>-s<seed>/` (the model, the task's tokenizer, `log.jsonl` with every head's",
        "sink score per checkpoint, `run.json`), and for the family `zoo.json` (settings, data, wall time and load), `log.csv`",
        "(every checkpoint of every run), `held_out.jsonl` (the `--corpus` of the measuring commands) and `summary.csv`.",
        "`poslens zoo-measure` writes the tables of `docs/zoo_data`: `runs.csv`, `emergence.csv`, `figures.csv`,",
        "`family.csv`, `claims.csv` / `claim_inputs.csv`, `parts.csv` and `measure.json`. A further part of the",
        "measurement is one more entry of `poslens.study.zoo_measure.PARTS`.",
        "",
        "Each run folder is an ordinary Hugging Face model folder, so every command measures it:",
        "",
        "```bash",
        "poslens leakage --model results/zoo_bb/sliding-s0 --corpus results/zoo_bb/held_out.jsonl "
        f"--seq-len {settings['seq_len']} --out results/zoo_bb_m/sliding-s0",
        "```",
        "",
        "The Python API is [`poslens.zoo`](api/zoo.md).",
        "",
    ]
    return "\n".join(lines)


PLANNED = "planned_family"
"""The planned family's tables (4 layers × 2 heads, width 64, T = 128, 5 seeds; no run formed a sink)."""
FIRST = "first_family"
"""The first family's tables (3 layers × 1 head, width 32, T = 64, 3 seeds), kept beside the family measured now."""
STORED = "docs/zoo_family"
"""Where the measured family's weights are kept (float16, with hashes.json)."""


def _power_section(data: Path) -> list[str]:
    """The power table and the planned family (issue 52), from the first family's ``power.csv``; nothing without it."""
    if not (data / FIRST / POWER_FILE).exists():
        return []
    power = pd.read_csv(data / FIRST / POWER_FILE)
    return [
        "<!-- power before training: added for issue 52 -->",
        "## Power before training: the family that can decide C4",
        "",
        "Computed from the first family (below) before the family on this page was trained: how many seeds each comparison",
        "of C4's zoo case needs (two-sided 5%, power 80%: the smallest n with (t₀.₉₇₅ + t₀.₈₀) · sd/√n ≤ the target, n − 1",
        "degrees of freedom, methodology §9.1). The spread is the first family's (the standard deviation over its seeds of",
        "each comparison's per-seed values), also at its one-sided 80% upper confidence bound, since three seeds estimate it",
        "loosely. The target is stated before the family was trained, and is the band of the decisions above:",
        f"each row is an inference-time row of the findings run that answers the same question; the planned target (bold) is {TARGET_RULE}.",
        "",
        *power_markdown(power, plan_family(power)),
        "",
        "The planned shape was meant to form sinks in every member (width 64, 4 layers × 2 heads, T = 128, so a window of 16); "
        "2000 steps is twice the latest step at which a run of the first family first formed a sink (1000). The spread of that "
        "larger shape is not known before it is trained: the seeds are planned from the first family's. "
        f"The time is the recorded {RECORDED_SECONDS:.0f} s of the first family scaled by runs × steps × the arithmetic of a step "
        "(`poslens.study.zoo_plan.estimate_cpu_seconds`); fixed per-call overhead does not grow with the shape, so it errs long. "
        "The trained large base against `standard` is out of reach at the size NTK scaling showed on SmolLM2: with this spread "
        "(in which one seed of `standard` formed no sink) no family that fits the CPU decides it, and it is planned as a "
        "comparison reported with its detectable difference, not as one the family can decide.",
        "",
        *_shape_paragraph(data),
        "```bash",
        "poslens zoo-measure --power --out docs/zoo_data/first_family --findings docs/findings_data   # prints the table, writes its power.csv",
        ".venv/bin/python docs/make_zoo.py",
        "```",
        "<!-- end of the power section (issue 52) -->",
        "",
    ]


FOUR_HEAD = "four_head_family"
"""The four-head family (3 layers × 4 heads, W = 48 of T = 64), once a whole-family pilot has replaced it on this page."""
ONE_HEAD = "one_head_family"
"""The family trained before this one in the first family's shape, one head per layer and a window of T/2 (no sink in `sliding`)."""
PILOTS_FILE = "pilots.csv"
"""The short pilots read for their sink counts before this family's shape was chosen (``benchmarks/zoo_pilots.py``)."""


def _pilots_table(pilots: pd.DataFrame) -> str:
    """One row per pilot: what it changed, the step read, and per member the runs with a sink."""
    rows = []
    for pilot, part in pilots.groupby("pilot", sort=True):
        first = part.iloc[0]
        formed = {r.member: f"{r.runs_with_sink}/{r.runs}" for r in part.itertuples()}
        rows.append(
            [
                str(pilot),
                f"T = {first.seq_len}, W = {first.window}",
                f"{first.depth} × {first.heads}, width {first.width}",
                f"{first.lr:g} {first.schedule}"
                + (f", warmup {first.warmup}" if first.warmup != 100 else "")
                + (f", decay {first.weight_decay:g}" if first.weight_decay != 0.1 else ""),
                f"{first.step_read} of {first.steps}",
                *[formed.get(m, "—") for m in MEMBERS],
                _num(part["largest_sink_score"].max()),
                _num(part["highest_held_out_loss"].max()),
            ]
        )
    return markdown_table(
        [
            "pilot",
            "length, window",
            "layers × heads",
            "rate",
            "step read",
            *[f"`{m}`: runs with a sink" for m in MEMBERS],
            "largest sink score",
            "highest held-out loss",
        ],
        rows,
    )


def _shape_paragraph(data: Path) -> list[str]:
    """Why the family on this page has the shape it has: the families before it, and the pilots read for their sinks."""
    if not (data / PLANNED / "measure.json").exists() or not (data / ONE_HEAD / "measure.json").exists():
        return []
    planned = json.loads((data / PLANNED / "measure.json").read_text())["zoo"]["settings"]
    one_head = json.loads((data / ONE_HEAD / "measure.json").read_text())["zoo"]["settings"]
    settings = json.loads((data / "measure.json").read_text())["zoo"]["settings"]
    one_head_runs = pd.read_csv(data / ONE_HEAD / "runs.csv")
    lines = [
        f"**The planned shape formed no sink** in any of its {len(planned['members']) * len(planned['seeds'])} runs, nor did its "
        "natural-text twin (both below). Back in the first family's shape (width "
        f"{one_head['width']}, {one_head['depth']} layers × {one_head['heads']} head, T = {one_head['seq_len']}) with a window of "
        f"{_window_words(one_head)} and a constant rate, the one-head family (below) formed sinks in "
        + ", ".join(
            f"{int((part['sink_heads'] >= 1).sum())} of {len(part)} runs of `{member}`"
            for member, part in one_head_runs.groupby("member", sort=False)
        )
        + ".",
        "",
    ]
    if (data / PILOTS_FILE).exists():
        pilots = pd.read_csv(data / PILOTS_FILE)
        name = _retrained_family(data)[2]
        whole = [int(p) for p in FULL_FAMILY_PILOTS if p in set(pilots["pilot"])]
        lines += [
            "Short pilots (not kept) were read for their sink counts alone, no C4 figure of them looked at. Pilots 1–5 came"
            f" before the one-head family's shape was chosen, 6–7 after it was trained; for {name} (8–13) the shape taken"
            " was the first in which every run of `standard` and `sliding` had a sink at the step read (the training log's"
            " count, τ = 0.3). A pilot read before its last step was stopped there (2–5 in the earlier search; 12 after a"
            " `standard` run without a sink at the lower rate; 13 once pilot 11 had met the rule; 15 once 14 was read)."
            f" Pilots 14–15 came after {name} was trained: they retrained the seeds of its runs that stayed on the early"
            " plateau (below) with 500 warmup steps or a rate of 0.007, under the same rule; neither met it.",
            "",
            _pilots_table(pilots),
            "",
            "*`benchmarks/zoo_pilots.py` wrote `docs/zoo_data/pilots.csv` from the pilots' training logs; each pilot is `poslens zoo"
            " --task bigram-backcopy` with the flags in its row, batch 16, warmup 100 unless the row says otherwise, seeds 0, 1"
            " (pilots 1–6), 0–4 (pilot 7), 0, 1, 2 (pilots 8–13), 0, 3, 4 (pilots 14–15) or 0–4"
            + (f" (pilots {whole[0]}–{whole[-1]})" if whole else "")
            + ".*",
            "",
            *_full_family_pilots_paragraph(data, pilots),
        ]
    lines += [
        f"The family on this page keeps the planned members and seeds ({len(settings['seeds'])}) in the shape of pilot"
        f" {_source_pilot(data, settings)}: width "
        f"{settings['width']}, {settings['depth']} layers × {settings['heads']} heads, T = {settings['seq_len']}, a window of "
        f"{_window_words(settings)} keys and a {settings['schedule']} rate of {settings['lr']:g}"
        + (f" after {settings['warmup']} warmup steps" if settings["warmup"] != 100 else "")
        + f", for {settings['steps']} steps. "
        f"The window hides BOS from the queries i ≥ {_window(settings)} only, {settings['seq_len'] - _window(settings)} of the "
        f"{settings['seq_len'] - 1} queries i ≥ 1. {_narrow_window_sentence(data)} At this size a windowed member forms BOS sinks"
        " only where most queries see BOS, and C4's sliding comparisons are read on such a member, nearer to `standard` than a"
        " long-context sliding-window model is.",
        "",
    ]
    return lines


FULL_FAMILY_PILOTS = (16, 17, 18, 19, 20, 21, 22, 23, 24)
"""Whole families (every member, seeds 0–4, the family's steps) trained after this one, under one rule fixed before each."""


def _changes(row: Any, base: dict) -> str:
    """What a pilot's row changed against the family ``base`` was trained with, in words."""
    words = []
    if row.width != base["width"]:
        words.append(f"width {row.width}")
    if row.depth != base["depth"]:
        words.append(f"{row.depth} layers")
    if row.heads != base["heads"]:
        words.append(f"{row.heads} heads")
    if row.lr != base["lr"]:
        words.append(f"a rate of {row.lr:g}")
    if row.warmup != base["warmup"]:
        words.append(f"{row.warmup} warmup steps")
    return ", ".join(words) or "nothing"


def _retrained_family(data: Path) -> tuple[dict, pd.DataFrame, str]:
    """The family the whole-family pilots retrained (the four-head one): its settings, its runs and how the page names it.

    It is the family on this page until a pilot replaces it; then its tables are in ``docs/zoo_data/four_head_family``.
    """
    folder = data / FOUR_HEAD if (data / FOUR_HEAD / "measure.json").exists() else data
    settings = json.loads((folder / "measure.json").read_text())["zoo"]["settings"]
    return settings, pd.read_csv(folder / "runs.csv"), ("the four-head family" if folder != data else "this family")


def _full_family_pilots_paragraph(data: Path, pilots: pd.DataFrame) -> list[str]:
    """What the whole-family pilots gave, per member, read by the rule fixed before each was trained."""
    whole = pilots[pilots["pilot"].isin(FULL_FAMILY_PILOTS)]
    if whole.empty:
        return []
    base, runs, name = _retrained_family(data)
    per_pilot, short, numbers, met = [], [], [], []
    for pilot, part in whole.groupby("pilot", sort=True):
        numbers.append(str(pilot))
        counts = ", ".join(f"`{r.member}` {r.runs_with_sink}/{r.runs}" for r in part.itertuples())
        per_pilot.append(f"pilot {pilot} ({_changes(part.iloc[0], base)}): {counts}")
        short.append(set(part.loc[part["runs_with_sink"] < part["runs"], "member"]))
        if len(part) == len(MEMBERS) and (part["runs_with_sink"] == part["runs"]).all():
            met.append(str(pilot))
    missing = [(number, members) for number, members in zip(numbers, short, strict=True) if members]
    always_short = sorted(set.intersection(*[m for _, m in missing]), key=list(MEMBERS).index) if missing else []
    sometimes_short = sorted(set.union(*[m for _, m in missing]) - set(always_short), key=list(MEMBERS).index) if missing else []
    also_in = [number for number, members in missing if members - set(always_short)]
    sinkless = runs[runs["sink_heads"] < 1]
    plateau = float(sinkless["held_out_loss"].min()) if len(sinkless) else float("inf")
    stuck = sorted({str(p) for p in whole.loc[whole["highest_held_out_loss"] >= plateau, "pilot"]}, key=int)
    complete = [m for m, part in runs.groupby("member", sort=False) if (part["sink_heads"] >= 1).all()]
    listing = "; ".join(per_pilot)
    plateau_words = (
        f"No run of these pilots stayed on the early plateau (highest held-out loss {_num(whole['highest_held_out_loss'].max())},"
        if not stuck
        else f"Runs of pilot{'s' if len(stuck) > 1 else ''} {', '.join(stuck)} stayed on the early plateau (held-out loss up to"
        f" {_num(whole['highest_held_out_loss'].max())},"
    )
    outcome = (
        f" Pilot {met[0]} ({_changes(whole[whole['pilot'] == int(met[0])].iloc[0], base)}) met the rule: every one of its 15 runs"
        f" formed a sink. It is the family on this page; {name}, which it replaced, is below with its tables and weights, and"
        " no C4 figure of any pilot was looked at before the rule was read."
        if met
        else " No setting tried gives every run a sink, so the family stays as trained, and C4 is read on the runs with a sink (below)."
    )
    return [
        ("**Sinks in every run, reached by pilot " + met[0] + ".**" if met else "**Sinks in every run were not reached.**")
        + f" After pilots 14–15, {name} was trained again"
        f" {len(per_pilot)} times, all 5 seeds for the family's steps, under a rule fixed before each: the first in"
        " which every one of the 15 runs had a sink at the last step would replace the family. "
        + listing[:1].upper()
        + listing[1:]
        + ". "
        + _wider_pilots_sentence(whole, base)
        + plateau_words
        + f" against {_num(plateau) if len(sinkless) else '—'} or more for the runs of {name} on it)"
        + (
            "; in every pilot but " + ", ".join(n for n in numbers if n not in dict(missing)) + " some runs of "
            if len(missing) < len(numbers)
            else "; in every one of them some runs of "
        )
        + (", ".join(f"`{m}`" for m in always_short) or "no member")
        + " formed no sink"
        + (
            f", and in pilot{'s' if len(also_in) > 1 else ''} {', '.join(also_in)} also runs of {', '.join(f'`{m}`' for m in sometimes_short)}"
            if sometimes_short
            else ""
        )
        + f". In {name} every run of "
        + (", ".join(f"`{m}`" for m in complete) or "no member")
        + f" formed one, and {len(sinkless)} runs of the others stayed on the plateau."
        + outcome,
        "",
    ]


def _wider_pilots_sentence(whole: pd.DataFrame, base: dict) -> str:
    """How many runs of the whole-family pilots wider than the family formed a sink (empty when none is wider)."""
    wider = whole[whole["width"] > base["width"]]
    if wider.empty:
        return ""
    numbers = sorted(set(wider["pilot"]))
    widths = sorted(set(wider["width"]))
    return (
        f"At width {', '.join(str(w) for w in widths)} (pilot{'s' if len(numbers) > 1 else ''} {', '.join(str(n) for n in numbers)}) sinks"
        f" hardly formed: {int(wider['runs_with_sink'].sum())} of {int(wider['runs'].sum())} runs had one at the last step (largest"
        f" sink score {_num(wider['largest_sink_score'].max())}), against {int(whole.loc[whole['width'] == base['width'], 'runs_with_sink'].sum())}"
        f" of {int(whole.loc[whole['width'] == base['width'], 'runs'].sum())} at the family's width {base['width']}. "
    )


#: The settings that make a pilot's shape the family's (the steps aside: a pilot may be read earlier).
SHAPE_KEYS = ("seq_len", "window", "width", "depth", "heads", "lr", "warmup", "schedule", "weight_decay")


def _source_pilot(data: Path, settings: dict) -> str:
    """The first pilot of ``pilots.csv`` with the family's shape (:data:`SHAPE_KEYS`), as its number."""
    pilots = pd.read_csv(data / PILOTS_FILE)
    wanted = {**{key: settings[key] for key in SHAPE_KEYS if key != "window"}, "window": _window(settings)}
    same = pilots[np.logical_and.reduce([pilots[key] == value for key, value in wanted.items()])]
    if same.empty:
        raise ValueError(f"no pilot in {data / PILOTS_FILE} has the family's shape {wanted}")
    return str(int(same["pilot"].min()))


def _narrow_window_sentence(data: Path) -> str:
    """How many `sliding` runs with a window of T/2 or less formed a sink, over the earlier families and the pilots."""
    runs, formed = 0, 0
    for folder in (FIRST, PLANNED, NATURAL, ONE_HEAD):
        if not (data / folder / "measure.json").exists():
            continue
        settings = json.loads((data / folder / "measure.json").read_text())["zoo"]["settings"]
        if _window(settings) * 2 <= settings["seq_len"]:
            sliding = pd.read_csv(data / folder / "runs.csv").query("member == 'sliding'")
            runs, formed = runs + len(sliding), formed + int((sliding["sink_heads"] >= 1).sum())
    if (data / PILOTS_FILE).exists():
        pilots = pd.read_csv(data / PILOTS_FILE).query("member == 'sliding' and 2 * window <= seq_len")
        runs, formed = runs + int(pilots["runs"].sum()), formed + int(pilots["runs_with_sink"].sum())
    return (
        f"Of the {runs} runs of `sliding` with a window of T/2 or less (the earlier families' and the pilots'), {formed} formed a sink;"
        " with W = 48 of 64 and one head, 1 of 5 (pilot 7)."
    )


def _family_record(folder: Path) -> tuple[dict, dict, pd.DataFrame, Claims, str]:
    """A measured family's ``measure.json``, its training settings, ``runs.csv``, claims and C4's verdict."""
    measured = json.loads((folder / "measure.json").read_text())
    claims = Claims.read(folder)
    overall = claims.table.loc[claims.table["claim"] == "C4", "verdict"].iloc[0]
    return measured, measured["zoo"]["settings"], pd.read_csv(folder / "runs.csv"), claims, overall


def _earlier_family_section(data: Path, folder_name: str, title: str, what: str) -> list[str]:
    """A family this page showed before, kept beside it: its shape, its sinks and its C4, as it came out."""
    folder = data / folder_name
    if not (folder / "measure.json").exists():
        return []
    measured, settings, runs, claims, overall = _family_record(folder)
    suffix = folder_name.removesuffix("_family")
    heads = f"{settings['heads']} head{'s' if settings['heads'] > 1 else ''}"
    return [
        f"## {title}",
        "",
        f"{what}: {len(settings['members'])} members × {len(settings['seeds'])} seeds × {settings['steps']} steps "
        f"of Bigram-Backcopy, width {settings['width']}, {settings['depth']} layers × {heads}, T = {settings['seq_len']}, "
        f"window {_window_words(settings)}, {settings['schedule']} rate {settings['lr']:g} after {settings['warmup']} warmup steps, "
        f"{measured['zoo'].get('wall_seconds') or float('nan'):.0f} s of wall time; measured by zoo-measure with the parts "
        f"{', '.join(measured['parts'])} (tables in `docs/zoo_data/{folder_name}`, float16 weights with their hashes in "
        f"`{STORED}_{suffix}`). " + _sinks_sentence(runs, float(settings["tau"])),
        "",
        _c4_table(claims),
        "",
        f"**C4 in the {title.removeprefix('The ')}: {overall}.**",
        "",
        *_decision_section(claims, data)[2:],
    ]


def _four_head_family_section(data: Path) -> list[str]:
    """The four-head family, once a whole-family pilot replaced it: its sinks and its C4, as it came out."""
    if not (data / FOUR_HEAD / "measure.json").exists():
        return []
    settings = json.loads((data / "measure.json").read_text())["zoo"]["settings"]
    what = f"The family this page showed before the shape of pilot {_source_pilot(data, settings)}"
    return _earlier_family_section(data, FOUR_HEAD, "The four-head family", what)


def _one_head_family_section(data: Path) -> list[str]:
    """The family of the previous shape (one head per layer, a window of T/2): its sinks and its C4, as it came out."""
    return _earlier_family_section(data, ONE_HEAD, "The one-head family", "The family this page showed before the four-head shape")


def _decision_section(claims: Claims, data: Path) -> list[str]:
    """Each C4 comparison against the band the power table fixed before training (:mod:`poslens.study.zoo_decisions`)."""
    if not (data / FIRST / POWER_FILE).exists():
        return []
    decided = decide_family(claims, pd.read_csv(data / FIRST / POWER_FILE))
    rows = [
        [
            r.comparison,
            _interval(r.figure, r.ci_low, r.ci_high),
            _num(r.band) if pd.notna(r.band) else "—",
            _num(r.detectable),
            "yes" if r.powered else "no",
            "yes" if r.equivalent else "no",
            f"**{r.decision}**",
        ]
        for r in decided.itertuples()
    ]
    return [
        "### Decided against the band fixed before training",
        "",
        "The sign rule leaves a comparison inconclusive when its interval holds 0. Read against the band that the power",
        "table below fixed before this family was trained (the smallest inference-time difference of the same question),",
        "a comparison whose interval lies inside ±band is **equivalent to 0 within the band**: the family excludes a",
        "difference as large as the inference-time variants showed. Otherwise it stays inconclusive, and its power statement",
        "says what the seeds could detect and what the band would need (`poslens.study.zoo_decisions`).",
        "",
        markdown_table(
            ["comparison", "mean over seeds [95% t interval]", "band", "detectable", "detectable ≤ band", "inside ±band", "decision"], rows
        ),
        "",
        *[f"- {decision_sentence(r)}" for r in decided.itertuples()],
        "",
    ]


def _weights_section(data: Path) -> list[str]:
    """Where the measured family's weights are kept and how to measure them again."""
    stored = ROOT / STORED
    hashes = stored / "hashes.json"
    if not hashes.exists():
        return []
    listed = json.loads(hashes.read_text())
    size = sum((stored / name).stat().st_size for name in listed)
    weights = [name for name in listed if name.endswith("model.safetensors")]
    return [
        "## The weights",
        "",
        f"The {len(weights)} trained models are in `{STORED}`: each run's Hugging Face folder with its weights as float16",
        f"safetensors, the family's `zoo.json`, `log.csv`, `summary.csv` and `held_out.jsonl`, {size / 1e6:.1f} MB in all.",
        "`hashes.json` lists the sha256 of every file; `poslens zoo-measure` checks them before it reads the folder and",
        "refuses a changed or missing file. Every figure on this page was measured from these float16 weights (read in",
        "float32), so this command gives the page's tables again, with no training:",
        "",
        "```bash",
        f"poslens zoo-measure --zoo {STORED} --out docs/zoo_data --work results/zoo_measure "
        + _measure_flags(json.loads((data / "measure.json").read_text())),
        ".venv/bin/python docs/make_zoo.py",
        "```",
        "",
        "The folder was written from the trained family by `poslens.zoo.store.store_family` "
        f"(`python -c \"from poslens.zoo.store import store_family; store_family('results/zoo_bb', '{STORED}')\"`).",
        "",
    ]


def _measure_flags(measured: dict) -> str:
    """The zoo-measure flags that give ``measure.json``'s settings (``--parts`` only when not every part was measured)."""
    options = measured["options"]
    flags = f"--n-seqs {options['n_seqs']} --groups {options['groups']} --early {options['early']} --relativize-seqs {options['relativize_seqs']}"
    if list(measured["parts"]) != [part.name for part in zoo_parts()]:  # zoo-measure's default --parts
        flags += f" --parts {','.join(measured['parts'])}"
    return flags


NATURAL = "stdlib_family"
"""The natural-text family's tables (``--task stdlib``, the same shape), when it has been measured."""


def _natural_text_section(data: Path) -> list[str]:
    """The natural-text family of the same shape: its sinks, its C4 and the decisions against the same bands."""
    folder = data / NATURAL
    if not (folder / "measure.json").exists():
        return []
    measured, settings, runs, claims, overall = _family_record(folder)
    return [
        "## The natural-text family",
        "",
        f"The planned family's members and shape trained on the Python standard library's source (`--task stdlib`, byte tokens): "
        f"{len(settings['members'])} members × {len(settings['seeds'])} seeds × {settings['steps']} steps, width {settings['width']}, "
        f"{settings['depth']} layers × {settings['heads']} heads, T = {settings['seq_len']}, peak rate {settings['lr']:g}, "
        f"{measured['zoo'].get('wall_seconds') or float('nan'):.0f} s of wall time; measured by zoo-measure with the parts "
        f"{', '.join(measured['parts'])} (tables in `docs/zoo_data/{NATURAL}`; float16 weights with their hashes in "
        f"`{STORED}_stdlib`, measured as `poslens zoo-measure --zoo {STORED}_stdlib --out docs/zoo_data/{NATURAL} …` gives them). "
        + _sinks_sentence(runs, float(settings["tau"])),
        "",
        _c4_table(claims),
        "",
        f"**C4 in the natural-text family: {overall}.**",
        "",
        *_decision_section(claims, data)[2:],
    ]


def _planned_family_section(data: Path) -> list[str]:
    """The family planned from the power table: its shape, and that no run of it formed a sink."""
    folder = data / PLANNED
    if not (folder / "measure.json").exists():
        return []
    measured = json.loads((folder / "measure.json").read_text())
    settings = measured["zoo"]["settings"]
    runs = pd.read_csv(folder / "runs.csv")
    tau = float(settings["tau"])
    return [
        "## The planned family",
        "",
        f"The family the power table planned: {len(settings['members'])} members × {len(settings['seeds'])} seeds × {settings['steps']} "
        f"steps of Bigram-Backcopy, width {settings['width']}, {settings['depth']} layers × {settings['heads']} heads, T = "
        f"{settings['seq_len']}, window {_window_words(settings)}, peak rate {settings['lr']:g} ({settings['schedule']}), "
        f"{measured['zoo'].get('wall_seconds') or float('nan'):.0f} s of wall time; measured by zoo-measure with the parts "
        f"{', '.join(measured['parts'])} (tables in `docs/zoo_data/{PLANNED}`, float16 weights with their hashes in "
        f"`{STORED}_planned`). " + _sinks_sentence(runs, tau),
        "",
        _no_sink_note(runs, pd.read_csv(folder / "emergence.csv"), settings, tau),
        "",
    ]


def _first_family_section(data: Path) -> list[str]:
    """The first family, which the power table was computed from, with its C4 as it came out."""
    first = data / FIRST
    if not (first / "measure.json").exists():
        return []
    settings = json.loads((first / "measure.json").read_text())["zoo"]["settings"]
    runs = pd.read_csv(first / "runs.csv")
    claims = Claims.read(first)
    return [
        "## The first family",
        "",
        f"Before this family, a smaller one was trained and measured ({len(settings['members'])} members × {len(settings['seeds'])} seeds × "
        f"{settings['steps']} steps, width {settings['width']}, {settings['depth']} layers × {settings['heads']} head, T = "
        f"{settings['seq_len']}, peak rate {settings['lr']:g}; its tables are in `docs/zoo_data/{FIRST}`). "
        + _sinks_sentence(runs, float(settings["tau"])),
        "Its C4 comparisons, each with the smallest difference its seeds could detect:",
        "",
        _c4_table(claims),
        "",
    ]


def _t_factor(n: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) if n > 1 else float("nan")


def _agreement_sentence(beside: pd.DataFrame) -> str:
    if beside.empty:
        return "No zoo comparison has an inference-time counterpart."
    if (beside["agreement"] == "not read in the zoo").all():
        return (
            "No zoo comparison was read (no run formed a sink), so nothing in the family stands beside the inference-time "
            "rows: the table shows what a family with sinks would be compared with."
        )
    said = []
    for word, text in (
        ("agree", "agree"),
        ("partly", "agree with some of the variants only (the zoo's verdict is the own verdict of some)"),
        ("differ", "differ"),
    ):
        rows = beside[beside["agreement"] == word]
        if len(rows):
            said.append(f"{text}: " + ", ".join(rows["comparison"]))
    return (
        "Where the two kinds of evidence stand: they "
        + "; they ".join(said)
        + ". The inference-time dose-responses (the trends over α and over W) and the Gemma 3 rows have no counterpart"
        " in the family, which has one trained base and one window."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "docs" / "zoo_data")
    parser.add_argument("--findings", type=Path, default=ROOT / "docs" / "findings_data")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "zoo.md")
    args = parser.parse_args()
    for path in write_figures(args.data):
        print("wrote", path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    args.out.write_text(build(args.data, args.findings), encoding="utf-8")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
