"""The mask-only counterfactual of a head (methodology §4.1, version 2), fitted from streamed sums.

For one layer and one query window (rows 1 ≤ i < ``rows``), least squares over
every visible pair fits

    log a_ij ≈ g(i − j) + β·[j = 0] + h(i)

with one g per exact offset, one β for key 0 and one h per exact row. The row
effects absorb any per-query shift, so g and β are the same whether s or
log a = s − log Z_i is fitted: the fit needs only three sums of the logits,
per exact offset, per exact row and per row at key 0. With the row effects
profiled out, the normal equations' matrix depends only on the structure
(``rows`` and the layer's sliding window), so it is factored once per structure
(:func:`~poslens.fit.mask_structure.structure`, :class:`~poslens.fit.profiled_normal.ProfiledNormal`; g(0) = 0 removes its one null
direction) and every head, layer and jackknife replicate is solved with that
factor, in O(D) per head.

Two counterfactual patterns follow from a fit:

- **mean-field**: a'_ij = softmax over V_i of g(i − j) + β·[j = 0], the same for
  every sequence; its cell sums are structural (:meth:`WindowFit.meanfield_cells`);
- **per-sequence**: s'_ij(n) = s_ij(n) − A_cb, with A the head's absolute
  component per (query bin, offset bin) cell of the mean logits after g, β and
  h (:meth:`WindowFit.absolute_component_cells`). Renormalizing s' needs the sequence's
  own logits: the first pass stores each row's offset-bin sums of exp(s) and
  :mod:`poslens.capture.counterfactual_replay` computes log Z' from them once A is
  known; :mod:`poslens.fit.cross_fit` turns the replay's row sums into cell sums.

The per-sequence counterfactual is cross-fitted: each group's A is fitted on
the other groups, and each jackknife replicate refits it without its group too.
:mod:`poslens.fit.cross_fit` owns that (one fit per group, as arrays); this
module fits one query window of one set of sums.

All arrays are float64 numpy; nothing here touches torch or a model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from einops import rearrange
from jaxtyping import Float

from poslens.fit.binning import Binning
from poslens.fit.mask_structure import MaskStructure, apply_operator, query_window_rows, structure
from poslens.fit.sums import SumFields


def _sum_over_rows_seeing(st: MaskStructure, x: Float[np.ndarray, "*batch rows"]) -> Float[np.ndarray, "*batch offsets"]:
    """Σ over the rows i ≥ 1 that see offset Δ (i ≥ Δ) of x_i, for Δ = 0..D−1: a reversed cumulative sum."""
    x = np.where(np.arange(st.rows) >= 1, x, 0.0)
    return np.cumsum(x[..., ::-1], axis=-1)[..., ::-1][..., : st.n_offsets]


def _sum_over_visible_offsets(st: MaskStructure, y: Float[np.ndarray, "*batch offsets"]) -> Float[np.ndarray, "*batch rows"]:
    """Σ over the offsets row i ≥ 1 sees (0..min(i, D − 1)) of y_Δ, per row (0 for row 0): a cumulative sum."""
    last = st.n_visible.astype(np.int64) - 1
    return np.where(np.arange(st.rows) >= 1, np.cumsum(y, axis=-1)[..., last], 0.0)


@dataclass
class WindowFit:
    """g, β and the row effects h of the logits, for a stack of heads sharing one :class:`MaskStructure`.

    Arrays carry any leading axes (layers, heads, …) before the last.

    Attributes:
        structure: The pairs of the layer and query window, shared by every head of the fit.
        g: The offset profile g(Δ), [..., D] (g_0 = 0).
        beta: The key-0 effect β, [...].
        h: The row effects h_i, [..., rows].

    Example:
        >>> from poslens.fit.mask_structure import structural_sums
        >>> st = structure(Binning(8), rows=8, sliding_window=None)
        >>> kernel = -0.3 * np.arange(8.0)
        >>> logits = kernel[np.subtract.outer(np.arange(8), np.arange(8)).clip(0)]   # a purely relative head
        >>> fit = fit_logits(st, *structural_sums(st, logits))
        >>> np.round(fit.g - fit.g[0], 6).tolist() == np.round(kernel - kernel[0], 6).tolist(), abs(round(float(fit.beta), 9))
        (True, 0.0)
    """

    structure: MaskStructure
    g: Float[np.ndarray, "*heads offsets"]  # g(0) = 0
    beta: Float[np.ndarray, "*heads"]  # a 0-d array for a single head
    h: Float[np.ndarray, "*heads rows"]  # per-sequence row effects of s (row 0: 0)

    def log_partition(self) -> Float[np.ndarray, "*heads rows"]:
        """log Z'_i = logsumexp over the visible offsets of g(Δ) + β·[Δ = i], [..., rows] (row 0: 0).

        A running log-sum-exp over offsets: O(rows) per head.

        Returns:
            log Z'_i of every row, [..., rows].

        Example:
            >>> st = structure(Binning(8), rows=8, sliding_window=None)
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
            >>> st = structure(Binning(8), rows=8, sliding_window=None)
            >>> fit = WindowFit(st, np.zeros(8), np.array(0.0), np.zeros(8))
            >>> round(float(fit.meanfield_cells().sum()), 6) == round(float(-(np.arange(2, 9) * np.log(np.arange(2, 9))).sum()), 6)
            True
        """
        st = self.structure
        return self._fitted_cells(with_rows=False) - apply_operator(st.to_cells, self.log_partition())

    def absolute_component_cells(self, logit_cells: Float[np.ndarray, "*heads cells"], n_seqs: float) -> Float[np.ndarray, "*heads cells"]:
        """A_cb: the mean over the pairs of each cell of s − g − β·[j = 0] − h, [..., C·B] (0 in empty cells).

        ``logit_cells`` are the cell sums of s over ``n_seqs`` sequences, [..., C·B].

        Args:
            logit_cells: Cell sums of the logits s, [..., C·B].
            n_seqs: Number of sequences the sums are over.

        Returns:
            The absolute component A of every cell, [..., C·B].

        Example:
            >>> from poslens.fit.mask_structure import structural_cells, structural_sums
            >>> st = structure(Binning(8), rows=8, sliding_window=None)
            >>> logits = np.log1p(np.arange(8.0))[None, :] * np.ones((8, 1))   # a key-position term u(j)
            >>> fit = fit_logits(st, *structural_sums(st, logits))
            >>> bool(np.abs(fit.absolute_component_cells(structural_cells(st, logits), 1.0)).max() > 0.01)
            True
        """
        st = self.structure
        fitted = self._fitted_cells(with_rows=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(st.pair_cells > 0, (logit_cells / n_seqs - fitted) / st.pair_cells, 0.0)

    def _fitted_cells(self, with_rows: bool) -> Float[np.ndarray, "*heads cells"]:
        st = self.structure
        cells = apply_operator(st.offsets_to_cells, self.g) + self.beta[..., None] * st.key0_cells
        return cells + apply_operator(st.to_cells, self.h) if with_rows else cells


def fit_logits(
    st: MaskStructure,
    row_sums: Float[np.ndarray, "*heads seq"],
    key0_sums: Float[np.ndarray, "*heads seq"],
    offset_sums: Float[np.ndarray, "*heads offsets"],
    n_seqs: float = 1.0,
) -> WindowFit:
    """Least-squares g, β, h from sums over ``n_seqs`` sequences of the logits (or of log a: same g, β).

    ``row_sums`` [..., rows]: Σ_j s_ij per row; ``key0_sums`` [..., rows]: s_i0
    (0 where key 0 is not visible); ``offset_sums`` [..., D]: Σ over the query window's
    rows of s_{i, i−Δ}. Rows outside 1..rows−1 are ignored.

    Args:
        st: The structure of the layer and query window.
        row_sums: Σ_j s_ij of each row, [..., rows].
        key0_sums: s_i0 of each row, [..., rows].
        offset_sums: Σ_i s_{i, i−Δ} of each offset, [..., D].
        n_seqs: Number of sequences the sums are over.

    Returns:
        The fitted g, β and h for every head.

    Example:
        >>> from poslens.fit.mask_structure import structural_sums
        >>> st = structure(Binning(8), rows=8, sliding_window=None)
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


