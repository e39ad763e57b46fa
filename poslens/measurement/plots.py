"""Plotly figures from tidy tables. No statistics here: every number is read from a table.

Each function takes the table of a measurement or of one study part and returns a
:class:`~poslens.measurement.figure.Figure` (a ``plotly.graph_objects.Figure`` that also
carries an HTML rendering in a notebook); intervals are drawn from ``ci_low``/``ci_high``.
The figures of the intervention parts (attribution, loss change, dose response) are in
:mod:`poslens.measurement.intervention_plots`.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from poslens.measurement.figure import Figure, case_label, figure_title, interval_error_bars, runs_in
from poslens.options import DEFAULTS


def sources_by_layer(table: pd.DataFrame, query_window: str = "early", title: str = "") -> Figure:
    """C_res and C_mask by layer, one panel per run (model, variant, intervention), with 95% intervals.

    Each panel is titled with :func:`~poslens.measurement.figure.case_label`, so a run with an
    intervention is never labelled like the baseline.

    Args:
        table: a tidy result table with ``c_res`` and ``c_mask`` rows.
        query_window: the query window to draw.
        title: the figure's title (a standard one if empty).

    Returns:
        The figure.

    Raises:
        ValueError: the table has no per-layer ``c_res``/``c_mask`` rows in this window.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention=i, layer=layer, head=-1, query_window="early",
        ...                           metric=metric, value=0.1, ci_low=0.0, ci_high=0.2)
        ...                      for i in ("none", "bos:mean") for layer in (0, 1) for metric in ("c_res", "c_mask")])
        >>> [a.text for a in sources_by_layer(rows).layout.annotations]
        ['m (base)', 'm (base, bos:mean)']
    """
    rows = table[(table["head"] == -1) & (table["layer"] >= 0) & (table["query_window"] == query_window) & table["metric"].isin(["c_res", "c_mask"])]
    cases = runs_in(rows)
    if not cases:
        raise ValueError(f"no per-layer c_res/c_mask rows for window {query_window!r}")
    fig = make_subplots(rows=1, cols=len(cases), shared_yaxes=True, subplot_titles=[case_label(*case) for case in cases], horizontal_spacing=0.03)
    colors = {"c_res": "#d62728", "c_mask": "#1f77b4"}
    for col, (model, variant, intervention) in enumerate(cases, start=1):
        part = rows[
            (rows["model"].astype(str) == model) & (rows["variant"].astype(str) == variant) & (rows["intervention"].astype(str) == intervention)
        ]
        for metric, name in (("c_res", "C_res (residual stream)"), ("c_mask", "C_mask (causal mask)")):
            series = part[part["metric"] == metric].sort_values("layer")
            fig.add_trace(
                go.Scatter(
                    x=series["layer"],
                    y=series["value"],
                    error_y=interval_error_bars(series),
                    mode="lines+markers",
                    name=name,
                    legendgroup=metric,
                    showlegend=col == 1,
                    line=dict(color=colors[metric]),
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text="layer", row=1, col=col)
    fig.update_yaxes(title_text=f"ΔR² component ({query_window} queries)", row=1, col=1)
    fig.update_layout(title=title or "Mask and residual-stream sources of position leakage by layer", height=420)
    return Figure(fig)


def by_layer(table: pd.DataFrame, metric: str, query_window: str, title: str = "") -> Figure:
    """One metric's per-layer rows (head −1) with their 95% intervals, one trace per run: before/after comparisons.

    Each run (model, variant, intervention) of the table gets a line with error bars, named by
    :func:`~poslens.measurement.figure.case_label`; a row of a paired difference (a ``kind`` column saying
    ``difference``, as :func:`~poslens.mechanisms.effects.paired_difference` writes) is named
    "run − reference". Runs are drawn side by side, shifted a little along the layer axis so that their
    intervals do not hide each other; a dotted line marks 0.

    Args:
        table: a tidy table of one or several runs (e.g. ``pd.concat`` of a baseline's and an intervention's tables,
            or the rows of :func:`~poslens.mechanisms.effects.reduction`).
        metric: the metric to draw.
        query_window: the query window to draw.
        title: the figure's title (a standard one if empty).

    Returns:
        The figure.

    Raises:
        ValueError: the table has no per-layer rows of ``metric`` in this window.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention=i, layer=layer, head=-1, query_window="early",
        ...                           metric="c_res", value=v, ci_low=v - 0.1, ci_high=v + 0.1)
        ...                      for i, v in (("none", 0.3), ("bos:mean", 0.1)) for layer in (0, 1, -1)])
        >>> fig = by_layer(rows, "c_res", "early")
        >>> [trace.name for trace in fig.data], [round(float(x), 6) for x in fig.data[0].error_y.array]
        (['m (base)', 'm (base, bos:mean)'], [0.1, 0.1])
    """
    rows = table[(table["metric"] == metric) & (table["head"] == -1) & (table["layer"] >= 0) & (table["query_window"] == query_window)]
    if rows.empty:
        raise ValueError(f"no per-layer (head -1) {metric} rows for window {query_window!r}")
    differences = "kind" in rows and "reference" in rows
    keys = ["model", "variant", "intervention"] + (["kind", "reference"] if differences else [])
    runs = list(dict.fromkeys(rows[keys].astype(str).itertuples(index=False, name=None)))
    fig = go.Figure()
    width = 0.3 / max(len(runs) - 1, 1) if len(runs) > 1 else 0.0
    for k, run in enumerate(runs):
        part = rows[(rows[keys].astype(str) == list(run)).all(axis=1)].sort_values("layer")
        name = case_label(*run[:3])
        if differences and run[3] == "difference":
            name = f"{name} − {run[4]}"
        shift = (k - (len(runs) - 1) / 2) * width
        fig.add_trace(go.Scatter(x=part["layer"] + shift, y=part["value"], error_y=interval_error_bars(part), mode="markers+lines", name=name))
    fig.add_hline(y=0, line_dash="dot", line_color="grey")
    fig.update_layout(
        title=figure_title(title or f"{metric} by layer ({query_window} queries), 95% intervals", rows),
        xaxis_title="layer",
        yaxis_title=f"{metric} ({query_window} queries)",
        height=440,
    )
    return Figure(fig)


def leakage_heatmap(table: pd.DataFrame, metric: str = "leakage_pattern", query_window: str = "all") -> Figure:
    """Layer × head heatmap of one per-head metric of one run; the subtitle names the run (:func:`~poslens.measurement.figure.case_label`).

    It draws the real heads only (layer ≥ 0, head ≥ 0), the grid that
    :meth:`~poslens.measurement.result.Result.heads` returns; ``Result.plot("heads", metric=...)`` calls it.

    Args:
        table: a tidy result table.
        metric: the per-head metric to draw.
        query_window: the query window to draw.

    Returns:
        The figure.

    Raises:
        ValueError: the table has no per-head rows of ``metric`` in this window, or they come from several runs.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention="bos:mean", layer=layer, head=head,
        ...                           query_window="all", metric="c_res", value=layer + head / 10, ci_low=0.0, ci_high=2.0)
        ...                      for layer in (0, 1) for head in (0, 1, 2)])
        >>> fig = leakage_heatmap(rows, "c_res")
        >>> fig.data[0].z.tolist(), fig.layout.title.subtitle.text
        ([[0.0, 0.1, 0.2], [1.0, 1.1, 1.2]], 'm (base, bos:mean)')
    """
    rows = table[(table["metric"] == metric) & (table["query_window"] == query_window) & (table["head"] >= 0) & (table["layer"] >= 0)]
    if rows.empty:
        raise ValueError(f"no per-head {metric} rows for window {query_window!r}")
    runs = runs_in(rows)
    if len(runs) > 1:
        raise ValueError(f"the heatmap draws one run; these rows hold {len(runs)} ({'; '.join(case_label(*run) for run in runs)})")
    grid = rows.pivot(index="layer", columns="head", values="value").sort_index().sort_index(axis=1)
    fig = go.Figure(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Viridis", colorbar=dict(title=metric)))
    fig.update_layout(title=figure_title(f"{metric} per head ({query_window} queries)", rows), xaxis_title="head", yaxis_title="layer", height=520)
    return Figure(fig)


def sink_scores(table: pd.DataFrame, tau: float = DEFAULTS.tau, query_window: str = "all") -> Figure:
    """Sink score per head as a heatmap, with the sink-reading count per layer beside it.

    The count panel is drawn when the table has ``sink_heads`` rows (a sinks
    part, :func:`poslens.mechanisms.sinks.sink_table`); without them the
    heatmap stands alone.

    Args:
        table: A tidy table with ``sink_score`` rows (and maybe ``sink_heads`` rows).
        tau: The threshold drawn on the heatmap's scale.
        query_window: The queries the score is a mean over, for the titles: ``all`` (i ≥ 1; the sinks part's
            sink score) or ``early`` (1 ≤ i < Q; a measurement's key-0 mass in that window).

    Returns:
        The plotly figure.

    Raises:
        ValueError: When the table has no ``sink_score`` rows.

    Example:
        >>> fig = sink_scores(sinks.table)  # doctest: +SKIP
    """
    scores = table[table["metric"] == "sink_score"]
    if scores.empty:
        raise ValueError("no sink_score rows; make them with poslens.mechanisms.sinks.sink_table(result)")
    over = "i ≥ 1" if query_window == "all" else "early queries 1 ≤ i < Q"
    counts = table[(table["metric"] == "sink_heads") & (table["layer"] >= 0)].sort_values("layer")
    grid = scores.pivot_table(index="layer", columns="head", values="value")
    if counts.empty:
        fig = go.Figure(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Magma", zmin=0, zmax=1, colorbar=dict(title="a_i0")))
        fig.update_layout(
            height=520, title=figure_title(f"Attention sinks: sink score a_i0 (mean over {over})", scores), xaxis_title="head", yaxis_title="layer"
        )
        return Figure(fig)
    titles = [f"sink score a_i0 (mean over {over})", f"heads with score ≥ τ = {tau}"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.7, 0.3], subplot_titles=titles)
    fig.add_trace(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Magma", zmin=0, zmax=1, colorbar=dict(x=0.66)), row=1, col=1)
    fig.add_trace(
        go.Bar(
            x=counts["value"], y=counts["layer"], orientation="h", name="sink-reading heads", error_x=interval_error_bars(counts), showlegend=False
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="head", row=1, col=1)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    fig.update_layout(height=520, title=figure_title("Attention sinks", scores))
    return Figure(fig)


def reductions(table: pd.DataFrame, query_window: str = "early") -> Figure:
    """Reduction of C_res per intervention, aggregated over layers ≥ 1 and by layer.

    Args:
        table: A tidy table with ``reduction`` rows.
        query_window: The window to plot.

    Returns:
        The plotly figure.

    Raises:
        ValueError: When the table has no ``reduction`` rows in that window.

    Example:
        >>> fig = reductions(bos_swap.table)  # doctest: +SKIP
    """
    rows = table[(table["metric"] == "reduction") & (table["query_window"] == query_window) & (table["head"] == -1)]
    if rows.empty:
        raise ValueError(f"no reduction rows for window {query_window!r}")
    overall = rows[rows["layer"] == -1]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.35, 0.65], subplot_titles=["layers ≥ 1", "by layer"])
    fig.add_trace(go.Bar(x=overall["intervention"], y=overall["value"], error_y=interval_error_bars(overall), showlegend=False), row=1, col=1)
    for label, part in rows[rows["layer"] >= 1].groupby("intervention"):
        part = part.sort_values("layer")
        fig.add_trace(go.Scatter(x=part["layer"], y=part["value"], error_y=interval_error_bars(part), mode="lines+markers", name=label), row=1, col=2)
    fig.add_hline(y=0.4, line_dash="dot", annotation_text="40%", row=1, col=1)
    fig.update_yaxes(title_text=f"1 − C_res(after)/C_res(before), {query_window} queries", row=1, col=1)
    fig.update_xaxes(title_text="layer", row=1, col=2)
    fig.update_layout(height=440, title="Reduction of the residual-stream source")
    return Figure(fig)


def dispersion(table: pd.DataFrame) -> Figure:
    """Relative dispersion of the position-0 residual by layer, with and without BOS.

    Args:
        table: A tidy table with ``dispersion`` rows (:func:`~poslens.mechanisms.fingerprint.fingerprint`).

    Returns:
        The plotly figure.

    Raises:
        ValueError: When the table has no ``dispersion`` rows.

    Example:
        >>> fig = dispersion(fingerprint.table)  # doctest: +SKIP
    """
    rows = table[(table["metric"] == "dispersion") & (table["layer"] >= 0)]
    if rows.empty:
        raise ValueError("no dispersion rows")
    fig = go.Figure()
    for label, part in rows.groupby("intervention"):
        part = part.sort_values("layer")
        fig.add_trace(go.Scatter(x=part["layer"], y=part["value"], error_y=interval_error_bars(part), mode="lines+markers", name=label))
    fig.update_layout(
        title="Position-0 fingerprint: relative dispersion across inputs",
        xaxis_title="layer (L = after the last block)",
        yaxis_title="mean ‖x − x̄‖ / ‖x̄‖",
        height=420,
    )
    return Figure(fig)


#: How the attribution figures name each relativization mode (methodology §11).
