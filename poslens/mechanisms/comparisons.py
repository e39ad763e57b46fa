"""Comparisons between cases by the interval of their difference: paired, trend, depth slope, independent (methodology §9.1).

Two 95% intervals that overlap do not make two cases equal, so cases are
compared by the interval of a difference, each with a delete-one-group
jackknife (methodology §5) and the smallest difference the data could have
detected:

- ``paired``: variants of one model (``ntk:α``, ``window:W``, ``rope-base:θ``)
  measured on the same token ids in the same groups. Replicate g refits both
  cases without group g and takes the difference, so content noise the two
  share cancels. Cases measured on other tokens or groups are refused
  (:class:`UnpairedCasesError`).
- ``trend``: the least-squares slope over cases of a figure on log₂ of the
  variant's parameter (per doubling): NTK α over the ``ntk:α`` cases with the
  base model as α = 1; window W over the ``window:W`` cases with W below the
  sequence length. The base model is *not* a point of the window trend: a
  window of W ≥ T imposes nothing, so the response is flat there and would
  bend the line (the paired rows compare each window with the base). Replicate
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

import difflib
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from poslens.errors import InputError, PoslensError
from poslens.fit.metrics import all_metrics
from poslens.fit.stats import jackknife_interval
from poslens.fit.sums import WINDOWS
from poslens.measurement.result import Result
from poslens.model.variants import parse_variant

#: The columns of a comparison table, in order: the tidy columns, then what the comparison is and how sure.
COMPARISON_COLUMNS = [
    "model", "variant", "intervention", "metric", "query_window", "layer", "head", "value", "ci_low", "ci_high",
    "comparison", "kind", "reference_model", "reference_variant", "parameter", "se", "df", "detectable",
]
#: The kinds of comparison row.
KINDS = ("paired", "independent", "trend", "depth-slope")
#: The figures compared by default, and those whose depth slope is taken.
DEFAULT_METRICS = ("c_res", "c_mask", "leakage_pattern")
DEFAULT_DEPTH_METRICS = ("c_res",)
#: Where :func:`poslens.mechanisms.architectures.compare` keeps the comparison table in a result's metadata.
META_KEY = "comparisons"
DEPTH_SUFFIX = "_depth_slope"
LEVEL = 0.95
POWER = 0.80


class UnpairedCasesError(PoslensError, ValueError):
    """Two cases to be compared pairwise were not measured on the same token ids, groups and bins.

    Example:
        >>> issubclass(UnpairedCasesError, ValueError)
        True
    """


@dataclass
class CaseFigures:
    """One case's figures (mean over heads) and their delete-one-group replicates.

    Attributes:
        model: The model's name.
        variant: The variant (``base``, ``ntk:4``, ``window:64``, …).
        estimate: ``{metric: [window, layer + 1]}`` from the pooled sums; the last layer entry is the mean over layers ≥ 1.
        replicates: ``{metric: [group, window, layer + 1]}``, replicate g refitted without group g.
        intervention: The intervention label of the run.
        tokens: The sha256 of the token ids measured (``""`` when unknown).
        group_sizes: The number of sequences in each group.
        seq_len: The sequence length T.
        binning: A description of the bins (sequence length and early window), for the pairing check.

    Example:
        >>> f = CaseFigures("m", "base", {"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((5, 2, 4))})
        >>> f.n_groups, f.n_layers
        (5, 3)
    """

    model: str
    variant: str
    estimate: dict[str, np.ndarray]
    replicates: dict[str, np.ndarray]
    intervention: str = "none"
    tokens: str = ""
    group_sizes: tuple[float, ...] = ()
    seq_len: int = 0
    binning: tuple[int, ...] = field(default_factory=tuple)

    @property
    def n_groups(self) -> int:
        """The number of groups G (replicates).

        Example:
            >>> CaseFigures("m", "base", {"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((5, 2, 4))}).n_groups
            5
        """
        return int(next(iter(self.replicates.values())).shape[0])

    @property
    def n_layers(self) -> int:
        """The number of layers L.

        Example:
            >>> CaseFigures("m", "base", {"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((5, 2, 4))}).n_layers
            3
        """
        return int(next(iter(self.estimate.values())).shape[-1]) - 1

    @property
    def label(self) -> str:
        """``model/variant``, for messages.

        Example:
            >>> CaseFigures("m", "ntk:2", {}, {}).label
            'm/ntk:2'
        """
        return f"{self.model}/{self.variant}"


def case_figures(result: Result, metrics: tuple[str, ...] = DEFAULT_METRICS) -> CaseFigures:
    """Refit ``metrics`` of one measured case from its cell sums, pooled and without each group in turn.

    Args:
        result: One case's result, with its cell sums (:func:`poslens.measure` keeps them).
        metrics: Figures refitted from the sums (:func:`poslens.fit.metrics.all_metrics`).

    Returns:
        The case's figures (head mean) and their jackknife replicates.

    Raises:
        InputError: When the result lacks its sums or a metric is not refitted from them.

    Example:
        >>> import torch; from poslens.measurement.pipeline import measure_scores
        >>> t = 16; i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        >>> scores = [(-0.1 * (i - j) + 0.01 * i * (j == 0)).float().masked_fill(j > i, torch.finfo(torch.float32).min).expand(4, 1, t, t)] * 3
        >>> f = case_figures(measure_scores(scores, groups=2, early=8, counterfactual="second-pass"))
        >>> f.estimate["c_res"].shape, f.replicates["c_res"].shape
        ((2, 4), (2, 2, 4))
    """
    sums = result.sums
    if sums is None:
        raise InputError("a comparison needs each case's cell sums (measure() keeps them; reload a saved result with its .sums.npz)")
    estimate = all_metrics(sums.pooled(), sums.binning, sums.layer_windows)
    unknown = [m for m in metrics if m not in estimate]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), sorted(estimate), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"metric {unknown[0]!r} is not refitted from the cell sums{hint}; comparisons can use: "
                         + ", ".join(sorted(estimate)))
    replicates = [all_metrics(r, sums.binning, sums.layer_windows) for r in sums.leave_out_each()]
    model, variant, intervention = _identity(result)
    return CaseFigures(
        model=model,
        variant=variant,
        estimate={m: np.asarray(estimate[m][:, :, -1], dtype=float) for m in metrics},
        replicates={m: np.stack([r[m][:, :, -1] for r in replicates]).astype(float) for m in metrics},
        intervention=intervention,
        tokens=str((result.meta.get("corpus") or {}).get("tokens_sha256", "")),
        group_sizes=tuple(float(x) for x in sums.group_sizes),
        seq_len=int(sums.binning.seq_len),
        binning=(int(sums.binning.seq_len), int(sums.binning.early)),
    )


def _identity(result: Result) -> tuple[str, str, str]:
    model = result.meta.get("model") or {}
    table = result.table
    name = model.get("model") or (str(table["model"].iloc[0]) if len(table) else "?")
    variant = model.get("variant") or (str(table["variant"].iloc[0]) if len(table) else "base")
    intervention = str(table["intervention"].iloc[0]) if len(table) and "intervention" in table else "none"
    return str(name), str(variant or "base"), intervention


def check_paired(a: CaseFigures, b: CaseFigures) -> None:
    """Raise :class:`UnpairedCasesError` unless ``a`` and ``b`` were measured on the same token ids, groups and bins.

    Args:
        a: One case.
        b: The other.

    Raises:
        UnpairedCasesError: Naming what differs.

    Example:
        >>> z = {"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((2, 2, 4))}
        >>> check_paired(CaseFigures("m", "base", *z, tokens="aa"), CaseFigures("m", "ntk:2", *z, tokens="aa"))
        >>> check_paired(CaseFigures("m", "base", *z, tokens="aa"), CaseFigures("m", "ntk:2", *z, tokens="bb"))
        Traceback (most recent call last):
        poslens.mechanisms.comparisons.UnpairedCasesError: m/ntk:2 and m/base cannot be compared pairwise: ... different token ids ...
    """
    why = []
    if not a.tokens or not b.tokens:
        why.append("unknown token ids (a result's corpus metadata has no tokens_sha256)")
    elif a.tokens != b.tokens:
        why.append("different token ids (tokens_sha256 differs)")
    if a.n_groups != b.n_groups or tuple(a.group_sizes) != tuple(b.group_sizes):
        why.append(f"different groups ({a.n_groups} groups of {list(a.group_sizes)} vs {b.n_groups} of {list(b.group_sizes)})")
    if a.binning != b.binning:
        why.append(f"different bins (seq_len, early) {a.binning} vs {b.binning}")
    if why:
        raise UnpairedCasesError(
            f"{b.label} and {a.label} cannot be compared pairwise: they were measured on " + "; ".join(why)
            + ". Measure every variant of a model on the same corpus (source, seed, n_seqs, seq_len) and groups")


def jackknife_se(replicates: np.ndarray) -> np.ndarray:
    """The delete-one-group jackknife standard error, se² = (G − 1)/G · Σ_g (θ_(g) − mean θ_(·))², replicates on axis 0.

    The same formula as :func:`poslens.fit.stats.jackknife_interval` (NaN replicates left out of the sum).

    Args:
        replicates: The leave-one-group-out estimates, [G, ...].

    Returns:
        The standard error, [...].

    Example:
        >>> round(float(jackknife_se(np.array([0.9, 1.0, 1.1, 1.0]))), 6)   # sqrt(3/4 · 0.02)
        0.122474
    """
    g = replicates.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        centred = replicates - np.nanmean(replicates, axis=0)
    return np.sqrt((g - 1) / g * np.nansum(centred**2, axis=0))


def detectable_difference(se: np.ndarray | float, df: np.ndarray | float, level: float = LEVEL, power: float = POWER) -> np.ndarray:
    """The minimum detectable difference: (t_{(1+level)/2, df} + t_{power, df}) · se.

    A true difference of this size is found (its interval excludes 0 on its
    side) with probability ``power`` by a two-sided test at 1 − ``level``.

    Args:
        se: The standard error of the difference.
        df: Its degrees of freedom (``inf``: the normal approximation).
        level: Two-sided coverage of the interval.
        power: The power asked for.

    Returns:
        The detectable difference, of the broadcast shape.

    Example:
        >>> round(float(detectable_difference(1.0, np.inf)), 4)   # 1.96 + 0.8416
        2.8016
        >>> round(float(detectable_difference(1.0, 7)), 4)        # t-based with 7 df: 2.3646 + 0.8960
        3.2607
    """
    df = np.asarray(df, dtype=float)
    return (scipy_stats.t.ppf(0.5 + level / 2, df) + scipy_stats.t.ppf(power, df)) * np.asarray(se, dtype=float)


def welch_df(se_a: np.ndarray | float, df_a: float, se_b: np.ndarray | float, df_b: float) -> np.ndarray:
    """Welch–Satterthwaite degrees of freedom of a difference of two independent estimates.

    df = (v_a + v_b)² / (v_a²/df_a + v_b²/df_b) with v = se²; where both
    variances are 0, df_a + df_b.

    Args:
        se_a: Standard error of the first estimate.
        df_a: Its degrees of freedom (G_a − 1 for a jackknife over G_a groups).
        se_b: Standard error of the second.
        df_b: Its degrees of freedom.

    Returns:
        The degrees of freedom, of the broadcast shape.

    Example:
        >>> float(welch_df(1.0, 7, 1.0, 7))   # equal variances and df: the sum
        14.0
        >>> round(float(welch_df(1.0, 7, 0.0, 7)), 6)   # one variance only: its own df
        7.0
    """
    va, vb = np.asarray(se_a, dtype=float) ** 2, np.asarray(se_b, dtype=float) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (va + vb) ** 2 / (va**2 / df_a + vb**2 / df_b)
    return np.where((va + vb) > 0, df, float(df_a + df_b))


def least_squares_slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of ``y`` on ``x`` along axis 0 (one fit per trailing index).

    Args:
        x: The abscissae, [n].
        y: The values, [n, ...].

    Returns:
        The slope, [...].

    Raises:
        InputError: When ``x`` has fewer than 2 distinct values.

    Example:
        >>> float(least_squares_slope(np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 5.0])))
        2.0
    """
    x = np.asarray(x, dtype=float)
    if len(np.unique(x)) < 2:
        raise InputError(f"a slope needs at least 2 distinct abscissae, got {x.tolist()}")
    xc = (x - x.mean()).reshape((-1,) + (1,) * (np.ndim(y) - 1))
    y = np.asarray(y, dtype=float)
    return (xc * (y - y.mean(axis=0))).sum(axis=0) / (xc**2).sum()


def depth_fraction(n_layers: int) -> np.ndarray:
    """x = l / (L − 1) of layers 1 … L − 1: the fraction of depth a depth slope is taken over.

    Args:
        n_layers: The number of layers L (at least 3: two layers after layer 0).

    Returns:
        The fractions, [L − 1].

    Raises:
        InputError: When there are fewer than 3 layers.

    Example:
        >>> depth_fraction(5).tolist()
        [0.25, 0.5, 0.75, 1.0]
    """
    if n_layers < 3:
        raise InputError(f"a depth slope needs at least 2 layers after layer 0 (3 layers), got {n_layers}")
    return np.arange(1, n_layers) / (n_layers - 1)


def depth_slope_of(per_layer: np.ndarray) -> np.ndarray:
    """Slope of per-layer values over the fraction of depth, layers ≥ 1; layers on the last axis.

    Args:
        per_layer: Values of layers 0 … L − 1 on the last axis, [..., L].

    Returns:
        The slope per unit fraction of depth, [...].

    Example:
        >>> float(depth_slope_of(np.array([9.0, 0.0, 0.5, 1.0])))   # layer 0 left out; 0 → 1 over x = 1/3 … 1
        1.5
    """
    x = depth_fraction(per_layer.shape[-1])
    return least_squares_slope(x, np.moveaxis(per_layer[..., 1:], -1, 0))


@dataclass
class _Quantity:
    """Estimates [window, K] and replicates [G, window, K] of one metric, with the K layer labels."""

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
                    depth_slope_of(case.estimate[m][:, :n])[:, None], depth_slope_of(case.replicates[m][:, :, :n])[..., None], [-1])
    return out


def _rows(
    estimate: np.ndarray, se: np.ndarray, df: np.ndarray | float, layers: list[int], metric: str, label: dict[str, Any],
    low: np.ndarray | None = None, high: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    df = np.broadcast_to(np.asarray(df, dtype=float), estimate.shape)
    if low is None or high is None:
        half = scipy_stats.t.ppf(0.5 + LEVEL / 2, df) * se
        low, high = estimate - half, estimate + half
    detectable = detectable_difference(se, df)
    rows = []
    for w, window in enumerate(WINDOWS):
        for k, layer in enumerate(layers):
            if not np.isfinite(estimate[w, k]):
                continue
            rows.append({
                **label, "metric": metric, "query_window": window, "layer": int(layer), "head": -1,
                "value": float(estimate[w, k]), "ci_low": float(low[w, k]), "ci_high": float(high[w, k]),
                "se": float(se[w, k]), "df": float(df[w, k]), "detectable": float(detectable[w, k]),
            })
    return rows


def _jackknife_rows(estimate: np.ndarray, replicates: np.ndarray, layers: list[int], metric: str, label: dict[str, Any]) -> list[dict]:
    low, high = jackknife_interval(estimate, replicates, LEVEL)
    return _rows(estimate, jackknife_se(replicates), replicates.shape[0] - 1, layers, metric, label, low, high)


def _label(kind: str, comparison: str, case: CaseFigures, variant: str | None = None, reference: CaseFigures | None = None,
           parameter: str = "") -> dict[str, Any]:
    return {
        "model": case.model, "variant": variant if variant is not None else case.variant, "intervention": case.intervention,
        "comparison": comparison, "kind": kind,
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


def trend(cases: list[CaseFigures], x: np.ndarray, family: str, parameter: str,
          depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS) -> pd.DataFrame:
    """Least-squares slope over ``cases`` of each figure on ``x``, with a jackknife that deletes group g from every case.

    Args:
        cases: The cases, all measured on the same tokens and groups.
        x: Each case's abscissa (e.g. log₂ α).
        family: The ``variant`` column of the rows (``ntk``, ``window``).
        parameter: The ``parameter`` column (``log2 alpha``, ``log2 window``).
        depth_metrics: The metrics whose depth slopes get a trend too.

    Returns:
        Rows of kind ``trend``, one slope per metric, window and layer (and per depth slope).

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


def independent_differences(case: CaseFigures, reference: CaseFigures,
                            depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS) -> pd.DataFrame:
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
    return frame.astype({"layer": "int64", "head": "int64"}) if len(frame) else _empty()


def _empty() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in COMPARISON_COLUMNS})
    numeric = {"layer": "int64", "head": "int64", **{c: "float64" for c in ("value", "ci_low", "ci_high", "se", "df", "detectable")}}
    return frame.astype(numeric)


def _parameter(variant: str, kind: str) -> float | None:
    """α of a pure ``ntk:α`` variant (1 for ``base``) or W of a pure ``window:W`` one; None otherwise."""
    try:
        v = parse_variant(variant)
    except InputError:
        return None
    if kind == "ntk":
        if v.window is None and v.rope_base is None:
            return 1.0 if v.ntk_alpha is None else float(v.ntk_alpha)
        return None
    if v.ntk_alpha is None and v.rope_base is None and v.window is not None:
        return float(v.window)
    return None


def compare_figures(figures: list[CaseFigures], depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS) -> pd.DataFrame:
    """Every comparison of methodology §9.1 among the cases: paired, trends, depth slopes, independent.

    Cases are grouped by model and intervention. Within a model, each variant
    is compared pairwise with the ``base`` case; the ``ntk:α`` cases with the
    base (α = 1) give the NTK trend and the ``window:W`` cases with W < T the
    window trend, each when at least 2 distinct values are present. Each other
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
        windows = [(w, c) for c in cases if (w := _parameter(c.variant, "window")) is not None and (not c.seq_len or w < c.seq_len)]
        if len({w for w, _ in windows}) >= 2:
            windows.sort(key=lambda item: item[0])
            frames.append(trend([c for _, c in windows], np.log2([w for w, _ in windows]), "window", "log2 window", depth_metrics))
    keys = list(bases)
    for key in keys[1:]:
        if key[1] == keys[0][1] and key[0] != keys[0][0]:
            frames.append(independent_differences(bases[key], bases[keys[0]], depth_metrics))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else _empty()


def compare_results(results: list[Result], metrics: tuple[str, ...] = DEFAULT_METRICS,
                    depth_metrics: tuple[str, ...] = DEFAULT_DEPTH_METRICS) -> pd.DataFrame:
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
        >>> r = measure_scores(scores, groups=2, early=8, counterfactual="second-pass")
        >>> r.meta["corpus"] = {"tokens_sha256": "t"}
        >>> compare_results([r])["kind"].unique().tolist()
        ['depth-slope']
    """
    return compare_figures([case_figures(r, metrics) for r in results], depth_metrics)


def to_meta(table: pd.DataFrame) -> dict[str, Any]:
    """A comparison table as JSON-ready metadata (pandas' ``split`` form), as :func:`comparison_table` reads it back.

    Args:
        table: A comparison table.

    Returns:
        ``{"columns": [...], "data": [[...], ...]}``.

    Example:
        >>> to_meta(_empty())["columns"][:3]
        ['model', 'variant', 'intervention']
    """
    split = table[COMPARISON_COLUMNS].to_dict(orient="split")
    return {"columns": list(split["columns"]), "data": [list(row) for row in split["data"]]}


def comparison_table(result: Result) -> pd.DataFrame:
    """The comparison table that :func:`poslens.mechanisms.architectures.compare` kept in ``result.meta["comparisons"]``.

    Works on a result loaded from ``compare.parquet`` too. A result without
    comparisons (saved by an older poslens) gives an empty table with the columns.

    Args:
        result: The result of :func:`~poslens.mechanisms.architectures.compare`.

    Returns:
        The comparison table (:data:`COMPARISON_COLUMNS`).

    Example:
        >>> comparison_table(Result(pd.DataFrame())).columns.tolist() == COMPARISON_COLUMNS
        True
    """
    stored = result.meta.get(META_KEY)
    if not stored or not stored.get("data"):
        return _empty()
    frame = pd.DataFrame(stored["data"], columns=stored["columns"])
    for column in ("value", "ci_low", "ci_high", "se", "df", "detectable"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return frame[COMPARISON_COLUMNS].astype({"layer": "int64", "head": "int64"})


__all__ = [
    "COMPARISON_COLUMNS", "KINDS", "CaseFigures", "UnpairedCasesError", "case_figures", "check_paired", "compare_figures",
    "compare_results", "comparison_table", "depth_fraction", "depth_slope_of", "depth_slopes", "detectable_difference",
    "independent_differences", "jackknife_se", "least_squares_slope", "paired_differences", "to_meta", "trend", "welch_df",
]
