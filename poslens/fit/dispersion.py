"""Spread and similarity of position-0 residuals, per layer, with delete-one-group jackknife intervals (methodology §8).

The statistics of :mod:`poslens.mechanisms.fingerprint`, on arrays
x [N, L + 1, d] of position-0 residuals (layer l < L: entering block l;
l = L: leaving the last block). :func:`with_layer_mean` appends the layer −1
entry of the table (the aggregate over layers ≥ 1, as defined beside
:data:`poslens.measurement.table.COLUMNS`; here a mean over layers 1..L).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from poslens.errors import InputError
from poslens.fit.groups import group_of
from poslens.fit.stats import jackknife_interval
from poslens.options import DEFAULTS

Interval = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(value, ci_low, ci_high)``, each one entry per layer."""


def relative_dispersion(x: np.ndarray) -> np.ndarray:
    """mean_n ||x_n − x̄|| / ||x̄|| per layer, for x [N, L + 1, d].

    Args:
        x: Position-0 residuals, [N, L + 1, d].

    Returns:
        The relative dispersion of each layer, [L + 1].

    Example:
        >>> x = np.ones((2, 1, 2)); x[1] += 1.0   # two inputs at distance √2 from each other
        >>> relative_dispersion(x).round(4).tolist()
        [0.3333]
    """
    centre = x.mean(axis=0)
    return np.linalg.norm(x - centre, axis=-1).mean(axis=0) / np.linalg.norm(centre, axis=-1)


def mean_pairwise_cosine(x: np.ndarray) -> np.ndarray:
    """Mean over pairs a < b of cos(x_a, x_b) per layer, for x [K, L + 1, d].

    Args:
        x: One trajectory per first token, [K, L + 1, d].

    Returns:
        The mean pairwise cosine of each layer, [L + 1].

    Example:
        >>> x = np.array([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 0.0]]])   # cosines 0, 1 and 0
        >>> mean_pairwise_cosine(x).round(4).tolist()
        [0.3333]
    """
    unit = x / np.linalg.norm(x, axis=-1, keepdims=True)
    cos = np.einsum("ald,bld->lab", unit, unit)
    a, b = np.triu_indices(x.shape[0], k=1)
    return cos[:, a, b].mean(axis=1)


def jackknife_replicates(statistic: Callable[[np.ndarray], np.ndarray], x: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Estimate on all of ``x`` and delete-one-group replicates [G, ...] (groups label axis 0 of ``x``).

    Args:
        statistic: A function of an array like ``x``.
        x: The data; axis 0 holds the units that ``group`` labels.
        group: The group of each entry of axis 0.

    Returns:
        ``(estimate, replicates)``: the statistic of all of ``x``, and of ``x`` without each group in turn, stacked.

    Example:
        >>> column_mean = lambda a: a.mean(axis=0)
        >>> estimate, replicates = jackknife_replicates(column_mean, np.array([[1.0], [2.0], [3.0], [6.0]]), np.array([0, 0, 1, 1]))
        >>> estimate.tolist(), replicates.tolist()
        ([3.0], [[4.5], [1.5]])
    """
    estimate = statistic(x)
    replicates = np.stack([statistic(x[group != g]) for g in np.unique(group)])
    return estimate, replicates


def with_layer_mean(estimate: np.ndarray, replicates: np.ndarray) -> Interval:
    """Values and jackknife intervals for layers 0..L followed by layer −1, the mean over layers 1..L.

    Args:
        estimate: One value per layer, [L + 1].
        replicates: Delete-one-group replicates, [G, L + 1].

    Returns:
        ``(value, ci_low, ci_high)``, each [L + 2]: layers 0..L, then the mean over layers 1..L.

    Example:
        >>> value, low, high = with_layer_mean(np.array([0.0, 1.0, 3.0]), np.array([[0.0, 1.0, 3.0], [0.0, 1.0, 3.0]]))
        >>> value.tolist()
        [0.0, 1.0, 3.0, 2.0]
    """
    estimate = np.append(estimate, estimate[1:].mean())
    replicates = np.concatenate([replicates, replicates[:, 1:].mean(axis=1, keepdims=True)], axis=1)
    low, high = jackknife_interval(estimate, replicates)
    return estimate, np.asarray(low), np.asarray(high)  # arrays, as the estimate is one


def dispersion(trajectories: ArrayLike, groups: int = DEFAULTS.groups) -> Interval:
    """Relative dispersion per layer, mean_n ||x_n − x̄|| / ||x̄||, with a 95% delete-one-group jackknife interval.

    ``trajectories`` is [N, L + 1, d] (from
    :func:`poslens.mechanisms.position0_passes.position0_trajectories`, a tensor or
    an array); inputs are split into ``groups`` contiguous groups
    (:func:`poslens.fit.groups.group_of`). Returns (value, ci_low, ci_high),
    each [L + 1]. Computed in float64.

    Args:
        trajectories: Position-0 residuals, [N, L + 1, d].
        groups: Number of contiguous groups for the jackknife.

    Returns:
        ``(value, ci_low, ci_high)``, each [L + 1].

    Example:
        >>> x = np.ones((4, 2, 3)); x[:, 1] += np.arange(4)[:, None]
        >>> value, low, high = dispersion(x, groups=2)
        >>> value.round(3).tolist()
        [0.0, 0.4]
    """
    x = np.asarray(trajectories, dtype=np.float64)
    estimate, replicates = jackknife_replicates(relative_dispersion, x, group_of(x.shape[0], groups))
    low, high = jackknife_interval(estimate, replicates)
    return estimate, np.asarray(low), np.asarray(high)  # arrays, as the estimate is one


def cosine_jackknife(trajectories: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mean_pairwise_cosine` of ``trajectories`` and its delete-one-token replicates.

    Args:
        trajectories: One trajectory per distinct first token, [K, L + 1, d] (a tensor or an array).

    Returns:
        ``(estimate, replicates)``, [L + 1] and [K, L + 1], in float64.

    Raises:
        InputError: When there are fewer than 3 tokens (no interval; a ``ValueError``).

    Example:
        >>> x = np.array([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 0.0]]])
        >>> estimate, replicates = cosine_jackknife(x)
        >>> estimate.round(4).tolist(), replicates.round(4).tolist()
        ([0.3333], [[0.0], [1.0], [0.0]])
    """
    x = np.asarray(trajectories, dtype=np.float64)
    if x.shape[0] < 3:
        raise InputError(f"trajectory similarity needs at least 3 distinct first tokens for an interval, got {x.shape[0]}")
    return jackknife_replicates(mean_pairwise_cosine, x, np.arange(x.shape[0]))
