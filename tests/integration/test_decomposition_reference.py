"""The naive reference of methodology §4 version 2 (``naive_reference.py``) checked on synthetic heads.

Pure numpy, no model: each test builds logits s_ij(n) from a formula, masks
them (causal, or a sliding window of W = 8), and feeds them to
:func:`naive_reference.reference_decomposition` / ``reference_intervals``.
These are the reference's own controls (methodology §4.4): if they fail, the
reference is wrong, whatever the package says.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
import naive_reference as nr  # noqa: E402
from metric_table import DECOMPOSITION, SHARES  # noqa: E402

WIDTH = 8


def kernel_a(d):
    """methodology §4.4 (a): a relative kernel that varies inside an offset bin."""
    return -0.05 * d + np.sin(0.3 * d)


def kernel_smooth(d):
    """The smooth kernel of methodology §4.0 and §4.4 (g)."""
    return -0.05 * d


def u_key(j):
    """methodology §4.4 (f): a key-position term."""
    return 0.5 * np.log(j + 1.0)


# Heads as functions of (i, j, Δ) on [T, T] grids.
ZERO_HEADS = {
    "a_relative": lambda i, j, d: kernel_a(d),
    "b_row_shift": lambda i, j, d: kernel_a(d) + 2 * np.log(i + 1.0),
    "c_constant": lambda i, j, d: 0.0 * d + 1.5,
    "d_key0_bias": lambda i, j, d: kernel_a(d) + 3.0 * (j == 0),
}


def synthetic_scores(heads, n_seqs: int, seq_len: int, width: int | None = None, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """[N, H, T, T] float64 logits, masked entries at float32's minimum (as the capture stores them)."""
    i = np.arange(seq_len)[:, None]
    j = np.arange(seq_len)[None, :]
    d = i - j
    visible = (j <= i) & ((d < width) if width else True)
    rng = np.random.default_rng(seed)
    out = np.empty((n_seqs, len(heads), seq_len, seq_len))
    for k, head in enumerate(heads):
        out[:, k] = np.broadcast_to(np.asarray(head(i, j, d), float), (seq_len, seq_len))
        if noise:
            out[:, k] += noise * rng.standard_normal((n_seqs, seq_len, seq_len))
    out[:, :, ~visible] = nr.FMIN32
    return out


def test_metric_names():
    """The names methodology §4 v2 reports, and none of the dropped row-centred split."""
    want = {
        "c_res", "c_mask", "rho_res", "rho_mask", "c_count", "count_share",
        "c_res_saturated", "c_mask_saturated", "rho_res_saturated", "rho_mask_saturated", "c_count_saturated", "count_share_saturated",
        "c_res_meanfield", "c_mask_meanfield", "rho_res_meanfield", "rho_mask_meanfield",
        "c_res_logit", "c_mask_logit",
    }  # fmt: skip
    assert want <= set(nr.PER_HEAD)
    assert not [m for m in nr.PER_HEAD if "centered" in m or "centred" in m]
    assert set(nr.SHARES) <= set(nr.PER_HEAD) and set(nr.PER_SEQUENCE) <= set(nr.PER_HEAD)
    out = nr.reference_decomposition(synthetic_scores(list(ZERO_HEADS.values())[:1], 4, 20), early=8, groups=2)
    assert set(out) == {"early", "all"} and set(out["all"]) == set(nr.PER_HEAD)


