"""The figure of the sink path's split (methodology §13) from its table: one panel per readout, the split's bars with intervals.

No statistics here: every number is read from the table of
:func:`poslens.mechanisms.sink_split.sink_path_split`, intervals from ``ci_low``/``ci_high``.
"""

from __future__ import annotations

import pandas as pd
from plotly.subplots import make_subplots

from poslens.measurement.figure import Figure, add_interval_bars, case_label

__all__ = ["plot_sink_split"]

#: The bars of each readout's panel: the derived metric and its words.
BARS = (
    ("sink_total", "sink path's total (f₀ − f_s)"),
    ("phi_m", "mask's count (φ_m)"),
    ("phi_p", "key 0's phase (φ_p)"),
    ("interaction", "interaction"),
)
#: The readouts, in panel order, with their words.
READOUT_WORDS = {"V": "V: position along the unedited code", "R2": "R²: position content (probe refitted)"}


def plot_sink_split(table: pd.DataFrame) -> Figure:
    """The split on both readouts: per readout, the sink path's total and its Shapley parts (layers ≥ 2, 95% intervals).

    Each panel's title gives share_m, the mask's count's share of the two named channels, with its interval.

    Args:
        table: The sink-split part's table.

    Returns:
        The figure.

    Raises:
        ValueError: When the table holds no derived rows of the split (no sink-reading head, or another table).

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention="split", layer=-1, head=-1, query_window="all",
        ...                           metric=m, value=0.1, ci_low=0.0, ci_high=0.2, readout=r, kind="derived")
        ...                      for m in ("sink_total", "phi_m", "phi_p", "interaction", "share_m") for r in ("V", "R2")])
        >>> len(plot_sink_split(rows).data)
        2
    """
    if "readout" not in table or "kind" not in table:
        raise ValueError("plot('sink-split') draws the table of the sink path's split (poslens sink-split); this table is another")
    rows = table[(table["kind"] == "derived") & (table["layer"] == -1)]
    if rows.empty:
        raise ValueError("the table holds no figure of the split (no sink-reading head was found, so nothing was split)")
    first = rows.iloc[0]
    run = case_label(str(first["model"]), str(first["variant"]))
    titles = []
    for readout, words in READOUT_WORDS.items():
        share = rows[(rows["readout"] == readout) & (rows["metric"] == "share_m")]
        said = "" if share.empty else f"; share_m {share['value'].iloc[0]:.3g} [{share['ci_low'].iloc[0]:.3g}, {share['ci_high'].iloc[0]:.3g}]"
        titles.append(words + said)
    fig = make_subplots(rows=1, cols=len(READOUT_WORDS), subplot_titles=titles)
    for col, readout in enumerate(READOUT_WORDS, start=1):
        mine = rows[rows["readout"] == readout]
        picked = [(words, mine[mine["metric"] == metric].iloc[0]) for metric, words in BARS if (mine["metric"] == metric).any()]
        add_interval_bars(fig, picked, readout, col)
    fig.update_yaxes(showticklabels=False, col=2)
    fig.update_layout(
        title=dict(text="The sink path's split, in the sink-reading heads, mean over layers ≥ 2 (95% intervals)", subtitle=dict(text=run)),
        height=380,
        margin=dict(l=230),
    )
    return Figure(fig)
