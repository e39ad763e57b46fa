"""One plan per sequence length and sliding window: everything the capture derives from the geometry alone, built once.

The capture (:class:`poslens.capture.cell_sum_capture.CellSumCapture`) and the
second pass (:class:`poslens.capture.second_pass.SecondPass`) keep one
:class:`CapturePlan` per effective sliding window (``None``: full causal) and
look it up for each layer with :func:`lookup_plan`. A plan holds the layer's
row geometry, the one-hot query-bin fold, the query windows' rows, the
data-free structural sums of one sequence, and, made the first time a device or
a row-block budget asks for them, its tensors on that device, its row blocks and
their diagonal-fold tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Bool, Float, Int

from poslens.capture.fused_rows import RowTables
from poslens.capture.row_blocks import LayerRowGeometry, RowBlock, default_block_elements, effective_sliding_window
from poslens.fit.binning import Binning
from poslens.fit.sums import QUERY_WINDOWS


@dataclass
class PlanOnDevice:
    """A plan's tensors, copied to one device once.

    Attributes:
        query_fold: One-hot query bins, [C, T].
        key_positions: Positions 0..T − 1 as float64, [T].
        per_bin: Visible pairs of each row per offset bin, [T, B].
        n_visible: Visible keys of each row, [T].
        valid: The visible (query, key) pairs, [T, T].
        query_window_rows: The rows of each query window as indices (a boolean index would synchronize).
        query_bin_rows: Each query bin's rows as a slice, where every row is in one bin and the bins are runs of
            consecutive rows (as :class:`~poslens.fit.binning.Binning` makes them); ``None`` otherwise.

    Example:
        >>> CapturePlan.build(Binning(8), None).on(torch.device("cpu")).query_window_rows["early"].tolist()
        [1, 2, 3, 4, 5, 6, 7]
    """

    query_fold: Float[torch.Tensor, "qbins seq"]
    key_positions: Float[torch.Tensor, " seq"]
    per_bin: Float[torch.Tensor, "seq obins"]
    n_visible: Float[torch.Tensor, " seq"]
    valid: Bool[torch.Tensor, "seq seq"]
    query_window_rows: dict[str, Int[torch.Tensor, " rows"]]
    query_bin_rows: tuple[slice, ...] | None = None


def query_bin_slices(query_fold: Float[torch.Tensor, "qbins seq"]) -> tuple[slice, ...] | None:
    """Each query bin's rows as a slice, or ``None`` where a row is in no bin or several, or a bin's rows are not consecutive.

    Args:
        query_fold: One-hot query bins, [C, T].

    Returns:
        One slice per query bin, or ``None``.

    Example:
        >>> query_bin_slices(torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
        (slice(0, 2, None), slice(2, 3, None))
        >>> query_bin_slices(torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])) is None   # bin 0's rows are not a run
        True
    """
    fold = query_fold.cpu()
    if not bool((fold.sum(0) == 1).all()):
        return None
    row_bin = fold.argmax(0)
    if not bool((row_bin.diff() >= 0).all()):
        return None
    bounds = torch.searchsorted(row_bin, torch.arange(fold.shape[0] + 1)).tolist()
    return tuple(slice(start, end) for start, end in zip(bounds[:-1], bounds[1:], strict=True))


@dataclass
class CapturePlan:
    """What capturing a layer of one sliding window at one sequence length needs, fixed before any score is seen.

    Build it once per (binning, effective sliding window) with :meth:`build` and
    look it up with :func:`lookup_plan`; the device copies, the row blocks of a
    work-buffer budget and their diagonal-fold tables are made on first use and
    kept in it.

    Attributes:
        binning: The query and offset bins of the measurement.
        geometry: The layer's visible pairs (:class:`~poslens.capture.row_blocks.LayerRowGeometry`).
        query_fold: One-hot query bins, [C, T] float64.
        positions: Positions 0..T − 1 as float64, [T].
        query_window_of_bin: For each query window, whether each query bin is in it, [C].
        query_window_rows: For each query window, whether each row is in it, [T].
        query_window_row_counts: Rows per sequence in each query window, in ``fit.sums.QUERY_WINDOWS`` order.
        early_rows: ``min(early, T)``: rows 1 ≤ i < early_rows form the early query window.
        structure_sums: One sequence's data-free sums, by :class:`~poslens.fit.sums.SumFields` field.

    Example:
        >>> plan = CapturePlan.build(Binning(8), sliding_window=3)
        >>> plan.geometry.n_visible.tolist()
        [1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
        >>> plan.structure_sums["query_pair_count"].sum()   # visible pairs of one sequence
        np.float64(21.0)
    """

    binning: Binning
    geometry: LayerRowGeometry
    query_fold: Float[torch.Tensor, "qbins seq"]
    positions: Float[torch.Tensor, " seq"]
    query_window_of_bin: dict[str, list[bool]]
    query_window_rows: dict[str, Bool[torch.Tensor, " seq"]]
    query_window_row_counts: Float[np.ndarray, " query_windows"]
    early_rows: int
    structure_sums: dict[str, np.ndarray]
    _on_device: dict[str, PlanOnDevice] = field(default_factory=dict, repr=False)
    _blocks: dict[tuple[int, str], list[RowBlock]] = field(default_factory=dict, repr=False)
    _diagonal_tables: dict[tuple[int, int, int, str], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)
    _row_tables: RowTables | None = field(default=None, repr=False)

    @classmethod
    def build(cls, binning: Binning, sliding_window: int | None) -> CapturePlan:
        """The plan of a layer with ``sliding_window`` at ``binning``'s length (a window at least T wide counts as none).

        Args:
            binning: The query and offset bins of the measurement.
            sliding_window: The layer's sliding window, or ``None`` for full causal attention.

        Returns:
            The plan, its tensors on the CPU.

        Example:
            >>> CapturePlan.build(Binning(8), sliding_window=64).geometry.sliding_window is None
            True
        """
        geometry = LayerRowGeometry.build(binning, effective_sliding_window(binning, sliding_window))
        t = binning.seq_len
        fold = torch.zeros(binning.n_query_bins, t, dtype=torch.float64)
        fold[torch.as_tensor(binning.query_bin), torch.arange(t)] = 1.0  # one-hot query bins, [C, T]
        positions = torch.arange(t, dtype=torch.float64)
        query_windows = binning.query_windows
        query_window_rows = {w: torch.as_tensor(query_windows[w][binning.query_bin]) for w in QUERY_WINDOWS}  # [T] bool: row i in w
        count = torch.log(geometry.n_visible)
        structure_sums = {
            "pair_count": fold @ geometry.per_bin,
            "count_term": fold @ (count[:, None] * geometry.per_bin),
            "query_pair_count": fold @ geometry.n_visible,
            "count_term_sq": fold @ (count**2 * geometry.n_visible),
            "query_position": fold @ (positions * geometry.n_visible),
            "query_position_sq": fold @ (positions**2 * geometry.n_visible),
            "key_position": fold @ geometry.key_sum,
            "key_position_sq": fold @ geometry.key_sq_sum,
            "query_x_key_position": fold @ (positions * geometry.key_sum),
        }
        return cls(
            binning=binning,
            geometry=geometry,
            query_fold=fold,
            positions=positions,
            query_window_of_bin={w: query_windows[w].tolist() for w in QUERY_WINDOWS},
            query_window_rows=query_window_rows,
            query_window_row_counts=np.array([float(query_window_rows[w].sum()) for w in QUERY_WINDOWS]),
            early_rows=min(binning.early, t),
            structure_sums={name: value.numpy() for name, value in structure_sums.items()},
        )

    def on(self, device: torch.device) -> PlanOnDevice:
        """The plan's tensors on ``device``, copied the first time it is asked for.

        Args:
            device: The scores' device.

        Returns:
            The copies.

        Example:
            >>> CapturePlan.build(Binning(8), None).on(torch.device("cpu")).n_visible.tolist()
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
        """
        key = str(device)
        if key not in self._on_device:
            geometry = self.geometry
            self._on_device[key] = PlanOnDevice(
                query_fold=self.query_fold.to(device),
                key_positions=self.positions.to(device),
                per_bin=geometry.per_bin.to(device),
                n_visible=geometry.n_visible.to(device),
                valid=geometry.valid.to(device),
                query_window_rows={w: torch.nonzero(rows)[:, 0].to(device) for w, rows in self.query_window_rows.items()},
                query_bin_rows=query_bin_slices(self.query_fold),
            )
        return self._on_device[key]

    def row_tables(self) -> RowTables:
        """The layer's :class:`~poslens.capture.fused_rows.RowTables` for the compiled capture loop, made once.

        Returns:
            The tables.

        Example:
            >>> CapturePlan.build(Binning(8), 3).row_tables().first_key.tolist()
            [0, 0, 0, 1, 2, 3, 4, 5]
        """
        if self._row_tables is None:
            self._row_tables = RowTables.of(self)
        return self._row_tables

    def blocks(self, rows_per_query: int, device: torch.device, block_elements: int | None = None) -> list[RowBlock]:
        """The row blocks of this layer when ``rows_per_query`` (batch × heads) blocks share one work buffer.

        Args:
            rows_per_query: How many (sequence, head) copies of a block one buffer holds.
            device: Where the blocks' index tensors go.
            block_elements: Size of a work buffer; default :func:`~poslens.capture.row_blocks.default_block_elements`.

        Returns:
            The blocks, covering every row in order.

        Example:
            >>> [(b.r0, b.r1) for b in CapturePlan.build(Binning(8), None).blocks(2, torch.device("cpu"), block_elements=24)]
            [(0, 3), (3, 5), (5, 6), (6, 7), (7, 8)]
        """
        elements = max(1, (block_elements or default_block_elements(device)) // rows_per_query)
        key = (elements, str(device))
        if key not in self._blocks:
            self._blocks[key] = [RowBlock.build(self.geometry, r0, r1, device) for r0, r1 in self.geometry.row_blocks(elements)]
        return self._blocks[key]

    def diagonal_tables(self, block: RowBlock, device: torch.device) -> tuple[Float[torch.Tensor, "rows columns"], Int[torch.Tensor, " cells"]]:
        """A block's fold of rows into its query bins and the query windows, and each (column, query bin)'s cell index.

        For :func:`poslens.capture.cell_folding.add_diagonal_sums`: the matrix
        [R, query bins of the block + 2] is one-hot in the block's query bins, then
        marks the rows of the ``all`` and ``early`` query windows.

        Args:
            block: One of this plan's row blocks.
            device: Where the tables go.

        Returns:
            ``(matrix, cell index)``, made once per block and device.

        Example:
            >>> plan = CapturePlan.build(Binning(8), None)
            >>> matrix, index = plan.diagonal_tables(plan.blocks(1, torch.device("cpu"), 64)[0], torch.device("cpu"))
            >>> matrix.shape[1] == len(plan.blocks(1, torch.device("cpu"), 64)[0].query_segments) + 2
            True
        """
        key = (block.r0, block.r1, block.k0, str(device))
        if key not in self._diagonal_tables:
            in_query_window, segments = self.query_window_of_bin, block.query_segments
            matrix = torch.zeros(block.r1 - block.r0, len(segments) + 2, dtype=torch.float64)
            for k, (query_bin, first, end) in enumerate(segments):
                matrix[first:end, k] = 1.0
                if in_query_window["all"][query_bin]:
                    matrix[first:end, -2] = 1.0
                    if in_query_window["early"][query_bin]:
                        matrix[first:end, -1] = 1.0
            query_bins = torch.tensor([query_bin for query_bin, _, _ in segments], device=device)
            index = block.offset_bin_of_column[:, None] + self.binning.n_offset_bins * query_bins[None, :]  # [S, segments]
            self._diagonal_tables[key] = (matrix.to(device), index.reshape(-1))
        return self._diagonal_tables[key]


def lookup_plan(plans: dict[int | None, CapturePlan], binning: Binning, sliding_window: int | None) -> CapturePlan:
    """The :class:`CapturePlan` of a layer with ``sliding_window``, built into ``plans`` the first time its width is seen.

    Layers of the same effective sliding window (a window at least T wide counts as none) share one plan.

    Args:
        plans: The plans, by effective sliding window (``None``: full causal).
        binning: The query and offset bins of the measurement.
        sliding_window: The layer's sliding window, or ``None``.

    Returns:
        The plan.

    Example:
        >>> plans = {}
        >>> lookup_plan(plans, Binning(8), 64).geometry.sliding_window is None, list(plans)   # width 64 ≥ T = 8: full
        (True, [None])
    """
    sliding_window = effective_sliding_window(binning, sliding_window)
    if sliding_window not in plans:
        plans[sliding_window] = CapturePlan.build(binning, sliding_window)
    return plans[sliding_window]
