"""One self-contained HTML page: a verdict summary first, then one section per claim with its figure, then the full claims table.

The page opens on the verdict summary: one row per claim and case (the rows of
``claims.csv`` grouped by claim and model or case, with their joint verdict),
each with a coloured badge, the headline figure and its interval, one plain
sentence that reads it, and the full rule with its inputs in a ``<details>``
disclosure. After it comes one section per claim: its statement, verdicts and
sentences beside its figure. The long claims table closes the page, folded,
followed by the metric names the page uses, each with what it means and how to
read its sign (:func:`metric_names`, from :mod:`poslens.fit.metric_glossary`).

The sentences say what the unusual values mean: a reduction above 1 is a change
of sign of C_res (the intervention reversed it, it did not remove more than all
of it), a negative one a growth, and a negative held-out R² or ΔR² means no
decodable signal at this size.

The page is rendered from the Jinja2 templates in ``poslens/measurement/templates``
(:mod:`poslens.measurement.templating`, shared with a Result's display)
with autoescaping on: model names, rule texts, claim statements and settings
are escaped, and only the plotly figure divs go in as trusted HTML. plotly.js
is inlined once, so the page opens offline with no external script.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from markupsafe import Markup

from poslens.files import atomic_write_text
from poslens.fit.metric_glossary import GLOSSARY
from poslens.measurement.display import quantized_note
from poslens.measurement.result import Result
from poslens.measurement.templating import page_templates
from poslens.ownership import record_written, replacing
from poslens.study.claims import STATEMENTS, not_measured_summary
from poslens.study.claims.rules import NOT_MEASURED
from poslens.study.claims.table import Claims
from poslens.study.claims.text import inputs_text, summary_rows, verdict_css
from poslens.study.part_registry import PARTS
from poslens.study.report_figures import claim_figures

_TEMPLATES = page_templates()


def _code(text: str) -> Markup:
    """``text`` escaped, with its `backticked` names set as code (the glossary's texts quote metric names so)."""
    return Markup(re.sub(r"`([^`<>&]+)`", r"<code>\1</code>", str(Markup.escape(text))))


_TEMPLATES.filters["code"] = _code


def _claim_rows(claims: Claims) -> list[dict[str, str]]:
    rows = []
    for _, r in claims.table.iterrows():
        figure = "—" if pd.isna(r["figure"]) else f"{r['figure']:.4g} [{r['ci_low']:.4g}, {r['ci_high']:.4g}]"
        model = "—" if r["verdict"] == NOT_MEASURED and (r["model"] is None or pd.isna(r["model"])) else str(r["model"])
        shown = "" if r["figure_name"] is None or pd.isna(r["figure_name"]) else str(r["figure_name"])
        own = str(r["verdict"]) if r["own_verdict"] is None or pd.isna(r["own_verdict"]) else str(r["own_verdict"])
        rows.append(
            dict(
                css=verdict_css(r["verdict"]),
                own_css=verdict_css(own),
                own_verdict=own,
                claim=str(r["claim"]),
                statement=str(r["statement"]),
                model=model,
                shown=shown,
                figure=figure,
                verdict=str(r["verdict"]),
                rule=str(r["rule"]),
                inputs=inputs_text(claims.inputs_of(r["key"])),
            )
        )
    return rows


def metric_names(claims: Claims, present: Any = ()) -> list[dict[str, str]]:
    """The metrics this page names, with what each means, from :data:`poslens.fit.metric_glossary.GLOSSARY`.

    A metric is listed when an input of ``claims`` was read from it (the
    ``metric`` column of the inputs table) or a figure of a part in ``present``
    draws it, in the glossary's order; each entry holds ``name``, ``short``
    (its definition's first sentence), ``range``, ``sign`` (what its sign and
    extremes mean) and ``section`` (the methodology section).

    Args:
        claims: The claims (:class:`poslens.study.claims.table.Claims`).
        present: The parts the study has.

    Returns:
        One dict per metric.

    Example:
        >>> from poslens.study.claims import evaluate
        >>> from poslens.study.claims.lookup import figure_row
        >>> swaps = pd.DataFrame([figure_row("reduction", 3.34, 2.5, 4.2, intervention="bos:zero", query_window="early")])
        >>> rows = metric_names(evaluate(bos_swap=swaps, claims=["C5"]))
        >>> [r["name"] for r in rows], "changed sign" in rows[0]["sign"]
        (['reduction'], True)
    """
    read = {str(m) for m in claims.inputs["metric"] if isinstance(m, str) and m}
    drawn = {name for part in present if part in PARTS for name in PARTS[part].figure_metrics}
    return [
        dict(name=name, short=entry.short(), range=entry.range, sign=entry.sign, section=entry.section)
        for name, entry in GLOSSARY.items()
        if name in drawn or name in read
    ]


def _figure_div(fig: go.Figure, first: bool) -> Markup:
    # plotly's own output is the one trusted piece of HTML on the page; it carries plotly.js once, in the first figure.
    return Markup(fig.to_html(full_html=False, include_plotlyjs=first, config={"displaylogo": False, "responsive": True}))


def build_report(parts: dict[str, Result], claims: Claims, settings: dict[str, Any], path: str | Path) -> Path:
    """Write the report page for whichever study parts are present (never over a file poslens did not write).

    The page opens on the verdict summary (:func:`poslens.study.claims.text.summary_rows`): a badge per
    claim and case, the headline figure, a sentence, and the rule in a
    disclosure. Then one section per claim puts its statement and verdicts
    beside its figures; the full claims table closes the page, folded. A
    line under the summary names the claims that were not measured and the
    commands that would measure them into the report's folder; another points
    to the list of the metric names the page uses (:func:`metric_names`), at its end.

    The note on 4-bit weights appears only for parts whose model metadata
    records a quantization (the embedded models), never for a user's own model.

    Args:
        parts: The study parts present, by name.
        claims: The claims (:class:`poslens.study.claims.table.Claims`: the claims table and its inputs).
        settings: The study's settings.
        path: The HTML file to write.

    Returns:
        ``path``.

    Example:
        >>> build_report({"leakage": result}, claims_table, {"n_seqs": 16}, "out/report.html")  # doctest: +SKIP
    """
    path = Path(path)
    setting_text = (
        f"Settings: {settings.get('n_seqs')} sequences × {settings.get('seq_len')} tokens of '{settings.get('corpus')}' text, "
        f"position 0 = BOS, {settings.get('groups')} groups (delete-one-group jackknife 95% intervals), "
        f"early queries 1 ≤ i < {settings.get('early')}, seed {settings.get('seed')}."
    )
    summary = summary_rows(claims, path.parent, present=parts, settings=settings)
    figures = claim_figures(parts, settings)
    sections, first = [], True
    for claim, statement in STATEMENTS.items():
        rows = [row for row in summary if row["claim"] == claim]
        if not rows and not figures[claim]:
            continue
        divs = []
        for fig, caption in figures[claim]:
            divs.append(dict(div=_figure_div(fig, first), caption=caption))
            first = False
        sections.append(dict(claim=claim, statement=statement, rows=rows, figures=divs))
    page = _TEMPLATES.get_template("report.html").render(
        note=quantized_note(*parts.values()),
        setting_text=setting_text,
        summary=summary,
        rows=_claim_rows(claims),
        not_measured=not_measured_summary(claims, path.parent, present=parts, settings=settings),
        sections=sections,
        settings=str(settings),
        metrics=metric_names(claims, parts),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing([path]):
        atomic_write_text(path, page)
        record_written([path])
    return path
