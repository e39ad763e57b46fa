"""The report's verdict summary: one row per claim and case, with its joint verdict, headline figure and one sentence that reads it.

Every figure comes from the inputs table of :class:`poslens.study.claims.table.Claims`
(each row's inputs with name, value, interval and role), never from a rule's
words, so rewording a rule changes no sentence. The sentences say what the
unusual values mean: a reduction above 1 is a change of sign of C_res (the
intervention reversed it, it did not remove more than all of it), a negative one
a growth. :mod:`poslens.study.report` puts these rows on the page. Longer than 400 lines
because it is one job, the summary's words: one reading per claim, each with its examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from poslens.study.claims import not_measured_summary
from poslens.study.claims.c2_mask import RHO_HALF
from poslens.study.claims.c3_path import EQUIVALENCE, PRIMARY_OFFSET
from poslens.study.claims.c4_compare import C4_RULES
from poslens.study.claims.c7_relativize import C7_MARGIN
from poslens.study.claims.rules import NOT_MEASURED, NOT_SUPPORTED, SUPPORTED, joint
from poslens.study.claims.table import Claims


def inputs_text(inputs: pd.DataFrame) -> str:
    """A row's inputs in words, from the inputs table: ``name = value [ci_low, ci_high] (role)``, ``; ``-separated.

    Args:
        inputs: Rows of the inputs table (columns ``name``, ``value``, ``ci_low``, ``ci_high``, ``role``).

    Returns:
        The inputs in words.

    Example:
        >>> inputs_text(pd.DataFrame([dict(name="probe_r2", value=0.6, ci_low=0.5, ci_high=0.7, role="decides")]))
        'probe_r2 = 0.6 [0.5, 0.7] (decides)'
    """
    return "; ".join(f"{r['name']} = {_quoted(r).text()} ({r['role']})" for _, r in inputs.iterrows())


def verdict_css(verdict: Any) -> str:
    """A verdict as the CSS class of its badge and table row.

    Args:
        verdict: A verdict (``supported``, ``not measured``, …).

    Returns:
        The verdict with its spaces as hyphens.

    Example:
        >>> verdict_css("not measured")
        'not-measured'
    """
    return str(verdict).replace(" ", "-")


_HEADLINE_LABEL = {
    "C1": "held-out ΔR²",
    "C2": "C_mask at layer 0",
    "C3": "fall of the residual stream's probe R² (layers ≥ 2) with key 0's RoPE phase frozen",
    "C4": "C_res",
    "C5": "reduction of C_res",
    "C6": "dispersion without BOS",
    "C7": "reduction of L(log a) over layers ≥ 2, every column relativized",
    "C8": "r₁, the mask's count's share of the sink path's position code (m removed first)",
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


def quoted_inputs(inputs: pd.DataFrame) -> dict[str, _Quoted]:
    """Rows of the inputs table as numbers to quote, by name (what :func:`split_sentence` reads).

    Args:
        inputs: Rows of the inputs table (``name``, ``value``, ``ci_low``, ``ci_high``).

    Returns:
        ``{name: number with its interval}``.

    Example:
        >>> quoted_inputs(pd.DataFrame([{"name": "r1", "value": 0.5, "ci_low": 0.4, "ci_high": 0.6}]))["r1"].text()
        '0.5 [0.4, 0.6]'
    """
    return {str(r["name"]): _quoted(r) for _, r in inputs.iterrows()}


def split_sentence(f: dict[str, _Quoted], where: str = "in the sink-reading heads") -> str:
    """The sink path's split in words a researcher can quote (methodology §13), from C8's inputs (name → number).

    Args:
        f: C8's inputs by name: ``sink_share (V)``, ``share_m (V)``, ``r1``, ``r2``, ``interaction (V)``,
            ``coverage (V)``, ``sink_total (R2)`` and, when run, ``p0_every_head_change (V)`` / ``(R2)``.
        where: How the sentence opens.

    Returns:
        The sentence, without a final full stop.

    Example:
        >>> q = lambda v: _Quoted(v, v - 0.01, v + 0.01)
        >>> f = {"sink_share (V)": q(0.4), "share_m (V)": q(0.9), "r1": q(0.88), "r2": q(0.92), "interaction (V)": q(-0.003),
        ...      "coverage (V)": q(0.7), "sink_total (R2)": q(0.01)}
        >>> split_sentence(f).split(";")[0]
        "in the sink-reading heads, the sink path carries 40% [39%, 41%] of the residual stream's position code over layers ≥ 2"
    """
    share = f["share_m (V)"]
    phase = _Quoted(1 - share.value, 1 - share.ci_high, 1 - share.ci_low)
    total_r2 = f["sink_total (R2)"]
    change_r2 = _Quoted(-total_r2.value, -total_r2.ci_high, -total_r2.ci_low)
    text = (
        f"{where}, the sink path carries {f['sink_share (V)'].text(percent=True)} of the residual stream's "
        f"position code over layers ≥ 2; of the part its two named channels explain ({f['coverage (V)'].text(percent=True)} "
        f"of it), {share.text(percent=True)} runs through the mask's count and {phase.text(percent=True)} through key 0's "
        f"RoPE phase (interaction {f['interaction (V)'].text()}; order-specific shares r₁ {f['r1'].text(percent=True)}, "
        f"r₂ {f['r2'].text(percent=True)}); removing it changes the held-out R² of position by {change_r2.text()}"
    )
    if "p0_every_head_change (V)" in f and "p0_every_head_change (R2)" in f:
        text += (
            f"; freezing key 0's phase in every head instead changes the code by {f['p0_every_head_change (V)'].text()} "
            f"and the held-out R² by {f['p0_every_head_change (R2)'].text()}"
        )
    return text


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
            return (
                f"{subject} changes the sign of {named}: its reduction is {shown}, above 100%, so C_res after = "
                f"{_num(after)} × C_res before; it did more than remove C_res, it reversed it"
            )
        return (
            f"{subject} may change the sign of {named}: its reduction is {shown}, above 100% at its point estimate "
            f"(C_res after = {_num(after)} × C_res before: reversed, not removed more than all of it)"
        )
    if red.value < 0:
        if red.ci_high < 0:
            return (
                f"{subject} increases {named} rather than removing it: its reduction is {shown}, below 0, so C_res after = "
                f"{_num(after)} × C_res before"
            )
        return (
            f"{subject} removes none of {named} at its point estimate: its reduction is {shown}, below 0 (C_res after = {_num(after)} × C_res before)"
        )
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


_SINK_SPLIT = (
    ("resid_probe_r2_ge2: sink-ablation − sink-mask-only:1", "the mask's channel through the sink (ablation − mask-only profile)"),
    ("resid_probe_r2_ge2: sink-mask-only:1 − none", "the rest at key 0 (mask-only profile − unedited)"),
)
"""The reported split of the sink path C3's sentence quotes: (input name, words)."""


