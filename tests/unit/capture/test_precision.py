"""bf16 and fp16 models: scores upcast per row block, figures within the tolerance of docs/precision.md.

The tolerance functions live in benchmarks/precision_compare.py (the script
that compares SmolLM2-135M in bf16 with float32); these tests check the bound
they compute against direct computation on random projections, check that the
capture's arithmetic is float64 whatever the scores' dtype, compare tiny bf16
and fp16 models with float32 within the tolerance fixed from the float32 run,
and check that the memory estimate counts the dtype's element size.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import poslens
from poslens.measurement.pipeline import measure_scores
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.runtime.estimate import FIXED_OVERHEAD, estimate_peak_bytes

_SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "precision_compare.py"
_spec = importlib.util.spec_from_file_location("precision_compare", _SCRIPT)
pc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pc)


# ----------------------------------------------------------------------------- the bound itself


def _projections(rng: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Q: the centring projection; P: the projection onto k random centred directions (range P ⊂ range Q)."""
    q = np.eye(n) - 1.0 / n
    basis, _ = np.linalg.qr(q @ rng.normal(size=(n, k)))
    return basis @ basis.T, q


def _figures(p: np.ndarray, q: np.ndarray, y: np.ndarray, y_cf: np.ndarray) -> tuple[float, float]:
    sst = float(y @ q @ y)
    return float(y @ p @ y) / sst, float((p @ y) @ (p @ y_cf)) / sst


def test_bound_holds_for_perturbations_of_a_given_rms():
    """|ΔL| and |ΔC_mask| never exceed figure_bounds for perturbations of rms r and r' (random and worst-case directions)."""
    rng = np.random.default_rng(0)
    n, worst = 60, {"leakage_pattern": 0.0, "c_mask": 0.0, "c_res": 0.0}
    for trial in range(300):
        p, q = _projections(rng, n, int(rng.integers(1, 8)))
        y = rng.normal(size=n) + rng.normal() * (p @ rng.normal(size=n)) * 3
        y_cf = y + rng.normal(size=n) * rng.uniform(0, 1)
        leak, c_mask = _figures(p, q, y, y_cf)
        sigma = np.sqrt(y @ q @ y / n)
        scales = pc.HeadScales(
            np.array([[sigma]]),
            np.array([[leak]]),
            np.array([[c_mask]]),
            np.array([[np.linalg.norm(p @ y_cf) / np.sqrt(y @ q @ y)]]),
            np.array([float(n)]),
        )
        r, r_cf = sigma * rng.uniform(0.001, 0.3), sigma * rng.uniform(0.001, 0.6)
        bound = {k: float(v[0, 0]) for k, v in pc.figure_bounds(scales, np.array([[r]]), np.array([[r_cf]])).items()}
        u = q @ y
        directions = [rng.normal(size=n), p @ y, -(p @ y), u - p @ y, -u]
        for d in directions:
            d_cf = rng.normal(size=n) if trial % 2 else p @ y
            eta = d / np.linalg.norm(d) * r * np.sqrt(n)
            eta_cf = d_cf / np.linalg.norm(d_cf) * r_cf * np.sqrt(n)
            leak2, c_mask2 = _figures(p, q, y + eta, y_cf + eta_cf)
            moved = {"leakage_pattern": abs(leak2 - leak), "c_mask": abs(c_mask2 - c_mask), "c_res": abs((leak2 - c_mask2) - (leak - c_mask))}
            for key, value in moved.items():
                assert value <= bound[key] * (1 + 1e-9) + 1e-15, (trial, key, value, bound[key])
                worst[key] = max(worst[key], value / bound[key])
    # the bound is not vacuous: the worst-case directions come within a factor 3 of it
    assert min(worst.values()) > 1 / 3, worst


def test_bound_closed_forms():
    """No perturbation moves nothing; a perturbation as large as sd(log a) has no bound; one hand-computed value."""
    sc = pc.HeadScales(np.array([[2.0, 2.0, 2.0]]), np.array([[0.25] * 3]), np.array([[0.2] * 3]), np.array([[0.5] * 3]), np.array([64.0]))
    b = pc.figure_bounds(sc, np.array([[0.0, 2.0, 0.02]]), np.array([[0.0, 0.0, 0.04]]))
    assert b["leakage_pattern"][0, 0] == 0 and b["c_mask"][0, 0] == 0
    assert np.isinf(b["leakage_pattern"][0, 1]) and np.isinf(b["c_res"][0, 1])
    a, bb, k = 0.01, 0.02, 1 / 0.99**2  # a = r/σ, b = r'/σ
    assert b["leakage_pattern"][0, 2] == pytest.approx(k * (2 * 0.5 * a + a * a) + 0.25 * (k - 1), rel=1e-12)
    assert b["c_mask"][0, 2] == pytest.approx(k * (a * 0.5 + 0.5 * bb + a * bb) + 0.2 * (k - 1), rel=1e-12)
    assert pc.layer_tolerances(b)["c_res"][0] == np.inf
    assert pc.SAFETY == 2.0 and pc.EPSILON == {"bfloat16": 2.0**-8, "float16": 2.0**-11}


