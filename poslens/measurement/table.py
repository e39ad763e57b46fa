"""The tidy table's vocabulary, and the lookups that read it with checks: one row per number.

:data:`COLUMNS` names the columns and defines the aggregate rows (layer −1,
head −1) once; every producer's table and every reader use them so.
:func:`rows_with`, :func:`select_rows`, :func:`summary_table` and
:func:`head_grid` are the reading behind :meth:`poslens.measurement.result.Result.select`,
``summary`` and ``heads``: a value the table does not hold raises an error
naming those it does hold.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np
import pandas as pd

from poslens.errors import InputError
from poslens.fit.sums import QUERY_WINDOWS

COLUMNS = ["model", "variant", "intervention", "layer", "head", "query_window", "metric", "value", "ci_low", "ci_high"]
"""The columns of the tidy table, in order: one row per figure with its 95% interval.

``layer`` and ``head`` number the model's blocks and heads from 0; −1 marks an
aggregate row. **Head −1** is the aggregate over all heads of its layer.
**Layer −1** is the aggregate over the layers ≥ 1: layers 1..L−1 of a model with
L blocks (the fingerprint's rows also have a layer L, the residual leaving the
last block, and aggregate layers 1..L). Layer 0 is left out because C_res ≈ 0
there by construction (nothing before it can write position into its logits).
Layer −1 with head −1 is the model's figure. How each metric
aggregates (a mean, a ratio of the aggregated components, a count, or one fit
over all heads at once) is stated in its entry of the metric glossary
(:data:`poslens.fit.metric_glossary.GLOSSARY`, docs/glossary.md), which also
names the few whose −1 rows are not an aggregate over the layers ≥ 1.
"""

AGGREGATE_LABELS = {"layer": "all layers ≥ 1", "head": "all heads"}
"""How messages name the aggregate −1 of each column (:data:`COLUMNS` defines it)."""

DEFAULT_QUERY_WINDOW = "early"
"""The query window every reading reads when none is named: the early queries 1 ≤ i < Q.

