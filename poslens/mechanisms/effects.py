"""Effects of an intervention: the reduction of a figure against a paired baseline (methodology §7).

Baseline and intervention runs use the same corpus and the same groups, so
the interval comes from a paired delete-one-group jackknife: each replicate
refits both runs without group g and takes 1 − after/before.
"""

from __future__ import annotations

import difflib

import numpy as np
import pandas as pd

from poslens.fit.metrics import all_metrics
from poslens.fit.stats import jackknife_interval
from poslens.fit.sums import QUERY_WINDOWS, SumFields
from poslens.measurement.result import Result
from poslens.measurement.table import tidy


def reduction(before: Result, after: Result, metric: str = "c_res", query_window: str = "early") -> pd.DataFrame:
    """1 − metric(after) / metric(before), per layer ≥ 1 (head = −1) and over layers ≥ 1 (layer = −1).

    Rows use the tidy schema with metric ``reduction``, the query window asked for,
    and ``after``'s intervention label. Both results must keep their sums and
    come from the same model, corpus and grouping. ``metric`` is one of the
    figures refitted from the cell sums (:func:`poslens.fit.metrics.all_metrics`;
    not the held-out or probe figures), ``query_window`` ``early`` or ``all``;
    anything else raises ``ValueError`` naming the choices.

    Args:
        before: The baseline result.
        after: The intervention's result, on the same corpus and grouping.
        metric: The figure to compare (refitted from the sums).
        query_window: ``early`` or ``all``.

    Returns:
        The reduction per layer and over layers, with intervals, in the tidy schema.

    Raises:
        ValueError: When the query window or metric is unknown, a result lacks its sums, or the two runs
            differ in corpus or grouping.

    Example:
        >>> base = poslens.measure(model, corpus)                                            # doctest: +SKIP
        >>> swap = poslens.measure(model, corpus, interventions=[BosReplacement("mean")])   # doctest: +SKIP
        >>> reduction(base, swap).query("layer == -1")[["value", "ci_low", "ci_high"]]       # doctest: +SKIP
    """
    if query_window not in QUERY_WINDOWS:
        raise ValueError(f"unknown query window {query_window!r}; reduction() takes: {', '.join(QUERY_WINDOWS)}")
    if before.sums is None or after.sums is None:
        raise ValueError("both results need their cell sums (poslens.measurement.pipeline keeps them; reload with the .sums.npz file)")
    same_shape = before.sums.per_group.pair_count.shape == after.sums.per_group.pair_count.shape
    if not same_shape or not np.array_equal(before.sums.group_sizes, after.sums.group_sizes):
        raise ValueError("baseline and intervention runs must share the corpus and the grouping")
    if before.meta.get("corpus") != after.meta.get("corpus"):
        raise ValueError("baseline and intervention runs used different corpora")
    reducible = sorted(all_metrics(before.sums.pooled(), before.sums.counterfactual_cells.pooled(), before.sums.binning, before.sums.layer_windows))
    if metric not in reducible:
        if metric in set(before.table["metric"]):
            why = f"metric {metric!r} is in the table but is not refitted from the cell sums"
        else:
            close = difflib.get_close_matches(str(metric), reducible, n=1)
            why = f"unknown metric {metric!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
        raise ValueError(f"{why}; reduction() can use: {', '.join(reducible)}")
    w = QUERY_WINDOWS.index(query_window)

    def ratio(pooled_before: SumFields, cells_before: dict, pooled_after: SumFields, cells_after: dict) -> np.ndarray:
        b = all_metrics(pooled_before, cells_before, before.sums.binning, before.sums.layer_windows)[metric][w]
        a = all_metrics(pooled_after, cells_after, after.sums.binning, after.sums.layer_windows)[metric][w]
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 - a / b

    cf_before, cf_after = before.sums.counterfactual_cells, after.sums.counterfactual_cells
    estimate = ratio(before.sums.pooled(), cf_before.pooled(), after.sums.pooled(), cf_after.pooled())
    replicates = np.stack(
        [ratio(before.sums.leave_out(g), cf_before.leave_out(g), after.sums.leave_out(g), cf_after.leave_out(g)) for g in range(before.sums.n_groups)]
    )
    low, high = jackknife_interval(estimate, replicates)
    layer_only = np.full_like(estimate, np.nan)
    layer_only[:, -1] = estimate[:, -1]  # head = −1 aggregates only
    layer_only[0, -1] = np.nan  # layer 0: C_res ≈ 0 by construction, the ratio is noise over noise
    arrays = [np.stack([x if i == w else np.full_like(x, np.nan) for i in range(2)]) for x in (layer_only, low, high)]
    model = after.meta.get("model", {})
    label = after.table["intervention"].iloc[0] if len(after.table) else "?"
    return tidy({"reduction": tuple(arrays)}, model.get("model", "?"), model.get("variant", "base"), label)
