"""Figures of the path-specific tests (methodology §12) from their table: the probe by layer, the split of the sink path, the doses.

No statistics here: every number is read from the table of
:func:`poslens.mechanisms.path_tests.path_specific_tests`, intervals from
``ci_low``/``ci_high``.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from poslens.measurement.figure import Figure, add_interval_bars, case_label, interval_error_bars

__all__ = ["plot_path_doses", "plot_path_probe", "plot_path_split"]

_PROBES = {"resid_probe_r2": "residual stream entering the block", "attn_out_probe_r2": "the block's attention output"}


def _run(rows: pd.DataFrame) -> str:
    runs = list(dict.fromkeys(zip(rows["model"].astype(str), rows["variant"].astype(str), strict=False)))
    if len(runs) != 1:
        raise ValueError(f"the figure draws one run; these rows hold {len(runs)}")
    return case_label(*runs[0])


def _edit_words(label: str) -> str:
    match = re.match(r"^key([01])-phase:D=(\w+)$", label)
    if match:
        return ("key 0's phase frozen" if match.group(1) == "0" else "sham: key 1's phase frozen") + f", D = {match.group(2)}"
    match = re.match(r"^sink-mask-only:(.+)$", label)
    if match:
        return f"mask-only sink profile, λ = {match.group(1)}"
    return {"none": "unedited", "sink-ablation": "sink-path ablation"}.get(label, label)


def plot_path_probe(table: pd.DataFrame, metric: str = "resid_probe_r2") -> Figure:
    """The held-out probe R² of log(i + 1) by layer: unedited, with key 0's phase frozen at each D, and under each sham.

    Args:
        table: The path-specific tests' table.
        metric: ``resid_probe_r2`` (the residual stream entering each block) or ``attn_out_probe_r2``.

    Returns:
        The figure.

    Raises:
        ValueError: When the table holds no per-layer level rows of ``metric``, or several runs.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention=iv, layer=layer, head=-1, query_window="all",
        ...                           metric="resid_probe_r2", value=0.5, ci_low=0.4, ci_high=0.6, kind="level", reference="",
        ...                           query_bin=-1) for iv in ("none", "key0-phase:D=8", "key1-phase:D=8") for layer in (0, 1)])
        >>> [trace.name for trace in plot_path_probe(rows).data]
        ['unedited', "key 0's phase frozen, D = 8", "sham: key 1's phase frozen, D = 8"]
    """
    rows = table[(table["metric"] == metric) & (table["kind"] == "level") & (table["layer"] >= 0)]
    rows = rows[rows["intervention"].astype(str).str.match(r"^(none|key[01]-phase:D=\w+)$")]
    if rows.empty:
        raise ValueError(f"no per-layer level rows of {metric!r}")
    run = _run(rows)
    fig = go.Figure()
    labels = sorted(set(rows["intervention"].astype(str)), key=lambda s: (s != "none", s.startswith("key1"), len(s), s))
    for label in labels:
        part = rows[rows["intervention"] == label].sort_values("layer")
        line = dict(color="black", width=3) if label == "none" else dict(dash="dot") if label.startswith("key1") else dict()
        fig.add_trace(
            go.Scatter(x=part["layer"], y=part["value"], error_y=interval_error_bars(part), mode="lines+markers", name=_edit_words(label), line=line)
        )
    fig.update_layout(
        title=dict(
            text=f"Position in the {_PROBES.get(metric, metric)}: held-out probe R² of log(i + 1) by layer",
            subtitle=dict(text=f"{run}; at layer l, every layer < l edited; 95% intervals from the folds"),
        ),
        xaxis_title="layer l",
        yaxis_title="held-out R²",
        height=460,
    )
    return Figure(fig)


#: The differences the split of the sink path shows: (edit, reference, what it is).
SPLIT = (
    ("key0-phase:D=64", "none", "key 0's phase frozen (D = 64)"),
    ("key1-phase:D=64", "none", "sham: key 1's phase frozen (D = 64)"),
    ("sink-mask-only:1", "none", "rest at key 0: mask-only profile − unedited"),
    ("sink-ablation", "sink-mask-only:1", "the mask's channel: ablation − mask-only profile"),
    ("sink-ablation", "none", "sink-path ablation − unedited"),
)


def plot_path_split(table: pd.DataFrame, metrics: tuple[str, ...] = ("resid_probe_r2_ge2", "leakage_pattern_ge2")) -> Figure:
    """The split of the sink path, beside the key-0 phase freeze and its sham: paired changes of each readout (layers ≥ 2).

    Args:
        table: The path-specific tests' table.
        metrics: The readouts, one panel each (layer −1, all queries).

    Returns:
        The figure.

    Raises:
        ValueError: When none of :data:`SPLIT`'s differences is in the table.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention=e, layer=-1, head=-1, query_window="all", metric=m,
        ...                           value=-0.1, ci_low=-0.2, ci_high=0.0, kind="difference", reference=r, query_bin=-1)
        ...                      for e, r, _ in SPLIT for m in ("resid_probe_r2_ge2", "leakage_pattern_ge2")])
        >>> len(plot_path_split(rows).data)
        2
    """
    rows = table[(table["kind"] == "difference") & (table["layer"] == -1) & (table["query_bin"] == -1) & (table["query_window"] == "all")]
    present = [(e, r, words) for e, r, words in SPLIT if len(rows[(rows["intervention"] == e) & (rows["reference"] == r)])]
    if not present:
        raise ValueError("none of the sink path's differences (the freeze, the sham, the mask-only profile, the ablation) is in the table")
    run = _run(rows)
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[f"Δ {m}" for m in metrics])
    for col, metric in enumerate(metrics, start=1):
        picked = []
        for edit, reference, words in present:
            hit = rows[(rows["intervention"] == edit) & (rows["reference"] == reference) & (rows["metric"] == metric)]
            if len(hit):
                picked.append((words, hit.iloc[0]))
        add_interval_bars(fig, picked, metric, col)
    fig.update_yaxes(showticklabels=False, col=2)
    fig.update_layout(
        title=dict(text="The sink path split: paired changes, mean over layers ≥ 2 (95% intervals)", subtitle=dict(text=run)),
        height=420,
        margin=dict(l=320),
    )
    return Figure(fig)


def plot_path_doses(table: pd.DataFrame, metric: str = "resid_probe_r2_ge2") -> Figure:
    """Dose-responses: the change of ``metric`` against the unedited run over the freeze's offset D and the profile's λ.

    Args:
        table: The path-specific tests' table.
        metric: A layer −1 readout (default: the residual probe R² over layers ≥ 2).

    Returns:
        The figure: one panel over D (key 0 and the key-1 sham), one over λ (from λ = 0, the unedited run).

    Raises:
        ValueError: When the table holds neither family's differences of ``metric``.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention=e, layer=-1, head=-1, query_window="all",
        ...                           metric="resid_probe_r2_ge2", value=-0.1, ci_low=-0.2, ci_high=0.0, kind="difference",
        ...                           reference="none", query_bin=-1) for e in ("key0-phase:D=8", "key0-phase:D=64", "sink-mask-only:1")])
        >>> [trace.name for trace in plot_path_doses(rows).data]
        ["key 0's phase", 'mask-only profile']
    """
    rows = table[
        (table["kind"] == "difference")
        & (table["reference"] == "none")
        & (table["metric"] == metric)
        & (table["layer"] == -1)
        & (table["query_bin"] == -1)
    ]
    families: dict[str, list[tuple[float, Any]]] = {"key0": [], "key1": [], "mask": []}
    for _, row in rows.iterrows():
        label = str(row["intervention"])
        if match := re.match(r"^key([01])-phase:D=(\d+)$", label):
            families[f"key{match.group(1)}"].append((float(match.group(2)), row))
        elif match := re.match(r"^sink-mask-only:(.+)$", label):
            families["mask"].append((float(match.group(1)), row))
    if not any(families.values()):
        raise ValueError(f"no differences of {metric!r} for the key-phase freeze or the mask-only profile")
    run = _run(rows)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("over the frozen offset D", "over the mask-only profile's dose λ"))
    for key, name, col, line in (
        ("key0", "key 0's phase", 1, dict()),
        ("key1", "sham: key 1's phase", 1, dict(dash="dot")),
        ("mask", "mask-only profile", 2, dict()),
    ):
        points = sorted(families[key], key=lambda p: p[0])
        if key == "mask" and points:
            points = [(0.0, None), *points]
        if not points:
            continue
        x = [d for d, _ in points]
        y = [0.0 if r is None else float(r["value"]) for _, r in points]
        up = [0.0 if r is None else float(r["ci_high"] - r["value"]) for _, r in points]
        down = [0.0 if r is None else float(r["value"] - r["ci_low"]) for _, r in points]
        fig.add_trace(
            go.Scatter(x=x, y=y, mode="lines+markers", name=name, line=line, error_y=dict(type="data", array=up, arrayminus=down, visible=True)),
            row=1,
            col=col,
        )
    fig.update_xaxes(type="log", title_text="D", row=1, col=1)
    fig.update_xaxes(title_text="λ", row=1, col=2)
    fig.add_hline(y=0, line=dict(color="grey", dash="dot"))
    fig.update_yaxes(title_text=f"Δ {metric} (edited − unedited)", row=1, col=1)
    fig.update_layout(title=dict(text=f"Dose-responses of {metric}", subtitle=dict(text=run)), height=420)
    return Figure(fig)
