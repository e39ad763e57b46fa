"""The report says in words what a reduction above 1 and a negative held-out R² mean, and lists the metrics it names.

Hand-made figures through the report's own functions (:func:`summary_rows`,
:func:`build_report`): a reduction of 3.34 ("334%") must read as a change of
sign of C_res, never as removing more than all of it; a negative reduction as
C_res growing; a negative ``probe_r2`` or ``leakage_pattern_heldout`` as no
decodable signal at this size.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pandas as pd
import pytest
from split_tables import split_table

from poslens.fit.metric_glossary import GLOSSARY
from poslens.measurement.result import Result
from poslens.study.claims import evaluate
from poslens.study.claims.lookup import figure_row
from poslens.study.claims.table import Claims
from poslens.study.claims.text import summary_rows
from poslens.study.report import _code, build_report, metric_names

SETTINGS = dict(n_seqs=8, seq_len=24, corpus="random", groups=4, early=8, seed=0)


def _swap(value: float, low: float, high: float, kind: str = "bos:zero") -> pd.DataFrame:
    return pd.DataFrame([figure_row("reduction", value, low, high, intervention=kind, query_window="early")])


def _c1(heldout: tuple[float, float, float], probe: tuple[float, float, float]) -> pd.DataFrame:
    return pd.DataFrame([figure_row("leakage_pattern_heldout", *heldout), figure_row("probe_r2", *probe)])


def _sentence(claims: Claims, claim: str) -> str:
    (row,) = [r for r in summary_rows(claims) if r["claim"] == claim]
    return row["sentence"]


def test_a_bos_reduction_above_1_reads_as_a_sign_change_not_a_removal():
    sentence = _sentence(evaluate(bos_swap=_swap(3.34, 2.5, 4.2), claims=["C5"]), "C5")
    assert "removes 334%" not in sentence and "removes" not in sentence.split(": ", 1)[1]
    assert "replacing the BOS embedding (bos:zero) changes the sign of C_res at early queries" in sentence
    assert "its reduction is 334% [250%, 420%], above 100%, so C_res after = −2.34 × C_res before" in sentence
    assert "it did more than remove C_res, it reversed it" in sentence
    assert sentence.endswith("; its interval lies wholly above 50%.")  # why C5 is not supported, after the sign change


def _path() -> pd.DataFrame:
    """The path-specific tests' rows C3 reads: the freeze lowers the residual probe R² by 0.1, 0.05 more than the sham."""
    rows = [
        ("key0-phase:D=64", "none", -0.10, -0.14, -0.06),
        ("key0-phase:D=64", "key1-phase:D=64", -0.05, -0.08, -0.02),
        ("sink-ablation", "sink-mask-only:1", -0.2, -0.3, -0.1),
        ("sink-mask-only:1", "none", -0.05, -0.08, -0.02),
    ]
    return pd.DataFrame(
        [
            dict(figure_row("resid_probe_r2_ge2", v, lo, hi, intervention=iv), kind="difference", reference=ref, query_bin=-1)
            for iv, ref, v, lo, hi in rows
        ]
    )


def test_an_ablation_reduction_above_1_reads_as_a_sign_change():
    leak = pd.DataFrame([figure_row("c_res", 0.01, 0.005, 0.015, query_window="early")])
    ablation = pd.DataFrame([figure_row("reduction", 3.34, 2.5, 4.2, query_window="early", intervention="sink-ablation:0.3")])
    sentence = _sentence(evaluate(leakage=leak, ablation=ablation, path=_path(), claims=["C3"]), "C3")
    assert "removes 334%" not in sentence
    assert "ablating the sink path of the sink-reading heads changes the sign of C_res" in sentence and "reversed it" in sentence


def test_a_negative_reduction_reads_as_c_res_growing():
    sentence = _sentence(evaluate(bos_swap=_swap(-0.2, -0.3, -0.1, "bos:mean"), claims=["C5"]), "C5")
    assert "removes −20%" not in sentence
    assert "increases C_res at early queries rather than removing it: its reduction is −20% [−30%, −10%], below 0" in sentence
    assert "C_res after = 1.2 × C_res before" in sentence


