"""The host path's end of a layer: its pieces copied to the host in one transfer, folded into query bins and added to the sums.

On the host path (:class:`poslens.capture.cell_sum_capture.CellSumCapture` without
``sync_free``, the CPU default) each layer's pieces reach the sums here, right after
:meth:`~poslens.capture.cell_sum_capture.CellSumCapture.reduce` has checked them; the
sync-free path's counterpart is :mod:`poslens.capture.deferred_sums`.
"""

from __future__ import annotations

import torch
from einops import einsum, rearrange
from jaxtyping import Float

from poslens.capture.batch_groups import BatchGroups
from poslens.capture.capture_plan import CapturePlan
from poslens.capture.probe_sums import add_probe_on_host
from poslens.fit.sums import CellSums


def add_layer_on_host(
    sums: CellSums,
    runs: BatchGroups,
    layer: int,
    plan: CapturePlan,
    parts: dict[str, torch.Tensor],
    features: Float[torch.Tensor, "batch heads seq features"],
    probe: bool,
) -> None:
    """Add one layer's pieces, folded into query bins, to the sums of each run's group, with one device-to-host copy.

    Args:
        sums: The sums to add to.
        runs: The groups of the batch's sequences; the pieces have one entry per run.
        layer: The layer.
        plan: The layer's plan (its query-bin fold, and the query windows' rows for the probe).
        parts: The layer's cell and row pieces by field name, one entry per run
            (:func:`~poslens.capture.cell_folding.cell_parts`); gains ``"features"``.
        features: The row features of the batch, [batch, head, T, F].
        probe: Whether to add the probe's sums too.

    Example:
        >>> from types import SimpleNamespace
        >>> from poslens.capture.cell_sum_capture import CellSumCapture
        >>> from poslens.fit.binning import Binning
        >>> capture = CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2, sync_free=False)
        >>> scores = torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min)
        >>> capture.reduce(0, scores)   # the host path ends in add_layer_on_host: the sums hold the layer at once
        >>> capture.sums.row_features[0, 0, 0].round(3).tolist()   # key-0 mass of uniform attention: 1/(i+1)
        [1.0, 0.5, 0.333, 0.25, 0.2, 0.167, 0.143, 0.125]
    """
    a = sums.per_group
    parts["features"] = rearrange(features, "batch head seq feature -> batch seq head feature")  # folded on the host
    # one device-to-host copy per layer: on a GPU each copy waits for the queue to drain
    flat = torch.cat([part.reshape(-1) for part in parts.values()]).cpu()
    pieces = dict(zip(parts, flat.split([part.numel() for part in parts.values()]), strict=False))
    features = pieces["features"].view(parts["features"].shape)
    for k, (g, first, end) in enumerate(runs.runs):
        for name, part in parts.items():
            if name != "features":
                getattr(a, name)[g, layer] += pieces[name].view(part.shape)[k].numpy()
        per_row = features[first:end].sum(0)  # [T, H, F]
        a.features[g, layer] += einsum(plan.query_fold, per_row, "qbin seq, seq head feature -> head feature qbin").numpy()
        sums.row_features[layer] += rearrange(per_row, "seq head feature -> head feature seq").numpy()
        if probe:
            add_probe_on_host(a, g, layer, features[first:end], plan)
