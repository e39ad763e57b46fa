"""Which standard figure ``Result.plot(kind)`` draws, and the checks on the table before it is drawn.

:func:`plot_table` checks the kind, the window, the metrics and the runs a
kind needs (each error names what the table holds) and hands the rows to the
figure functions of :mod:`poslens.measurement.plots`.
"""

from __future__ import annotations

import difflib

import pandas as pd

from poslens.measurement import path_plots, plots, split_plots
from poslens.measurement.figure import Figure
from poslens.measurement.table import COLUMNS, head_grid, query_window_for, rows_with
from poslens.options import DEFAULTS

PLOT_KINDS = ("sources", "leakage", "heads", "layers", "sinks", "path", "path-split", "path-doses", "sink-split")
"""The kinds of :meth:`poslens.measurement.result.Result.plot` (the ``path…`` kinds draw the path-specific tests' table,
``sink-split`` the sink path's split)."""


def plot_table(table: pd.DataFrame, kind: str, query_window: str | None = None, tau: float = DEFAULTS.tau, metric: str | None = None) -> Figure:
    """The figure ``kind`` of a tidy table: the work of :meth:`~poslens.measurement.result.Result.plot`, which documents the kinds.

    Args:
        table: A tidy table.
        kind: One of :data:`PLOT_KINDS`.
        query_window: The query window; default :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW` (``early``), or
            the one window a table holds its metrics in (:func:`~poslens.measurement.table.query_window_for`).
        tau: The sink threshold of ``"sinks"``.
        metric: The metric of ``"heads"`` and ``"layers"`` (required there), the readout of a ``path…`` kind (optional),
            refused by the other kinds.

    Returns:
        The plotly figure.

    Raises:
        ValueError: An unknown kind, window or metric, a table without the metrics the kind needs, or several runs
            where the kind draws one.

    Example:
        >>> t = pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=0,
        ...                   query_window="all", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2) for layer in (0, 1)])
        >>> plot_table(t, "heads", "all", metric="c_res").data[0].type
        'heatmap'
        >>> plot_table(t, "sink")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: unknown plot kind 'sink' (did you mean 'sinks'?); kinds: sources, leakage, heads, layers, sinks, ...
    """
    if kind not in PLOT_KINDS:
        close = difflib.get_close_matches(str(kind), PLOT_KINDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown plot kind {kind!r}{hint}; kinds: {', '.join(PLOT_KINDS)}")
    t = table
    if kind == "heads":
        if metric is None:
            held = set(t[(t["layer"] >= 0) & (t["head"] >= 0)]["metric"]) if set(COLUMNS) <= set(t.columns) else set()
            raise ValueError(f"plot('heads') needs metric=..., one of the per-head metrics: {', '.join(sorted(held)) or 'none'}")
        grid = head_grid(t, metric, query_window)  # checks the metric, the window and that there is one run
        rows = t[(t["metric"] == metric) & (t["query_window"] == grid.attrs["query_window"])]
        return plots.leakage_heatmap(rows, metric, grid.attrs["query_window"])
    if kind == "layers":
        if metric is None:
            layer_metrics = sorted(set(t[t["head"] == -1]["metric"])) if set(COLUMNS) <= set(t.columns) else []
            raise ValueError(f"plot('layers') needs metric=..., one with per-layer rows: {', '.join(layer_metrics) or 'none'}")
        query_window = query_window_for(t, metric, query_window)
        rows = rows_with(t, "metric", metric, "")
        rows_with(rows, "query_window", query_window, f" for metric {metric!r}")
        return plots.by_layer(t, metric, query_window)
    if kind == "sink-split":
        if metric is not None:
            raise ValueError("plot('sink-split') draws both readouts of the split; it takes no metric=")
        return split_plots.plot_sink_split(t)
    if kind.startswith("path"):
        if "kind" not in t or "reference" not in t:
            raise ValueError(f"plot({kind!r}) draws the table of the path-specific tests (poslens path-tests); this table is another")
        if kind == "path":
            return path_plots.plot_path_probe(t, metric or "resid_probe_r2")
        if kind == "path-doses":
            return path_plots.plot_path_doses(t, metric or "resid_probe_r2_ge2")
        return path_plots.plot_path_split(t) if metric is None else path_plots.plot_path_split(t, (metric,))
    if metric is not None:
        raise ValueError(f"plot({kind!r}) draws fixed metrics; metric= is for plot('heads' or 'layers', metric=...) and the path kinds")
    if kind == "sources":
        query_window = query_window_for(t, ("c_res", "c_mask"), query_window)
        _needs(t, kind, "c_res", "c_mask")
        for needed in ("c_res", "c_mask"):
            rows_with(t[t["metric"] == needed], "query_window", query_window, f" for metric {needed!r}")
        _one_intervention(t, kind)
        return plots.sources_by_layer(t, query_window)
    if kind == "leakage":
        query_window = query_window_for(t, "leakage_pattern", query_window)
        _needs(t, kind, "leakage_pattern")
        rows = rows_with(t[t["metric"] == "leakage_pattern"], "query_window", query_window, " for metric 'leakage_pattern'")
        _one_run(rows, kind)
        return plots.leakage_heatmap(rows, "leakage_pattern", query_window)
    if "sink_score" in set(t["metric"]):
        _one_run(t[t["metric"] == "sink_score"], kind)
        return plots.sink_scores(t, tau)
    if "key0_mass" not in set(t["metric"]):
        raise ValueError(
            f"plot('sinks') needs metric 'sink_score' (a sinks part) or 'key0_mass' (a measurement), which this "
            f"table lacks; it has: {', '.join(sorted(set(t['metric']))) or 'no rows'}"
        )
    query_window = query_window_for(t, "key0_mass", query_window)
    rows = rows_with(t[t["metric"] == "key0_mass"], "query_window", query_window, " for metric 'key0_mass'")
    rows = rows[(rows["head"] >= 0) & (rows["layer"] >= 0)]
    _one_run(rows, kind)
    return plots.sink_scores(rows.assign(metric="sink_score"), tau, query_window)


def _needs(table: pd.DataFrame, kind: str, *metrics: str) -> None:
    held = set(table["metric"]) if "metric" in table else set()
    missing = [m for m in metrics if m not in held]
    if missing:
        name = "metrics " + ", ".join(repr(m) for m in missing) if len(missing) > 1 else f"metric {missing[0]!r}"
        raise ValueError(f"plot({kind!r}) needs {name}, which this table lacks; it has: {', '.join(sorted(held)) or 'no rows'}")


def _one_intervention(rows: pd.DataFrame, kind: str) -> None:
    interventions = list(dict.fromkeys(rows["intervention"]))
    if len(interventions) > 1:
        raise ValueError(
            f"plot({kind!r}) draws one intervention; this table holds {len(interventions)} "
            f"({', '.join(map(str, interventions))}): keep one intervention's rows of result.table first"
        )


def _one_run(rows: pd.DataFrame, kind: str) -> None:
    runs = rows[["model", "variant", "intervention"]].drop_duplicates()
    if len(runs) > 1:
        listed = "; ".join("/".join(map(str, run)) for run in runs.itertuples(index=False))
        raise ValueError(
            f"plot({kind!r}) draws one run; this table holds {len(runs)} (model/variant/intervention: {listed}): "
            "keep one run's rows of result.table first"
        )
