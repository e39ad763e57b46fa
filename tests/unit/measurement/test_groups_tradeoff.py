"""benchmarks/groups_tradeoff.py: it runs the G it names, and the widths it prints are the result's own intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scripts import load_script

import poslens
from poslens.measurement.arguments import SmallGroupsWarning


@pytest.fixture(scope="module")
def groups_tradeoff():
    return load_script("benchmarks/groups_tradeoff.py")


def test_each_g_is_timed_in_each_round_against_that_rounds_plain_forward(groups_tradeoff, tiny_llama_dir):
    model = poslens.load_model(str(tiny_llama_dir))
    with pytest.warns(SmallGroupsWarning):  # 8 sequences in 8 groups: one each, which measure warns about
        rows = groups_tradeoff.tradeoff(model, (8, 48), [2, 8], rounds=2, repeats=1, log=lambda line: None)
    assert [(row["round"], row["groups"]) for row in rows] == [(0, None), (0, 2), (0, 8), (1, None), (1, 8), (1, 2)]
    assert all(row["seconds"] > 0 for row in rows)
    plain = {row["round"]: row["seconds"] for row in rows if row["groups"] is None}
    by_hand = [row["seconds"] / plain[row["round"]] for row in rows if row["groups"] == 8]
    assert groups_tradeoff.ratios(rows, 8) == pytest.approx(by_hand, rel=0, abs=0)

    # The widths are those of a measure at that G, read from its table by a naive loop.
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=48, position0="bos", seed=0)
    table = poslens.measure(model, corpus, groups=2, progress=False).table
    for metric in groups_tradeoff.WIDTH_METRICS:
        widths = [
            row.ci_high - row.ci_low
            for row in table.itertuples()
            if row.metric == metric and row.query_window == "early" and row.head == -1 and row.layer >= 0 and np.isfinite(row.ci_high - row.ci_low)
        ]
        assert rows[1]["widths"][metric] == pytest.approx(float(np.median(widths)), rel=1e-12)
    # Fewer groups, wider intervals on the same sequences (t quantile with G − 1 degrees of freedom: 12.7 at G = 2, 2.4 at G = 8).
    assert rows[1]["widths"]["c_mask"] > rows[2]["widths"]["c_mask"]


def test_the_widths_skip_other_windows_heads_and_the_all_layers_row(groups_tradeoff):
    rows = [
        dict(layer=0, head=-1, query_window="early", metric="c_res", ci_low=0.0, ci_high=1.0),
        dict(layer=1, head=-1, query_window="early", metric="c_res", ci_low=0.5, ci_high=3.5),
        dict(layer=-1, head=-1, query_window="early", metric="c_res", ci_low=0.0, ci_high=100.0),  # all layers
        dict(layer=0, head=2, query_window="early", metric="c_res", ci_low=0.0, ci_high=100.0),  # one head
        dict(layer=0, head=-1, query_window="all", metric="c_res", ci_low=0.0, ci_high=100.0),  # other window
        dict(layer=2, head=-1, query_window="early", metric="c_res", ci_low=np.nan, ci_high=np.nan),  # no interval
    ]
    widths = groups_tradeoff.interval_widths(pd.DataFrame(rows), metrics=("c_res", "c_mask"))
    assert widths["c_res"] == 2.0 and np.isnan(widths["c_mask"])
