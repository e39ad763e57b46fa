"""One self-contained HTML page: the claims table first, then the figures with captions.

The page is rendered from the Jinja2 templates in ``poslens/study/templates``
with autoescaping on: model names, rule texts, claim statements and settings
are escaped, and only the plotly figure divs go in as trusted HTML. plotly.js
is inlined once, so the page opens offline with no external script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
import plotly.graph_objects as go
from markupsafe import Markup

from poslens.measurement import plots
from poslens.measurement.result import Result
from poslens.study.claims import NOT_MEASURED, not_measured_summary

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("poslens.study", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _claim_rows(claims: pd.DataFrame) -> list[dict[str, str]]:
    rows = []
    for _, r in claims.iterrows():
        figure = "—" if pd.isna(r["figure"]) else f"{r['figure']:.4g} [{r['ci_low']:.4g}, {r['ci_high']:.4g}]"
        model = "—" if r["verdict"] == NOT_MEASURED and (r["model"] is None or pd.isna(r["model"])) else str(r["model"])
        rows.append(dict(css=str(r["verdict"]).replace(" ", "-"), claim=str(r["claim"]), statement=str(r["statement"]),
                         model=model, figure=figure, verdict=str(r["verdict"]), rule=str(r["rule"])))
    return rows


def claims_html(claims: pd.DataFrame) -> str:
    """The claims table as HTML, one row per verdict, coloured by verdict; every cell is escaped.

    A claim that was not measured gets the row class ``not-measured``, styled apart from ``inconclusive``.

    Example:
        >>> import pandas as pd
        >>> row = dict(claim="C1", statement="s", model="<m>", figure=0.1, ci_low=0.0, ci_high=0.2, rule="r", verdict="supported")
        >>> page = claims_html(pd.DataFrame([row]))
        >>> '<tr class="supported">' in page, "<td>&lt;m&gt;</td>" in page
        (True, True)
        >>> missing = dict(row, model=None, figure=float("nan"), rule="not measured", verdict="not measured")
        >>> '<tr class="not-measured">' in claims_html(pd.DataFrame([missing]))
        True
    """
    return _TEMPLATES.get_template("claims.html").render(rows=_claim_rows(claims))


def quantized_models(*results: Result) -> list[str]:
    """Names of the models behind ``results`` whose weights are quantized, in order of first appearance.

    Reads the ``quantized`` field of each result's model metadata (and of its
    ``parts``, for a stacked result): the embedded registry models record their
    4-bit GGUF quantization there, a local folder or Hugging Face cache model records None.

    Example:
        >>> import pandas as pd
        >>> embedded = Result(pd.DataFrame(), {"model": {"model": "smollm2-135m", "quantized": "GGUF Q4_1 (4-bit), dequantized to float32"}})
        >>> own = Result(pd.DataFrame(), {"model": {"model": "/models/my-llama", "quantized": None}})
        >>> quantized_models(own, embedded), quantized_models(own)
        (['smollm2-135m'], [])
    """
    names: list[str] = []
    for result in results:
        for meta in [result.meta] + list(result.meta.get("parts", [])):
            described = meta.get("model")
            if isinstance(described, dict) and described.get("quantized") and described["model"] not in names:
                names.append(described["model"])
    return names


def quantized_note(*results: Result) -> str:
    """The note on 4-bit weights for figures made from ``results``; empty when none of their models is quantized.

    Example:
        >>> import pandas as pd
        >>> quantized_note(Result(pd.DataFrame(), {"model": {"model": "gemma3-270m", "quantized": "GGUF Q4_K_M (4-bit), dequantized to float32"}}))
        'Figures from gemma3-270m come from 4-bit quantized (GGUF) weights dequantized to float32.'
        >>> quantized_note(Result(pd.DataFrame(), {"model": {"model": "/models/my-llama", "quantized": None}}))
        ''
    """
    names = quantized_models(*results)
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"Figures from {listed} come from 4-bit quantized (GGUF) weights dequantized to float32."


def _caption(*pieces: str) -> str:
    return " ".join(piece for piece in pieces if piece)


def _figure_div(fig: go.Figure, first: bool) -> Markup:
    # plotly's own output is the one trusted piece of HTML on the page; it carries plotly.js once, in the first figure.
    return Markup(fig.to_html(full_html=False, include_plotlyjs=True if first else False, config={"displaylogo": False}))


def build_report(parts: dict[str, Result], claims: pd.DataFrame, settings: dict[str, Any], path: str | Path) -> Path:
    """Write the report page for whichever study parts are present.

    The note on 4-bit weights appears only for parts whose model metadata
    records a quantization (the embedded models), never for a user's own model.
    Below the claims table, a line names the claims that were not measured and
    the commands that would measure them into the report's folder.

    Example:
        >>> build_report({"leakage": result}, claims_table, {"n_seqs": 16}, "out/report.html")  # doctest: +SKIP
    """
    setting_text = (
        f"Settings: {settings.get('n_seqs')} sequences × {settings.get('seq_len')} tokens of '{settings.get('corpus')}' text, "
        f"position 0 = BOS, {settings.get('groups')} groups (delete-one-group jackknife 95% intervals), "
        f"early queries 1 ≤ i < {settings.get('early')}, seed {settings.get('seed')}."
    )
    sections: list[tuple[go.Figure, str]] = []
    if "compare" in parts:
        c = parts["compare"]
        sections.append((
            plots.sources_by_layer(c.table, "all", "C_res and C_mask by layer across architectures (all queries)"),
            _caption(
                "Each panel is one case: standard RoPE (smollm2-135m base), NTK-scaled RoPE and imposed windows "
                "(inference-time variants of smollm2-135m, labelled by their variant) and gemma3-270m's native sliding window. "
                "C_mask is the part of the pattern's absolute-position leakage ΔR² that each head's mask-only counterfactual "
                "(its relative kernel and a constant sink, renormalized over the visible keys, per sequence) reproduces; "
                "C_res the rest, which the residual stream supplies (METHOD §4, version 2). All queries 1 ≤ i < T: a window of W changes nothing "
                "for queries i < W, so early queries cannot tell the cases apart. "
                f"{settings.get('compare_seqs')} sequences × {settings.get('compare_len')} tokens per case.",
                quantized_note(c),
            ),
        ))
    elif "leakage" in parts:
        sections.append((plots.sources_by_layer(parts["leakage"].table, "early"),
                         _caption(f"C_res and C_mask by layer for the baseline model. {setting_text}", quantized_note(parts["leakage"]))))
    if "leakage" in parts:
        sections.append((
            plots.leakage_heatmap(parts["leakage"].table),
            _caption("Binned ΔR² of log attention weights on absolute query position beyond offset, per head (all queries). "
                     f"{setting_text}", quantized_note(parts["leakage"])),
        ))
    if "sinks" in parts:
        tau = settings.get("tau", 0.3)
        sections.append((plots.sink_scores(parts["sinks"].table, tau),
                         _caption("Sink score (mean over queries i ≥ 1 of the weight on key 0) per head, "
                                  f"and the number of heads at or above τ = {tau} per layer "
                                  f"(interval: heads whose score interval lies wholly above τ … heads whose interval reaches τ). {setting_text}",
                                  quantized_note(parts["sinks"]))))
    if "bos-swap" in parts or "ablate-sinks" in parts:
        present = [parts[p] for p in ("bos-swap", "ablate-sinks") if p in parts]
        sections.append((plots.reductions(pd.concat([r.table for r in present], ignore_index=True), "early"),
                         _caption("Reduction of C_res at early queries, 1 − C_res(after)/C_res(before), for each BOS-embedding replacement and "
                                  "for the sink-path ablation; paired delete-one-group jackknife 95% intervals. "
                                  "The dotted line marks the 40% of claim C5. "
                                  f"{setting_text}", quantized_note(*present))))
    if "fingerprint" in parts:
        meta = parts["fingerprint"].meta
        sections.append((plots.dispersion(parts["fingerprint"].table),
                         _caption("Relative dispersion of the position-0 residual stream across inputs, by layer: with an auto-prepended BOS it is "
                                  "zero up to floating point; without BOS position 0 holds the first text token and the trajectory varies. "
                                  f"Settings: {meta.get('settings', {})}.", quantized_note(parts["fingerprint"]))))
    page = _TEMPLATES.get_template("report.html").render(
        note=quantized_note(*parts.values()),
        rows=_claim_rows(claims),
        not_measured=not_measured_summary(claims, Path(path).parent, present=parts),
        sections=[dict(figure=_figure_div(fig, i == 0), caption=caption) for i, (fig, caption) in enumerate(sections)],
        settings=str(settings),
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
