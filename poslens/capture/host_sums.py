"""The host path's end of a layer: the layers of a batch folded into query bins together and added to the sums.

On the host path (:class:`poslens.capture.cell_sum_capture.CellSumCapture` without
``sync_free``, the CPU default) :meth:`~poslens.capture.cell_sum_capture.CellSumCapture.reduce`
checks each layer's scores and keeps what is left of them, a few arrays of
batch × heads × T (no T × T), in a :class:`HostLayer`. The capture hands the
layers it holds to :func:`add_layers_on_host` at the end of the forward pass
(:meth:`~poslens.capture.cell_sum_capture.CellSumCapture.flush`), when its sums
are read, when a batch of other groups or a layer already held comes in, and when
they reach :data:`HELD_BYTES`. There the layers of one plan are folded into query
bins with one set of tensor operations, copied to the host in one transfer and
added to the sums: done layer by layer, those small operations took about as long
as the passes over the scores at notebook sizes. The sync-free path's counterpart
is :mod:`poslens.capture.deferred_sums`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from einops import einsum, rearrange

from poslens.capture.batch_groups import BatchGroups
from poslens.capture.capture_plan import CapturePlan
from poslens.capture.cell_folding import cell_parts
from poslens.capture.probe_sums import add_probe_on_host
from poslens.fit.sums import CellSums

HELD_BYTES = 64 * 2**20
"""The most that the layers the host path holds between folds may take; beyond it they are folded at once."""


@dataclass
class HostLayer:
    """What the host path keeps of one layer's scores until it is added to the sums.

    Attributes:
        layer: The layer index.
        plan: The layer's plan.
        runs: The groups of the batch's sequences.
        pieces: ``log_z``, ``row_sum``, ``row_js``, ``row_sq`` [batch, H, T]; ``features`` [batch, H, T, F];
            ``logit_cells`` [runs, H, C, B]; ``key0_logits`` [runs, H, T]; ``offset_sums`` [runs, 2, H, T]
            (:func:`~poslens.capture.cell_folding.cell_parts` names them).

    Example:
        >>> from poslens.fit.binning import Binning
        >>> held = HostLayer(0, CapturePlan.build(Binning(8), None), BatchGroups.of([0]), {"log_z": torch.zeros(1, 1, 8, dtype=torch.float64)})
        >>> held.nbytes
        64
    """

    layer: int
    plan: CapturePlan
    runs: BatchGroups
    pieces: dict[str, torch.Tensor]

    @property
    def nbytes(self) -> int:
        """Bytes of the held pieces.

        Example:
            >>> # see the class example
        """
        return sum(x.numel() * x.element_size() for x in self.pieces.values())


def add_layers_on_host(sums: CellSums, layers: list[HostLayer], probe: bool) -> None:
    """Add held layers of one batch (the same runs, each layer once) to the sums of each run's group.

    The layers of one plan are stacked and folded together (:func:`~poslens.capture.cell_folding.cell_parts`
    with a layer axis), copied to the host in one transfer and added to their layers' slices.

    Args:
        sums: The sums to add to.
        layers: The held layers, all from the same batch (the same ``runs``), no layer twice.
        probe: Whether to add the probe's sums too.

    Raises:
        ValueError: When the layers come from batches of different groups, or hold a layer twice.

    Example:
        >>> from types import SimpleNamespace
        >>> from poslens.capture.cell_sum_capture import CellSumCapture
        >>> from poslens.fit.binning import Binning
        >>> capture = CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2)
        >>> scores = torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min)
        >>> capture.reduce(0, scores)   # held until the sums are read, or flush()
        >>> capture.sums.row_features[0, 0, 0].round(3).tolist()   # key-0 mass of uniform attention: 1/(i+1)
        [1.0, 0.5, 0.333, 0.25, 0.2, 0.167, 0.143, 0.125]
    """
    if not layers:
        return
    runs = layers[0].runs
    if any(held.runs != runs for held in layers) or len({held.layer for held in layers}) < len(layers):
        raise ValueError("held layers of one fold must come from one batch, each layer once")
    by_plan: dict[int, list[HostLayer]] = {}
    for held in layers:
        by_plan.setdefault(id(held.plan), []).append(held)
    for same_plan in by_plan.values():
        _add_same_plan(sums, runs, same_plan, probe)


def _add_same_plan(sums: CellSums, runs: BatchGroups, layers: list[HostLayer], probe: bool) -> None:
    """:func:`add_layers_on_host` for layers that share a plan: one fold, one transfer, one add per field and run."""
    a, plan = sums.per_group, layers[0].plan
    index = [held.layer for held in layers]
    at: slice | np.ndarray = slice(index[0], index[-1] + 1) if index == list(range(index[0], index[-1] + 1)) else np.asarray(index)
    stacked = {name: torch.stack([held.pieces[name] for held in layers], dim=1) for name in layers[0].pieces}  # [batch or runs, L', ...]
    parts = cell_parts(plan, runs, *(stacked[name] for name in ("log_z", "row_sum", "row_js", "row_sq", "logit_cells", "key0_logits", "offset_sums")))
    parts["features"] = rearrange(stacked["features"], "batch layer head seq feature -> batch layer seq head feature")  # folded on the host
    # one device-to-host copy: on a GPU each copy waits for the queue to drain
    flat = torch.cat([part.reshape(-1) for part in parts.values()]).cpu()
    pieces = {name: piece.view(parts[name].shape) for name, piece in zip(parts, flat.split([part.numel() for part in parts.values()]), strict=True)}
    features = pieces.pop("features")
    per_row = runs.sum(features)  # [runs, L', T, H, F]
    for k, (g, first, end) in enumerate(runs.runs):
        for name, piece in pieces.items():
            getattr(a, name)[g, at] += piece[k].numpy()
        a.features[g, at] += einsum(plan.query_fold, per_row[k], "qbin seq, layer seq head feature -> layer head feature qbin").numpy()
        sums.row_features[at] += rearrange(per_row[k], "layer seq head feature -> layer head feature seq").numpy()
        if probe:
            add_probe_on_host(a, g, at, features[first:end], plan)