:meth:`~poslens.measurement.result.Result.value`, ``summary``, ``heads``, ``heads_excluding_zero`` and ``plot``,
:func:`~poslens.mechanisms.effects.reduction` and ``poslens heads`` all take ``query_window=None`` and read it through
:func:`query_window_for`: this window, or, for a metric measured in one window only (the sinks part's sink score, the
path tests, the split, the relativization: window ``all``), that one. The count term log |V_i| = log(i + 1) changes
fastest over the first positions, which is why the early window is the default. The claims do not read a default: each
claim's window is part of its rule and is named in the claims table's ``where`` (C4 reads ``all``, since an imposed
window of W changes nothing for queries i < W; C5 reads ``early``)."""


def query_window_for(table: pd.DataFrame, metrics: Any, query_window: str | None = None) -> str:
    """The query window a reading reads: the one named; else :data:`DEFAULT_QUERY_WINDOW`, unless the metrics are held in one other window only.

    Args:
        table: A tidy table.
        metrics: A metric, or several.
        query_window: The window named by the caller, or None.

    Returns:
        ``query_window`` when given; else the default window, or the one window the table holds the metrics in when
        that is not the default (a metric measured in one window only).

    Example:
        >>> both = pd.DataFrame({"metric": ["c_res", "c_res"], "query_window": ["early", "all"]})
        >>> query_window_for(both, "c_res"), query_window_for(both, "c_res", "all")
        ('early', 'all')
        >>> query_window_for(pd.DataFrame({"metric": ["sink_score"], "query_window": ["all"]}), "sink_score")
        'all'
    """
    if query_window is not None:
        return query_window
    wanted = {metrics} if isinstance(metrics, str) else set(metrics)
    if not {"metric", "query_window"} <= set(table.columns):
        return DEFAULT_QUERY_WINDOW
    held = set(map(str, table.loc[table["metric"].isin(wanted), "query_window"]))
    return held.pop() if len(held) == 1 and DEFAULT_QUERY_WINDOW not in held else DEFAULT_QUERY_WINDOW


SUMMARY_METRICS = ("leakage_pattern", "c_res", "c_mask", "key0_mass", "probe_r2", "reduction")
"""The metrics :func:`summary_table` shows by default, those of them that the table holds."""


def layer_label(layer: Any) -> str:
    """A layer as the display's tables name it: its number, or for −1 the aggregate it stands for.

    Args:
        layer: A value of the ``layer`` column.

    Returns:
        The label.

    Example:
        >>> layer_label(2), layer_label(-1)
        ('2', 'mean of layers ≥ 1')
    """
    return "mean of layers ≥ 1" if int(layer) == -1 else str(int(layer))


def select_rows(table: pd.DataFrame, metric: str, query_window: str | None = None, layer: int | None = None, head: int | None = None) -> pd.DataFrame:
    """Rows of one metric, optionally for one window, layer and head (:meth:`~poslens.measurement.result.Result.select`).

    Args:
        table: A tidy table.
        metric: The metric.
        query_window: ``early`` or ``all``; default both.
        layer: A layer (−1: the aggregate of :data:`COLUMNS`); default all.
        head: A head (−1: the aggregate over heads); default all.

    Returns:
        The matching rows.

    Raises:
        ValueError: When the table holds no such metric, window, layer or head (the message names those it holds).

    Example:
        >>> t = pd.DataFrame([dict(metric="c_res", query_window="all", layer=layer, head=-1) for layer in (-1, 0, 1)])
        >>> select_rows(t, "c_res", "all", head=-1)["layer"].tolist()
        [-1, 0, 1]
        >>> select_rows(t, "c_res", layer=4)
        Traceback (most recent call last):
        ValueError: layer 4 not in this table for metric 'c_res'; layers: -1 (all layers ≥ 1), 0, 1
    """
    t = rows_with(table, "metric", metric, "")
    context = f" for metric {metric!r}"
    for column, wanted, label in (("query_window", query_window, "window"), ("layer", layer, "layer"), ("head", head, "head")):
        if wanted is not None:
            t = rows_with(t, column, wanted, context)
            context += f", {label} {_shown(wanted)}"
    return t


def summary_table(table: pd.DataFrame, query_window: str | None = None, metrics: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Per-layer aggregates (head −1) of a few metrics, one column each, as ``value [low, high]`` text.

    The reading behind :meth:`~poslens.measurement.result.Result.summary`:
    ``metrics`` defaults to those of :data:`SUMMARY_METRICS` that the table holds.

    Args:
        table: A tidy table.
        query_window: ``early`` or ``all``; default :data:`DEFAULT_QUERY_WINDOW` (:func:`query_window_for`).
        metrics: The metrics to show; default those of :data:`SUMMARY_METRICS` that the table holds.

    Returns:
        One row per layer (layer −1 last), one column per metric.

    Raises:
        ValueError: When the window or a metric named is not in the table, or it has no per-layer rows of them.

    Example:
        >>> t = pd.DataFrame([dict(layer=layer, head=-1, query_window="all", metric="c_res", value=0.5, ci_low=0.25, ci_high=0.75)
        ...                   for layer in (-1, 1)])
        >>> summary_table(t, "all").to_dict()
        {'c_res': {1: '0.5000 [0.2500, 0.7500]', -1: '0.5000 [0.2500, 0.7500]'}}
    """
    if metrics is None:
        held = set(table["metric"])
        metrics = tuple(m for m in SUMMARY_METRICS if m in held)
    query_window = query_window_for(table, metrics, query_window)
    rows_with(table, "query_window", query_window, "")
    for metric in metrics:
        rows_with(table, "metric", metric, "")
    rows = table[(table["head"] == -1) & (table["query_window"] == query_window) & table["metric"].isin(metrics)]
    if rows.empty:
        raise ValueError(
            f"no per-layer rows (head -1) in window {query_window!r} for metrics {', '.join(metrics) or '(none)'}; "
            f"this table has metrics: {', '.join(sorted(set(table['metric'])))}; pass metrics=(...)"
        )
    cells = rows.assign(text=[f"{v:.4f} [{lo:.4f}, {hi:.4f}]" for v, lo, hi in zip(rows["value"], rows["ci_low"], rows["ci_high"], strict=False)])
    wide = cells.pivot_table(index="layer", columns="metric", values="text", aggfunc="first")
    order = sorted(wide.index, key=lambda layer: (layer < 0, layer))
    return wide.reindex(index=order, columns=[m for m in metrics if m in wide.columns])


def head_grid(table: pd.DataFrame, metric: str, query_window: str | None = None) -> pd.DataFrame:
    """One per-head metric as a layer × head grid, the aggregate rows apart (:meth:`~poslens.measurement.result.Result.heads`).

    Args:
        table: A tidy table of one run.
        metric: A metric with per-head rows.
        query_window: ``"all"`` or ``"early"``; default :data:`DEFAULT_QUERY_WINDOW` (:func:`query_window_for`).

    Returns:
        The grid of the real heads (layer ≥ 0, head ≥ 0), with ``attrs`` naming the metric, query window and run and
        holding the aggregates (``layer_means``, ``head_means``, ``overall``).

    Raises:
        InputError: The metric or query window is not in the table, the metric has no per-head rows, or the table holds
            several runs.

    Example:
        >>> t = pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=head,
        ...                   query_window="all", metric="c_res", value=float(layer + head), ci_low=0.0, ci_high=1.0)
        ...                   for layer in (-1, 0) for head in (-1, 0)])
        >>> grid = head_grid(t, "c_res", "all")
        >>> grid.to_dict(), grid.attrs["aggregates"]
        ({0: {0: 0.0}}, {'layer_means': {0: -1.0}, 'head_means': {0: -1.0}, 'overall': -2.0})
    """
    query_window = query_window_for(table, metric, query_window)
    rows, run = per_head_metric_rows(table, metric, query_window)
    cells = rows[(rows["layer"] >= 0) & (rows["head"] >= 0)]
    grid = cells.pivot(index="layer", columns="head", values="value").sort_index().sort_index(axis=1).astype(float)
    grid.index, grid.columns = grid.index.astype(int), grid.columns.astype(int)
    grid.index.name, grid.columns.name = "layer", "head"
    grid.attrs = head_attrs(rows, metric, query_window, run)
    return grid


