"""Nested least squares on cell sums: binned and linear ΔR², held-out ΔR², probes, intervals, depth slopes.

All fits take *pooled* sums (:class:`poslens.fit.sums.SumFields` without the group axis, from
:class:`poslens.fit.sums.CellSums`) and one layer's cells inside a query window.
Both regression models of methodology §3.1 predict a constant per cell
(query bin c, offset bin b), so with cell counts n_cb and cell sums Y_cb:

- model R (relative) fits the offset-bin means  f_R(c, b) = Y_·b / n_·b;
- model F (additive) is the weighted least-squares fit of α_b + β_c to the
  cell means, weights n_cb;
- the saturated model fits the cell means f_S = Y_cb / n_cb.

P(y) = f_F − f_R, and ‖P(y)‖² = Σ n_cb P_cb² = SSR_R − SSR_F, so
L(y) = ‖P(y)‖² / SST(y) needs only Σy² over the query window for SST.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool, Float
from scipy import stats as scipy_stats

from poslens.compiled import compiled_loops, fused_available


@dataclass
class Projection:
    """Fitted cell values of models R, F and saturated for one layer and query window.

    Arrays are [..., K] over the K non-empty cells; ``counts`` is [K].

    Attributes:
        counts: Number of pairs in each non-empty cell, [K].
        relative: Fitted values f_R of model R (offset bins only), [..., K].
        additive: Fitted values f_F of model F (offset plus query bins), [..., K].
        saturated: Cell means (the saturated model), [..., K].
        absolute: P(y) = f_F − f_R per cell, [..., K]. :func:`project` forms it from the saturated residual, which
            keeps more digits than the difference of the two fits; when not given, it is that difference.

    Example:
        >>> p = project(np.array([[2.0, 3.0], [1.0, 4.0]]), np.array([[2.0, 1.0], [1.0, 2.0]]))
        >>> p.counts.tolist(), p.saturated.tolist()   # cells in row-major order, saturated = cell means
        ([2.0, 1.0, 1.0, 2.0], [1.0, 3.0, 1.0, 2.0])
        >>> np.round(p.absolute, 3).tolist(), np.round(p.additive, 3).tolist()
        ([0.167, 0.333, -0.333, -0.167], [1.167, 2.667, 0.667, 2.167])
    """

    counts: Float[np.ndarray, " cells"]
    relative: Float[np.ndarray, "*batch cells"]
    additive: Float[np.ndarray, "*batch cells"]
    saturated: Float[np.ndarray, "*batch cells"]
    absolute: Float[np.ndarray, "*batch cells"] = None  # type: ignore[assignment]  # set in __post_init__ when not given

    def __post_init__(self) -> None:
        if self.absolute is None:
            self.absolute = self.additive - self.relative


def design(counts: Float[np.ndarray, "qbins obins"]) -> tuple[Bool[np.ndarray, "qbins obins"], Float[np.ndarray, "cells params"]]:
    """One-hot design of model F over the non-empty cells of a [C, B] count table.

    Returns (cell mask [C, B], design [K, B + C − 1]); offset-bin columns
    first, then query bins but the first (identifiability).

    Args:
        counts: Number of pairs in each cell, [C, B].

    Returns:
        ``(mask, design)``: the non-empty cells [C, B] and model F's design over them [K, B + C − 1].

    Example:
        >>> mask, a = design(np.array([[1.0, 0.0], [2.0, 3.0]]))
        >>> a.tolist()
        [[1.0, 0.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
    """
    mask = counts > 0
    c_idx, b_idx = np.nonzero(mask)
    n_c, n_b = counts.shape
    a = np.zeros((len(c_idx), n_b + n_c - 1))
    a[np.arange(len(c_idx)), b_idx] = 1.0
    has_q = c_idx > 0
    a[np.arange(len(c_idx))[has_q], n_b + c_idx[has_q] - 1] = 1.0
    return mask, a


def project(sums: Float[np.ndarray, "*batch qbins obins"], counts: Float[np.ndarray, "qbins obins"]) -> Projection:
    """Fit models R, F and saturated to cell sums ``sums`` [..., C, B] with counts [C, B].

    Args:
        sums: Cell sums of the response, [..., C, B].
        counts: Number of pairs in each cell, [C, B].

    Returns:
        The fitted values of the three models over the non-empty cells.

    Example:
        >>> counts = np.array([[2.0, 1.0], [1.0, 2.0]])
        >>> y = np.array([[2.0, 3.0], [1.0, 4.0]])   # cell means 1, 3 / 1, 2
        >>> p = project(y, counts)
        >>> np.round(p.relative, 3).tolist()
        [1.0, 2.333, 1.0, 2.333]
    """
    mask, a = design(counts)
    n = counts[mask]
    y = sums[..., mask]  # [..., K]
    _, b_idx = np.nonzero(mask)
    offset_onehot = a[:, : counts.shape[1]]  # [K, B]
    bin_sum = y @ offset_onehot
    bin_n = n @ offset_onehot
    relative = bin_sum[..., b_idx] / bin_n[b_idx]
    saturated = y / n
    a = a[:, a.any(axis=0)]  # bins with no cell in this query window carry no parameter
    # P(y) as the projection of the saturated residual ȳ − f_R on model F's columns (as residual_grams forms it),
    # not as f_F − f_R: the offset-bin means would otherwise enter a difference and cost digits
    rhs = ((saturated - relative) * n) @ a  # [..., p]
    absolute = (rhs @ _gram_inverse(a, n)) @ a.T
    return Projection(counts=n, relative=relative, additive=relative + absolute, saturated=saturated, absolute=absolute)


@dataclass
class ResidualGrams:
    """Weighted inner products between several responses' absolute components and saturated residuals.

    For responses y_1 … y_F over the same cells (cell means ȳ, counts n), with f_R, f_F
    the fits of models R and F (:func:`project`):

    - ``absolute[..., u, v]`` = ⟨P(y_u), P(y_v)⟩ = Σ_k n_k P_k(y_u) P_k(y_v), P = f_F − f_R;
    - ``saturated[..., u, v]`` = ⟨ȳ_u − f_R(y_u), ȳ_v − f_R(y_v)⟩, the same for the saturated model's gain.

    Every share and ΔR² numerator of a head is one of these entries or a ratio of two.

    Attributes:
        absolute: [..., F, F].
        saturated: [..., F, F].

    Example:
        >>> counts = np.array([[2.0, 1.0], [1.0, 2.0]])
        >>> grams = residual_grams(np.array([[[2.0, 3.0], [1.0, 4.0]]]), counts)   # one response
        >>> p = project(np.array([[2.0, 3.0], [1.0, 4.0]]), counts)
        >>> bool(np.isclose(grams.absolute[0, 0], weighted_inner(p.absolute, p.absolute, p.counts)))
        True
    """

    absolute: Float[np.ndarray, "*batch fields fields"]
    saturated: Float[np.ndarray, "*batch fields fields"]


def residual_grams(sums: Float[np.ndarray, "*batch fields qbins obins"], counts: Float[np.ndarray, "qbins obins"]) -> ResidualGrams:
    """The inner products of :class:`ResidualGrams` for the F responses of ``sums`` [..., F, C, B], counts [C, B].

    The same quantities as :func:`project` followed by :func:`weighted_inner` of its fitted values, without forming
    f_F over the cells: with r = ȳ − f_R(y) (the saturated residual, orthogonal to every offset bin), P(y) is the
    projection of r on model F's columns A, so ⟨P(y_u), P(y_v)⟩ = c_uᵀ Aᵀ diag(n) r_v with c_u = (Aᵀ diag(n) A)⁻¹ Aᵀ diag(n) r_u.
    Working from r rather than ȳ keeps the large offset-bin means out of the products, so nothing cancels.

    Args:
        sums: Cell sums of F responses, [..., F, C, B].
        counts: Number of pairs in each cell, [C, B].

    Returns:
        The [..., F, F] inner products.

    Example:
        >>> counts = np.array([[2.0, 1.0], [1.0, 2.0]])
        >>> y = np.array([[2.0, 3.0], [1.0, 4.0]])
        >>> grams = residual_grams(np.stack([y, 2 * y]), counts)
        >>> np.round(grams.absolute, 4).tolist()   # ‖P(y)‖² = 1/3 (see Projection.absolute); the second response is 2y
        [[0.3333, 0.6667], [0.6667, 1.3333]]
    """
    mask, a = design(counts)
    n = counts[mask]
    if fused_available() and sums.ndim >= 3 and sums.size:
        return _residual_grams_compiled(sums, counts, mask, a)
    y = sums[..., mask]  # [..., F, K] over the K cells that hold pairs
    _, b_idx = np.nonzero(mask)
    offset_onehot = a[:, : counts.shape[1]]  # [K, B]
    bin_n = n @ offset_onehot
    bin_mean = (y @ offset_onehot) / np.where(bin_n > 0, bin_n, 1.0)  # f_R per offset bin; a bin with no cell has none
    residual = y / n
    residual -= bin_mean[..., b_idx]  # ȳ − f_R
    weighted = residual * n
    saturated = weighted @ np.swapaxes(residual, -1, -2)
    a = a[:, a.any(axis=0)]  # bins with no cell in this query window carry no parameter
    # Aᵀ diag(n) r: its offset-bin entries are 0 but for rounding, which the projection takes out
    rhs = weighted @ a  # [..., F, p]
    absolute = (rhs @ _gram_inverse(a, n)) @ np.swapaxes(rhs, -1, -2)
    return ResidualGrams(absolute=absolute, saturated=saturated)


def _residual_grams_compiled(
    sums: Float[np.ndarray, "*batch fields qbins obins"],
    counts: Float[np.ndarray, "qbins obins"],
    mask: Bool[np.ndarray, "qbins obins"],
    a: Float[np.ndarray, "cells params"],
) -> ResidualGrams:
    """:func:`residual_grams` by the compiled loop (:func:`poslens.compiled_loops.residual_gram_rows`): the same
    quantities in the same float64 arithmetic, summed in another order, one head per task on every core."""
    n_c, n_b = counts.shape
    c_idx, b_idx = np.nonzero(mask)
    n = counts[mask]
    used = a.any(axis=0)  # the columns of A kept (as residual_grams keeps them), and where each old one went
    column_of = np.where(used, np.cumsum(used) - 1, -1)
    query_column = np.where(c_idx > 0, column_of[n_b + np.maximum(c_idx, 1) - 1], -1)
    bin_n = np.bincount(b_idx, weights=n, minlength=n_b)
    fields = sums.shape[-3]
    flat = np.ascontiguousarray(sums.reshape(-1, fields, n_c * n_b), dtype=np.float64)
    absolute, saturated = np.empty((flat.shape[0], fields, fields)), np.empty((flat.shape[0], fields, fields))
    compiled_loops(os.cpu_count() or 1).residual_gram_rows(
        flat, (c_idx * n_b + b_idx).astype(np.int64), n, b_idx.astype(np.int64), column_of[:n_b].astype(np.int64),
        query_column.astype(np.int64), 1.0 / np.where(bin_n > 0, bin_n, 1.0), _gram_inverse(a[:, used], n), absolute, saturated,
    )  # fmt: skip
    shape = (*sums.shape[:-3], fields, fields)
    return ResidualGrams(absolute=absolute.reshape(shape), saturated=saturated.reshape(shape))


def _gram_inverse(a: Float[np.ndarray, "cells params"], n: Float[np.ndarray, " cells"]) -> Float[np.ndarray, "params params"]:
    """(Aᵀ diag(n) A)⁻¹, cached: counts differ between layers, query windows and jackknife
    replicates only through the query window and a common scale, so few distinct ones occur."""
    scale = n.sum()
    key = (a.shape, a.tobytes(), (n / scale).round(12).tobytes())
    inverse = _GRAM_CACHE.get(key)
    if inverse is None:
        gram = a.T @ (a * (n / scale)[:, None])
        try:
            inverse = np.linalg.inv(gram)
        except np.linalg.LinAlgError:
            inverse = np.linalg.pinv(gram, hermitian=True)
        if len(_GRAM_CACHE) > 256:
            _GRAM_CACHE.clear()
        _GRAM_CACHE[key] = inverse
    return inverse / scale


_GRAM_CACHE: dict[tuple, np.ndarray] = {}


def weighted_inner(
    x: Float[np.ndarray, "*batch cells"], y: Float[np.ndarray, "*batch cells"], counts: Float[np.ndarray, " cells"]
) -> Float[np.ndarray, "*batch"] | float:
    """⟨x, y⟩ = Σ_k n_k x_k y_k over cells.

    Args:
        x: Values per cell, [..., K].
        y: Values per cell, [..., K].
        counts: Weight n_k of each cell, [K].

    Returns:
        The weighted inner product, [...].

    Example:
        >>> float(weighted_inner(np.array([1.0, 2.0]), np.array([3.0, 1.0]), np.array([1.0, 2.0])))
        7.0
    """
    return (x * y * counts).sum(-1)


def total_sum_of_squares(
    sum_sq: Float[np.ndarray, "*batch"] | float, total: Float[np.ndarray, "*batch"] | float, count: int | float | Float[np.ndarray, "*batch"]
) -> Float[np.ndarray, "*batch"] | float:
    """SST = Σy² − (Σy)²/n.

    Args:
        sum_sq: Σy².
        total: Σy.
        count: n.

    Returns:
        SST, with the broadcast shape of the inputs.

    Example:
        >>> float(total_sum_of_squares(np.array(14.0), np.array(6.0), 3))
        2.0
    """
    return sum_sq - total**2 / count


def linear_r2_gain(
    m: dict[str, Float[np.ndarray, "*heads"] | float], sst: Float[np.ndarray, "*heads"] | float
) -> Float[np.ndarray, "*heads"] | float:
    """methodology §3.2: R² of y on [i−j, i, j] minus R² on [i−j], from moment sums.

    ``m`` holds n, i1, j1, ii, jj, ij (pairs) and y1, yi, yj (sums of y, y·i, y·j);
    i − j, i and j are collinear, so [i−j, i, j] spans the same space as [i−j, i].

    Args:
        m: The moment sums, by name.
        sst: Total sum of squares of y.

    Returns:
        The gain in R² of each head.

    Example:
        >>> i = np.array([1, 2, 2, 3, 3, 3.]); j = np.array([0, 0, 1, 0, 1, 2.]); y = np.log1p(i)
        >>> m = dict(n=6., i1=i.sum(), j1=j.sum(), ii=(i*i).sum(), jj=(j*j).sum(), ij=(i*j).sum(),
        ...          y1=y.sum(), yi=(y*i).sum(), yj=(y*j).sum())
        >>> sst = total_sum_of_squares((y*y).sum(), y.sum(), 6)
        >>> round(float(linear_r2_gain(m, sst)), 4)   # np.linalg.lstsq on [1, i−j, i] vs [1, i−j] gives the same
        0.7417
    """
    n = m["n"]
    mean_i, mean_j, mean_y = m["i1"] / n, m["j1"] / n, m["y1"] / n
    c_ii = m["ii"] - n * mean_i**2
    c_jj = m["jj"] - n * mean_j**2
    c_ij = m["ij"] - n * mean_i * mean_j
    c_iy = m["yi"] - n * mean_i * mean_y
    c_jy = m["yj"] - n * mean_j * mean_y
    # Δ = i − j
    c_dd = c_ii - 2 * c_ij + c_jj
    c_di = c_ii - c_ij
    c_dy = c_iy - c_jy
    # the gain of adding i to [Δ] is the added variable's: (c_iy − c_iΔ c_Δy / c_ΔΔ)² / (c_ii − c_iΔ² / c_ΔΔ),
    # the same number as the full model's explained sum of squares less the relative one's, without that difference
    with np.errstate(divide="ignore", invalid="ignore"):
        return (c_iy - c_di * c_dy / c_dd) ** 2 / (c_ii - c_di**2 / c_dd) / sst


def ridge_fit(
    xtx: Float[np.ndarray, "probe probe"], xty: Float[np.ndarray, " probe"], y1: float, n: int | float, penalty: float = 1e-3
) -> Float[np.ndarray, " probe"]:
    """Ridge regression on standardized features from sums; returns θ = [intercept, weights].

    ``xtx`` and ``xty`` are sums over rows of x̃ x̃ᵀ and x̃ y with x̃ = [1, x]. The
    penalty is ``penalty`` × each feature's variance (ridge on standardized
    features); constant features get weight 0.

    Args:
        xtx: Σ x̃ x̃ᵀ over the rows.
        xty: Σ x̃ y over the rows.
        y1: Σ y over the rows.
        n: Number of rows.
        penalty: Ridge penalty, relative to each feature's variance.

    Returns:
        θ = [intercept, weights] on the original feature scale.

    Example:
        >>> x = np.c_[np.ones(4), [0., 1., 2., 3.]]; y = 1 + 2 * x[:, 1]
        >>> np.round(ridge_fit(x.T @ x, x.T @ y, y.sum(), 4, penalty=0.0), 6).tolist()
        [1.0, 2.0]
    """
    return ridge_fits(xtx[None], xty[None], np.array([y1], dtype=np.float64), np.array([n], dtype=np.float64), penalty)[0]


def ridge_fits(
    xtx: Float[np.ndarray, "fits probe probe"],
    xty: Float[np.ndarray, "fits probe"],
    y1: Float[np.ndarray, " fits"],
    n: Float[np.ndarray, " fits"],
    penalty: float = 1e-3,
) -> Float[np.ndarray, "fits probe"]:
    """:func:`ridge_fit` of several problems at once: the same numbers, with one stacked pseudo-inverse.

    Each problem's system is formed as :func:`ridge_fit` forms it, and all of them are inverted by one
    call of ``np.linalg.pinv`` on the stack (the same LAPACK routine per matrix, so the same digits):
    a loop of small inversions costs far more than the inversions themselves where the BLAS library
    starts its threads for every call.

    Args:
        xtx: Σ x̃ x̃ᵀ over each problem's rows.
        xty: Σ x̃ y over each problem's rows.
        y1: Σ y of each problem.
        n: Rows of each problem.
        penalty: Ridge penalty, relative to each feature's variance.

    Returns:
        θ = [intercept, weights] of each problem.

    Example:
        >>> x = np.c_[np.ones(4), [0., 1., 2., 3.]]
        >>> ys = [1 + 2 * x[:, 1], 3 - x[:, 1]]
        >>> thetas = ridge_fits(np.stack([x.T @ x] * 2), np.stack([x.T @ y for y in ys]), np.array([y.sum() for y in ys]),
        ...                     np.array([4.0, 4.0]), penalty=0.0)
        >>> np.round(thetas, 6).tolist()
        [[1.0, 2.0], [3.0, -1.0]]
    """
    systems = []
    for k in range(len(xtx)):
        mean_x = xtx[k, 0, 1:] / n[k]
        mean_y = y1[k] / n[k]
        cov = xtx[k, 1:, 1:] / n[k] - np.outer(mean_x, mean_x)
        cross = xty[k, 1:] / n[k] - mean_x * mean_y
        systems.append((mean_x, mean_y, cross, cov + penalty * np.diag(np.diag(cov))))
    inverses = np.linalg.pinv(np.stack([reg for *_, reg in systems]), hermitian=True)
    out = []
    for (mean_x, mean_y, cross, _), inverse in zip(systems, inverses, strict=True):
        weights = inverse @ cross
        out.append(np.concatenate([[mean_y - mean_x @ weights], weights]))
    return np.stack(out)


def held_out_r2(
    theta: Float[np.ndarray, " probe"], xtx: Float[np.ndarray, "probe probe"], xty: Float[np.ndarray, " probe"], yy: float, y1: float, n: int | float
) -> tuple[float, float]:
    """(SSE, SST) of predictions x̃θ on rows summarized by xtx, xty, yy, y1, n.

    Args:
        theta: Probe parameters [intercept, weights], from :func:`ridge_fit`.
        xtx: Σ x̃ x̃ᵀ over the held-out rows.
        xty: Σ x̃ y over the held-out rows.
        yy: Σ y² over the held-out rows.
        y1: Σ y over the held-out rows.
        n: Number of held-out rows.

    Returns:
        ``(SSE, SST)``; the held-out R² is 1 − SSE/SST.

    Example:
        >>> x = np.c_[np.ones(3), [0., 1., 2.]]; y = np.array([1., 3., 5.])
        >>> held_out_r2(np.array([1., 2.]), x.T @ x, x.T @ y, (y*y).sum(), y.sum(), 3)
        (0.0, 8.0)
    """
    sse = yy - 2 * theta @ xty + theta @ xtx @ theta
    sst = yy - y1**2 / n
    return float(sse), float(sst)


def t_quantile(groups: int, level: float = 0.95) -> float:
    """Two-sided Student-t quantile for ``groups`` − 1 degrees of freedom.

    Args:
        groups: Number of groups G.
        level: Two-sided coverage.

    Returns:
        The quantile t_{level, G−1}.

    Example:
        >>> round(t_quantile(8), 3)
        2.365
    """
    return float(scipy_stats.t.ppf(0.5 + level / 2, groups - 1))


def jackknife_interval(
    estimate: Float[np.ndarray, "*shape"], replicates: Float[np.ndarray, " replicates *shape"], level: float = 0.95
) -> tuple[Float[np.ndarray, "*shape"] | float, Float[np.ndarray, "*shape"] | float]:
    """Delete-one-group jackknife interval: estimate ± t·se, replicates on axis 0.

    se² = (G−1)/G · Σ_g (θ_(g) − mean θ_(·))².

    Args:
        estimate: The full-sample estimate.
        replicates: The leave-one-group-out estimates, replicates on axis 0.
        level: Two-sided coverage.

    Returns:
        ``(low, high)``, each of the estimate's shape.

    Example:
        >>> lo, hi = jackknife_interval(np.array(1.0), np.array([0.9, 1.0, 1.1, 1.0]))
        >>> round(float(lo), 3), round(float(hi), 3)   # 1 ± t(0.975, 3) · sqrt(3/4 · 0.02)
        (0.61, 1.39)
    """
    g = replicates.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells (undefined figures) stay NaN
        centred = replicates - np.nanmean(replicates, axis=0)
    se = np.sqrt((g - 1) / g * np.nansum(centred**2, axis=0))
    half = t_quantile(g, level) * se
    return estimate - half, estimate + half


def fold_interval(
    pooled: Float[np.ndarray, "*shape"], per_fold: Float[np.ndarray, " folds *shape"], level: float = 0.95
) -> tuple[Float[np.ndarray, "*shape"] | float, Float[np.ndarray, "*shape"] | float]:
    """Interval for a held-out statistic: pooled value ± t·sd(fold values)/√G.

    Args:
        pooled: The statistic over all folds.
        per_fold: The statistic of each fold, folds on axis 0.
        level: Two-sided coverage.

    Returns:
        ``(low, high)``, each of the pooled value's shape.

    Example:
        >>> lo, hi = fold_interval(np.array(0.5), np.array([0.4, 0.5, 0.6]))
        >>> round(float(hi - lo), 3)
        0.497
    """
    g = per_fold.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sd = np.nanstd(per_fold, axis=0, ddof=1)
    half = t_quantile(g, level) * sd / np.sqrt(g)
    return pooled - half, pooled + half


def depth_slope(layers: np.ndarray, values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Least-squares slope of ``values`` on ``layers``, with a delete-one-layer jackknife interval.

    The interval is slope ± t_{level, n−1} · se, se² = (n−1)/n · Σ_k (b_(k) − mean b)²,
    b_(k) the slope without layer k (:func:`jackknife_interval` over the n layers).
    Needs at least 3 layers.

    Args:
        layers: Layer indices.
        values: One value per layer.
        level: Two-sided coverage.

    Returns:
        ``(slope, low, high)``.

    Raises:
        ValueError: When fewer than 3 layers are given.

    Example:
        >>> s, lo, hi = depth_slope(np.array([1, 2, 3, 4]), np.array([0.1, 0.2, 0.3, 0.4]))
        >>> round(s, 6), round(lo, 6), round(hi, 6)
        (0.1, 0.1, 0.1)
    """
    x = np.asarray(layers, dtype=float)
    y = np.asarray(values, dtype=float)
    if len(x) < 3:
        raise ValueError(f"a depth slope with a jackknife interval needs at least 3 layers, got {len(x)}")

    def slope(xs: np.ndarray, ys: np.ndarray) -> float:
        xc = xs - xs.mean()
        return float(np.dot(xc, ys - ys.mean()) / np.dot(xc, xc))

    estimate = slope(x, y)
    keep = ~np.eye(len(x), dtype=bool)
    replicates = np.array([slope(x[k], y[k]) for k in keep])
    low, high = jackknife_interval(np.array(estimate), replicates, level)
    return estimate, float(low), float(high)
