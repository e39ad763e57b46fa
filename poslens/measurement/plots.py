"""Plotly figures from tidy tables. No statistics here: every number is read from a table.

Each function takes the table of one study part and returns a :class:`Figure`
(a ``plotly.graph_objects.Figure`` that also carries an HTML rendering in a
notebook); intervals are drawn from ``ci_low``/``ci_high``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

QUANTIZED_NOTE = "4-bit quantized weights"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
MISSING_PLOTLYJS = ("This figure needs plotly.js, which poslens puts into the first figure a kernel session shows; that output "
                    "is no longer in this page. Run the notebook from the top in a fresh kernel (Restart & Run All) before saving it.")

# The (cell id, execution count) of the display that carried plotly.js in this kernel session, once one has.
_plotlyjs_sent: list[tuple[Any, Any]] = []


def _current_cell() -> tuple[Any, Any]:
    """The notebook cell being run (its id, as the frontend sends it, and its execution count); Nones outside a kernel."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None, None
    shell = get_ipython()
    if shell is None:
        return None, None
    header = getattr(shell, "parent_header", None) or {}
    return (header.get("metadata") or {}).get("cellId"), getattr(shell, "execution_count", None)


class Figure(go.Figure):
    """A plotly figure whose notebook display also carries ``text/html``, so it survives a saved notebook's export to HTML.

    A notebook shows a plain plotly figure through the
    ``application/vnd.plotly.v1+json`` mimetype alone, which nbconvert's HTML
    exporter (and so a notebook rendered as a web page) drops. This figure adds
    an HTML rendering beside it. plotly.js (about 4.8 MB) travels in the first
    figure shown in the kernel session, again when that cell is run again,
    and never in the others, which draw with it; if that output is cleared
    before saving, the later figures say so in the page instead of staying
    blank. Everything else is a ``plotly.graph_objects.Figure``.

    Example:
        >>> fig = Figure(go.Bar(x=[1, 2], y=[3, 4]))
        >>> html = fig.notebook_html(include_plotlyjs=False)
        >>> "Plotly.newPlot" in html, len(html) < 100_000
        (True, True)
    """

    def notebook_html(self, include_plotlyjs: bool) -> str:
        """The HTML rendering this figure shows in a notebook, with or without plotly.js itself.

        Args:
            include_plotlyjs: inline plotly.js (needed once per page) or rely on an earlier figure's copy.

        Returns:
            A ``<div>`` with the figure and the script that draws it, offline.

        Example:
            >>> len(Figure(go.Bar(x=[1], y=[2])).notebook_html(include_plotlyjs=True)) > 1_000_000
            True
        """
        div_id = f"poslens-figure-{uuid.uuid4().hex}"
        html = self.to_html(full_html=False, include_plotlyjs=include_plotlyjs, include_mathjax=False, div_id=div_id,
                            config={"displaylogo": False})
        if include_plotlyjs:
            return html
        return (html + f'<script type="text/javascript">if (typeof window.Plotly === "undefined") '
                f'{{ document.getElementById("{div_id}").textContent = {json.dumps(MISSING_PLOTLYJS)}; }}</script>')

    def _repr_mimebundle_(self, include=None, exclude=None, validate=True, **kwargs):
        """plotly's bundle for the current renderer, plus ``text/html`` beside its plotly JSON."""
        bundle = super()._repr_mimebundle_(include, exclude, validate, **kwargs)
        if PLOTLY_MIME in bundle:
            cell, count = _current_cell()
            first = not _plotlyjs_sent or (cell is not None and cell == _plotlyjs_sent[0][0] and count != _plotlyjs_sent[0][1])
            bundle["text/html"] = self.notebook_html(include_plotlyjs=first)
            if first:
                _plotlyjs_sent[:] = [(cell, count)]
        return bundle

    def _ipython_display_(self) -> None:
        """Show the bundle of :meth:`_repr_mimebundle_` (plotly's own display would leave the HTML out)."""
        import plotly.io as pio

        bundle = self._repr_mimebundle_() if pio.renderers.render_on_display and pio.renderers.default else {}
        if not bundle:  # no renderer, or an external one (a browser tab): plotly's own display handles it
            super()._ipython_display_()
            return
        from IPython.display import display

        display(bundle, raw=True)


