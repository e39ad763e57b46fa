"""Every figure of a measurement with its 95% interval over groups: the in-sample ones jackknifed, the held-out ones from their folds.

:func:`metrics_with_intervals` is what a measurement's table is made from
(:func:`poslens.measurement.table.tidy`); the figures themselves come from
:mod:`poslens.fit.metrics`, the intervals from :mod:`poslens.fit.stats`.
Arrays are indexed [query_window, layer + 1, head + 1], the means last.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from poslens.fit.bounds import clip_interval
from poslens.fit.metrics import HELD_OUT, held_out_metrics, probe_metrics
from poslens.fit.replicates import Replicates
from poslens.fit.stats import fold_interval
from poslens.fit.sums import CellSums


def metrics_with_intervals(
    sums: CellSums, probe: bool = True, replicates: Replicates | None = None
) -> dict[
    str,
    tuple[
        Float[np.ndarray, "query_windows layers_and_mean heads_and_mean"],
        Float[np.ndarray, "query_windows layers_and_mean heads_and_mean"],
        Float[np.ndarray, "query_windows layers_and_mean heads_and_mean"],
    ],
]:
    """Every metric as (value, ci_low, ci_high) arrays [query_window, layer + 1, head + 1].

    In-sample metrics get delete-one-group jackknife intervals (each replicate
    refits P and the mean-field counterfactual's g and β without group g; the
    per-sequence counterfactual's cells are the replicate's own, with A refitted
    without group g too: :meth:`~poslens.fit.counterfactual_cells.CounterfactualCells.leave_out`); held-out ones
    (``*_heldout``, ``probe_r2``) intervals from their per-fold spread;
    ``leakage_pattern_bias`` is in-sample minus held-out, jackknifed per fold. The interval of a figure with a
    hard bound (an R², a ΔR², a mass) is clipped to it (:func:`~poslens.fit.bounds.clip_interval`).

    Args:
        sums: Grouped sums of one measurement.
        probe: Whether to fit the position probe (``probe_r2``).
        replicates: The in-sample fits of ``sums`` (:meth:`Replicates.of`), when the caller keeps them; else fitted here.

    Returns:
        ``{metric name: (value, ci_low, ci_high)}``, each [query_window, layer + 1, head + 1].

    Raises:
        ValueError: When the sums have fewer than 2 groups (no interval can be formed).

    Example:
        >>> value, low, high = metrics_with_intervals(sums)["c_res"]  # doctest: +SKIP
        >>> from poslens.fit.binning import Binning
        >>> metrics_with_intervals(CellSums.zeros(groups=1, layers=1, heads=1, binning=Binning(8)))
        Traceback (most recent call last):
        ...
        ValueError: intervals need at least 2 groups of sequences
    """
    if sums.n_groups < 2:
        raise ValueError("intervals need at least 2 groups of sequences")
    fits = Replicates.of(sums) if replicates is None else replicates
    estimate = fits.estimate
    result = {name: fits.interval(name) for name in estimate}
    pooled, folds = held_out_metrics(sums)
    for name in HELD_OUT:
        low, high = fold_interval(pooled[name], folds[name])
        result[name] = (pooled[name], np.asarray(low), np.asarray(high))
    bias = estimate["leakage_pattern"] - pooled["leakage_pattern_heldout"]
    low, high = fold_interval(bias, estimate["leakage_pattern"][None] - folds["leakage_pattern_heldout"])
    result["leakage_pattern_bias"] = (bias, np.asarray(low), np.asarray(high))
    if not probe:
        return _clipped(result)
    probe_r2, probe_r2_folds = probe_metrics(sums)
    low, high = fold_interval(probe_r2, probe_r2_folds)
    shape = estimate["c_res"].shape

    def in_head_mean_column(
        v: Float[np.ndarray, "query_windows layers_and_mean"] | float,
    ) -> Float[np.ndarray, "query_windows layers_and_mean heads_and_mean"]:
        full = np.full(shape, np.nan)
        full[:, :, -1] = v
        return full

    result["probe_r2"] = (in_head_mean_column(probe_r2), in_head_mean_column(low), in_head_mean_column(high))
    return _clipped(result)


def _clipped(result: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every interval kept inside its metric's hard bound (:data:`~poslens.fit.bounds.HARD_BOUNDS`)."""
    return {name: (value, *clip_interval(name, value, low, high)) for name, (value, low, high) in result.items()}
