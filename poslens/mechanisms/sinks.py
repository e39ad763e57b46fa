"""Attention sinks and sink-reading heads (methodology §6).

The sink score of a head is the mean over queries i ≥ 1 of a_i0, the
``key0_mass`` row feature of a measurement over the ``all`` query window. A head is
sink-reading if its score is at least τ (default 0.3). :func:`sink_heads`
joins the sink-reading heads with their C_res and C_mask, one row per head.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import pandas as pd

from poslens.errors import InputError, ParameterTypeError
from poslens.measurement.result import Result
from poslens.measurement.table import COLUMNS
from poslens.options import DEFAULTS

DEFAULT_TAU = DEFAULTS.tau


def sink_table(result: Result, tau: float = DEFAULT_TAU) -> pd.DataFrame:
    """Sink scores per head (metric ``sink_score``) and sink-reading head counts.

    Counts (metric ``sink_heads``) are per layer (head = −1) and for the model
    (layer = −1, all layers); the interval counts heads whose score interval
    lies wholly above τ (low) and heads whose interval reaches τ (high).

    Args:
        result: A measured result with per-head ``key0_mass`` rows.
        tau: The sink-score threshold τ.

    Returns:
        The ``sink_score`` and ``sink_heads`` rows, in the tidy schema.

    Raises:
        ValueError: When the result has no per-head ``key0_mass`` rows.

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


def sink_reading_heads(result: Result, tau: float = DEFAULT_TAU, rows: str = "all") -> list[tuple[int, int]]:
    """(layer, head) of every head whose sink score is ≥ τ, in layer order.

    ``rows`` says which queries the score averages: ``"all"``, every query i ≥ 1 (the sink score of
    :func:`sink_table`, where a query that a sliding window keeps from key 0 counts 0), or ``"visible"``,
    on a layer whose sliding window is shorter than the sequences only the queries 1 ≤ i < W that see key 0
    (:func:`key0_means`; the sink path's split reads its heads so, methodology §13.1). On a layer without
    such a window the two are the same score.

    Args:
        result: A measured result (``rows="visible"`` needs its sums where a layer has a window).
        tau: The sink-score threshold τ.
        rows: ``"all"`` or ``"visible"``.

    Returns:
        ``[(layer, head)]``.

    Raises:
        InputError: When ``rows`` is neither.

    Example:
        >>> sink_reading_heads(result, tau=0.3)[:3]  # doctest: +SKIP
        [(1, 0), (1, 4), (2, 7)]
    """
    if rows not in ("all", "visible"):
        raise InputError(f"rows must be 'all' or 'visible', got {rows!r}")
    table = sink_table(result, tau)
    scores = table[table["metric"] == "sink_score"]
    score = {(int(layer), int(head)): float(value) for layer, head, value in zip(scores["layer"], scores["head"], scores["value"], strict=True)}
    if rows == "visible":
        windows = result.meta.get("model", {}).get("window") or []
        t = result.meta.get("corpus", {}).get("seq_len") or (result.sums.row_count.shape[-1] if result.sums is not None else None)
        hidden = [key for key in score if key[0] < len(windows) and windows[key[0]] and t and windows[key[0]] < t]
        if hidden:
            score.update(key0_means(result, hidden))
    return sorted(key for key, value in score.items() if value >= tau)


