"""Attention sinks and sink-reading heads (methodology §6).

The sink score of a head is the mean over queries i ≥ 1 of a_i0, the
``key0_mass`` row feature of a measurement over the ``all`` window. A head is
sink-reading if its score is at least τ (default 0.3).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from poslens.measurement.result import COLUMNS, Result

DEFAULT_TAU = 0.3


def sink_table(result: Result, tau: float = DEFAULT_TAU) -> pd.DataFrame:
    """Sink scores per head (metric ``sink_score``) and sink-reading head counts.

    Counts (metric ``sink_heads``) are per layer (head = −1) and for the model
    (layer = −1, all layers); the interval counts heads whose score interval
    lies wholly above τ (low) and heads whose interval reaches τ (high).

    Example:
        >>> table = sink_table(result)  # doctest: +SKIP
        >>> table.query("metric == 'sink_heads' and layer == -1")["value"]  # doctest: +SKIP
    """
    scores = result.select("key0_mass", "all")
    scores = scores[(scores["head"] >= 0) & (scores["layer"] >= 0)].copy()
    if scores.empty:
        raise ValueError("the result has no per-head key0_mass rows; measure with poslens.measurement.pipeline first")
    scores["metric"] = "sink_score"
    rows = []
    for layer, part in scores.groupby("layer"):
        rows.append(_count_row(part, layer, tau))
    rows.append(_count_row(scores, -1, tau))
    counts = pd.DataFrame(rows)
    for column in ("model", "variant", "intervention", "query_window"):
        counts[column] = scores[column].iloc[0]
    return pd.concat([scores[COLUMNS], counts[COLUMNS]], ignore_index=True)


def _count_row(part: pd.DataFrame, layer: int, tau: float) -> dict:
    return {
        "layer": layer,
        "head": -1,
        "metric": "sink_heads",
        "value": float((part["value"] >= tau).sum()),
        "ci_low": float((part["ci_low"] >= tau).sum()),
        "ci_high": float((part["ci_high"] >= tau).sum()),
    }


def sink_reading_heads(result: Result, tau: float = DEFAULT_TAU) -> list[tuple[int, int]]:
    """(layer, head) of every head whose sink score is ≥ τ, in layer order.

    Example:
        >>> sink_reading_heads(result, tau=0.3)[:3]  # doctest: +SKIP
        [(1, 0), (1, 4), (2, 7)]
    """
    table = sink_table(result, tau)
    heads = table[(table["metric"] == "sink_score") & (table["value"] >= tau)]
    return sorted((int(layer), int(head)) for layer, head in zip(heads["layer"], heads["head"]))


def key0_means(result: Result, heads: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """Mean of a_i0 over queries 1 ≤ i that can see key 0, per head, from a result's sums.

    Used by the sink-path ablation: the constant that replaces a_i0. Rows where
    a sliding window hides key 0 are left out of the mean.

    Example:
        >>> key0_means(result, [(1, 0)])  # doctest: +SKIP
        {(1, 0): 0.71...}
    """
    if result.sums is None:
        raise ValueError("this result kept no sums; measure it again (poslens.measurement.pipeline keeps them)")
    windows = result.meta.get("model", {}).get("window")
    features = result.sums.row_features  # [L, H, F, T], feature 0 = a_i0
    counts = result.sums.row_count
    out = {}
    for layer, head in heads:
        width = windows[layer] if windows else None
        t = features.shape[-1]
        stop = min(t, width) if width else t
        visible = np.arange(1, stop)
        out[(layer, head)] = float(features[layer, head, 0, visible].sum() / counts[visible].sum())
    return out
