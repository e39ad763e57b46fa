"""``probe_r2`` against a naive, independent reference (methodology §3.3, methodology "Decodability").

What the reference does, from methodology.md's words only:

- attention weights a_ij = softmax over the visible keys of the captured logits
  (float64), checked against the plain Hugging Face model's eager attention;
- one row per sequence and query i in the window (early: 1 ≤ i < Q, all:
  1 ≤ i < T), with the features a_i0, −Σ_j a_ij log a_ij, a_ii and max_j a_ij
  of every head of the layer (4H columns), target y = log(i + 1);
- fold g: a ridge regression with an unpenalized intercept, fit on the rows of
  all groups but g, on standardized features (train mean, train variance),
  penalty 10⁻³ per standardized weight against the *mean* squared error, i.e.
  min (1/n)‖y − b − Zβ‖² + 10⁻³‖β‖²; solved as an augmented least-squares
  problem with ``scipy.linalg.lstsq`` (no normal equations, no sufficient
  statistics); scored on group g's rows;
- value = 1 − Σ_g SSE_g / Σ_g SST_g, SST_g about group g's own mean; fold
  value 1 − SSE_g / SST_g; interval = value ± t_{0.975, G−1} · sd(folds)/√G
  (sd with G − 1 in the denominator); layer −1 = mean over layers ≥ 1, of the
  value and of each fold value.

Tolerances: values and interval ends agree to 1e-8 absolute (in practice
~1e-14). On the untrained tiny model attention is near uniform, so the probe
is almost exact (1 − R² ≈ 1e-6) and 1e-8 absolute alone would hide errors of
1 %; there we also compare 1 − R² and the interval half-width *relatively*
(1e-6 and 1e-5). Those cannot be tighter: poslens computes SSE from sums,
SSE = Σy² − 2θ·Σx̃y + θᵀΣx̃x̃ᵀθ, which cancels ~7 digits when SSE/Σy² ≈ 1e-7,
leaving a relative error ≈ 1e-16 · 1e7 in SSE (seen: ≤ 6e-8). The "sharp" case
(the same model with query and key weights × 12) has peaky attention and
R² ≈ 0.75, where no such cancellation occurs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import linalg, stats

import poslens
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[2]))
import naive_reference as nr  # noqa: E402

N_SEQS, SEQ_LEN, GROUPS, EARLY, BATCH = 8, 40, 4, 18, 2  # batch = group size: identical forward passes
PENALTY = 1e-3
TOL = 1e-8
RTOL_RESIDUAL, RTOL_HALF = 1e-6, 1e-5
WINDOWS = ("early", "all")
SHARP = 12.0  # scale of q_proj and k_proj in the "sharp" case: logits × 144


# ---------------------------------------------------------------- reference


def attention(scores: np.ndarray) -> np.ndarray:
    """Softmax over the visible keys (score above half the float32 minimum), float64; 0 on masked keys."""
    visible = scores > nr.FMIN32 / 2
    masked = np.where(visible, scores, -np.inf)
    e = np.exp(masked - masked.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def probe_rows(a: np.ndarray, window: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows of one layer: features [N, R, 4H] (head-major) and target log(i + 1) [N, R]."""
    n, h, t, _ = a.shape
    q = np.arange(1, EARLY if window == "early" else t)  # query 0 never enters
    rows = a[:, :, q, :]  # [N, H, R, T]
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(rows > 0, rows * np.log(rows), 0.0)
    feats = np.stack([rows[..., 0], -plogp.sum(-1), rows[:, :, np.arange(q.size), q], rows.max(-1)], axis=-1)  # [N, H, R, 4]
    x = feats.transpose(0, 2, 1, 3).reshape(n, q.size, 4 * h)
    y = np.broadcast_to(np.log(q + 1.0), (n, q.size))
    return x, y