def head_attrs(rows: pd.DataFrame, metric: str, query_window: str, run: tuple[Any, ...]) -> dict[str, Any]:
    """What :func:`head_grid` keeps in ``attrs``: the metric, the query window, the run and the aggregate rows (−1).

    Args:
        rows: One run's rows of ``metric`` in ``query_window`` (:func:`per_head_metric_rows`).
        metric: The metric.
        query_window: The query window.
        run: ``(model, variant, intervention)``.

    Returns:
        ``{"metric", "query_window", "run", "aggregates"}``.

    Example:
        >>> rows = pd.DataFrame(dict(layer=[0, 0, -1], head=[0, -1, -1], value=[0.5, 0.4, 0.3]))
        >>> head_attrs(rows, "c_res", "early", ("m", "base", "none"))["aggregates"]
        {'layer_means': {0: 0.4}, 'head_means': {}, 'overall': 0.3}
    """

    def numbers(part: pd.DataFrame, key: str) -> dict[int, float]:
        return {int(k): float(v) for k, v in sorted(zip(part[key], part["value"], strict=False))}

    overall = rows[(rows["layer"] == -1) & (rows["head"] == -1)]
    return {
        "metric": metric,
        "query_window": query_window,
        "run": dict(zip(("model", "variant", "intervention"), map(str, run), strict=False)),
        "aggregates": {
            "layer_means": numbers(rows[(rows["head"] == -1) & (rows["layer"] >= 0)], "layer"),
            "head_means": numbers(rows[(rows["layer"] == -1) & (rows["head"] >= 0)], "head"),
            "overall": float(overall["value"].iloc[0]) if len(overall) else None,
        },
    }


def per_head_metric_rows(table: pd.DataFrame, metric: str, query_window: str) -> tuple[pd.DataFrame, tuple[Any, ...]]:
    """One run's rows of a per-head metric in one query window, checked; with the run.

    The checks behind :func:`head_grid` and :func:`poslens.measurement.head_table.head_rows`.

    Args:
        table: A tidy table of one run.
        metric: A metric with per-head rows.
        query_window: ``"all"`` or ``"early"``.

    Returns:
        ``(rows, (model, variant, intervention))``: every row of the metric in the window, aggregates (−1) included.

    Raises:
        InputError: The metric or query window is not in the table, the metric has no per-head rows, the table holds
            several runs, or a head has several rows.

    Example:
        >>> t = pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=0, head=head, query_window="early",
        ...                   metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2) for head in (-1, 0, 1)])
        >>> rows, run = per_head_metric_rows(t, "c_res", "early")
        >>> len(rows), run
        (3, ('m', 'base', 'none'))
    """
    t = table
    if t.empty or not set(COLUMNS) <= set(t.columns):
        raise InputError(f"this result has no per-head rows ({len(t)} rows; a measurement's table has columns {', '.join(COLUMNS)})")
    real = (t["layer"] >= 0) & (t["head"] >= 0)
    per_head = sorted(map(str, set(t.loc[real, "metric"])))
    listed = ", ".join(per_head) or "none"
    if metric not in set(t["metric"]):
        close = difflib.get_close_matches(str(metric), per_head, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"unknown metric {metric!r}{hint}; metrics with per-head rows: {listed}")
    if metric not in per_head:
        raise InputError(
            f"metric {metric!r} has no per-head rows (one number per layer: see summary() or select()); metrics with per-head rows: {listed}"
        )
    rows = t[t["metric"] == metric]
    query_windows = list(dict.fromkeys(map(str, rows["query_window"])))
    if query_window not in query_windows:
        close = difflib.get_close_matches(str(query_window), query_windows, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"unknown window {query_window!r} for metric {metric!r}{hint}; windows: {', '.join(query_windows)}")
    rows = rows[rows["query_window"] == query_window]
    runs = list(rows[["model", "variant", "intervention"]].drop_duplicates().itertuples(index=False, name=None))
    if len(runs) > 1:
        shown = "; ".join("/".join(map(str, run)) for run in runs)
        raise InputError(
            f"heads() reads one run; this table holds {len(runs)} (model/variant/intervention: {shown}): "
            "keep one run's rows of result.table first, e.g. Result(result.table[result.table['intervention'] == 'none'])"
        )
    repeated = rows[rows.duplicated(["layer", "head"], keep=False)]
    if len(repeated):
        first = repeated.iloc[0]
        raise InputError(
            f"metric {metric!r}, window {query_window!r}: layer {int(first['layer'])}, head {int(first['head'])} has "
            f"{int(((repeated['layer'] == first['layer']) & (repeated['head'] == first['head'])).sum())} rows; "
            "a result holds one row per number: keep one copy of each"
        )
    return rows, runs[0]