def test_score_stats_against_a_loop():
    """ScoreStats' sums over the pairs of the window `all` (rows ≥ 1, keys ≤ row) equal a plain loop's."""
    x = torch.randn(2, 3, 7, 7, generator=torch.Generator().manual_seed(1))
    st = pc.ScoreStats.zeros(1, 3)
    st.add(0, x)
    for h in range(3):
        n = sq = rowmax_sq = 0.0
        for b in range(2):
            for i in range(1, 7):
                row = [float(x[b, h, i, j]) for j in range(i + 1)]
                n += len(row)
                sq += sum(v * v for v in row)
                rowmax_sq += len(row) * max(abs(v) for v in row) ** 2
        assert (st.n[0, h], st.sq[0, h], st.rowmax_sq[0, h]) == pytest.approx((n, sq, rowmax_sq), rel=1e-12)
    # a priori: every |δ| ≤ ε|s| makes rms(Δ log a) ≤ ε (rms(s) + rms_w(max|s|)), here checked on the scores themselves
    assert np.all(pc.a_priori_rms(st, 0.01) == 0.01 * (st.rms + st.rowmax_rms))


# ----------------------------------------------------------------------------- tiny models


def _scores(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    kept = {}
    hooks = [(attn_scores(layer), lambda x, hook, layer=layer: kept.__setitem__(layer, x.clone())) for layer in range(model.n_layers)]
    run_with_hooks(model, tokens, hooks)
    return [kept[layer] for layer in range(model.n_layers)]


def _values(result: poslens.Result) -> np.ndarray:
    table = result.table.sort_values(["metric", "query_window", "layer", "head"])
    return table["value"].to_numpy()


@pytest.fixture(scope="module")
def tiny_scores(tiny_llama_dir):
    """A tiny Llama's float32 scores on 4 × 48 tokens, sharpened ×30 so that the heads are far from uniform."""
    model = poslens.load_model(tiny_llama_dir)
    t = 48
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=t)
    visible = torch.ones(t, t, dtype=torch.bool).tril()
    return [torch.where(visible, 30 * s, torch.finfo(torch.float32).min) for s in _scores(model, corpus.tokens)]


def test_bf16_scores_are_upcast_before_any_arithmetic(tiny_scores):
    """bf16 and fp16 scores give exactly the figures of the same values held in float32: the capture copies them to float64 first."""
    t = tiny_scores[0].shape[-1]
    visible = torch.ones(t, t, dtype=torch.bool).tril()
    for dtype in (torch.bfloat16, torch.float16):
        low = [torch.where(visible, s.to(dtype), torch.finfo(dtype).min) for s in tiny_scores]
        same = [torch.where(visible, s.float(), torch.finfo(torch.float32).min) for s in low]
        r_low, r_same = measure_scores(low, groups=2, early=16), measure_scores(same, groups=2, early=16)
        assert np.array_equal(_values(r_low), _values(r_same), equal_nan=True), dtype


def test_rounding_the_scores_stays_within_the_bound(tiny_scores):
    """Rounding each score to bf16 (|δ| ≤ 2⁻⁹|s|) moves each layer's L, C_mask and C_res by less than the bound for ε = 2⁻⁸ (no safety factor)."""
    t = tiny_scores[0].shape[-1]
    visible = torch.ones(t, t, dtype=torch.bool).tril()
    rounded = [torch.where(visible, s.bfloat16().float(), torch.finfo(torch.float32).min) for s in tiny_scores]
    ref, low = measure_scores(tiny_scores, groups=2, early=16), measure_scores(rounded, groups=2, early=16)
    stats = pc.ScoreStats.zeros(len(tiny_scores), tiny_scores[0].shape[1])
    for layer, s in enumerate(tiny_scores):
        stats.add(layer, torch.where(visible, s, 0.0))
    scales = pc.head_scales(ref.sums)
    assert pc.check_scales(scales, ref) < 1e-10
    assert np.array_equal(stats.n[:, 0], scales.n)
    tol = pc.tolerances(stats, scales, pc.EPSILON["bfloat16"], factor=1.0)
    for metric in pc.METRICS:
        diff = np.abs(pc.layer_figures(low, metric, len(tiny_scores)) - pc.layer_figures(ref, metric, len(tiny_scores)))
        assert np.all(diff <= tol[metric]), (metric, diff, tol[metric])
        assert np.all(diff > 0), metric  # and it did move them


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_model_within_tolerance(tiny_llama_dir, dtype):
    """A tiny Llama loaded in bf16 / fp16: its hook sees bf16 / fp16 scores, the capture's sums are float64, and each layer's
    L, C_res and C_mask lie within the tolerance fixed from the float32 run."""
    model32 = poslens.load_model(tiny_llama_dir)
    low = poslens.load_model(tiny_llama_dir, dtype=dtype)
    assert next(low.hf_model.parameters()).dtype == getattr(torch, dtype)
    corpus = poslens.make_corpus(model32, "docs", n_seqs=4, seq_len=48)
    ref = poslens.measure(model32, corpus, groups=2, batch_size=2, progress=False)
    stats, diffs = pc.score_differences(model32, {dtype: low}, corpus.tokens, batch_size=4)
    scales = pc.head_scales(ref.sums)
    tol = pc.tolerances(stats, scales, pc.EPSILON[dtype])  # fixed before the reduced model is measured
    seen = []
    run_with_hooks(low, corpus.tokens[:1], [(attn_scores(0), lambda x, hook: seen.append(x.dtype))])
    assert seen == [getattr(torch, dtype)]
    result = poslens.measure(low, corpus, groups=2, batch_size=2, progress=False)
    arrays = [f for f in dataclasses.fields(result.sums.per_group) if isinstance(getattr(result.sums.per_group, f.name), np.ndarray)]
    assert arrays and all(getattr(result.sums.per_group, f.name).dtype == np.float64 for f in arrays)
    assert diffs[dtype]["diff"].rms.max() > 0  # the reduced forward really differs
    for metric in pc.METRICS:
        diff = np.abs(pc.layer_figures(result, metric, model32.n_layers) - pc.layer_figures(ref, metric, model32.n_layers))
        assert np.all(diff <= tol[metric]), (metric, diff, tol[metric])


