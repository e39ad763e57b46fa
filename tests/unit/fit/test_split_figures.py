"""The split's readouts and figures (methodology §13.2–13.5) against explicit computations written out here."""

from __future__ import annotations

import numpy as np
import pytest

from poslens.fit import split_figures as fig
from poslens.fit.residual_readout import ResidualSums


def sums_of(vectors: np.ndarray, groups: np.ndarray) -> ResidualSums:
    """ResidualSums of explicit residual vectors [N, L, T, d] (site 0 only), summed as the capture sums them."""
    n, n_layers, t, d = vectors.shape
    g_count = int(groups.max()) + 1
    sums = ResidualSums.zeros(g_count, n_layers, d, t)
    y = np.log(np.arange(1, t) + 1.0)
    for seq in range(n):
        g = groups[seq]
        for layer in range(n_layers):
            x = np.c_[np.ones(t - 1), vectors[seq, layer, 1:]]
            sums.gram[0, g, layer] += x.T @ x
            sums.design_x_target[0, g, layer] += x.T @ y
            sums.position_sum[0, g, layer, 1:] += vectors[seq, layer, 1:]
        sums.rows[g] += t - 1
        sums.target[g] += y.sum()
        sums.target_sq[g] += (y**2).sum()
        sums.position_rows[g, 1:] += 1
    return sums


def naive_ridge(x: np.ndarray, y: np.ndarray, penalty: float) -> np.ndarray:
    """θ = [intercept, w] of ridge on standardized features: (C + λ diag(v)) w = c, population moments."""
    mu_x, mu_y = x.mean(0), y.mean()
    cov = (x - mu_x).T @ (x - mu_x) / len(x)
    w = np.linalg.solve(cov + penalty * np.diag(np.diag(cov)), (x - mu_x).T @ (y - mu_y) / len(x))
    return np.r_[mu_y - mu_x @ w, w]


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    n, n_layers, t, d = 12, 3, 9, 4
    groups = np.repeat(np.arange(4), 3)
    position = np.log(np.arange(t) + 1.0)
    unedited = rng.standard_normal((n, n_layers, t, d)) + position[None, None, :, None] * np.array([1.0, -0.5, 0.0, 0.2])
    edited = unedited * 0.7 + 0.3 * rng.standard_normal((n, n_layers, t, d))
    return unedited, edited, groups


def test_code_variance_matches_the_written_out_readout(data):
    unedited, edited, groups = data
    n, n_layers, t, _ = unedited.shape
    theta = fig.fold_probes(sums_of(unedited, groups), penalty=0.1)
    v, reps = fig.code_variance(theta, sums_of(edited, groups))
    y = np.tile(np.log(np.arange(1, t) + 1.0), n)
    label = np.repeat(groups, t - 1)
    for layer in range(n_layers):
        x = unedited[:, layer, 1:].reshape(n * (t - 1), -1)
        probes = {g: naive_ridge(x[label != g], y[label != g], 0.1) for g in range(4)}
        projection = np.array([[probes[groups[s]] @ np.r_[1.0, edited[s, layer, i]] for i in range(1, t)] for s in range(n)])
        assert v[layer] == pytest.approx(projection.mean(0).var(), abs=1e-10)
        for g in range(4):
            assert reps[g, layer] == pytest.approx(projection[groups != g].mean(0).var(), abs=1e-10)


def test_content_r2_matches_the_written_out_readout(data):
    _, edited, groups = data
    n, n_layers, t, _ = edited.shape
    r2, reps = fig.content_r2(sums_of(edited, groups), penalty=0.1)
    y = np.tile(np.log(np.arange(1, t) + 1.0), n)
    label = np.repeat(groups, t - 1)
    for layer in range(n_layers):
        x = edited[:, layer, 1:].reshape(n * (t - 1), -1)
        sse, sst = np.zeros(4), np.zeros(4)
        for g in range(4):
            theta = naive_ridge(x[label != g], y[label != g], 0.1)
            test = label == g
            sse[g] = ((y[test] - theta[0] - x[test] @ theta[1:]) ** 2).sum()
            sst[g] = ((y[test] - y[test].mean()) ** 2).sum()
        assert r2[layer] == pytest.approx(1 - sse.sum() / sst.sum(), abs=1e-10)
        assert reps[1, layer] == pytest.approx(1 - (sse.sum() - sse[1]) / (sst.sum() - sst[1]), abs=1e-10)


