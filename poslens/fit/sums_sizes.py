"""The bytes the sums and the counterfactual replay hold, from the sizes alone: what the memory estimate counts.

:func:`sums_bytes` counts every float64 array a :class:`~poslens.fit.sums.CellSums`
holds (:func:`~poslens.fit.sums.array_shapes`, the counterfactual cells, the row
features); :func:`counterfactual_bytes` what the replay holds beside them.
Neither allocates anything (:mod:`poslens.runtime.estimate` adds them up).
"""

from __future__ import annotations

import numpy as np

from poslens.fit.binning import Binning
from poslens.fit.sums import FEATURES, QUERY_WINDOWS, array_shapes


def sums_bytes(groups: int, layers: int, heads: int, binning: Binning) -> int:
    """Bytes that :meth:`~poslens.fit.sums.CellSums.zeros` allocates for these sizes (its counterfactual cells included), without allocating them.

    The accumulators live for the whole capture run; at the default 8 groups
    they are tens of MiB for a 30-layer model (see :mod:`poslens.runtime.estimate`).

    Args:
        groups: Number of groups G.
        layers: Number of layers L.
        heads: Number of heads H per layer.
        binning: The query and offset bins.

    Returns:
        The bytes of every float64 array a :class:`~poslens.fit.sums.CellSums` of these sizes holds.

    Example:
        >>> from poslens.fit.sums import CellSums
        >>> s = CellSums.zeros(groups=2, layers=3, heads=4, binning=Binning(32))
        >>> held = [*s.per_group.as_dict().values(), *s.counterfactual_cells.saved_arrays().values(), s.row_features, s.row_count, s.group_sizes]
        >>> sums_bytes(2, 3, 4, Binning(32)) == sum(a.nbytes for a in held)
        True
    """
    elements = sum(int(np.prod(shape)) for shape in array_shapes(groups, layers, heads, binning).values())
    elements += 2 * len(QUERY_WINDOWS) * groups * layers * heads * binning.n_query_bins * binning.n_offset_bins  # counterfactual cells
    elements += layers * heads * len(FEATURES) * binning.seq_len + binning.seq_len + groups  # row_features, row_count, group_sizes
    return 8 * elements


def counterfactual_bytes(groups: int, layers: int, heads: int, binning: Binning) -> int:
    """Bytes the counterfactual replay holds besides the sums: per query window, the cross-fitted absolute components A
    (per group, per variant of the current group, and as exp(−A) weights, each [G, L, H, C·B]),
    and Σ log Z' per group, variant, layer, head and row.

    Args:
        groups: Number of groups G.
        layers: Number of layers L.
        heads: Number of heads H per layer.
        binning: The query and offset bins.

    Returns:
        The bytes of the replay's absolute-component and log-partition arrays.

    Example:
        >>> counterfactual_bytes(2, 3, 4, Binning(32)) > 0
        True
    """
    cells = binning.n_query_bins * binning.n_offset_bins
    rows = binning.seq_len + min(binning.early, binning.seq_len)
    return 8 * (len(QUERY_WINDOWS) * 3 * groups * layers * heads * cells + groups * groups * layers * heads * rows)
