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

from poslens.fit.metric_glossary import GLOSSARY
from poslens.measurement.result import Result
from poslens.study.claims import evaluate, figure_row
from poslens.study.report import _code, build_report, metric_names, summary_rows

SETTINGS = dict(n_seqs=8, seq_len=24, corpus="random", groups=4, early=8, seed=0)


def _swap(value: float, low: float, high: float, kind: str = "bos:zero") -> pd.DataFrame:
    return pd.DataFrame([figure_row("reduction", value, low, high, intervention=kind, query_window="early")])


def _c1(heldout: tuple[float, float, float], probe: tuple[float, float, float]) -> pd.DataFrame:
    return pd.DataFrame([figure_row("leakage_pattern_heldout", *heldout), figure_row("probe_r2", *probe)])


def _sentence(claims: pd.DataFrame, claim: str) -> str:
    (row,) = [r for r in summary_rows(claims) if r["claim"] == claim]
    return row["sentence"]


def test_a_bos_reduction_above_1_reads_as_a_sign_change_not_a_removal():
    sentence = _sentence(evaluate(bos_swap=_swap(3.34, 2.5, 4.2), claims=["C5"]), "C5")
    assert "removes 334%" not in sentence and "removes" not in sentence.split(": ", 1)[1]
    assert "replacing the BOS embedding (bos:zero) changes the sign of C_res at early queries" in sentence
    assert "its reduction is 334% [250%, 420%], above 100%, so C_res after = −2.34 × C_res before" in sentence
    assert "it did more than remove C_res, it reversed it" in sentence
    assert sentence.endswith("; its interval lies wholly above 50%.")  # why C5 is not supported, after the sign change


def test_an_ablation_reduction_above_1_reads_as_a_sign_change():
    leak = pd.DataFrame([figure_row("c_res", 0.01, 0.005, 0.015, query_window="early")])
    ablation = pd.DataFrame([figure_row("reduction", 3.34, 2.5, 4.2, query_window="early", intervention="sink-ablation:0.3")])
    sentence = _sentence(evaluate(leakage=leak, ablation=ablation, claims=["C3"]), "C3")
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
    assert "a negative held-out ΔR² means the query-position terms fitted on the other groups predict the held-out sequences " \
           "worse than the offset alone does: no absolute position is detectable at this size" in sentence
    assert "negative held-out R²" not in sentence


def test_metric_names_come_from_the_glossary():
    claims = evaluate(leakage=_c1((0.05, 0.04, 0.06), (-0.2, -0.6, 0.2)), bos_swap=_swap(3.34, 2.5, 4.2), claims=["C1", "C5"])
    rows = metric_names(claims)
    assert [r["name"] for r in rows] == ["leakage_pattern_heldout", "probe_r2", "reduction"]
    assert all(r["short"] == GLOSSARY[r["name"]].short() and r["sign"] == GLOSSARY[r["name"]].sign for r in rows)
    # a figure's metrics are listed too; a metric whose name is part of a longer one is not
    assert [r["name"] for r in metric_names(claims.iloc[0:0], present=["fingerprint"])] == ["dispersion"]
    only = pd.DataFrame({"rule": ["inputs: c_res_meanfield = 0.1"]})
    assert [r["name"] for r in metric_names(only)] == ["c_res_meanfield"]


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
