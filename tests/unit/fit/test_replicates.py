"""One replicate API: measure fits each figure and its G leave-one-group-out replicates once; the rest reuse them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import poslens.fit.replicates as replicates_module
from poslens.fit.metrics import all_metrics
from poslens.fit.stats import jackknife_interval
from poslens.measurement.pipeline import measure_scores
from poslens.measurement.result import Result
from poslens.mechanisms.comparison_cases import case_figures
from poslens.mechanisms.effects import paired_difference, reduction

T = 16


def _scores(absolute: float, seed: int) -> list[torch.Tensor]:
    """Three layers of scores for 8 sequences and 2 heads: relative, plus a key-0 term growing with the query."""
    g = torch.Generator().manual_seed(seed)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    layers = []
    for layer in range(3):
        base = -0.1 * (i - j) + absolute * (layer + 1) * i * (j == 0)
        noise = 0.05 * torch.randn(8, 2, T, T, generator=g)
        layers.append((base + noise).float().masked_fill(j > i, torch.finfo(torch.float32).min))
    return layers


@pytest.fixture(scope="module")
def runs() -> tuple[Result, Result]:
    before = measure_scores(_scores(0.02, seed=0), groups=4, early=8, row_sums="second-pass")
    after = measure_scores(_scores(0.005, seed=0), groups=4, early=8, row_sums="second-pass")
    return before, after


def _refit(result: Result, metric: str, window: int) -> tuple[np.ndarray, np.ndarray]:
    """The independent route: all_metrics on the pooled sums and on each leave-one-group-out sum, by hand."""
    sums, cells = result.sums, result.sums.counterfactual_cells
    estimate = all_metrics(sums.pooled(), cells.pooled(), sums.binning, sums.layer_windows)[metric][window]
    replicates = np.stack(
        [all_metrics(sums.leave_out(g), cells.leave_out(g), sums.binning, sums.layer_windows)[metric][window] for g in range(sums.n_groups)]
    )
    return estimate, replicates


def test_measure_keeps_the_fits_it_made_for_the_intervals(runs):
    before, _ = runs
    fits = before.fits
    assert fits is not None and fits.n_groups == 4
    for window in (0, 1):
        estimate, replicates = _refit(before, "c_res", window)
        np.testing.assert_allclose(fits.estimate["c_res"][window], estimate, rtol=0, atol=1e-12)
        np.testing.assert_allclose(fits.replicates["c_res"][:, window], replicates, rtol=0, atol=1e-12)
    row = before.select("c_res", "all", layer=1, head=0).iloc[0]
    low, high = jackknife_interval(*_refit(before, "c_res", 1))
    assert row["ci_low"] == pytest.approx(low[1, 0], abs=1e-12) and row["ci_high"] == pytest.approx(high[1, 0], abs=1e-12)


def test_reductions_differences_and_cases_refit_nothing(runs, monkeypatch):
    before, after = runs
    fitted = []
    original = replicates_module.all_metrics
    monkeypatch.setattr(replicates_module, "all_metrics", lambda *a, **k: fitted.append(1) or original(*a, **k))
    import poslens.mechanisms.comparison_cases as cases
    import poslens.mechanisms.effects as effects

    for module in (effects, cases):
        if hasattr(module, "all_metrics"):
            monkeypatch.setattr(module, "all_metrics", lambda *a, **k: pytest.fail("refitted the sums"))
    reduction(before, after, "c_res", "all")
    paired_difference(before, after, "c_mask", "early")
    case_figures(before)
    assert fitted == []  # every figure came from the fits measure kept


def test_the_paired_interval_is_the_paired_jackknife_of_the_refits(runs):
    before, after = runs
    rows = reduction(before, after, "c_res", "all")
    b, b_reps = _refit(before, "c_res", 1)
    a, a_reps = _refit(after, "c_res", 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = 1 - a / b
        low, high = jackknife_interval(estimate, 1 - a_reps / b_reps)
    row = rows[(rows["layer"] == 1) & (rows["head"] == -1)].iloc[0]
    assert row["value"] == pytest.approx(estimate[1, -1], abs=1e-10)
    assert row["ci_low"] == pytest.approx(low[1, -1], abs=1e-10) and row["ci_high"] == pytest.approx(high[1, -1], abs=1e-10)


def test_a_loaded_result_fits_once_from_its_sums(runs, tmp_path, monkeypatch):
    before, _ = runs
    path = before.save(tmp_path / "leakage.parquet")
    loaded = Result.load(path)
    assert loaded.fits is None
    calls = []
    original = replicates_module.Replicates.of
    monkeypatch.setattr(replicates_module.Replicates, "of", classmethod(lambda cls, sums: calls.append(1) or original(sums)))
    first, second = loaded.replicates(), loaded.replicates()
    assert first is second and calls == [1]
    np.testing.assert_allclose(first.estimate["c_res"], before.fits.estimate["c_res"], rtol=0, atol=1e-12)


def test_a_result_without_sums_says_what_to_load(runs):
    from poslens.errors import InputError

    with pytest.raises(InputError, match="no cell sums"):
        Result(runs[0].table).replicates()