def test_memory_estimate_counts_the_dtype(tiny_llama_dir):
    """In bf16 the weights, activations, scores and logits take half the bytes; the softmax phase (float32 softmax plus its
    cast back) the same; and a bf16-loaded model's estimate counts its tensors at their own size."""
    model = poslens.load_model(tiny_llama_dir)
    b, t, h = 2, 256, model.n_heads
    e32 = estimate_peak_bytes(model, b, t, dtype=torch.float32, device="cpu")
    e16 = estimate_peak_bytes(model, b, t, dtype=torch.bfloat16, device="cpu")
    params = {id(x): x for x in list(model.hf_model.parameters()) + list(model.hf_model.buffers())}.values()
    floating = sum(x.numel() for x in params if x.is_floating_point())
    assert e32.weights - e16.weights == 2 * floating
    assert e32.scores == 4 * b * h * t * t and e16.scores == 2 * b * h * t * t
    assert e32.attention == e16.attention == 8 * b * h * t * t
    assert e32.activations - FIXED_OVERHEAD == 2 * (e16.activations - FIXED_OVERHEAD)
    assert e32.logits == 2 * e16.logits and e32.capture == e16.capture and e32.sums == e16.sums
    assert e32.total - e16.total >= 2 * floating
    low = poslens.load_model(tiny_llama_dir, dtype="bfloat16")
    own = estimate_peak_bytes(low, b, t, device="cpu")
    low_params = {id(x): x for x in list(low.hf_model.parameters()) + list(low.hf_model.buffers())}.values()
    assert own.weights == sum(x.numel() * x.element_size() for x in low_params)
    assert own.scores == e16.scores and own.activations == e16.activations


@pytest.mark.embedded
def test_smollm2_in_bf16_within_the_bound_of_its_measured_score_difference(smollm2):
    """SmolLM2-135M in bf16 (2 × 48 tokens): float64 sums, and each layer's L, C_res and C_mask within the bound computed from
    the scores' measured difference δ (no safety factor). The a priori tolerance is compared in benchmarks/precision_compare.py."""
    low = poslens.load_model("smollm2-135m", dtype="bfloat16")
    corpus = poslens.make_corpus(smollm2, "docs", n_seqs=2, seq_len=48)
    ref = poslens.measure(smollm2, corpus, groups=2, batch_size=1, progress=False, probe=False)
    result = poslens.measure(low, corpus, groups=2, batch_size=1, progress=False, probe=False)
    assert all(
        getattr(result.sums.per_group, f.name).dtype == np.float64
        for f in dataclasses.fields(result.sums.per_group)
        if isinstance(getattr(result.sums.per_group, f.name), np.ndarray)
    )
    _, diffs = pc.score_differences(smollm2, {"bfloat16": low}, corpus.tokens, batch_size=2)
    r = pc.measured_rms(diffs["bfloat16"]["diff"])
    bound = pc.layer_tolerances(pc.figure_bounds(pc.head_scales(ref.sums), r, pc.COUNTERFACTUAL_FACTOR * r), 1.0)
    for metric in pc.METRICS:
        diff = np.abs(pc.layer_figures(result, metric, smollm2.n_layers) - pc.layer_figures(ref, metric, smollm2.n_layers))
        assert np.all(diff <= bound[metric]), (metric, diff, bound[metric])
