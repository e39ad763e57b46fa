"""Per-head answers with intervals: ``Result.heads(..., intervals=True)``, the heads whose interval excludes 0,
per-head reductions and paired differences, the before/after plot, and one default query window.

Checked against the result's own table read row by row (``select``), against the algebra that ties a
reduction to a difference (after − before = −r · before), and against a run compared with itself.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import poslens
from poslens.errors import InputError
from poslens.measurement.table import DEFAULT_QUERY_WINDOW
from poslens.mechanisms.effects import paired_difference, reduction
from poslens.mechanisms.interventions import BosReplacement


@pytest.fixture(scope="module")
def runs(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, position0="bos", seed=4)
    settings = dict(groups=4, early=10, probe=False, progress=False)
    base = poslens.measure(model, corpus, **settings)
    after = poslens.measure(model, corpus, interventions=[BosReplacement("zero")], **settings)
    return base, after


def test_heads_with_intervals_is_the_tables_rows_one_per_head(runs):
    base, _ = runs
    frame = base.heads("c_res", intervals=True)
    assert list(frame.columns) == ["layer", "head", "value", "ci_low", "ci_high"]
    assert frame.attrs["query_window"] == DEFAULT_QUERY_WINDOW == "early" and frame.attrs["metric"] == "c_res"
    n_layers, n_heads = base.sums.n_layers, base.sums.per_group.logit.shape[2]
    assert [(int(r.layer), int(r.head)) for r in frame.itertuples()] == [(l, h) for l in range(n_layers) for h in range(n_heads)]
    for r in frame.itertuples():
        row = base.select("c_res", "early", int(r.layer), int(r.head))
        assert (r.value, r.ci_low, r.ci_high) == tuple(row[["value", "ci_low", "ci_high"]].iloc[0])
    grid = base.heads("c_res")
    np.testing.assert_array_equal(grid.to_numpy().ravel(), frame["value"].to_numpy())
    assert frame.attrs["aggregates"] == grid.attrs["aggregates"]


def test_heads_excluding_zero_lists_exactly_those_heads_ranked(runs):
    base, _ = runs
    frame = base.heads("leakage_pattern", "all", intervals=True)
    listed = base.heads_excluding_zero("leakage_pattern", "all")
    expected = {(int(r.layer), int(r.head)) for r in frame.itertuples() if r.ci_low > 0 or r.ci_high < 0}
    assert expected, "the tiny model has no head whose interval excludes 0: the test would not test"
    assert {(int(r.layer), int(r.head)) for r in listed.itertuples()} == expected
    distance = listed["nearer_end"].abs().to_numpy()
    assert (np.diff(distance) <= 0).all() and listed["rank"].tolist() == list(range(1, len(listed) + 1))
    for r in listed.itertuples():
        assert r.nearer_end == (r.ci_low if r.side == "above 0" else r.ci_high)
        assert (r.side == "above 0") == (r.ci_low > 0)


def test_one_default_query_window_for_summary_heads_and_plots(runs):
    base, _ = runs
    assert base.summary().equals(base.summary("early"))
    assert base.heads("c_res").equals(base.heads("c_res", "early"))
    assert "early queries" in base.plot("heads", metric="c_res").layout.title.text
    assert "early queries" in base.plot("leakage").layout.title.text
    assert "early" in base.plot("sources").layout.yaxis.title.text
    assert "early queries" in base.plot("layers", metric="c_res").layout.title.text.lower()
    # plot("sinks") reads the default window too; the sinks part's sink score (all queries) is one window away
    np.testing.assert_allclose(np.asarray(base.plot("sinks").data[0].z, dtype=float), base.heads("key0_mass", "early").to_numpy())
    np.testing.assert_allclose(np.asarray(base.plot("sinks", "all").data[0].z, dtype=float), base.heads("key0_mass", "all").to_numpy())


def test_per_head_reduction_and_difference_agree_with_the_tables(runs):
    base, after = runs
    per_layer = reduction(base, after)
    per_head = reduction(base, after, per_head=True)
    aggregates = per_head[per_head["head"] == -1].reset_index(drop=True)
    pd.testing.assert_frame_equal(aggregates, per_layer.reset_index(drop=True))  # per_head adds rows, changes none
    assert set(per_head["layer"]) == set(range(1, base.sums.n_layers)) | {-1}  # layer 0 left out
    change = paired_difference(base, after)
    assert set(change["kind"]) == {"difference"} and set(change["reference"]) == {"none"}
    for r in per_head[(per_head["head"] >= 0) & (per_head["layer"] >= 1)].itertuples():
        b = base.value("c_res", "early", int(r.layer), int(r.head))
        a = after.value("c_res", "early", int(r.layer), int(r.head))
        assert r.value == pytest.approx(1 - a / b, rel=1e-9, abs=1e-12)
        d = change[(change["layer"] == r.layer) & (change["head"] == r.head)]["value"].iloc[0]
        assert d == pytest.approx(a - b, rel=1e-9, abs=1e-12) and d == pytest.approx(-r.value * b, rel=1e-9, abs=1e-12)
    heads = poslens.Result(per_head).heads("reduction", intervals=True)
    assert len(heads) == (base.sums.n_layers - 1) * base.sums.per_group.logit.shape[2]


def test_a_run_compared_with_itself_changes_nothing_with_a_zero_interval(runs):
    base, _ = runs
    change = paired_difference(base, base, "leakage_pattern", "all")
    assert np.abs(change[["value", "ci_low", "ci_high"]].to_numpy()).max() == 0.0
    assert poslens.Result(change).heads_excluding_zero("leakage_pattern", "all").empty


def test_before_after_plot_draws_each_run_with_its_intervals(runs):
    base, after = runs
    both = poslens.Result(pd.concat([base.table, after.table], ignore_index=True))
    fig = both.plot("layers", metric="c_res")
    assert [trace.name for trace in fig.data] == [f"{base.meta['model']['model']} (base)", f"{base.meta['model']['model']} (base, bos:zero)"]
    for trace, run in zip(fig.data, (base, after), strict=True):
        rows = run.select("c_res", "early", head=-1)
        rows = rows[rows["layer"] >= 0].sort_values("layer")
        np.testing.assert_allclose(trace.y, rows["value"])
        np.testing.assert_allclose(np.asarray(trace.error_y.array), rows["ci_high"] - rows["value"])
        np.testing.assert_allclose(np.asarray(trace.error_y.arrayminus), rows["value"] - rows["ci_low"])
    differences = poslens.Result(paired_difference(base, after)).plot("layers", metric="c_res")
    assert differences.data[0].name.endswith("bos:zero) − none")
    reductions = poslens.Result(reduction(base, after)).plot("layers", metric="reduction")
    assert list(reductions.data[0].x) == list(range(1, base.sums.n_layers))
    with pytest.raises(ValueError, match=r"plot\('layers'\) needs metric=\.\.\., one with per-layer rows: .*c_res"):
        base.plot("layers")
    with pytest.raises(InputError, match="heads\\(\\) reads one run"):
        both.heads("c_res", intervals=True)
