"""The absolute terms of a relativizing edit (methodology §11), against closed forms and a dense one-hot fit.

The dense fit here writes the pair-level design out (exact offsets, key 0, exact rows, cells, κ per query bin),
projects with numpy's pseudo-inverse and takes the pair-weighted minimum-norm edit with scipy's null space:
nothing of poslens.fit.relativize's sums-based solve.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from poslens.fit.binning import Binning
from poslens.fit.counterfactual import fit_logits
from poslens.fit.mask_structure import structural_cells, structural_sums, structure
from poslens.fit.relativize import AbsoluteTerms, check_mode, dense_sums, edit_solver, edit_values


def _pairs(t: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    keep = (i >= 1) & (i - j >= 0) & (i - j < d)
    return i[keep], j[keep]


def dense_edit(logits: np.ndarray, binning: Binning, sliding_window: int | None) -> np.ndarray:
    """E on every visible pair of one head's mean logits [T, T], by explicit least squares."""
    t = logits.shape[-1]
    d = t if sliding_window is None or sliding_window >= t else sliding_window
    i, j = _pairs(t, d)
    m = np.concatenate([np.eye(d)[i - j], (j == 0)[:, None] * 1.0, np.eye(t)[i]], axis=1)
    cell = binning.query_bin[i] * binning.n_offset_bins + binning.offset_bin[i - j]
    one_hot = np.eye(binning.n_query_bins * binning.n_offset_bins)[cell]
    mixed = [k for k in range(one_hot.shape[1]) if one_hot[:, k].sum() > 0 and one_hot[j != 0, k].sum() > 0]
    kappa = np.eye(binning.n_query_bins)[binning.query_bin[i]] * (j == 0)[:, None]
    z = np.concatenate([one_hot[:, mixed], kappa[:, kappa.sum(0) > 0]], axis=1)
    project = m @ np.linalg.pinv(m)
    zt = z - project @ z
    y = logits[i, j]
    x0 = np.linalg.lstsq(zt, y - project @ y, rcond=None)[0]
    null = scipy.linalg.null_space(zt)
    gram = z.T @ z
    x = x0 - null @ np.linalg.solve(null.T @ gram @ null, null.T @ gram @ x0)
    out = np.zeros((t, t))
    out[i, j] = z @ x
    return out


@pytest.mark.parametrize("t, sliding_window", [(24, None), (40, 8), (40, None)])
def test_edit_matches_dense_one_hot_fit(t, sliding_window):
    rng = np.random.default_rng(t)
    binning = Binning(t, early=8)
    st = structure(binning, rows=t, sliding_window=sliding_window)
    i = np.arange(t)
    logits = rng.normal(size=(2, t, t)) + 0.2 * np.log1p(i)[None, None, :] + 0.1 * np.sqrt(i)[None, :, None] * (i == 0)
    terms = edit_solver(st).terms(*dense_sums(st, logits), 1.0)
    edit = edit_values(st, terms)
    for head in range(2):
        np.testing.assert_allclose(edit[head], dense_edit(logits[head], binning, sliding_window), atol=1e-10)


def test_edited_logits_refit_to_no_absolute_terms():
    st = structure(Binning(48, early=16), rows=48, sliding_window=None)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 48, 48)) + np.log1p(np.arange(48.0))  # a key-position term u(j)
    solver = edit_solver(st)
    terms = solver.terms(*dense_sums(st, logits), 1.0)
    assert np.abs(terms.cells).max() > 0.05  # the signal is there
    again = solver.terms(*dense_sums(st, logits - edit_values(st, terms)), 1.0)
    assert np.abs(again.cells).max() < 1e-10 and np.abs(again.key0).max() < 1e-10


def test_one_subtraction_of_cell_means_is_not_the_fixed_point():
    """Subtracting the fitted cell residuals once leaves part of the absolute component (methodology §11)."""
    st = structure(Binning(64, early=16), rows=64, sliding_window=None)
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(64, 64)) * 0.3 + 0.5 * np.log1p(np.arange(64.0))
    fit = fit_logits(st, *structural_sums(st, logits))
    residual = fit.absolute_component_cells(structural_cells(st, logits), 1.0).reshape(st.query_bin.max() + 1, -1)
    once = edit_values(st, AbsoluteTerms(residual, np.zeros(residual.shape[0])))
    solver = edit_solver(st)
    full = edit_values(st, solver.terms(*dense_sums(st, logits), 1.0))
    left = solver.terms(*dense_sums(st, logits - once), 1.0)
    left_norm = np.sqrt((edit_values(st, left) ** 2).sum() / (full**2).sum())
    assert left_norm > 0.01  # what one subtraction leaves, as a share of the edit's norm


@pytest.mark.parametrize("sliding_window", [None, 6])
def test_relative_logits_with_a_constant_sink_need_no_edit(sliding_window):
    t = 32
    st = structure(Binning(t, early=8), rows=t, sliding_window=sliding_window)
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    logits = np.sin(0.4 * (i - j)) - 0.1 * (i - j) + 2.5 * (j == 0) + 0.7 * np.cos(i)  # g(i − j) + β[j=0] + h(i)
    terms = edit_solver(st).terms(*dense_sums(st, logits), 1.0)
    assert np.abs(terms.cells).max() < 1e-9 and np.abs(terms.key0).max() < 1e-9


def _within_row_norm(st, edit):
    """‖E‖ after removing each row's mean over its visible keys: the part that can change a pattern."""
    t = st.rows
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    visible = (i >= 1) & (i - j >= 0) & (i - j < st.n_offsets)
    mean = np.where(visible, edit, 0.0).sum(1, keepdims=True) / np.maximum(visible.sum(1, keepdims=True), 1)
    return float(np.sqrt((np.where(visible, edit - mean, 0.0) ** 2).sum()))


@pytest.mark.parametrize(
    "signal, at_key0",
    [
        (lambda i, j: 0.5 * np.log1p(i) * (j == 0), True),  # a key-0 logit that grows with i
        (lambda i, j: 0.05 * i * (j == 0), True),
        (lambda i, j: 0.5 * np.log1p(j) * (j >= 1), False),  # a key-position term off key 0
        (lambda i, j: 0.3 * np.sqrt(j) * (j >= 1), False),
    ],
)
def test_the_key0_term_carries_key0_signals_and_the_cells_the_rest(signal, at_key0):
    """κ cannot follow a key-0 logit inside a query bin, so the cells holding key-0 pairs take part of it
    (measured: 30–40% of the pattern-relevant norm); the mode that matches the signal's place carries the larger part."""
    t = 48
    st = structure(Binning(t, early=16), rows=t, sliding_window=None)
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    terms = edit_solver(st).terms(*dense_sums(st, -0.05 * (i - j) + signal(i, j)), 1.0)
    key0 = _within_row_norm(st, edit_values(st, terms.for_mode("key0")))
    rest = _within_row_norm(st, edit_values(st, terms.for_mode("all-but-key0")))
    assert (key0 > rest) if at_key0 else (rest > key0), (key0, rest)


def test_modes_split_the_edit_and_unknown_modes_are_refused():
    terms = AbsoluteTerms(np.ones((3, 3)), np.full(3, 2.0))
    st = structure(Binning(3), rows=3, sliding_window=None)
    total = edit_values(st, terms)
    parts = edit_values(st, terms.for_mode("key0")) + edit_values(st, terms.for_mode("all-but-key0"))
    np.testing.assert_allclose(total, parts)
    with pytest.raises(ValueError, match="all, key0, all-but-key0"):
        check_mode("keys")
