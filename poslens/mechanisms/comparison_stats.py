"""The statistics of a comparison between cases: jackknife standard error, detectable difference, Welch df, slopes (methodology §9.1).

Every interval of :mod:`poslens.mechanisms.comparisons` is value ± t_{0.975, df} · se,
with df = G − 1 for the delete-one-group jackknife as in
:func:`poslens.fit.stats.jackknife_interval`; ``detectable`` is the minimum
detectable difference at two-sided 5% and 80% power.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats as scipy_stats

from poslens.errors import InputError

LEVEL = 0.95
POWER = 0.80


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


__all__ = ["LEVEL", "POWER", "depth_fraction", "depth_slope_of", "detectable_difference", "jackknife_se", "least_squares_slope", "welch_df"]