def test_a_point_estimate_outside_0_1_whose_interval_reaches_back_is_read_as_a_point_estimate():
    up = _sentence(evaluate(bos_swap=_swap(1.3, 0.8, 1.8), claims=["C5"]), "C5")
    assert "may change the sign of C_res at early queries: its reduction is 130% [80%, 180%], above 100% at its point estimate" in up
    assert "reversed, not removed more than all of it" in up and "removes 130%" not in up
    down = _sentence(evaluate(bos_swap=_swap(-0.27, -1.0, 0.48, "bos:token:2"), claims=["C5"]), "C5")
    assert "removes none of C_res at early queries at its point estimate: its reduction is −27% [−100%, 48%], below 0" in down
    assert "increases" not in down


def test_a_reduction_between_0_and_1_still_reads_as_a_removal():
    sentence = _sentence(evaluate(bos_swap=_swap(0.4, 0.35, 0.45, "bos:mean"), claims=["C5"]), "C5")
    assert sentence.endswith("removes 40% [35%, 45%] of C_res at early queries; the interval holds 40%.")
    near = _sentence(evaluate(bos_swap=_swap(0.9, 0.6, 1.2), claims=["C5"]), "C5")
    assert "removes 90% [60%, 120%] of C_res at early queries (the interval reaches above 100%, where C_res would change sign)" in near


def test_a_negative_probe_r2_says_there_is_no_decodable_signal():
    sentence = _sentence(evaluate(leakage=_c1((0.05, 0.04, 0.06), (-0.2, -0.6, 0.2)), claims=["C1"]), "C1")
    assert "held-out R² of −0.2 [−0.6, 0.2]" in sentence
    assert "a negative held-out R² means the probe predicts the held-out sequences' position worse than their own mean" in sentence
    assert "no decodable signal at this size" in sentence and "wide when each group holds few sequences" in sentence
    assert "negative held-out ΔR²" not in sentence  # the held-out ΔR² is positive here
    positive = _sentence(evaluate(leakage=_c1((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), claims=["C1"]), "C1")
    assert "negative" not in positive and "residual stream" not in positive  # the probe reads the attention rows


def test_a_negative_held_out_leakage_says_nothing_is_detectable():
    sentence = _sentence(evaluate(leakage=_c1((-0.01, -0.03, 0.01), (0.6, 0.5, 0.7)), claims=["C1"]), "C1")
    assert (
        "a negative held-out ΔR² means the query-position terms fitted on the other groups predict the held-out sequences "
        "worse than the offset alone does: no absolute position is detectable at this size" in sentence
    )
    assert "negative held-out R²" not in sentence


def test_metric_names_come_from_the_glossary():
    claims = evaluate(leakage=_c1((0.05, 0.04, 0.06), (-0.2, -0.6, 0.2)), bos_swap=_swap(3.34, 2.5, 4.2), claims=["C1", "C5"])
    rows = metric_names(claims)
    assert [r["name"] for r in rows] == ["leakage_pattern_heldout", "probe_r2", "reduction"]
    assert all(r["short"] == GLOSSARY[r["name"]].short() and r["sign"] == GLOSSARY[r["name"]].sign for r in rows)
    # a figure's metrics are listed too; a metric whose name is part of a longer one is not
    assert [r["name"] for r in metric_names(Claims(claims.table.iloc[0:0], claims.inputs.iloc[0:0]), present=["fingerprint"])] == ["dispersion"]
    only = Claims(claims.table, claims.inputs.assign(metric="c_res_meanfield"))
    assert [r["name"] for r in metric_names(only)] == ["c_res_meanfield"]
    # the list comes from the inputs' metric column, not from the words of a rule
    worded = Claims(claims.table.assign(rule="supported if rho_mask and count_share say so"), claims.inputs)
    assert [r["name"] for r in metric_names(worded)] == ["leakage_pattern_heldout", "probe_r2", "reduction"]


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)


def _page_text(path) -> str:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    return " ".join(" ".join(parser.chunks).split())