def layer_fits(
    p: SumFields, binning: Binning, layer_windows: tuple[int | None, ...], query_window: str, n_seqs: float | None = None
) -> list[tuple[list[int], WindowFit]]:
    """Fit every layer of pooled sums ``p`` (one replicate) in one query window.

    Layers that share a structure are fitted together. Returns
    ``[(layers, fit)]`` with the fit's arrays [len(layers), H, …]; ``n_seqs``
    (default: the sequences in ``p``) scales the sums to one sequence.

    Args:
        p: Pooled sums of one replicate (no group axis).
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        query_window: ``"early"`` or ``"all"``.
        n_seqs: Number of sequences the sums are over; default those of ``p``.

    Returns:
        ``[(layers, fit)]``, one entry per distinct structure.

    Example:
        >>> fits = layer_fits(sums.pooled(), sums.binning, sums.layer_windows, "all")  # doctest: +SKIP
        >>> [(layers, fit.g.shape) for layers, fit in fits]  # doctest: +SKIP
        [([0, 1, 2], (3, 4, 40))]
    """
    offsets = p.logit_by_offset(query_window)
    n_seqs = float(np.sum(p.sequence_count)) if n_seqs is None else n_seqs
    out = []
    for st, layers in layers_by_structure(binning, layer_windows, query_window):
        fit = fit_logits(st, p.logit_by_row[layers], p.key0_logit_by_row[layers], offsets[layers][..., : st.n_offsets], n_seqs)
        out.append((layers, fit))
    return out


