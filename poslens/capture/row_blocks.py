"""The geometry of one layer's visible (query, key) pairs and the blocks of query rows the capture works through.

A layer with full causal attention sees keys j ≤ i from query row i; a layer
with a sliding window of width w sees i − w < j ≤ i. :class:`LayerRowGeometry`
holds what follows from that at length T (the visible pairs, their counts per
row and per offset bin, Σ j and Σ j² per row). :meth:`LayerRowGeometry.row_blocks`
splits the rows into blocks whose visible key span fits one work buffer
(:func:`default_block_elements`), and :class:`RowBlock` holds one block's
index tensors. Both passes over the scores
(:mod:`poslens.capture.cell_sum_capture` and :mod:`poslens.capture.second_pass`)
use the same blocks, so they round alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int

from poslens.fit.binning import Binning

CPU_BLOCK_ELEMENTS = 1 << 19  # float64 elements per work buffer on CPU: 4 MiB, blocks stay in the last-level cache
CUDA_BLOCK_ELEMENTS = 1 << 25  # on CUDA: 256 MiB, few large launches

# Floor of s − max before exp. On CPU torch's exp takes a slow path for arguments far below float64's range
# (masked keys: half of an early row block, which then took 3× as long; benchmarks/exp_floor.py). exp(−700) ≈ 1e-304 is below the
# rounding of Z ≥ 1 and of every sum it enters, so the floor changes no figure; masked keys are set to 0 after.
EXP_FLOOR = -700.0


def default_block_elements(device: str | torch.device) -> int:
    """Float64 elements per row-block work buffer on ``device``.

    On CPU a block small enough to stay in cache while the ~10 passes over it
    run; on CUDA a large one, so that a layer takes few kernel launches.

    Args:
        device: The device the scores are on.

    Returns:
        The number of float64 elements of one work buffer.

    Example:
        >>> default_block_elements("cpu") == CPU_BLOCK_ELEMENTS
        True
    """
    return CUDA_BLOCK_ELEMENTS if torch.device(device).type == "cuda" else CPU_BLOCK_ELEMENTS


def effective_sliding_window(binning: Binning, sliding_window: int | None) -> int | None:
    """The sliding window a layer effectively has at ``binning``'s length: one at least as wide as T counts as none.

    Args:
        binning: The query and offset bins of the measurement.
        sliding_window: The layer's sliding window, or ``None`` for full causal attention.

    Returns:
        ``sliding_window``, or ``None`` where it is at least T wide.

    Example:
        >>> effective_sliding_window(Binning(8), 64) is None, effective_sliding_window(Binning(8), 3)
        (True, 3)
    """
    if sliding_window is not None and sliding_window >= binning.seq_len:
        return None  # a sliding window wider than the sequence changes nothing
    return sliding_window


@dataclass
class LayerRowGeometry:
    """What is fixed about a layer's visible pairs at length T (causal, maybe with a sliding window), row by row.

    Attributes:
        sliding_window: The layer's sliding window, or ``None`` for full causal attention.
        valid: Which (query, key) pairs are visible, [T, T].
        n_visible: Number of visible keys of each query row, [T].
        per_bin: Number of visible pairs of each row in each offset bin, [T, B].
        key_sum: Σ j over the visible keys of each row, [T].
        key_sq_sum: Σ j² over the visible keys of each row, [T].
        query_edges: Edges of the query bins.
        offset_edges: Edges of the offset bins.
        offset_bin: The offset bin of each offset Δ, [T].

    Example:
        >>> geometry = LayerRowGeometry.build(Binning(8), sliding_window=None)
        >>> geometry.n_visible.tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    """

    sliding_window: int | None
    valid: Bool[torch.Tensor, "seq seq"]
    n_visible: Float[torch.Tensor, " seq"]  # |V_i|
    per_bin: Float[torch.Tensor, "seq obins"]  # visible pairs of row i in offset bin b
    key_sum: Float[torch.Tensor, " seq"]  # Σ_{j∈V_i} j
    key_sq_sum: Float[torch.Tensor, " seq"]  # Σ_{j∈V_i} j²
    query_edges: tuple[int, ...]  # the query bins' row edges
    offset_edges: tuple[int, ...]  # the offset bins' edges e_0 = 0 < … < e_B = T
    offset_bin: Int[torch.Tensor, " seq"]  # offset bin of Δ = 0..T − 1

    @classmethod
    def build(cls, binning: Binning, sliding_window: int | None) -> LayerRowGeometry:
        """The visible pairs and their counts, per row and per offset bin, at ``binning``'s length.

        Args:
            binning: The query and offset bins of the measurement.
            sliding_window: The layer's sliding window, or ``None`` for full causal attention.

        Returns:
            The geometry, its tensors on the CPU.

        Example:
            >>> LayerRowGeometry.build(Binning(8), sliding_window=3).n_visible.tolist()
            [1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
        """
        t = binning.seq_len
        i = torch.arange(t)[:, None]
        j = torch.arange(t)[None, :]
        valid = j <= i
        if sliding_window is not None:
            valid &= (i - j) < sliding_window
        if sliding_window is not None:
            first = torch.clamp(i[:, 0] - (sliding_window - 1), min=0)
        else:
            first = torch.zeros(t, dtype=torch.long)
        edges = torch.tensor(binning.offset_edges)
        # offsets Δ in [e_b, e_{b+1}) are keys j in (i − e_{b+1}, i − e_b]
        j_hi = i - edges[None, :-1]  # inclusive
        j_lo = i - edges[None, 1:] + 1
        j_lo = torch.maximum(j_lo, first[:, None])
        empty = j_hi < j_lo
        per_bin = torch.where(empty, 0, j_hi + 1 - j_lo).double()
        valid_d = valid.double()
        jj = torch.arange(t, dtype=torch.float64)
        return cls(
            sliding_window=sliding_window,
            valid=valid,
            n_visible=valid_d.sum(-1),
            per_bin=per_bin,
            key_sum=valid_d @ jj,
            key_sq_sum=valid_d @ (jj * jj),
            query_edges=tuple(binning.query_edges),
            offset_edges=tuple(binning.offset_edges),
            offset_bin=torch.as_tensor(binning.offset_bin),
        )

    def key_start(self, row: int) -> int:
        """The first key visible from query ``row``.

        Args:
            row: A query position.

        Returns:
            ``0`` for full causal attention, else ``max(0, row − sliding_window + 1)``.

        Example:
            >>> LayerRowGeometry.build(Binning(8), sliding_window=3).key_start(5)
            3
        """
        return 0 if self.sliding_window is None else max(0, row - self.sliding_window + 1)

    def row_blocks(self, elements: int) -> list[tuple[int, int]]:
        """Split the query rows into blocks [r0, r1) whose visible key span × rows stays within ``elements``.

        A block holds the keys from ``key_start(r0)`` to ``r1 − 1``; every block has at least one row.

        Args:
            elements: The most (rows × keys) one block may span.

        Returns:
            The blocks ``[(r0, r1)]``, covering every row in order.

        Example:
            >>> LayerRowGeometry.build(Binning(8), sliding_window=None).row_blocks(12)
            [(0, 3), (3, 5), (5, 6), (6, 7), (7, 8)]
        """
        t, blocks, r0 = self.valid.shape[0], [], 0
        while r0 < t:
            offset = r0 - self.key_start(r0)  # keys before the block's first row
            rows = 1
            while r0 + rows < t and (rows + 1) * (offset + rows + 1) <= elements:
                rows += 1
            blocks.append((r0, r0 + rows))
            r0 += rows
        return blocks


@dataclass
class RowBlock:
    """Query rows [r0, r1) of one layer with their key span [k0, r1), the columns to mask, and the indices of their bins.

    Attributes:
        r0: First query row of the block.
        r1: One past the last query row.
        k0: First key visible from any row of the block.
        edge_at: Index of the running sum at key i − e_b, for the offset edges e_0..e_B, [rows, edges].
        edge_used: 0 where that key is before the span (nothing summed yet), else 1, [rows, edges].
        masked_columns: ``(c0, c1, invisible[:, c0:c1])`` of the column ranges where any key is invisible.
        query_segments: ``(query bin, first row, end row)`` of the block's rows, relative to ``r0``.
        offset_bin_of_column: The offset bin of the diagonal read at column c (Δ = span − 1 − c), [span].

    Example:
        >>> geometry = LayerRowGeometry.build(Binning(8), sliding_window=4)
        >>> block = RowBlock.build(geometry, 4, 6, torch.device("cpu"))
        >>> block.k0, block.size
        (1, 10)
        >>> [(c0, c1) for c0, c1, _ in block.masked_columns]   # key 1 is out of row 5's sliding window, key 5 after row 4
        [(0, 1), (4, 5)]
    """

    r0: int
    r1: int
    k0: int
    edge_at: Int[torch.Tensor, "rows edges"]  # index of the running sum at key i − e_b, for offset edges e_0..e_B
    edge_used: Float[torch.Tensor, "rows edges"]  # 0 where that key is before the span (nothing summed yet)
    masked_columns: list[tuple[int, int, Bool[torch.Tensor, "rows cols"]]]  # (c0, c1, invisible[:, c0:c1]) where any key is invisible
    query_segments: list[tuple[int, int, int]]  # (query bin, first row, end row) of the block's rows, relative to r0
    offset_bin_of_column: Int[torch.Tensor, " span"]  # offset bin of the diagonal read at column c: Δ = span − 1 − c

    @property
    def size(self) -> int:
        """Elements of one head's block of scores: rows × key span.

        Example:
            >>> RowBlock.build(LayerRowGeometry.build(Binning(8), sliding_window=None), 4, 6, torch.device("cpu")).size
            12
        """
        return (self.r1 - self.r0) * (self.r1 - self.k0)

    @property
    def padded_size(self) -> int:
        """Elements of one head's block laid out for the diagonal sums: rows × (span + rows), plus rows of zeros
        (shared by the heads) in front.

        Example:
            >>> RowBlock.build(LayerRowGeometry.build(Binning(8), sliding_window=None), 4, 6, torch.device("cpu")).padded_size
            18
        """
        rows = self.r1 - self.r0
        return rows * (self.r1 - self.k0 + rows) + rows

    @classmethod
    def build(cls, geometry: LayerRowGeometry, r0: int, r1: int, device: torch.device) -> RowBlock:
        """The block of rows [r0, r1) of a layer with row geometry ``geometry``, its index tensors on ``device``.

        Args:
            geometry: The layer's row geometry.
            r0: First query row.
            r1: One past the last query row.
            device: Where the index tensors go (the scores' device).

        Returns:
            The block.

        Example:
            >>> block = RowBlock.build(LayerRowGeometry.build(Binning(8), sliding_window=None), 0, 2, torch.device("cpu"))
            >>> [(c0, c1, invisible.tolist()) for c0, c1, invisible in block.masked_columns]   # key 1 is after row 0
            [(1, 2, [[True], [False]])]
        """
        k0 = geometry.key_start(r0)
        # offset bin b of row i holds the keys (i − e_{b+1}, i − e_b]: its sum is the running sum at
        # key i − e_b less the one at i − e_{b+1} (0 before the span; keys masked by a sliding window add exact zeros)
        edge_key = torch.arange(r0, r1)[:, None] - torch.tensor(geometry.offset_edges)[None, :] - k0
        visible = geometry.valid[r0:r1, k0:r1].to(device)
        # masked_fill only the columns that hold an invisible key: the block's last rows' triangle
        # (and, under a sliding window, the first rows' one), not the whole span
        has_invisible = (~geometry.valid[r0:r1, k0:r1]).any(0).tolist() + [False]
        masked_columns, c0 = [], None
        for c, flag in enumerate(has_invisible):
            if flag and c0 is None:
                c0 = c
            elif not flag and c0 is not None:
                masked_columns.append((c0, c, (~visible[:, c0:c])))
                c0 = None
        edges = geometry.query_edges
        query_segments = [
            (c, max(edges[c], r0) - r0, min(edges[c + 1], r1) - r0) for c in range(len(edges) - 1) if edges[c] < r1 and edges[c + 1] > r0
        ]
        span = r1 - k0
        return cls(
            r0=r0,
            r1=r1,
            k0=k0,
            edge_at=edge_key.clamp(min=0).to(device),
            edge_used=(edge_key >= 0).double().to(device),
            masked_columns=masked_columns,
            query_segments=query_segments,
            offset_bin_of_column=geometry.offset_bin[span - 1 - torch.arange(span)].to(device),
        )