def rows_with(rows: pd.DataFrame, column: str, wanted: Any, context: str) -> pd.DataFrame:
    """The rows whose ``column`` equals ``wanted``; if none, ``ValueError`` naming the values ``rows`` holds.

    Args:
        rows: A tidy table, or some of its rows.
        column: The column to match.
        wanted: The value wanted.
        context: What the message adds after "not in this table" (the choices made before), e.g. ``" for metric 'c_res'"``.

    Returns:
        The matching rows.

    Raises:
        ValueError: No row matches; the message lists the values ``rows`` holds (layers and heads with −1 named).

    Example:
        >>> rows_with(pd.DataFrame({"metric": ["c_res", "c_mask"]}), "metric", "c_rez", "")
        Traceback (most recent call last):
        ValueError: unknown metric 'c_rez' (did you mean 'c_res'?); this table has: c_mask, c_res
    """
    picked = rows[rows[column] == wanted]
    if len(picked):
        return picked
    present = rows[column].drop_duplicates().tolist()
    if column in ("layer", "head"):
        raise ValueError(f"{column} {_shown(wanted)} not in this table{context}; {column}s: {_numbers(present, column)}")
    choices = [str(c) for c in (sorted(present) if column == "metric" else present)]
    close = difflib.get_close_matches(str(wanted), choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    name = "query window" if column == "query_window" else column
    raise ValueError(f"unknown {name} {wanted!r}{context}{hint}; this table has: {', '.join(choices) or 'no rows'}")


def _shown(value: Any) -> str:
    """A wanted value as the message shows it: strings quoted, numbers plain (also NumPy's)."""
    return repr(value) if isinstance(value, str) else str(value)


def _numbers(values: list[Any], column: str) -> str:
    """Layer or head numbers as text: the aggregate −1 first and named, runs of three or more as ``a … b``."""
    numbers = sorted(int(v) for v in values)
    parts = [f"-1 ({AGGREGATE_LABELS[column]})"] if -1 in numbers else []
    runs: list[list[int]] = []
    for n in (n for n in numbers if n != -1):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    for run in runs:
        parts += [f"{run[0]} … {run[-1]}"] if len(run) >= 3 else [str(n) for n in run]
    return ", ".join(parts) or "none"


def tidy(values: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], model: str, variant: str, intervention: str) -> pd.DataFrame:
    """Turn metric arrays [query window, layer + 1, head + 1] into the tidy table (NaN cells dropped).

    Args:
        values: ``{metric: (value, ci_low, ci_high)}``, each [query window, layer + 1, head + 1].
        model: The ``model`` column.
        variant: The ``variant`` column.
        intervention: The ``intervention`` column.

    Returns:
        The table, with the columns of :data:`COLUMNS`.

    Example:
        >>> v = np.zeros((2, 2, 2)); t = tidy({"c_res": (v, v, v)}, "m", "base", "none")
        >>> len(t), sorted(t["layer"].unique().tolist())
        (8, [-1, 0])
    """
    frames = []
    for metric, (value, low, high) in values.items():
        w_idx, l_idx, h_idx = np.nonzero(~np.isnan(value))
        n_layers, n_heads = value.shape[1] - 1, value.shape[2] - 1
        frames.append(
            pd.DataFrame(
                {
                    "layer": np.where(l_idx == n_layers, -1, l_idx),
                    "head": np.where(h_idx == n_heads, -1, h_idx),
                    "query_window": np.array(QUERY_WINDOWS)[w_idx],
                    "metric": metric,
                    "value": value[w_idx, l_idx, h_idx],
                    "ci_low": low[w_idx, l_idx, h_idx],
                    "ci_high": high[w_idx, l_idx, h_idx],
                }
            )
        )
    table = pd.concat(frames, ignore_index=True)
    table.insert(0, "intervention", intervention)
    table.insert(0, "variant", variant)
    table.insert(0, "model", model)
    return table[COLUMNS]