def _fall_words(fall: _Quoted) -> str:
    """Where C3's fall lies: above 0, within the equivalence band, below 0 (a rise), or reaching 0."""
    if fall.ci_low > 0:
        return "above 0"
    if fall.ci_high < 0:
        return "below 0: the freeze raises it"
    if fall.ci_low >= -EQUIVALENCE and fall.ci_high <= EQUIVALENCE:
        return f"within ±{EQUIVALENCE:g}: no fall of that size"
    return "interval reaching 0"


def _reading(claim: str, f: dict[str, _Quoted], inputs: pd.DataFrame, records: list[dict[str, Any]]) -> str:
    """What the figures of one group say, per claim, from its inputs (``f``: name → number; ``inputs``: their rows of the
    inputs table; ``records``: the group's claims rows); raises KeyError when an input it quotes is absent, and
    NotImplementedError for a claim it has no reading for (a new claim needs its branch here: that is a bug to show,
    not a figure to leave out, so it must not be a KeyError, which the caller treats as a missing input)."""
    if claim == "C1":
        h, p = f["leakage_pattern_heldout"], f["probe_r2"]
        text = f"held-out ΔR² of log attention on absolute position is {h.text()} ({h.side(0, '0')})"
        if h.value < 0:
            text += (
                "; a negative held-out ΔR² means the query-position terms fitted on the other groups predict the held-out "
                "sequences worse than the offset alone does: no absolute position is detectable at this size"
            )
        text += f", and a probe of position from the attention pattern's row features scores a held-out R² of {p.text()} ({p.side(0, '0')})"
        if p.value < 0:
            text += (
                "; a negative held-out R² means the probe predicts the held-out sequences' position worse than their own "
                "mean does: no decodable signal at this size (its interval, from the spread over the folds, is wide when "
                "each group holds few sequences)"
            )
        return text
    if claim == "C2":
        m0, md, rho, r0 = f["c_mask (layer 0)"], f["c_mask (layers >= 1)"], f["rho_mask (layer 0)"], f["c_res (layer 0)"]
        return (
            f"C_mask is {m0.text()} at layer 0 ({m0.side(0, '0')}) and {md.text()} over layers ≥ 1 "
            f"({md.side(0, '0')}); its share ρ_mask of the leakage at layer 0 is {rho.text()} ({rho.side(RHO_HALF, '1/2')}), "
            f"against C_res {r0.text()} there"
        )
    if claim == "C3":
        fall, beyond = f["fall"], f["fall beyond sham"]
        text = (
            f"freezing the RoPE phase of every key-0 logit (at offset D = {PRIMARY_OFFSET}, in every layer) changes how much "
            f"absolute position a probe reads from the residual stream over layers ≥ 2 by a fall of {fall.text()} R² "
            f"({_fall_words(fall)}), and by {beyond.text()} more than freezing key 1 instead, the sham ({beyond.side(0, '0')})"
        )
        if "detectable |fall|" in f and "detectable |fall beyond sham|" in f:
            text += (
                f"; the data could detect a fall of {f['detectable |fall|'].text()} and one beyond the sham of "
                f"{f['detectable |fall beyond sham|'].text()}"
            )
        split = [(name, words) for name, words in _SINK_SPLIT if name in f]
        if split:
            text += "; beside it, on the same readout: " + ", ".join(f"{words} {f[name].text()}" for name, words in split)
        if "reduction" in f:
            removal = _removal(f["reduction"], "ablating the sink path of the sink-reading heads", "C_res at early queries", "C_res")
            text += f"; {removal} (reported: the ablation removes the mask's dilution and key 0's phase together)"
        if "r (key0)" in f:
            key0 = f["r (key0)"]
            text += (
                f"; relativizing key 0 in every layer {_changes(key0)} mean L(log a) over layers ≥ 2 "
                f"(r = {key0.text(percent=True)}, {key0.side(0, '0')}; reported)"
            )
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
        rule = C4_RULES[kind]  # the condition that holds names where the interval lies (its note)
        where = next((c.note for c in (*rule.supported_if, *rule.not_supported_if) if c.holds(f)), "overlapping")
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
        text = (
            f"with auto-BOS the position-0 residual's relative dispersion across inputs is at most {bos.text()} over layers; "
            f"without BOS it is {none.text()} ({none.side(0, '0')}); a readout of the position-0 token from the "
            f"sink-reading heads scores {acc.text()}"
        )
        if "readout_chance" in f:
            text += f" against chance {f['readout_chance'].text()}"
        if "readout_p_value" in f:
            text += f" (permutation p = {f['readout_p_value'].text()})"
        return text
    if claim == "C8":
        return split_sentence(f)
    if claim == "C7":
        r = f["r (all)"]
        margin = C7_MARGIN
        if r.ci_low > margin:
            where = f"wholly above {margin:.0%}: the earlier layers' absolute logits carry position into later layers"
        elif r.ci_low >= -margin and r.ci_high <= margin:
            where = f"within ±{margin:.0%}: no effect of that size"
        elif r.ci_high < -margin:
            where = f"wholly below −{margin:.0%}: the edit raised it, so the earlier layers' absolute logits counteract position"
        else:
            where = f"reaching ±{margin:.0%}"
        text = (
            f"relativizing every layer's absolute logits in every column {_changes(r)} mean L(log a) over layers ≥ 2 "
            f"(r = {r.text(percent=True)}, interval {where})"
        )
        if "r (placebo:all)" in f:
            text += f", against {f['r (placebo:all)'].text(percent=True)} for a purely relative placebo of matched norm"
        smaller = inputs[(inputs["metric"] == "reduction_ge2") & (inputs["intervention"] == "relativize:all") & (inputs["role"] == "reported")]
        if len(smaller):  # the same edit fitted on less calibration data: the calibration's own noise
            text += "; fitted on less calibration data: " + ", ".join(_quoted(row).text(percent=True) for _, row in smaller.iterrows())
        if "loss_change (relativize:all)" in f:
            text += f"; next-token loss changes by {f['loss_change (relativize:all)'].text()} nats per token"
            if "loss_change (placebo:all)" in f:
                text += f" ({f['loss_change (placebo:all)'].text()} under the placebo)"
        return text
    raise NotImplementedError(f"the verdict summary has no reading for claim {claim!r}; add its branch to poslens.study.claims.text._reading")


