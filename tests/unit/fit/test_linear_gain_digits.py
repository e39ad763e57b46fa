"""The linear ΔR² from moment sums (:func:`poslens.fit.stats.linear_r2_gain`) keeps its digits on logits with a large mean.

The reference is the least-squares fit on the pairs themselves, centred, in numpy's 80-bit long double; the
former formula (the full model's explained sum of squares less the relative model's, from the same float64
moments) is shown to miss it by more than the bound, so the case can tell the two apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from poslens.fit.stats import linear_r2_gain

EXTENDED = np.longdouble


def former_linear_r2_gain(m: dict, sst):
    """The formula of poslens ≤ 0.7.5: explained_full − explained_rel, over SST."""
    n = m["n"]
    mean_i, mean_j, mean_y = m["i1"] / n, m["j1"] / n, m["y1"] / n
    c_ii, c_jj, c_ij = m["ii"] - n * mean_i**2, m["jj"] - n * mean_j**2, m["ij"] - n * mean_i * mean_j
    c_iy, c_jy = m["yi"] - n * mean_i * mean_y, m["yj"] - n * mean_j * mean_y
    c_dd, c_di, c_dy = c_ii - 2 * c_ij + c_jj, c_ii - c_ij, c_iy - c_jy
    explained_full = (c_ii * c_dy**2 - 2 * c_di * c_dy * c_iy + c_dd * c_iy**2) / (c_dd * c_ii - c_di**2)
    return (explained_full - c_dy**2 / c_dd) / sst


@pytest.mark.skipif(np.finfo(EXTENDED).nmant < 63, reason="needs numpy's 80-bit long double (x86) for the reference")
def test_a_small_gain_on_a_large_mean_keeps_its_digits():
    # every causal pair of 128 positions; y near −30, relative slope 0.05, absolute slope 1e-4, noise 0.1
    i, j = (k.astype(EXTENDED) for k in np.nonzero(np.tril(np.ones((128, 128)))))
    y = -30.0 + 0.05 * (i - j) + 1e-4 * i + np.random.default_rng(0).normal(0, 0.1, size=i.shape)
    pairs = {"i1": i, "j1": j, "ii": i * i, "jj": j * j, "ij": i * j, "y1": y, "yi": y * i, "yj": y * j}
    # the sums as the capture would hold them: float64, as 0-d arrays
    moments = {"n": np.array(float(len(i)))} | {name: np.array(x.sum(), dtype=np.float64) for name, x in pairs.items()}
    sst = np.array(((y - y.mean()) ** 2).sum(), dtype=np.float64)
    # R² of y on [1, Δ, i] less R² on [1, Δ], by least squares on the centred pairs
    delta, position, target = (x - x.mean() for x in (i - j, i, y))
    design = np.stack([delta, position], axis=1)
    gram = (design.T @ design).astype(np.float64)
    coef = np.zeros(2, dtype=EXTENDED)
    for _ in range(4):  # float64 solves, their residual in long double
        coef = coef + np.linalg.solve(gram, (design.T @ (target - design @ coef)).astype(np.float64)).astype(EXTENDED)
    explained_full = coef @ (design.T @ target)
    explained_relative = (delta @ target) ** 2 / (delta @ delta)
    want = float((explained_full - explained_relative) / (target @ target))
    assert 1e-6 < want < 1e-5  # a small gain: the absolute slope explains little next to the noise
    # the float64 moments alone cost about 3e-12 here (c_iy = Σ y i − n ī ȳ subtracts large numbers)
    assert abs(linear_r2_gain(moments, sst) - want) / want < 5e-12
    assert abs(former_linear_r2_gain(moments, sst) - want) / want > 5e-12
