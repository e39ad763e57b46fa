"""The rows of a comparison table: paired differences, trends, depth slopes and independent (Welch) differences (methodology §9.1).

Each function turns one or a few cases (:class:`~poslens.mechanisms.comparison_cases.CaseFigures`)
into rows of :data:`COMPARISON_COLUMNS`, each with its jackknife interval,
standard error, degrees of freedom and detectable difference
(:mod:`poslens.mechanisms.comparison_stats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from poslens.fit.stats import jackknife_interval
from poslens.fit.sums import QUERY_WINDOWS
from poslens.mechanisms.comparison_cases import CaseFigures, check_paired
from poslens.mechanisms.comparison_stats import LEVEL, depth_slope_of, detectable_difference, jackknife_se, least_squares_slope, welch_df

#: The columns of a comparison table, in order: the tidy columns, then what the comparison is and how sure.
COMPARISON_COLUMNS = [
    "model",
    "variant",
    "intervention",
    "metric",
    "query_window",
    "layer",
    "head",
    "value",
    "ci_low",
    "ci_high",
    "comparison",
    "kind",
    "reference_model",
    "reference_variant",
    "parameter",
    "se",
    "df",
    "detectable",
]
#: The kinds of comparison row.
KINDS = ("paired", "independent", "trend", "depth-slope")
#: The metrics whose depth slope is taken by default.
DEFAULT_DEPTH_METRICS = ("c_res",)
DEPTH_SUFFIX = "_depth_slope"


@dataclass
class _Quantity:
    """Estimates [query window, K] and replicates [G, query window, K] of one metric, with the K layer labels."""

    estimate: np.ndarray
    replicates: np.ndarray
    layers: list[int]


def _quantities(case: CaseFigures, depth_metrics: tuple[str, ...]) -> dict[str, _Quantity]:
    n = case.n_layers
    out = {m: _Quantity(case.estimate[m], case.replicates[m], list(range(n)) + [-1]) for m in case.estimate}
    if n >= 3:
        for m in depth_metrics:
            if m in case.estimate:
                out[m + DEPTH_SUFFIX] = _Quantity(
                    depth_slope_of(case.estimate[m][:, :n])[:, None], depth_slope_of(case.replicates[m][:, :, :n])[..., None], [-1]
                )
    return out


def _rows(
    estimate: np.ndarray,
    se: np.ndarray,
    df: np.ndarray | float,
    layers: list[int],
    metric: str,
    label: dict[str, Any],
    low: np.ndarray | None = None,
    high: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    df = np.broadcast_to(np.asarray(df, dtype=float), estimate.shape)
    if low is None or high is None:
        half = scipy_stats.t.ppf(0.5 + LEVEL / 2, df) * se
        low, high = estimate - half, estimate + half
    detectable = detectable_difference(se, df)
    rows = []
    for w, query_window in enumerate(QUERY_WINDOWS):
        for k, layer in enumerate(layers):
            if not np.isfinite(estimate[w, k]):
                continue
            rows.append(
                {
                    **label,
                    "metric": metric,
                    "query_window": query_window,
                    "layer": int(layer),
                    "head": -1,
                    "value": float(estimate[w, k]),
                    "ci_low": float(low[w, k]),
                    "ci_high": float(high[w, k]),
                    "se": float(se[w, k]),
                    "df": float(df[w, k]),
                    "detectable": float(detectable[w, k]),
                }
            )
    return rows


def _jackknife_rows(estimate: np.ndarray, replicates: np.ndarray, layers: list[int], metric: str, label: dict[str, Any]) -> list[dict]:
    low, high = jackknife_interval(estimate, replicates, LEVEL)
    return _rows(estimate, jackknife_se(replicates), replicates.shape[0] - 1, layers, metric, label, low, high)


def _label(
    kind: str, comparison: str, case: CaseFigures, variant: str | None = None, reference: CaseFigures | None = None, parameter: str = ""
) -> dict[str, Any]:
    return {
        "model": case.model,
        "variant": variant if variant is not None else case.variant,
        "intervention": case.intervention,
        "comparison": comparison,
        "kind": kind,
        "reference_model": reference.model if reference is not None else "",
        "reference_variant": reference.variant if reference is not None else "",
        "parameter": parameter,
    }


def paired_differences(case: CaseFigures, base: CaseFigures, depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS) -> pd.DataFrame:
    """metric(case) − metric(base) per layer, over layers ≥ 1 and for depth slopes, with a paired jackknife.

    Replicate g is metric_case(without g) − metric_base(without g), each refitted.

    Args:
        case: The variant.
        base: The case it is compared with, measured on the same tokens and groups.
        depth_metrics: The metrics whose depth slopes are compared as well.

    Returns:
        Rows of kind ``paired`` (:data:`COMPARISON_COLUMNS`).

    Raises:
        UnpairedCasesError: When the two were not measured on the same tokens, groups and bins.

    Example:
        >>> est = lambda v: {"c_res": np.full((2, 4), v)}
        >>> reps = lambda v: {"c_res": v + np.array([0.1, -0.1, 0.0])[:, None, None] * np.ones((3, 2, 4))}
        >>> a = CaseFigures("m", "ntk:2", est(1.0), reps(1.0), tokens="t", group_sizes=(2, 2, 2))
        >>> b = CaseFigures("m", "base", est(3.0), reps(3.0), tokens="t", group_sizes=(2, 2, 2))
        >>> rows = paired_differences(a, b).query("metric == 'c_res' and layer == -1")
        >>> rows["comparison"].iloc[0], rows[["value", "ci_low", "ci_high"]].iloc[0].round(12).tolist()   # shared noise cancels
        ('ntk:2 − base', [-2.0, -2.0, -2.0])
    """
    check_paired(case, base)
    qa, qb = _quantities(case, depth_metrics), _quantities(base, depth_metrics)
    label = _label("paired", f"{case.variant} − {base.variant}", case, reference=base)
    rows = []
    for metric, a in qa.items():
        if metric not in qb or a.layers != qb[metric].layers:
            continue
        b = qb[metric]
        rows += _jackknife_rows(a.estimate - b.estimate, a.replicates - b.replicates, a.layers, metric, label)
    return _frame(rows)


def trend(
    cases: list[CaseFigures], x: np.ndarray, family: str, parameter: str, depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS
) -> pd.DataFrame:
    """Least-squares slope over ``cases`` of each figure on ``x``, with a jackknife that deletes group g from every case.

    Args:
        cases: The cases, all measured on the same tokens and groups.
        x: Each case's abscissa (e.g. log₂ α).
        family: The ``variant`` column of the rows (``ntk``, ``window``).
        parameter: The ``parameter`` column (``log2 alpha``, ``log2 window``).
        depth_metrics: The metrics whose depth slopes get a trend too.

    Returns:
        Rows of kind ``trend``, one slope per metric, query window and layer (and per depth slope).

    Raises:
        UnpairedCasesError: When two cases were not measured on the same tokens, groups and bins.
        InputError: When ``x`` has fewer than 2 distinct values.

    Example:
        >>> x = np.log2([1.0, 2.0, 4.0])
        >>> cases = [CaseFigures("m", v, {"c_res": np.full((2, 4), y)}, {"c_res": np.full((3, 2, 4), y)}, tokens="t")
        ...          for v, y in (("base", 3.0), ("ntk:2", 2.0), ("ntk:4", 1.0))]
        >>> float(trend(cases, x, "ntk", "log2 alpha").query("layer == -1 and query_window == 'all' and metric == 'c_res'")["value"].iloc[0])
        -1.0
    """
    for other in cases[1:]:
        check_paired(other, cases[0])
    x = np.asarray(x, dtype=float)
    quantities = [_quantities(c, depth_metrics) for c in cases]
    names = [m for m in quantities[0] if all(m in q and q[m].layers == quantities[0][m].layers for q in quantities)]
    shown = ", ".join(c.variant for c in cases)
    label = _label("trend", f"slope on {parameter} ({shown})", cases[0], variant=family, parameter=parameter)
    rows = []
    for metric in names:
        estimate = least_squares_slope(x, np.stack([q[metric].estimate for q in quantities]))
        replicates = least_squares_slope(x, np.stack([q[metric].replicates for q in quantities]))
        rows += _jackknife_rows(estimate, replicates, quantities[0][metric].layers, metric, label)
    return _frame(rows)


def depth_slopes(case: CaseFigures, depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS) -> pd.DataFrame:
    """One case's depth slopes (per unit fraction of depth, layers ≥ 1) with their group jackknife intervals.

    Args:
        case: The case.
        depth_metrics: The metrics whose depth slope is taken.

    Returns:
        Rows of kind ``depth-slope``, metric ``<metric>_depth_slope``, layer −1.

    Example:
        >>> est = {"c_res": np.array([[0.0, 0.0, 1.0, 2.0, 1.0]] * 2)}
        >>> reps = {"c_res": np.array([[[0.0, 0.0, 1.0, 2.0, 1.0]] * 2] * 3)}
        >>> float(depth_slopes(CaseFigures("m", "base", est, reps))["value"].iloc[0])   # 0 → 2 over x = 1/3 … 1
        3.0
    """
    rows = []
    label = _label("depth-slope", case.variant, case)
    for metric, q in _quantities(case, depth_metrics).items():
        if metric.endswith(DEPTH_SUFFIX):
            rows += _jackknife_rows(q.estimate, q.replicates, q.layers, metric, label)
    return _frame(rows)


def independent_differences(case: CaseFigures, reference: CaseFigures, depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS) -> pd.DataFrame:
    """metric(case) − metric(reference) for cases on different tokens: over layers ≥ 1 and for depth slopes.

    The variance is the sum of the two jackknife variances; the interval and
    ``detectable`` use t with Welch–Satterthwaite degrees of freedom
    (:func:`welch_df`). Depth slopes are per fraction of depth, so models of
    different depths compare.

    Args:
        case: The left side of the difference.
        reference: The right side.
        depth_metrics: The metrics whose depth slopes are compared as well.

    Returns:
        Rows of kind ``independent`` (layer −1 only).

    Example:
        >>> noise = np.array([1, -1, 0, 0.])[:, None, None] * np.ones((4, 2, 4))   # 4 groups each
        >>> a = CaseFigures("g", "base", {"c_res": np.full((2, 4), 2.0)}, {"c_res": 2.0 + noise})
        >>> b = CaseFigures("s", "base", {"c_res": np.full((2, 4), 1.0)}, {"c_res": 1.0 + noise})
        >>> row = independent_differences(a, b).query("metric == 'c_res'").iloc[0]
        >>> row["comparison"], float(row["value"]), round(float(row["se"]) ** 2, 6), float(row["df"])   # se² = 2 · (3/4 · 2), df = 3 + 3
        ('g − s', 1.0, 3.0, 6.0)
    """
    qa, qb = _quantities(case, depth_metrics), _quantities(reference, depth_metrics)
    label = _label("independent", f"{case.model} − {reference.model}", case, reference=reference)
    rows = []
    for metric, a in qa.items():
        if metric not in qb:
            continue
        b = qb[metric]
        ea, eb = a.estimate[:, -1:], b.estimate[:, -1:]  # the mean over layers ≥ 1 (or the depth slope)
        se_a, se_b = jackknife_se(a.replicates[:, :, -1:]), jackknife_se(b.replicates[:, :, -1:])
        df = welch_df(se_a, case.n_groups - 1, se_b, reference.n_groups - 1)
        rows += _rows(ea - eb, np.sqrt(se_a**2 + se_b**2), df, [-1], metric, label)
    return _frame(rows)


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    return frame.astype({"layer": "int64", "head": "int64"}) if len(frame) else empty_comparison_table()


def empty_comparison_table() -> pd.DataFrame:
    """A comparison table without rows: :data:`COMPARISON_COLUMNS` with their dtypes.

    Returns:
        The empty table.

    Example:
        >>> empty_comparison_table().columns.tolist()[:3], len(empty_comparison_table())
        (['model', 'variant', 'intervention'], 0)
    """
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in COMPARISON_COLUMNS})
    numeric = {"layer": "int64", "head": "int64", **{c: "float64" for c in ("value", "ci_low", "ci_high", "se", "df", "detectable")}}
    return frame.astype(numeric)


__all__ = [
    "COMPARISON_COLUMNS",
    "DEFAULT_DEPTH_METRICS",
    "KINDS",
    "depth_slopes",
    "empty_comparison_table",
    "independent_differences",
    "paired_differences",
    "trend",
]
