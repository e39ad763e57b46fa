"""The report page from real measurements: escaping of data, and the 4-bit note only for the embedded models.

The fast tests measure a tiny random Llama saved in a folder (a user's own
model: its metadata records ``quantized = None``); the ``embedded`` test
measures the embedded 4-bit smollm2-135m on a few short random sequences.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

import poslens
from poslens.measurement.display import quantized_note
from poslens.measurement.result import Result, concat
from poslens.model.registry import REGISTRY
from poslens.study.claims import STATEMENTS, evaluate
from poslens.study.claims.c1_leakage import claim_c1
from poslens.study.claims.c2_mask import claim_c2
from poslens.study.claims.c4_compare import label_cases
from poslens.study.claims.lookup import figure_row
from poslens.study.claims.rules import INCONCLUSIVE, NOT_MEASURED, NOT_SUPPORTED, SUPPORTED
from poslens.study.claims.table import Claims
from poslens.study.claims.text import summary_rows
from poslens.study.report import build_report
from poslens.testing import save_tiny_model

NOTE = "4-bit quantized"
SCRIPT_NAME = "<script>alert(1)"
SETTINGS = dict(n_seqs=8, seq_len=24, corpus="random", groups=4, early=8, seed=0)


class _Page(HTMLParser):
    """Text of each element of interest: figcaptions, claims-table cells, notes and the settings line."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.texts: dict[str, list[str]] = {"figcaption": [], "td": [], "note": [], "code": []}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in ("meta", "br", "img", "link"):
            self.open.append("note" if dict(attrs).get("class") == "note" else tag)

    def handle_endtag(self, tag: str) -> None:
        name = "note" if tag == "p" and "note" in self.open and "p" not in self.open else tag
        if name in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(name) :]

    def handle_data(self, data: str) -> None:
        for kind in self.texts:
            if kind in self.open:
                self.texts[kind].append(data)


def read_page(path: Path) -> tuple[str, _Page]:
    text = path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    return text, page


def _measure(folder: str | Path) -> Result:
    model = poslens.load_model(folder)
    corpus = poslens.make_corpus(model, "random", n_seqs=SETTINGS["n_seqs"], seq_len=SETTINGS["seq_len"], seed=0)
    return poslens.measure(model, corpus, groups=SETTINGS["groups"], early=SETTINGS["early"], progress=False)


def _claims(result: Result) -> Claims:
    return Claims.from_rows(claim_c1(result) + claim_c2(result))


@pytest.fixture(scope="module")
def user_result(tmp_path_factory) -> Result:
    """A tiny Llama in a folder whose name holds ``<script>``: the model name of every row and of the claims."""
    folder = save_tiny_model(tmp_path_factory.mktemp("user") / SCRIPT_NAME, "llama")
    return _measure(folder)


def test_user_model_is_not_quantized_and_gets_no_note(user_result, tmp_path):
    assert user_result.meta["model"]["quantized"] is None
    path = build_report(
        {"leakage": user_result}, _claims(user_result), {**SETTINGS, "model": user_result.meta["model"]["model"]}, tmp_path / "report.html"
    )
    text, page = read_page(path)
    assert NOTE not in text
    assert page.texts["note"] == []
    # C1 (leakage per head), C2 (sources by layer, all queries), C3 (sources by layer, early queries)
    assert len(page.texts["figcaption"]) == 3 == text.count('class="plotly-graph-div"')


def test_model_name_with_script_is_escaped(user_result, tmp_path):
    name = user_result.meta["model"]["model"]
    assert SCRIPT_NAME in name and (user_result.table["model"] == name).all()
    claims = _claims(user_result)
    claims.table.loc[0, "statement"] = claims.table.loc[0, "rule"] = "<b>bold</b> & <script>alert(2)</script>"
    claims.inputs.loc[0, "name"] = "<i>input</i>"
    path = build_report({"leakage": user_result}, claims, {**SETTINGS, "model": name}, tmp_path / "report.html")
    text, page = read_page(path)
    # the raw strings nowhere in the page (plotly's JSON writes "<" as \u003c), their escaped forms in the table and settings
    assert SCRIPT_NAME not in text and "<script>alert(2)" not in text and "<b>bold</b>" not in text
    assert "&lt;script&gt;alert(1)" in text and "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;script&gt;alert(2)&lt;/script&gt;" in text
    cells = "".join(page.texts["td"])
    assert name in cells and "<b>bold</b> & <script>alert(2)</script>" in cells
    assert "<i>input</i>" not in text and "&lt;i&gt;input&lt;/i&gt; = " in text and "<i>input</i> = " in cells
    assert name in "".join(page.texts["code"])
    # the only scripts are plotly's, trusted: its config and plotly.js once, then one per figure
    assert text.count("window.PlotlyConfig") == 1
    assert text.count("<script") == 2 + text.count('class="plotly-graph-div"')


