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
from poslens.mechanisms.comparisons import comparison_table
from poslens.ownership import check_replaceable, record_written
from poslens.study.claims import (
    NOT_MEASURED,
    NOT_SUPPORTED,
    STATEMENTS,
    SUPPORTED,
    Claims,
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


def _inputs_text(inputs: pd.DataFrame) -> str:
    """A row's inputs in words, from the inputs table: ``name = value [ci_low, ci_high] (role)``, ``; ``-separated."""
    return "; ".join(f"{r['name']} = {_quoted(r).text()} ({r['role']})" for _, r in inputs.iterrows())


def _claim_rows(claims: Claims) -> list[dict[str, str]]:
    rows = []
    for _, r in claims.table.iterrows():
        figure = "—" if pd.isna(r["figure"]) else f"{r['figure']:.4g} [{r['ci_low']:.4g}, {r['ci_high']:.4g}]"
        model = "—" if r["verdict"] == NOT_MEASURED and (r["model"] is None or pd.isna(r["model"])) else str(r["model"])
        shown = "" if r["figure_name"] is None or pd.isna(r["figure_name"]) else str(r["figure_name"])
        rows.append(dict(css=_css(r["verdict"]), claim=str(r["claim"]), statement=str(r["statement"]), model=model,
                         shown=shown, figure=figure, verdict=str(r["verdict"]), rule=str(r["rule"]),
                         inputs=_inputs_text(claims.inputs_of(r["key"]))))
    return rows


def _css(verdict: Any) -> str:
    return str(verdict).replace(" ", "-")


# --------------------------------------------------------------------------- the verdict summary

_HEADLINE_LABEL = {
    "C1": "held-out ΔR²",
    "C2": "C_mask at layer 0",
    "C3": "reduction of C_res by sink-path ablation",
    "C4": "C_res",
    "C5": "reduction of C_res",
    "C6": "dispersion without BOS",
    "C7": "reduction of L(log a) over layers ≥ 2, every column relativized",
}
"""Per claim, the words that label its headline figure (the input whose role is ``headline``) in the summary."""


@dataclass(frozen=True)
class _Quoted:
    """A number as the inputs table gives it: value, and its interval unless it is a point value (NaN bounds)."""

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


def _quoted(record: Any) -> _Quoted:
    """An input's number (a row of the inputs table) as :class:`_Quoted`."""
    return _Quoted(float(record["value"]), float(record["ci_low"]), float(record["ci_high"]))


def _num(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.4g}".replace("-", "−")


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


def _changes(r: _Quoted) -> str:
    """What a reduction r = 1 − after/before did to the figure, in a verb: r < 0 raised it.

    Example:
        >>> _changes(_Quoted(0.3, 0.1, 0.5)), _changes(_Quoted(-0.9, -1.2, -0.6))
        ('lowers', 'raises')
    """
    return "raises" if r.value < 0 else "lowers"


def _reading(claim: str, f: dict[str, _Quoted], inputs: pd.DataFrame, records: list[dict[str, Any]]) -> str:
    """What the figures of one group say, per claim, from its inputs (``f``: name → number; ``inputs``: their rows of the
    inputs table; ``records``: the group's claims rows); raises KeyError when an input it quotes is absent."""
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
        text = (f"C_res at early queries is {res.text()} ({res.side(0, '0')}), and "
                f"{_removal(red, 'ablating the sink path of the sink-reading heads', 'it', 'C_res')} ({red.side(0, '0')})")
        if "r (key0)" in f:
            key0 = f["r (key0)"]
            text += (f"; beside it, relativizing key 0 in every layer {_changes(key0)} mean L(log a) over layers ≥ 2 "
                     f"(r = {key0.text(percent=True)}, {key0.side(0, '0')}), which is reported and does not decide: key 0 is not "
                     "the sink path's only route, so a null here would not refute the claim")
        return text
    if claim == "C4" and "c_res (standard)" not in f:  # decided by differences, trends and depth slopes (methodology §9.1)
        said = {SUPPORTED: "as claimed", NOT_SUPPORTED: "against the claim"}
        pieces = []
        for r in records:
            name = str(r["figure_name"])
            x, detectable = f[name], f.get(f"detectable |{name}|")
            text = f"{name} is {x.text()} ({said.get(str(r['own_verdict']), 'undecided')}"
            if detectable is not None:
                text += f"; the data could detect {detectable.text()}"
            pieces.append(text + ")")
        return f"the {records[0]['case']} case: " + "; ".join(pieces)
    if claim == "C4":
        kind = str(records[0]["case"])
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
        kind = inputs.loc[inputs["name"] == "reduction", "intervention"].iloc[0]
        text = _removal(red, f"replacing the BOS embedding ({kind})", "C_res at early queries", "C_res at early queries")
        if "target" in f and "band" in f:
            target, width = f["target"].value, f["band"].value
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
    if claim == "C7":
        r = f["r (all)"]
        margin = 0.10
        if r.ci_low > margin:
            where = f"above {margin:.0%}"
        elif r.ci_low >= -margin and r.ci_high <= margin:
            where = f"within ±{margin:.0%}: no effect of that size"
        elif r.ci_high < -margin:
            where = f"wholly below −{margin:.0%}: the edit raised it"
        else:
            where = f"reaching ±{margin:.0%}"
        text = (f"relativizing every layer's absolute logits in every column {_changes(r)} mean L(log a) over layers ≥ 2 "
                f"(r = {r.text(percent=True)}, interval {where})")
        if "r (placebo:all)" in f:
            text += f", against {f['r (placebo:all)'].text(percent=True)} for a purely relative placebo of matched norm"
        smaller = inputs[(inputs["metric"] == "reduction_ge2") & (inputs["intervention"] == "relativize:all")
                         & (inputs["role"] == "reported")]
        if len(smaller):  # the same edit fitted on less calibration data: the calibration's own noise
            text += "; fitted on less calibration data: " + ", ".join(_quoted(row).text(percent=True) for _, row in smaller.iterrows())
        if "loss_change (relativize:all)" in f:
            text += f"; next-token loss changes by {f['loss_change (relativize:all)'].text()} nats per token"
            if "loss_change (placebo:all)" in f:
                text += f" ({f['loss_change (placebo:all)'].text()} under the placebo)"
        return text
    raise KeyError(claim)


def _sentence(claim: str, verdict: str, statement: str, headline: str, inputs: pd.DataFrame,
              records: list[dict[str, Any]]) -> str:
    if verdict == NOT_MEASURED:
        return f"{statement[:1].upper() + statement[1:]}: not measured, the parts it reads are not in this report."
    quoted = {str(r["name"]): _quoted(r) for _, r in inputs.iterrows()}
    try:
        reading = _reading(claim, quoted, inputs, records)
    except KeyError:  # inputs of another shape (a claim whose figures changed): say the headline figure alone
        reading = headline
    return f"{_lead(verdict, statement)}: {reading}."


def _rule_blocks(claims: Claims, records: list[dict[str, Any]], verdict: str) -> list[dict[str, Any]]:
    """The distinct rules of a group with their inputs (from the inputs table), and the figure each row shows."""
    blocks: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        inputs = claims.inputs_of(r["key"])
        listed = [dict(name=str(i["name"]), number=_quoted(i).text(), role=str(i["role"]), where=str(i["where"]))
                  for _, i in inputs.iterrows()]
        own = str(r["own_verdict"])
        signature = (str(r["rule"]), own, tuple((i["name"], i["number"], i["role"]) for i in listed))
        block = blocks.setdefault(signature, dict(rule=str(r["rule"]), inputs=listed, figures=[],
                                                  own=own if own != verdict else ""))
        shown = inputs[inputs["name"] == r["figure_name"]]
        if len(shown):
            block["figures"].append(f"{r['figure_name']}: {shown['where'].iloc[0]}")
    return list(blocks.values())


def summary_rows(claims: Claims, out: Any = "DIR", present: Any = (), settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The verdict summary: one row per claim and group, with joint verdict, headline figure, a sentence and the rules.

    Rows of ``claims.table`` (columns :data:`poslens.study.claims.CLAIM_COLUMNS`)
    are grouped by claim and ``group`` (for C4 a case's comparison with the
    standard and its depth slope form one group); a group's verdict is
    :func:`poslens.study.claims.joint` of its rows. Every figure comes from
    ``claims.inputs``, the inputs table, by name and role; the rule's words are
    shown, never read. Each summary row holds ``claim``, ``case`` (the group),
    ``verdict``, ``css`` (the verdict as a CSS class), ``label`` and
    ``figure`` (the headline input of the group's first row and its interval),
    ``sentence`` (one plain sentence reading the inputs, led by the verdict)
    and ``rules`` (the distinct rules with their inputs, for the disclosure). A
    claim not measured names the commands that would measure it into ``out``
    (parts in ``present`` are not suggested again).

    Args:
        claims: The claims (:class:`poslens.study.claims.Claims`).
        out: The study folder the suggested commands write to.
        present: The parts already in ``out``.
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
    for record in claims.table.to_dict("records"):
        claim, group = str(record["claim"]), record["group"]
        case = "—" if record["verdict"] == NOT_MEASURED or group is None or pd.isna(group) else str(group)
        groups.setdefault((claim, case), []).append(record)
    rows = []
    for (claim, case), records in groups.items():
        verdict = joint(r["verdict"] for r in records) if all(r["verdict"] != NOT_MEASURED for r in records) else NOT_MEASURED
        top = claims.headline(records[0]["key"])
        if top is None or pd.isna(top["value"]):
            figure, label = "—", ""
        else:
            figure, label = f"{_num(top['value'])} [{_num(top['ci_low'])}, {_num(top['ci_high'])}]", _HEADLINE_LABEL.get(claim, "")
        statement = str(records[0]["statement"])
        keys = [r["key"] for r in records]
        inputs = claims.inputs[claims.inputs["key"].isin(keys)].drop_duplicates("name")
        if verdict == NOT_MEASURED:
            blocks = [dict(rule=not_measured_summary(pd.DataFrame(records), out, present, settings), inputs=[], figures=[], own="")]
        else:
            blocks = _rule_blocks(claims, records, verdict)
        rows.append(dict(
            claim=claim, case=case, verdict=verdict, css=_css(verdict), statement=statement, label=label, figure=figure,
            sentence=_sentence(claim, verdict, statement, f"{label} {figure}".strip(), inputs, records), rules=blocks,
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


def metric_names(claims: Claims, present: Any = ()) -> list[dict[str, str]]:
    """The metrics this page names, with what each means, from :data:`poslens.fit.metric_glossary.GLOSSARY`.

    A metric is listed when an input of ``claims`` was read from it (the
    ``metric`` column of the inputs table) or a figure of a part in ``present``
    draws it, in the glossary's order; each entry holds ``name``, ``short``
    (its definition's first sentence), ``range``, ``sign`` (what its sign and
    extremes mean) and ``section`` (the methodology section).

    Args:
        claims: The claims (:class:`poslens.study.claims.Claims`).
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
    read = {str(m) for m in claims.inputs["metric"] if isinstance(m, str) and m}
    drawn = {name for part in present for name in _FIGURE_METRICS.get(part, ())}
    return [
        dict(name=name, short=entry.short(), range=entry.range, sign=entry.sign, section=entry.section)
        for name, entry in GLOSSARY.items()
        if name in drawn or name in read
    ]


def claims_html(claims: Claims) -> str:
    """The claims table as HTML, one row per verdict, coloured by verdict, with each row's inputs; every cell is escaped.

    A claim that was not measured gets the row class ``not-measured``, styled apart from ``inconclusive``.

    Args:
        claims: The claims (:class:`poslens.study.claims.Claims`).

    Returns:
        The HTML table.

    Example:
        >>> from poslens.study.claims import evaluate, figure_row
        >>> t = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06, model="<m>"),
        ...                   figure_row("probe_r2", 0.6, 0.5, 0.7, model="<m>")])
        >>> page = claims_html(evaluate(leakage=t, claims=["C1", "C5"]))
        >>> '<tr class="supported">' in page, "<td>&lt;m&gt;</td>" in page, "probe_r2 = 0.6 [0.5, 0.7] (decides)" in page
        (True, True, True)
        >>> '<tr class="not-measured">' in page
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
    if "compare" in parts:
        comparisons = comparison_table(parts["compare"])
        paired = comparisons[(comparisons["kind"] == "paired") & (comparisons["metric"] == "c_res")]
        if any(str(v).startswith(("ntk:", "window:")) for v in paired["variant"]):
            figures["C4"].append((
                plots.plot_dose_response(comparisons, "c_res", "all"),
                _caption("Each variant's C_res (mean over layers ≥ 1, all queries) minus its base model's, on the same token "
                         "ids and groups, with the paired delete-one-group jackknife 95% interval; the panel titles give "
                         "the least-squares slope per doubling of α or W and its interval (methodology §9.1). C4 reads "
                         "these differences and slopes, not whether two cases' own intervals overlap.",
                         quantized_note(parts["compare"])),
            ))
    if "relativize" in parts:
        attribution = parts["relativize"]
        record = settings.get("relativize_seqs"), settings.get("relativize_len")
        figures["C7"].append((
            plots.plot_attribution(attribution.table, "all"),
            _caption("L(log a) by layer, all queries, unedited and with every layer relativized (methodology §11): the edited "
                     "curve at layer l is measured with layers < l edited and layer l as the model computes it, so layer 0 "
                     "is the negative control. 'every column' removes each head's whole absolute logit component, 'key 0 "
                     "only' its key-0 term per query bin, 'all but key 0' the rest; the placebo subtracts a purely relative "
                     "kernel of the same norm. C7 reads r = 1 − mean over layers ≥ 2 of the edited L over the unedited one "
                     "under 'every column'; C3 reports the same under 'key 0 only'. "
                     f"{record[0]} sequences × {record[1]} tokens; paired delete-one-group jackknife 95% intervals.",
                     quantized_note(attribution)),
        ))
        if len(attribution.loss):
            figures["C7"].append((
                plots.plot_loss_change(attribution.loss),
                _caption("What each edit costs the model: the change in next-token loss (nats per token) per query bin, "
                         "beside the purely relative placebo of the same norm. An edit that costs far more than its "
                         "placebo runs the model off its distribution for reasons that are about position.",
                         quantized_note(attribution)),
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


def build_report(parts: dict[str, Result], claims: Claims, settings: dict[str, Any], path: str | Path) -> Path:
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
        claims: The claims (:class:`poslens.study.claims.Claims`: the claims table and its inputs).
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
