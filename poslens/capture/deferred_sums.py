"""The sync-free path's layers, waiting on the device until one transfer adds them to the sums after the forward pass.

On the sync-free path (:class:`poslens.capture.cell_sum_capture.CellSumCapture`
with ``sync_free``) each layer's pieces, folded on the device, go into one flat
tensor with the mask and finite checks as 0.0 / 1.0 flags after them
(:func:`pack_layer`); :func:`flush_pending` copies all of them to the host at
once, adds them to the sums, writes the row-bin store and raises the first
deferred error, with the host path's messages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float

from poslens.capture.batch_groups import BatchGroups
from poslens.capture.row_bin_store import RowBinStore
from poslens.capture.score_checks import mask_error, non_finite_error
from poslens.fit.sums import CellSums


@dataclass
class PendingLayer:
    """One sync-free ``reduce`` call whose pieces wait on the device for :func:`flush_pending`.

    Attributes:
        runs: The groups of the batch's sequences (the pieces but ``row_features`` have one entry per run).
        layer: The layer index.
        checking: Whether the mask check's flags are in ``flat``.
        parts: ``(field, shape)`` of the pieces at the start of ``flat``.
        flat: The pieces, then the flags (as 0.0 / 1.0): bad rows [B·H], then mask ok, hidden unmasked, bad heads [H].
        row_bins: The row-bin arrays on the host (pinned on CUDA, copied without blocking), or ``None``.

    Example:
        >>> one = BatchGroups.of([0])
        >>> pending = pack_layer(one, 1, False, {"logit_by_row": torch.zeros(1, 1, 8, dtype=torch.float64)}, [torch.zeros(1, 1).bool()], None)
        >>> pending.parts, pending.flat.numel()
        ([('logit_by_row', (1, 1, 8))], 9)
    """

    runs: BatchGroups
    layer: int
    checking: bool
    parts: list[tuple[str, tuple[int, ...]]]
    flat: Float[torch.Tensor, " values"]
    row_bins: Float[torch.Tensor, "batch heads seq bins"] | None

    @property
    def batch(self) -> int:
        """Sequences in the batch.

        Example:
            >>> pack_layer(BatchGroups.of([0, 1]), 0, False, {}, [torch.zeros(2, 1).bool()], None).batch
            2
        """
        return self.runs.size


def pack_layer(
    runs: BatchGroups,
    layer: int,
    checking: bool,
    parts: dict[str, torch.Tensor],
    flags: list[torch.Tensor],
    row_bins: Float[torch.Tensor, "batch heads seq bins"] | None,
) -> PendingLayer:
    """One layer's pieces and check flags in one flat device tensor; its row-bin arrays on their way to the host.

    Args:
        runs: The groups of the batch's sequences.
        layer: The layer index.
        checking: Whether ``flags`` holds the mask check's flags after the bad rows.
        parts: The pieces by field, on the scores' device: one entry per run (``row_features``: one for the batch).
        flags: The bad rows [B, H], then (when checking) mask ok, hidden unmasked and bad heads [H].
        row_bins: The row-bin arrays on the device, or ``None``.

    Returns:
        The pending layer.

    Example:
        >>> ones = {"logit_by_row": torch.ones(1, 1, 4, dtype=torch.float64)}
        >>> pack_layer(BatchGroups.of([0]), 0, False, ones, [torch.zeros(1, 1).bool()], None).flat.tolist()
        [1.0, 1.0, 1.0, 1.0, 0.0]
    """
    if row_bins is not None and row_bins.is_cuda:  # to pinned host memory, without waiting; flush_pending writes it
        host = torch.empty(row_bins.shape, dtype=row_bins.dtype, pin_memory=True)
        row_bins = host.copy_(row_bins, non_blocking=True)
    flat = torch.cat([part.reshape(-1) for part in parts.values()] + [flag.reshape(-1).double() for flag in flags])
    shapes = [(name, tuple(part.shape)) for name, part in parts.items()]
    return PendingLayer(runs, layer, checking, shapes, flat, row_bins)


def flush_pending(
    pending: list[PendingLayer],
    sums: CellSums,
    store: RowBinStore | None,
    heads: int,
    sliding_windows: Sequence[int | None],
    probe_row_counts: Float[np.ndarray, " query_windows"] | None,
) -> None:
    """Add the pending layers to ``sums`` in one device-to-host copy, write their row bins, raise the first deferred error.

    Each run's pieces go to its group's sums, and its sequences' row bins to the store under its group.
    The layers before the first that failed a check are added, as on the host path.

    Args:
        pending: The pending layers, in the order they were reduced.
        sums: The sums to add to.
        store: The row-bin store (used where a layer has row bins).
        heads: Number of heads H.
        sliding_windows: The model's sliding window per layer, as the error messages name it.
        probe_row_counts: The probe's rows per sequence per query window, or ``None`` without the probe.

    Raises:
        MaskMismatchError: When a layer's first batch had scores masked other than as the layer's mask.
        NonFiniteScoresError: When a visible score was NaN or infinite; names the layer and head.

    Example:
        >>> from poslens.fit.binning import Binning
        >>> sums = CellSums.zeros(1, 1, 1, Binning(4), (None,))
        >>> sums = CellSums.zeros(2, 1, 1, Binning(4), (None,))
        >>> parts = {"logit_by_row": torch.tensor([[[1.0, 1, 1, 1]], [[2.0, 2, 2, 2]]], dtype=torch.float64)}   # two runs
        >>> layer = pack_layer(BatchGroups.of([1, 0, 0]), 0, False, parts, [torch.zeros(3, 1).bool()], None)
        >>> flush_pending([layer], sums, None, heads=1, sliding_windows=[None], probe_row_counts=None)
        >>> sums.per_group.logit_by_row[:, 0].tolist()   # group 1 got the first run's, group 0 the second's
        [[[2.0, 2.0, 2.0, 2.0]], [[1.0, 1.0, 1.0, 1.0]]]
    """
    if not pending:
        return
    # the one device-to-host copy of the pass: it waits for the queue once, and for the pinned row-bin copies too
    host = torch.cat([call.flat for call in pending]).cpu()
    a = sums.per_group
    for call, flat in zip(pending, host.split([call.flat.numel() for call in pending]), strict=False):
        sizes = [math.prod(shape) for _, shape in call.parts]
        values = flat.split(sizes + [flat.numel() - sum(sizes)])
        flags = values[-1]
        bad_rows = flags[: call.batch * heads].view(call.batch, heads) > 0
        if call.checking and not flags[call.batch * heads] > 0:  # the mask check failed: explain it as the host path would
            hidden_unmasked, bad_heads = bool(flags[call.batch * heads + 1] > 0), flags[call.batch * heads + 2 :] > 0
            if bad_heads.any():
                raise non_finite_error(call.layer, int(torch.nonzero(bad_heads)[0, 0]))
            raise mask_error(call.layer, sliding_windows[call.layer], hidden_unmasked)
        if bad_rows.any():
            raise non_finite_error(call.layer, int(torch.nonzero(bad_rows)[0, 1]))
        layer = call.layer
        for (name, shape), value in zip(call.parts, values, strict=False):
            if name == "row_features":
                sums.row_features[layer] += value.view(shape).numpy()
                continue
            per_run = value.view(shape).numpy()
            for k, g in enumerate(call.runs.groups):
                getattr(a, name)[g, layer] += per_run[k]
        for g, first, end in call.runs.runs:
            if probe_row_counts is not None:
                a.probe_row_count[g, layer] += (end - first) * probe_row_counts
            if call.row_bins is not None and store is not None:  # row_bins are packed only when a store is kept
                store.write(g, layer, call.row_bins[first:end].numpy())