def flat(value: float, spread: float = 0.01) -> fig.Figure:
    return fig.Figure(value, value + spread * np.array([-1.0, 0.0, 1.0, 0.0]))


def test_shapley_figures_in_closed_form():
    levels = {"none": flat(1.0), "m": flat(0.5), "p": flat(0.8), "mp": flat(0.4), "s": flat(0.3), "sham-m": flat(0.95), "sham-p": flat(0.9)}
    out = fig.split_figures(levels)
    assert out["phi_m"].estimate == pytest.approx(0.5 * (0.5 + 0.4))
    assert out["phi_p"].estimate == pytest.approx(0.5 * (0.2 + 0.1))
    assert out["interaction"].estimate == pytest.approx(1.0 - 0.5 - 0.8 + 0.4)
    assert out["share_m"].estimate == pytest.approx(0.45 / 0.6)
    assert out["r1"].estimate == pytest.approx(0.5 / 0.6) and out["r2"].estimate == pytest.approx(0.4 / 0.6)
    assert out["r1"].estimate - out["r2"].estimate == pytest.approx(out["interaction"].estimate / 0.6)
    assert out["sink_total"].estimate == pytest.approx(0.7) and out["sink_share"].estimate == pytest.approx(0.7)
    assert out["coverage"].estimate == pytest.approx(0.6 / 0.7)
    assert out["phi_m_beyond_sham"].estimate == pytest.approx(0.45 - 0.05 - 0.06)
    # every figure is computed inside each replicate: the replicate of share_m is its own ratio
    rep = {name: levels[name].replicates[0] for name in levels}
    phi_m = 0.5 * ((rep["none"] - rep["m"]) + (rep["p"] - rep["mp"]))
    phi_p = 0.5 * ((rep["none"] - rep["p"]) + (rep["m"] - rep["mp"]))
    assert out["share_m"].replicates[0] == pytest.approx(phi_m / (phi_m + phi_p))


@pytest.mark.parametrize(
    ("levels", "reason"),
    [
        ({"none": 1.0, "m": 1.0, "p": 1.0, "mp": 1.0, "s": 0.5}, "holds 0"),
        ({"none": 1.0, "m": 0.5, "p": 1.3, "mp": 0.8, "s": 0.5}, "raises f"),
        ({"none": 1.0, "m": 0.6, "p": 1.0, "mp": 0.7, "s": 0.5}, "opposite sign"),
    ],
)
def test_no_share_reasons(levels, reason):
    figures = {name: flat(value, 0.001) for name, value in levels.items()}
    found = fig.no_share_reason(fig.split_intervals(figures, fig.split_figures(figures)))
    assert found is not None and reason in found, found


def test_a_share_outside_0_1_is_no_share():
    rng = np.random.default_rng(1)
    figures = {name: fig.Figure(v, v + 0.05 * rng.standard_normal(8)) for name, v in {"none": 1.0, "m": 0.7, "p": 1.02, "mp": 0.69, "s": 0.5}.items()}
    derived = fig.split_figures(figures)
    low, high = derived["share_m"].interval()
    assert high > 1  # the case: share_m near 1 with a wide interval
    found = fig.no_share_reason(fig.split_intervals(figures, derived))
    assert found is not None and ("leaves [0, 1]" in found or "opposite sign" in found or "holds 0" in found), found


@pytest.mark.parametrize(
    ("values", "verdict"),
    [
        ({"none": 1.0, "m": 0.3, "p": 0.95, "mp": 0.25, "s": 0.2, "sham-m": 1.0, "sham-p": 1.0}, "count"),
        ({"none": 1.0, "m": 0.95, "p": 0.3, "mp": 0.25, "s": 0.2, "sham-m": 1.0, "sham-p": 1.0}, "phase"),
        ({"none": 1.0, "m": 0.6, "p": 0.6, "mp": 0.2, "s": 0.2, "sham-m": 1.0, "sham-p": 1.0}, "undecided"),
        ({"none": 1.0, "m": 0.3, "p": 0.95, "mp": 0.25, "s": 0.2, "sham-m": 0.35, "sham-p": 1.0}, "inconclusive"),
        ({"none": 1.0, "m": 0.3, "p": 0.95, "mp": 0.25, "s": 0.2}, "inconclusive"),
    ],
)
def test_c8_verdicts(values, verdict):
    figures = {name: flat(value) for name, value in values.items()}
    found, reason = fig.c8_verdict(fig.split_intervals(figures, fig.split_figures(figures)))
    assert found == verdict, reason
    if verdict == "inconclusive":
        assert "sham" in reason
