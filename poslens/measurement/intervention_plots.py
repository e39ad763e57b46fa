"""Figures of the intervention parts from their tables: relativization's attribution by layer and loss change; the dose response.

No statistics here: every number is read from a table, intervals from ``ci_low``/``ci_high``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from poslens.measurement.figure import Figure, case_label, interval_error_bars

MODE_WORDS = {"all": "every column", "key0": "key 0 only", "all-but-key0": "every column but key 0"}


def _one_run(rows: pd.DataFrame, what: str) -> str:
    """The ``model (variant)`` label of ``rows``; a ValueError if they hold several runs."""
    runs = list(dict.fromkeys(zip(rows["model"].astype(str), rows["variant"].astype(str), strict=False)))
    if len(runs) > 1:
        raise ValueError(f"the {what} figure draws one run; these rows hold {len(runs)} ({'; '.join(case_label(*r) for r in runs)})")
    return case_label(*runs[0])


def plot_attribution(table: pd.DataFrame, query_window: str = "all") -> Figure:
    """The cumulative attribution by layer: L(log a) unedited, relativized in each mode, and under the placebo.

    It draws the per-layer head-mean ``leakage_pattern`` levels of the relativize
    part's table (:func:`~poslens.mechanisms.attribution.cumulative_attribution`, methodology
    §11): the unedited model (intervention ``none``), each mode (``relativize:<mode>``) at the
    table's largest calibration size, and the purely relative placebo of matched norm
    (``placebo:…``), with their 95% intervals as error bars. The edited curve at
    layer l is measured with exactly the layers below l relativized, so layer 0
    (nothing edited below it) is the negative control. Every number is read
    from the table.

    Args:
        table: The relativize part's table (columns intervention, calibration_size, metric, query_window, layer, kind,
            value, ci_low, ci_high); its other rows are left out.
        query_window: The query window to draw (``"all"`` or ``"early"``).

    Returns:
        The figure.

    Raises:
        ValueError: When the table has no per-layer L(log a) levels in this window, or holds several runs.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention=edit, calibration_size=size, metric="leakage_pattern",
        ...                           query_window="all", layer=layer, kind="level", value=0.1, ci_low=0.0, ci_high=0.2)
        ...                      for edit, size in (("none", 0), ("relativize:key0", 4), ("relativize:key0", 8), ("placebo:all", 8))
        ...                      for layer in (-1, 0, 1)])
        >>> [trace.name for trace in plot_attribution(rows).data]
        ['unedited', 'relativized: key 0 only (n = 8)', 'placebo: relative, matched norm (n = 8)']
    """
    rows = table[
        (table["metric"] == "leakage_pattern") & (table["kind"] == "level") & (table["layer"] >= 0) & (table["query_window"] == query_window)
    ]
    if rows.empty:
        raise ValueError(f"no per-layer leakage_pattern level rows for window {query_window!r}")
    run = _one_run(rows, "attribution")
    rows = rows.assign(mode=rows["intervention"].astype(str).str.removeprefix("relativize:"))  # none, the modes, placebo:…
    modes = list(dict.fromkeys(rows["mode"]))
    edited = rows[rows["mode"] != "none"]
    largest = int(edited["calibration_size"].max()) if len(edited) else 0
    fig = go.Figure()
    edits = [m for m in modes if m != "none" and not m.startswith("placebo:")]
    order = (
        (["none"] if "none" in modes else [])
        + [m for m in MODE_WORDS if m in edits]
        + [m for m in edits if m not in MODE_WORDS]
        + sorted(m for m in modes if m.startswith("placebo:"))
    )
    for mode in order:
        part = rows[rows["mode"] == mode]
        if mode == "none":
            name, line = "unedited", dict(color="black", width=3)
        else:
            part = part[part["calibration_size"] == largest]
            if part.empty:
                continue
            if mode.startswith("placebo:"):
                name, line = f"placebo: relative, matched norm (n = {largest})", dict(color="grey", dash="dot")
            else:
                name, line = f"relativized: {MODE_WORDS.get(mode, mode)} (n = {largest})", dict()
        part = part.sort_values("layer")
        fig.add_trace(go.Scatter(x=part["layer"], y=part["value"], error_y=interval_error_bars(part), mode="lines+markers", name=name, line=line))
    caption = f"{run}; at layer l, layers < l relativized (calibration: {largest} sequences); layer 0: the negative control"
    fig.update_layout(
        title=dict(text=f"Cumulative attribution: L(log a) by layer ({query_window} queries)", subtitle=dict(text=caption)),
        xaxis_title="layer l",
        yaxis_title=f"L(log a), head mean, {query_window} queries",
        height=460,
    )
    return Figure(fig)


def plot_loss_change(loss: pd.DataFrame) -> Figure:
    """Change in next-token loss per query bin under each edit and placebo, with 95% intervals.

    One bar per query bin ([low, high) positions; ``all ≥ 1`` for every
    position ≥ 1) and edit, grouped by bin, read from the rows of metric
    ``loss_change`` of the relativize part's table
    (:func:`~poslens.mechanisms.attribution.cumulative_attribution`).

    Args:
        loss: The relativize part's table (columns intervention, metric, query_bin, query_low, query_high, value,
            ci_low, ci_high); its rows of other metrics are left out.

    Returns:
        The figure.

    Raises:
        ValueError: When the table has no rows, or holds several runs.

    Example:
        >>> loss = pd.DataFrame([dict(model="m", variant="base", intervention=edit, query_bin=c, query_low=low, query_high=high,
        ...                           metric="loss_change", value=0.01, ci_low=0.0, ci_high=0.02)
        ...                      for edit in ("relativize:all", "placebo:all") for c, low, high in ((-1, 1, 15), (0, 1, 8))])
        >>> fig = plot_loss_change(loss)
        >>> [trace.name for trace in fig.data], list(fig.data[0].x)
        (['relativize:all', 'placebo:all'], ['all ≥ 1', '[1, 8)'])
    """
    loss = loss[loss["metric"] == "loss_change"] if "metric" in loss else loss.iloc[0:0]
    if loss.empty:
        raise ValueError("no loss_change rows (was the attribution run with loss=False / --no-loss?)")
    run = _one_run(loss, "loss change")
    fig = go.Figure()
    for edit in dict.fromkeys(loss["intervention"].astype(str)):
        part = loss[loss["intervention"].astype(str) == edit].sort_values("query_low")
        part = pd.concat([part[part["query_bin"] == -1], part[part["query_bin"] != -1]])
        labels = [
            "all ≥ 1" if c == -1 else f"[{low}, {high})"
            for c, low, high in zip(part["query_bin"], part["query_low"], part["query_high"], strict=False)
        ]
        fig.add_trace(go.Bar(x=labels, y=part["value"], error_y=interval_error_bars(part), name=edit))
    fig.update_layout(
        barmode="group",
        title=dict(text="Change in next-token loss under each edit (edited − unedited)", subtitle=dict(text=run)),
        xaxis_title="query positions",
        yaxis_title="Δ loss (nats per token)",
        height=420,
    )
    return Figure(fig)


def plot_dose_response(comparisons: pd.DataFrame, metric: str = "c_res", query_window: str = "all") -> Figure:
    """C4's dose-responses: each variant's paired difference from its base model, against NTK α and window W.

    It draws the ``paired`` rows (layer −1: the mean over layers ≥ 1) of the
    comparison table of :func:`poslens.mechanisms.comparisons.comparison_table`:
    one panel for the ``ntk:α`` variants (α = 1 is the base model, difference 0),
    one for the ``window:W`` variants, each point with its paired 95% interval, on
    log-2 axes. The panel titles give the trend rows' slopes per doubling with
    their intervals, as the table holds them. Every number is read from the table.

    Args:
        comparisons: The comparison table (columns variant, metric, query_window, layer, kind, comparison, value, ci_low, ci_high).
        metric: The compared figure (``c_res``, ``c_mask``, ``leakage_pattern`` or ``c_res_depth_slope``).
        query_window: ``"all"`` or ``"early"``.

    Returns:
        The figure.

    Raises:
        ValueError: When the table has no paired ``ntk:`` or ``window:`` rows for this metric and window.

    Example:
        >>> rows = pd.DataFrame([dict(variant=v, metric="c_res", query_window="all", layer=-1, kind="paired",
        ...                           comparison=f"{v} − base", value=d, ci_low=d - 0.1, ci_high=d + 0.1)
        ...                      for v, d in (("ntk:2", -0.1), ("ntk:4", -0.2), ("window:64", 0.3))])
        >>> [trace.name for trace in plot_dose_response(rows).data]
        ['NTK α', 'window W']
    """
    from poslens.model.variants import parse_variant

    rows = comparisons[(comparisons["metric"] == metric) & (comparisons["query_window"] == query_window)]
    paired = rows[(rows["kind"] == "paired") & (rows["layer"] == -1)]
    points: dict[str, list[tuple[float, Any]]] = {"ntk": [], "window": []}
    for _, row in paired.iterrows():
        variant = parse_variant(str(row["variant"]))
        if variant.ntk_alpha is not None and variant.sliding_window is None:
            points["ntk"].append((float(variant.ntk_alpha), row))
        elif variant.sliding_window is not None and variant.ntk_alpha is None:
            points["window"].append((float(variant.sliding_window), row))
    if not points["ntk"] and not points["window"]:
        raise ValueError(f"no paired ntk: or window: rows for metric {metric!r} in window {query_window!r}")
    trends = rows[rows["kind"] == "trend"]

    def trend_text(family: str) -> str:
        hit = trends[(trends["variant"] == family) & (trends["layer"] == -1)]
        if hit.empty:
            return "no trend (fewer than two parameter values)"
        t = hit.iloc[0]
        return f"slope per doubling {t['value']:.3g} [{t['ci_low']:.3g}, {t['ci_high']:.3g}]"

    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"NTK α: {trend_text('ntk')}", f"window W: {trend_text('window')}"))
    for col, (family, name) in enumerate((("ntk", "NTK α"), ("window", "window W")), start=1):
        found = sorted(points[family], key=lambda p: p[0])
        if family == "ntk":
            found = [(1.0, None)] + found  # the base model: α = 1, no difference from itself
        x = [p for p, _ in found]
        y = [0.0 if r is None else float(r["value"]) for _, r in found]
        up = [0.0 if r is None else float(r["ci_high"]) - float(r["value"]) for _, r in found]
        down = [0.0 if r is None else float(r["value"]) - float(r["ci_low"]) for _, r in found]
        fig.add_trace(
            go.Scatter(x=x, y=y, mode="lines+markers", name=name, error_y=dict(type="data", array=up, arrayminus=down, visible=True)), row=1, col=col
        )
        fig.update_xaxes(type="log", title_text=name, row=1, col=col)
    fig.add_hline(y=0, line=dict(color="grey", dash="dot"))
    fig.update_yaxes(title_text=f"{metric}: variant − base (paired, layers ≥ 1)", row=1, col=1)
    fig.update_layout(title=dict(text=f"Dose-responses of {metric} ({query_window} queries), paired differences from the base model"), height=420)
    return fig
