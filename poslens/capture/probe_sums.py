"""The position probe's design sums, formed from one layer's row features on the host or on the scores' device.

The probe regresses y = log(1 + i) on x̃ = (1, the features of every head) over
the rows of each query window; the capture keeps its sufficient statistics
x̃ x̃ᵀ, x̃ y, Σ y, Σ y² and the row count per (group, layer, query window).
"""

from __future__ import annotations

import numpy as np
import torch
from einops import rearrange
from jaxtyping import Float

from poslens.capture.batch_groups import BatchGroups
from poslens.capture.capture_plan import CapturePlan
from poslens.fit.sums import QUERY_WINDOWS, SumFields


def add_probe_on_host(
    per_group: SumFields,
    group: int,
    layer: int | slice | np.ndarray,
    features: Float[torch.Tensor, "batch *layers seq heads features"],
    plan: CapturePlan,
) -> None:
    """Add the probe's design sums x̃ x̃ᵀ, x̃ y, y, y² and row count of one layer's rows, or of several layers', per query window.

    Args:
        per_group: The per-group sums to add to.
        group: The group of the batch.
        layer: The layer index; or the layers (a slice or an index array) of ``features``' layer axis.
        features: The row features on the CPU, [batch, T, H, F]; with several layers [batch, layers, T, H, F].
        plan: The layers' plan (their query windows' rows).

    Example:
        >>> from poslens.fit.binning import Binning
        >>> from poslens.fit.sums import FEATURES
        >>> plan = CapturePlan.build(Binning(8), None)
        >>> sums = SumFields.zeros(groups=1, layers=1, heads=1, binning=Binning(8))
        >>> add_probe_on_host(sums, 0, 0, torch.zeros(2, 8, 1, len(FEATURES), dtype=torch.float64), plan)
        >>> sums.probe_row_count[0, 0].tolist()   # 2 sequences × (7 early rows, 7 rows i ≥ 1)
        [14.0, 14.0]
        >>> add_probe_on_host(sums, 0, slice(0, 1), torch.zeros(2, 1, 8, 1, len(FEATURES), dtype=torch.float64), plan)
        >>> sums.probe_row_count[0, 0].tolist()   # the same layer's rows, once more
        [28.0, 28.0]
    """
    one_layer = isinstance(layer, int)
    stacked = features[:, None] if one_layer else features  # [batch, layers, T, H, F]
    batch, n_layers, t = stacked.shape[:3]
    x = torch.cat(
        [
            torch.ones(batch, n_layers, t, 1, dtype=torch.float64),
            rearrange(stacked, "batch layer seq head feature -> batch layer seq (head feature)"),
        ],
        -1,
    )
    y = torch.log1p(plan.positions)[None, :].expand(batch, t)
    for w_index, query_window in enumerate(QUERY_WINDOWS):
        rows = plan.query_window_rows[query_window]
        xs, ys = rearrange(x[:, :, rows], "batch layer row probe -> layer (batch row) probe"), y[:, rows].reshape(-1)
        gram, design_x_target = xs.mT @ xs, xs.mT @ ys  # [layers, P, P], [layers, P]
        per_group.probe_gram[group, layer, w_index] += (gram[0] if one_layer else gram).numpy()
        per_group.probe_design_x_target[group, layer, w_index] += (design_x_target[0] if one_layer else design_x_target).numpy()
        per_group.probe_target[group, layer, w_index] += float(ys.sum())
        per_group.probe_target_sq[group, layer, w_index] += float((ys * ys).sum())
        per_group.probe_row_count[group, layer, w_index] += ys.numel()


def probe_parts_on_device(features: Float[torch.Tensor, "batch heads seq features"], plan: CapturePlan, runs: BatchGroups) -> dict[str, torch.Tensor]:
    """The probe's design sums of one layer's rows, per run of one group and query window, formed on the features' device
    without a synchronization.

    The sync-free path's :func:`add_probe_on_host`, less the row count (which the
    plan knows: ``sequences × query_window_row_counts``).

    Args:
        features: The row features, [batch, H, T, F], on the scores' device.
        plan: The layer's plan.
        runs: The groups of the batch's sequences.

    Returns:
        ``{"probe_gram", "probe_design_x_target", "probe_target", "probe_target_sq"}``, each [runs, query windows, ...].

    Example:
        >>> from poslens.fit.binning import Binning
        >>> from poslens.fit.sums import FEATURES
        >>> features = torch.zeros(2, 1, 8, len(FEATURES), dtype=torch.float64)
        >>> parts = probe_parts_on_device(features, CapturePlan.build(Binning(8), None), BatchGroups.of([0, 1]))
        >>> tuple(parts["probe_gram"].shape) == (2, 2, len(FEATURES) + 1, len(FEATURES) + 1)   # 2 runs, 2 query windows
        True
    """
    per_run = [_probe_parts(features[first:end], plan) for _, first, end in runs.runs]
    return {name: torch.stack([part[name] for part in per_run]) for name in per_run[0]}


def _probe_parts(features: Float[torch.Tensor, "batch heads seq features"], plan: CapturePlan) -> dict[str, torch.Tensor]:
    """:func:`probe_parts_on_device` of sequences of one group: each part stacked over the query windows."""
    batch, t = features.shape[0], features.shape[2]
    device = features.device
    on_device = plan.on(device)
    ones = torch.ones(batch, t, 1, dtype=torch.float64, device=device)
    x = torch.cat([ones, rearrange(features, "batch head seq feature -> batch seq (head feature)")], -1)
    y = torch.log1p(on_device.key_positions)[None, :].expand(batch, t)
    per_query_window: dict[str, list[torch.Tensor]] = {"probe_gram": [], "probe_design_x_target": [], "probe_target": [], "probe_target_sq": []}
    for query_window in QUERY_WINDOWS:
        rows = on_device.query_window_rows[query_window]
        xs = rearrange(x.index_select(1, rows), "batch row probe -> (batch row) probe")
        ys = y.index_select(1, rows).reshape(-1)
        for name, value in zip(per_query_window, (xs.T @ xs, xs.T @ ys, ys.sum(), (ys * ys).sum()), strict=False):
            per_query_window[name].append(value)
    return {name: torch.stack(values) for name, values in per_query_window.items()}