def ridge(x: np.ndarray, y: np.ndarray, penalty: float = PENALTY):
    """Ridge on standardized features, intercept free: min (1/n)‖y − b − Zβ‖² + penalty·‖β‖²; returns a predictor."""
    mu, sd = x.mean(0), x.std(0)
    keep = sd > 0  # a constant feature carries nothing
    z = (x[:, keep] - mu[keep]) / sd[keep]
    n, k = z.shape
    aug_x = np.vstack([z, np.sqrt(n * penalty) * np.eye(k)])
    aug_y = np.concatenate([y - y.mean(), np.zeros(k)])
    beta = linalg.lstsq(aug_x, aug_y)[0]
    return lambda xt: y.mean() + ((xt[:, keep] - mu[keep]) / sd[keep]) @ beta


def cross_fitted_r2(x: np.ndarray, y: np.ndarray, penalty: float = PENALTY) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(pooled R², fold R² [G], SSE [G], SST [G]); fold g trains on every other group."""
    g_of = nr.group_of(N_SEQS, GROUPS)
    sse, sst = np.zeros(GROUPS), np.zeros(GROUPS)
    for g in range(GROUPS):
        train, test = g_of != g, g_of == g
        predict = ridge(x[train].reshape(-1, x.shape[-1]), y[train].reshape(-1), penalty)
        y_test = y[test].reshape(-1)
        sse[g] = ((y_test - predict(x[test].reshape(-1, x.shape[-1]))) ** 2).sum()
        sst[g] = ((y_test - y_test.mean()) ** 2).sum()
    return 1 - sse.sum() / sst.sum(), 1 - sse / sst, sse, sst


def fold_interval(value: float, folds: np.ndarray) -> tuple[float, float]:
    half = stats.t.ppf(0.975, GROUPS - 1) * folds.std(ddof=1) / np.sqrt(GROUPS)
    return value - half, value + half


def reference_table(scores: list[np.ndarray]) -> dict:
    """{(layer, window): (value, ci_low, ci_high)}, layer −1 the mean over layers ≥ 1."""
    out = {}
    for window in WINDOWS:
        values, folds = [], []
        for layer, s in enumerate(scores):
            value, per_fold, _, _ = cross_fitted_r2(*probe_rows(attention(s), window))
            values.append(value)
            folds.append(per_fold)
            out[(layer, window)] = (value, *fold_interval(value, per_fold))
        value = float(np.mean(values[1:]))
        out[(-1, window)] = (value, *fold_interval(value, np.mean(folds[1:], axis=0)))
    return out


# ---------------------------------------------------------------- cases


@pytest.fixture(scope="module", params=["llama", "sharp"])
def case(request, tmp_path_factory: pytest.TempPathFactory):
    folder = save_tiny_model(tmp_path_factory.mktemp("tiny_llama"), "llama")
    if request.param == "sharp":
        import transformers

        state = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
        state = {k: v * SHARP if ("q_proj" in k or "k_proj" in k) else v for k, v in state.items()}
        folder = save_tiny_model(tmp_path_factory.mktemp("tiny_sharp"), "llama", state_dict=state)
    model = poslens.load_model(folder)
    corpus = poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
    result = poslens.measure(model, corpus, groups=GROUPS, early=EARLY, batch_size=BATCH, probe=True, progress=False)
    frame = result.to_frame()
    scores = nr.capture_scores(model, corpus.tokens, GROUPS, batch_size=BATCH)
    return {
        "name": request.param,
        "folder": folder,
        "model": model,
        "tokens": corpus.tokens,
        "frame": frame[frame.metric == "probe_r2"],
        "scores": scores,
        "reference": reference_table(scores),
    }


def test_probe_r2_rows_are_layer_aggregates_only(case):
    """One row per layer (and layer −1) and window, head −1: the probe reads all heads of a layer together."""
    rows = {(int(r.layer), int(r.head), r.query_window) for r in case["frame"].itertuples(index=False)}
    layers = list(range(case["model"].n_layers)) + [-1]
    assert rows == {(layer, -1, w) for layer in layers for w in WINDOWS}
    assert len(case["frame"]) == len(rows)


def test_probe_r2_matches_reference(case):
    got = {(int(r.layer), r.query_window): (r.value, r.ci_low, r.ci_high) for r in case["frame"].itertuples(index=False)}
    bad = []
    for key, want in case["reference"].items():
        have = got[key]
        where = f"{case['name']} layer {key[0]} {key[1]}"
        for part, h, w in zip(("value", "ci_low", "ci_high"), have, want, strict=False):
            if not abs(h - w) <= TOL:
                bad.append(f"{where} {part}: poslens {h!r} vs reference {w!r} (Δ={h - w:.3g})")
        # 1 − R² and the half-width, relatively: near R² = 1 the absolute check alone is too coarse
        if not abs((1 - have[0]) - (1 - want[0])) <= RTOL_RESIDUAL * abs(1 - want[0]):
            bad.append(f"{where} 1 − R²: poslens {1 - have[0]!r} vs reference {1 - want[0]!r}")
        half_have, half_want = (have[2] - have[1]) / 2, (want[2] - want[1]) / 2
        if not abs(half_have - half_want) <= RTOL_HALF * abs(half_want):
            bad.append(f"{where} half-width: poslens {half_have!r} vs reference {half_want!r}")
    assert not bad, "probe_r2 differs from the naive reference:\n" + "\n".join(bad)


def test_reference_reads_the_native_attention(case):
    """The reference's weights and features equal those of the plain HF model with eager attention.

    float32 attention from HF against float64 softmax of float32 logits: 1e-5.
    """
    import transformers

    native = transformers.AutoModelForCausalLM.from_pretrained(case["folder"], attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        attentions = native(case["tokens"], output_attentions=True).attentions
    assert len(attentions) == len(case["scores"])
    for layer, s in enumerate(case["scores"]):
        mine, theirs = attention(s), attentions[layer].double().numpy()
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
        for window in WINDOWS:
            np.testing.assert_allclose(probe_rows(mine, window)[0], probe_rows(theirs, window)[0], rtol=0, atol=1e-4)


def test_reference_ridge_is_the_stated_optimum(case):
    """Stationarity of (1/n)‖y − b − Zβ‖² + 10⁻³‖β‖² at the reference's solution, on one training set."""
    x, y = probe_rows(attention(case["scores"][1]), "all")
    train = nr.group_of(N_SEQS, GROUPS) != 0
    x, y = x[train].reshape(-1, x.shape[-1]), y[train].reshape(-1)
    predict = ridge(x, y)
    z = (x - x.mean(0)) / x.std(0)
    beta = linalg.lstsq(z, predict(x) - y.mean())[0]  # recover β from the fitted values (Z has full column rank)
    residual = y - predict(x)
    assert abs(residual.mean()) < 1e-12
    gradient = -2 / len(y) * z.T @ residual + 2 * PENALTY * beta
    assert np.abs(gradient).max() < 1e-10