def _sentence(
    claim: str, verdict: str, statement: str, headline: str, inputs: pd.DataFrame, records: list[dict[str, Any]], overall: str | None = None
) -> str:
    """The group's sentence, led by ``verdict`` (its own comparisons' verdict); ``overall``, the claim's verdict when it differs."""
    if verdict == NOT_MEASURED:
        return f"{statement[:1].upper() + statement[1:]}: not measured, the parts it reads are not in this report."
    quoted = {str(r["name"]): _quoted(r) for _, r in inputs.iterrows()}
    try:
        reading = _reading(claim, quoted, inputs, records)
    except KeyError:  # inputs of another shape (a claim whose figures changed): say the headline figure alone
        reading = headline
    text = f"{_lead(verdict, statement)}: {reading}."
    if overall is not None and overall != verdict:
        text += f" The claim as a whole is {overall}: it is decided by all its comparisons together, this row's among them."
    return text


def _rule_blocks(claims: Claims, records: list[dict[str, Any]], verdict: str) -> list[dict[str, Any]]:
    """The distinct rules of a group with their inputs (from the inputs table), and the figure each row shows."""
    blocks: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        inputs = claims.inputs_of(r["key"])
        listed = [dict(name=str(i["name"]), number=_quoted(i).text(), role=str(i["role"]), where=str(i["where"])) for _, i in inputs.iterrows()]
        own = str(r["own_verdict"])
        signature = (str(r["rule"]), own, tuple((i["name"], i["number"], i["role"]) for i in listed))
        block = blocks.setdefault(signature, dict(rule=str(r["rule"]), inputs=listed, figures=[], own=own if own != verdict else ""))
        shown = inputs[inputs["name"] == r["figure_name"]]
        if len(shown):
            block["figures"].append(f"{r['figure_name']}: {shown['where'].iloc[0]}")
    return list(blocks.values())


