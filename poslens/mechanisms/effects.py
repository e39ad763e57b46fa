"""Effects of an intervention against a paired baseline (methodology §7): the reduction of a figure, and its change.

Baseline and intervention runs use the same corpus and the same groups, so
the interval comes from a paired delete-one-group jackknife: each replicate
refits both runs without group g and takes 1 − after/before
(:func:`reduction`) or after − before (:func:`paired_difference`). Both are
available per layer (head −1) and, with ``per_head=True``, per head.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

import numpy as np
import pandas as pd

from poslens.fit.sums import QUERY_WINDOWS
from poslens.measurement.result import Result
from poslens.measurement.table import DEFAULT_QUERY_WINDOW, tidy

__all__ = ["paired_difference", "reduction"]


def reduction(before: Result, after: Result, metric: str = "c_res", query_window: str = DEFAULT_QUERY_WINDOW, per_head: bool = False) -> pd.DataFrame:
    """1 − metric(after) / metric(before), per layer ≥ 1 (head = −1) and over layers ≥ 1 (layer = −1); per head too if asked.

    Rows use the tidy schema with metric ``reduction``, the query window asked for,
    and ``after``'s intervention label. Both results must keep their sums and
    come from the same model, corpus and grouping. ``metric`` is one of the
    figures refitted from the cell sums (:func:`poslens.fit.metrics.all_metrics`;
    not the held-out or probe figures), ``query_window`` ``early`` or ``all``;
    anything else raises ``ValueError`` naming the choices. Layer 0 is left out:
    C_res ≈ 0 there by construction, and the ratio is noise over noise.

    Args:
        before: The baseline result.
        after: The intervention's result, on the same corpus and grouping.
        metric: The figure to compare (refitted from the sums).
        query_window: ``early`` (the default, :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW`) or ``all``.
        per_head: Also give each head's reduction (layers ≥ 1, heads ≥ 0), each with its paired interval.

    Returns:
        The reduction per layer and over layers (and per head), with intervals, in the tidy schema.

    Raises:
        ValueError: When the query window or metric is unknown, a result lacks its sums, or the two runs
            differ in corpus or grouping.

    Example:
        >>> base = poslens.measure(model, corpus)                                            # doctest: +SKIP
        >>> swap = poslens.measure(model, corpus, interventions=[BosReplacement("mean")])   # doctest: +SKIP
        >>> reduction(base, swap).query("layer == -1")[["value", "ci_low", "ci_high"]]       # doctest: +SKIP
        >>> poslens.Result(reduction(base, swap, per_head=True)).heads("reduction", intervals=True)  # doctest: +SKIP
    """

    def ratio(b: np.ndarray, a: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 - a / b

    estimate, low, high = _paired(before, after, metric, query_window, ratio, "reduction()")
    keep = np.zeros(estimate.shape, dtype=bool)
    keep[:, -1] = True  # head = −1 aggregates
    if per_head:
        keep[:, :] = True
    keep[0] = False  # layer 0: C_res ≈ 0 by construction, the ratio is noise over noise
    return _rows(before, after, "reduction", query_window, keep, estimate, low, high)


def paired_difference(
    before: Result, after: Result, metric: str = "c_res", query_window: str = DEFAULT_QUERY_WINDOW, per_head: bool = True
) -> pd.DataFrame:
    """metric(after) − metric(before) per layer, head and over layers, with the paired jackknife's 95% interval.

    The change the intervention makes, in the metric's own units, each row's interval from the paired
    delete-one-group jackknife: the sequence-to-sequence noise both runs share cancels, so the interval is
    narrower than one read off the two runs' own intervals. The rows keep ``metric``'s name and ``after``'s
    intervention label, with two more columns: ``kind`` = ``"difference"`` and ``reference`` = ``before``'s
    intervention label (as the path-specific tests' table marks its differences). Layer 0 is kept.

    Args:
        before: The baseline result.
        after: The intervention's result, on the same corpus and grouping.
        metric: The figure to compare (refitted from the cell sums, as :func:`reduction` takes it).
        query_window: ``early`` (the default, :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW`) or ``all``.
        per_head: Give every head's difference (default), not only the per-layer aggregates (head −1).

    Returns:
        The tidy rows plus ``kind`` and ``reference``.

    Raises:
        ValueError: As :func:`reduction`.

    Example:
        >>> change = paired_difference(base, swap)                                              # doctest: +SKIP
        >>> poslens.Result(change).heads_excluding_zero("c_res")                               # doctest: +SKIP
    """

    def minus(b: np.ndarray, a: np.ndarray) -> np.ndarray:
        return a - b

    estimate, low, high = _paired(before, after, metric, query_window, minus, "paired_difference()")
    keep = np.zeros(estimate.shape, dtype=bool)
    keep[:, -1] = True
    if per_head:
        keep[:, :] = True
    rows = _rows(before, after, metric, query_window, keep, estimate, low, high)
    rows["kind"] = "difference"
    rows["reference"] = before.table["intervention"].iloc[0] if len(before.table) else "?"
    return rows


def _paired(
    before: Result, after: Result, metric: str, query_window: str, combine: Callable[[np.ndarray, np.ndarray], np.ndarray], caller: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``combine(before, after)`` of ``metric`` in ``query_window`` on all groups, with its paired jackknife interval.

    Returns (estimate, low, high), each [layer + 1, head + 1], after the checks :func:`reduction` documents.
    """
    if query_window not in QUERY_WINDOWS:
        raise ValueError(f"unknown query window {query_window!r}; {caller} takes: {', '.join(QUERY_WINDOWS)}")
    if before.sums is None or after.sums is None:
        raise ValueError("both results need their cell sums (poslens.measurement.pipeline keeps them; reload with the .sums.npz file)")
    same_shape = before.sums.per_group.pair_count.shape == after.sums.per_group.pair_count.shape
    if not same_shape or not np.array_equal(before.sums.group_sizes, after.sums.group_sizes):
        raise ValueError("baseline and intervention runs must share the corpus and the grouping")
    if before.meta.get("corpus") != after.meta.get("corpus"):
        raise ValueError("baseline and intervention runs used different corpora")
    fits_before, fits_after = before.replicates(), after.replicates()  # fitted once per result, reused by every call
    reducible = sorted(fits_before.estimate)
    if metric not in reducible:
        if metric in set(before.table["metric"]):
            why = f"metric {metric!r} is in the table but is not refitted from the cell sums"
        else:
            close = difflib.get_close_matches(str(metric), reducible, n=1)
            why = f"unknown metric {metric!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
        raise ValueError(f"{why}; {caller} can use: {', '.join(reducible)}")
    return fits_before.paired(fits_after, metric, combine, QUERY_WINDOWS.index(query_window))


def _rows(
    before: Result, after: Result, name: str, query_window: str, keep: np.ndarray, estimate: np.ndarray, low: np.ndarray, high: np.ndarray
) -> pd.DataFrame:
    """The kept entries of one window's arrays as tidy rows named ``name``, with ``after``'s run labels."""
    w = QUERY_WINDOWS.index(query_window)
    shown = np.where(keep, estimate, np.nan)
    arrays = [np.stack([x if i == w else np.full_like(x, np.nan) for i in range(len(QUERY_WINDOWS))]) for x in (shown, low, high)]
    model = after.meta.get("model", {})
    label = after.table["intervention"].iloc[0] if len(after.table) else "?"
    return tidy({name: (arrays[0], arrays[1], arrays[2])}, model.get("model", "?"), model.get("variant", "base"), label)
