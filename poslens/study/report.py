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

The page is rendered from the Jinja2 templates in ``poslens/study/templates``
with autoescaping on: model names, rule texts, claim statements and settings
are escaped, and only the plotly figure divs go in as trusted HTML. plotly.js
is inlined once, so the page opens offline with no external script.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
import plotly.graph_objects as go
from markupsafe import Markup

from poslens.files import atomic_write_text
from poslens.fit.metric_glossary import GLOSSARY
from poslens.measurement import plots
from poslens.measurement.result import Result, quantized_note
from poslens.ownership import check_replaceable, record_written
from poslens.study.claims import (
    NOT_MEASURED,
    NOT_SUPPORTED,
    STATEMENTS,
    SUPPORTED,
    joint,
    not_measured_summary,
)

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("poslens.study", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _code(text: str) -> Markup:
    """``text`` escaped, with its `backticked` names set as code (the glossary's texts quote metric names so)."""
    return Markup(re.sub(r"`([^`<>&]+)`", r"<code>\1</code>", str(Markup.escape(text))))


_TEMPLATES.filters["code"] = _code


def _claim_rows(claims: pd.DataFrame) -> list[dict[str, str]]:
    rows = []
    for _, r in claims.iterrows():
        figure = "—" if pd.isna(r["figure"]) else f"{r['figure']:.4g} [{r['ci_low']:.4g}, {r['ci_high']:.4g}]"
        model = "—" if r["verdict"] == NOT_MEASURED and (r["model"] is None or pd.isna(r["model"])) else str(r["model"])
        rows.append(dict(css=_css(r["verdict"]), claim=str(r["claim"]), statement=str(r["statement"]),
                         model=model, figure=figure, verdict=str(r["verdict"]), rule=str(r["rule"])))
    return rows


def _css(verdict: Any) -> str:
    return str(verdict).replace(" ", "-")


# --------------------------------------------------------------------------- the verdict summary

_HEADLINE = {
    "C1": (0, "held-out ΔR²"),
    "C2": (0, "C_mask at layer 0"),
    "C3": (1, "reduction of C_res by sink-path ablation"),
    "C4": (0, "C_res"),
    "C5": (0, "reduction of C_res"),
    "C6": (1, "dispersion without BOS"),
}
"""Per claim, which of a group's rows (in the order claims.py writes them) is the headline figure, and its label."""

_C4_CASE = re.compile(r"^(?P<case>.*?)(?: vs .*|: slope of c_res over layers >= 1)$")
_RULE = re.compile(r"^figure: (?P<figure>.*?)\. rule: (?P<rule>.*?)\. inputs: (?P<inputs>.*)$", re.S)
_NUMBER = r"nan|-?inf|-?\d+(?:\.\d*)?(?:e[-+]?\d+)?"
_INPUT = re.compile(
    rf"(?:^|(?<=; )|(?<=\. ))(?P<name>[A-Za-z_](?:(?! = )[^;\[\]])*?) = (?P<value>{_NUMBER})"
    rf"(?: \[(?P<low>{_NUMBER}), (?P<high>{_NUMBER})\])?"
)


@dataclass(frozen=True)
class _Quoted:
    """A number as a rule's inputs quote it: value, and its interval unless it is a point value."""

    value: float
    ci_low: float = math.nan
    ci_high: float = math.nan

    def text(self, percent: bool = False) -> str:
        scale, unit = (100.0, "%") if percent else (1.0, "")
        shown = f"{_num(self.value * scale)}{unit}"
        if math.isnan(self.ci_low) and math.isnan(self.ci_high):
            return shown
        return f"{shown} [{_num(self.ci_low * scale)}{unit}, {_num(self.ci_high * scale)}{unit}]"

    def side(self, threshold: float, name: str) -> str:
        """Where the interval lies relative to ``threshold``, in words."""
        if math.isnan(self.ci_low) or math.isnan(self.ci_high):
            return "interval not determined"
        if self.ci_low > threshold:
            return f"above {name}"
        if self.ci_high <= threshold:
            return f"at or below {name}"
        return f"interval reaching {name}"


def _num(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.4g}".replace("-", "−")


def rule_inputs(rule: str) -> dict[str, tuple[float, float, float]]:
    """The figures a claim row's rule was applied to, read back from its ``rule`` text: name → (value, ci_low, ci_high).

    Point values quoted in the rule's note (a chance level, a p-value) come
    with NaN bounds. Empty for a rule text without inputs (``not measured``).

    Args:
        rule: A claims row's ``rule`` text.

    Returns:
        ``{figure name: (value, ci_low, ci_high)}``.

    Example:
        >>> rule_inputs("figure: metric 'c_res'. rule: supported if c_res ci_low > 0. "
        ...             "inputs: c_res = 0.01 [0.005, 0.015]; reduction = -0.1 [-0.3, 0.1]. readout_p_value = 0.005")
        {'c_res': (0.01, 0.005, 0.015), 'reduction': (-0.1, -0.3, 0.1), 'readout_p_value': (0.005, nan, nan)}
        >>> rule_inputs("not measured")
        {}
    """
    parts = _RULE.match(rule)
    if parts is None:
        return {}
    found = {}
    for m in _INPUT.finditer(parts["inputs"]):
        low, high = (float(m["low"]), float(m["high"])) if m["low"] is not None else (math.nan, math.nan)
        found[m["name"].strip()] = (float(m["value"]), low, high)
    return found


def _lead(verdict: str, statement: str) -> str:
    if verdict == SUPPORTED:
        return statement[:1].upper() + statement[1:]
    if verdict == NOT_SUPPORTED:
        return f"Against the claim that {statement}"
    return f"Undecided whether {statement}"


def _removal(red: _Quoted, subject: str, it: str, named: str) -> str:
    """What an intervention did to C_res, in words, from its reduction 1 − C_res(after)/C_res(before).

    Between 0 and 1 it "removes" that fraction of ``it``. Above 1 C_res changed
    sign: the intervention did more than remove it, it reversed it (and is not
    said to remove more than all of it). Below 0 C_res grew. Where the interval
    reaches back into [0, 1], the sentence speaks of the point estimate only.

    Example:
        >>> print(_removal(_Quoted(3.34, 2.5, 4.2), "replacing the BOS embedding (zero)", "C_res", "C_res"))  # doctest: +NORMALIZE_WHITESPACE
        replacing the BOS embedding (zero) changes the sign of C_res: its reduction is 334% [250%, 420%], above 100%,
        so C_res after = −2.34 × C_res before; it did more than remove C_res, it reversed it
        >>> _removal(_Quoted(0.4, 0.35, 0.45), "ablating", "it", "C_res")
        'ablating removes 40% [35%, 45%] of it'
    """
    after = 1.0 - red.value  # C_res(after) / C_res(before)
    shown = red.text(percent=True)
    if red.value > 1:
        if red.ci_low > 1:
            return (f"{subject} changes the sign of {named}: its reduction is {shown}, above 100%, so C_res after = "
                    f"{_num(after)} × C_res before; it did more than remove C_res, it reversed it")
        return (f"{subject} may change the sign of {named}: its reduction is {shown}, above 100% at its point estimate "
                f"(C_res after = {_num(after)} × C_res before: reversed, not removed more than all of it)")
    if red.value < 0:
        if red.ci_high < 0:
            return (f"{subject} increases {named} rather than removing it: its reduction is {shown}, below 0, so C_res after = "
                    f"{_num(after)} × C_res before")
        return (f"{subject} removes none of {named} at its point estimate: its reduction is {shown}, below 0 "
                f"(C_res after = {_num(after)} × C_res before)")
    text = f"{subject} removes {shown} of {it}"
    if red.ci_high > 1:
        text += " (the interval reaches above 100%, where C_res would change sign)"
    return text


def _reading(claim: str, case: str, f: dict[str, _Quoted], rules: list[str]) -> str:
    """What the figures of one group say, per claim; raises KeyError when an input it quotes is absent."""
    if claim == "C1":
        h, p = f["leakage_pattern_heldout"], f["probe_r2"]
        text = f"held-out ΔR² of log attention on absolute position is {h.text()} ({h.side(0, '0')})"
        if h.value < 0:
            text += ("; a negative held-out ΔR² means the query-position terms fitted on the other groups predict the held-out "
                     "sequences worse than the offset alone does: no absolute position is detectable at this size")
        text += (f", and a probe of position from the attention pattern's row features scores a held-out R² of {p.text()} "
                 f"({p.side(0, '0')})")
        if p.value < 0:
            text += ("; a negative held-out R² means the probe predicts the held-out sequences' position worse than their own "
                     "mean does: no decodable signal at this size (its interval, from the spread over the folds, is wide when "
                     "each group holds few sequences)")
        return text
    if claim == "C2":
        m0, md, rho, r0 = f["c_mask (layer 0)"], f["c_mask (layers >= 1)"], f["rho_mask (layer 0)"], f["c_res (layer 0)"]
        return (f"C_mask is {m0.text()} at layer 0 ({m0.side(0, '0')}) and {md.text()} over layers ≥ 1 "
                f"({md.side(0, '0')}); its share ρ_mask of the leakage at layer 0 is {rho.text()} ({rho.side(0.5, '1/2')}), "
                f"against C_res {r0.text()} there")
    if claim == "C3":
        res, red = f["c_res"], f["reduction"]
        return (f"C_res at early queries is {res.text()} ({res.side(0, '0')}), and "
                f"{_removal(red, 'ablating the sink path of the sink-reading heads', 'it', 'C_res')} ({red.side(0, '0')})")
    if claim == "C4":
        kind = "ntk" if "c_res (ntk)" in f else "sliding"
        x, std = f[f"c_res ({kind})"], f["c_res (standard)"]
        if x.ci_high < std.ci_low:
            where = "wholly below"
        elif x.ci_low > std.ci_high:
            where = "wholly above"
        else:
            where = "overlapping"
        text = f"the {kind} case has C_res {x.text()}, {where} the standard's {std.text()}"
        if "c_res slope per layer" in f:
            s = f["c_res slope per layer"]
            text += f"; across layers ≥ 1 its C_res changes by {s.text()} per layer ({s.side(0, '0')})"
        return text
    if claim == "C5":
        red = f["reduction"]
        kind = case.rsplit(", ", 1)[-1]
        text = _removal(red, f"replacing the BOS embedding ({kind})", "C_res at early queries", "C_res at early queries")
        band = re.search(r"target ([\d.]+) - band ([\d.]+)", " ".join(rules))
        if band:
            target, width = float(band[1]), float(band[2])
            lies = ", " if not (red.value < 0 or red.value > 1) else "; its interval lies "  # after a sentence on a sign change
            if red.ci_low <= target <= red.ci_high:
                text += f"; the interval holds {target:.0%}"
            elif red.ci_high < target - width:
                text += f"{lies}wholly below {target - width:.0%}"
            elif red.ci_low > target + width:
                text += f"{lies}wholly above {target + width:.0%}"
        return text
    if claim == "C6":
        bos, none, acc = f["max dispersion (bos)"], f["dispersion (none)"], f["readout_accuracy"]
        text = (f"with auto-BOS the position-0 residual's relative dispersion across inputs is at most {bos.text()} over layers; "
                f"without BOS it is {none.text()} ({none.side(0, '0')}); a readout of the position-0 token from the "
                f"sink-reading heads scores {acc.text()}")
        if "readout_chance" in f:
            text += f" against chance {f['readout_chance'].text()}"
        if "readout_p_value" in f:
            text += f" (permutation p = {f['readout_p_value'].text()})"
        return text
    raise KeyError(claim)


def _sentence(claim: str, case: str, verdict: str, statement: str, headline: str, rules: list[str]) -> str:
    if verdict == NOT_MEASURED:
        return f"{statement[:1].upper() + statement[1:]}: not measured, the parts it reads are not in this report."
    quoted: dict[str, _Quoted] = {}
    for rule in rules:
        quoted.update({name: _Quoted(*numbers) for name, numbers in rule_inputs(rule).items()})
    try:
        reading = _reading(claim, case, quoted, rules)
    except KeyError:  # a rule text of another shape: say the headline figure alone
        reading = headline
    return f"{_lead(verdict, statement)}: {reading}."


def _rule_blocks(rules: list[str]) -> list[dict[str, str]]:
    """The distinct rules of a group with their inputs, and the figure each row shows."""
    blocks: dict[tuple[str, str], dict[str, Any]] = {}
    for rule in rules:
        parts = _RULE.match(rule)
        if parts is None:
            blocks.setdefault((rule, ""), dict(rule=rule, inputs="", figures=[]))
            continue
        block = blocks.setdefault((parts["rule"], parts["inputs"]), dict(rule=parts["rule"], inputs=parts["inputs"], figures=[]))
        block["figures"].append(parts["figure"])
    return list(blocks.values())


def summary_rows(claims: pd.DataFrame, out: Any = "DIR", present: Any = (), settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The verdict summary: one row per claim and case, with joint verdict, headline figure, a sentence and the rules.

    Rows of ``claims`` (columns :data:`poslens.study.claims.CLAIM_COLUMNS`)
    are grouped by claim and ``model`` (for C4 by case: a case's comparison
    with the standard and its depth slope form one group); a group's verdict
    is :func:`poslens.study.claims.joint` of its rows. Each summary row holds
    ``claim``, ``case``, ``verdict``, ``css`` (the verdict as a CSS class),
    ``label`` and ``figure`` (the headline figure and its interval),
    ``sentence`` (one plain sentence reading the figures, led by the verdict)
    and ``rules`` (the distinct rule texts with their inputs, for the
    disclosure). A claim not measured names the commands that would measure
    it into ``out`` (parts in ``present`` are not suggested again).

    Args:
        claims: The claims table.
        out: The study folder the suggested commands write to.
        present: The parts the study has.
        settings: The study's settings, for the suggested commands.

    Returns:
        The summary rows.

    Example:
        >>> from poslens.study.claims import evaluate, figure_row
        >>> leakage = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06), figure_row("probe_r2", 0.6, 0.5, 0.7)])
        >>> rows = summary_rows(evaluate(leakage=leakage, claims=["C1", "C5"]), "results", present=["leakage"])
        >>> [(r["claim"], r["case"], r["verdict"], r["figure"]) for r in rows]
        [('C1', 'm', 'supported', '0.05 [0.04, 0.06]'), ('C5', '—', 'not measured', '—')]
        >>> print(rows[0]["sentence"])  # doctest: +NORMALIZE_WHITESPACE
        Attention patterns carry absolute position: held-out ΔR² of log attention on absolute position is
        0.05 [0.04, 0.06] (above 0), and a probe of position from the attention pattern's row features scores a held-out R²
        of 0.6 [0.5, 0.7] (above 0).
        >>> rows[1]["rules"][0]["rule"]
        'not measured: C5 (run: poslens bos-swap --out results)'
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in claims.to_dict("records"):
        claim, model = str(record["claim"]), record["model"]
        if record["verdict"] == NOT_MEASURED or model is None or pd.isna(model):
            case = "—"
        elif claim == "C4" and (m := _C4_CASE.match(str(model))):
            case = m["case"]
        else:
            case = str(model)
        groups.setdefault((claim, case), []).append(record)
    rows = []
    for (claim, case), records in groups.items():
        verdict = joint(r["verdict"] for r in records) if all(r["verdict"] != NOT_MEASURED for r in records) else NOT_MEASURED
        index, label = _HEADLINE.get(claim, (0, ""))
        top = records[index] if index < len(records) else records[0]
        if pd.isna(top["figure"]):
            figure, label = "—", ""
        else:
            figure = f"{_num(top['figure'])} [{_num(top['ci_low'])}, {_num(top['ci_high'])}]"
        rules = [str(r["rule"]) for r in records]
        statement = str(records[0]["statement"])
        if verdict == NOT_MEASURED:
            blocks = [dict(rule=not_measured_summary(pd.DataFrame(records), out, present, settings), inputs="", figures=[])]
        else:
            blocks = _rule_blocks(rules)
        rows.append(dict(
            claim=claim, case=case, verdict=verdict, css=_css(verdict), statement=statement, label=label, figure=figure,
            sentence=_sentence(claim, case, verdict, statement, f"{label} {figure}".strip(), rules), rules=blocks,
        ))
    return rows


