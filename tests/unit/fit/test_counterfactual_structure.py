"""The structure of the mask-only counterfactual's fit (methodology §4.3), against its dense definition.

:func:`poslens.fit.mask_structure.structure` builds the cell maps from closed
forms over the bin edges and keeps no rows × offsets matrix; here every field is
rebuilt from the dense 0/1 pattern "row i ≥ 1 sees offset Δ ≤ i" and must agree
exactly. Layers that share a structure are handled together; that must give the
same numbers, to the bit, as one layer at a time.
"""

from __future__ import annotations

import numpy as np
import pytest

from poslens.fit.binning import Binning
from poslens.fit.counterfactual import layers_by_structure
from poslens.fit.cross_fit import group_counterfactual_cells
from poslens.fit.mask_structure import structure
from poslens.fit.sums import QUERY_WINDOWS, CellSums, SumFields

CASES = [  # seq_len, early, rows, sliding_window
    (1, 2, 1, None),
    (2, 2, 2, None),
    (8, 32, 8, 3),
    (24, 8, 8, None),
    (24, 8, 24, 1),
    (24, 8, 24, 5),
    (40, 12, 12, 7),
    (70, 20, 70, 33),
    (70, 20, 70, 69),
    (300, 32, 300, None),
    (300, 32, 300, 100),
]


def dense_fields(binning: Binning, rows: int, sliding_window: int | None) -> dict[str, np.ndarray]:
    """Every count of the structure, from the dense visible pattern [rows, D]."""
    d = rows if sliding_window is None or sliding_window >= rows else sliding_window
    i, delta = np.arange(rows)[:, None], np.arange(d)[None, :]
    visible = ((delta <= i) & (i >= 1)).astype(np.float64)
    n_b = binning.n_offset_bins
    cell = binning.query_bin[:rows, None] * n_b + binning.offset_bin[:d][None, :]  # cell of pair (i, i − Δ)
    n_cells = binning.n_query_bins * n_b
    to_cells = np.zeros((n_cells, rows))
    offsets_to_cells = np.zeros((n_cells, d))
    for r, k in zip(*np.nonzero(visible), strict=True):
        to_cells[cell[r, k], r] += 1.0
        offsets_to_cells[cell[r, k], k] += 1.0
    key0 = ((np.arange(rows) >= 1) & (np.arange(rows) < d)).astype(np.float64)
    key0_cells = np.zeros(n_cells)
    for r in np.nonzero(key0)[0]:
        key0_cells[cell[r, r]] += 1.0
    return {
        "n_offsets": np.array(d),
        "n_visible": np.maximum(visible.sum(1), 1.0),
        "key0": key0,
        "to_cells": to_cells,
        "offsets_to_cells": offsets_to_cells,
        "key0_cells": key0_cells,
        "pair_cells": to_cells.sum(1),
    }


@pytest.mark.parametrize("seq_len,early,rows,sliding_window", CASES)
def test_structure_matches_the_dense_pattern(seq_len: int, early: int, rows: int, sliding_window: int | None):
    binning = Binning(seq_len, early=early)
    st = structure(binning, rows, sliding_window)
    want = dense_fields(binning, rows, sliding_window)
    got = {
        "n_offsets": np.array(st.n_offsets),
        "n_visible": st.n_visible,
        "key0": st.key0,
        "to_cells": st.to_cells.toarray(),
        "offsets_to_cells": st.offsets_to_cells.toarray(),
        "key0_cells": st.key0_cells,
        "pair_cells": st.pair_cells,
    }
    for name, array in want.items():
        np.testing.assert_array_equal(got[name], array, err_msg=name)
    assert st.to_cells.has_canonical_format and st.offsets_to_cells.has_canonical_format
    assert st.normal.size == st.n_offsets


def test_a_cached_structure_holds_little():
    """It stays in memory for the whole process (lru_cache): at T = 1024 the dense pattern alone would be 8 MB,
    and so would the normal matrix or its inverse; the banded factor is O(D)."""
    st = structure(Binning(1024), 1024, None)
    held = 0
    for value in list(vars(st).values()) + list(vars(st.normal).values()):
        if isinstance(value, np.ndarray):
            held += value.nbytes
        elif hasattr(value, "indptr"):  # a sparse cell map
            held += value.data.nbytes + value.indices.nbytes + value.indptr.nbytes
    assert st.normal.pseudo_inverse is None
    assert held < 1e6


def one_layer(sums: CellSums, layer: int) -> SumFields:
    """Group 0's sums of one layer, as a one-layer model's."""
    group = sums.group(0)
    return SumFields(**{name: a if name in ("query_row_count", "sequence_count") else a[layer : layer + 1] for name, a in group.as_dict().items()})


def test_counterfactual_cells_of_all_layers_match_each_layer_alone():
    sliding_windows = (None, 6, None, 6, 50)
    binning = Binning(30, early=10)
    sums = CellSums.zeros(groups=2, layers=len(sliding_windows), heads=3, binning=binning, layer_windows=sliding_windows)
    rng = np.random.default_rng(0)
    for array in sums.per_group.as_dict().values():
        array[...] = rng.normal(size=array.shape)
    assert [layers for _, layers in layers_by_structure(binning, sliding_windows, "all")] == [[0, 2, 4], [1, 3]]  # 50 ≥ T: causal
    cells = binning.n_query_bins * binning.n_offset_bins
    for query_window, rows in (("early", 10), ("all", 30)):
        residual = rng.normal(size=(len(sliding_windows), 3, cells))
        log_partition = rng.normal(size=(len(sliding_windows), 3, rows))
        together = group_counterfactual_cells(sums.group(0), binning, sliding_windows, query_window, residual, log_partition)
        for layer, sliding_window in enumerate(sliding_windows):
            alone = group_counterfactual_cells(
                one_layer(sums, layer), binning, (sliding_window,), query_window, residual[layer : layer + 1], log_partition[layer : layer + 1]
            )
            np.testing.assert_array_equal(together[layer], alone[0], err_msg=f"{query_window} layer {layer}")


