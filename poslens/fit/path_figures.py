"""The figures of one run of the path-specific tests (methodology §12.4), each with its G group replicates.

From one forward pass's sums (:class:`~poslens.fit.sums.CellSums`,
:class:`~poslens.fit.residual_readout.ResidualSums`) and its next-token losses,
:func:`run_figures` makes a :class:`~poslens.fit.paired_figures.Figures`:

- ``resid_probe_r2`` / ``attn_out_probe_r2``: held-out R² of the ridge probe of log(i + 1) from the residual
  stream entering each block / each block's attention output (folds by group);
- ``resid_eta2`` / ``attn_out_eta2``: η², the share of their variance explained by exact position;
- ``leakage_pattern`` with ``leakage_pattern_numerator`` (‖P(log a)‖² per pair) and ``leakage_pattern_sst``
  (SST(log a) per pair), the mean over heads, per query window;
- ``key0_mass_sink_heads``: a_i0 in the sink-reading heads, per layer and per query bin;
- ``next_token_loss``: the mean next-token loss per query bin (positions i ≥ 1 predicting token i + 1).

Per-layer figures also get layer −1 (the mean over layers ≥ 1, as every table
defines it) and a ``…_ge2`` figure at layer −1, the mean over layers ≥ 2 (what
claim C3 reads: layer 1 has only layer 0 below it). The replicates of an
aggregate are the aggregates of the replicates.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from jaxtyping import Float

from poslens.fit.binning import Binning
from poslens.fit.groups import group_of
from poslens.fit.paired_figures import Figures
from poslens.fit.pattern_variance import VARIANCE_PARTS, key0_mass_by_bin, pattern_variance
from poslens.fit.residual_readout import SITES, ResidualSums, eta_squared, probe_r2
from poslens.fit.sums import FEATURES, QUERY_WINDOWS, CellSums

__all__ = ["FIRST_LAYER", "loss_figures", "pattern_figures", "residual_figures", "run_figures", "sink_figures"]

#: The ``…_ge2`` figures average the layers from this one on.
FIRST_LAYER = 2


def _nanmean(x: np.ndarray, axis: int | tuple[int, ...]) -> Any:  # an array, or a float for a 1-D x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a mean over nothing stays NaN
        return np.nanmean(x, axis=axis)


def _layer_figures(metric: str, query_window: str, estimate: np.ndarray, replicates: np.ndarray, method: str) -> Figures:
    """Rows of one per-layer figure: estimate [L], replicates [G, L]; adds layer −1 (layers ≥ 1) and ``metric_ge2``."""
    n_layers = estimate.shape[-1]
    rows, values, reps = [], [], []
    for layer in range(n_layers):
        rows.append((metric, layer))
        values.append(estimate[layer])
        reps.append(replicates[:, layer])
    for name, first in ((metric, 1), (f"{metric}_ge2", FIRST_LAYER)):
        if n_layers > first:
            rows.append((name, -1))
            values.append(_nanmean(estimate[first:], 0))
            reps.append(_nanmean(replicates[:, first:], 1))
    keys = pd.DataFrame(rows, columns=["metric", "layer"])
    keys["query_window"], keys["query_bin"] = query_window, -1
    return Figures(keys, np.asarray(values, dtype=float), np.stack(reps).astype(float), np.full(len(rows), method))


def pattern_figures(sums: CellSums) -> Figures:
    """L(log a), ‖P(log a)‖² and SST(log a) per pair, the mean over heads, per layer and query window, jackknifed.

    Args:
        sums: The run's cell sums (no counterfactual needed).

    Returns:
        The figures.

    Example:
        >>> from poslens.fit.sums import CellSums
        >>> f = pattern_figures(CellSums.zeros(groups=2, layers=3, heads=1, binning=Binning(8)))
        >>> sorted(set(f.keys["metric"]))[:2], f.replicates.shape[1]
        (['leakage_pattern', 'leakage_pattern_ge2'], 2)
    """
    estimate = pattern_variance(sums.pooled(), sums.binning)
    replicates = [pattern_variance(sums.leave_out(g), sums.binning) for g in range(sums.n_groups)]
    parts = []
    for name in VARIANCE_PARTS:
        for w, query_window in enumerate(QUERY_WINDOWS):
            est = _nanmean(estimate[name][w], -1)  # [L]: the mean over heads
            reps = np.stack([_nanmean(r[name][w], -1) for r in replicates])
            parts.append(_layer_figures(name, query_window, est, reps, "jackknife"))
    return Figures.concat(parts)


def _sink_means(p, heads: Sequence[tuple[int, int]], binning: Binning, n_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """(per layer [L]: mean a_i0 of its sink heads over the rows i ≥ 1; per query bin [C]: mean over all sink heads)."""
    mass = key0_mass_by_bin(p)  # [L, H, C]
    window = binning.query_windows["all"]
    rows = p.query_row_count[window]
    per_layer = np.full(n_layers, np.nan)
    for layer in range(n_layers):
        chosen = [h for (l_, h) in heads if l_ == layer]
        if chosen and rows.sum() > 0:
            per_layer[layer] = (p.features[layer, chosen, FEATURES.index("key0_mass")][:, window].sum(-1) / rows.sum()).mean()
    per_bin = np.stack([mass[layer, head] for layer, head in heads]).mean(0) if heads else np.full(binning.n_query_bins, np.nan)
    return per_layer, per_bin


def sink_figures(sums: CellSums, heads: Sequence[tuple[int, int]]) -> Figures:
    """a_i0 in the sink-reading ``heads``: per layer (rows i ≥ 1) and, over all of them, per query bin; jackknifed.

    Args:
        sums: The run's cell sums.
        heads: The sink-reading heads, ``[(layer, head)]`` (of the unedited run).

    Returns:
        The figures (none when ``heads`` is empty).

    Example:
        >>> from poslens.fit.sums import CellSums
        >>> f = sink_figures(CellSums.zeros(groups=2, layers=2, heads=2, binning=Binning(8)), [(1, 0)])
        >>> f.keys[["layer", "query_bin"]].values.tolist()[:3]   # bin 0 holds row 0 alone: no figure
        [[1, -1], [-1, 1], [-1, 2]]
    """
    heads = sorted(heads)
    if not heads:
        empty = pd.DataFrame(columns=["metric", "layer", "query_window", "query_bin"])
        return Figures(empty, np.zeros(0), np.zeros((0, sums.n_groups)), np.array([], dtype=str))
    binning, n_layers = sums.binning, sums.n_layers
    per_layer, per_bin = _sink_means(sums.pooled(), heads, binning, n_layers)
    reps = [_sink_means(sums.leave_out(g), heads, binning, n_layers) for g in range(sums.n_groups)]
    layers = sorted({layer for layer, _ in heads})
    bins = [c for c in range(binning.n_query_bins) if binning.query_edges[c] >= 1]
    rows = [("key0_mass_sink_heads", layer, "all", -1) for layer in layers] + [("key0_mass_sink_heads", -1, "all", c) for c in bins]
    estimate = np.concatenate([per_layer[layers], per_bin[bins]])
    replicates = np.stack([np.concatenate([r[0][layers], r[1][bins]]) for r in reps], axis=1)
    keys = pd.DataFrame(rows, columns=["metric", "layer", "query_window", "query_bin"])
    return Figures(keys, estimate, replicates, np.full(len(rows), "jackknife"))


def residual_figures(sums: ResidualSums, penalty: float) -> Figures:
    """Probe R² (folds) and η² (jackknife) of each site, per layer, with the layer aggregates.

    Args:
        sums: The run's readout sums.
        penalty: The probe's ridge penalty.

    Returns:
        The figures.

    Example:
        >>> f = residual_figures(ResidualSums.zeros(2, 3, 2, 4), penalty=1.0)
        >>> sorted(set(f.keys["metric"]))[:3]
        ['attn_out_eta2', 'attn_out_eta2_ge2', 'attn_out_probe_r2']
    """
    pooled, folds, _, _ = probe_r2(sums, penalty)
    eta, eta_reps = eta_squared(sums)
    parts = []
    for s, site in enumerate(SITES):
        parts.append(_layer_figures(f"{site}_probe_r2", "all", pooled[s], folds[:, s], "fold"))
        parts.append(_layer_figures(f"{site}_eta2", "all", eta[s], eta_reps[:, s], "jackknife"))
    return Figures.concat(parts)


def loss_figures(nll: Float[np.ndarray, "seqs positions"], groups: int, binning: Binning) -> Figures:
    """The mean next-token loss per query bin (and over every position ≥ 1, bin −1), jackknifed over groups.

    Args:
        nll: −log p(token i + 1 | tokens ≤ i) at every position i, [N, T − 1].
        groups: Number of groups.
        binning: The query bins.

    Returns:
        The figures (metric ``next_token_loss``, layer −1).

    Example:
        >>> f = loss_figures(np.ones((4, 7)), 2, Binning(8, early=4))
        >>> f.keys["query_bin"].tolist()[:3], f.estimate[:3].tolist()
        ([-1, 1, 2], [1.0, 1.0, 1.0])
    """
    group = group_of(nll.shape[0], groups)
    positions = np.arange(nll.shape[1])
    qbin = binning.query_bin[positions]
    edges = binning.query_edges
    bins = [(-1, positions >= 1)] + [(c, qbin == c) for c in range(binning.n_query_bins) if 1 <= edges[c] < nll.shape[1]]
    estimate = np.array([nll[:, cols].mean() for _, cols in bins])
    replicates = np.array([[nll[group != g][:, cols].mean() for g in range(groups)] for _, cols in bins])
    keys = pd.DataFrame({"metric": "next_token_loss", "layer": -1, "query_window": "all", "query_bin": [c for c, _ in bins]})
    return Figures(keys, estimate, replicates, np.full(len(bins), "jackknife"))


def run_figures(
    sums: CellSums, residual: ResidualSums, nll: Float[np.ndarray, "seqs positions"], sink_heads: Sequence[tuple[int, int]], penalty: float
) -> Figures:
    """Every figure of one run of the path-specific tests, in a fixed order (so that two runs pair figure by figure).

    Args:
        sums: The run's cell sums.
        residual: Its readout sums.
        nll: Its next-token losses, [N, T − 1].
        sink_heads: The sink-reading heads of the unedited run.
        penalty: The probe's ridge penalty.

    Returns:
        The figures.

    Example:
        >>> figures = run_figures(sums, residual, nll, heads, penalty=1.0)  # doctest: +SKIP
    """
    return Figures.concat(
        [
            residual_figures(residual, penalty),
            pattern_figures(sums),
            sink_figures(sums, sink_heads),
            loss_figures(nll, sums.n_groups, sums.binning),
        ]
    )
