"""The attribution figures draw the rows they are given, and only those: the right modes, size, window and intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from poslens.measurement.intervention_plots import plot_attribution, plot_loss_change

LAYERS = (0, 1, 2, 3)


def _table() -> pd.DataFrame:
    """A hand-made attribution table: each (mode, size, window, kind) has its own recognisable values."""
    rows = []
    runs = [
        ("none", 0),
        ("relativize:all", 4),
        ("relativize:all", 8),
        ("relativize:key0", 4),
        ("relativize:key0", 8),
        ("relativize:all-but-key0", 8),
        ("placebo:all", 8),
    ]
    for k, (edit, size) in enumerate(runs):
        for window, shift in (("all", 0.0), ("early", 100.0)):
            for kind in ("level", "difference"):
                for metric in ("leakage_pattern", "c_res", "c_mask"):
                    for layer in (-1, *LAYERS):
                        value = (
                            10 * k
                            + layer
                            + shift
                            + size / 1000
                            + (0.5 if kind == "difference" else 0.0)
                            + {"leakage_pattern": 0.0, "c_res": 0.01, "c_mask": 0.02}[metric]
                        )
                        rows.append(
                            dict(
                                model="m",
                                variant="base",
                                intervention=edit,
                                calibration_size=size,
                                metric=metric,
                                query_window=window,
                                layer=layer,
                                kind=kind,
                                value=value,
                                ci_low=value - 0.1 - layer / 100,
                                ci_high=value + 0.2,
                            )
                        )
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # the figure must not rely on the rows' order


def test_one_trace_per_mode_at_the_largest_size_with_the_unedited_curve_first_and_the_placebo_last():
    fig = plot_attribution(_table())
    assert [t.name for t in fig.data] == [
        "unedited",
        "relativized: every column (n = 8)",
        "relativized: key 0 only (n = 8)",
        "relativized: every column but key 0 (n = 8)",
        "placebo: relative, matched norm (n = 8)",
    ]
    # values: layer 0..3 in order, L level, window all, size 8 (k = index of the run in _table)
    for trace, k, size in zip(fig.data, (0, 2, 4, 5, 6), (0, 8, 8, 8, 8), strict=False):
        assert list(trace.x) == list(LAYERS)
        np.testing.assert_allclose(trace.y, [10 * k + layer + size / 1000 for layer in LAYERS])
        np.testing.assert_allclose(trace.error_y.array, [0.2] * 4)
        np.testing.assert_allclose(trace.error_y.arrayminus, [0.1 + layer / 100 for layer in LAYERS])
    subtitle = fig.layout.title.subtitle.text
    assert "layers < l relativized" in subtitle and "layer 0: the negative control" in subtitle and "m (base)" in subtitle


def test_the_early_window_draws_the_early_rows():
    fig = plot_attribution(_table(), query_window="early")
    np.testing.assert_allclose(fig.data[0].y, [100.0 + layer for layer in LAYERS])
    assert "early queries" in fig.layout.title.text


def test_a_table_without_level_rows_or_with_two_runs_is_refused():
    table = _table()
    with pytest.raises(ValueError, match="no per-layer leakage_pattern level rows"):
        plot_attribution(table[table["kind"] == "difference"])
    with pytest.raises(ValueError, match="no per-layer leakage_pattern level rows"):
        plot_attribution(table, query_window="late")
    two = pd.concat([table, table.assign(variant="ntk:4")])
    with pytest.raises(ValueError, match="draws one run"):
        plot_attribution(two)


def test_loss_change_bars_per_bin_and_edit():
    rows = []
    for e, edit in enumerate(("relativize:all", "relativize:key0", "placebo:all")):
        for c, low, high in ((1, 8, 16), (-1, 1, 16), (0, 1, 8)):
            value = e + c / 10
            rows.append(
                dict(
                    model="m",
                    variant="base",
                    intervention=edit,
                    query_bin=c,
                    query_low=low,
                    query_high=high,
                    metric="loss_change",
                    value=value,
                    ci_low=value - 0.05,
                    ci_high=value + 0.07,
                )
            )
    others = _table().assign(query_bin=-1, query_low=1, query_high=16)  # the part's other rows: left out
    fig = plot_loss_change(pd.concat([others, pd.DataFrame(rows)]))
    assert [t.name for t in fig.data] == ["relativize:all", "relativize:key0", "placebo:all"]
    for e, trace in enumerate(fig.data):
        assert list(trace.x) == ["all ≥ 1", "[1, 8)", "[8, 16)"]
        np.testing.assert_allclose(trace.y, [e - 0.1, e, e + 0.1])
        np.testing.assert_allclose(trace.error_y.array, [0.07] * 3)
        np.testing.assert_allclose(trace.error_y.arrayminus, [0.05] * 3)
    with pytest.raises(ValueError, match="no loss_change rows"):
        plot_loss_change(pd.DataFrame(rows).iloc[0:0])