def test_several_variants_at_once_give_each_variants_cells_to_the_bit():
    sliding_windows = (None, 6, None)
    binning = Binning(30, early=10)
    sums = CellSums.zeros(groups=2, layers=3, heads=2, binning=binning, layer_windows=sliding_windows)
    rng = np.random.default_rng(3)
    for array in sums.per_group.as_dict().values():
        array[...] = rng.normal(size=array.shape)
    cells = binning.n_query_bins * binning.n_offset_bins
    for query_window, rows in (("early", 10), ("all", 30)):
        absolute, log_partition = rng.normal(size=(4, 3, 2, cells)), rng.normal(size=(4, 3, 2, rows))
        together = group_counterfactual_cells(sums.group(1), binning, sliding_windows, query_window, absolute, log_partition)
        assert together.shape == (4, 3, 2, binning.n_query_bins, binning.n_offset_bins)
        for variant in range(4):
            alone = group_counterfactual_cells(sums.group(1), binning, sliding_windows, query_window, absolute[variant], log_partition[variant])
            np.testing.assert_array_equal(together[variant], alone, err_msg=f"{query_window} variant {variant}")


def test_counterfactual_cells_are_the_same_whatever_the_chunk_of_variants(monkeypatch):
    from poslens.fit import cross_fit

    binning = Binning(30, early=10)
    sums = CellSums.zeros(groups=4, layers=2, heads=2, binning=binning, layer_windows=(None, 6))
    rng = np.random.default_rng(5)
    for array in sums.per_group.as_dict().values():
        array[...] = rng.normal(size=array.shape)
    cells = binning.n_query_bins * binning.n_offset_bins
    fits = {w: rng.normal(size=(4, 2, 2, cells)) for w in QUERY_WINDOWS}
    cross = cross_fit.CrossFit(fits, {w: x.sum(axis=0) for w, x in fits.items()}, np.array([2.0, 1.0, 3.0, 2.0]))
    log_partition = {w: rng.normal(size=(4, 4, 2, 2, rows)) for w, rows in (("early", 10), ("all", 30))}
    formed = {}
    for chunk_bytes in (1, 2 * 8 * 2 * 2 * cells, 2**30):  # one variant per call, two (the last chunk of four: two), all
        monkeypatch.setattr(cross_fit, "CELLS_CHUNK_BYTES", chunk_bytes)
        formed[chunk_bytes] = cross_fit.counterfactual_cells(sums, cross, log_partition)
    one = formed[1]
    for chunk_bytes, got in formed.items():
        for w in QUERY_WINDOWS:
            np.testing.assert_array_equal(got.per_group[w], one.per_group[w], err_msg=f"{chunk_bytes} {w}")
            np.testing.assert_array_equal(got.replicates[w], one.replicates[w], err_msg=f"{chunk_bytes} {w}")
    assert np.abs(one.replicates["all"]).sum() > 0 and np.abs(one.per_group["early"]).sum() > 0


def dense_normal(rows: int, d: int) -> np.ndarray:
    """Σ_i X_iᵀ(I − 11ᵀ/n_i)X_i over rows i ≥ 1, with X_i written out pair by pair: one-hot g_1..g_{D−1}, then [j = 0]."""
    normal = np.zeros((d, d))
    for i in range(1, rows):
        offsets = np.arange(min(i, d - 1) + 1)
        x = np.zeros((len(offsets), d))
        x[offsets >= 1, offsets[offsets >= 1] - 1] = 1.0
        x[:, d - 1] = offsets == i  # the pair with key j = i − Δ = 0
        centred = x - x.mean(0)
        normal += centred.T @ centred
    if not normal[d - 1].any():
        normal[d - 1, d - 1] = 1.0  # no key-0 pair: β is not a parameter
    return normal


@pytest.mark.parametrize("seq_len,early,rows,sliding_window", CASES)
def test_the_structured_normal_matrix_is_the_dense_one(seq_len: int, early: int, rows: int, sliding_window: int | None):
    st = structure(Binning(seq_len, early=early), rows, sliding_window)
    normal = dense_normal(rows, st.n_offsets)
    np.testing.assert_allclose(st.normal.matvec(np.eye(st.n_offsets)), normal, atol=1e-12)


@pytest.mark.parametrize("seq_len,early,rows,sliding_window", CASES)
def test_solutions_match_the_dense_pseudo_inverse(seq_len: int, early: int, rows: int, sliding_window: int | None):
    """The banded solve (or, for a singular structure, the pseudo-inverse) against the dense matrix's pseudo-inverse."""
    st = structure(Binning(seq_len, early=early), rows, sliding_window)
    want_inverse = np.linalg.pinv(dense_normal(rows, st.n_offsets), hermitian=True)  # the inverse where it exists
    rhs = np.random.default_rng(rows).normal(size=(3, st.n_offsets))
    want = rhs @ want_inverse
    np.testing.assert_allclose(st.normal.solve(rhs), want, atol=1e-11 * max(1.0, np.abs(want).max()))


def test_a_singular_structure_keeps_the_pseudo_inverse_and_others_the_banded_factor():
    """rows = 2: offset 1 only ever meets key 0, so g_1 and β are one direction; from rows = 3 on, every direction is fitted."""
    assert structure(Binning(2), 2, None).normal.pseudo_inverse is not None
    for rows in (3, 8, 64):
        assert structure(Binning(rows), rows, None).normal.factor is not None
