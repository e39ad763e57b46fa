"""poslens's compiled CPU loops, one per job; importing this module imports numba (get it from :func:`poslens.compiled.compiled_loops`).

They live outside the packages that use them so that nothing wraps them before numba compiles them
(the test suite's shape checks wrap every function of ``poslens.fit`` and ``poslens.capture``). Call them through
:func:`poslens.capture.fused_rows.row_pieces`, :func:`poslens.capture.fused_rows.replay_log_partition` and
:func:`poslens.model.weights_hash.weights_checksum`, which allocate their outputs and document the arithmetic.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

_LOG2_E = 1.4426950408889634
_LN2_HIGH = 6.93147180369123816490e-01  # ln 2 in two parts: k · _LN2_HIGH is exact for |k| < 2¹¹
_LN2_LOW = 1.90821492927058770002e-10
#: 1 / n! for n = 13 down to 0: the Taylor series of exp on |r| ≤ ln 2 / 2, whose remainder r¹⁴/14! < 5e-18 is below rounding
_TAYLOR = tuple(1.0 / math.factorial(n) for n in range(13, -1, -1))
#: Below this, exp(x) < 3.4e-308: exp_nonpositive gives 0 (the sums it enters hold a term of 1, the row's maximum)
_EXP_FLOOR = -708.0


@intrinsic
def _float64_from_bits(typingctx, bits):
    """The float64 whose IEEE bits are the int64 ``bits`` (an LLVM bitcast, which vectorizes)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return types.float64(types.int64), codegen


@numba.njit(inline="always", nogil=True, fastmath={"contract"})
def exp_nonpositive(x):
    """exp(x) for x ≤ 0 in float64 by range reduction and a polynomial, in a form a loop of them vectorizes.

    libm's exp is a call per element that no compiler vectorizes (about 5 ns each here), and it was most of
    the capture loop's time; this one takes about 1 ns in a vectorized loop. With x = k ln 2 + r, |r| ≤ ln 2 / 2:
    exp(x) = 2ᵏ Σ_{n ≤ 13} rⁿ / n!, 2ᵏ built from its bits. Within 1 ulp of libm's exp for −708 ≤ x ≤ 0
    (``tests/unit/test_compiled_loops.py`` checks two million arguments); 0 below −708, where exp(x) < 3.4e-308.

    Args:
        x: A float64 ≤ 0 (−inf gives 0).

    Returns:
        exp(x).

    Example:
        >>> round(exp_nonpositive(-1.0), 12)
        0.367879441171
        >>> exp_nonpositive(0.0), exp_nonpositive(-800.0)
        (1.0, 0.0)
    """
    clamped = max(x, _EXP_FLOOR)
    k = math.floor(clamped * _LOG2_E + 0.5)
    r = (clamped - k * _LN2_HIGH) - k * _LN2_LOW
    p = _TAYLOR[0]
    for coefficient in _TAYLOR[1:]:  # Horner; the loop over a constant tuple unrolls
        p = p * r + coefficient
    return p * _float64_from_bits(np.int64(k + 1023) << 52) if x >= _EXP_FLOOR else 0.0


