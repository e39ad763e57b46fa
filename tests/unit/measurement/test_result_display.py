"""How a Result shows itself in a notebook: the rich HTML display, the one-line repr, and Result.plot.

Everything runs on a real measurement of a tiny random Llama saved to a folder
named with HTML markup, so escaping is tested on a model name that needs it.
"""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go
import pytest

import poslens
from poslens.measurement.display import quantized_note
from poslens.measurement.result import Result
from poslens.mechanisms.sinks import sink_table
from poslens.testing import save_tiny_model


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Result:
    folder = save_tiny_model(tmp_path_factory.mktemp("models") / "<b>my-model</b>", "llama")
    model = poslens.load_model(folder)
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24)
    return poslens.measure(model, corpus, groups=4, progress=False)


def _interval(rows: pd.DataFrame) -> str:
    row = rows.iloc[0]
    return f"{row['value']:.4f} [{row['ci_low']:.4f}, {row['ci_high']:.4f}]"


def test_html_shows_the_early_summary_with_intervals(result: Result) -> None:
    page = result._repr_html_()
    for metric in ("c_res", "c_mask", "leakage_pattern"):
        for layer in (0, 2, -1):
            assert _interval(result.select(metric, "early", layer=layer, head=-1)) in page, (metric, layer)
        assert f"<th>{metric}</th>" in page
    assert "early queries" in page and "mean of layers ≥ 1" in page
    assert page.count("<table>") == 2  # the summary and the provenance


def test_html_shows_model_and_provenance_escaped(result: Result) -> None:
    page = result._repr_html_()
    name = result.meta["model"]["model"]
    assert "<b>my-model</b>" in name
    assert "<b>" not in page and "</b>" not in page, "model text reached the page unescaped"
    assert "&lt;b&gt;my-model&lt;/b&gt;" in page
    assert "variant base" in page
    for text in (
        "poslens",
        result.meta["poslens_version"],
        result.meta["created"],
        "random, seed 0",
        "8 × 24 tokens",
        'groups (jackknife)</th><td style="text-align:left">4',
        "interventions",
        "none",
    ):
        assert text in page, text


def test_no_quantized_note_for_a_user_model(result: Result) -> None:
    assert quantized_note(result) == ""
    assert "4-bit" not in result._repr_html_()


def test_quantized_note_for_an_embedded_model(result: Result) -> None:
    meta = {**result.meta, "model": {**result.meta["model"], "model": "smollm2-135m", "quantized": "GGUF Q4_1 (4-bit)"}}
    page = Result(result.table, meta)._repr_html_()
    assert "Figures from smollm2-135m come from 4-bit quantized (GGUF) weights dequantized to float32." in page


def test_html_of_a_table_without_summary_metrics(result: Result) -> None:
    sinks = Result(sink_table(result), dict(result.meta))
    page = sinks._repr_html_()
    assert "no per-layer summary" in page and "sink_score" in page


def test_repr_is_one_line(result: Result) -> None:
    text = repr(result)
    assert "\n" not in text and len(text) < 300
    assert text.startswith("Result(model ") and f"{len(result.table)} rows" in text and "windows: early, all" in text


def test_plot_sources(result: Result) -> None:
    fig = result.plot("sources")
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == ["C_res (residual stream)", "C_mask (causal mask)"]
    c_res = result.select("c_res", "early", head=-1)
    c_res = c_res[c_res["layer"] >= 0].sort_values("layer")
    assert list(fig.data[0].x) == c_res["layer"].tolist()
    assert list(fig.data[0].y) == pytest.approx(c_res["value"].tolist())
    assert list(fig.data[0].error_y.array) == pytest.approx((c_res["ci_high"] - c_res["value"]).tolist())
    assert "all queries" in result.plot("sources", "all").layout.yaxis.title.text


def test_plot_leakage(result: Result) -> None:
    fig = result.plot("leakage")
    (heatmap,) = fig.data
    assert heatmap.type == "heatmap"
    n_layers, n_heads = result.meta["model"]["n_layers"], result.meta["model"]["n_heads"]
    assert len(heatmap.z) == n_layers and len(heatmap.z[0]) == n_heads
    assert heatmap.z[1][2] == pytest.approx(result.value("leakage_pattern", "all", layer=1, head=2))


def test_plot_sinks_from_a_measurement_and_from_a_sinks_part(result: Result) -> None:
    (heatmap,) = result.plot("sinks").data
    assert heatmap.type == "heatmap"
    assert heatmap.z[0][1] == pytest.approx(result.value("key0_mass", "all", layer=0, head=1))
    fig = Result(sink_table(result), dict(result.meta)).plot("sinks")
    assert [t.type for t in fig.data] == ["heatmap", "bar"]
    assert len(fig.data[1].x) == result.meta["model"]["n_layers"]


def test_plot_unknown_kind_names_the_kinds(result: Result) -> None:
    expected = "unknown plot kind 'source' (did you mean 'sources'?); kinds: sources, leakage, heads, layers, sinks"
    with pytest.raises(ValueError, match=re.escape(expected)):
        result.plot("source")


def test_plot_names_the_missing_metric(result: Result) -> None:
    sinks = Result(sink_table(result), dict(result.meta))
    lacks = r"plot\('sources'\) needs metrics 'c_res', 'c_mask', which this table lacks; it has: sink_heads, sink_score"
    with pytest.raises(ValueError, match=lacks):
        sinks.plot("sources")
    with pytest.raises(ValueError, match=r"plot\('leakage'\) needs metric 'leakage_pattern'"):
        sinks.plot("leakage")
    only_c_res = Result(result.table[result.table["metric"] == "c_res"])
    with pytest.raises(ValueError, match=r"needs metric 'c_mask', which this table lacks; it has: c_res"):
        only_c_res.plot("sources")
    with pytest.raises(ValueError, match=r"plot\('sinks'\) needs metric 'sink_score' \(a sinks part\) or 'key0_mass'"):
        only_c_res.plot("sinks")
    with pytest.raises(ValueError, match="unknown query window 'late'"):
        result.plot("sources", "late")


def test_plot_refuses_several_runs(result: Result) -> None:
    other = result.table.assign(intervention="bos-replacement")
    both = Result(pd.concat([result.table, other], ignore_index=True))
    with pytest.raises(ValueError, match="draws one run; this table holds 2"):
        both.plot("leakage")
    with pytest.raises(ValueError, match="draws one intervention"):
        both.plot("sources")
