"""Comparisons between cases by the interval of their difference: paired, trend, depth slope, independent (methodology §9.1).

Two 95% intervals that overlap do not make two cases equal, so cases are
compared by the interval of a difference, each with a delete-one-group
jackknife (methodology §5) and the smallest difference the data could have
detected:

- ``paired``: variants of one model (``ntk:α``, ``window:W``, ``rope-base:θ``)
  measured on the same token ids in the same groups. Replicate g refits both
  cases without group g and takes the difference, so content noise the two
  share cancels. Cases measured on other tokens or groups are refused
  (:class:`~poslens.mechanisms.comparison_cases.UnpairedCasesError`).
- ``trend``: the least-squares slope over cases of a figure on log₂ of the
  variant's parameter (per doubling): NTK α over the ``ntk:α`` cases with the
  base model as α = 1; window W over the ``window:W`` cases with W below the
  sequence length. The base model is *not* a point of the window trend: a
  sliding window of W ≥ T imposes nothing, so the response is flat there and would
  bend the line (the paired rows compare each sliding window with the base). Replicate
  g deletes group g from every case at once.
- ``depth-slope``: one case's slope of a per-layer figure (mean over heads)
  over the fraction of depth x = l / (L − 1), layers 1 … L − 1, so that models
  of 30 and 18 layers compare; metric ``<figure>_depth_slope``. Its paired
  differences and trends come with the other rows.
- ``independent``: models with different tokenizers (each other model's
  ``base`` against the first model's ``base``): aggregates over layers ≥ 1 and
  depth slopes only; the variance is the sum of the two jackknife variances,
  with Welch–Satterthwaite degrees of freedom
  (v₁ + v₂)² / (v₁²/(G₁ − 1) + v₂²/(G₂ − 1)), v = se².

Every interval is value ± t_{0.975, df} · se, with df = G − 1 for the
jackknife as in :func:`poslens.fit.stats.jackknife_interval`. The column
``detectable`` is the minimum detectable difference at two-sided 5% and 80%
power, (t_{0.975, df} + t_{0.80, df}) · se.

Example:
    >>> noise = np.array([0.1, -0.1, 0.0])[:, None, None] * np.ones((3, 2, 4))   # content noise of 3 groups
    >>> base = CaseFigures("m", "base", {"c_res": np.full((2, 4), 1.0)}, {"c_res": 1.0 + noise}, tokens="t")
    >>> ntk = CaseFigures("m", "ntk:4", {"c_res": np.full((2, 4), 0.5)}, {"c_res": 0.5 + noise}, tokens="t")
    >>> row = compare_figures([base, ntk]).query("kind == 'paired' and metric == 'c_res' and layer == -1").iloc[0]
    >>> row["comparison"], float(row["value"]), round(float(row["se"]), 12)   # the noise both share cancels in the difference
    ('ntk:4 − base', -0.5, 0.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from poslens.errors import InputError
from poslens.measurement.result import Result
from poslens.mechanisms.comparison_cases import DEFAULT_METRICS, CaseFigures, case_figures
from poslens.mechanisms.comparison_rows import (
    COMPARISON_COLUMNS,
    DEFAULT_DEPTH_METRICS,
    depth_slopes,
    empty_comparison_table,
    independent_differences,
    paired_differences,
    trend,
)
from poslens.model.variants import parse_variant

#: Where the compare part of table format 1 kept the comparison table: in the cases' metadata, read by :func:`comparison_table`.
META_KEY = "comparisons"


def _parameter(variant: str, kind: str) -> float | None:
    """α of a pure ``ntk:α`` variant (1 for ``base``) or W of a pure ``window:W`` one; None otherwise."""
    try:
        v = parse_variant(variant)
    except InputError:
        return None
    if kind == "ntk":
        if v.sliding_window is None and v.rope_base is None:
            return 1.0 if v.ntk_alpha is None else float(v.ntk_alpha)
        return None
    if v.ntk_alpha is None and v.rope_base is None and v.sliding_window is not None:
        return float(v.sliding_window)
    return None


def compare_figures(figures: list[CaseFigures], depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS) -> pd.DataFrame:
    """Every comparison of methodology §9.1 among the cases: paired, trends, depth slopes, independent.

    Cases are grouped by model and intervention. Within a model, each variant
    is compared pairwise with the ``base`` case; the ``ntk:α`` cases with the
    base (α = 1) give the NTK trend and the ``window:W`` cases with W < T the
    sliding-window trend, each when at least 2 distinct values are present. Each other
    model's ``base`` is compared with the first model's ``base`` as an
    independent sample. Every case gets its depth slopes.

    Args:
        figures: The cases' figures (:func:`case_figures`), in the comparison's order.
        depth_metrics: The metrics whose depth slopes are taken (each must be among the figures' metrics).

    Returns:
        The comparison table (:data:`COMPARISON_COLUMNS`).

    Raises:
        UnpairedCasesError: When variants of one model were measured on other tokens or groups.

    Example:
        >>> cases = [CaseFigures("m", v, {"c_res": np.full((2, 4), y)}, {"c_res": np.full((3, 2, 4), y)}, tokens="t",
        ...                      seq_len=128) for v, y in (("base", 3.0), ("ntk:2", 2.0), ("ntk:4", 1.0))]
        >>> sorted(set(compare_figures(cases)["kind"]))
        ['depth-slope', 'paired', 'trend']
    """
    frames = [depth_slopes(f, depth_metrics) for f in figures]
    by_run: dict[tuple[str, str], list[CaseFigures]] = {}
    for f in figures:
        by_run.setdefault((f.model, f.intervention), []).append(f)
    bases: dict[tuple[str, str], CaseFigures] = {}
    for key, cases in by_run.items():
        base = next((c for c in cases if c.variant in ("base", "")), None)
        if base is not None:
            bases[key] = base
            frames += [paired_differences(c, base, depth_metrics) for c in cases if c is not base]
        ntk = [(a, c) for c in cases if (a := _parameter(c.variant, "ntk")) is not None]
        if len({a for a, _ in ntk}) >= 2:
            ntk.sort(key=lambda item: item[0])
            frames.append(trend([c for _, c in ntk], np.log2([a for a, _ in ntk]), "ntk", "log2 alpha", depth_metrics))
        sliding = [(w, c) for c in cases if (w := _parameter(c.variant, "window")) is not None and (not c.seq_len or w < c.seq_len)]
        if len({w for w, _ in sliding}) >= 2:
            sliding.sort(key=lambda item: item[0])
            frames.append(trend([c for _, c in sliding], np.log2([w for w, _ in sliding]), "window", "log2 window", depth_metrics))
    keys = list(bases)
    for key in keys[1:]:
        if key[1] == keys[0][1] and key[0] != keys[0][0]:
            frames.append(independent_differences(bases[key], bases[keys[0]], depth_metrics))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else empty_comparison_table()


def compare_results(
    results: list[Result], metrics: tuple[str, ...] = DEFAULT_METRICS, depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS
) -> pd.DataFrame:
    """:func:`compare_figures` of measured cases, each refitted from its cell sums (:func:`case_figures`).

    Args:
        results: One result per case, each with its sums.
        metrics: The figures compared.
        depth_metrics: The metrics whose depth slopes are taken.

    Returns:
        The comparison table (:data:`COMPARISON_COLUMNS`).

    Raises:
        InputError: When a result lacks its sums or a metric is unknown.
        UnpairedCasesError: When variants of one model were measured on other tokens or groups.

    Example:
        >>> import torch; from poslens.measurement.pipeline import measure_scores
        >>> t = 16; i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        >>> scores = [(-0.1 * (i - j) + 0.01 * i * (j == 0)).float().masked_fill(j > i, torch.finfo(torch.float32).min).expand(4, 1, t, t)] * 3
        >>> r = measure_scores(scores, groups=2, early=8, row_sums="second-pass")
        >>> r.meta["corpus"] = {"tokens_sha256": "t"}
        >>> compare_results([r])["kind"].unique().tolist()
        ['depth-slope']
    """
    return compare_figures([case_figures(r, metrics) for r in results], depth_metrics)


def comparisons_result(figures: list[CaseFigures], meta: dict[str, Any]) -> Result:
    """The comparisons among the cases (:func:`compare_figures`) as a result of their own, with the cases' provenance.

    Args:
        figures: The cases' figures (:func:`case_figures`), in the comparison's order.
        meta: The provenance of the cases' result (copied; the comparisons record the same run).

    Returns:
        The result: one row per comparison, the columns of :data:`COMPARISON_COLUMNS`.

    Example:
        >>> cases = [CaseFigures("m", v, {"c_res": np.full((2, 4), y)}, {"c_res": np.full((3, 2, 4), y)}, tokens="t")
        ...          for v, y in (("base", 3.0), ("ntk:2", 2.0))]
        >>> sorted(set(comparisons_result(cases, {"cases": []}).table["kind"]))
        ['depth-slope', 'paired', 'trend']
    """
    return Result(compare_figures(figures)[COMPARISON_COLUMNS], dict(meta))


def comparison_table(result: Result) -> pd.DataFrame:
    """C4's comparison table, from the comparisons part (``comparisons.parquet``), or from an older compare part.

    The comparisons part (the second result of :func:`poslens.mechanisms.architectures.compare_cases`) holds the
    rows. A compare part of table format 1 kept them in ``meta["comparisons"]`` (:data:`META_KEY`) of the cases'
    result; they are read from there. The cases' result of table format 2 holds none, and is refused.

    Args:
        result: The comparisons result, or a compare part of table format 1.

    Returns:
        The comparison table (:data:`COMPARISON_COLUMNS`); empty when the result holds no comparison.

    Raises:
        InputError: When ``result`` is the cases' result of table format 2 (its comparisons are a result of their own).

    Example:
        >>> comparison_table(Result(pd.DataFrame())).columns.tolist() == COMPARISON_COLUMNS
        True
        >>> comparison_table(Result(pd.DataFrame({"metric": ["c_res"]}), {"cases": []}))
        Traceback (most recent call last):
        poslens.errors.InputError: this result holds the compared cases (compare.parquet, table format 2), not their comparisons: ...
    """
    if "comparison" in result.table.columns:
        frame = result.table
    elif META_KEY in result.meta:  # table format 1: the table in the cases' metadata
        stored = result.meta[META_KEY]
        if not stored or not stored.get("data"):
            return empty_comparison_table()
        frame = pd.DataFrame(stored["data"], columns=stored["columns"])
    elif "cases" in result.meta:
        raise InputError(
            "this result holds the compared cases (compare.parquet, table format 2), not their comparisons: "
            "read comparisons.parquet, the second result of compare_cases (in table format 1 they were in the cases' meta)"
        )
    else:
        return empty_comparison_table()
    if not len(frame):
        return empty_comparison_table()
    frame = frame.copy()
    for column in ("value", "ci_low", "ci_high", "se", "df", "detectable"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return frame[COMPARISON_COLUMNS].astype({"layer": "int64", "head": "int64"}).reset_index(drop=True)


__all__ = ["META_KEY", "compare_figures", "compare_results", "comparison_table", "comparisons_result"]
