"""How one layer's per-row and per-diagonal pieces fold into the cells of :class:`poslens.fit.sums.SumFields`.

A row block's scores are laid out so that a skewed strided view of them walks
the offset diagonals (:func:`add_diagonal_sums`); summed over the rows of each
query bin (one matrix product), that gives the sum of s over each (query bin, offset bin) cell, and
over the rows of each query window, the sum of s_{i,i−Δ} per exact offset Δ.
:func:`cell_parts` folds the per-row pieces (log Z_i and the row sums of s, s²
and j·s) into query bins with the plan's one-hot matrix. Every sum over the
batch is taken per run of one group (:class:`~poslens.capture.batch_groups.BatchGroups`):
the pieces have a leading axis of runs.
"""

from __future__ import annotations

import torch
from einops import einsum, rearrange
from jaxtyping import Float

from poslens.capture.batch_groups import BatchGroups
from poslens.capture.capture_plan import CapturePlan
from poslens.capture.row_blocks import RowBlock


def _diagonals(flat: Float[torch.Tensor, " buffer"], shape: tuple[int, int, int, int]) -> Float[torch.Tensor, "batch heads span rows"]:
    """The skewed view of a padded block whose column c walks the diagonal of offset Δ = span − 1 − c."""
    batch, heads, n_rows, span = shape
    width = span + n_rows
    return flat.as_strided((batch, heads, span, n_rows), (heads * n_rows * width, n_rows * width, 1, width + 1), flat.storage_offset() + 1)


def add_diagonal_sums(
    flat: Float[torch.Tensor, " buffer"],
    shape: tuple[int, int, int, int],
    block: RowBlock,
    plan: CapturePlan,
    logit_cells: Float[torch.Tensor, "runs heads qbins obins"],
    offset_sums: Float[torch.Tensor, "runs 2 heads seq"],
    runs: BatchGroups,
) -> None:
    """Add one block's visible logits, summed along each offset diagonal, to the cell sums and the per-offset sums.

    ``flat`` holds R zeros, then the block [B, H, R, S] in rows of width S + R whose
    last R entries are zero. Read with row stride S + R + 1, column c of that view
    walks the diagonal of offset Δ = S − 1 − c (entries left of a row's start fall in
    the previous row's zeros). Summed over the rows of each query bin c and folded
    into offset bins, that is the bin's share of the ``logit`` cells; over the rows of
    the all / early query windows, it is ``offset_sums`` [runs, 2, H, T] (index 0: rows i ≥ 1,
    index 1: the early rows 1 ≤ i < Q). The rows are folded by one matrix product of
    the skewed view (no copy of it) with [R, query bins of the block + 2] (one-hot
    query bins, then the all / early query windows; :meth:`CapturePlan.diagonal_tables`),
    the result summed over the batch per run of ``runs`` and added to the cells by one
    ``index_add_`` over (query bin, offset bin).

    Args:
        flat: The padded block, as laid out above.
        shape: ``(B, H, R, S)``: sequences, heads, rows and key span of the block.
        block: The row block.
        plan: The layer's plan (for the block's tables).
        logit_cells: Σ of s per (run, head, query bin, offset bin), added to in place.
        offset_sums: Σ of s_{i,i−Δ} over the all / early rows per (run, head, Δ), added to in place.
        runs: The groups of the batch's sequences.

    Example:
        >>> from poslens.fit.binning import Binning
        >>> plan = CapturePlan.build(Binning(4), None)
        >>> block = plan.blocks(1, torch.device("cpu"), 64)[0]   # all 4 rows, keys 0..3
        >>> s = torch.ones(4, 4, dtype=torch.float64).tril()
        >>> flat = torch.cat([torch.zeros(4, dtype=torch.float64), torch.cat([s, torch.zeros(4, 4)], 1).reshape(-1)])
        >>> cells = torch.zeros(1, 1, plan.binning.n_query_bins, plan.binning.n_offset_bins, dtype=torch.float64)
        >>> offsets = torch.zeros(1, 2, 1, 4, dtype=torch.float64)
        >>> add_diagonal_sums(flat, (1, 1, 4, 4), block, plan, cells, offsets, BatchGroups.of([0]))
        >>> offsets[0, 0, 0].tolist()   # rows 1..3: three pairs at offset 0, three at 1, two at 2, one at 3
        [3.0, 3.0, 2.0, 1.0]
    """
    heads, span = shape[1], shape[3]
    n_runs = len(runs.runs)
    diagonals = _diagonals(flat, shape)
    rows_to_columns, cell_index = plan.diagonal_tables(block, flat.device)
    n_segments = rows_to_columns.shape[1] - 2
    folded = runs.sum(diagonals @ rows_to_columns)  # [runs, H, S, segments + 2]
    logit_cells.view(n_runs, heads, -1).index_add_(2, cell_index, folded[..., :n_segments].reshape(n_runs, heads, -1))
    offset_sums[..., :span] += rearrange(folded[..., n_segments:], "run head col query_window -> run query_window head col").flip(-1)