@pytest.mark.parametrize("case", ["sharp"], indirect=True)  # the untrained model's near-exact probe cannot separate them
def test_reference_separates_the_documented_choices(case):
    """Each nearby reading of the doc moves probe_r2 by far more than the tolerance, so the match means something.

    Not separable here: pooling versus averaging fold R² (and SST about the test
    group's mean versus the training mean). The target depends on i only and the
    groups have equal size, so every SST_g is the same number and the readings coincide.
    """
    x, y = probe_rows(attention(case["scores"][1]), "all")
    value, folds, _, sst = cross_fitted_r2(x, y)
    np.testing.assert_allclose(folds.mean(), value, rtol=0, atol=1e-14)
    np.testing.assert_allclose(sst, sst[0], rtol=1e-14)
    n_train = (N_SEQS - N_SEQS // GROUPS) * x.shape[1]
    alternatives = {
        "ordinary least squares": cross_fitted_r2(x, y, penalty=0.0)[0],
        "penalty against the summed squared error": cross_fitted_r2(x, y, penalty=PENALTY / n_train)[0],
        "target i": cross_fitted_r2(x, np.expm1(y))[0],
        "without the entropy": cross_fitted_r2(np.delete(x, np.arange(1, x.shape[-1], 4), -1), y)[0],
    }
    for name, other in alternatives.items():
        assert abs(other - value) > 1e3 * TOL, name
