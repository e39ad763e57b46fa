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
from poslens.measurement.result import Result, concat
from poslens.model.registry import REGISTRY
from poslens.model.tiny import save_tiny_model
from poslens.study.claims import CLAIM_COLUMNS, claim_c1, claim_c2
from poslens.study.report import build_report, quantized_note

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
            del self.open[len(self.open) - 1 - self.open[::-1].index(name):]

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


def _claims(result: Result) -> pd.DataFrame:
    return pd.DataFrame(claim_c1(result) + claim_c2(result), columns=CLAIM_COLUMNS)


@pytest.fixture(scope="module")
def user_result(tmp_path_factory) -> Result:
    """A tiny Llama in a folder whose name holds ``<script>``: the model name of every row and of the claims."""
    folder = save_tiny_model(tmp_path_factory.mktemp("user") / SCRIPT_NAME, "llama")
    return _measure(folder)


def test_user_model_is_not_quantized_and_gets_no_note(user_result, tmp_path):
    assert user_result.meta["model"]["quantized"] is None
    path = build_report({"leakage": user_result}, _claims(user_result), {**SETTINGS, "model": user_result.meta["model"]["model"]},
                        tmp_path / "report.html")
    text, page = read_page(path)
    assert NOTE not in text
    assert page.texts["note"] == []
    assert len(page.texts["figcaption"]) == 2 == text.count('class="plotly-graph-div"')


def test_model_name_with_script_is_escaped(user_result, tmp_path):
    name = user_result.meta["model"]["model"]
    assert SCRIPT_NAME in name and (user_result.table["model"] == name).all()
    claims = _claims(user_result)
    claims.loc[0, "statement"] = claims.loc[0, "rule"] = "<b>bold</b> & <script>alert(2)</script>"
    path = build_report({"leakage": user_result}, claims, {**SETTINGS, "model": name}, tmp_path / "report.html")
    text, page = read_page(path)
    # the raw strings nowhere in the page (plotly's JSON writes "<" as \u003c), their escaped forms in the table and settings
    assert SCRIPT_NAME not in text and "<script>alert(2)" not in text and "<b>bold</b>" not in text
    assert "&lt;script&gt;alert(1)" in text and "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;script&gt;alert(2)&lt;/script&gt;" in text
    cells = "".join(page.texts["td"])
    assert name in cells and "<b>bold</b> & <script>alert(2)</script>" in cells
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
    path = build_report({"leakage": embedded_result}, _claims(embedded_result), {**SETTINGS, "model": "smollm2-135m"},
                        tmp_path / "report.html")
    text, page = read_page(path)
    expected = "Figures from smollm2-135m come from 4-bit quantized (GGUF) weights dequantized to float32."
    assert page.texts["note"] == [expected]
    assert all(caption.endswith(expected) for caption in page.texts["figcaption"]) and len(page.texts["figcaption"]) == 2


def test_note_names_only_the_quantized_models_of_a_mixed_part(user_result, embedded_result, tmp_path):
    """A stacked part (as the architecture comparison is) of a user model and an embedded one: the note names only the latter."""
    mixed = concat([user_result, embedded_result])
    assert quantized_note(mixed) == "Figures from smollm2-135m come from 4-bit quantized (GGUF) weights dequantized to float32."
    path = build_report({"leakage": user_result, "compare": mixed}, _claims(user_result), SETTINGS, tmp_path / "report.html")
    _, page = read_page(path)
    compare_caption, leakage_caption = page.texts["figcaption"]
    assert NOTE in compare_caption and NOTE not in leakage_caption
    assert page.texts["note"] == [quantized_note(mixed)]