def cell_parts(
    plan: CapturePlan,
    runs: BatchGroups,
    log_z: Float[torch.Tensor, "batch *layers heads seq"],
    row_sum: Float[torch.Tensor, "batch *layers heads seq"],
    row_js: Float[torch.Tensor, "batch *layers heads seq"],
    row_sq: Float[torch.Tensor, "batch *layers heads seq"],
    logit_cells: Float[torch.Tensor, "runs *layers heads qbins obins"],
    key0_logits: Float[torch.Tensor, "runs *layers heads seq"],
    offset_sums: Float[torch.Tensor, "runs *layers 2 heads seq"],
) -> dict[str, torch.Tensor]:
    """The pieces of one layer, or of several layers of one plan stacked after the batch axis, by
    :class:`~poslens.fit.sums.SumFields` field, folded into query bins, on the scores' device.

    Args:
        plan: The layers' plan.
        runs: The groups of the batch's sequences: each piece is summed over the batch per run.
        log_z: log Z_i per sequence, (layer,) head and row.
        row_sum: Σ_j s_ij over the visible keys.
        row_js: Σ_j j·s_ij over the visible keys.
        row_sq: Σ_j s_ij² over the visible keys.
        logit_cells: Σ of s per (run, (layer,) head, query bin, offset bin).
        key0_logits: Σ of s_i0 per run, (layer,) head and row.
        offset_sums: Σ of s_{i,i−Δ} over the all / early rows per (run, (layer,) head, Δ).

    Returns:
        ``{field: tensor}`` with a leading axis of runs in place of the batch axis, each run shaped as one
        (group, layer) slice of the field, or as the stacked layers' slices.

    Example:
        >>> from poslens.fit.binning import Binning
        >>> plan = CapturePlan.build(Binning(8), None)
        >>> z, c, b = torch.zeros(3, 1, 8, dtype=torch.float64), plan.binning.n_query_bins, plan.binning.n_offset_bins
        >>> runs = BatchGroups.of([0, 1, 1])   # two runs: the pieces are [2, ...]
        >>> cells, offsets = torch.zeros(2, 1, c, b, dtype=torch.float64), torch.zeros(2, 2, 1, 8, dtype=torch.float64)
        >>> parts = cell_parts(plan, runs, z, z, z, z, cells, z[:2], offsets)
        >>> tuple(parts["logit_by_offset_early"].shape) == (2, 1, plan.early_rows)
        True
        >>> stacked = cell_parts(plan, runs, z[:, None], z[:, None], z[:, None], z[:, None], cells[:, None], z[:2, None], offsets[:, None])
        >>> tuple(stacked["log_partition"].shape) == (2, 1, 1, c, b)   # [runs, layers, heads, C, B]
        True
    """
    tensors = plan.on(log_z.device)
    fold, keys, per_bin, n_visible = tensors.query_fold, tensors.key_positions, tensors.per_bin, tensors.n_visible
    z_sum = runs.sum(log_z)  # [runs, (layers,) H, T]
    if tensors.query_bin_rows is not None:  # one small product per query bin: a fifth of the three-way einsum's time, the same sums
        log_partition = torch.stack([z_sum[..., rows] @ per_bin[rows] for rows in tensors.query_bin_rows], dim=-2)
    else:
        log_partition = einsum(fold, z_sum, per_bin, "qbin seq, run ... seq, seq obin -> run ... qbin obin")
    return {
        "logit": logit_cells,
        "log_partition": log_partition,
        "logit_sq": runs.sum(row_sq) @ fold.T,
        "log_partition_sq": (runs.sum(log_z**2) * n_visible) @ fold.T,
        "logit_x_log_partition": runs.sum(log_z * row_sum) @ fold.T,
        "logit_x_query_position": (runs.sum(row_sum) * keys) @ fold.T,
        "logit_x_key_position": runs.sum(row_js) @ fold.T,
        "logit_by_row": runs.sum(row_sum),
        "key0_logit_by_row": key0_logits,
        "logit_by_offset_all": offset_sums.select(-3, 0),
        "logit_by_offset_early": offset_sums.select(-3, 1)[..., : plan.early_rows],
    }