def case_label(model: str, variant: str, intervention: str = "none") -> str:
    """How figures name one run: the model, then its variant and, unless there is none, its intervention.

    Args:
        model: the model's name.
        variant: its variant (``base``, an NTK scaling, an imposed window).
        intervention: the table's ``intervention`` label (``none``, ``bos:mean``, ...).

    Returns:
        ``"model (variant)"`` without an intervention, else ``"model (variant, intervention)"``.

    Example:
        >>> case_label("smollm2-135m", "base"), case_label("smollm2-135m", "base", "bos:mean")
        ('smollm2-135m (base)', 'smollm2-135m (base, bos:mean)')
    """
    return f"{model} ({variant})" if str(intervention) in ("none", "") else f"{model} ({variant}, {intervention})"


def _runs(rows: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The (model, variant, intervention) runs of ``rows``, in order of first appearance."""
    return list(dict.fromkeys(zip(rows["model"].astype(str), rows["variant"].astype(str), rows["intervention"].astype(str))))


def _title(text: str, rows: pd.DataFrame) -> dict:
    """A figure title with the run it shows as its subtitle (the runs, if several)."""
    return dict(text=text, subtitle=dict(text="; ".join(case_label(*run) for run in _runs(rows))))


def _errors(rows: pd.DataFrame) -> dict:
    return dict(type="data", symmetric=False, array=rows["ci_high"] - rows["value"], arrayminus=rows["value"] - rows["ci_low"])


def sources_by_layer(table: pd.DataFrame, query_window: str = "early", title: str = "") -> Figure:
    """C_res and C_mask by layer, one panel per run (model, variant, intervention), with 95% intervals.

    Each panel is titled with :func:`~poslens.measurement.plots.case_label`, so a run with an
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
    rows = table[(table["head"] == -1) & (table["layer"] >= 0) & (table["query_window"] == query_window)
                 & table["metric"].isin(["c_res", "c_mask"])]
    cases = _runs(rows)
    if not cases:
        raise ValueError(f"no per-layer c_res/c_mask rows for window {query_window!r}")
    fig = make_subplots(rows=1, cols=len(cases), shared_yaxes=True,
                        subplot_titles=[case_label(*case) for case in cases], horizontal_spacing=0.03)
    colors = {"c_res": "#d62728", "c_mask": "#1f77b4"}
    for col, (model, variant, intervention) in enumerate(cases, start=1):
        part = rows[(rows["model"].astype(str) == model) & (rows["variant"].astype(str) == variant)
                    & (rows["intervention"].astype(str) == intervention)]
        for metric, name in (("c_res", "C_res (residual stream)"), ("c_mask", "C_mask (causal mask)")):
            series = part[part["metric"] == metric].sort_values("layer")
            fig.add_trace(go.Scatter(x=series["layer"], y=series["value"], error_y=_errors(series), mode="lines+markers",
                                     name=name, legendgroup=metric, showlegend=col == 1, line=dict(color=colors[metric])),
                          row=1, col=col)
        fig.update_xaxes(title_text="layer", row=1, col=col)
    fig.update_yaxes(title_text=f"ΔR² component ({query_window} queries)", row=1, col=1)
    fig.update_layout(title=title or "Mask and residual-stream sources of position leakage by layer", height=420)
    return Figure(fig)


def leakage_heatmap(table: pd.DataFrame, metric: str = "leakage_pattern", query_window: str = "all") -> Figure:
    """Layer × head heatmap of one per-head metric of one run; the subtitle names the run (:func:`~poslens.measurement.plots.case_label`).

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
    runs = _runs(rows)
    if len(runs) > 1:
        raise ValueError(f"the heatmap draws one run; these rows hold {len(runs)} ({'; '.join(case_label(*run) for run in runs)})")
    grid = rows.pivot(index="layer", columns="head", values="value").sort_index().sort_index(axis=1)
    fig = go.Figure(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Viridis", colorbar=dict(title=metric)))
    fig.update_layout(title=_title(f"{metric} per head ({query_window} queries)", rows), xaxis_title="head", yaxis_title="layer",
                      height=520)
    return Figure(fig)


def sink_scores(table: pd.DataFrame, tau: float = 0.3) -> Figure:
    """Sink score per head as a heatmap, with the sink-reading count per layer beside it.

    The count panel is drawn when the table has ``sink_heads`` rows (a sinks
    part, :func:`poslens.mechanisms.sinks.sink_table`); without them the
    heatmap stands alone.

    Args:
        table: A tidy table with ``sink_score`` rows (and maybe ``sink_heads`` rows).
        tau: The threshold drawn on the heatmap's scale.

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
    counts = table[(table["metric"] == "sink_heads") & (table["layer"] >= 0)].sort_values("layer")
    grid = scores.pivot_table(index="layer", columns="head", values="value")
    if counts.empty:
        fig = go.Figure(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Magma", zmin=0, zmax=1,
                                   colorbar=dict(title="a_i0")))
        fig.update_layout(height=520, title=_title("Attention sinks: sink score a_i0 (mean over i ≥ 1)", scores),
                          xaxis_title="head", yaxis_title="layer")
        return Figure(fig)
    titles = ["sink score a_i0 (mean over i ≥ 1)", f"heads with score ≥ τ = {tau}"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.7, 0.3], subplot_titles=titles)
    fig.add_trace(go.Heatmap(z=grid.values, x=grid.columns, y=grid.index, colorscale="Magma", zmin=0, zmax=1, colorbar=dict(x=0.66)), row=1, col=1)
    fig.add_trace(go.Bar(x=counts["value"], y=counts["layer"], orientation="h", name="sink-reading heads",
                         error_x=_errors(counts), showlegend=False), row=1, col=2)
    fig.update_xaxes(title_text="head", row=1, col=1)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    fig.update_layout(height=520, title=_title("Attention sinks", scores))
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
    fig.add_trace(go.Bar(x=overall["intervention"], y=overall["value"], error_y=_errors(overall), showlegend=False), row=1, col=1)
    for label, part in rows[rows["layer"] >= 1].groupby("intervention"):
        part = part.sort_values("layer")
        fig.add_trace(go.Scatter(x=part["layer"], y=part["value"], error_y=_errors(part), mode="lines+markers", name=label), row=1, col=2)
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
        fig.add_trace(go.Scatter(x=part["layer"], y=part["value"], error_y=_errors(part), mode="lines+markers", name=label))
    fig.update_layout(title="Position-0 fingerprint: relative dispersion across inputs", xaxis_title="layer (L = after the last block)",
                      yaxis_title="mean ‖x − x̄‖ / ‖x̄‖", height=420)
    return Figure(fig)


