"""Per-head answers with their intervals: one row per head, and the heads whose interval excludes 0.

:func:`head_rows` is :meth:`poslens.measurement.result.Result.heads` with
``intervals=True``: the tidy layer × head frame of one metric, each head's value
with its 95% interval. :func:`heads_excluding_zero` keeps the heads whose interval
lies wholly on one side of 0, ranked by how far from 0 their interval's nearer end
is (:meth:`~poslens.measurement.result.Result.heads_excluding_zero`). Both read one
run's rows, checked as :func:`poslens.measurement.table.head_grid` checks them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from poslens.measurement.table import head_attrs, per_head_metric_rows, query_window_for

__all__ = ["HEAD_COLUMNS", "head_rows", "heads_excluding_zero"]

#: The columns of :func:`head_rows`.
HEAD_COLUMNS = ["layer", "head", "value", "ci_low", "ci_high"]


def head_rows(table: pd.DataFrame, metric: str, query_window: str | None = None) -> pd.DataFrame:
    """One per-head metric as a tidy frame: one row per real head (layer ≥ 0, head ≥ 0), its value and 95% interval.

    Sorted by layer, then head. ``attrs`` holds what :func:`~poslens.measurement.table.head_grid` keeps there:
    the metric, the query window, the run and the aggregate rows (−1).

    Args:
        table: A tidy table of one run.
        metric: A metric with per-head rows.
        query_window: ``"early"`` or ``"all"``; default :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW`
            (``early``; :func:`~poslens.measurement.table.query_window_for`).

    Returns:
        The frame, with the columns of :data:`HEAD_COLUMNS`.

    Raises:
        InputError: The metric or window is not in the table, the metric has no per-head rows, or the table holds
            several runs.

    Example:
        >>> t = pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=head,
        ...                   query_window="early", metric="c_res", value=layer + head / 10, ci_low=layer - 0.5, ci_high=layer + 0.5)
        ...                   for layer in (-1, 0, 1) for head in (-1, 0, 1)])
        >>> head_rows(t, "c_res")
           layer  head  value  ci_low  ci_high
        0      0     0    0.0    -0.5      0.5
        1      0     1    0.1    -0.5      0.5
        2      1     0    1.0     0.5      1.5
        3      1     1    1.1     0.5      1.5
    """
    query_window = query_window_for(table, metric, query_window)
    rows, run = per_head_metric_rows(table, metric, query_window)
    cells = rows[(rows["layer"] >= 0) & (rows["head"] >= 0)][HEAD_COLUMNS]
    out = cells.astype({"layer": "int64", "head": "int64", "value": float, "ci_low": float, "ci_high": float})
    out = out.sort_values(["layer", "head"], kind="stable").reset_index(drop=True)
    out.attrs = head_attrs(rows, metric, query_window, run)
    return out


def heads_excluding_zero(table: pd.DataFrame, metric: str, query_window: str | None = None) -> pd.DataFrame:
    """The heads whose 95% interval of ``metric`` excludes 0, ranked: the interval's end nearer 0 farthest from it first.

    ``side`` is ``"above 0"`` (ci_low > 0) or ``"below 0"`` (ci_high < 0); ``nearer_end`` is the end nearer 0, the
    smallest distance from 0 the interval allows, which orders the rows (then \\|value\\|); ``rank`` counts from 1.
    Each head's interval is a 95% interval of its own: over the L·H heads of a model about 5% of heads whose
    figure is 0 would still exclude it, so read a head near the bottom of the list with that in mind.

    Args:
        table: A tidy table of one run.
        metric: A metric with per-head rows.
        query_window: ``"early"`` or ``"all"``; default :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW`
            (``early``; :func:`~poslens.measurement.table.query_window_for`).

    Returns:
        ``rank``, then the columns of :data:`HEAD_COLUMNS`, ``side`` and ``nearer_end``; no rows if no interval excludes 0.

    Raises:
        InputError: As :func:`head_rows`.

    Example:
        >>> t = pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=0, head=h, query_window="early",
        ...                   metric="c_res", value=v, ci_low=lo, ci_high=hi)
        ...                   for h, v, lo, hi in ((0, 0.5, 0.1, 0.9), (1, 0.2, -0.1, 0.5), (2, -0.4, -0.6, -0.2), (3, 0.3, 0.25, 0.35))])
        >>> heads_excluding_zero(t, "c_res")[["rank", "head", "side", "nearer_end"]]
           rank  head     side  nearer_end
        0     1     3  above 0        0.25
        1     2     2  below 0       -0.20
        2     3     0  above 0        0.10
    """
    rows = head_rows(table, metric, query_window)
    above, below = rows["ci_low"] > 0, rows["ci_high"] < 0
    out = rows[above | below].copy()
    out["side"] = np.where(out["ci_low"] > 0, "above 0", "below 0")
    out["nearer_end"] = np.where(out["ci_low"] > 0, out["ci_low"], out["ci_high"])
    out = out.assign(_distance=out["nearer_end"].abs(), _size=out["value"].abs())
    out = out.sort_values(["_distance", "_size"], ascending=False, kind="stable").drop(columns=["_distance", "_size"]).reset_index(drop=True)
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    out.attrs = rows.attrs
    return out
