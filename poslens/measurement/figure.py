"""The figure poslens draws with: a plotly figure that keeps its HTML in a saved notebook, and how figures name the runs they show."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pandas as pd
import plotly.graph_objects as go

PLOTLY_MIME = "application/vnd.plotly.v1+json"
MISSING_PLOTLYJS = (
    "This figure needs plotly.js, which poslens puts into the first figure a kernel session shows; that output "
    "is no longer in this page. Run the notebook from the top in a fresh kernel (Restart & Run All) before saving it."
)

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
        html = self.to_html(full_html=False, include_plotlyjs=include_plotlyjs, include_mathjax=False, div_id=div_id, config={"displaylogo": False})
        if include_plotlyjs:
            return html
        return (
            html + f'<script type="text/javascript">if (typeof window.Plotly === "undefined") '
            f'{{ document.getElementById("{div_id}").textContent = {json.dumps(MISSING_PLOTLYJS)}; }}</script>'
        )

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


def runs_in(rows: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The (model, variant, intervention) runs of ``rows``, in order of first appearance.

    Args:
        rows: Table rows with ``model``, ``variant`` and ``intervention``.

    Returns:
        ``[(model, variant, intervention)]``, each once.

    Example:
        >>> runs_in(pd.DataFrame(dict(model=["m", "m", "m"], variant=["base"] * 3, intervention=["none", "bos:mean", "none"])))
        [('m', 'base', 'none'), ('m', 'base', 'bos:mean')]
    """
    return list(dict.fromkeys(zip(rows["model"].astype(str), rows["variant"].astype(str), rows["intervention"].astype(str), strict=False)))


def figure_title(text: str, rows: pd.DataFrame) -> dict[str, Any]:
    """A figure title with the run it shows as its subtitle (the runs, if several).

    Args:
        text: The title.
        rows: The table rows the figure draws.

    Returns:
        plotly's ``layout.title``: the text and, as the subtitle, the runs.

    Example:
        >>> rows = pd.DataFrame(dict(model=["m"], variant=["base"], intervention=["none"]))
        >>> figure_title("C_res by layer", rows)
        {'text': 'C_res by layer', 'subtitle': {'text': 'm (base)'}}
    """
    return dict(text=text, subtitle=dict(text="; ".join(case_label(*run) for run in runs_in(rows))))


def interval_error_bars(rows: pd.DataFrame) -> dict[str, Any]:
    """Error bars from each row's 95% interval, ``ci_low`` to ``ci_high`` around ``value``.

    Args:
        rows: Table rows with ``value``, ``ci_low`` and ``ci_high``.

    Returns:
        plotly's ``error_y`` (or ``error_x``) for the rows' trace.

    Example:
        >>> bars = interval_error_bars(pd.DataFrame(dict(value=[0.5], ci_low=[0.25], ci_high=[1.0])))
        >>> bars["array"].tolist(), bars["arrayminus"].tolist()
        ([0.5], [0.25])
    """
    return dict(type="data", symmetric=False, array=rows["ci_high"] - rows["value"], arrayminus=rows["value"] - rows["ci_low"])


def add_interval_bars(fig: go.Figure, picked: list[tuple[str, Any]], name: str, col: int) -> None:
    """Add one panel of horizontal bars with their 95% intervals, and a dotted line at 0, to column ``col`` of ``fig``.

    Args:
        fig: A figure made with ``make_subplots`` (one row).
        picked: ``(label, row)`` per bar, each row with ``value``, ``ci_low`` and ``ci_high``; none: the panel stays empty.
        name: The trace's name.
        col: The panel's column, from 1.

    Example:
        >>> from plotly.subplots import make_subplots
        >>> fig = make_subplots(rows=1, cols=1)
        >>> add_interval_bars(fig, [("a", pd.Series(dict(value=1.0, ci_low=0.5, ci_high=1.5)))], "m", 1)
        >>> fig.data[0].x.tolist(), fig.data[0].y.tolist()
        ([1.0], ['a'])
    """
    frame = pd.DataFrame([dict(words=w, value=r["value"], ci_low=r["ci_low"], ci_high=r["ci_high"]) for w, r in picked])
    if frame.empty:
        return
    fig.add_trace(
        go.Bar(y=frame["words"], x=frame["value"], orientation="h", error_x=interval_error_bars(frame), name=name, showlegend=False),
        row=1,
        col=col,
    )
    fig.add_vline(x=0, line=dict(color="grey", dash="dot"), row=1, col=col)
