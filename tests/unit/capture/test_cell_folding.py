"""cell_parts' log-partition cells against a naive loop over rows, by query-bin slices and by the einsum it falls back to."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from poslens.capture.batch_groups import BatchGroups
from poslens.capture.capture_plan import CapturePlan, query_bin_slices
from poslens.capture.cell_folding import cell_parts
from poslens.fit.binning import Binning


def _naive_log_partition(plan: CapturePlan, runs: list[list[int]], log_z: torch.Tensor) -> torch.Tensor:
    fold, per_bin = plan.query_fold, plan.geometry.per_bin
    n_c, t = fold.shape
    out = torch.zeros(len(runs), *log_z.shape[1:-1], n_c, per_bin.shape[1], dtype=torch.float64)
    for r, members in enumerate(runs):
        for b in members:
            for s in range(t):
                q = int(fold[:, s].argmax())
                out[r, ..., q, :] += log_z[b, ..., s, None] * per_bin[s]
    return out


@pytest.mark.parametrize("window", [None, 5])
def test_log_partition_by_query_bin_slices_equals_a_naive_loop(window):
    plan = CapturePlan.build(Binning(40), window)
    assert plan.on(torch.device("cpu")).query_bin_rows is not None
    log_z = torch.randn(3, 2, 4, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(0))  # [batch, layers, heads, T]
    runs = BatchGroups.of([0, 1, 1])
    z = torch.zeros(3, 2, 4, 40, dtype=torch.float64)
    cells = torch.zeros(2, 2, 4, plan.binning.n_query_bins, plan.binning.n_offset_bins, dtype=torch.float64)
    parts = cell_parts(plan, runs, log_z, z, z, z, cells, z[:2], torch.zeros(2, 2, 2, 4, 40, dtype=torch.float64))
    torch.testing.assert_close(parts["log_partition"], _naive_log_partition(plan, [[0], [1, 2]], log_z), rtol=1e-13, atol=1e-12)


def test_a_fold_whose_bins_are_not_runs_of_rows_takes_the_einsum():
    assert query_bin_slices(torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])) is None
    assert query_bin_slices(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])) is None  # row 2 in no bin
    plan = CapturePlan.build(Binning(24), None)
    log_z = torch.randn(2, 3, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    runs, z = BatchGroups.of([0, 0]), torch.zeros(2, 3, 24, dtype=torch.float64)
    cells = torch.zeros(1, 3, plan.binning.n_query_bins, plan.binning.n_offset_bins, dtype=torch.float64)
    by_slices = cell_parts(plan, runs, log_z, z, z, z, cells, z[:1], torch.zeros(1, 2, 3, 24, dtype=torch.float64))["log_partition"]
    on_cpu = plan.on(torch.device("cpu"))
    plan._on_device["cpu"] = dataclasses.replace(on_cpu, query_bin_rows=None)
    by_einsum = cell_parts(plan, runs, log_z, z, z, z, cells, z[:1], torch.zeros(1, 2, 3, 24, dtype=torch.float64))["log_partition"]
    torch.testing.assert_close(by_slices, by_einsum, rtol=1e-14, atol=1e-13)
    torch.testing.assert_close(by_einsum, _naive_log_partition(plan, [[0, 1]], log_z), rtol=1e-13, atol=1e-12)