def _own(record: dict[str, Any]) -> str:
    """A claims row's own verdict (its ``own_verdict``; its ``verdict`` where a table without that column was read)."""
    own = record.get("own_verdict")
    return str(record["verdict"]) if own is None or (isinstance(own, float) and math.isnan(own)) else str(own)


def summary_rows(claims: Claims, out: Any = "DIR", present: Any = (), settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The verdict summary: one row per claim and group, with joint verdict, headline figure, a sentence and the rules.

    Rows of ``claims.table`` (columns :data:`poslens.study.claims.table.CLAIM_COLUMNS`)
    are grouped by claim and ``group`` (for C4 a case's comparison with the
    standard and its depth slope form one group); a group's verdict is
    :func:`poslens.study.claims.rules.joint` of its rows' verdicts (for C4 the claim's
    verdict, decided by all its comparisons together), and its ``own_verdict``
    the joint of its rows' own verdicts: what this group's comparisons say
    alone. The badge and the sentence lead with ``own_verdict``; where the
    claim's verdict differs (a C4 group whose comparisons all read "as
    claimed", in a claim another group refutes) the row shows it beside, and
    the sentence says so. Every figure comes from
    ``claims.inputs``, the inputs table, by name and role; the rule's words are
    shown, never read. Each summary row holds ``claim``, ``case`` (the group),
    ``verdict`` (the claim's), ``css`` (the verdict as a CSS class), ``own_verdict``
    and ``own_css`` (this group's comparisons alone), ``label`` and
    ``figure`` (the headline input of the group's first row and its interval),
    ``sentence`` (one plain sentence reading the inputs, led by the verdict)
    and ``rules`` (the distinct rules with their inputs, for the disclosure). A
    claim not measured names the commands that would measure it into ``out``
    (parts in ``present`` are not suggested again).

    Args:
        claims: The claims (:class:`poslens.study.claims.table.Claims`).
        out: The study folder the suggested commands write to.
        present: The parts already in ``out``.
        settings: The study's settings, for the suggested commands.

    Returns:
        The summary rows.

    Example:
        >>> from poslens.study.claims import evaluate
        >>> from poslens.study.claims.lookup import figure_row
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
        measured = all(r["verdict"] != NOT_MEASURED for r in records)
        verdict = joint(r["verdict"] for r in records) if measured else NOT_MEASURED
        own = joint(_own(r) for r in records) if measured else NOT_MEASURED
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
        rows.append(
            dict(
                claim=claim,
                case=case,
                verdict=verdict,
                css=verdict_css(verdict),
                own_verdict=own,
                own_css=verdict_css(own),
                statement=statement,
                label=label,
                figure=figure,
                sentence=_sentence(claim, own, statement, f"{label} {figure}".strip(), inputs, records, overall=verdict),
                rules=blocks,
            )
        )
    return rows
