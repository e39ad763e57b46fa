"""The mask-only counterfactual of a head (methodology §4.1, version 2), fitted from streamed sums.

For one layer and one query window (rows 1 ≤ i < ``rows``), least squares over
every visible pair fits

    log a_ij ≈ g(i − j) + β·[j = 0] + h(i)

with one g per exact offset, one β for key 0 and one h per exact row. The row
effects absorb any per-query shift, so g and β are the same whether s or
log a = s − log Z_i is fitted: the fit needs only three sums of the logits,
per exact offset, per exact row and per row at key 0. With the row effects
profiled out, the normal equations' matrix depends only on the structure
(``rows`` and the layer's window), so it is factored once per structure
(:func:`structure`, :class:`ProfiledNormal`; g(0) = 0 removes its one null
direction) and every head, layer and jackknife replicate is solved with that
factor, in O(D) per head.

Two counterfactual patterns follow from a fit:

- **mean-field**: a'_ij = softmax over V_i of g(i − j) + β·[j = 0], the same for
  every sequence; its cell sums are structural (:meth:`WindowFit.meanfield_cells`);
- **per-sequence**: s'_ij(n) = s_ij(n) − A_cb, with A the head's absolute
  component per (query bin, offset bin) cell of the mean logits after g, β and
  h (:meth:`WindowFit.residual_cells`). Renormalizing s' needs the sequence's
  own logits: the first pass stores each row's offset-bin sums of exp(s) and
  :mod:`poslens.capture.counterfactual_replay` computes log Z' from them once A is
  known; this module turns the replay's row sums into cell sums (:func:`per_sequence_cells`).

All arrays are float64 numpy; nothing here touches torch or a model.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse
from einops import rearrange
from jaxtyping import Float, Int

from poslens.fit.binning import Binning
from poslens.fit.sums import SumArrays

SINGULAR_PIVOT = 1e-12  # a Cholesky pivot (or β's Schur complement) below this fraction of the largest diagonal entry counts as zero


@dataclass(frozen=True, eq=False)
class Structure:
    """What is fixed about one window's pairs: the visible offsets of each row and the inverted normal matrix.

    Rows 0..rows−1 are indexed directly; row 0 is never in a window. Row i ≥ 1
    sees the offsets 0..min(i, D − 1); nothing of size rows × D is kept: products
    with that 0/1 pattern are cumulative sums (:func:`_sum_over_rows_seeing`,
    :func:`_sum_over_visible_offsets`).

    Attributes:
        rows: Number of query rows of the window.
        window: The layer's sliding window, or ``None`` for full causal attention.
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
        >>> st = structure(Binning(8), rows=8, window=None)
        >>> st.n_offsets, st.n_visible.tolist(), st.key0.tolist()   # row 0: n_visible 1, unused
        (8, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
        >>> structure(Binning(8), rows=8, window=3).key0.tolist()   # key 0 drops out once i ≥ W
        [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """

    rows: int
    window: int | None
    n_offsets: int
    n_visible: Float[np.ndarray, " rows"]  # |V_i| (1 for row 0, unused)
    key0: Float[np.ndarray, " rows"]  # key 0 visible from row i ≥ 1
    normal: "ProfiledNormal"  # the profiled normal equations over (g_1..g_{D−1}, β), factored
    to_cells: scipy.sparse.csr_matrix  # [C·B, rows]: row i's pairs in cell (c(i), b)
    offsets_to_cells: scipy.sparse.csr_matrix  # [C·B, D]: pairs of offset Δ in cell (c, b)
    key0_cells: Float[np.ndarray, " cells"]  # key-0 pairs per cell
    pair_cells: Float[np.ndarray, " cells"]  # pairs per cell (one sequence)
    query_bin: Int[np.ndarray, " rows"]  # c(i)
    offset_bin: Int[np.ndarray, " offsets"]  # b(Δ)
    n_offset_bins: int


@functools.lru_cache(maxsize=32)
def structure(binning: Binning, rows: int, window: int | None) -> Structure:
    """The :class:`Structure` of the rows 1..rows−1 of a layer with sliding window ``window`` (None: causal).

    A window at least ``rows`` wide changes nothing and is treated as causal.
    Built from closed forms over the bin edges: O(rows · bins); nothing of size D × D is kept.

    Args:
        binning: The query and offset bins of the measurement.
        rows: Number of query rows of the window (:func:`window_rows`).
        window: The layer's sliding window, or ``None`` for full causal attention.

    Returns:
        The structure, with its normal equations factored once.

    Example:
        >>> st = structure(Binning(16, early=8), rows=8, window=None)
        >>> st.normal.size, float(st.pair_cells.sum())   # offsets 1..7 and β; pairs of rows 1..7
        (8, 35.0)
    """
    if window is not None and window >= rows:
        window = None
    t = rows
    d = t if window is None else window
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
    return Structure(t, window, d, n_visible, key0, normal, to_cells, offsets_to_cells, key0_cells, pair_cells, qbin, obin, n_b)


@dataclass(frozen=True, eq=False)
class ProfiledNormal:
    """The normal equations N θ = r of the fit with the row effects profiled out, over θ = (g_1..g_{D−1}, β).

    N = Σ_{i ≥ 1} X_iᵀ(I − 11ᵀ/n_i)X_i, where X_i has one row per visible pair
    of row i: a one-hot of its offset (g_0 dropped: it is the null direction
    shared with the row effects) and [j = 0]. Offsets a, b are both visible
    from row i exactly when i ≥ max(a, b), so the g block is
    diag(c) − M with c_a = rows − a and M_ab = T(max(a, b)), T(k) = Σ_{i ≥ k} 1/n_i;
    β borders it. In the prefix sums P_a = g_1 + … + g_a of the g's, the g block
    becomes tridiagonal (its differences are: M's rows differ by
    (1/n_a)·P_a), so one banded Cholesky factor per structure solves every head
    in O(D), with β by block elimination and one step of iterative refinement
    (the change of variables costs conditioning; the residual is taken with N
    itself, also in O(D)). A structure whose matrix is singular (e.g. rows = 2,
    where offset 1 only ever meets key 0) keeps the dense pseudo-inverse instead.

    Attributes:
        size: D: the D − 1 offsets and β.
        counts: c_a, a = 1..D−1.
        tail: T(a).
        border: N's β column over the g's.
        beta_beta: N's β diagonal entry.
        factor: Upper banded Cholesky factor of J, the g block in the prefix sums P.
        border_solved: J⁻¹ Eᵀ border.
        schur: β's Schur complement.
        pseudo_inverse: The dense pseudo-inverse, only for a singular structure.

    Example:
        >>> normal = ProfiledNormal.build(np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 1.0, 1.0, 1.0]), 4)
        >>> theta = normal.solve(np.array([1.0, 0.0, -1.0, 2.0]))
        >>> np.allclose(normal.matvec(theta), [1.0, 0.0, -1.0, 2.0])
        True
    """

    size: int  # D: D − 1 offsets and β
    counts: Float[np.ndarray, " offsets"]  # c_a, a = 1..D−1
    tail: Float[np.ndarray, " offsets"]  # T(a)
    border: Float[np.ndarray, " offsets"]  # N's β column over the g's
    beta_beta: float  # N's β diagonal entry
    factor: Float[np.ndarray, "2 offsets"] | None = None  # upper banded Cholesky factor of J, the g block in P
    border_solved: Float[np.ndarray, " offsets"] | None = None  # J⁻¹ Eᵀ border
    schur: float = 0.0  # β's Schur complement
    pseudo_inverse: Float[np.ndarray, "size size"] | None = None  # only for a singular structure

    @classmethod
    def build(cls, n_visible: Float[np.ndarray, " rows"], key0: Float[np.ndarray, " rows"], d: int) -> "ProfiledNormal":
        """The normal equations of rows 1..len(n_visible)−1 with offsets 0..d−1 visible (``key0``: key 0 visible from row i).

        Args:
            n_visible: Number of visible keys of each row.
            key0: 1 where key 0 is visible from row i, else 0.
            d: Number of offsets D.

        Returns:
            The factored normal equations.

        Example:
            >>> ProfiledNormal.build(np.array([1.0, 2.0]), np.array([0.0, 1.0]), 2).pseudo_inverse is not None   # rows = 2
            True
        """
        t = len(n_visible)
        weight = np.zeros(t)
        weight[1:] = 1.0 / n_visible[1:]
        tail = np.cumsum(weight[::-1])[::-1]  # Σ_{i ≥ k} 1/n_i
        tail_key0 = np.cumsum((weight * key0)[::-1])[::-1]  # the same over the rows that see key 0
        offsets = np.arange(1, d)
        counts = (t - offsets).astype(np.float64)  # rows 1..t−1 with i ≥ a
        border = key0[offsets] - tail_key0[offsets]  # the key-0 pair of row i has offset i: g_i and β meet there (d ≤ t)
        beta_beta = float(key0.sum() - (tail_key0[1] if t > 1 else 0.0))
        if d == 1 or not key0.any():
            border, beta_beta = np.zeros(d - 1), 1.0  # no key-0 pair: β is not a parameter (its solution is 0)
        normal = cls(d, counts, tail[offsets], border, beta_beta)
        factor = _tridiagonal_factor(counts, weight[offsets], tail[offsets]) if d > 1 else None
        if factor is not None:
            border_up = _differences_up(border)
            solved = _banded_solve(factor, border_up[None])[0]
            schur = beta_beta - float(border_up @ solved)
            # an exactly singular matrix can factor with a pivot that is only rounding (rows = 2 does): its
            # solution would be ~1e16 and the fit's determined combinations would cancel to noise
            if schur > SINGULAR_PIVOT * max(beta_beta, 1.0):
                return dataclasses.replace(normal, factor=factor, border_solved=solved, schur=schur)
        return dataclasses.replace(normal, pseudo_inverse=np.linalg.pinv(normal.matvec(np.eye(d)), hermitian=True))

    def matvec(self, theta: Float[np.ndarray, "*batch size"]) -> Float[np.ndarray, "*batch size"]:
        """N θ, in O(D) per θ.

        Args:
            theta: Parameters (g_1..g_{D−1}, β), with any leading axes.

        Returns:
            N θ, with the same shape as ``theta``.

        Example:
            >>> normal = ProfiledNormal.build(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 1.0]), 3)
            >>> normal.matvec(np.eye(3)).round(4).tolist()   # N itself
            [[1.1667, -0.3333, 0.1667], [-0.3333, 0.6667, 0.6667], [0.1667, 0.6667, 1.1667]]
        """
        g, beta = theta[..., :-1], theta[..., -1]
        prefix = np.cumsum(g, axis=-1)
        later = np.cumsum((self.tail * g)[..., ::-1], axis=-1)[..., ::-1]  # Σ_{b ≥ a} T(b) g_b
        mg = self.tail * prefix + later - self.tail * g  # (M g)_a = T(a)·P_a + Σ_{b > a} T(b) g_b
        out = np.empty_like(theta)
        out[..., :-1] = self.counts * g - mg + self.border * beta[..., None]
        out[..., -1] = g @ self.border + self.beta_beta * beta
        return out

    def solve(self, rhs: Float[np.ndarray, "*batch size"]) -> Float[np.ndarray, "*batch size"]:
        """θ with N θ = rhs, for any leading axes (the pseudo-inverse's θ for a singular structure).

        Args:
            rhs: Right-hand sides r, with any leading axes.

        Returns:
            θ, with the same shape as ``rhs``.

        Example:
            >>> normal = ProfiledNormal.build(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 1.0]), 3)
            >>> normal.solve(normal.matvec(np.array([0.5, -1.0, 2.0]))).round(12).tolist()
            [0.5, -1.0, 2.0]
        """
        flat = rhs.reshape(-1, self.size)
        if self.factor is None:
            return (flat @ self.pseudo_inverse).reshape(rhs.shape)
        theta = self._solve_once(flat)
        theta += self._solve_once(flat - self.matvec(theta))  # one step of refinement
        return theta.reshape(rhs.shape)

    def _solve_once(self, rhs: Float[np.ndarray, "batch size"]) -> Float[np.ndarray, "batch size"]:
        border = _differences_up(self.border)
        prefix = _banded_solve(self.factor, _differences_up(rhs[:, :-1]))
        beta = (rhs[:, -1] - prefix @ border) / self.schur
        prefix -= beta[:, None] * self.border_solved[None]
        g = np.diff(prefix, axis=1, prepend=0.0)  # E P: the g's back from their prefix sums
        return np.concatenate([g, beta[:, None]], axis=1)


def _tridiagonal_factor(
    counts: Float[np.ndarray, " offsets"], weight: Float[np.ndarray, " offsets"], tail: Float[np.ndarray, " offsets"]
) -> Float[np.ndarray, "2 offsets"] | None:
    """Upper banded Cholesky factor of J = Eᵀ N_gg E, None where J is not numerically positive definite.

    J's diagonal is c_a + c_{a+1} − 1/n_a (a < D − 1) and c_{D−1} − T(D − 1); its off-diagonal is −c_{a+1}.
    """
    diagonal = np.empty(len(counts))
    diagonal[:-1] = counts[:-1] + counts[1:] - weight[:-1]
    diagonal[-1] = counts[-1] - tail[-1]
    banded = np.zeros((2, len(counts)))
    banded[0, 1:] = -counts[1:]
    banded[1] = diagonal
    try:
        factor = scipy.linalg.cholesky_banded(banded)
    except np.linalg.LinAlgError:
        return None
    if (factor[1] ** 2).min() <= SINGULAR_PIVOT * np.abs(diagonal).max():
        return None
    return factor


def _banded_solve(factor: Float[np.ndarray, "2 offsets"], rhs: Float[np.ndarray, "batch offsets"]) -> Float[np.ndarray, "batch offsets"]:
    """J⁻¹ x for each row x of ``rhs``."""
    return scipy.linalg.cho_solve_banded((factor, False), rhs.T, check_finite=False).T


def _differences_up(x: Float[np.ndarray, "*batch n"]) -> Float[np.ndarray, "*batch n"]:
    """Eᵀ x: x_a − x_{a+1}, and x_n last (E maps prefix sums back to their terms)."""
    out = x.copy()
    out[..., :-1] -= x[..., 1:]
    return out


def _sum_over_rows_seeing(st: Structure, x: Float[np.ndarray, "*batch rows"]) -> Float[np.ndarray, "*batch offsets"]:
    """Σ over the rows i ≥ 1 that see offset Δ (i ≥ Δ) of x_i, for Δ = 0..D−1: a reversed cumulative sum."""
    x = np.where(np.arange(st.rows) >= 1, x, 0.0)
    return np.cumsum(x[..., ::-1], axis=-1)[..., ::-1][..., : st.n_offsets]


def _sum_over_visible_offsets(st: Structure, y: Float[np.ndarray, "*batch offsets"]) -> Float[np.ndarray, "*batch rows"]:
    """Σ over the offsets row i ≥ 1 sees (0..min(i, D − 1)) of y_Δ, per row (0 for row 0): a cumulative sum."""
    last = st.n_visible.astype(np.int64) - 1
    return np.where(np.arange(st.rows) >= 1, np.cumsum(y, axis=-1)[..., last], 0.0)


@dataclass
class WindowFit:
    """g, β and the row effects h of the logits, for a stack of heads sharing one :class:`Structure`.

    Arrays carry any leading axes (layers, heads, …) before the last.

    Attributes:
        structure: The window's pairs, shared by every head of the fit.
        g: The offset profile g(Δ), [..., D] (g_0 = 0).
        beta: The key-0 effect β, [...].
        h: The row effects h_i, [..., rows].

    Example:
        >>> st = structure(Binning(8), rows=8, window=None)
        >>> kernel = -0.3 * np.arange(8.0)
        >>> logits = kernel[np.subtract.outer(np.arange(8), np.arange(8)).clip(0)]   # a purely relative head
        >>> fit = fit_logits(st, *structural_sums(st, logits))
        >>> np.round(fit.g - fit.g[0], 6).tolist() == np.round(kernel - kernel[0], 6).tolist(), abs(round(float(fit.beta), 9))
        (True, 0.0)
    """

    structure: Structure
    g: Float[np.ndarray, "*heads offsets"]  # g(0) = 0
    beta: Float[np.ndarray, "*heads"] | float
    h: Float[np.ndarray, "*heads rows"]  # per-sequence row effects of s (row 0: 0)

    def log_partition(self) -> Float[np.ndarray, "*heads rows"]:
        """log Z'_i = logsumexp over the visible offsets of g(Δ) + β·[Δ = i], [..., rows] (row 0: 0).

        A running log-sum-exp over offsets: O(rows) per head.

        Returns:
            log Z'_i of every row, [..., rows].

        Example:
            >>> st = structure(Binning(8), rows=8, window=None)
            >>> fit = WindowFit(st, np.zeros(8), np.array(0.0), np.zeros(8))
            >>> np.allclose(fit.log_partition()[1:], np.log(np.arange(2, 9)))   # uniform over i + 1 keys
            True
        """
        st = self.structure
        running = np.logaddexp.accumulate(self.g, axis=-1)  # LSE of g(0..k)
        rows = np.minimum(np.arange(st.rows), st.n_offsets - 1)  # rows that see key 0 have i < D
        with_key0 = np.logaddexp(running[..., np.maximum(rows - 1, 0)], self.g[..., rows] + self.beta[..., None])
        without = np.broadcast_to(running[..., -1:], with_key0.shape)
        out = np.where(st.key0 > 0, with_key0, without)
        out[..., 0] = 0.0
        return out

    def meanfield_cells(self) -> Float[np.ndarray, "*heads cells"]:
        """Cell sums, for one sequence, of the mean-field log a'_ij = g(i−j) + β·[j = 0] − log Z'_i: [..., C·B].

        Returns:
            The cell sums of the mean-field log a', [..., C·B].

        Example:
            >>> st = structure(Binning(8), rows=8, window=None)
            >>> fit = WindowFit(st, np.zeros(8), np.array(0.0), np.zeros(8))
            >>> round(float(fit.meanfield_cells().sum()), 6) == round(float(-(np.arange(2, 9) * np.log(np.arange(2, 9))).sum()), 6)
            True
        """
        st = self.structure
        return self._fitted_cells(with_rows=False) - _apply(st.to_cells, self.log_partition())

    def residual_cells(self, logit_cells: Float[np.ndarray, "*heads cells"], n_seqs: float) -> Float[np.ndarray, "*heads cells"]:
        """A_cb: the mean over the pairs of each cell of s − g − β·[j = 0] − h, [..., C·B] (0 in empty cells).

        ``logit_cells`` are the cell sums of s over ``n_seqs`` sequences, [..., C·B].

        Args:
            logit_cells: Cell sums of the logits s, [..., C·B].
            n_seqs: Number of sequences the sums are over.

        Returns:
            The residual A of every cell, [..., C·B].

        Example:
            >>> st = structure(Binning(8), rows=8, window=None)
            >>> logits = np.log1p(np.arange(8.0))[None, :] * np.ones((8, 1))   # a key-position term u(j)
            >>> fit = fit_logits(st, *structural_sums(st, logits))
            >>> bool(np.abs(fit.residual_cells(structural_cells(st, logits), 1.0)).max() > 0.01)
            True
        """
        st = self.structure
        fitted = self._fitted_cells(with_rows=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(st.pair_cells > 0, (logit_cells / n_seqs - fitted) / st.pair_cells, 0.0)

    def _fitted_cells(self, with_rows: bool) -> Float[np.ndarray, "*heads cells"]:
        st = self.structure
        cells = _apply(st.offsets_to_cells, self.g) + self.beta[..., None] * st.key0_cells
        return cells + _apply(st.to_cells, self.h) if with_rows else cells


def _apply(operator: scipy.sparse.csr_matrix, x: Float[np.ndarray, "*batch inputs"]) -> Float[np.ndarray, "*batch outputs"]:
    """operator @ x over the last axis of x, for any leading axes."""
    flat = x.reshape(-1, x.shape[-1])
    return np.asarray(operator @ flat.T).T.reshape(*x.shape[:-1], operator.shape[0])


def fit_logits(
    st: Structure,
    row_sums: Float[np.ndarray, "*heads seq"],
    key0_sums: Float[np.ndarray, "*heads seq"],
    offset_sums: Float[np.ndarray, "*heads offsets"],
    n_seqs: float = 1.0,
) -> WindowFit:
    """Least-squares g, β, h from sums over ``n_seqs`` sequences of the logits (or of log a: same g, β).

    ``row_sums`` [..., rows]: Σ_j s_ij per row; ``key0_sums`` [..., rows]: s_i0
    (0 where key 0 is not visible); ``offset_sums`` [..., D]: Σ over the window's
    rows of s_{i, i−Δ}. Rows outside 1..rows−1 are ignored.

    Args:
        st: The window's structure.
        row_sums: Σ_j s_ij of each row, [..., rows].
        key0_sums: s_i0 of each row, [..., rows].
        offset_sums: Σ_i s_{i, i−Δ} of each offset, [..., D].
        n_seqs: Number of sequences the sums are over.

    Returns:
        The fitted g, β and h for every head.

    Example:
        >>> st = structure(Binning(8), rows=8, window=None)
        >>> logits = np.zeros((8, 8)); logits[:, 0] = 2.0   # a constant sink bias on key 0
        >>> fit = fit_logits(st, *structural_sums(st, logits))
        >>> round(float(fit.beta), 9), float(np.abs(fit.g).max()) < 1e-9
        (2.0, True)
    """
    d = st.n_offsets
    per_seq_rows = row_sums[..., : st.rows] / n_seqs
    mean_row = np.where(np.arange(st.rows) >= 1, per_seq_rows / st.n_visible, 0.0)
    rhs_g = offset_sums[..., 1:d] / n_seqs - _sum_over_rows_seeing(st, mean_row)[..., 1:]
    rhs_beta = ((key0_sums[..., : st.rows] / n_seqs - mean_row) * st.key0).sum(-1)
    theta = st.normal.solve(np.concatenate([rhs_g, rhs_beta[..., None]], axis=-1))
    g = np.concatenate([np.zeros_like(theta[..., :1]), theta[..., : d - 1]], axis=-1)
    beta = theta[..., d - 1] if st.key0.any() else np.zeros_like(theta[..., d - 1])
    fitted_rows = _sum_over_visible_offsets(st, g) + beta[..., None] * st.key0
    h = np.where(np.arange(st.rows) >= 1, (per_seq_rows - fitted_rows) / st.n_visible, 0.0)
    return WindowFit(st, g, beta, h)


def structural_sums(
    st: Structure, logits: Float[np.ndarray, "*heads query key"]
) -> tuple[Float[np.ndarray, "*heads rows"], Float[np.ndarray, "*heads rows"], Float[np.ndarray, "*heads offsets"]]:
    """Row, key-0 and offset sums of one sequence's dense logits [..., T, T] over the structure's pairs.

    A small dense helper for examples and checks; the streamed sums come from the capture.

    Args:
        st: The window's structure.
        logits: One sequence's logits, [..., T, T].

    Returns:
        ``(row_sums, key0_sums, offset_sums)``, as :func:`fit_logits` takes them.

    Example:
        >>> st = structure(Binning(4), rows=4, window=None)
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