def test_the_page_explains_both_and_lists_the_metrics_it_names(tmp_path):
    swaps = _swap(3.34, 2.5, 4.2)
    claims = evaluate(leakage=_c1((0.05, 0.04, 0.06), (-0.2, -0.6, 0.2)), bos_swap=swaps, claims=["C1", "C5"])
    path = build_report({"bos-swap": Result(swaps, {"model": {"model": "m"}})}, claims, SETTINGS, tmp_path / "report.html")
    html = path.read_text(encoding="utf-8")
    text = _page_text(path)
    assert "removes 334%" not in text and "it did more than remove C_res, it reversed it" in text
    assert "a negative held-out R² means the probe predicts" in text
    # the C5 figure's caption says what a reduction above 100% means
    assert "A reduction above 100% means C_res changed sign: the intervention reversed it rather than only removing it" in text
    # the metric list: a link under the verdicts, then one entry per metric named, each with its sign reading
    assert '<a href="#metric-names">Metric names</a>' in html and '<h2 id="metric-names">Metric names</h2>' in html
    for name in ("leakage_pattern_heldout", "probe_r2", "reduction"):
        assert f'<dt id="metric-{name}"><code>{name}</code>' in html
    assert "Above 1: C_res changed sign, the intervention did more than remove it, it reversed it" in text
    assert "worse than their own mean does: no decodable position signal at this sample size" in text
    assert "docs/glossary.md" in text


def test_backticked_names_become_code_and_the_rest_stays_escaped():
    assert str(_code("see `c_res` and <b>`x`</b> & `a<b`")) == "see <code>c_res</code> and &lt;b&gt;<code>x</code>&lt;/b&gt; &amp; `a&lt;b`"


def _all_claims() -> Claims:
    """Every claim measured once on hand-made tables (C4 with the cases recorded as compare records them)."""
    leakage = pd.DataFrame(
        [
            figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
            figure_row("probe_r2", -0.2, -0.6, 0.2),
            figure_row("c_mask", 0.02, 0.01, 0.03, layer=0),
            figure_row("c_mask", 0.01, 0.005, 0.015),
            figure_row("c_res", 0.002, -0.001, 0.005, layer=0),
            figure_row("rho_mask", 0.9, 0.8, 1.0, layer=0),
            figure_row("count_share", 0.9, 0.8, 1.0, layer=0),
            figure_row("c_res", 0.01, 0.005, 0.015, query_window="early"),
        ]
    )
    ablation = pd.DataFrame([figure_row("reduction", 0.45, 0.3, 0.6, query_window="early", intervention="sink-ablation:0.3")])
    compare = pd.DataFrame(
        [
            figure_row("c_res", v, lo, hi, model=m, variant=var, layer=layer, query_window="all")
            for m, var, layer, v, lo, hi in [
                ("s", "base", -1, 0.010, 0.008, 0.012),
                ("s", "ntk:4", -1, 0.009, 0.005, 0.011),
                ("g", "base", -1, 0.03, 0.02, 0.04),
                ("g", "base", 1, 0.01, 0.0, 0.02),
                ("g", "base", 2, 0.03, 0.02, 0.04),
                ("g", "base", 3, 0.05, 0.04, 0.06),
            ]
        ]
    )
    cases = [
        dict(model="s", variant="base", case="standard"),
        dict(model="s", variant="ntk:4", case="ntk"),
        dict(model="g", variant="base", case="sliding"),
    ]
    fingerprint = pd.DataFrame(
        [figure_row("dispersion", 0.0, 0.0, 0.0, intervention="position0:bos", layer=layer) for layer in (0, 1)]
        + [
            figure_row("dispersion", 0.2, 0.1, 0.3, intervention="position0:none"),
            figure_row("readout_accuracy", 0.9, 0.8, 1.0, intervention="position0:varied"),
            figure_row("readout_chance", 0.125, 0.125, 0.125, intervention="position0:varied"),
            figure_row("readout_chance_permuted", 0.125, 0.09, 0.16, intervention="position0:varied"),
            figure_row("readout_p_value", 0.005, 0.005, 0.005, intervention="position0:varied"),
        ]
    )
    from poslens.study.claims.c4_compare import label_cases

    attribution = pd.DataFrame(
        [
            dict(model="m", variant="base", intervention=edit, calibration_size=n, metric="reduction_ge2", query_window="all")
            | dict(value=v, ci_low=lo, ci_high=hi)
            for edit, n, v, lo, hi in [
                ("relativize:all", 16, 0.05, -0.02, 0.08),
                ("relativize:all", 8, 0.07, -0.05, 0.15),
                ("relativize:key0", 16, 0.02, -0.05, 0.09),
                ("placebo:all", 16, 0.01, -0.02, 0.04),
            ]
        ]
    )
    return evaluate(
        leakage,
        ablation,
        _swap(0.25, 0.2, 0.35, "bos:mean"),
        label_cases(Result(compare, {"cases": cases})),
        fingerprint,
        attribution,
        _path(),
        split_table(),
        c4_query_window="all",
    )


