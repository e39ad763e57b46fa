"""Every figure of a measurement, from cell sums, with 95% intervals over groups.

Arrays are indexed [window, layer, head] with one extra layer index (the last,
layer = −1 in tables: the mean over layers ≥ 1) and one extra head index
(the last, head = −1: the mean over heads). Shares (ρ, count_share) of an
aggregate are ratios of aggregated components, so C_res + C_mask =
leakage_pattern holds for aggregates too.
"""

from __future__ import annotations

import warnings

import numpy as np

from poslens.fit.binning import Binning
from poslens.fit.counterfactual import meanfield_cells
from poslens.fit.decompose import share, split
from poslens.fit.stats import (
    fold_interval,
    held_out_r2,
    jackknife_interval,
    linear_r2_gain,
    project,
    ridge_fit,
    total_sum_of_squares,
    weighted_inner,
)
from poslens.fit.sums import FEATURES, WINDOWS, CellSums

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


def _window_cells(p: dict[str, np.ndarray], layer: int, mask: np.ndarray):
    counts = p["n"][layer][mask]
    return counts, p["s1"][layer][:, mask], p["z1"][layer][:, mask], p["c1"][layer][mask]


def _ratio(numerator: np.ndarray, total_ss: np.ndarray, sum_sq: np.ndarray) -> np.ndarray:
    """ΔR² numerator / SST, NaN where y is constant (SST at rounding level of Σy²)."""
    constant = total_ss <= 1e-12 * np.maximum(sum_sq, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(constant, np.nan, numerator / total_ss)


def head_metrics(p: dict[str, np.ndarray], binning: Binning, layer_windows: tuple[int | None, ...]) -> dict[str, np.ndarray]:
    """All per-head metrics [window, layer, head] from pooled sums ``p`` (ratios are left to :func:`aggregate`).

    ``layer_windows`` is each layer's sliding window (None: causal), as kept in
    :attr:`poslens.fit.sums.CellSums.layer_windows`.

    Example:
        >>> m = head_metrics(sums.pooled(), sums.binning, sums.layer_windows)  # doctest: +SKIP
        >>> m["c_res"].shape  # doctest: +SKIP
        (2, 30, 9)
    """
    n_layers, n_heads = p["s1"].shape[:2]
    out = {name: np.full((len(WINDOWS), n_layers, n_heads), np.nan) for name in ADDITIVE}
    for w, window in enumerate(WINDOWS):
        mask = binning.windows[window]
        meanfield = meanfield_cells(p, binning, layer_windows, window)
        for layer in range(n_layers):
            counts, y_s, y_z, y_c = _window_cells(p, layer, mask)
            total = counts.sum()
            if total == 0:
                continue
            y_cf = p[f"cf_{window}"][layer][:, mask]
            y_mf = meanfield[layer][:, mask]
            proj = project(np.stack([y_s, y_z, y_cf, y_mf]), counts)
            proj_c = project(y_c, counts)
            n = proj.counts
            s_tot, z_tot, c_tot = y_s.sum((-2, -1)), y_z.sum((-2, -1)), y_c.sum()
            s2 = p["s2"][layer][:, mask].sum(-1)
            z2 = p["z2"][layer][:, mask].sum(-1)
            sz = p["sz"][layer][:, mask].sum(-1)
            sst_s = total_sum_of_squares(s2, s_tot, total)
            sst_a = total_sum_of_squares(s2 - 2 * sz + z2, s_tot - z_tot, total)
            sst_c = total_sum_of_squares(p["c2"][layer][mask].sum(), c_tot, total)
            p_s, p_z, p_cf, p_mf = proj.absolute
            sat_s, sat_z, sat_cf, _ = proj.saturated - proj.relative
            p_c, sat_c = proj_c.absolute, proj_c.saturated - proj_c.relative
            p_a, sat_a = p_s - p_z, sat_s - sat_z
            sq_a = s2 - 2 * sz + z2
            leak_a = _ratio(weighted_inner(p_a, p_a, n), sst_a, sq_a)
            leak_sat = _ratio(weighted_inner(sat_a, sat_a, n), sst_a, sq_a)
            out["leakage_pattern"][w, layer] = leak_a
            out["leakage_logit"][w, layer] = _ratio(weighted_inner(p_s, p_s, n), sst_s, s2)
            out["leakage_pattern_saturated"][w, layer] = leak_sat
            out["leakage_logit_saturated"][w, layer] = _ratio(weighted_inner(sat_s, sat_s, n), sst_s, s2)
            out["leakage_count"][w, layer] = _ratio(weighted_inner(p_c, p_c, n), sst_c, p["c2"][layer][mask].sum())
            moments = {k: p[k][layer][mask].sum() for k in ("i1", "j1", "ii", "jj", "ij")}
            moments.update(n=total, y1=s_tot, yi=p["si"][layer][:, mask].sum(-1), yj=p["sj"][layer][:, mask].sum(-1))
            out["leakage_linear"][w, layer] = linear_r2_gain(moments, sst_s)
            for suffix, p_pattern, p_cf_, leak, p_count in (
                ("", p_a, p_cf, leak_a, p_c),
                ("_saturated", sat_a, sat_cf, leak_sat, sat_c),
            ):
                parts = split(p_pattern, p_cf_, n, leak)
                out[f"c_res{suffix}"][w, layer], out[f"c_mask{suffix}"][w, layer] = parts.c_res, parts.c_mask
                out[f"c_count{suffix}"][w, layer] = share(p_pattern, -np.broadcast_to(p_count, p_pattern.shape), n) * leak
            meanfield_split = split(p_a, p_mf, n, leak_a)
            out["c_res_meanfield"][w, layer], out["c_mask_meanfield"][w, layer] = meanfield_split.c_res, meanfield_split.c_mask
            logit_share = share(p_a, p_s, n)
            out["c_res_logit"][w, layer], out["c_mask_logit"][w, layer] = logit_share * leak_a, (1 - logit_share) * leak_a
            rows = p["rows"][mask].sum()
            feats = p["feat"][layer][:, :, mask].sum(-1) / rows  # [H, F]
            for f, name in enumerate(FEATURES):
                out[name][w, layer] = feats[:, f]
    return out


def aggregate(per_head: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add the head = −1 (mean over heads) and layer = −1 (mean over layers ≥ 1) entries.

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


def all_metrics(p: dict[str, np.ndarray], binning: Binning, layer_windows: tuple[int | None, ...]) -> dict[str, np.ndarray]:
    """Per-head metrics with their aggregates, from pooled sums.

    Example:
        >>> all_metrics(sums.pooled(), sums.binning, sums.layer_windows)["c_res"].shape  # doctest: +SKIP
        (2, 31, 10)"""
    return aggregate(head_metrics(p, binning, layer_windows))


def held_out_metrics(sums: CellSums) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Cross-fitted ΔR²: fit on all groups but g, score on g (METHOD §5's bias check).

    Returns (pooled values, per-fold values [G, ...]) for leakage_pattern_heldout
    and leakage_logit_heldout, aggregated like :func:`aggregate`; the pooled
    value is Σ_g (SSE_R − SSE_F) / Σ_g SST over folds g.

    Example:
        >>> pooled, folds = held_out_metrics(sums)  # doctest: +SKIP
        >>> folds["leakage_pattern_heldout"].shape[0] == sums.n_groups  # doctest: +SKIP
        True
    """
    g_count = sums.n_groups
    binning = sums.binning
    n_layers, n_heads = sums.n_layers, sums.n_heads
    gain = {k: np.full((g_count, len(WINDOWS), n_layers, n_heads), np.nan) for k in HELD_OUT}
    sst = {k: np.full((g_count, len(WINDOWS), n_layers, n_heads), np.nan) for k in HELD_OUT}
    for g in range(g_count):
        train, test = sums.leave_out(g), sums.group(g)
        for w, window in enumerate(WINDOWS):
            mask = binning.windows[window]
            for layer in range(n_layers):
                counts, y_s, y_z, _ = _window_cells(train, layer, mask)
                t_counts, t_s, t_z, _ = _window_cells(test, layer, mask)
                if counts.sum() == 0 or t_counts.sum() == 0:
                    continue
                cells = counts > 0
                proj_s, proj_z = project(y_s, counts), project(y_z, counts)
                n_test = t_counts[cells]
                total = t_counts.sum()
                s2 = test["s2"][layer][:, mask].sum(-1)
                z2 = test["z2"][layer][:, mask].sum(-1)
                sz = test["sz"][layer][:, mask].sum(-1)
                for key, rel, add, y_test, sq, tot in (
                    ("leakage_logit_heldout", proj_s.relative, proj_s.additive, t_s[:, cells], s2, t_s.sum((-2, -1))),
                    (
                        "leakage_pattern_heldout",
                        proj_s.relative - proj_z.relative,
                        proj_s.additive - proj_z.additive,
                        t_s[:, cells] - t_z[:, cells],
                        s2 - 2 * sz + z2,
                        (t_s - t_z).sum((-2, -1)),
                    ),
                ):
                    sse_gap = -2 * ((rel - add) * y_test).sum(-1) + (n_test * (rel**2 - add**2)).sum(-1)
                    gain[key][g, w, layer] = sse_gap
                    sst[key][g, w, layer] = total_sum_of_squares(sq, tot, total)
    pooled, folds = {}, {}
    for key in HELD_OUT:
        with np.errstate(divide="ignore", invalid="ignore"):
            per_fold = aggregate({key: (gain[key] / sst[key]).reshape(-1, n_layers, n_heads)})[key]
            folds[key] = per_fold.reshape(g_count, len(WINDOWS), n_layers + 1, n_heads + 1)
            head_pooled = np.nansum(gain[key], 0) / np.nansum(sst[key], 0)
        pooled[key] = aggregate({key: head_pooled})[key]
    return pooled, folds


def probe_metrics(sums: CellSums, penalty: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """Held-out R² of a ridge probe from one layer's head features to log(i + 1).

    Features per query row: a_i0, entropy, a_ii and max_j a_ij of every head.
    Fold g trains on the other groups and scores on g. Returns (pooled R²,
    per-fold R² [G, ...]), both [window, layer + 1] (last = mean over layers ≥ 1).

    Example:
        >>> r2, per_fold = probe_metrics(sums)  # doctest: +SKIP
        >>> r2.shape  # doctest: +SKIP
        (2, 31)
    """
    g_count, n_layers = sums.n_groups, sums.n_layers
    sse = np.zeros((g_count, len(WINDOWS), n_layers))
    sst = np.zeros_like(sse)
    for g in range(g_count):
        train, test = sums.leave_out(g), sums.group(g)
        for w in range(len(WINDOWS)):
            for layer in range(n_layers):
                if train["pn"][layer, w] < 2 or test["pn"][layer, w] < 2:
                    sse[g, w, layer] = sst[g, w, layer] = np.nan
                    continue
                theta = ridge_fit(train["xtx"][layer, w], train["xty"][layer, w], train["y1"][layer, w], train["pn"][layer, w], penalty)
                sse[g, w, layer], sst[g, w, layer] = held_out_r2(
                    theta, test["xtx"][layer, w], test["xty"][layer, w], test["yy"][layer, w], test["y1"][layer, w], test["pn"][layer, w]
                )
    with np.errstate(divide="ignore", invalid="ignore"):
        folds = 1 - sse / sst
        pooled = 1 - np.nansum(sse, 0) / np.nansum(sst, 0)

    def with_mean(x: np.ndarray) -> np.ndarray:
        later = x[..., 1:] if n_layers > 1 else x
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.concatenate([x, np.nanmean(later, axis=-1, keepdims=True)], axis=-1)

    return with_mean(pooled), with_mean(folds)


def metrics_with_intervals(sums: CellSums, probe: bool = True) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every metric as (value, ci_low, ci_high) arrays [window, layer + 1, head + 1].

    In-sample metrics get delete-one-group jackknife intervals (each replicate
    refits P and the mean-field counterfactual's g and β without group g; the
    per-sequence counterfactual's cell sums keep the cross-fitted residual each
    group used in the second pass); held-out ones
    (``*_heldout``, ``probe_r2``) intervals from their per-fold spread;
    ``leakage_pattern_bias`` is in-sample minus held-out, jackknifed per fold.

    Example:
        >>> value, low, high = metrics_with_intervals(sums)["c_res"]  # doctest: +SKIP
    """
    if sums.n_groups < 2:
        raise ValueError("intervals need at least 2 groups of sequences")
    estimate = all_metrics(sums.pooled(), sums.binning, sums.layer_windows)
    replicates = [all_metrics(sums.leave_out(g), sums.binning, sums.layer_windows) for g in range(sums.n_groups)]
    result = {}
    for name, value in estimate.items():
        low, high = jackknife_interval(value, np.stack([r[name] for r in replicates]))
        result[name] = (value, low, high)
    pooled, folds = held_out_metrics(sums)
    for name in HELD_OUT:
        low, high = fold_interval(pooled[name], folds[name])
        result[name] = (pooled[name], low, high)
    bias = estimate["leakage_pattern"] - pooled["leakage_pattern_heldout"]
    low, high = fold_interval(bias, estimate["leakage_pattern"][None] - folds["leakage_pattern_heldout"])
    result["leakage_pattern_bias"] = (bias, low, high)
    if not probe:
        return result
    probe, probe_folds = probe_metrics(sums)
    low, high = fold_interval(probe, probe_folds)
    shape = estimate["c_res"].shape
    for name, values in (("probe_r2", (probe, low, high)),):
        arrays = []
        for v in values:
            full = np.full(shape, np.nan)
            full[:, :, -1] = v
            arrays.append(full)
        result[name] = tuple(arrays)
    return result