def structural_cells(st: Structure, logits: Float[np.ndarray, "*heads query key"]) -> Float[np.ndarray, "*heads cells"]:
    """Cell sums [..., C·B] of one sequence's dense logits over the structure's pairs (a dense helper).

    Args:
        st: The window's structure.
        logits: One sequence's logits, [..., T, T].

    Returns:
        The logits summed over the pairs of each cell, [..., C·B].

    Example:
        >>> st = structure(Binning(4), rows=4, window=None)
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


def window_rows(binning: Binning, window: str) -> int:
    """``rows`` of a query window: Q (capped at T) for ``early``, T for ``all``.

    Args:
        binning: The query and offset bins of the measurement.
        window: ``"early"`` or ``"all"``.

    Returns:
        The number of query rows of the window.

    Example:
        >>> window_rows(Binning(64, early=32), "early"), window_rows(Binning(16, early=32), "early"), window_rows(Binning(64), "all")
        (32, 16, 64)
    """
    return min(binning.early, binning.seq_len) if window == "early" else binning.seq_len


def per_sequence_cells(
    st: Structure,
    logit_cells: Float[np.ndarray, "*heads cells"],
    residual: Float[np.ndarray, "*heads cells"],
    n_seqs: float,
    log_partition_rows: Float[np.ndarray, "*heads seq"],
) -> Float[np.ndarray, "*heads cells"]:
    """Cell sums of the per-sequence log a'(n) = s − A − log Z'(n) over ``n_seqs`` sequences, [..., C·B].

    ``logit_cells``: cell sums of s; ``residual``: A [..., C·B] (per pair);
    ``log_partition_rows``: Σ_n log Z'_i(n) per row [..., rows] from the replay.

    Args:
        st: The window's structure.
        logit_cells: Cell sums of s, [..., C·B].
        residual: The residual A of every cell, [..., C·B].
        n_seqs: Number of sequences the sums are over.
        log_partition_rows: Σ_n log Z'_i(n) of each row, [..., rows].

    Returns:
        The cell sums of the per-sequence log a'(n), [..., C·B].

    Example:
        >>> st = structure(Binning(4), rows=4, window=None)
        >>> cells = per_sequence_cells(st, np.zeros(st.pair_cells.shape), np.zeros(st.pair_cells.shape), 1.0,
        ...                            np.log([1.0, 2.0, 3.0, 4.0]))
        >>> round(float(cells.sum()), 6) == round(-float(2 * np.log(2) + 3 * np.log(3) + 4 * np.log(4)), 6)
        True
    """
    return logit_cells - n_seqs * st.pair_cells * residual - _apply(st.to_cells, log_partition_rows[..., : st.rows])


def layer_fits(
    p: SumArrays, binning: Binning, layer_windows: tuple[int | None, ...], window: str, n_seqs: float | None = None
) -> list[tuple[list[int], WindowFit]]:
    """Fit every layer of pooled sums ``p`` (one replicate) in one query window.

    Layers that share a structure are fitted together. Returns
    ``[(layers, fit)]`` with the fit's arrays [len(layers), H, …]; ``n_seqs``
    (default: the sequences in ``p``) scales the sums to one sequence.

    Args:
        p: Pooled sums of one replicate (no group axis).
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        window: ``"early"`` or ``"all"``.
        n_seqs: Number of sequences the sums are over; default those of ``p``.

    Returns:
        ``[(layers, fit)]``, one entry per distinct structure.

    Example:
        >>> fits = layer_fits(sums.pooled(), sums.binning, sums.layer_windows, "all")  # doctest: +SKIP
        >>> [(layers, fit.g.shape) for layers, fit in fits]  # doctest: +SKIP
        [([0, 1, 2], (3, 4, 40))]
    """
    offsets = p.logit_by_offset(window)
    n_seqs = float(np.sum(p.sequence_count)) if n_seqs is None else n_seqs
    out = []
    for st, layers in layers_by_structure(binning, layer_windows, window):
        fit = fit_logits(st, p.logit_by_row[layers], p.key0_logit_by_row[layers], offsets[layers][..., : st.n_offsets], n_seqs)
        out.append((layers, fit))
    return out


def layers_by_structure(binning: Binning, layer_windows: tuple[int | None, ...], window: str) -> list[tuple[Structure, list[int]]]:
    """The layers of each distinct :class:`Structure` in query window ``window``, in order of first appearance.

    Args:
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        window: ``"early"`` or ``"all"``.

    Returns:
        ``[(structure, layers)]``.

    Example:
        >>> [(st.window, layers) for st, layers in layers_by_structure(Binning(16), (None, 4, 64, 4), "all")]   # 64 ≥ T: causal
        [(None, [0, 2]), (4, [1, 3])]
    """
    rows = window_rows(binning, window)
    by_window: dict[int | None, list[int]] = {}
    for layer, w in enumerate(layer_windows):
        by_window.setdefault(structure(binning, rows, w).window, []).append(layer)
    return [(structure(binning, rows, w), layers) for w, layers in by_window.items()]


def meanfield_cells(
    p: SumArrays, binning: Binning, layer_windows: tuple[int | None, ...], window: str
) -> Float[np.ndarray, "layers heads qbins obins"]:
    """Cell sums of the mean-field log a' over all of ``p``'s sequences, [L, H, C, B] (0 outside the window).

    Args:
        p: Pooled sums (no group axis).
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        window: ``"early"`` or ``"all"``.

    Returns:
        The cell sums of the mean-field log a', [L, H, C, B].

    Example:
        >>> meanfield_cells(sums.pooled(), sums.binning, sums.layer_windows, "early").shape  # doctest: +SKIP
        (3, 4, 19, 19)
    """
    n_layers, n_heads = p.logit_by_row.shape[:2]
    out = np.zeros((n_layers, n_heads, binning.n_query_bins * binning.n_offset_bins))
    n_seqs = float(np.sum(p.sequence_count))
    for layers, fit in layer_fits(p, binning, layer_windows, window):
        out[layers] = n_seqs * fit.meanfield_cells()
    return rearrange(out, "layer head (qbin obin) -> layer head qbin obin", qbin=binning.n_query_bins)


def residuals(
    p: SumArrays, binning: Binning, layer_windows: tuple[int | None, ...], window: str, per_sequence: bool = True
) -> Float[np.ndarray, "layers heads cells"]:
    """The absolute component A per cell of every head, fitted on ``p``, [L, H, C·B] (0 outside the window).

    The fit is linear in the sums, so with ``per_sequence=False`` this returns
    N·A in units of the sums: those of several groups add up, and dividing by
    their sequence count gives A fitted on all of them (how
    :func:`poslens.measurement.pipeline.cross_fitted_residuals` gets every variant from one
    fit per group).

    Args:
        p: Pooled sums to fit on (no group axis).
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        window: ``"early"`` or ``"all"``.
        per_sequence: Whether to return A (default) or N·A in units of the sums.

    Returns:
        A (or N·A) of every cell of every head, [L, H, C·B].

    Example:
        >>> residuals(sums.leave_out(0), sums.binning, sums.layer_windows, "all").shape  # doctest: +SKIP
        (3, 4, 361)
    """
    n_layers, n_heads = p.logit_by_row.shape[:2]
    out = np.zeros((n_layers, n_heads, binning.n_query_bins * binning.n_offset_bins))
    n_seqs = float(np.sum(p.sequence_count)) if per_sequence else 1.0
    logit_cells = rearrange(p.logit, "layer head qbin obin -> layer head (qbin obin)")
    for layers, fit in layer_fits(p, binning, layer_windows, window, n_seqs):
        out[layers] = fit.residual_cells(logit_cells[layers], n_seqs)
    return out


def counterfactual_sums(
    group_sums: SumArrays, binning: Binning, layer_windows: tuple[int | None, ...], window: str,
    residual: Float[np.ndarray, "layers heads cells"], log_partition: Float[np.ndarray, "layers heads rows"],
) -> Float[np.ndarray, "layers heads qbins obins"]:
    """Cell sums of the per-sequence log a'(n) of one group, [L, H, C, B], from its first-pass sums,
    the residual A it removed ([L, H, C·B]) and its second-pass Σ_n log Z'_i(n) ([L, H, rows]).

    Args:
        group_sums: The group's first-pass sums (no group axis).
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        window: ``"early"`` or ``"all"``.
        residual: The cross-fitted residual A removed from the group, [L, H, C·B].
        log_partition: The group's Σ_n log Z'_i(n) from the replay, [L, H, rows].

    Returns:
        The cell sums of the group's per-sequence log a'(n), [L, H, C, B].

    Example:
        >>> counterfactual_sums(sums.group(0), sums.binning, sums.layer_windows, "all", a[0], log_z[0])  # doctest: +SKIP
    """
    n_layers, n_heads = group_sums.logit_by_row.shape[:2]
    n_seqs = float(np.sum(group_sums.sequence_count))
    logit_cells = rearrange(group_sums.logit, "layer head qbin obin -> layer head (qbin obin)")
    out = np.zeros((n_layers, n_heads, binning.n_query_bins * binning.n_offset_bins))
    for st, layers in layers_by_structure(binning, layer_windows, window):
        cells = per_sequence_cells(st, logit_cells[layers], residual[layers], n_seqs, log_partition[layers])
        out[layers] = np.where(st.pair_cells > 0, cells, 0.0)
    return rearrange(out, "layer head (qbin obin) -> layer head qbin obin", qbin=binning.n_query_bins)