_FIGURE_METRICS = {
    "leakage": ("leakage_pattern", "c_res", "c_mask"),
    "sinks": ("sink_score", "sink_heads"),
    "ablate-sinks": ("c_res", "c_mask", "reduction"),
    "bos-swap": ("reduction",),
    "compare": ("c_res", "c_mask"),
    "fingerprint": ("dispersion",),
}
"""The metrics each part's figures draw, named in the page's metric list beside those the rules quote."""


def metric_names(claims: pd.DataFrame, present: Any = ()) -> list[dict[str, str]]:
    """The metrics this page names, with what each means, from :data:`poslens.fit.metric_glossary.GLOSSARY`.

    A metric is listed when a rule of ``claims`` names it or a figure of a part
    in ``present`` draws it, in the glossary's order; each entry holds ``name``,
    ``short`` (its definition's first sentence), ``range``, ``sign`` (what its
    sign and extremes mean) and ``section`` (the methodology section).

    Args:
        claims: The claims table.
        present: The parts the study has.

    Returns:
        One dict per metric.

    Example:
        >>> from poslens.study.claims import evaluate, figure_row
        >>> swaps = pd.DataFrame([figure_row("reduction", 3.34, 2.5, 4.2, intervention="bos:zero", query_window="early")])
        >>> rows = metric_names(evaluate(bos_swap=swaps, claims=["C5"]))
        >>> [r["name"] for r in rows], "changed sign" in rows[0]["sign"]
        (['reduction'], True)
    """
    text = " ".join(str(rule) for rule in claims["rule"]) if "rule" in claims else ""
    drawn = {name for part in present for name in _FIGURE_METRICS.get(part, ())}
    return [
        dict(name=name, short=entry.short(), range=entry.range, sign=entry.sign, section=entry.section)
        for name, entry in GLOSSARY.items()
        if name in drawn or re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text)
    ]


