"""The compiled loops behind :mod:`poslens.capture.fused_rows`, one per job; importing this module imports numba.

They live outside the capture package so that nothing wraps them before numba compiles them
(the test suite's shape checks wrap every function of that package). Call them through
:func:`poslens.capture.fused_rows.row_pieces` and :func:`poslens.capture.fused_rows.replay_log_partition`,
which allocate their outputs and document the arithmetic.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(parallel=True, cache=True)
def capture_rows(scores, first_key, query_bin, bin_in_all, bin_in_early, offset_bin, want_bins, log_z, row_sum, row_js, row_sq, features, row_bins, cells, offsets, key0):
    """Per row of every (sequence, head) of ``scores`` [B, H, T, T], over its visible keys: write the row's sums and add to its cells.

    In float64, with j running from ``first_key[i]`` to i: m_i; log Z_i = m_i + log1p(Σ_{j ≠ argmax} exp(s − m_i)); Σ s, Σ j s, Σ s² (to ``log_z``,
    ``row_sum``, ``row_js``, ``row_sq`` [B, H, T]); the features a_i0, entropy, a_ii and 1 / Σ exp(s − m)
    (``features`` [B, H, T, 4]); s_i0 where key 0 is visible, else 0 (``key0``); with ``want_bins``, m_i and
    Σ exp(s − m) per offset bin (``row_bins`` [B, H, T, 1 + bins], zero on entry). Each s_ij is added to
    ``cells[b, h, query_bin[i], offset_bin[i − j]]`` and, where row i's query bin is in the ``all`` / ``early``
    query window, to ``offsets[b, 0 / 1, h, i − j]`` (both zero on entry).

    Args:
        scores: float32 or float64 scores, [B, H, T, T] (C-contiguous).
        first_key: First visible key of each row (int64).
        query_bin: Query bin of each row (int64).
        bin_in_all: Whether each query bin is in the ``all`` query window.
        bin_in_early: Whether each query bin is in the ``early`` query window.
        offset_bin: Offset bin of each offset (int64).
        want_bins: Whether to write ``row_bins``.
        log_z: Out: log Z_i, [B, H, T].
        row_sum: Out: Σ_j s_ij, [B, H, T].
        row_js: Out: Σ_j j s_ij, [B, H, T].
        row_sq: Out: Σ_j s_ij², [B, H, T].
        features: Out: the four row features, [B, H, T, 4].
        row_bins: Out (with ``want_bins``, zero on entry): m_i, then Σ exp(s − m_i) per offset bin, [B, H, T, 1 + bins].
        cells: Added to (zero on entry): Σ s per (query bin, offset bin), [B, H, C, bins].
        offsets: Added to (zero on entry): Σ s_{i,i−Δ} over the ``all`` (0) / ``early`` (1) rows, [B, 2, H, T].
        key0: Out: s_i0 where key 0 is visible, else 0, [B, H, T].

    Example:
        >>> t = 2
        >>> out = [np.zeros((1, 1, t)) for _ in range(4)]
        >>> features, bins, cells, offsets, key0 = np.zeros((1, 1, t, 4)), np.zeros((1, 1, t, 3)), np.zeros((1, 1, 1, 2)), np.zeros((1, 2, 1, t)), np.zeros((1, 1, t))
        >>> rows, one_bin = np.zeros(t, dtype=np.int64), np.ones(1, bool)
        >>> capture_rows(np.zeros((1, 1, t, t)), rows, rows, one_bin, one_bin, np.arange(t), True, *out, features, bins, cells, offsets, key0)
        >>> features[0, 0, :, 0].tolist()   # a_i0 of uniform attention
        [1.0, 0.5]
    """
    batch, heads, t, _ = scores.shape
    n_query_bins = cells.shape[2]
    # Σ of s along each offset Δ over the rows of each query bin, per (sequence, head): one add per score, folded
    # into the cells and the query windows' per-offset sums once the pair's rows are done
    diagonals = np.zeros((batch * heads, n_query_bins, t))
    for pair in numba.prange(batch * heads):
        b, h = pair // heads, pair % heads
        for i in range(t):
            j0 = first_key[i]
            along = diagonals[pair, query_bin[i]]
            m, top, total, js, sq = -np.inf, j0, 0.0, 0.0, 0.0  # top: the first key at the maximum
            for j in range(j0, i + 1):
                s = np.float64(scores[b, h, i, j])
                if s > m:
                    m, top = s, j
                total += s
                js += j * s
                sq += s * s
                along[i - j] += s
            # Σ exp(s − m) = 1 + others, the maximum's term kept out: with a strong sink, others is tiny and
            # log1p keeps its digits, and the entropy log Z − Σ a s = log1p(others) + Σ a (m − s) adds two
            # non-negative terms where the difference of log Z and Σ a s would cancel
            others, gap = 0.0, 0.0
            for j in range(j0, i + 1):
                s = np.float64(scores[b, h, i, j])
                e = math.exp(s - m)
                if j != top:
                    others += e
                    gap += e * (m - s)
                if want_bins:
                    row_bins[b, h, i, 1 + offset_bin[i - j]] += e
            partition = 1.0 + others
            log_gap = math.log1p(others)
            log_z[b, h, i], row_sum[b, h, i], row_js[b, h, i], row_sq[b, h, i] = m + log_gap, total, js, sq
            if j0 == 0:
                s0 = np.float64(scores[b, h, i, 0])
                features[b, h, i, 0] = math.exp(s0 - m) / partition
                key0[b, h, i] = s0
            else:
                features[b, h, i, 0] = 0.0
                key0[b, h, i] = 0.0
            features[b, h, i, 1] = log_gap + gap / partition
            features[b, h, i, 2] = math.exp(np.float64(scores[b, h, i, i]) - m) / partition
            features[b, h, i, 3] = 1.0 / partition
            if want_bins:
                row_bins[b, h, i, 0] = m
        for c in range(n_query_bins):
            along = diagonals[pair, c]
            for d in range(t):
                cells[b, h, c, offset_bin[d]] += along[d]
                if bin_in_all[c]:
                    offsets[b, 0, h, d] += along[d]
                if bin_in_early[c]:
                    offsets[b, 1, h, d] += along[d]


@numba.njit(parallel=True, cache=True)
def replay_rows(row_bins, weights, query_bin, out):
    """out[v, h, i] = Σ_b (m_bhi + log Σ_k S_bhik · weights[v, h, query_bin[i], k]) for the rows i < out.shape[2].

    Args:
        row_bins: Each row's maximum m, then its sums S of exp(s − m) per offset bin, [batch, H, T, 1 + bins] (float64).
        weights: exp(−A) per variant, head, query bin and offset bin, [V, H, C, bins] (float64).
        query_bin: Query bin of each row (int64).
        out: Written, [V, H, rows] (float64).

    Example:
        >>> out = np.zeros((1, 1, 1))
        >>> replay_rows(np.array([[[[0.5, 1.0, 2.0]]]]), np.ones((1, 1, 1, 2)), np.zeros(1, dtype=np.int64), out)
        >>> round(float(out[0, 0, 0]), 6)   # 0.5 + log(1 + 2)
        1.598612
    """
    variants, heads = weights.shape[0], weights.shape[1]
    batch, n_bins = row_bins.shape[0], weights.shape[3]
    for pair in numba.prange(variants * heads):
        v, h = pair // heads, pair % heads
        for i in range(out.shape[2]):
            c = query_bin[i]
            total = 0.0
            for b in range(batch):
                z = 0.0
                for k in range(n_bins):
                    z += row_bins[b, h, i, 1 + k] * weights[v, h, c, k]
                total += math.log(z) + row_bins[b, h, i, 0]
            out[v, h, i] = total