@numba.njit(parallel=True, cache=True, nogil=True, fastmath={"contract"})
def capture_rows(
    scores,
    first_key,
    query_bin,
    bin_in_all,
    bin_in_early,
    offset_bin,
    want_bins,
    log_z,
    row_sum,
    row_js,
    row_sq,
    features,
    row_bins,
    cells,
    offsets,
    key0,
):
    """Per row of every (sequence, head) of ``scores`` [B, H, T, T], over its visible keys: write the row's sums and add to its cells.

    In float64, with j running from ``first_key[i]`` to i: m_i; log Z_i = m_i + log1p(Σ_{j ≠ argmax} exp(s − m_i)); Σ s, Σ j s, Σ s² (to ``log_z``,
    ``row_sum``, ``row_js``, ``row_sq`` [B, H, T]); the features a_i0, entropy, a_ii and 1 / Σ exp(s − m)
    (``features`` [B, H, T, 4]); s_i0 where key 0 is visible, else 0 (``key0``); with ``want_bins``, m_i and
    Σ exp(s − m) per offset bin (``row_bins`` [B, H, T, 1 + bins], zero on entry). Each s_ij is added to
    ``cells[b, h, query_bin[i], offset_bin[i − j]]`` and, where row i's query bin is in the ``all`` / ``early``
    query window, to ``offsets[b, 0 / 1, h, i − j]`` (both zero on entry). The exponentials are
    :func:`exp_nonpositive`'s, within 1 ulp of libm's.

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
        >>> features, bins, cells = np.zeros((1, 1, t, 4)), np.zeros((1, 1, t, 3)), np.zeros((1, 1, 1, 2))
        >>> offsets, key0 = np.zeros((1, 2, 1, t)), np.zeros((1, 1, t))
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
        exps = np.empty(t)
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
            # the exponentials first, in a loop of their own, which vectorizes
            row = scores[b, h, i]
            for j in range(j0, i + 1):
                exps[j] = exp_nonpositive(np.float64(row[j]) - m)
            others, gap = 0.0, 0.0
            for j in range(j0, i + 1):
                s = np.float64(row[j])
                e = exps[j]
                if j != top:
                    others += e
                    gap += e * (m - s)
                if want_bins:
                    row_bins[b, h, i, 1 + offset_bin[i - j]] += e
            partition = 1.0 + others
            log_gap = math.log1p(others)
            log_z[b, h, i], row_sum[b, h, i], row_js[b, h, i], row_sq[b, h, i] = m + log_gap, total, js, sq
            if j0 == 0:
                features[b, h, i, 0] = exps[0] / partition
                key0[b, h, i] = np.float64(row[0])
            else:
                features[b, h, i, 0] = 0.0
                key0[b, h, i] = 0.0
            features[b, h, i, 1] = log_gap + gap / partition
            features[b, h, i, 2] = exps[i] / partition
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


@numba.njit(parallel=True, cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def run_checksums(words, out):
    """out[r] = Σ_k (2k + 1) · words[r, k] modulo 2⁶⁴, for every run r of ``words`` [runs, K] (one thread).

    The unsigned arithmetic wraps modulo 2⁶⁴, as torch's int64 product does, so the checksums are the same
    numbers (read as int64) whatever the order of summation.

    Args:
        words: The 64-bit words, [runs, K] (uint64).
        out: Written, [runs] (uint64).

    Example:
        >>> out = np.zeros(1, dtype=np.uint64)
        >>> run_checksums(np.array([[1, 1]], dtype=np.uint64), out)
        >>> int(out[0])   # 1·1 + 3·1
        4
    """
    runs, width = words.shape
    for r in range(runs):
        total = np.uint64(0)
        for k in range(width):
            total += np.uint64(2 * k + 1) * words[r, k]
        out[r] = total


@numba.njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc", "contract"})
def residual_gram_rows(sums, cell, counts, offset_bin, bin_column, query_column, inverse_bin_count, gram_inverse, absolute, saturated):
    """For every row z of ``sums`` [Z, F, cells]: the inner products of the responses' saturated residuals and absolute components.

    Over the K cells ``cell`` (flat indices into the last axis) with counts n_k: r_f = ȳ_f − f_R(y_f) (the
    cell mean less its offset bin's mean), ``saturated[z, f, g]`` = Σ_k n_k r_fk r_gk, and, with
    c_f = Aᵀ diag(n) r_f (each cell adds n_k r_fk to its offset bin's column and its query bin's column,
    -1 for none), ``absolute[z, f, g]`` = c_fᵀ G c_g, G = (Aᵀ diag(n) A)⁻¹ given.

    Args:
        sums: Cell sums of F responses, [Z, F, C·B].
        cell: The K cells that hold pairs (int64 indices into C·B).
        counts: n_k of those cells, [K].
        offset_bin: Offset bin of each of those cells, [K] (int64).
        bin_column: Column of each offset bin in A, -1 where it has none, [B] (int64).
        query_column: Column of each cell's query bin in A, -1 for none, [K] (int64).
        inverse_bin_count: 1 / (pairs in each offset bin), 1 where none, [B].
        gram_inverse: G, [p, p].
        absolute: Out, [Z, F, F].
        saturated: Out, [Z, F, F].

    Example:
        >>> sums, counts = np.array([[[2.0, 3.0, 1.0, 4.0]]]), np.array([2.0, 1.0, 1.0, 2.0])   # the 2 × 2 table of stats.residual_grams
        >>> cell, offset_bin = np.arange(4), np.array([0, 1, 0, 1])
        >>> out = np.zeros((1, 1, 1)), np.zeros((1, 1, 1))
        >>> g = np.linalg.inv(np.array([[3.0, 0.0, 1.0], [0.0, 3.0, 2.0], [1.0, 2.0, 3.0]]))
        >>> residual_gram_rows(sums, cell, counts, offset_bin, np.array([0, 1]), np.array([-1, -1, 2, 2]), 1.0 / np.array([3.0, 3.0]), g, *out)
        >>> round(float(out[0][0, 0, 0]), 4)   # ‖P(y)‖² = 1/3
        0.3333
    """
    z_rows, fields = sums.shape[0], sums.shape[1]
    k_cells, n_bins, p = cell.shape[0], bin_column.shape[0], gram_inverse.shape[0]
    for z in numba.prange(z_rows):
        bin_mean = np.zeros((fields, n_bins))
        residual = np.empty((fields, k_cells))
        column = np.zeros((fields, p))
        for f in range(fields):
            for k in range(k_cells):
                bin_mean[f, offset_bin[k]] += sums[z, f, cell[k]]
            for b in range(n_bins):
                bin_mean[f, b] *= inverse_bin_count[b]
            for k in range(k_cells):
                r = sums[z, f, cell[k]] / counts[k] - bin_mean[f, offset_bin[k]]
                residual[f, k] = r
                weighted = r * counts[k]
                if bin_column[offset_bin[k]] >= 0:
                    column[f, bin_column[offset_bin[k]]] += weighted
                if query_column[k] >= 0:
                    column[f, query_column[k]] += weighted
        solved = np.zeros((fields, p))  # G c_g
        for g in range(fields):
            for i in range(p):
                row = 0.0
                for j in range(p):
                    row += gram_inverse[i, j] * column[g, j]
                solved[g, i] = row
        for f in range(fields):
            for g in range(f, fields):
                total = 0.0
                for k in range(k_cells):
                    total += residual[f, k] * counts[k] * residual[g, k]
                saturated[z, f, g] = total
                saturated[z, g, f] = total
                projected = 0.0
                for i in range(p):
                    projected += column[f, i] * solved[g, i]
                absolute[z, f, g] = projected
                absolute[z, g, f] = projected