def claims_html(claims: pd.DataFrame) -> str:
    """The claims table as HTML, one row per verdict, coloured by verdict; every cell is escaped.

    A claim that was not measured gets the row class ``not-measured``, styled apart from ``inconclusive``.

    Args:
        claims: The claims table.

    Returns:
        The HTML table.

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


def _caption(*pieces: str) -> str:
    return " ".join(piece for piece in pieces if piece)


def _figure_div(fig: go.Figure, first: bool) -> Markup:
    # plotly's own output is the one trusted piece of HTML on the page; it carries plotly.js once, in the first figure.
    return Markup(fig.to_html(full_html=False, include_plotlyjs=True if first else False,
                              config={"displaylogo": False, "responsive": True}))


def _with_ablation(leakage: Result, ablation: Result) -> pd.DataFrame:
    """Per-layer C_res and C_mask before and after the sink-path ablation: sources_by_layer draws one panel per run."""
    after = ablation.table[ablation.table["metric"].isin(["c_res", "c_mask"])]
    before = leakage.table[leakage.table["metric"].isin(["c_res", "c_mask"]) & (leakage.table["intervention"] == "none")]
    return pd.concat([before, after], ignore_index=True)


_REDUCTION_NOTE = ("a reduction above 100% means C_res changed sign: the intervention reversed it rather than only removing it; "
                   "below 0, C_res grew")


def _claim_figures(parts: dict[str, Result], settings: dict[str, Any]) -> dict[str, list[tuple[go.Figure, str]]]:
    """The figures of each claim (claim → [(figure, caption)]), from whichever parts are present."""
    figures: dict[str, list[tuple[go.Figure, str]]] = {claim: [] for claim in STATEMENTS}
    if "leakage" in parts:
        leakage = parts["leakage"]
        note = quantized_note(leakage)
        figures["C1"].append((
            plots.leakage_heatmap(leakage.table),
            _caption("Binned ΔR² of log attention weights on absolute query position beyond offset, per head (all queries). "
                     "C1 reads its held-out version at the model aggregate, and the held-out R² of a probe of position from the "
                     "layers' attention-row features (methodology §3.3). A negative held-out figure means the fit predicts held-out "
                     "sequences worse than their mean (for ΔR²: than the offset alone): no decodable signal at this size.", note),
        ))
        figures["C2"].append((
            plots.sources_by_layer(leakage.table, "all", "C_res and C_mask by layer (all queries)"),
            _caption("C_mask is the part of the pattern's absolute-position leakage ΔR² that each head's mask-only "
                     "counterfactual reproduces, C_res the rest, which the residual stream supplies (methodology §4). "
                     "C2 reads C_mask at layer 0 and over layers ≥ 1, and the mask's share ρ_mask at layer 0.", note),
        ))
        ablation = parts.get("ablate-sinks")
        if ablation is not None and not ablation.table.empty:
            figures["C3"].append((
                plots.sources_by_layer(_with_ablation(leakage, ablation), "early",
                                       "C_res and C_mask by layer at early queries, before and after the sink-path ablation"),
                _caption(f"Left: the baseline; right: with the sink path of the sink-reading heads ablated. Early queries 1 ≤ i < "
                         f"{settings.get('early')}. C3 reads C_res over layers ≥ 1 and its reduction, 1 − C_res(after)/C_res(before) "
                         f"({_REDUCTION_NOTE}).",
                         quantized_note(leakage, ablation)),
            ))
        else:
            figures["C3"].append((
                plots.sources_by_layer(leakage.table, "early", "C_res and C_mask by layer at early queries"),
                _caption(f"Early queries 1 ≤ i < {settings.get('early')}; the sink-path ablation C3 also needs is not in this report.", note),
            ))
    if "sinks" in parts:
        tau = settings.get("tau", 0.3)
        sink_figure = plots.sink_scores(parts["sinks"].table, tau)
        # in the claim's narrower column the colour bar between the panels would cover the count panel's axis
        sink_figure.update_traces(colorbar=dict(x=1.02), selector=dict(type="heatmap"))
        figures["C3"].append((
            sink_figure,
            _caption("Sink score (mean over queries i ≥ 1 of the weight on key 0) per head, "
                     f"and the number of heads at or above τ = {tau} per layer: the sink-reading heads whose path C3 ablates "
                     "(interval: heads whose score interval lies wholly above τ … heads whose interval reaches τ).",
                     quantized_note(parts["sinks"])),
        ))
    if "compare" in parts:
        c = parts["compare"]
        compare_figure = plots.sources_by_layer(c.table, "all", "C_res and C_mask by layer across architectures (all queries)")
        compare_figure.update_annotations(font_size=11)  # one panel title per case, side by side in the claim's column
        figures["C4"].append((
            compare_figure,
            _caption(
                "Each panel is one case: standard RoPE (smollm2-135m base), NTK-scaled RoPE and imposed windows "
                "(inference-time variants of smollm2-135m, labelled by their variant) and gemma3-270m's native sliding window. "
                "C_mask is the part of the pattern's absolute-position leakage ΔR² that each head's mask-only counterfactual "
                "(its relative kernel and a constant sink, renormalized over the visible keys, per sequence) reproduces; "
                "C_res the rest, which the residual stream supplies (methodology §4, version 2). "
                "All queries 1 ≤ i < T: a window of W changes nothing "
                "for queries i < W, so early queries cannot tell the cases apart. "
                f"{settings.get('compare_seqs')} sequences × {settings.get('compare_len')} tokens per case.",
                quantized_note(c),
            ),
        ))
    if "bos-swap" in parts:
        swap = parts["bos-swap"]
        figures["C5"].append((
            plots.reductions(swap.table, "early"),
            _caption("Reduction of C_res at early queries, 1 − C_res(after)/C_res(before), for each BOS-embedding replacement; "
                     f"paired delete-one-group jackknife 95% intervals. {_REDUCTION_NOTE[:1].upper() + _REDUCTION_NOTE[1:]}. "
                     "The dotted line marks the 40% of claim C5.", quantized_note(swap)),
        ))
    if "fingerprint" in parts:
        meta = parts["fingerprint"].meta
        figures["C6"].append((
            plots.dispersion(parts["fingerprint"].table),
            _caption("Relative dispersion of the position-0 residual stream across inputs, by layer: with an auto-prepended BOS it is "
                     "zero up to floating point; without BOS position 0 holds the first text token and the trajectory varies. "
                     f"Settings: {meta.get('settings', {})}.", quantized_note(parts["fingerprint"])),
        ))
    return figures


def build_report(parts: dict[str, Result], claims: pd.DataFrame, settings: dict[str, Any], path: str | Path) -> Path:
    """Write the report page for whichever study parts are present (never over a file poslens did not write).

    The page opens on the verdict summary (:func:`summary_rows`): a badge per
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
        claims: The claims table.
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
    figures = _claim_figures(parts, settings)
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
    check_replaceable(path)
    atomic_write_text(path, page)
    record_written([path])
    return path