# what a parser of rule texts would have read: numbers, names and bands that are not the inputs
REWORDED = (
    "reworded: target 0.9 - band 0.05; inputs: reduction = 9 [8, 10]; c_res (ntk) = 1 [1, 1]; "
    "c_res (standard) = 0 [0, 0]; readout_chance = 0.5; metric 'entropy', layer 7, window 'early'"
)


def test_rewording_a_rule_changes_no_sentence_figure_or_summary_table(tmp_path):
    import importlib.util
    from pathlib import Path

    claims = _all_claims()
    assert set(claims.table["verdict"]) - {"not measured"} and "not measured" not in set(claims.table["verdict"])
    reworded = Claims(claims.table.assign(rule=REWORDED), claims.inputs.assign(where=REWORDED))
    before, after = summary_rows(claims), summary_rows(reworded)
    assert len(before) == len(after) == 9  # C4 has two cases
    for a, b in zip(before, after, strict=False):
        assert (a["claim"], a["case"], a["verdict"], a["label"], a["figure"], a["sentence"]) == (
            b["claim"],
            b["case"],
            b["verdict"],
            b["label"],
            b["figure"],
            b["sentence"],
        )
        assert all(block["rule"] == REWORDED for block in b["rules"])  # shown as it is, never read
    c5 = next(r for r in after if r["claim"] == "C5")
    assert "(bos:mean)" in c5["sentence"] and "wholly below 30%" not in c5["sentence"]  # inconclusive: reaches into the band
    assert [r["name"] for r in metric_names(reworded)] == [r["name"] for r in metric_names(claims)]
    # the README table and the findings page, from the files a study writes
    spec = importlib.util.spec_from_file_location("make_findings", Path(__file__).parents[3] / "docs" / "make_findings.py")
    findings = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(findings)
    tables = {}
    for name, c in (("plain", claims), ("reworded", reworded)):
        folder = tmp_path / name
        folder.mkdir()
        c.table.to_csv(folder / "claims.csv", index=False)
        c.inputs.to_csv(folder / "claim_inputs.csv", index=False)
        section = findings.claims_section(folder)
        tables[name] = (findings.claims_summary(folder), section.split("<details>")[0])
    assert tables["plain"] == tables["reworded"]
    summary = tables["plain"][0]
    assert "| **C3** | the residual source runs through position 0 and sink-reading heads | m | `resid_probe_r2_ge2`" in summary
    assert "`c_res`, layers 1..3, all queries: 0.02000" in summary  # the depth slope of g: its headline, with the layers it spans


def test_the_sentence_reads_the_inputs_table():
    # a changed input changes the sentence: the numbers come from the inputs, by name
    claims = _all_claims()
    inputs = claims.inputs.copy()
    at = (inputs["claim"] == "C5") & (inputs["name"] == "target")
    inputs.loc[at, "value"] = 0.25
    c5 = next(r for r in summary_rows(Claims(claims.table, inputs)) if r["claim"] == "C5")
    assert c5["sentence"].endswith("the interval holds 25%.")
    inputs = claims.inputs.copy()
    inputs.loc[(inputs["claim"] == "C4") & (inputs["name"] == "c_res (standard)"), ["ci_low", "ci_high"]] = [0.0111, 0.02]
    ntk = next(r for r in summary_rows(Claims(claims.table, inputs)) if r["claim"] == "C4")
    assert "wholly below the standard's 0.01 [0.0111, 0.02]" in ntk["sentence"]


