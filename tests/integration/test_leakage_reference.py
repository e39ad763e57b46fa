"""poslens' leakage figures against a naive, independent reference (methodology §3–§5).

The reference (``naive_reference.py``) captures every layer's full scores,
builds the pair-level dataset in numpy float64 and fits explicit one-hot
designs with ``np.linalg.lstsq``. poslens streams cell sums and solves normal
equations; the two must agree to 1e-8 on every per-head figure, every layer,
both query windows, for a full-causal, a sliding-window and a mixed-window
model, and for an imposed ``window:W`` variant. Aggregates, jackknife intervals
and the cross-fitted ΔR² are recomputed from their written definitions. The
reference's bins are rebuilt from methodology §3.1's rule, and the scores both read
are checked against the plain Hugging Face model's attention weights.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

import poslens
from poslens.capture import row_blocks as capture_module
from poslens.fit.binning import Binning
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[1]))
# the tests' metric table: SHARES, {share: (numerator, denominator)}, aggregate as the ratio of aggregated components
# (checked below); ADDITIVE, every other per-head figure, aggregate as the mean over heads
import naive_reference as nr  # noqa: E402
from metric_table import ADDITIVE, SHARES  # noqa: E402

# EARLY = 18 is not one of the bin edges (…, 16, 20, …): the query bins must gain it as an edge.
N_SEQS, SEQ_LEN, GROUPS, EARLY, WIDTH = 8, 40, 4, 18, 8
TOL = 1e-8
WINDOWS = ("early", "all")
CASES = ("llama", "mistral", "gemma3", "llama-window8")
# Per-head float64 work budget for the capture's row blocks: at T = 40 this gives blocks of 1 to 12 rows,
# with key spans that start after 0 on the sliding-window layers, so the block bookkeeping is under test.
BLOCK_PER_HEAD = 150


def measure_in_blocks(model, corpus, per_head: int | None, **kwargs):
    """poslens.measurement.pipeline with the capture's row-block budget (CPU and CUDA) set to ``per_head`` × batch × heads elements."""
    saved = capture_module.CPU_BLOCK_ELEMENTS, capture_module.CUDA_BLOCK_ELEMENTS
    batch = kwargs.get("batch_size") or 1
    budget = per_head * batch * model.n_heads if per_head else 1 << 40
    capture_module.CPU_BLOCK_ELEMENTS = capture_module.CUDA_BLOCK_ELEMENTS = budget
    try:
        return poslens.measure(model, corpus, progress=False, **kwargs)
    finally:
        capture_module.CPU_BLOCK_ELEMENTS, capture_module.CUDA_BLOCK_ELEMENTS = saved


