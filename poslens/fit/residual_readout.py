"""Position in the residual stream, from streamed sums: a held-out ridge probe of log(i + 1), and η² by exact position.

Methodology §12.4 reads an edit's effect where later layers read it: in the
residual stream entering each block (``hook_resid_pre``) and in the output of
each block's attention (``hook_attn_out``), the *sites*. Per site, layer and
group of sequences the capture (:mod:`poslens.capture.residual_capture`) keeps,
over the query rows 1 ≤ i < T with x the site's vector at row i and
y = log(i + 1):

- Σ x̃ x̃ᵀ and Σ x̃ y with x̃ = [1, x], Σ y, Σ y² and the row count (the probe);
- Σ x per exact position, the rows per position and Σ ‖x‖² (η²).

**Probe R².** Fold g fits a ridge regression of y on the standardized x of
the other groups (penalty λ times each feature's variance, :data:`PROBE_PENALTY`)
and scores it on group g: SSE_g and SST_g (about group g's mean). The pooled
R² is 1 − Σ SSE / Σ SST, the fold R² 1 − SSE_g / SST_g. Everything is exact
arithmetic on the sums, so the probe of a run of N sequences costs nothing
per sequence once the sums are kept.

**η².** The share of the variance of x (summed over its dimensions) that the
exact position explains: Σ_i n_i ‖m_i − m‖² / Σ ‖x − m‖², with m_i the mean of
x at position i and m the overall mean. In-sample, so its replicates are the
leave-one-group-out ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

__all__ = ["PROBE_PENALTY", "SITES", "ResidualSums", "eta_squared", "probe_r2", "ridge_weights"]

#: The readout sites: ``resid``, the residual stream entering each block (``hook_resid_pre``), and ``attn_out``,
#: each block's attention output (``hook_attn_out``).
SITES = ("resid", "attn_out")

#: The ridge penalty of the residual probe, relative to each feature's variance (ridge on standardized features).
#: Fixed before any edit was measured, from the unedited SmolLM2 on a corpus no claim reads (16 × 128 tokens of
#: ``docs``, seed 99): of 1e-3, 1e-2, 0.1, 1 and 10, the value whose held-out residual-stream R² over layers ≥ 2 was
#: highest there (0.65; ``benchmarks/probe_penalty.py`` reruns that choice).
PROBE_PENALTY = 0.1


@dataclass
class ResidualSums:
    """The sums of the residual readouts, per site, group and layer (see the module docstring).

    Attributes:
        gram: Σ x̃ x̃ᵀ, x̃ = [1, x], [S, G, L, D + 1, D + 1].
        design_x_target: Σ x̃ y, [S, G, L, D + 1].
        target: Σ y, [G].
        target_sq: Σ y², [G].
        rows: Number of rows, [G].
        position_sum: Σ x at each exact position, [S, G, L, T, D] (positions 0 and those without rows hold 0).
        position_rows: Rows at each exact position, [G, T].
        square_total: Σ ‖x‖², [S, G, L].

    Example:
        >>> sums = ResidualSums.zeros(groups=2, layers=3, width=4, seq_len=8)
        >>> sums.gram.shape, sums.position_sum.shape
        ((2, 2, 3, 5, 5), (2, 2, 3, 8, 4))
    """

    gram: Float[np.ndarray, "sites groups layers design design"]
    design_x_target: Float[np.ndarray, "sites groups layers design"]
    target: Float[np.ndarray, " groups"]
    target_sq: Float[np.ndarray, " groups"]
    rows: Float[np.ndarray, " groups"]
    position_sum: Float[np.ndarray, "sites groups layers seq width"]
    position_rows: Float[np.ndarray, "groups seq"]
    square_total: Float[np.ndarray, "sites groups layers"]

    @classmethod
    def zeros(cls, groups: int, layers: int, width: int, seq_len: int) -> ResidualSums:
        """Empty sums for ``groups`` groups, ``layers`` layers, vectors of ``width`` and sequences of ``seq_len``.

        Args:
            groups: Number of groups G.
            layers: Number of layers L.
            width: Dimension D of the read vectors.
            seq_len: Sequence length T.

        Returns:
            The sums, all zero.

        Example:
            >>> ResidualSums.zeros(2, 1, 3, 4).rows.tolist()
            [0.0, 0.0]
        """
        s = len(SITES)
        return cls(
            gram=np.zeros((s, groups, layers, width + 1, width + 1)),
            design_x_target=np.zeros((s, groups, layers, width + 1)),
            target=np.zeros(groups),
            target_sq=np.zeros(groups),
            rows=np.zeros(groups),
            position_sum=np.zeros((s, groups, layers, seq_len, width)),
            position_rows=np.zeros((groups, seq_len)),
            square_total=np.zeros((s, groups, layers)),
        )

    @property
    def n_groups(self) -> int:
        """Number of groups G.

        Example:
            >>> ResidualSums.zeros(3, 1, 2, 4).n_groups
            3
        """
        return int(self.rows.shape[0])


def ridge_weights(
    gram: Float[np.ndarray, "design design"], design_x_target: Float[np.ndarray, " design"], target: float, rows: float | int, penalty: float
) -> Float[np.ndarray, " design"]:
    """Ridge regression on standardized features from sums; θ = [intercept, weights] on the original scale.

    The same estimator as :func:`poslens.fit.stats.ridge_fit` (penalty × each
    feature's variance on the diagonal; features with no variance get weight 0),
    solved by Cholesky for the residual stream's hundreds of features.

    Args:
        gram: Σ x̃ x̃ᵀ over the training rows.
        design_x_target: Σ x̃ y over the training rows.
        target: Σ y over the training rows.
        rows: Number of training rows.
        penalty: λ, relative to each feature's variance (> 0).

    Returns:
        θ = [intercept, weights].

    Example:
        >>> x = np.c_[np.ones(5), [0., 1., 2., 3., 4.], [1., 1., 1., 1., 1.]]; y = 1 + 2 * x[:, 1]
        >>> np.round(ridge_weights(x.T @ x, x.T @ y, y.sum(), 5, penalty=1e-9), 6).tolist()   # the constant column: weight 0
        [1.0, 2.0, 0.0]
    """
    mean_x = gram[0, 1:] / rows
    mean_y = target / rows
    cov = gram[1:, 1:] / rows - np.outer(mean_x, mean_x)
    cross = design_x_target[1:] / rows - mean_x * mean_y
    variance = np.diag(cov).copy()
    used = variance > 1e-12 * max(float(variance.max(initial=0.0)), 1e-300)
    weights = np.zeros(len(variance))
    if used.any():
        sub = cov[np.ix_(used, used)]
        reg = sub + penalty * np.diag(variance[used])
        try:
            factor = np.linalg.cholesky(reg)
            weights[used] = np.linalg.solve(factor.T, np.linalg.solve(factor, cross[used]))
        except np.linalg.LinAlgError:
            weights[used] = np.linalg.lstsq(reg, cross[used], rcond=None)[0]
    return np.concatenate([[mean_y - mean_x @ weights], weights])


def probe_r2(
    sums: ResidualSums, penalty: float = PROBE_PENALTY
) -> tuple[
    Float[np.ndarray, "sites layers"],
    Float[np.ndarray, "groups sites layers"],
    Float[np.ndarray, "groups sites layers"],
    Float[np.ndarray, " groups"],
]:
    """Held-out R² of the ridge probe of log(i + 1), per site and layer: pooled, per fold, and the folds' SSE and SST.

    Args:
        sums: The readout sums (at least 2 groups).
        penalty: λ of :func:`ridge_weights`.

    Returns:
        ``(pooled, per_fold, sse, sst)``: pooled R² [S, L] = 1 − Σ_g SSE / Σ_g SST, fold R² [G, S, L],
        SSE [G, S, L] and SST [G] (the same at every site and layer: the targets are the rows' positions).

    Example:
        >>> pooled, folds, sse, sst = probe_r2(ResidualSums.zeros(2, 1, 2, 4))   # no rows: nothing to fit
        >>> pooled.shape, folds.shape
        ((2, 1), (2, 2, 1))
    """
    n_sites, n_groups, n_layers = sums.gram.shape[:3]
    sse = np.full((n_groups, n_sites, n_layers), np.nan)
    sst = np.full(n_groups, np.nan)
    total_gram, total_xy = sums.gram.sum(1), sums.design_x_target.sum(1)
    for g in range(n_groups):
        train_rows = sums.rows.sum() - sums.rows[g]
        if sums.rows[g] < 2 or train_rows < 2:
            continue
        train_target = sums.target.sum() - sums.target[g]
        sst[g] = sums.target_sq[g] - sums.target[g] ** 2 / sums.rows[g]
        for s in range(n_sites):
            for layer in range(n_layers):
                theta = ridge_weights(
                    total_gram[s, layer] - sums.gram[s, g, layer],
                    total_xy[s, layer] - sums.design_x_target[s, g, layer],
                    train_target,
                    train_rows,
                    penalty,
                )
                gram, xy = sums.gram[s, g, layer], sums.design_x_target[s, g, layer]
                sse[g, s, layer] = sums.target_sq[g] - 2 * theta @ xy + theta @ gram @ theta
    with np.errstate(divide="ignore", invalid="ignore"):
        per_fold = 1 - sse / sst[:, None, None]
        pooled = 1 - np.nansum(sse, 0) / np.nansum(sst)
    return pooled, per_fold, sse, sst


def _eta_squared(position_sum: np.ndarray, position_rows: np.ndarray, square_total: np.ndarray) -> np.ndarray:
    """η² from sums already added over groups: position_sum [S, L, T, D], position_rows [T], square_total [S, L]."""
    n = position_rows.sum()
    grand = position_sum.sum(-2)  # [S, L, D]
    with np.errstate(divide="ignore", invalid="ignore"):  # no rows: NaN
        correction = (grand**2).sum(-1) / n
        between = ((position_sum**2).sum(-1) / np.where(position_rows > 0, position_rows, np.inf)).sum(-1) - correction
        return between / (square_total - correction)


def eta_squared(sums: ResidualSums) -> tuple[Float[np.ndarray, "sites layers"], Float[np.ndarray, "groups sites layers"]]:
    """η² of each site and layer by exact position: on all groups, and with each group left out.

    Args:
        sums: The readout sums.

    Returns:
        ``(pooled, replicates)``: [S, L] and [G, S, L].

    Example:
        >>> sums = ResidualSums.zeros(2, 1, 1, 3)
        >>> sums.position_sum[:, :, 0, 1:, 0] = [[1.0, 3.0], [1.0, 3.0]]   # x = 1 at position 1, 3 at position 2
        >>> sums.position_rows[:, 1:] = 1.0; sums.square_total[:] = 10.0
        >>> float(eta_squared(sums)[0][0, 0])   # position explains all the variance
        1.0
    """
    total_sum, total_rows, total_sq = sums.position_sum.sum(1), sums.position_rows.sum(0), sums.square_total.sum(1)
    pooled = _eta_squared(total_sum, total_rows, total_sq)
    replicates = np.stack(
        [
            _eta_squared(total_sum - sums.position_sum[:, g], total_rows - sums.position_rows[g], total_sq - sums.square_total[:, g])
            for g in range(sums.n_groups)
        ]
    )
    return pooled, replicates
