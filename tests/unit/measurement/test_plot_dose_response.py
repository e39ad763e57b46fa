"""C4's dose-response figure draws the comparison table's paired rows and trend rows, and computes nothing."""

from __future__ import annotations

import pandas as pd
import pytest

from poslens.measurement.intervention_plots import plot_dose_response


def _table() -> pd.DataFrame:
    rows = []
    for variant, value in (("ntk:2", -0.11), ("ntk:8", -0.31), ("ntk:4", -0.23), ("window:32", 0.4), ("window:128", 0.1)):
        for layer in (-1, 0, 3):  # only layer −1 (the mean over layers ≥ 1) is drawn
            v = value if layer == -1 else value + 10
            rows.append(
                dict(
                    variant=variant,
                    metric="c_res",
                    query_window="all",
                    layer=layer,
                    kind="paired",
                    comparison=f"{variant} − base",
                    value=v,
                    ci_low=v - 0.05,
                    ci_high=v + 0.02,
                )
            )
    rows.append(
        dict(variant="ntk", metric="c_res", query_window="all", layer=-1, kind="trend", comparison="slope", value=-0.1234, ci_low=-0.2, ci_high=-0.05)
    )
    rows.append(
        dict(variant="ntk:4", metric="c_res", query_window="early", layer=-1, kind="paired", comparison="x", value=9.0, ci_low=8.0, ci_high=10.0)
    )  # another window: not drawn
    return pd.DataFrame(rows)


def test_the_points_are_the_paired_rows_with_the_base_at_alpha_one():
    fig = plot_dose_response(_table())
    ntk, window = fig.data
    assert list(ntk.x) == [1.0, 2.0, 4.0, 8.0] and list(ntk.y) == [0.0, -0.11, -0.23, -0.31]
    assert list(ntk.error_y.array) == pytest.approx([0.0, 0.02, 0.02, 0.02])
    assert list(ntk.error_y.arrayminus) == pytest.approx([0.0, 0.05, 0.05, 0.05])
    assert list(window.x) == [32.0, 128.0] and list(window.y) == [0.4, 0.1]
    titles = [a.text for a in fig.layout.annotations]
    assert "-0.123 [-0.2, -0.05]" in titles[0] and "no trend" in titles[1]  # the table's trend row, as it holds it


def test_a_table_without_variants_is_refused():
    table = _table()
    with pytest.raises(ValueError, match="no paired ntk: or window: rows for metric 'c_mask'"):
        plot_dose_response(table, metric="c_mask")
