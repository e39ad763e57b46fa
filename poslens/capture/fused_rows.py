"""The capture's per-row arithmetic and the counterfactual replay as compiled CPU loops: one pass over each score row.

On the CPU, :meth:`poslens.capture.cell_sum_capture.CellSumCapture.reduce` and
:meth:`poslens.capture.counterfactual_replay.CounterfactualReplay.replay` can
run their arithmetic as loops compiled by numba instead of as a sequence of
torch operations. The torch route makes about fifteen passes over every score
(a float64 copy, the maximum, the exponentials, the masked fills, four
reductions, the diagonal fold, a running sum); the loop here reads each visible
score of a row twice while the row sits in the cache, and never touches the
masked ones. Both routes compute the same quantities in float64 from the same
scores, in another order of summation: they agree to rounding, which
``tests/unit/capture/test_fused_rows.py`` checks against the torch route (the
whole table within 1e-10) and against a naive pair-by-pair computation (every
row's pieces within 1e-12).

The loops are compiled on first use and cached on disk (:mod:`poslens.compiled`).
Where numba is not installed, or ``POSLENS_FUSED=0`` is set, the torch route runs
instead (:func:`~poslens.compiled.fused_available`); on an accelerator it always does.

Per row i of one (sequence, head), over its visible keys j (from the row's first
visible key to i), the capture loop gives, in float64:

- m_i (the maximum), log Z_i = m_i + log Σ_j exp(s_ij − m_i), Σ_j s_ij, Σ_j j s_ij and Σ_j s_ij²;
- the row features: a_i0, the entropy log Z_i − Σ_j a_ij s_ij (formed as log1p(Σ_{j ≠ argmax} exp(s_ij − m_i)) + Σ_j a_ij (m_i − s_ij),
  two non-negative terms, so that a strong sink's entropy keeps its digits), a_ii and the largest weight 1 / Σ_j exp(s_ij − m_i);
- Σ_j exp(s_ij − m_i) per offset bin (for the row-bin store), and s_i0;
- the exponentials by :func:`poslens.compiled_loops.exp_nonpositive`, within 1 ulp of libm's ``exp``, formed in a loop of their own that vectorizes;
- added to the sequence's cells: s_ij to its (query bin of i, offset bin of i − j) cell, and to the
  per-offset sums of the ``all`` and ``early`` query windows at Δ = i − j when row i is in them (both through
  one sum per query bin and offset, folded when the (sequence, head) is done).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Bool, Float, Int

from poslens.compiled import compiled_loops
from poslens.fit.sums import FEATURES


@dataclass(frozen=True)
class RowTables:
    """What the capture loop reads of a layer's geometry, per row and offset, as numpy arrays.

    Attributes:
        first_key: The first visible key of each row (0 under full causal attention), [T].
        query_bin: The query bin of each row, [T].
        bin_in_all: Whether each query bin is in the ``all`` query window, [C].
        bin_in_early: Whether each query bin is in the ``early`` query window, [C].
        offset_bin: The offset bin of each offset Δ = i − j, [T].
        n_query_bins: Number of query bins C.
        n_offset_bins: Number of offset bins B.

    Example:
        >>> from poslens.capture.capture_plan import CapturePlan
        >>> from poslens.fit.binning import Binning
        >>> RowTables.of(CapturePlan.build(Binning(8), 3)).first_key.tolist()
        [0, 0, 0, 1, 2, 3, 4, 5]
    """

    first_key: Int[np.ndarray, " seq"]
    query_bin: Int[np.ndarray, " seq"]
    bin_in_all: Bool[np.ndarray, " qbins"]
    bin_in_early: Bool[np.ndarray, " qbins"]
    offset_bin: Int[np.ndarray, " seq"]
    n_query_bins: int
    n_offset_bins: int

    @classmethod
    def of(cls, plan: Any) -> RowTables:
        """The tables of a :class:`~poslens.capture.capture_plan.CapturePlan`.

        Args:
            plan: The layer's plan.

        Returns:
            Its tables.

        Raises:
            ValueError: When a row's visible keys are not the contiguous run ending at the row itself.

        Example:
            >>> from poslens.capture.capture_plan import CapturePlan
            >>> from poslens.fit.binning import Binning
            >>> tables = RowTables.of(CapturePlan.build(Binning(8), None))
            >>> tables.offset_bin.tolist(), tables.bin_in_all.tolist()   # query bin 0 (row 0) is in no query window
            ([0, 1, 2, 3, 4, 5, 6, 7], [False, True, True, True, True, True, True, True])
        """
        valid = plan.geometry.valid.numpy()
        t = valid.shape[0]
        first_key = valid.argmax(1).astype(np.int64)
        expected = (np.arange(t)[None, :] >= first_key[:, None]) & (np.arange(t)[None, :] <= np.arange(t)[:, None])
        if not np.array_equal(valid, expected):
            raise ValueError("the compiled capture needs each row's visible keys to end at the row and have no gaps")
        binning = plan.binning
        return cls(
            first_key=first_key,
            query_bin=np.asarray(binning.query_bin[:t], dtype=np.int64),
            bin_in_all=np.asarray(plan.query_window_of_bin["all"], dtype=np.bool_),
            bin_in_early=np.asarray(plan.query_window_of_bin["early"], dtype=np.bool_),
            offset_bin=plan.geometry.offset_bin.numpy().astype(np.int64),
            n_query_bins=binning.n_query_bins,
            n_offset_bins=binning.n_offset_bins,
        )


@dataclass
class RowPieces:
    """What the capture loop gives for one layer's scores [B, H, T, T], per sequence (float64 tensors sharing numpy's memory).

    Attributes:
        log_z: log Z_i, [B, H, T].
        row_sum: Σ_j s_ij, [B, H, T].
        row_js: Σ_j j s_ij, [B, H, T].
        row_sq: Σ_j s_ij², [B, H, T].
        features: The row features (a_i0, entropy, a_ii, largest weight), in ``poslens.fit.sums.FEATURES`` order, [B, H, T, F].
        logit_cells: Σ of s per (query bin, offset bin) cell, [B, H, C, B_off].
        offset_sums: Σ_i s_{i,i−Δ} over the rows of the ``all`` (0) and ``early`` (1) query windows, [B, 2, H, T].
        key0_logits: s_i0 where key 0 is visible, else 0, [B, H, T].
        row_bins: m_i, then Σ exp(s_ij − m_i) per offset bin, [B, H, T, 1 + B_off]; ``None`` unless asked for.

    Example:
        >>> from poslens.capture.capture_plan import CapturePlan
        >>> from poslens.fit.binning import Binning
        >>> scores = torch.zeros(1, 1, 4, 4)
        >>> pieces = row_pieces(scores, RowTables.of(CapturePlan.build(Binning(4), None)), row_bins=False)
        >>> pieces.features[0, 0, :, 0].tolist()   # a_i0 of uniform attention: 1 / (i + 1)
        [1.0, 0.5, 0.3333333333333333, 0.25]
    """

    log_z: Float[torch.Tensor, "batch heads seq"]
    row_sum: Float[torch.Tensor, "batch heads seq"]
    row_js: Float[torch.Tensor, "batch heads seq"]
    row_sq: Float[torch.Tensor, "batch heads seq"]
    features: Float[torch.Tensor, "batch heads seq features"]
    logit_cells: Float[torch.Tensor, "batch heads qbins obins"]
    offset_sums: Float[torch.Tensor, "batch 2 heads seq"]
    key0_logits: Float[torch.Tensor, "batch heads seq"]
    row_bins: Float[torch.Tensor, "batch heads seq bins"] | None


def row_pieces(scores: Float[torch.Tensor, "batch heads query key"], tables: RowTables, row_bins: bool) -> RowPieces:
    """One layer's per-row sums, features and per-sequence cells from its scores [B, H, T, T] on the CPU.

    Only the visible keys of each row are read (the masked ones are never looked at: check the mask
    separately). Half-precision scores are widened to float32 first (exactly).

    Args:
        scores: The pre-softmax scores on the CPU, [B, H, T, T].
        tables: The layer's :class:`RowTables`.
        row_bins: Whether to form the row-bin sums for the counterfactual replay.

    Returns:
        The :class:`RowPieces`.

    Example:
        >>> from poslens.capture.capture_plan import CapturePlan
        >>> from poslens.fit.binning import Binning
        >>> scores = torch.tensor([[[[0.0, -9.0], [1.0, 2.0]]]])
        >>> pieces = row_pieces(scores, RowTables.of(CapturePlan.build(Binning(2), None)), row_bins=True)
        >>> pieces.row_sum[0, 0].tolist(), pieces.row_bins[0, 0, 1].tolist()   # row 1: max 2, exp(0) at Δ 0, exp(−1) at Δ 1
        ([0.0, 3.0], [2.0, 1.0, 0.36787944117144233])
    """
    if scores.dtype not in (torch.float32, torch.float64):
        scores = scores.float()
    batch, heads, t, _ = scores.shape
    n_c, n_b = tables.n_query_bins, tables.n_offset_bins
    per_row = [np.empty((batch, heads, t)) for _ in range(5)]
    log_z, row_sum, row_js, row_sq, key0 = per_row
    features = np.empty((batch, heads, t, len(FEATURES)))
    bins = np.zeros((batch, heads, t, 1 + n_b)) if row_bins else np.zeros((1, 1, 1, 1))
    cells = np.zeros((batch, heads, n_c, n_b))
    offsets = np.zeros((batch, 2, heads, t))
    compiled_loops(torch.get_num_threads()).capture_rows(
        scores.detach().contiguous().numpy(), tables.first_key, tables.query_bin, tables.bin_in_all, tables.bin_in_early,
        tables.offset_bin, row_bins, log_z, row_sum, row_js, row_sq, features, bins, cells, offsets, key0,
    )  # fmt: skip
    as_tensor = torch.from_numpy
    return RowPieces(
        log_z=as_tensor(log_z),
        row_sum=as_tensor(row_sum),
        row_js=as_tensor(row_js),
        row_sq=as_tensor(row_sq),
        features=as_tensor(features),
        logit_cells=as_tensor(cells),
        offset_sums=as_tensor(offsets),
        key0_logits=as_tensor(key0),
        row_bins=as_tensor(bins) if row_bins else None,
    )


def replay_log_partition(
    row_bins: Float[np.ndarray, "batch heads seq bins"],
    weights: Float[np.ndarray, "variants heads qbins obins"],
    query_bin: Int[np.ndarray, " seq"],
    n_rows: int,
) -> Float[np.ndarray, "variants heads rows"]:
    """Σ over the sequences of log Z'_i = m_i + log Σ_b exp(−A_{c(i)b}) S_ib, per variant, head and row.

    The compiled form of :meth:`poslens.capture.counterfactual_replay.CounterfactualReplay.add` on the CPU.

    Args:
        row_bins: Each row's maximum m_i, then its sums S_ib of exp(s − m_i) per offset bin, [batch, H, T, 1 + B].
        weights: exp(−A) per variant, head, query bin and offset bin, [V, H, C, B].
        query_bin: The query bin c(i) of each row, [T] (int64).
        n_rows: How many rows, from row 0, the query window holds.

    Returns:
        The sums, [V, H, n_rows].

    Example:
        >>> out = replay_log_partition(np.array([[[[0.5, 1.0, 2.0]]]]), np.ones((1, 1, 1, 2)), np.zeros(1, dtype=np.int64), 1)
        >>> round(float(out[0, 0, 0]), 6)   # 0.5 + log(1 + 2)
        1.598612
    """
    out = np.empty((weights.shape[0], weights.shape[1], n_rows))
    compiled_loops(torch.get_num_threads()).replay_rows(row_bins, weights, query_bin, out)
    return out