def test_c7_and_c3s_causal_figure_in_words():
    rows = {r["claim"]: r for r in summary_rows(_all_claims())}
    c7 = rows["C7"]
    assert c7["verdict"] == "not supported" and c7["figure"] == "0.05 [−0.02, 0.08]"
    assert c7["sentence"] == (
        "Against the claim that later layers' absolute position depends on earlier layers' absolute logits: relativizing every "
        "layer's absolute logits in every column lowers mean L(log a) over layers ≥ 2 (r = 5% [−2%, 8%], interval within ±10%: "
        "no effect of that size), against 1% [−2%, 4%] for a purely relative placebo of matched norm; fitted on less "
        "calibration data: 7% [−5%, 15%]."
    )
    c3 = rows["C3"]
    assert c3["verdict"] == "supported"
    assert c3["sentence"] == (
        "The residual source runs through position 0 and sink-reading heads: freezing the RoPE phase of every key-0 logit "
        "(at offset D = 64, in every layer) changes how much absolute position a probe reads from the residual stream over "
        "layers ≥ 2 by a fall of 0.1 [0.06, 0.14] R² (above 0), and by 0.05 [0.02, 0.08] more than freezing key 1 instead, "
        "the sham (above 0); beside it, on the same readout: the mask's channel through the sink (ablation − mask-only profile) "
        "−0.2 [−0.3, −0.1], the rest at key 0 (mask-only profile − unedited) −0.05 [−0.08, −0.02]; ablating the sink path of "
        "the sink-reading heads removes 45% [30%, 60%] of C_res at early queries (reported: the ablation removes the mask's "
        "dilution and key 0's phase together); relativizing key 0 in every layer lowers mean L(log a) over layers ≥ 2 "
        "(r = 2% [−5%, 9%], interval reaching 0; reported)."
    )
    # an edit that raised the figure is said to raise it, and an interval wholly below −10% is named as such (C7 is two-sided)
    claims = _all_claims()
    inputs = claims.inputs.copy()
    inputs.loc[(inputs["claim"] == "C7") & (inputs["name"] == "r (all)"), ["value", "ci_low", "ci_high"]] = [-0.9, -1.2, -0.6]
    c7 = next(r for r in summary_rows(Claims(claims.table, inputs)) if r["claim"] == "C7")
    assert (
        "relativizing every layer's absolute logits in every column raises mean L(log a) over layers ≥ 2 (r = −90% "
        "[−120%, −60%], interval wholly below −10%: the edit raised it, so the earlier layers' absolute logits counteract "
        "position)"
    ) in c7["sentence"]


def test_c4_by_differences_in_words():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2]))
    from test_claims import RECORDED, comparison_rows, frame, row

    from poslens.study.claims.c4_compare import label_cases

    every = frame(*[row("c_res", 0.01, 0.0, 0.02, model=c["model"], variant=c["variant"]) for c in RECORDED])
    labelled = label_cases(Result(every, {"cases": RECORDED}))
    claims = evaluate(comparison=labelled, claims=["C4"], c4_comparisons=comparison_rows(ntk=(-0.001, -0.003, 0.001)), c4_query_window="all")
    rows = {r["case"]: r for r in summary_rows(claims)}
    assert set(rows) == {"smollm2-135m (ntk:4)", "smollm2-135m (window:64)", "gemma3-270m", "smollm2-135m, ntk cases"}
    ntk = rows["smollm2-135m (ntk:4)"]
    assert ntk["verdict"] == "inconclusive" and ntk["figure"] == "−0.001 [−0.003, 0.001]"
    assert ntk["sentence"] == (
        "Undecided whether NTK suppresses, sliding window accumulates, standard in between: the ntk case: "
        "c_res (ntk:4 − base) is −0.001 [−0.003, 0.001] (undecided; the data could detect 0.0031)."
    )
    window = rows["smollm2-135m (window:64)"]["sentence"]
    assert "c_res_depth_slope (window:64 − base) is 0.01 [0.005, 0.015] (as claimed; the data could detect 0.0031)" in window