#: How the attribution figures name each relativization mode (methodology §11).
MODE_WORDS = {"all": "every column", "key0": "key 0 only", "all-but-key0": "every column but key 0"}


def _one_run(rows: pd.DataFrame, what: str) -> str:
    """The ``model (variant)`` label of ``rows``; a ValueError if they hold several runs."""
    runs = list(dict.fromkeys(zip(rows["model"].astype(str), rows["variant"].astype(str))))
    if len(runs) > 1:
        raise ValueError(f"the {what} figure draws one run; these rows hold {len(runs)} ({'; '.join(case_label(*r) for r in runs)})")
    return case_label(*runs[0])


def plot_attribution(table: pd.DataFrame, query_window: str = "all") -> Figure:
    """The cumulative attribution by layer: L(log a) unedited, relativized in each mode, and under the placebo.

    It draws the per-layer head-mean ``leakage_pattern`` levels of an
    :class:`~poslens.mechanisms.attribution.Attribution` table (methodology
    §11): the unedited model (mode ``none``), each mode at the table's largest
    calibration size, and the purely relative placebo of matched norm (mode
    ``placebo:…``), with their 95% intervals as error bars. The edited curve at
    layer l is measured with exactly the layers below l relativized, so layer 0
    (nothing edited below it) is the negative control. Every number is read
    from the table.

    Args:
        table: ``Attribution.table`` (columns mode, calibration_size, metric, query_window, layer, kind, value, ci_low, ci_high).
        query_window: The query window to draw (``"all"`` or ``"early"``).

    Returns:
        The figure.

    Raises:
        ValueError: When the table has no per-layer L(log a) levels in this window, or holds several runs.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", mode=mode, calibration_size=size, metric="leakage_pattern",
        ...                           query_window="all", layer=layer, kind="level", value=0.1, ci_low=0.0, ci_high=0.2)
        ...                      for mode, size in (("none", 0), ("key0", 4), ("key0", 8), ("placebo:all", 8))
        ...                      for layer in (-1, 0, 1)])
        >>> [trace.name for trace in plot_attribution(rows).data]
        ['unedited', 'relativized: key 0 only (n = 8)', 'placebo: relative, matched norm (n = 8)']
    """
    rows = table[(table["metric"] == "leakage_pattern") & (table["kind"] == "level") & (table["layer"] >= 0)
                 & (table["query_window"] == query_window)]
    if rows.empty:
        raise ValueError(f"no per-layer leakage_pattern level rows for window {query_window!r}")
    run = _one_run(rows, "attribution")
    modes = list(dict.fromkeys(rows["mode"].astype(str)))
    edited = rows[rows["mode"].astype(str) != "none"]
    largest = int(edited["calibration_size"].max()) if len(edited) else 0
    fig = go.Figure()
    edits = [m for m in modes if m != "none" and not m.startswith("placebo:")]
    order = (["none"] if "none" in modes else []) + [m for m in MODE_WORDS if m in edits] \
        + [m for m in edits if m not in MODE_WORDS] + sorted(m for m in modes if m.startswith("placebo:"))
    for mode in order:
        part = rows[rows["mode"].astype(str) == mode]
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
        fig.add_trace(go.Scatter(x=part["layer"], y=part["value"], error_y=_errors(part), mode="lines+markers", name=name,
                                 line=line))
    caption = (f"{run}; at layer l, layers < l relativized (calibration: {largest} sequences); "
               "layer 0: the negative control")
    fig.update_layout(title=dict(text=f"Cumulative attribution: L(log a) by layer ({query_window} queries)",
                                 subtitle=dict(text=caption)),
                      xaxis_title="layer l", yaxis_title=f"L(log a), head mean, {query_window} queries", height=460)
    return Figure(fig)