@pytest.fixture(scope="module")
def embedded_result(smollm2) -> Result:
    corpus = poslens.make_corpus(smollm2, "random", n_seqs=SETTINGS["n_seqs"], seq_len=SETTINGS["seq_len"], seed=0)
    return poslens.measure(smollm2, corpus, groups=SETTINGS["groups"], early=SETTINGS["early"], progress=False)


def test_embedded_model_gets_the_note(embedded_result, tmp_path):
    assert embedded_result.meta["model"]["quantized"] == REGISTRY["smollm2-135m"].quantization
    path = build_report({"leakage": embedded_result}, _claims(embedded_result), {**SETTINGS, "model": "smollm2-135m"}, tmp_path / "report.html")
    text, page = read_page(path)
    expected = "Figures from smollm2-135m come from 4-bit quantized (GGUF) weights dequantized to float32."
    assert page.texts["note"] == [expected]
    assert all(caption.endswith(expected) for caption in page.texts["figcaption"]) and len(page.texts["figcaption"]) == 3


def test_note_names_only_the_quantized_models_of_a_mixed_part(user_result, embedded_result, tmp_path):
    """A stacked part (as the architecture comparison is) of a user model and an embedded one: the note names only the latter."""
    mixed = concat([user_result, embedded_result])
    assert quantized_note(mixed) == "Figures from smollm2-135m come from 4-bit quantized (GGUF) weights dequantized to float32."
    path = build_report({"leakage": user_result, "compare": mixed}, _claims(user_result), SETTINGS, tmp_path / "report.html")
    _, page = read_page(path)
    *leakage_captions, compare_caption = page.texts["figcaption"]  # in claim order: C1–C3 from leakage, then C4
    assert NOTE in compare_caption and len(leakage_captions) == 3 and not any(NOTE in c for c in leakage_captions)
    assert page.texts["note"] == [quantized_note(mixed)]