def test_the_findings_page_has_a_paragraph_per_claim_read_from_the_tables(tmp_path):
    """docs/make_findings.py's paragraphs: one per claim, in order, the report's sentences and what the figures could
    not decide, with the figures of the inputs table (a changed input changes the paragraph)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("make_findings", Path(__file__).parents[3] / "docs" / "make_findings.py")
    findings = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(findings)
    claims = _all_claims()
    claims.table.to_csv(tmp_path / "claims.csv", index=False)
    claims.inputs.to_csv(tmp_path / "claim_inputs.csv", index=False)
    run = {"settings": {"model": "m", "n_seqs": 4, "seq_len": 8}}
    paragraphs = [line for line in findings.decided_section(tmp_path, {}, run).splitlines() if line.startswith("**C")]
    assert [p.split(":")[0] for p in paragraphs] == ["**C1", "**C2", "**C3", "**C4", "**C5", "**C6", "**C7", "**C8"]
    c7 = paragraphs[-2]
    assert c7.startswith("**C7: not supported.** Against the claim that later layers' absolute position depends")
    assert "(r = 5% [−2%, 8%], interval within ±10%: no effect of that size)" in c7
    assert "What the data cannot tell apart: later layers that rebuild absolute position" in c7
    assert "counts an r wholly below −10%" not in c7
    c3 = paragraphs[2]
    assert "What the freeze isolates: the position that reaches the residual stream through the RoPE phase" in c3
    assert "(the mask's channel through the sink moved the probe by −0.2000 [−0.3000, −0.1000])" in c3
    assert "m, with 4-bit quantized weights, on 4 sequences × 8 tokens" in paragraphs[0]
    inputs = claims.inputs.copy()
    inputs.loc[(inputs["claim"] == "C7") & (inputs["name"] == "r (all)"), ["value", "ci_low", "ci_high"]] = [-0.5, -0.8, -0.2]
    Claims(claims.table, inputs).inputs.to_csv(tmp_path / "claim_inputs.csv", index=False)
    c7 = [line for line in findings.decided_section(tmp_path, {}, run).splitlines() if line.startswith("**C7")][0]
    assert "(r = −50% [−80%, −20%], interval wholly below −10%: the edit raised it, so the earlier layers' absolute" in c7
    assert "The rule is two-sided: an r wholly below −10% says that removing the earlier layers' absolute logits added" in c7


def test_a_claim_without_a_reading_is_an_error_not_a_silent_headline():
    # issue 38: the missing branch used to raise KeyError, which the sentence took for a missing input and hid
    claims = _all_claims()
    table, inputs = claims.table.copy(), claims.inputs.copy()
    table.loc[table["claim"] == "C1", "claim"] = "C9"
    inputs.loc[inputs["claim"] == "C1", "claim"] = "C9"
    with pytest.raises(NotImplementedError, match="no reading for claim 'C9'"):
        summary_rows(Claims(table, inputs))


def test_every_claim_has_a_reading_and_a_missing_input_still_falls_back_to_the_headline():
    from poslens.study.claims import STATEMENTS
    from poslens.study.claims.text import _reading

    for claim in STATEMENTS:  # a branch exists: with no inputs it fails on the first input it quotes, a KeyError
        with pytest.raises(KeyError):
            record = dict(case="m", figure_name="absent", own_verdict="supported", verdict="supported")
            _reading(claim, {}, pd.DataFrame(columns=["name", "metric", "intervention", "role"]), [record])
    claims = _all_claims()
    inputs = claims.inputs[~((claims.inputs["claim"] == "C1") & (claims.inputs["name"] == "probe_r2"))]
    (c1,) = [r for r in summary_rows(Claims(claims.table, inputs)) if r["claim"] == "C1"]
    assert c1["sentence"].endswith(f": {c1['label']} {c1['figure']}.".replace(":  ", ": "))