def layers_by_structure(binning: Binning, layer_windows: tuple[int | None, ...], query_window: str) -> list[tuple[MaskStructure, list[int]]]:
    """The layers of each distinct :class:`MaskStructure` in query window ``query_window``, in order of first appearance.

    Args:
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        query_window: ``"early"`` or ``"all"``.

    Returns:
        ``[(structure, layers)]``.

    Example:
        >>> [(st.sliding_window, layers) for st, layers in layers_by_structure(Binning(16), (None, 4, 64, 4), "all")]   # 64 ≥ T: causal
        [(None, [0, 2]), (4, [1, 3])]
    """
    rows = query_window_rows(binning, query_window)
    by_sliding_window: dict[int | None, list[int]] = {}
    for layer, sliding_window in enumerate(layer_windows):
        by_sliding_window.setdefault(structure(binning, rows, sliding_window).sliding_window, []).append(layer)
    return [(structure(binning, rows, sliding_window), layers) for sliding_window, layers in by_sliding_window.items()]


def meanfield_cells(
    p: SumFields, binning: Binning, layer_windows: tuple[int | None, ...], query_window: str
) -> Float[np.ndarray, "layers heads qbins obins"]:
    """Cell sums of the mean-field log a' over all of ``p``'s sequences, [L, H, C, B] (0 outside the query window).

    Args:
        p: Pooled sums (no group axis).
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        query_window: ``"early"`` or ``"all"``.

    Returns:
        The cell sums of the mean-field log a', [L, H, C, B].

    Example:
        >>> meanfield_cells(sums.pooled(), sums.binning, sums.layer_windows, "early").shape  # doctest: +SKIP
        (3, 4, 19, 19)
    """
    n_layers, n_heads = p.logit_by_row.shape[:2]
    out = np.zeros((n_layers, n_heads, binning.n_query_bins * binning.n_offset_bins))
    n_seqs = float(np.sum(p.sequence_count))
    for layers, fit in layer_fits(p, binning, layer_windows, query_window):
        out[layers] = n_seqs * fit.meanfield_cells()
    return rearrange(out, "layer head (qbin obin) -> layer head qbin obin", qbin=binning.n_query_bins)