class Case:
    """One model measured by poslens and by the naive reference, on the same batches."""

    def __init__(self, folder: Path, variant: str | None):
        self.model = poslens.load_model(folder, variant=variant)
        self.corpus = poslens.make_corpus(self.model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
        # batch_size = group size, so poslens and the reference run identical forward passes.
        self.settings = {"groups": GROUPS, "early": EARLY, "batch_size": N_SEQS // GROUPS}
        self.result = measure_in_blocks(self.model, self.corpus, BLOCK_PER_HEAD, **self.settings)
        self.table = nr.lookup(self.result.to_frame())
        self.binning = nr.ReferenceBins(SEQ_LEN, EARLY)
        self.scores = nr.capture_scores(self.model, self.corpus.tokens, GROUPS)
        self.naive = nr.naive_table(self.scores, self.binning, GROUPS)

    def got(self, layer: int, head: int, window: str, metric: str, part: int = 0) -> float:
        key = (layer, head, window, metric)
        if key not in self.table:
            raise AssertionError(f"poslens' table has no row for {key}")
        return float(self.table[key][part])


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory: pytest.TempPathFactory):
    made: dict[str, Path] = {}

    def folder(kind: str) -> Path:
        if kind not in made:
            # seed 1 for Mistral, so that it is not the seed-0 Llama under another window
            made[kind] = save_tiny_model(tmp_path_factory.mktemp(f"ref_{kind}"), kind, seed=int(kind == "mistral"))
        return made[kind]

    return folder


@pytest.fixture(scope="module")
def cases(tiny_folders):
    """Measured cases, built once per module and shared by every test that names them."""
    made: dict[str, Case] = {}

    def get(name: str) -> Case:
        if name not in made:
            kind, _, variant = name.partition("-")
            made[name] = Case(tiny_folders(kind), f"window:{WIDTH}" if variant == "window8" else None)
        return made[name]

    return get


@pytest.fixture(params=CASES)
def case(request, cases) -> Case:
    return cases(request.param)


@pytest.mark.parametrize("seq_len", [1, 5, 16, 17, 40, 64, 100, 257, 1000, 4096])
@pytest.mark.parametrize("early", [2, 16, 18, 32, 33, 5000])
def test_bins_match_the_written_rule(seq_len: int, early: int):
    mine, ref = Binning(seq_len, early=early), nr.ReferenceBins(seq_len, early)
    assert list(mine.offset_edges) == ref.offset_edges and list(mine.query_edges) == ref.query_edges
    assert mine.offset_bin.tolist() == ref.offset_bin.tolist() and mine.query_bin.tolist() == ref.query_bin.tolist()


def test_bins_by_hand():
    # methodology §3.1: one bin per value up to 15, then ⌈1.25·e⌉: 16, 20, 25, 32, 40, 50, 63, 79, …
    assert nr.ReferenceBins(100, 32).offset_edges == list(range(17)) + [20, 25, 32, 40, 50, 63, 79, 99, 100]
    assert nr.ReferenceBins(40, 18).query_edges == list(range(17)) + [18, 20, 25, 32, 40]


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma3"])
def test_captured_scores_are_the_native_models_logits(tiny_folders, kind: str):
    """softmax(hook_attn_scores) equals the attention weights of the plain HF model (eager attention)."""
    import torch
    import transformers

    folder = tiny_folders(kind)
    model = poslens.load_model(folder)
    tokens = poslens.make_corpus(model, "random", n_seqs=2, seq_len=SEQ_LEN, position0="bos", seed=3).tokens
    captured: dict[int, torch.Tensor] = {}

    def keep(layer: int):
        return lambda scores, hook: captured.__setitem__(layer, scores.detach().double())

    run_with_hooks(model, tokens, [(attn_scores(layer), keep(layer)) for layer in range(model.n_layers)])
    native = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        attentions = native(tokens, output_attentions=True).attentions
    assert len(attentions) == model.n_layers == len(captured)
    for layer in range(model.n_layers):
        torch.testing.assert_close(torch.softmax(captured[layer], -1), attentions[layer].double(), rtol=0, atol=1e-5)


def test_per_head_figures_match_naive_reference(case: Case):
    assert [s.shape for s in case.scores] == [(N_SEQS, case.model.n_heads, SEQ_LEN, SEQ_LEN)] * case.model.n_layers
    bad = []
    for (layer, window), figures in case.naive.items():
        for metric in nr.PER_HEAD:
            for head, want in enumerate(figures[metric]):
                got = case.got(layer, head, window, metric)
                if not abs(got - want) <= TOL:
                    bad.append(f"L{layer} h{head} {window} {metric}: poslens {got!r} vs naive {want!r} (Δ={got - want:.3g})")
    assert not bad, f"{len(bad)} figures differ from the naive reference:\n" + "\n".join(bad[:30])


@pytest.mark.parametrize("case", ["llama", "llama-window8"], indirect=True)
@pytest.mark.parametrize("per_head", [1, None], ids=["one-row-blocks", "one-block"])
def test_row_blocks_do_not_change_results(case: Case, per_head: int | None):
    other = measure_in_blocks(case.model, case.corpus, per_head, **case.settings).to_frame()
    mine = case.result.to_frame()
    assert len(other) == len(mine)
    np.testing.assert_allclose(other[["value", "ci_low", "ci_high"]], mine[["value", "ci_low", "ci_high"]], rtol=0, atol=1e-10)


def test_figures_are_sane(case: Case):
    """Ranges that hold by construction, so a sign or normalisation slip shows at once."""
    for (layer, window), f in case.naive.items():
        for metric in ("leakage_pattern", "leakage_logit", "leakage_count", "leakage_pattern_saturated"):
            assert np.all(f[metric] >= -1e-12) and np.all(f[metric] <= 1 + 1e-12), (layer, window, metric)
        assert np.all(f["leakage_pattern_saturated"] >= f["leakage_pattern"] - 1e-12)
        np.testing.assert_allclose(f["rho_res"] + f["rho_mask"], 1.0, atol=1e-10)
        np.testing.assert_allclose(f["c_res"] + f["c_mask"], f["leakage_pattern"], atol=1e-12)
        for head in range(case.model.n_heads):
            got = [case.got(layer, head, window, m) for m in ("c_res", "c_mask", "leakage_pattern")]
            assert abs(got[0] + got[1] - got[2]) < 1e-10


def test_share_list_is_the_packages():
    """The ratios checked here (the tests' metric table, which the reference uses too) are the ones poslens aggregates as ratios."""
    from poslens.fit.metrics import RATIOS

    assert dict(RATIOS) == SHARES
    assert set(SHARES) <= set(nr.PER_HEAD)


def test_aggregates_are_means_over_heads_and_layers(case: Case):
    n_layers, n_heads = case.model.n_layers, case.model.n_heads
    for window in WINDOWS:
        for metric in ADDITIVE:
            layer_agg = []
            for layer in range(n_layers):
                per_head = case.naive[(layer, window)][metric]
                got = case.got(layer, -1, window, metric)
                assert got == pytest.approx(per_head.mean(), abs=TOL), (layer, window, metric)
                # and the aggregate is the mean of poslens' own per-head rows
                own = np.mean([case.got(layer, h, window, metric) for h in range(n_heads)])
                assert got == pytest.approx(own, abs=1e-12), (layer, window, metric)
                layer_agg.append(got)
            model_agg = case.got(-1, -1, window, metric)
            assert model_agg == pytest.approx(np.mean(layer_agg[1:]), abs=1e-12), (window, metric)
        # shares of an aggregate are ratios of aggregated components
        for layer in list(range(n_layers)) + [-1]:

            def g(m, layer=layer, window=window):
                return case.got(layer, -1, window, m)

            for share, (num, den) in SHARES.items():
                assert g(share) == pytest.approx(g(num) / g(den), abs=1e-10), (layer, window, share)
            for suffix in ("", "_saturated", "_meanfield"):
                leak = g("leakage_pattern_saturated" if suffix == "_saturated" else "leakage_pattern")
                assert g("c_res" + suffix) + g("c_mask" + suffix) == pytest.approx(leak, abs=1e-10), (layer, window, suffix)


@pytest.mark.parametrize("case", ["llama", "gemma3"], indirect=True)
def test_jackknife_intervals_match_leave_one_group_out_refits(case: Case):
    """θ̂ ± t_{0.975,G−1}·sqrt((G−1)/G Σ(θ_(g) − θ̄)²), θ_(g) refit naively without group g
    (the per-sequence counterfactual's cross-fit redone inside the replicate: :func:`naive_reference.layer_replicates`)."""
    group = nr.group_of(N_SEQS, GROUPS)
    assert group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    n_layers, n_heads = case.model.n_layers, case.model.n_heads
    for window in WINDOWS:
        reps = {layer: nr.layer_replicates(case.scores[layer], case.binning, window, GROUPS) for layer in range(1, n_layers)}
        for layer in range(1, n_layers):
            full = case.naive[(layer, window)]
            for metric in ("leakage_pattern", "c_res", "rho_res", "c_res_meanfield", "leakage_linear", "key0_mass"):
                for head in range(n_heads):
                    rep = np.array([r[metric][head] for r in reps[layer]])
                    low, high = nr.clip_to_bound(metric, *nr.jackknife(full[metric][head], rep))
                    assert case.got(layer, head, window, metric, 1) == pytest.approx(low, abs=TOL), (layer, head, window, metric)
                    assert case.got(layer, head, window, metric, 2) == pytest.approx(high, abs=TOL), (layer, head, window, metric)
            # layer aggregate of a share: ratio of the head-means in every replicate
            rep_rho = np.array([r["c_res"].mean() / r["leakage_pattern"].mean() for r in reps[layer]])
            low, high = nr.jackknife(full["c_res"].mean() / full["leakage_pattern"].mean(), rep_rho)
            assert case.got(layer, -1, window, "rho_res", 1) == pytest.approx(low, abs=TOL)
            assert case.got(layer, -1, window, "rho_res", 2) == pytest.approx(high, abs=TOL)
        # model aggregate (mean over layers ≥ 1 of head-means)
        rep_model = np.array([np.mean([reps[l][g]["c_res"].mean() for l in range(1, n_layers)]) for g in range(GROUPS)])
        est = np.mean([case.naive[(l, window)]["c_res"].mean() for l in range(1, n_layers)])
        low, high = nr.jackknife(est, rep_model)
        assert case.got(-1, -1, window, "c_res", 1) == pytest.approx(low, abs=TOL)
        assert case.got(-1, -1, window, "c_res", 2) == pytest.approx(high, abs=TOL)


@pytest.mark.parametrize("case", ["llama"], indirect=True)
def test_heldout_delta_r2_matches_explicit_cross_fit(case: Case):
    """Fit R and F on all groups but g by lstsq, score on g; Σ_g ΔSSE_g / Σ_g SST_g."""
    t = stats.t.ppf(0.975, GROUPS - 1)
    for layer, head in ((1, 2), (2, 0)):
        for window in WINDOWS:
            data = nr.PairData(case.scores[layer], case.binning, window)
            for which, metric in (("loga", "leakage_pattern_heldout"), ("s", "leakage_logit_heldout")):
                value, folds = nr.heldout_leakage(data, GROUPS, N_SEQS, head, which)
                half = t * folds.std(ddof=1) / np.sqrt(GROUPS)
                where = (layer, head, window, metric)
                assert case.got(*where) == pytest.approx(value, abs=TOL), where
                assert case.got(*where, part=1) == pytest.approx(value - half, abs=TOL), where
                assert case.got(*where, part=2) == pytest.approx(value + half, abs=TOL), where
                if which == "loga":
                    in_sample = case.naive[(layer, window)]["leakage_pattern"][head]
                    where = (layer, head, window, "leakage_pattern_bias")
                    assert case.got(*where) == pytest.approx(in_sample - value, abs=TOL), where
                    assert case.got(*where, part=1) == pytest.approx(in_sample - value - half, abs=TOL), where
                    assert case.got(*where, part=2) == pytest.approx(in_sample - value + half, abs=TOL), where
    # held-out aggregates are means over heads, then over layers ≥ 1
    n_layers, n_heads = case.model.n_layers, case.model.n_heads
    for window in WINDOWS:
        for metric in ("leakage_pattern_heldout", "leakage_logit_heldout"):
            layer_agg = [case.got(l, -1, window, metric) for l in range(n_layers)]
            for layer in range(n_layers):
                heads = [case.got(layer, h, window, metric) for h in range(n_heads)]
                assert layer_agg[layer] == pytest.approx(np.mean(heads), abs=1e-12), (layer, window, metric)
            assert case.got(-1, -1, window, metric) == pytest.approx(np.mean(layer_agg[1:]), abs=1e-12)


@pytest.mark.parametrize("case", ["llama-window8"], indirect=True)
def test_window_variant_count_term_saturates(case: Case):
    """Under ``window:W`` the count term is c_i = log min(i+1, W): constant once i ≥ W − 1."""
    assert case.model.variant.sliding_window == WIDTH
    positions = np.arange(SEQ_LEN)
    c = np.log(np.minimum(positions + 1, WIDTH))
    assert np.all(c[WIDTH - 1 :] == c[WIDTH - 1]) and np.all(np.diff(c[:WIDTH]) > 0)
    # the variant really imposes the window: visible keys per query = min(i+1, W) in every layer and head
    for scores in case.scores:
        visible = (scores > nr.FMIN32 / 2).sum(-1)
        assert np.all(visible == np.minimum(positions + 1, WIDTH))

    def count_fn(i):
        return np.log(np.minimum(i + 1, WIDTH))

    def causal_fn(i):
        return np.log(i + 1.0)

    for layer in range(case.model.n_layers):
        for window in WINDOWS:
            windowed = nr.layer_metrics(nr.PairData(case.scores[layer], case.binning, window, count=count_fn))
            causal = nr.layer_metrics(nr.PairData(case.scores[layer], case.binning, window, count=causal_fn))
            want, wrong = windowed["leakage_count"][0], causal["leakage_count"][0]
            assert abs(want - wrong) > 1e-3  # the check can tell the two count terms apart
            for head in range(case.model.n_heads):
                assert case.got(layer, head, window, "leakage_count") == pytest.approx(want, abs=TOL), (layer, head, window)
                c_count = case.got(layer, head, window, "c_count")
                assert c_count == pytest.approx(windowed["c_count"][head], abs=TOL), (layer, head, window)


def test_scores_far_below_the_row_maximum_match_the_reference():
    """Head 0's key-0 logit sits 1000 above its other keys, so s − max is far below exp's float64 range (the
    capture floors it at EXP_FLOOR before exp); layer 1's window masks key 0 for later rows, whose weight
    must stay exactly 0. Every per-head figure still matches the naive reference."""
    from poslens.measurement.pipeline import measure_scores

    t, n, heads, early, groups, windows = 24, 8, 2, 8, 4, [None, 6]
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(n, heads, t, t))
    logits[:, 0, :, 0] += 1000.0
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    layers = []
    for w in windows:
        visible = (j <= i) & ((i - j < w) if w else True)
        layers.append(np.where(visible, logits, nr.FMIN32).astype(np.float32).astype(np.float64))
    assert (layers[0][:, 0, 1:, 1:] - 1000 < capture_module.EXP_FLOOR).any()
    result = measure_scores([torch.from_numpy(x).float() for x in layers], groups=groups, early=early, layer_windows=windows)
    naive = nr.naive_table(layers, nr.ReferenceBins(t, early), groups)
    bad = []
    for (layer, window), figures in naive.items():
        for metric in nr.PER_HEAD:
            for head, want in enumerate(figures[metric]):
                got = result.value(metric, window, layer=layer, head=head)
                if not abs(got - want) <= TOL:
                    bad.append(f"L{layer} h{head} {window} {metric}: poslens {got!r} vs naive {want!r}")
    assert not bad, "\n".join(bad[:30])
