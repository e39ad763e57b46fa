"""L(log a) with its numerator and denominator apart, and the key-0 mass by query bin, from cell sums (methodology §12.4).

L(log a) = ‖P(log a)‖² / SST(log a) is a ratio: an edit can raise it by moving
less variance (SST down, ‖P‖² flat) as well as by adding position signal
(‖P‖² up). :func:`pattern_variance` returns the three per head, the two parts
per pair (divided by the number of pairs) so that runs of the same corpus
compare directly. :func:`key0_mass_by_bin` reads a_i0 per query bin from the
row features the capture keeps. Nothing here needs the counterfactual.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from poslens.fit.binning import Binning
from poslens.fit.stats import residual_grams, total_sum_of_squares
from poslens.fit.sums import FEATURES, QUERY_WINDOWS, SumFields

__all__ = ["VARIANCE_PARTS", "key0_mass_by_bin", "pattern_variance"]

#: The figures of :func:`pattern_variance`: L(log a), ‖P(log a)‖² per pair and SST(log a) per pair.
VARIANCE_PARTS = ("leakage_pattern", "leakage_pattern_numerator", "leakage_pattern_sst")


def pattern_variance(p: SumFields, binning: Binning) -> dict[str, Float[np.ndarray, "query_windows layers heads"]]:
    """L(log a), ‖P(log a)‖² per pair and SST(log a) per pair of every head, [query_window, layer, head].

    L is computed as the measurement computes ``leakage_pattern`` (the additive
    model of methodology §3.1 on log a = s − log Z), so it equals that figure.

    Args:
        p: Pooled sums of one replicate (no group axis).
        binning: The query and offset bins of the measurement.

    Returns:
        ``{name: [query_window, layer, head]}`` for the names of :data:`VARIANCE_PARTS` (NaN where a window is empty).

    Example:
        >>> from poslens.fit.sums import CellSums
        >>> parts = pattern_variance(sums.pooled(), sums.binning)  # doctest: +SKIP
        >>> bool(np.allclose(parts["leakage_pattern"], parts["leakage_pattern_numerator"] / parts["leakage_pattern_sst"]))  # doctest: +SKIP
        True
        >>> pattern_variance(CellSums.zeros(2, 1, 1, Binning(8)).pooled(), Binning(8))["leakage_pattern"].shape
        (2, 1, 1)
    """
    n_layers, n_heads = p.logit.shape[:2]
    out = {name: np.full((len(QUERY_WINDOWS), n_layers, n_heads), np.nan) for name in VARIANCE_PARTS}
    for w, query_window in enumerate(QUERY_WINDOWS):
        mask = binning.query_windows[query_window]
        for layer in range(n_layers):
            counts = p.pair_count[layer][mask]
            total = counts.sum()
            if total == 0:
                continue
            y_s, y_z = p.logit[layer][:, mask], p.log_partition[layer][:, mask]
            s2 = p.logit_sq[layer][:, mask].sum(-1)
            z2 = p.log_partition_sq[layer][:, mask].sum(-1)
            sz = p.logit_x_log_partition[layer][:, mask].sum(-1)
            sst = total_sum_of_squares(s2 - 2 * sz + z2, (y_s - y_z).sum((-2, -1)), total)
            numerator = residual_grams((y_s - y_z)[:, None], counts).absolute[:, 0, 0]  # log a = s − log Z, cell by cell
            constant = sst <= 1e-12 * np.maximum(s2 - 2 * sz + z2, 1e-300)
            with np.errstate(divide="ignore", invalid="ignore"):
                out["leakage_pattern"][w, layer] = np.where(constant, np.nan, numerator / sst)
            out["leakage_pattern_numerator"][w, layer] = numerator / total
            out["leakage_pattern_sst"][w, layer] = sst / total
    return out


def key0_mass_by_bin(p: SumFields) -> Float[np.ndarray, "layers heads qbins"]:
    """Mean a_i0 over the query rows of each query bin, per head, [layer, head, query bin] (NaN for an empty bin).

    Args:
        p: Pooled sums of one replicate (no group axis).

    Returns:
        The mean key-0 mass per query bin.

    Example:
        >>> from poslens.fit.sums import CellSums
        >>> key0_mass_by_bin(CellSums.zeros(2, 3, 4, Binning(8)).pooled()).shape
        (3, 4, 8)
    """
    rows = p.query_row_count  # [C]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rows > 0, p.features[:, :, FEATURES.index("key0_mass"), :] / rows, np.nan)
