"""The heads' inner products from the saturated residuals (:func:`poslens.fit.stats.residual_grams`), and the held-out figures.

Checked against the explicit route (fitted values of models R and F over the cells, then weighted inner
products) on an easy case, and against that route in extended precision (benchmarks/grams_precision.py's
``explicit_grams`` and ``held_out_ratios``) on hard ones: large offset-bin means with a small absolute
component, as real logits have, where the explicit route in float64 loses digits that the package keeps.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from poslens.fit.binning import Binning
from poslens.fit.metrics import held_out_metrics
from poslens.fit.stats import residual_grams
from poslens.measurement.pipeline import measure_scores

_SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "grams_precision.py"
_spec = importlib.util.spec_from_file_location("grams_precision", _SCRIPT)
grams_precision = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(grams_precision)

extended = pytest.mark.skipif(
    np.finfo(np.longdouble).nmant < 63, reason="needs numpy's 80-bit long double (x86) for the extended-precision reference"
)


def causal_counts(seq_len: int, n_seqs: int, query_window: str = "all") -> np.ndarray:
    """Pair counts per (query bin, offset bin) of a causal layer, in the query bins of ``query_window``."""
    binning = Binning(seq_len)
    i, j = np.arange(seq_len)[:, None], np.arange(seq_len)[None, :]
    visible = np.broadcast_to(j <= i, (seq_len, seq_len))
    query_bin = np.broadcast_to(np.asarray(binning.query_bin)[:seq_len, None], visible.shape)
    offset_bin = np.asarray(binning.offset_bin)[np.clip(i - j, 0, None)]
    counts = np.zeros((binning.n_query_bins, binning.n_offset_bins))
    np.add.at(counts, (query_bin[visible], offset_bin[visible]), float(n_seqs))
    return counts[binning.query_windows[query_window]]


def scaled_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got − want| / sqrt(want_uu · want_vv): the error against the entries' own scale."""
    diagonal = np.einsum("...uu->...u", want)
    return float((np.abs(got - want) / np.sqrt(diagonal[..., :, None] * diagonal[..., None, :])).max())


@pytest.mark.parametrize("query_window", ["all", "early"])
def test_the_inner_products_are_those_of_the_fitted_values(query_window: str):
    counts = causal_counts(64, 3, query_window)
    rng = np.random.default_rng(1)
    sums = rng.normal(size=(2, 3, *counts.shape)) * counts  # [heads, responses, C, B]; empty cells hold 0
    grams = residual_grams(sums, counts)
    want_absolute, want_saturated = grams_precision.explicit_grams(sums, counts)
    np.testing.assert_allclose(grams.absolute, want_absolute, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(grams.saturated, want_saturated, rtol=1e-10, atol=1e-10)


@extended
def test_large_offset_means_keep_their_digits():
    # logits near −30 that vary by offset bin, an absolute component of 1e-3 · log(1 + c) and noise of 1e-2
    counts = causal_counts(128, 8)
    rng = np.random.default_rng(0)
    c, b = np.arange(counts.shape[0])[:, None], np.arange(counts.shape[1])[None, :]
    drift = 1e-3 * np.log1p(c) * np.array([1.0, 2.0, -1.0])[:, None, None]
    means = -30.0 + 5 * np.sin(b) + drift + rng.normal(0, 1e-2, size=(4, 3, *counts.shape))
    sums = means * counts
    want_absolute, want_saturated = grams_precision.explicit_grams(sums, counts, grams_precision.EXTENDED)
    grams = residual_grams(sums, counts)
    assert scaled_error(grams.absolute, want_absolute) < 1e-10
    assert scaled_error(grams.saturated, want_saturated) < 1e-10
    # the case is hard: the explicit route in float64 misses by far more than that bound
    assert scaled_error(grams_precision.explicit_grams(sums, counts)[0], want_absolute) > 1e-9


def large_mean_scores(n: int, heads: int, t: int, seed: int) -> torch.Tensor:
    """Logits near −30 that vary with the offset, a sink at key 0 and noise of 1e-2: no absolute term."""
    g = torch.Generator().manual_seed(seed)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    x = -30.0 + 5 * torch.sin(0.7 * (i - j).double()) + 3.0 * (j == 0)
    x = x[None, None] + 1e-2 * torch.randn(n, heads, t, t, generator=g, dtype=torch.float64)
    return x.float().masked_fill(j > i, torch.finfo(torch.float32).min)


@extended
def test_the_held_out_figures_keep_their_digits():
    sums = measure_scores([large_mean_scores(16, 2, 64, seed) for seed in range(3)], groups=4, early=16).sums
    _, folds = held_out_metrics(sums)
    want = grams_precision.held_out_ratios(sums, grams_precision.EXTENDED)
    former = grams_precision.held_out_ratios(sums)
    for name, reference in want.items():
        assert grams_precision.largest_relative_error(folds[name][:, :, :-1, :-1], reference) < 1e-13, name
    # the case is hard: SSE_R − SSE_F as a difference of large squares misses the logit's figure by more than the bound
    assert grams_precision.largest_relative_error(former["leakage_logit_heldout"], want["leakage_logit_heldout"]) > 1e-13


@pytest.mark.parametrize("fused", [True, False], ids=["compiled", "numpy"])
def test_both_routes_give_the_explicit_inner_products(fused, monkeypatch):
    """The compiled loop and the numpy route each equal ⟨P(y_u), P(y_v)⟩ and the saturated products formed from
    project()'s fitted values, on a table with an empty cell, an offset bin with no cell and a query bin with none."""
    from poslens import compiled
    from poslens.fit import stats
    from poslens.fit.stats import project, weighted_inner

    if fused and not compiled.fused_available():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(stats, "fused_available", lambda: fused)
    rng = np.random.default_rng(7)
    counts = rng.integers(1, 9, size=(6, 7)).astype(float)
    counts[2, 3] = 0.0
    counts[:, 5] = 0.0  # an offset bin without cells
    counts[4, :] = 0.0  # a query bin without cells
    sums = rng.normal(size=(2, 3, 4, 6, 7)) * counts + 5.0 * counts * np.arange(7)  # offset-bin means to remove
    grams = residual_grams(sums, counts)
    fits = project(sums, counts)
    p, r = fits.absolute, fits.saturated - fits.relative
    want_absolute = np.einsum("...uk,...vk,k->...uv", p, p, fits.counts)  # Σ_k n_k P_k(y_u) P_k(y_v)
    want_saturated = np.einsum("...uk,...vk,k->...uv", r, r, fits.counts)
    assert np.isclose(want_absolute[0, 0, 1, 2], weighted_inner(p[0, 0, 1], p[0, 0, 2], fits.counts))
    np.testing.assert_allclose(grams.absolute, want_absolute, rtol=1e-10, atol=1e-10 * np.abs(want_absolute).max())
    np.testing.assert_allclose(grams.saturated, want_saturated, rtol=1e-10, atol=1e-10 * np.abs(want_saturated).max())
    assert grams.absolute.shape == (2, 3, 4, 4) and np.abs(want_absolute).max() > 0