def key0_means(result: Result, heads: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """Mean of a_i0 over queries 1 ≤ i that can see key 0, per head, from a result's sums.

    Used by the sink-path ablation: the constant that replaces a_i0. Rows where
    a sliding window hides key 0 are left out of the mean.

    Args:
        result: A measured result that kept its sums.
        heads: ``(layer, head)`` pairs.

    Returns:
        ``{(layer, head): mean a_i0}``.

    Raises:
        ValueError: When the result kept no sums.

    Example:
        >>> key0_means(result, [(1, 0)])  # doctest: +SKIP
        {(1, 0): 0.71...}
    """
    if result.sums is None:
        raise ValueError("this result kept no sums; measure it again (poslens.measurement.pipeline keeps them)")
    sliding_windows = result.meta.get("model", {}).get("window")
    features = result.sums.row_features  # [L, H, F, T], feature 0 = a_i0
    counts = result.sums.row_count
    out = {}
    for layer, head in heads:
        width = sliding_windows[layer] if sliding_windows else None
        t = features.shape[-1]
        stop = min(t, width) if width else t
        visible = np.arange(1, stop)
        out[(layer, head)] = float(features[layer, head, 0, visible].sum() / counts[visible].sum())
    return out


SINK_HEAD_METRICS = ("sink_score", "c_res", "c_mask")


def sink_heads(result: Result, tau: float = DEFAULT_TAU, query_window: str = "all") -> pd.DataFrame:
    """The sink-reading heads of a measurement, each with its sink score, C_res and C_mask and their 95% intervals.

    One row per head whose sink score (the mean over queries i ≥ 1 of a_i0,
    metric ``key0_mass`` in window ``all``) is at least ``tau``: the heads of
    :func:`sink_reading_heads`, in layer order. Its columns are ``layer``,
    ``head``, then for each of ``sink_score``, ``c_res`` and ``c_mask`` the
    value and its interval, ``<metric>_ci_low`` and ``<metric>_ci_high``. C_res
    is the part of the head's absolute-position leakage that the residual
    stream supplies, C_mask the part that the causal mask's normalization
    reproduces (methodology §4), both in ``query_window``. A head whose
    C_res or C_mask the fit left undefined in that query window holds NaN there.
    ``frame.attrs`` records ``tau``, ``query_window`` and the ``run``
    (a dict of model, variant, intervention, as in
    :meth:`~poslens.measurement.result.Result.heads`). No head reaching ``tau`` gives an empty
    frame with these columns. (The ``sink_heads`` metric of :func:`sink_table`
    is the count of these heads per layer.)

    Args:
        result: a measurement (:func:`poslens.measure`) of one run: one model, variant and intervention.
        tau: the sink-score threshold τ, in (0, 1].
        query_window: the window of C_res and C_mask, ``"all"`` (queries i ≥ 1) or ``"early"`` (1 ≤ i < Q).

    Returns:
        The sink-reading heads, one row each.

    Raises:
        ParameterTypeError: ``result`` is not a Result, ``tau`` not a number, or ``query_window`` not a str.
        InputError: ``tau`` outside (0, 1]; the result lacks per-head ``key0_mass`` (window ``all``),
            ``c_res`` or ``c_mask`` rows in the query window (a sinks or fingerprint table, say);
            or it holds several runs, or one run's rows twice.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=16)
        >>> result = poslens.measure(model, corpus, groups=2, early=8, progress=False)
        >>> table = sink_heads(result, tau=0.05)
        >>> list(table.columns[:5]), bool((table["sink_score"] >= 0.05).all())
        (['layer', 'head', 'sink_score', 'sink_score_ci_low', 'sink_score_ci_high'], True)
        >>> sink_heads(result, tau=1.5)
        Traceback (most recent call last):
        poslens.errors.InputError: tau must lie in (0, 1] (a head reads the sink when its sink score is ≥ τ), got 1.5
    """
    if not isinstance(result, Result):
        raise ParameterTypeError(f"result must be a poslens Result (from poslens.measure), got {type(result).__name__}")
    if not isinstance(tau, numbers.Real) or isinstance(tau, bool):
        raise ParameterTypeError(f"tau must be a number in (0, 1], got {type(tau).__name__} {tau!r}")
    if not (math.isfinite(float(tau)) and 0 < float(tau) <= 1):
        raise InputError(f"tau must lie in (0, 1] (a head reads the sink when its sink score is ≥ τ), got {tau}")
    if not isinstance(query_window, str):
        raise ParameterTypeError(f"query_window must be a str ('all' or 'early'), got {type(query_window).__name__} {query_window!r}")
    tau = float(tau)
    table = result.table
    if not set(COLUMNS) <= set(table.columns):
        raise InputError(
            f"this result's table lacks the columns {', '.join(c for c in COLUMNS if c not in table.columns)}; "
            "sink_heads reads a measurement made by poslens.measure"
        )
    per_head = table[(table["layer"] >= 0) & (table["head"] >= 0)]
    wanted = {"key0_mass": "all", "c_res": query_window, "c_mask": query_window}
    held = set(per_head["metric"])
    missing = [metric for metric in wanted if metric not in held]
    if missing:
        shown = ", ".join(sorted(map(str, held))) if len(held) <= 6 else f"{len(held)} others"
        raise InputError(
            f"sink_heads needs per-head rows of {', '.join(repr(m) for m in missing)}, which this result lacks "
            f"(its per-head metrics: {shown or 'none'}); it reads a measurement made by poslens.measure, "
            "not a sinks or fingerprint table"
        )
    rows = {}
    for metric, query_window_of_metric in wanted.items():
        of_metric = per_head[per_head["metric"] == metric]
        rows[metric] = of_metric[of_metric["query_window"] == query_window_of_metric]
        if rows[metric].empty:
            query_windows = ", ".join(map(str, dict.fromkeys(of_metric["query_window"])))
            raise InputError(
                f"this result has no per-head {metric!r} rows in window {query_window_of_metric!r} (its windows for {metric!r}: "
                f"{query_windows}); use query_window= one of them"
            )
    runs = pd.concat(rows.values())[["model", "variant", "intervention"]].drop_duplicates()
    if len(runs) > 1:
        listed = "; ".join("/".join(map(str, run)) for run in runs.itertuples(index=False))
        raise InputError(
            f"sink_heads reads one run; this result holds {len(runs)} (model/variant/intervention: {listed}): "
            "keep one run's rows, e.g. Result(result.table.query(\"intervention == 'none'\"), result.meta)"
        )
    for metric, part in rows.items():
        if part.duplicated(["layer", "head"]).any():
            raise InputError(f"this result repeats per-head {metric!r} rows (the same run stacked twice?); sink_heads reads one measurement")
    chosen = pd.DataFrame(sink_reading_heads(result, tau), columns=["layer", "head"], dtype="int64")
    scores = sink_table(result, tau)
    rows["sink_score"] = scores[scores["metric"] == "sink_score"]
    out = chosen
    for metric in SINK_HEAD_METRICS:
        part = rows[metric][["layer", "head", "value", "ci_low", "ci_high"]].astype({"layer": "int64", "head": "int64"})
        part = part.rename(columns={"value": metric, "ci_low": f"{metric}_ci_low", "ci_high": f"{metric}_ci_high"})
        out = out.merge(part, on=["layer", "head"], how="left", validate="one_to_one")
    out.attrs = {"tau": tau, "query_window": query_window, "run": dict(zip(runs.columns, map(str, runs.iloc[0]), strict=False))}
    return out
