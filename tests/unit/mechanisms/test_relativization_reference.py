"""poslens' relativization (methodology §11) against an independent dense reference.

``relativize_reference.py`` fits the edit by explicit one-hot least squares on
full captured scores (pair-weighted minimum-norm solution), calibrates bottom up
with its own hooks (one forward per layer), runs the edited forward itself
(every layer edited, each captured before its own edit) and computes the
leakage figures with ``naive_reference``'s textbook fits. poslens streams sums,
solves normal equations, calibrates in one forward and measures through
``poslens.measure(..., interventions=[Relativization(fit)])``. They must agree
to 1e-8 on A, κ, the edit tensor and the edited figures, in every mode, on a
causal tiny Llama and on a tiny Mistral with a sliding window (and A, κ and the
edit tensor on the Llama under the ``window:8`` variant).

The models run in float64 so that the two sides' forwards (one batch against
poslens' group batches, and two ways of rounding an edit into the scores)
differ by rounding of order 1e-15 (measured: the figures agree to ~2e-13); in
float32 the edits' rounding gives A differences of ~2e-7 from layer 1 on. The tiny models get
larger random weights (initializer_range 0.1) so that their attention is far
from uniform and the edit moves the figures by far more than the tolerance.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import poslens
from poslens.mechanisms.relativization import Relativization
from poslens.mechanisms.relativization_fit import calibrate, edit_tensor
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[2]))
import naive_reference as nr  # noqa: E402
import relativize_reference as rr  # noqa: E402

# EARLY = 18 is not a bin edge (…, 16, 20, …): the query bins of the fit and of the figures gain it.
N_CAL, N_SEQS, SEQ_LEN, GROUPS, EARLY = 8, 8, 24, 2, 18
TOL = 1e-8
WINDOWS = ("early", "all")
METRICS = ("leakage_pattern", "c_res", "c_mask")
# name: (kind, seed, variant). The tiny Mistral has a native sliding window of 8 in every layer; "window:8"
# imposes one on the Llama through poslens' variant hook (which the reference's forward runs too).
CASES = {"llama": ("llama", 0, None), "mistral": ("mistral", 1, None), "llama-window8": ("llama", 0, "window:8")}
MEASURED = ("llama", "mistral")  # the cases whose edited figures are compared (the window variant's fit only)


# -- the reference on its own ------------------------------------------------


def _synthetic(t: int, window: int | None, rng: np.random.Generator, heads: int = 2):
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    visible = (j <= i) & ((i - j < window) if window else True)
    g = rng.normal(size=(heads, t))
    h = rng.normal(size=(heads, t))
    relative = g[:, i - j] + 1.5 * (j == 0) + h[:, i]
    return visible, relative


@pytest.mark.parametrize("window", [None, 8])
def test_reference_edit_removes_exactly_the_absolute_part(window):
    """Relative logits (any g, a constant sink, any row shift) get E = 0; adding absolute cell terms and a
    key-0 logit growing with the query bin gives E ≠ 0, and s − E is then exactly relative (g + β + h fit it
    with zero residual)."""
    t, rng = 32, np.random.default_rng(0)
    visible, relative = _synthetic(t, window, rng)
    masked = lambda x: np.where(visible, x, nr.FMIN32)[None].repeat(3, 0)  # noqa: E731
    fit, st = rr.fit_layer(masked(relative), EARLY)
    assert np.abs(fit.edits["all"]).max() < 1e-10
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    bins = nr.ReferenceBins(t, EARLY)
    cell_terms = rng.normal(size=(2, bins.n_query_bins, bins.n_offset_bins))
    kappa = 0.4 * np.log1p(np.arange(bins.n_query_bins))  # a key-0 logit growing with the query bin
    absolute = cell_terms[:, bins.query_bin[i], bins.offset_bin[np.abs(i - j)]] + kappa[bins.query_bin[i]] * (j == 0)
    fit, st = rr.fit_layer(masked(relative + absolute), EARLY)
    e = fit.edits["all"]
    assert np.abs(e).max() > 0.1
    assert (e[:, ~st.visible] == 0).all() and (e[:, 0] == 0).all()
    rest = st.values(relative + absolute - e)
    resid = rest - st.u_m @ (st.u_m.T @ rest)
    assert np.abs(resid).max() < 1e-9
    # the modes split E into its cell part and its key-0 part
    np.testing.assert_allclose(fit.edits["key0"] + fit.edits["all-but-key0"], e, rtol=0, atol=1e-14)
    assert np.abs(fit.edits["key0"][:, :, 1:]).max() == 0


def test_reference_minimum_norm_is_the_smallest_edit():
    """Moving (A, κ) along a direction that M absorbs keeps the fit and makes ‖E‖ larger."""
    t, rng = 24, np.random.default_rng(1)
    visible, relative = _synthetic(t, None, rng, heads=1)
    noisy = np.where(visible, relative + rng.normal(size=(6, 1, t, t)), nr.FMIN32)
    fit, st = rr.fit_layer(noisy, EARLY)
    assert st.null.shape[1] > 0  # span(A, κ) meets M: the minimum-norm choice matters
    x = np.concatenate([fit.cells[0].reshape(-1)[st.cells], fit.key0[0][st.kappa_bins]])
    e = st.z_w @ x
    for k in range(st.null.shape[1]):
        other = st.z_w @ (x + 0.1 * st.null[:, k])
        assert (other**2).sum() > (e**2).sum()


# -- the reference against poslens --------------------------------------------


class Case:
    """A tiny model, its calibration and measurement corpora, and the fits and figures of both sides, made on demand."""

    def __init__(self, folder: Path, variant: str | None):
        self.model = poslens.load_model(folder, variant=variant, dtype=torch.float64)
        self.cal = poslens.make_corpus(self.model, "random", n_seqs=N_CAL, seq_len=SEQ_LEN, position0="bos", seed=11)
        self.corpus = poslens.make_corpus(self.model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
        assert not torch.equal(self.cal.tokens, self.corpus.tokens)  # calibration and measurement corpora differ
        self._fits: dict = {}
        self._refs: dict = {}
        self._figures: dict = {}

    def fit(self, mode: str):
        if mode not in self._fits:
            self._fits[mode] = calibrate(self.model, self.cal, mode=mode, early=EARLY)
        return self._fits[mode]

    def ref(self, mode: str) -> rr.Calibration:
        if mode not in self._refs:
            self._refs[mode] = rr.calibrate(self.model, self.cal.tokens, mode, EARLY)
        return self._refs[mode]

    def figures(self, mode: str | None) -> dict:
        if mode not in self._figures:
            edits = None if mode is None else self.ref(mode).edits
            self._figures[mode] = rr.edited_figures(self.model, self.corpus.tokens, edits, EARLY, GROUPS, WINDOWS, METRICS)
        return self._figures[mode]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    made: dict[str, Case] = {}

    def get(name: str) -> Case:
        if name not in made:
            kind, seed, variant = CASES[name]
            folder = save_tiny_model(tmp_path_factory.mktemp(f"relref_{name}"), kind, seed=seed, initializer_range=0.1)
            made[name] = Case(folder, variant)
        return made[name]

    return get


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
@pytest.mark.parametrize("mode", rr.MODES)
@pytest.mark.parametrize("name", list(CASES))
def test_fit_matches_reference(cases, name: str, mode: str):
    """(a) A and κ of every layer and head, calibrated bottom up in each mode, and (c) the edit tensor."""
    case = cases(name)
    fit, ref = case.fit(mode), case.ref(mode)
    assert fit.mode == mode and fit.seq_len == SEQ_LEN
    assert fit.cells.shape == ref.cells.shape and fit.key0.shape == ref.key0.shape
    assert np.abs(ref.cells).max() > 0.1 and np.abs(ref.key0).max() > 0.1  # a nonzero edit, so the check can fail
    for layer in range(case.model.n_layers):
        da = np.abs(fit.cells[layer] - ref.cells[layer]).max()
        dk = np.abs(fit.key0[layer] - ref.key0[layer]).max()
        assert da <= TOL and dk <= TOL, f"{name} {mode} layer {layer}: |ΔA| = {da:.3g}, |Δκ| = {dk:.3g}"
        e = edit_tensor(fit, layer)
        assert e.dtype == torch.float64 and tuple(e.shape) == ref.edits[layer].shape
        de = np.abs(e.numpy() - ref.edits[layer]).max()
        assert de <= TOL, f"{name} {mode} layer {layer}: |ΔE| = {de:.3g}"
        assert (e[:, 0] == 0).all()  # row 0 untouched
        visible = np.triu(np.ones((SEQ_LEN, SEQ_LEN), bool), 1)  # above the diagonal: never visible
        assert (e.numpy()[:, visible] == 0).all()
    if name != "llama":  # the window of 8 hides key 0 from rows ≥ 8, and pairs of offset ≥ 8
        assert list(case.model.sliding_windows) == [8] * case.model.n_layers
        i, j = np.meshgrid(np.arange(SEQ_LEN), np.arange(SEQ_LEN), indexing="ij")
        assert all((edit_tensor(fit, layer).numpy()[:, i - j >= 8] == 0).all() for layer in range(case.model.n_layers))


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
@pytest.mark.parametrize("mode", rr.MODES)
@pytest.mark.parametrize("name", MEASURED)
def test_edited_figures_match_reference(cases, name: str, mode: str):
    """(b) L(log a), C_res, C_mask per head and per layer of the cumulative edited forward, windows early and all."""
    case = cases(name)
    fit = case.fit(mode)
    result = poslens.measure(
        case.model,
        case.corpus,
        interventions=[Relativization(fit)],
        groups=GROUPS,
        early=EARLY,
        batch_size=N_SEQS // GROUPS,
        progress=False,
    )
    frame = result.to_frame()
    assert set(frame["intervention"]) == {f"relativize:{mode}"}
    got = nr.lookup(frame)
    want, base = case.figures(mode), case.figures(None)
    bad, moved = [], 0.0
    for (layer, window), figures in want.items():
        for metric in METRICS:
            for head in list(range(case.model.n_heads)) + [-1]:
                ref = figures[metric].mean() if head == -1 else figures[metric][head]
                value = got[(layer, head, window, metric)][0]
                if not abs(value - ref) <= TOL:
                    bad.append(f"L{layer} h{head} {window} {metric}: poslens {value!r} vs reference {ref!r} (Δ={value - ref:.3g})")
            change = np.abs(figures[metric] - base[(layer, window)][metric]).max()
            if layer == 0:  # nothing below layer 0 is edited: its figures are the unedited model's
                assert change <= 1e-12, (layer, window, metric, change)
            moved = max(moved, change)
    assert not bad, f"{name} {mode}: {len(bad)} figures differ from the reference:\n" + "\n".join(bad[:30])
    assert moved > 1e-4, f"the edit moves no figure by more than {moved:.3g}: the comparison could not fail"