def plot_loss_change(loss: pd.DataFrame) -> Figure:
    """Change in next-token loss per query bin under each edit and placebo, with 95% intervals.

    One bar per query bin ([low, high) positions; ``all ≥ 1`` for every
    position ≥ 1) and edit, grouped by bin, read from an
    :class:`~poslens.mechanisms.attribution.Attribution` ``loss`` table.

    Args:
        loss: ``Attribution.loss`` (columns edit, query_bin, query_low, query_high, value, ci_low, ci_high).

    Returns:
        The figure.

    Raises:
        ValueError: When the table has no rows, or holds several runs.

    Example:
        >>> loss = pd.DataFrame([dict(model="m", variant="base", edit=edit, query_bin=c, query_low=low, query_high=high,
        ...                           metric="loss_change", value=0.01, ci_low=0.0, ci_high=0.02)
        ...                      for edit in ("relativize:all", "placebo:all") for c, low, high in ((-1, 1, 15), (0, 1, 8))])
        >>> fig = plot_loss_change(loss)
        >>> [trace.name for trace in fig.data], list(fig.data[0].x)
        (['relativize:all', 'placebo:all'], ['all ≥ 1', '[1, 8)'])
    """
    if loss.empty:
        raise ValueError("no loss_change rows (was the attribution run with loss=False / --no-loss?)")
    run = _one_run(loss, "loss change")
    fig = go.Figure()
    for edit in dict.fromkeys(loss["edit"].astype(str)):
        part = loss[loss["edit"].astype(str) == edit].sort_values("query_low")
        part = pd.concat([part[part["query_bin"] == -1], part[part["query_bin"] != -1]])
        labels = ["all ≥ 1" if c == -1 else f"[{low}, {high})"
                  for c, low, high in zip(part["query_bin"], part["query_low"], part["query_high"])]
        fig.add_trace(go.Bar(x=labels, y=part["value"], error_y=_errors(part), name=edit))
    fig.update_layout(barmode="group", title=dict(text="Change in next-token loss under each edit (edited − unedited)",
                                                  subtitle=dict(text=run)),
                      xaxis_title="query positions", yaxis_title="Δ loss (nats per token)", height=420)
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
        if variant.ntk_alpha is not None and variant.window is None:
            points["ntk"].append((float(variant.ntk_alpha), row))
        elif variant.window is not None and variant.ntk_alpha is None:
            points["window"].append((float(variant.window), row))
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
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name,
                                 error_y=dict(type="data", array=up, arrayminus=down, visible=True)), row=1, col=col)
        fig.update_xaxes(type="log", title_text=name, row=1, col=col)
    fig.add_hline(y=0, line=dict(color="grey", dash="dot"))
    fig.update_yaxes(title_text=f"{metric}: variant − base (paired, layers ≥ 1)", row=1, col=1)
    fig.update_layout(title=dict(text=f"Dose-responses of {metric} ({query_window} queries), paired differences from the base model"),
                      height=420)
    return fig
