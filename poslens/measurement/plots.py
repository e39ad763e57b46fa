"""Plotly figures from tidy tables. No statistics here: every number is read from a table.

Each function takes the table of one study part and returns a
``plotly.graph_objects.Figure``; intervals are drawn from ``ci_low``/``ci_high``.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

QUANTIZED_NOTE = "4-bit quantized weights"


def _errors(rows: pd.DataFrame) -> dict:
    return dict(type="data", symmetric=False, array=rows["ci_high"] - rows["value"], arrayminus=rows["value"] - rows["ci_low"])


def sources_by_layer(table: pd.DataFrame, query_window: str = "early", title: str = "") -> go.Figure:
    """C_res and C_mask by layer, one panel per (model, variant) case, with 95% intervals.

    Example:
        >>> fig = sources_by_layer(result.table)  # doctest: +SKIP
    """
    rows = table[(table["head"] == -1) & (table["layer"] >= 0) & (table["query_window"] == query_window)]
    cases = list(dict.fromkeys(zip(rows["model"], rows["variant"])))
    if not cases:
        raise ValueError(f"no per-layer c_res/c_mask rows for window {query_window!r}")
    fig = make_subplots(rows=1, cols=len(cases), shared_yaxes=True,
                        subplot_titles=[f"{m} ({v})" for m, v in cases], horizontal_spacing=0.03)
    colors = {"c_res": "#d62728", "c_mask": "#1f77b4"}
    for col, (model, variant) in enumerate(cases, start=1):
        part = rows[(rows["model"] == model) & (rows["variant"] == variant)]
        for metric, name in (("c_res", "C_res (residual stream)"), ("c_mask", "C_mask (causal mask)")):
            series = part[part["metric"] == metric].sort_values("layer")
            fig.add_trace(go.Scatter(x=series["layer"], y=series["value"], error_y=_errors(series), mode="lines+markers",
                                     name=name, legendgroup=metric, showlegend=col == 1, line=dict(color=colors[metric])),
                          row=1, col=col)
        fig.update_xaxes(title_text="layer", row=1, col=col)
    fig.update_yaxes(title_text=f"ΔR² component ({query_window} queries)", row=1, col=1)
    fig.update_layout(title=title or "Mask and residual-stream sources of position leakage by layer", height=420)
    return fig


def leakage_heatmap(table: pd.DataFrame, metric: str = "leakage_pattern", query_window: str = "all") -> go.Figure:
    """Layer × head heatmap of one per-head metric.

    Example:
        >>> fig = leakage_heatmap(result.table)  # doctest: +SKIP
    """
    rows = table[(table["metric"] == metric) & (table["query_window"] == query_window) & (table["head"] >= 0) & (table["layer"] >= 0)]
    if rows.empty:
        raise ValueError(f"no per-head {metric} rows for window {query_window!r}")
    grid = rows.pivot_table(index="layer", columns="head", values="value")
    fig = go.Figure(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Viridis", colorbar=dict(title=metric)))
    fig.update_layout(title=f"{metric} per head ({query_window} queries)", xaxis_title="head", yaxis_title="layer", height=520)
    return fig


def sink_scores(table: pd.DataFrame, tau: float = 0.3) -> go.Figure:
    """Sink score per head as a heatmap, with the sink-reading count per layer beside it.

    The count panel is drawn when the table has ``sink_heads`` rows (a sinks
    part, :func:`poslens.mechanisms.sinks.sink_table`); without them the
    heatmap stands alone.

    Example:
        >>> fig = sink_scores(sinks.table)  # doctest: +SKIP
    """
    scores = table[table["metric"] == "sink_score"]
    if scores.empty:
        raise ValueError("no sink_score rows; make them with poslens.mechanisms.sinks.sink_table(result)")
    counts = table[(table["metric"] == "sink_heads") & (table["layer"] >= 0)].sort_values("layer")
    grid = scores.pivot_table(index="layer", columns="head", values="value")
    if counts.empty:
        fig = go.Figure(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Magma", zmin=0, zmax=1,
                                   colorbar=dict(title="a_i0")))
        fig.update_layout(height=520, title="Attention sinks: sink score a_i0 (mean over i ≥ 1)",
                          xaxis_title="head", yaxis_title="layer")
        return fig
    titles = ["sink score a_i0 (mean over i ≥ 1)", f"heads with score ≥ τ = {tau}"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.7, 0.3], subplot_titles=titles)
    fig.add_trace(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Magma", zmin=0, zmax=1, colorbar=dict(x=0.66)), row=1, col=1)
    fig.add_trace(go.Bar(x=counts["value"], y=counts["layer"], orientation="h", name="sink-reading heads",
                         error_x=_errors(counts), showlegend=False), row=1, col=2)
    fig.update_xaxes(title_text="head", row=1, col=1)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    fig.update_layout(height=520, title="Attention sinks")
    return fig


def reductions(table: pd.DataFrame, query_window: str = "early") -> go.Figure:
    """Reduction of C_res per intervention, aggregated over layers ≥ 1 and by layer.

    Example:
        >>> fig = reductions(bos_swap.table)  # doctest: +SKIP
    """
    rows = table[(table["metric"] == "reduction") & (table["query_window"] == query_window) & (table["head"] == -1)]
    if rows.empty:
        raise ValueError(f"no reduction rows for window {query_window!r}")
    overall = rows[rows["layer"] == -1]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.35, 0.65], subplot_titles=["layers ≥ 1", "by layer"])
    fig.add_trace(go.Bar(x=overall["intervention"], y=overall["value"], error_y=_errors(overall), showlegend=False), row=1, col=1)
    for label, part in rows[rows["layer"] >= 1].groupby("intervention"):
        part = part.sort_values("layer")
        fig.add_trace(go.Scatter(x=part["layer"], y=part["value"], error_y=_errors(part), mode="lines+markers", name=label), row=1, col=2)
    fig.add_hline(y=0.4, line_dash="dot", annotation_text="40%", row=1, col=1)
    fig.update_yaxes(title_text=f"1 − C_res(after)/C_res(before), {query_window} queries", row=1, col=1)
    fig.update_xaxes(title_text="layer", row=1, col=2)
    fig.update_layout(height=440, title="Reduction of the residual-stream source")
    return fig


def dispersion(table: pd.DataFrame) -> go.Figure:
    """Relative dispersion of the position-0 residual by layer, with and without BOS.

    Example:
        >>> fig = dispersion(fingerprint.table)  # doctest: +SKIP
    """
    rows = table[(table["metric"] == "dispersion") & (table["layer"] >= 0)]
    if rows.empty:
        raise ValueError("no dispersion rows")
    fig = go.Figure()
    for label, part in rows.groupby("intervention"):
        part = part.sort_values("layer")
        fig.add_trace(go.Scatter(x=part["layer"], y=part["value"], error_y=_errors(part), mode="lines+markers", name=label))
    fig.update_layout(title="Position-0 fingerprint: relative dispersion across inputs", xaxis_title="layer (L = after the last block)",
                      yaxis_title="mean ‖x − x̄‖ / ‖x̄‖", height=420)
    return fig
