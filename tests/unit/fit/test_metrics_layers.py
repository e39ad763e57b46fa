"""Layers that share their pair counts are projected together in :mod:`poslens.fit.metrics`.

A projection depends on the counts only, so every causal layer (or every layer
of one window) goes through one :func:`poslens.fit.stats.project`. That must
not change a figure: each is compared, to the bit, with the same metrics when
every layer is projected on its own.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from poslens.fit import metric_intervals, metrics
from poslens.measurement.pipeline import measure_scores


def scores(n: int, heads: int, t: int, sliding_window: int | None, seed: int) -> torch.Tensor:
    """Noisy heads with a relative kernel, a sink, a key-position term and a key-0 term growing with i."""
    g = torch.Generator().manual_seed(seed)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    x = -0.05 * (i - j) + torch.sin(0.3 * (i - j)) + 3.0 * (j == 0) + 0.3 * torch.log1p(i.float()) * (j == 0) + 0.2 * torch.log1p(j.float())
    x = x[None, None] + 0.5 * torch.randn(n, heads, t, t, generator=g)
    hidden = (j > i) if sliding_window is None else (j > i) | (i - j >= sliding_window)
    return x.float().masked_fill(hidden, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("heads", [1, 2])
def test_layers_projected_together_give_the_figures_of_one_layer_at_a_time(heads: int, monkeypatch):
    sliding_windows = [None, 6, None, 6, 50]  # 50 ≥ T: causal
    sums = measure_scores(
        [scores(8, heads, 30, w, seed=k) for k, w in enumerate(sliding_windows)], groups=4, early=10, layer_windows=sliding_windows
    ).sums
    runs = metrics._layers_sharing_counts(sums.binning.query_windows["all"], sums.pooled().pair_count)
    assert sorted(map(sorted, runs)) == [[0, 2, 4], [1, 3]]
    together = metric_intervals.metrics_with_intervals(sums, probe=True)
    monkeypatch.setattr(metrics, "_layers_sharing_counts", lambda mask, *counts: [[layer] for layer in range(counts[0].shape[0])])
    alone = metric_intervals.metrics_with_intervals(sums, probe=True)
    assert together.keys() == alone.keys()
    for name, arrays in together.items():
        for got, want in zip(arrays, alone[name], strict=True):
            np.testing.assert_array_equal(got, want, err_msg=name)