@pytest.mark.parametrize("width", [None, WIDTH], ids=["causal", "window8"])
def test_zero_controls(width):
    """methodology §4.4 (a)–(d), causal and sliding: C_res = 0 to 1e-8·L, per-sequence, saturated and mean-field."""
    # early = 18 is not a bin edge (…, 16, 20, …): the query bins gain it as an edge.
    scores = synthetic_scores(list(ZERO_HEADS.values()), n_seqs=8, seq_len=40, width=width)
    out = nr.reference_decomposition(scores, early=18, groups=4)
    for window, m in out.items():
        for k, name in enumerate(ZERO_HEADS):
            where = (width, window, name)
            l_add, l_sat = m["leakage_pattern"][k], m["leakage_pattern_saturated"][k]
            assert l_add > 1e-3 and l_sat >= l_add - 1e-12, where  # there is leakage to decompose
            for metric, leak in (("c_res", l_add), ("c_res_meanfield", l_add), ("c_res_saturated", l_sat)):
                assert abs(m[metric][k]) <= 1e-8 * leak, (where, metric, m[metric][k], leak)
            for suffix, leak in (("", l_add), ("_meanfield", l_add), ("_saturated", l_sat)):
                assert m["c_res" + suffix][k] + m["c_mask" + suffix][k] == pytest.approx(leak, abs=1e-12), (where, suffix)
                assert m["rho_res" + suffix][k] + m["rho_mask" + suffix][k] == pytest.approx(1.0, abs=1e-12), (where, suffix)
            assert m["c_res_logit"][k] + m["c_mask_logit"][k] == pytest.approx(l_add, abs=1e-12), where
            assert m["count_share"][k] == pytest.approx(m["c_count"][k] / m["c_mask"][k], rel=1e-12), where
            assert m["count_share_saturated"][k] == pytest.approx(m["c_count_saturated"][k] / m["c_mask_saturated"][k], rel=1e-12), where
        # version 1 is not invariant to the row shift (methodology §4.0): (b) differs from (a) there, not in version 2
        assert abs(m["c_res_logit"][1] - m["c_res_logit"][0]) > 0.1 * m["leakage_pattern"][0], (width, window)
        np.testing.assert_allclose(m["leakage_pattern"][1], m["leakage_pattern"][0], rtol=1e-12)


def test_nonzero_controls(capsys):
    """methodology §4.4 (f), (g): |C_res| ≥ 0.1·L. The sign is reported, not asserted.

    (f) is methodology §4.4's (f) kernel −0.05Δ + sin(0.3Δ) + 3·[j=0] plus u(j) = 0.5·log(j+1);
    (g) is the smooth kernel −0.05Δ with a key-0 logit 3 + 0.05·i. T = 48, Q = 32, causal.
    (a) + u(j) without the sink is only reported: at T = 48 its share is below 0.1
    (about 0.06 early, 0.10 all), so it does not decide the control at this size.
    """
    heads = {
        "f_key_term": lambda i, j, d: kernel_a(d) + 3.0 * (j == 0) + u_key(j),
        "g_key0_grows": lambda i, j, d: kernel_smooth(d) + (3.0 + 0.05 * i) * (j == 0),
        "a_plus_u_reported_only": lambda i, j, d: kernel_a(d) + u_key(j),
    }
    out = nr.reference_decomposition(synthetic_scores(list(heads.values()), n_seqs=4, seq_len=48), early=32, groups=2)
    lines = []
    for window, m in out.items():
        for k, name in enumerate(heads):
            leak = m["leakage_pattern"][k]
            shares = {
                s: m["c_res" + s][k] / (m["leakage_pattern_saturated"][k] if s == "_saturated" else leak) for s in ("", "_meanfield", "_saturated")
            }
            lines.append(
                f"{window:5s} {name:24s} L={leak:.4f} ρ_res per-seq {shares['']:+.3f} "
                f"mean-field {shares['_meanfield']:+.3f} saturated {shares['_saturated']:+.3f}"
            )
            if name != "a_plus_u_reported_only":
                assert abs(shares[""]) >= 0.1 and abs(shares["_meanfield"]) >= 0.1, lines[-1]
    with capsys.disabled():
        print("\n" + "\n".join(lines))


NOISE_HEADS = {"a_relative": ZERO_HEADS["a_relative"], "d_key0_bias": ZERO_HEADS["d_key0_bias"]}


