"""Every figure of a measurement, from cell sums (their intervals: :mod:`poslens.fit.metric_intervals`).

Arrays are indexed [query_window, layer, head] with one extra layer index (the last,
layer = −1 in tables: the mean over layers ≥ 1) and one extra head index
(the last, head = −1: the mean over heads). Shares (ρ, count_share) of an
aggregate are ratios of aggregated components, so C_res + C_mask =
leakage_pattern holds for aggregates too.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
from einops import rearrange
from jaxtyping import Bool, Float

from poslens.fit.binning import Binning
from poslens.fit.counterfactual import meanfield_cells
from poslens.fit.decompose import share_of, split_of
from poslens.fit.stats import (
    held_out_r2,
    linear_r2_gain,
    project,
    residual_grams,
    ridge_fits,
    total_sum_of_squares,
)
from poslens.fit.sums import FEATURES, QUERY_WINDOWS, CellSums, SumFields

ADDITIVE = (
    "leakage_pattern",
    "leakage_logit",
    "leakage_pattern_saturated",
    "leakage_logit_saturated",
    "leakage_linear",
    "leakage_count",
    "c_res",
    "c_mask",
    "c_count",
    "c_res_saturated",
    "c_mask_saturated",
    "c_count_saturated",
    "c_res_meanfield",
    "c_mask_meanfield",
    "c_res_logit",
    "c_mask_logit",
) + FEATURES
RATIOS = {
    "rho_res": ("c_res", "leakage_pattern"),
    "rho_mask": ("c_mask", "leakage_pattern"),
    "count_share": ("c_count", "c_mask"),
    "rho_res_saturated": ("c_res_saturated", "leakage_pattern_saturated"),
    "rho_mask_saturated": ("c_mask_saturated", "leakage_pattern_saturated"),
    "count_share_saturated": ("c_count_saturated", "c_mask_saturated"),
    "rho_res_meanfield": ("c_res_meanfield", "leakage_pattern"),
    "rho_mask_meanfield": ("c_mask_meanfield", "leakage_pattern"),
}
HELD_OUT = ("leakage_pattern_heldout", "leakage_logit_heldout")


def _layers_sharing_counts(mask: Bool[np.ndarray, " qbins"], *pair_counts: Float[np.ndarray, "layers qbins obins"]) -> list[list[int]]:
    """The layers in runs whose pair counts agree over the query bins of ``mask``: every causal layer, or those of one sliding window.

    A projection depends on nothing else, so each run is projected at once. With several tables of pair
    counts (a fit's and a held-out group's), the layers of a run agree in each.
    """
    runs: dict[bytes, list[int]] = {}
    for layer in range(pair_counts[0].shape[0]):
        runs.setdefault(b"".join(counts[layer][mask].tobytes() for counts in pair_counts), []).append(layer)
    return list(runs.values())


def _ratio(
    numerator: Float[np.ndarray, "*heads"] | float, total_ss: Float[np.ndarray, "*heads"] | float, sum_sq: Float[np.ndarray, "*heads"] | float
) -> Float[np.ndarray, "*heads"]:
    """ΔR² numerator / SST, NaN where y is constant (SST at rounding level of Σy²)."""
    constant = total_ss <= 1e-12 * np.maximum(sum_sq, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(constant, np.nan, numerator / total_ss)


def head_metrics(
    p: SumFields,
    counterfactual: Mapping[str, Float[np.ndarray, "layers heads qbins obins"]],
    binning: Binning,
    layer_windows: tuple[int | None, ...],
) -> dict[str, Float[np.ndarray, "query_windows layers heads"]]:
    """All per-head metrics [query_window, layer, head] from pooled sums ``p`` (ratios are left to :func:`aggregate`).

    ``counterfactual`` holds the same replicate's per-sequence counterfactual cells
    (:meth:`poslens.fit.counterfactual_cells.CounterfactualCells.pooled` or ``.leave_out(g)``);
    ``layer_windows`` is each layer's sliding window (None: causal), as kept in
    :attr:`poslens.fit.sums.CellSums.layer_windows`.

    Args:
        p: Pooled sums of one replicate (no group axis).
        counterfactual: That replicate's per-sequence counterfactual cells, ``{query_window: [L, H, C, B]}``.
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).

    Returns:
        ``{metric name: [query_window, layer, head] array}``.

    Example:
        >>> m = head_metrics(sums.pooled(), sums.counterfactual_cells.pooled(), sums.binning, sums.layer_windows)  # doctest: +SKIP
        >>> m["c_res"].shape  # doctest: +SKIP
        (2, 30, 9)
    """
    n_layers, n_heads = p.logit.shape[:2]
    out = {name: np.full((len(QUERY_WINDOWS), n_layers, n_heads), np.nan) for name in ADDITIVE}
    for w, query_window in enumerate(QUERY_WINDOWS):
        mask = binning.query_windows[query_window]
        meanfield = meanfield_cells(p, binning, layer_windows, query_window)
        for layers in _layers_sharing_counts(mask, p.pair_count):
            _run_metrics(out, w, layers, p, mask, counterfactual[query_window], meanfield)
    return out


#: The pairs' moments :func:`~poslens.fit.stats.linear_r2_gain` reads, by its name and the sums' field.
PAIR_MOMENTS = (
    ("i1", "query_position"),
    ("j1", "key_position"),
    ("ii", "query_position_sq"),
    ("jj", "key_position_sq"),
    ("ij", "query_x_key_position"),
)


def _cells(x: np.ndarray, layers: list[int], mask: Bool[np.ndarray, " qbins"], axis: int) -> np.ndarray:
    """``x`` of ``layers`` in the query bins of ``mask`` (on ``axis``), C-contiguous.

    Indexing leaves the result strided, and numpy sums a strided row in another order than a contiguous one:
    contiguous, each layer's sums are those of the layer's own [H, C, B] array, whatever run it is fitted in.
    """
    return np.ascontiguousarray(x[layers][(slice(None),) * axis + (mask,)])


#: The responses' order in :func:`_run_metrics`'s inner products.
_LOGIT, _PATTERN, _COUNTERFACTUAL, _MEANFIELD, _COUNT = range(5)


def _run_metrics(
    out: dict[str, Float[np.ndarray, "query_windows layers heads"]],
    w: int,
    layers: list[int],
    p: SumFields,
    mask: Bool[np.ndarray, " qbins"],
    counterfactual: Float[np.ndarray, "layers heads qbins obins"],
    meanfield: Float[np.ndarray, "layers heads qbins obins"],
) -> None:
    """:func:`head_metrics` of the ``layers`` that share their pair counts in query window ``w``, all at once, into ``out``.

    Every array carries a leading axis over ``layers`` ([L, H, ...]); the cells' counts are the run's. Each
    figure of a layer is the same, to the bit, as from a run of that layer alone (``test_metrics_layers``).
    """
    counts = p.pair_count[layers[0]][mask]
    total = counts.sum()
    if total == 0:
        return
    y_s, y_z, y_c = _cells(p.logit, layers, mask, axis=2), _cells(p.log_partition, layers, mask, axis=2), _cells(p.count_term, layers, mask, axis=1)
    # the responses of every head side by side, [L, H, 5, C, B]: the logit s, the log pattern log a = s − log Z,
    # the two counterfactuals' log patterns, and the count term (one per layer, the same for each head); P is
    # linear, so P(s) − P(log Z) = P(s − log Z)
    responses = np.stack(
        [
            y_s,
            y_s - y_z,
            _cells(counterfactual, layers, mask, axis=2),
            _cells(meanfield, layers, mask, axis=2),
            np.broadcast_to(y_c[:, None], y_s.shape),
        ],
        axis=2,
    )
    grams = residual_grams(responses, counts)
    # each total summed as one flat run per layer and head: numpy's order for one layer's [H, C, B], which it may
    # not keep for [L, H, C, B] (so that a layer's figures do not depend on the run it is fitted in)
    s_tot, z_tot = y_s.reshape(*y_s.shape[:2], -1).sum(-1), y_z.reshape(*y_z.shape[:2], -1).sum(-1)  # [L, H]
    c_tot = y_c.reshape(len(layers), -1).sum(-1)  # [L]
    s2 = _cells(p.logit_sq, layers, mask, axis=2).sum(-1)
    z2 = _cells(p.log_partition_sq, layers, mask, axis=2).sum(-1)
    sz = _cells(p.logit_x_log_partition, layers, mask, axis=2).sum(-1)
    c2 = _cells(p.count_term_sq, layers, mask, axis=1).sum(-1)  # [L]
    sst_s = total_sum_of_squares(s2, s_tot, total)
    sst_a = total_sum_of_squares(s2 - 2 * sz + z2, s_tot - z_tot, total)
    sst_c = total_sum_of_squares(c2, c_tot, total)
    sq_a = s2 - 2 * sz + z2
    absolute, saturated = grams.absolute, grams.saturated  # [L, H, 5, 5]
    leak_a = _ratio(absolute[..., _PATTERN, _PATTERN], sst_a, sq_a)
    leak_sat = _ratio(saturated[..., _PATTERN, _PATTERN], sst_a, sq_a)
    out["leakage_pattern"][w, layers] = leak_a
    out["leakage_logit"][w, layers] = _ratio(absolute[..., _LOGIT, _LOGIT], sst_s, s2)
    out["leakage_pattern_saturated"][w, layers] = leak_sat
    out["leakage_logit_saturated"][w, layers] = _ratio(saturated[..., _LOGIT, _LOGIT], sst_s, s2)
    out["leakage_count"][w, layers] = _ratio(absolute[:, 0, _COUNT, _COUNT], sst_c, c2)[:, None]
    per_layer = {  # the pairs' moments, one per layer, repeated over its heads
        name: np.broadcast_to(_cells(getattr(p, field), layers, mask, axis=1).sum(-1)[:, None], s_tot.shape) for name, field in PAIR_MOMENTS
    }
    moments = {
        **per_layer,
        "n": total,
        "y1": s_tot,
        "yi": _cells(p.logit_x_query_position, layers, mask, axis=2).sum(-1),
        "yj": _cells(p.logit_x_key_position, layers, mask, axis=2).sum(-1),
    }
    out["leakage_linear"][w, layers] = linear_r2_gain(moments, sst_s)
    for suffix, gram, leak in (("", absolute, leak_a), ("_saturated", saturated, leak_sat)):
        parts = split_of(gram[..., _PATTERN, _COUNTERFACTUAL], gram[..., _PATTERN, _PATTERN], leak)
        out[f"c_res{suffix}"][w, layers], out[f"c_mask{suffix}"][w, layers] = parts.c_res, parts.c_mask
        out[f"c_count{suffix}"][w, layers] = share_of(-gram[..., _PATTERN, _COUNT], gram[..., _PATTERN, _PATTERN]) * leak
    meanfield_split = split_of(absolute[..., _PATTERN, _MEANFIELD], absolute[..., _PATTERN, _PATTERN], leak_a)
    out["c_res_meanfield"][w, layers], out["c_mask_meanfield"][w, layers] = meanfield_split.c_res, meanfield_split.c_mask
    logit_share = share_of(absolute[..., _PATTERN, _LOGIT], absolute[..., _PATTERN, _PATTERN])
    out["c_res_logit"][w, layers], out["c_mask_logit"][w, layers] = logit_share * leak_a, (1 - logit_share) * leak_a
    rows = p.query_row_count[mask].sum()
    feats = _cells(p.features, layers, mask, axis=3).sum(-1) / rows  # [L, H, F]
    for f, name in enumerate(FEATURES):
        out[name][w, layers] = feats[:, :, f]


def aggregate(per_head: dict[str, Float[np.ndarray, "query_windows layers heads"]]) -> dict[str, Float[np.ndarray, "query_windows layers+1 heads+1"]]:
    """Add the head = −1 (mean over heads) and layer = −1 (mean over layers ≥ 1) entries.

    Args:
        per_head: ``{metric name: [query_window, layer, head] array}``, as :func:`head_metrics` returns.

    Returns:
        The same metrics, [query_window, layer + 1, head + 1], the means last.

    Example:
        >>> agg = aggregate({"c_res": np.ones((2, 3, 4)), "c_mask": np.ones((2, 3, 4)),
        ...                  "leakage_pattern": 2 * np.ones((2, 3, 4))})
        >>> agg["c_res"].shape, float(agg["rho_res"][0, -1, -1])
        ((2, 4, 5), 0.5)
    """
    out: dict[str, np.ndarray] = {}
    for name, values in per_head.items():
        if name in RATIOS:
            continue
        w, n_layers, n_heads = values.shape
        full = np.full((w, n_layers + 1, n_heads + 1), np.nan)
        full[:, :n_layers, :n_heads] = values
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # mean of all-NaN slices stays NaN
            full[:, :n_layers, n_heads] = np.nanmean(values, axis=2) if n_heads else np.nan
            later = full[:, 1:n_layers, n_heads] if n_layers > 1 else full[:, :n_layers, n_heads]
            full[:, n_layers, n_heads] = np.nanmean(later, axis=1)
        out[name] = full
    for name, (num, den) in RATIOS.items():
        if num in out and den in out:
            with np.errstate(divide="ignore", invalid="ignore"):
                out[name] = out[num] / out[den]
    return out


def all_metrics(
    p: SumFields,
    counterfactual: Mapping[str, Float[np.ndarray, "layers heads qbins obins"]],
    binning: Binning,
    layer_windows: tuple[int | None, ...],
) -> dict[str, Float[np.ndarray, "query_windows layers_and_mean heads_and_mean"]]:
    """Per-head metrics with their aggregates, from pooled sums and the same replicate's counterfactual cells.

    Args:
        p: Pooled sums (no group axis).
        counterfactual: That replicate's per-sequence counterfactual cells, ``{query_window: [L, H, C, B]}``.
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).

    Returns:
        ``{metric name: [query_window, layer + 1, head + 1] array}``.

    Example:
        >>> all_metrics(sums.pooled(), sums.counterfactual_cells.pooled(), sums.binning, sums.layer_windows)["c_res"].shape  # doctest: +SKIP
        (2, 31, 10)"""
    return aggregate(head_metrics(p, counterfactual, binning, layer_windows))


def held_out_metrics(
    sums: CellSums,
) -> tuple[
    dict[str, Float[np.ndarray, "query_windows layers_and_mean heads_and_mean"]],
    dict[str, Float[np.ndarray, "groups query_windows layers_and_mean heads_and_mean"]],
]:
    """Cross-fitted ΔR²: fit on all groups but g, score on g (methodology §5's bias check).

    Returns (pooled values, per-fold values [G, ...]) for leakage_pattern_heldout
    and leakage_logit_heldout, aggregated like :func:`aggregate`; the pooled
    value is Σ_g (SSE_R − SSE_F) / Σ_g SST over folds g.

    Args:
        sums: Grouped sums (at least 2 groups).

    Returns:
        ``(pooled, per_fold)``: ``{metric name: array}`` each, per-fold arrays with the group axis first.

    Example:
        >>> pooled, folds = held_out_metrics(sums)  # doctest: +SKIP
        >>> folds["leakage_pattern_heldout"].shape[0] == sums.n_groups  # doctest: +SKIP
        True
    """
    g_count = sums.n_groups
    binning = sums.binning
    n_layers, n_heads = sums.n_layers, sums.n_heads
    gain = {k: np.full((g_count, len(QUERY_WINDOWS), n_layers, n_heads), np.nan) for k in HELD_OUT}
    sst = {k: np.full((g_count, len(QUERY_WINDOWS), n_layers, n_heads), np.nan) for k in HELD_OUT}
    for g, train in enumerate(sums.leave_out_each()):
        test = sums.group(g)
        for w, query_window in enumerate(QUERY_WINDOWS):
            mask = binning.query_windows[query_window]
            # a run of layers at once (every causal layer, or those of one window): the same cells on both sides
            for layers in _layers_sharing_counts(mask, train.pair_count, test.pair_count):
                counts, t_counts = train.pair_count[layers[0]][mask], test.pair_count[layers[0]][mask]
                if counts.sum() == 0 or t_counts.sum() == 0:
                    continue
                y_s = train.logit[layers][:, :, mask]
                # the projection of s and of log a = s − log Z, fitted on train
                fit = project(np.stack([y_s, y_s - train.log_partition[layers][:, :, mask]], axis=2), counts)  # [L, H, 2, K]
                cells = counts > 0
                n_test = t_counts[cells]
                total = t_counts.sum()
                # a boolean index lays its axis out outermost, and a sum over an axis so laid out is formed in
                # another order for a run of several layers than for one: contiguous copies, summed as one layer is
                t_s, t_z = (
                    np.ascontiguousarray(test.logit[layers][:, :, mask]),
                    np.ascontiguousarray(test.log_partition[layers][:, :, mask]),
                )  # [L, H, C', B]
                s2 = np.ascontiguousarray(test.logit_sq[layers][:, :, mask]).sum(-1)
                z2 = np.ascontiguousarray(test.log_partition_sq[layers][:, :, mask]).sum(-1)
                sz = np.ascontiguousarray(test.logit_x_log_partition[layers][:, :, mask]).sum(-1)
                y_test = np.stack([t_s[:, :, cells], t_s[:, :, cells] - t_z[:, :, cells]], axis=2)  # [L, H, 2, K]: the test group's cell sums
                # SSE_R − SSE_F = Σ n [(ȳ − f_R)² − (ȳ − f_F)²] = Σ P · (2 (Y − n f_R) − n P), P = f_F − f_R: the
                # fitted values enter only through P and Y − n f_R, so no large squares are subtracted
                sse_gap = (fit.absolute * (2 * (y_test - n_test * fit.relative) - n_test * fit.absolute)).sum(-1)  # [L, H, 2]
                tot_s, tot_a = t_s.sum((-2, -1)), (t_s - t_z).sum((-2, -1))
                for k, (key, sq, tot) in enumerate((("leakage_logit_heldout", s2, tot_s), ("leakage_pattern_heldout", s2 - 2 * sz + z2, tot_a))):
                    gain[key][g, w, layers] = sse_gap[..., k]
                    sst[key][g, w, layers] = total_sum_of_squares(sq, tot, total)
    pooled, folds = {}, {}
    for key in HELD_OUT:
        with np.errstate(divide="ignore", invalid="ignore"):
            per_fold = aggregate({key: rearrange(gain[key] / sst[key], "group query_window layer head -> (group query_window) layer head")})[key]
            folds[key] = rearrange(per_fold, "(group query_window) layer head -> group query_window layer head", group=g_count)
            head_pooled = np.nansum(gain[key], 0) / np.nansum(sst[key], 0)
        pooled[key] = aggregate({key: head_pooled})[key]
    return pooled, folds


def probe_metrics(
    sums: CellSums, penalty: float = 1e-3
) -> tuple[Float[np.ndarray, "query_windows layers_and_mean"], Float[np.ndarray, "groups query_windows layers_and_mean"]]:
    """Held-out R² of a ridge probe from one layer's head features to log(i + 1).

    Features per query row: a_i0, entropy, a_ii and max_j a_ij of every head.
    Fold g trains on the other groups and scores on g. Returns (pooled R²,
    per-fold R² [G, ...]), both [query_window, layer + 1] (last = mean over layers ≥ 1).

    Args:
        sums: Grouped sums (at least 2 groups).
        penalty: Ridge penalty, relative to each feature's variance (:func:`~poslens.fit.stats.ridge_fits`).

    Returns:
        ``(pooled, per_fold)``: the held-out R², [query_window, layer + 1] and [G, query_window, layer + 1].

    Example:
        >>> r2, per_fold = probe_metrics(sums)  # doctest: +SKIP
        >>> r2.shape  # doctest: +SKIP
        (2, 31)
    """
    g_count, n_layers = sums.n_groups, sums.n_layers
    sse = np.full((g_count, len(QUERY_WINDOWS), n_layers), np.nan)
    sst = np.full_like(sse, np.nan)
    tests, fits = [], []  # every (fold, window, layer) with rows on both sides, and its training sums
    for g, train in enumerate(sums.leave_out_each()):
        test = sums.group(g)
        for w in range(len(QUERY_WINDOWS)):
            for layer in range(n_layers):
                if train.probe_row_count[layer, w] >= 2 and test.probe_row_count[layer, w] >= 2:
                    tests.append((g, w, layer, test))
                    fits.append(
                        tuple(x[layer, w] for x in (train.probe_gram, train.probe_design_x_target, train.probe_target, train.probe_row_count))
                    )
    if fits:  # all the folds' probes in one call: one stacked pseudo-inverse
        gram, design_x_target, target, rows = (np.stack(part) for part in zip(*fits, strict=True))
        thetas = ridge_fits(gram, design_x_target, target, rows, penalty)
        for (g, w, layer, test), theta in zip(tests, thetas, strict=True):
            sse[g, w, layer], sst[g, w, layer] = held_out_r2(
                theta,
                test.probe_gram[layer, w],
                test.probe_design_x_target[layer, w],
                test.probe_target_sq[layer, w],
                test.probe_target[layer, w],
                test.probe_row_count[layer, w],
            )
    with np.errstate(divide="ignore", invalid="ignore"):
        folds = 1 - sse / sst
        pooled = 1 - np.nansum(sse, 0) / np.nansum(sst, 0)

    def with_mean(x: Float[np.ndarray, "*groups query_windows layers"]) -> Float[np.ndarray, "*groups query_windows layers+1"]:
        later = x[..., 1:] if n_layers > 1 else x
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.concatenate([x, np.nanmean(later, axis=-1, keepdims=True)], axis=-1)

    return with_mean(pooled), with_mean(folds)