class _Summary(HTMLParser):
    """The verdict summary's rows: for each ``tr.verdict-row``, its cells' text, badge text, sentence and disclosure text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.where: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        cls = dict(attrs).get("class") or ""
        if tag == "tr" and cls == "verdict-row":
            self.rows.append(dict(cells="", badge="", badge_class="", sentence="", details=""))
            self.where = ["row"]
        elif self.where and tag in ("span", "p", "details"):
            kind = {"span": "badge", "p": "sentence", "details": "details"}[tag]
            if tag == "span" and cls.startswith("badge"):
                self.rows[-1]["badge_class"] = cls
            if (tag == "span" and cls.startswith("badge")) or (tag == "p" and cls == "sentence") or tag == "details":
                self.where.append(kind)

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self.where = []
        elif self.where and len(self.where) > 1 and {"span": "badge", "p": "sentence", "details": "details"}.get(tag) == self.where[-1]:
            self.where.pop()

    def handle_data(self, data: str) -> None:
        if self.where:
            self.rows[-1]["cells"] += data
            for kind in set(self.where) - {"row"}:
                self.rows[-1][kind] += data


def _summary(text: str) -> list[dict[str, str]]:
    parser = _Summary()
    parser.feed(text)
    return parser.rows


def test_the_page_opens_with_a_verdict_summary_one_row_per_claim_and_case(user_result, tmp_path):
    """C1 and C2 of the tiny model, C3–C8 not measured: eight summary rows, each a badge, a sentence and its rule folded."""
    claims = evaluate(leakage=user_result)
    path = build_report({"leakage": user_result}, claims, SETTINGS, tmp_path / "report.html")
    text = path.read_text(encoding="utf-8")
    # the summary comes before the first figure and before the long claims table
    assert text.index('<table class="summary">') < text.index('class="plotly-graph-div"') < text.index('<table class="claims">')
    rows = _summary(text)
    assert [r["cells"].split()[0] for r in rows] == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8"]
    table, inputs = claims.table, claims.inputs
    for row, claim in zip(rows, ["C1", "C2"], strict=False):
        verdict = table.loc[table["claim"] == claim, "verdict"].unique().item()
        assert row["badge"] == verdict and row["badge_class"] == f"badge {verdict.replace(' ', '-')}"
        # the disclosure holds the rule as claims.csv words it, and every input of claim_inputs.csv with its role
        rule = table.loc[table["claim"] == claim, "rule"].iloc[0]
        assert rule in row["details"]
        mine = inputs[inputs["key"] == f"{claim}.1"]
        assert len(mine) >= 2
        for _, i in mine.iterrows():
            number = f"{i['value']:.4g}".replace("-", "−")
            assert f"{i['name']} = {number}" in row["details"] and f"({i['role']})" in row["details"]
        headline = mine[mine["role"] == "headline"].iloc[0]
        assert f"{headline['value']:.4g}".replace("-", "−") in row["cells"]
        assert row["sentence"].startswith(
            {
                SUPPORTED: STATEMENTS[claim][:1].upper() + STATEMENTS[claim][1:],
                NOT_SUPPORTED: "Against the claim that",
                INCONCLUSIVE: "Undecided whether",
            }[verdict]
        )
    for row in rows[2:]:
        assert row["badge"] == NOT_MEASURED and row["badge_class"] == "badge not-measured"
        assert "not measured, the parts it reads are not in this report" in row["sentence"]
        assert f"--out {tmp_path}" in row["details"]


def test_summary_groups_c4_by_case_and_c5_by_replacement_with_the_joint_verdict():
    """Hand-made tables with known verdicts: a C4 case's comparison and depth slope form one row, whose verdict is their joint."""
    compare = [
        figure_row("c_res", v, lo, hi, model=m, variant=var, query_window="all", layer=layer)
        for m, var, layer, v, lo, hi in [
            ("smollm2-135m", "base", -1, 0.010, 0.008, 0.012),
            ("smollm2-135m", "ntk:4", -1, 0.002, 0.001, 0.003),
            ("gemma3-270m", "base", -1, 0.030, 0.020, 0.040),
            ("gemma3-270m", "base", 1, 0.05, 0.04, 0.06),
            ("gemma3-270m", "base", 2, 0.03, 0.02, 0.04),
            ("gemma3-270m", "base", 3, 0.01, 0.0, 0.02),
        ]
    ]
    swaps = [
        figure_row("reduction", v, lo, hi, intervention=k, query_window="early")
        for k, v, lo, hi in [("bos:mean", 0.4, 0.35, 0.45), ("bos:zero", 0.1, 0.05, 0.15)]
    ]
    cases = [
        dict(model="smollm2-135m", variant="base", case="standard"),
        dict(model="smollm2-135m", variant="ntk:4", case="ntk"),
        dict(model="gemma3-270m", variant="base", case="sliding"),
    ]
    claims = evaluate(comparison=label_cases(Result(pd.DataFrame(compare), {"cases": cases})), bos_swap=pd.DataFrame(swaps), claims=["C4", "C5"])
    rows = summary_rows(claims)
    assert [(r["claim"], r["case"], r["verdict"]) for r in rows] == [
        ("C4", "smollm2-135m (ntk:4)", SUPPORTED),
        ("C4", "gemma3-270m", NOT_SUPPORTED),  # comparisons supported, depth slope negative: jointly not supported
        ("C5", "m, bos:mean", SUPPORTED),
        ("C5", "m, bos:zero", NOT_SUPPORTED),
    ]
    ntk, gemma, mean, zero = rows
    assert ntk["sentence"] == (
        "NTK suppresses, sliding window accumulates, standard in between: the ntk case has "
        "C_res 0.002 [0.001, 0.003], wholly below the standard's 0.01 [0.008, 0.012]."
    )
    assert gemma["sentence"].startswith("Against the claim that NTK suppresses") and "wholly above the standard's" in gemma["sentence"]
    assert "changes by −0.02 [" in gemma["sentence"] and len(gemma["rules"]) == 2  # comparison rule and slope rule
    assert mean["sentence"].endswith("removes 40% [35%, 45%] of C_res at early queries; the interval holds 40%.")
    assert zero["sentence"].endswith("removes 10% [5%, 15%] of C_res at early queries, wholly below 30%.")
    assert [r["figure"] for r in rows] == ["0.002 [0.001, 0.003]", "0.03 [0.02, 0.04]", "0.4 [0.35, 0.45]", "0.1 [0.05, 0.15]"]