@pytest.fixture(scope="module")
def noise_floor():
    """methodology §4.4 (i): (a) and (d) with independent per-sequence noise, sd 0.3, on every logit.
    N = 32, T = 48, G = 8, query window 'all'. {metric: (estimate [H], low [H], high [H])}."""
    scores = synthetic_scores(list(NOISE_HEADS.values()), n_seqs=32, seq_len=48, noise=0.3, seed=0)
    return nr.reference_intervals(scores, early=32, groups=8, windows=("all",), saturated=False)["all"]


def test_noise_floor_meanfield_bias(noise_floor, capsys):
    """The mean-field counterfactual is biased upward by the noise (Jensen, methodology §4.4 (i)); the per-sequence one less so.

    Over 8 seeds × 2 windows × these 2 heads (N = 32), the mean-field C_res was > 0 in 32 of 32 cases
    (0.3–2.3% of L) and |per-sequence C_res| < mean-field C_res in 30 of 32 (16 of 16 in this window).
    """
    leak = noise_floor["leakage_pattern"][0]
    lines = []
    for k, name in enumerate(NOISE_HEADS):

        def rel(metric, k=k):
            est, low, high = (x[k] / leak[k] for x in noise_floor[metric])
            return f"{est:+.4f} [{low:+.4f}, {high:+.4f}]"

        lines.append(f"{name:12s} L={leak[k]:.4f}  C_res/L per-sequence {rel('c_res')}  mean-field {rel('c_res_meanfield')}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    for k in range(len(NOISE_HEADS)):
        assert noise_floor["c_res_meanfield"][0][k] > 0, lines[k]
        assert abs(noise_floor["c_res"][0][k]) < noise_floor["c_res_meanfield"][0][k], lines[k]


def test_noise_floor_per_sequence_interval_contains_zero(noise_floor):
    """methodology §4.4 (i)'s aim: a purely relative noisy head's per-sequence C_res lies within its interval of 0.

    With the jackknife that redoes the cross-fit inside each replicate (A^(−γ,−g')), measured at
    T = 48, G = 8 over seeds × both windows, the interval covered 0 in
    sd 0.3: N = 32 (8 seeds) (a) 16/16, (d) 14/16; N = 128 (4 seeds) (a) 7/8, (d) 7/8;
    sd 1.0: N = 32 (a) 16/16, (d) 10/16;            N = 128 (a) 6/8,  (d) 5/8.
    The per-sequence C_res keeps a small positive bias that shrinks about as 1/N (on (d): +0.6% of L
    at sd 0.3 and +2.9% at sd 1.0 for N = 32; +0.2–0.3% and +0.7–1.0% for N = 128), while the interval
    narrows as 1/√N. Here (seed 0) both heads cover 0; keeping each sequence's full cross-fit log a'(n)
    in the replicates instead (only P refit) gave [+0.0014, +0.0029]·L and [+0.0045, +0.0087]·L, missing 0.
    """
    for k, name in enumerate(NOISE_HEADS):
        _, low, high = (x[k] for x in noise_floor["c_res"])
        assert low <= 0 <= high, (name, low, high)


def test_version1_numbers_of_method_4_0():
    """methodology §4.0's version-1 residual shares (T = 96, dense, query window 'all', kernel −0.05Δ):
    purely relative 0.01, with a 2·log(i+1) shift −4.66, with a key-0 bias of 3: 0.98.
    Version 2 gives 0 on all three. Also methodology §4.4's (f) figures, mean-field (the dense reference's):
    +0.31 on −0.05Δ + u(j) (T = 96), −0.18 (T = 64) and −0.25 (T = 32) on −0.05Δ + sin(0.3Δ) + 3·[j=0] + u(j).
    """
    heads = [
        lambda i, j, d: kernel_smooth(d),
        lambda i, j, d: kernel_smooth(d) + 2 * np.log(i + 1.0),
        lambda i, j, d: kernel_smooth(d) + 3.0 * (j == 0),
        lambda i, j, d: kernel_smooth(d) + u_key(j),
    ]
    binning = nr.ReferenceBins(96, 32)
    m = nr.layer_metrics(nr.PairData(synthetic_scores(heads, 1, 96), binning, "all"), saturated=False)
    share_v1 = m["c_res_logit"] / m["leakage_pattern"]
    np.testing.assert_allclose(share_v1[:3], [0.01, -4.66, 0.98], atol=0.006)
    np.testing.assert_allclose(m["rho_res_meanfield"][:3], 0.0, atol=1e-8)
    assert m["rho_res_meanfield"][3] == pytest.approx(0.31, abs=0.005)
    f_method = [lambda i, j, d: kernel_a(d) + 3.0 * (j == 0) + u_key(j)]
    for seq_len, want in ((64, -0.18), (32, -0.25)):
        m = nr.layer_metrics(nr.PairData(synthetic_scores(f_method, 1, seq_len), nr.ReferenceBins(seq_len, 32), "all"), saturated=False)
        assert m["rho_res_meanfield"][0] == pytest.approx(want, abs=0.005), seq_len


def test_pair_data_and_fit_internals():
    """log a is the row softmax of s; fitting s or log a gives the same g (up to a constant) and β;
    the §4.1 design has exactly the one null direction that dropping a row column removes."""
    heads = [ZERO_HEADS["d_key0_bias"], lambda i, j, d: kernel_a(d) + u_key(j)]
    for width in (None, WIDTH):
        scores = synthetic_scores(heads, 6, 24, width=width, noise=0.5, seed=4)
        data = nr.PairData(scores, nr.ReferenceBins(24, 10), "all")
        np.testing.assert_allclose(nr.row_log_softmax(data.row, data.y_s), data.y_loga, atol=1e-12)
        g_s, beta_s, _ = nr.exact_fit(data, data.y_s)
        g_a, beta_a, _ = nr.exact_fit(data, data.y_loga)
        shift = g_s - g_a
        present = ~np.isnan(shift[:, 0])
        assert present.sum() == (width or 24)  # offsets 0..W−1 (window) or 0..T−1
        np.testing.assert_allclose(shift[present], shift[present][:1].repeat(present.sum(), 0), atol=1e-9)
        np.testing.assert_allclose(beta_s, beta_a, atol=1e-9)
        x, _, _ = data.design_exact()
        # with every row column kept, the rank is one short
        rows_all = nr.present(nr.one_hot(data.i, 24))[:, :1]
        assert np.linalg.matrix_rank(np.hstack([x, rows_all])) == x.shape[1]


def test_cross_fit_uses_other_groups_only():
    """Changing one sequence's logits changes the counterfactual of the other groups, never of its own group's other sequences."""
    heads = [ZERO_HEADS["d_key0_bias"], lambda i, j, d: kernel_a(d) + u_key(j)]
    scores = synthetic_scores(heads, 8, 20, noise=0.3, seed=1)
    binning = nr.ReferenceBins(20, 8)
    before = nr.perseq_log_ap(nr.PairData(scores, binning, "all"), groups=4)
    changed = scores.copy()
    changed[0] += np.where(changed[0] > nr.FMIN32 / 2, 0.7 * np.random.default_rng(2).standard_normal(changed[0].shape), 0.0)
    data = nr.PairData(changed, binning, "all")
    after = nr.perseq_log_ap(data, groups=4)
    assert nr.group_of(8, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    np.testing.assert_array_equal(after[data.n == 1], before[data.n == 1])  # same group as sequence 0
    for n in range(2, 8):
        assert np.abs(after[data.n == n] - before[data.n == n]).max() > 1e-6, n


def test_per_sequence_shifts_change_nothing():
    """Adding an arbitrary shift f(n, i) per sequence and row leaves every pattern-based figure unchanged."""
    heads = [ZERO_HEADS["d_key0_bias"], lambda i, j, d: kernel_smooth(d) + (3.0 + 0.05 * i) * (j == 0)]
    scores = synthetic_scores(heads, 8, 24, noise=0.3, seed=5)
    shifted = scores + np.random.default_rng(6).normal(0, 2.0, scores.shape[:3])[..., None] * (scores > nr.FMIN32 / 2)
    a = nr.reference_decomposition(scores, early=12, groups=4)
    b = nr.reference_decomposition(shifted, early=12, groups=4)
    for window in a:
        for metric in nr.PER_HEAD:
            if metric in ("leakage_logit", "leakage_logit_saturated", "leakage_linear", "c_res_logit", "c_mask_logit"):
                continue  # logit-based: not meant to be invariant
            np.testing.assert_allclose(b[window][metric], a[window][metric], rtol=0, atol=1e-10, err_msg=f"{window} {metric}")


def test_jackknife_replicates_redo_the_cross_fit():
    """Replicate g' drops group g' and refits everything without it, the per-sequence counterfactual included:
    group γ's sequences use A^(−γ,−g'), fitted on the sequences outside γ and g'. So replicate g' does not
    depend on group g' at all (in the other definition, keeping the full cross-fit's log a'(n), it did through A)."""
    heads = [ZERO_HEADS["d_key0_bias"], lambda i, j, d: kernel_a(d) + u_key(j)]
    scores = synthetic_scores(heads, 8, 20, noise=0.3, seed=7)
    binning = nr.ReferenceBins(20, 8)
    group = nr.group_of(8, 4)
    assert group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    reps = nr.layer_replicates(scores, binning, "all", 4, saturated=True)
    data = nr.PairData(scores, binning, "all")
    log_ap = nr.perseq_log_ap(data, 4)
    for drop, rep in enumerate(reps):
        keep = group != drop
        sub = nr.PairData(scores[keep], binning, "all")
        # γ's log a'(n) in the replicate: a two-way cross-fit of γ against the groups outside γ and g'
        sub_ap = nr.perseq_log_ap(sub, group[keep])
        for gamma in np.unique(group[keep]):
            own = (group[keep] == gamma)[sub.n]
            two_way = nr.perseq_log_ap(sub, (group[keep] == gamma).astype(int))
            np.testing.assert_allclose(sub_ap[own], two_way[own], rtol=0, atol=1e-12, err_msg=f"drop {drop}, γ {gamma}")
        want = nr.layer_metrics(sub, saturated=True, log_ap=sub_ap)
        for metric in nr.PER_HEAD:
            np.testing.assert_array_equal(rep[metric], want[metric], err_msg=metric)
        # the other definition (each sequence keeps the full cross-fit's log a'(n)) gives another figure
        kept = nr.layer_metrics(sub, saturated=False, log_ap=log_ap[keep[data.n]])
        assert np.abs(kept["c_res"] - rep["c_res"]).min() > 1e-9, drop
    # changing a sequence of group 0 leaves replicate 0 exactly as it was, and moves the others
    changed = scores.copy()
    changed[0] += np.where(changed[0] > nr.FMIN32 / 2, 0.7 * np.random.default_rng(2).standard_normal(changed[0].shape), 0.0)
    moved = nr.layer_replicates(changed, binning, "all", 4, saturated=True)
    for metric in nr.PER_HEAD:
        np.testing.assert_array_equal(moved[0][metric], reps[0][metric], err_msg=metric)
    for drop in range(1, 4):
        assert np.abs(moved[drop]["c_res"] - reps[drop]["c_res"]).min() > 1e-9, drop
    est = nr.layer_metrics(data, saturated=False, log_ap=log_ap)
    got = nr.intervals(est, reps, ["c_res"])["c_res"]
    for k in range(len(heads)):
        low, high = nr.jackknife(est["c_res"][k], np.array([r["c_res"][k] for r in reps]))
        assert (got[1][k], got[2][k]) == (low, high)


# ---------------------------------------------------------------------------
# poslens.measurement.pipeline against the reference, on the tiny test models
# ---------------------------------------------------------------------------

N_SEQS, SEQ_LEN, GROUPS, EARLY = 8, 40, 4, 18
TOL = 1e-8
MODEL_FIXTURES = {"llama": "tiny_llama_dir", "mistral": "tiny_mistral_dir", "gemma3": "tiny_gemma3_dir"}


class ModelCase:
    """One tiny model measured by poslens and by the reference, on the same batches (batch = group size)."""

    def __init__(self, folder: Path):
        import poslens

        self.model = poslens.load_model(folder)
        corpus = poslens.make_corpus(self.model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
        batch = N_SEQS // GROUPS
        result = poslens.measure(self.model, corpus, groups=GROUPS, early=EARLY, batch_size=batch, progress=False)
        self.table = nr.lookup(result.to_frame())
        self.binning = nr.ReferenceBins(SEQ_LEN, EARLY)
        self.scores = nr.capture_scores(self.model, corpus.tokens, GROUPS, batch_size=batch)
        self.full: dict = {}
        self.reps: dict = {}
        for layer, s in enumerate(self.scores):
            for window in ("early", "all"):
                self.full[layer, window] = nr.layer_metrics(nr.PairData(s, self.binning, window), saturated=True, groups=GROUPS)
                self.reps[layer, window] = nr.layer_replicates(s, self.binning, window, GROUPS, saturated=True)

    def got(self, layer: int, head: int, window: str, metric: str) -> tuple[float, float, float]:
        key = (layer, head, window, metric)
        if key not in self.table:
            raise AssertionError(f"poslens' table has no row for {key}")
        return tuple(float(v) for v in self.table[key])


@pytest.fixture(scope="module")
def model_cases(request):
    made: dict[str, ModelCase] = {}

    def get(kind: str) -> ModelCase:
        if kind not in made:
            made[kind] = ModelCase(request.getfixturevalue(MODEL_FIXTURES[kind]))
        return made[kind]

    return get


def close(got: float, want: float) -> bool:
    return (np.isnan(got) and np.isnan(want)) or abs(got - want) <= TOL


@pytest.mark.parametrize("kind", list(MODEL_FIXTURES))
def test_measure_matches_reference_per_head(model_cases, kind: str):
    """Every methodology §4 v2 figure (and the rest of the reference's per-head figures), value and interval ends, to 1e-8."""
    case = model_cases(kind)
    bad = []
    for (layer, window), full in case.full.items():
        ends = nr.intervals(full, case.reps[layer, window])
        for metric in nr.PER_HEAD:
            for head in range(case.model.n_heads):
                got = case.got(layer, head, window, metric)
                want = tuple(float(x[head]) for x in ends[metric])
                for part, g, w in zip(("value", "low", "high"), got, want, strict=False):
                    if not close(g, w):
                        bad.append(f"L{layer} h{head} {window} {metric} {part}: poslens {g!r} vs reference {w!r} (Δ={g - w:.3g})")
    assert not bad, f"{len(bad)} figures differ from the reference:\n" + "\n".join(bad[:40])


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_measure_matches_reference_aggregates(model_cases, kind: str):
    """Layer (head −1) and model (layer −1, head −1) aggregates of the decomposition, value and interval ends.

    An additive figure aggregates as the mean over heads, then over layers ≥ 1; a share
    as the ratio of its aggregated components; each replicate aggregates the same way.
    """
    case = model_cases(kind)
    n_layers = case.model.n_layers
    shares = SHARES  # {share: (numerator, denominator)}, the tests' metric table
    bad = []
    for window in ("early", "all"):

        def layer_mean(metric: str, layer: int, rep: int | None, window: str = window) -> float:
            src = case.full[layer, window] if rep is None else case.reps[layer, window][rep]
            return float(np.mean(src[metric]))

        def agg(metric: str, layers: list[int], rep: int | None) -> float:
            if metric in shares:
                num, den = shares[metric]
                return agg(num, layers, rep) / agg(den, layers, rep)
            return float(np.mean([layer_mean(metric, l, rep) for l in layers]))

        for metric in DECOMPOSITION:
            for layer, layers in [(l, [l]) for l in range(n_layers)] + [(-1, list(range(1, n_layers)))]:
                est = agg(metric, layers, None)
                low, high = nr.clip_to_bound(metric, *nr.jackknife(est, np.array([agg(metric, layers, g) for g in range(GROUPS)])))
                got = case.got(layer, -1, window, metric)
                for part, g, w in zip(("value", "low", "high"), got, (est, low, high), strict=False):
                    if not close(g, w):
                        bad.append(f"L{layer} agg {window} {metric} {part}: poslens {g!r} vs reference {w!r} (Δ={g - w:.3g})")
    assert not bad, f"{len(bad)} aggregates differ from the reference:\n" + "\n".join(bad[:40])


def test_models_exercise_the_decomposition(model_cases):
    """The comparison above is not vacuous: the models' heads give per-sequence, mean-field and
    logit-split figures that differ from one another, and Mistral / Gemma 3 have sliding-window layers."""
    for kind in MODEL_FIXTURES:
        case = model_cases(kind)
        full = case.full[case.model.n_layers - 1, "all"]
        assert np.all(np.abs(full["c_res"] - full["c_res_meanfield"]) > 1e-6), kind
        assert np.all(np.abs(full["c_res"] - full["c_res_logit"]) > 1e-6), kind
        visible = [(s > nr.FMIN32 / 2)[0, 0].sum(-1) for s in case.scores]
        windowed = [bool(v.max() < SEQ_LEN) for v in visible]
        assert windowed == {"llama": [False] * 3, "mistral": [True] * len(visible), "gemma3": [True, True, True, False]}[kind], (kind, windowed)


@pytest.mark.parametrize("n,groups", [(8, 4), (10, 4), (8, 2)], ids=["equal-groups", "unequal-groups", "two-groups"])
def test_measure_scores_matches_reference_on_synthetic_heads(n: int, groups: int):
    """poslens.measurement.pipeline.measure_scores (no model) on noisy synthetic heads, a causal and a window-8 layer:
    every figure, value and interval ends.

    Unequal groups (N = 10, G = 4: sizes 3, 2, 3, 2) check that a replicate redoes the cross-fit over the
    original groups that remain, not over a regrouping of its sequences; with G = 2 a replicate has nothing
    left to refit A on and keeps A^(−γ)."""
    import torch

    from poslens.measurement.pipeline import measure_scores

    heads = [
        lambda i, j, d: kernel_a(d) + 3.0 * (j == 0) + u_key(j),
        lambda i, j, d: kernel_smooth(d) + (3.0 + 0.05 * i) * (j == 0),
        ZERO_HEADS["b_row_shift"],
    ]
    t, early = 32, 18
    # float32, as captured scores are (masked at float32's minimum); the reference reads the same values in float64
    layers32 = [synthetic_scores(heads, n, t, width=w, noise=0.3, seed=10 + k).astype(np.float32) for k, w in enumerate((None, WIDTH))]
    layers = [x.astype(np.float64) for x in layers32]
    result = measure_scores([torch.from_numpy(x) for x in layers32], groups=groups, early=early, layer_windows=[None, WIDTH])
    table = nr.lookup(result.to_frame())
    binning = nr.ReferenceBins(t, early)
    bad = []
    for layer, s in enumerate(layers):
        for window in ("early", "all"):
            full = nr.layer_metrics(nr.PairData(s, binning, window), saturated=True, groups=groups)
            ends = nr.intervals(full, nr.layer_replicates(s, binning, window, groups, saturated=True))
            for metric in DECOMPOSITION + ("leakage_pattern", "leakage_pattern_saturated"):
                for head in range(len(heads)):
                    key = (layer, head, window, metric)
                    assert key in table, key
                    for part, g, w in zip(("value", "low", "high"), table[key], (x[head] for x in ends[metric]), strict=False):
                        if not close(float(g), float(w)):
                            bad.append(f"{key} {part}: poslens {g!r} vs reference {w!r} (Δ={g - w:.3g})")
    assert not bad, f"{len(bad)} figures differ from the reference:\n" + "\n".join(bad[:40])
