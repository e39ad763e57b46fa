"""The structural design of the mask-only fit (methodology §4.1): which pairs each row of a query window sees, per layer.

For one layer and one query window (rows 1 ≤ i < ``rows``) the design of the
fit :mod:`poslens.fit.counterfactual` solves depends only on ``rows`` and the
layer's sliding window: the visible offsets of each row, key 0, and the maps
from rows and offsets to the (query bin, offset bin) cells. :func:`structure`
builds it once per (binning, rows, sliding window) and factors its normal
equations (:class:`~poslens.fit.profiled_normal.ProfiledNormal`).

All arrays are float64 numpy; nothing here touches torch or a model.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse
from jaxtyping import Float, Int

from poslens.fit.binning import Binning
from poslens.fit.profiled_normal import ProfiledNormal


@dataclass(frozen=True, eq=False)
class MaskStructure:
    """The structural design of the mask-only fit in one query window: the visible offsets of each row and the factored normal matrix.

    Rows 0..rows−1 are indexed directly; row 0 is never in a query window. Row i ≥ 1
    sees the offsets 0..min(i, D − 1); nothing of size rows × D is kept: products
    with that 0/1 pattern are cumulative sums (in :func:`poslens.fit.counterfactual.fit_logits`).

    Attributes:
        rows: Number of query rows of the query window.
        sliding_window: The layer's sliding window, or ``None`` for full causal attention.
        n_offsets: Number of offsets D a row can see.
        n_visible: |V_i|, the visible keys of each row (1 for row 0, unused).
        key0: 1 where key 0 is visible from row i ≥ 1, else 0.
        normal: The profiled normal equations over (g_1..g_{D−1}, β), factored.
        to_cells: [C·B, rows]: row i's pairs in cell (c(i), b).
        offsets_to_cells: [C·B, D]: pairs of offset Δ in cell (c, b).
        key0_cells: Key-0 pairs per cell.
        pair_cells: Pairs per cell (one sequence).
        query_bin: c(i), the query bin of each row.
        offset_bin: b(Δ), the offset bin of each offset.
        n_offset_bins: Number of offset bins B.

    Example:
        >>> st = structure(Binning(8), rows=8, sliding_window=None)
        >>> st.n_offsets, st.n_visible.tolist(), st.key0.tolist()   # row 0: n_visible 1, unused
        (8, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
        >>> structure(Binning(8), rows=8, sliding_window=3).key0.tolist()   # key 0 drops out once i ≥ W
        [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """

    rows: int
    sliding_window: int | None
    n_offsets: int
    n_visible: Float[np.ndarray, " rows"]  # |V_i| (1 for row 0, unused)
    key0: Float[np.ndarray, " rows"]  # key 0 visible from row i ≥ 1
    normal: ProfiledNormal  # the profiled normal equations over (g_1..g_{D−1}, β), factored
    to_cells: scipy.sparse.csr_matrix  # [C·B, rows]: row i's pairs in cell (c(i), b)
    offsets_to_cells: scipy.sparse.csr_matrix  # [C·B, D]: pairs of offset Δ in cell (c, b)
    key0_cells: Float[np.ndarray, " cells"]  # key-0 pairs per cell
    pair_cells: Float[np.ndarray, " cells"]  # pairs per cell (one sequence)
    query_bin: Int[np.ndarray, " rows"]  # c(i)
    offset_bin: Int[np.ndarray, " offsets"]  # b(Δ)
    n_offset_bins: int


@functools.lru_cache(maxsize=32)
def structure(binning: Binning, rows: int, sliding_window: int | None) -> MaskStructure:
    """The :class:`MaskStructure` of the rows 1..rows−1 of a layer with sliding window ``sliding_window`` (None: causal).

    A sliding window at least ``rows`` wide changes nothing and is treated as causal.
    Built from closed forms over the bin edges: O(rows · bins); nothing of size D × D is kept.

    Args:
        binning: The query and offset bins of the measurement.
        rows: Number of query rows of the query window (:func:`query_window_rows`).
        sliding_window: The layer's sliding window, or ``None`` for full causal attention.

    Returns:
        The structure, with its normal equations factored once.

    Example:
        >>> st = structure(Binning(16, early=8), rows=8, sliding_window=None)
        >>> st.normal.size, float(st.pair_cells.sum())   # offsets 1..7 and β; pairs of rows 1..7
        (8, 35.0)
    """
    if sliding_window is not None and sliding_window >= rows:
        sliding_window = None
    t = rows
    d = t if sliding_window is None else sliding_window
    row = np.arange(t)
    seen = np.where(row >= 1, np.minimum(row, d - 1) + 1, 0)  # offsets 0..seen−1 visible from row i
    n_visible = np.maximum(seen, 1).astype(np.float64)
    key0 = ((row >= 1) & (row < d)).astype(np.float64)
    normal = ProfiledNormal.build(n_visible, key0, d)

    n_b = binning.n_offset_bins
    obin = binning.offset_bin[:d]
    qbin = binning.query_bin[:t]
    shape = (binning.n_query_bins * n_b, t)
    # visible offsets of row i in offset bin b: the overlap of [0, seen_i) with the bin's [low, high) ∩ [0, D)
    low = np.minimum(np.array(binning.offset_edges[:-1]), d)
    high = np.minimum(np.array(binning.offset_edges[1:]), d)
    per_bin = np.clip(np.minimum(seen[:, None], high) - low, 0, None).astype(np.float64)  # [rows, B]
    r_idx, b_idx = np.nonzero(per_bin)
    to_cells = scipy.sparse.csr_matrix((per_bin[r_idx, b_idx], (qbin[r_idx] * n_b + b_idx, r_idx)), shape=shape)
    # rows i ≥ max(Δ, 1) of query bin c that see offset Δ: the overlap of [max(Δ, 1), rows) with the bin's rows
    q_low = np.minimum(np.array(binning.query_edges[:-1]), t)
    q_high = np.minimum(np.array(binning.query_edges[1:]), t)
    first = np.maximum(np.arange(d), 1)
    per_query_bin = np.clip(q_high[:, None] - np.maximum(q_low[:, None], first[None, :]), 0, None)  # [C, D]
    c_idx, d_idx = np.nonzero(per_query_bin)
    offsets_to_cells = scipy.sparse.csr_matrix(
        (per_query_bin[c_idx, d_idx].astype(np.float64), (c_idx * n_b + obin[d_idx], d_idx)), shape=(shape[0], d)
    )
    key0_cells = np.zeros(shape[0])
    rows_k0 = np.nonzero(key0)[0]
    np.add.at(key0_cells, qbin[rows_k0] * n_b + obin[rows_k0], 1.0)
    pair_cells = np.asarray(to_cells.sum(axis=1)).ravel()
    return MaskStructure(t, sliding_window, d, n_visible, key0, normal, to_cells, offsets_to_cells, key0_cells, pair_cells, qbin, obin, n_b)


def query_window_rows(binning: Binning, query_window: str) -> int:
    """``rows`` of a query window: Q (capped at T) for ``early``, T for ``all``.

    Args:
        binning: The query and offset bins of the measurement.
        query_window: ``"early"`` or ``"all"``.

    Returns:
        The number of query rows of the query window.

    Example:
        >>> query_window_rows(Binning(64, early=32), "early"), query_window_rows(Binning(16, early=32), "early")
        (32, 16)
        >>> query_window_rows(Binning(64), "all")
        64
    """
    return min(binning.early, binning.seq_len) if query_window == "early" else binning.seq_len


def structural_sums(
    st: MaskStructure, logits: Float[np.ndarray, "*heads query key"]
) -> tuple[Float[np.ndarray, "*heads rows"], Float[np.ndarray, "*heads rows"], Float[np.ndarray, "*heads offsets"]]:
    """Row, key-0 and offset sums of one sequence's dense logits [..., T, T] over the structure's pairs.

    A small dense helper for examples and checks; the streamed sums come from the capture.

    Args:
        st: The structure of the layer and query window.
        logits: One sequence's logits, [..., T, T].

    Returns:
        ``(row_sums, key0_sums, offset_sums)``, as :func:`poslens.fit.counterfactual.fit_logits` takes them.

    Example:
        >>> st = structure(Binning(4), rows=4, sliding_window=None)
        >>> rows, key0, offsets = structural_sums(st, np.ones((4, 4)))
        >>> rows.tolist(), key0.tolist(), offsets.tolist()
        ([0.0, 2.0, 3.0, 4.0], [0.0, 1.0, 1.0, 1.0], [3.0, 3.0, 2.0, 1.0])
    """
    t = st.rows
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    delta = i - j
    mask = (delta >= 0) & (delta < st.n_offsets) & (i >= 1)
    x = np.where(mask, logits[..., :t, :t], 0.0)
    offsets = np.stack([np.where(delta == k, x, 0.0).sum((-2, -1)) for k in range(st.n_offsets)], axis=-1)
    return x.sum(-1), x[..., :, 0] * st.key0, offsets


def structural_cells(st: MaskStructure, logits: Float[np.ndarray, "*heads query key"]) -> Float[np.ndarray, "*heads cells"]:
    """Cell sums [..., C·B] of one sequence's dense logits over the structure's pairs (a dense helper).

    Args:
        st: The structure of the layer and query window.
        logits: One sequence's logits, [..., T, T].

    Returns:
        The logits summed over the pairs of each cell, [..., C·B].

    Example:
        >>> st = structure(Binning(4), rows=4, sliding_window=None)
        >>> float(structural_cells(st, np.ones((4, 4))).sum())   # 2 + 3 + 4 pairs
        9.0
    """
    t = st.rows
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    delta = i - j
    mask = (delta >= 0) & (delta < st.n_offsets) & (i >= 1)
    cell = st.query_bin[i] * st.n_offset_bins + st.offset_bin[np.clip(delta, 0, st.n_offsets - 1)]
    out = np.zeros((*logits.shape[:-2], st.pair_cells.shape[0]))
    x = np.where(mask, logits[..., :t, :t], 0.0)
    for c in np.unique(cell[mask]):
        out[..., c] = np.where(cell == c, x, 0.0).sum((-2, -1))
    return out


def apply_operator(operator: scipy.sparse.csr_matrix, x: Float[np.ndarray, "*batch inputs"]) -> Float[np.ndarray, "*batch outputs"]:
    """``operator @ x`` over the last axis of ``x``, for any leading axes.

    Args:
        operator: A sparse map, e.g. :attr:`MaskStructure.to_cells`, [outputs, inputs].
        x: The values to map, [..., inputs].

    Returns:
        The mapped values, [..., outputs].

    Example:
        >>> apply_operator(scipy.sparse.csr_matrix(np.array([[1.0, 1.0], [0.0, 2.0]])), np.ones((3, 2))).tolist()
        [[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]
    """
    flat = x.reshape(-1, x.shape[-1])
    return np.asarray(operator @ flat.T).T.reshape(*x.shape[:-1], operator.shape[0])
