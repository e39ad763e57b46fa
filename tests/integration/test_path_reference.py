"""The path-specific tests (methodology §12) against an independent dense reference (``path_reference.py``).

The reference computes RoPE from the config, edits the forward with its own hooks on
``hook_q`` / ``hook_k`` / ``hook_attn_scores`` / ``hook_pattern``, keeps every tensor whole
and computes the readouts with explicit arrays. poslens edits through
:class:`~poslens.mechanisms.key_phase.KeyPhaseFreeze` (the model's own rotary frequencies,
applied to the rotated q and k) and :class:`~poslens.mechanisms.mask_only_sink.MaskOnlySinkProfile`,
and streams the readouts (:func:`~poslens.mechanisms.path_tests.run_once`,
:func:`~poslens.fit.path_figures.run_figures`). They must agree to 1e-8 on float64 tiny
models: StableLM (a quarter of each head rotated), Mistral (a sliding window of 8) and Llama
under the ``ntk:2`` variant (transformers' Llama ignores ``partial_rotary_factor``, so the
partial-rotary case is StableLM's own).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import poslens
from poslens.fit.path_figures import run_figures
from poslens.mechanisms.key_phase import KeyPhaseFreeze
from poslens.mechanisms.mask_only_sink import MaskOnlySinkProfile
from poslens.mechanisms.path_tests import run_once
from poslens.model.hooks import attn_pattern, run_with_hooks
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[1]))
import naive_reference as nr  # noqa: E402
import path_reference as pr  # noqa: E402

N_SEQS, SEQ_LEN, GROUPS, EARLY, PENALTY = 8, 24, 2, 8, 0.1
TOL = 1e-8
CASES = {"stablelm": ("stablelm", None), "mistral": ("mistral", None), "llama-ntk2": ("llama", "ntk:2")}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    kind, variant = CASES[request.param]
    folder = save_tiny_model(tmp_path_factory.mktemp(request.param), kind, seed=3, initializer_range=0.1)
    model = poslens.load_model(folder, variant=variant or "base", dtype=torch.float64)
    corpus = poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, seed=0)
    return request.param, model, corpus, pr.ReferenceForward(model)


def _poslens_forward(model, tokens, edit) -> tuple[list[np.ndarray], np.ndarray]:
    """Patterns of every layer and the logits of poslens' edited forward."""
    patterns: list[list[np.ndarray]] = [[] for _ in range(model.n_layers)]

    def keep(layer):
        def fn(x, hook):
            patterns[layer].append(x.detach().to(torch.float64).numpy().copy())

        return fn

    logits = []
    for start in range(0, tokens.shape[0], 4):
        batch = tokens[start : start + 4]
        hooks = edit.hooks(model, batch) + [(attn_pattern(l), keep(l)) for l in range(model.n_layers)] + edit.hooks_after_capture(model, batch)
        logits.append(run_with_hooks(model, batch, hooks, logits=True).to(torch.float64).numpy())
    return [np.concatenate(p) for p in patterns], np.concatenate(logits)


@pytest.mark.parametrize("key, offset", [(0, 1), (0, 8), (0, SEQ_LEN // 2), (1, 8)])
def test_key_phase_forward_matches_the_reference(case, key, offset):
    name, model, corpus, ref = case
    window = lambda layer: model.sliding_windows[layer]  # noqa: E731
    dense = ref.run(corpus.tokens, edit_scores=ref.key_phase_edit(key, offset, window))
    unedited = ref.run(corpus.tokens)
    patterns, logits = _poslens_forward(model, corpus.tokens, KeyPhaseFreeze(offset, key=key))
    for layer in range(model.n_layers):
        assert np.abs(patterns[layer] - dense.patterns[layer]).max() < TOL, (name, layer)
    assert np.abs(logits - dense.logits).max() < TOL
    # the edit moves the model by far more than the tolerance: the comparison can fail
    assert np.abs(dense.logits - unedited.logits).max() > 1e3 * TOL


def test_key_phase_readouts_match_the_reference(case):
    name, model, corpus, ref = case
    dense = ref.run(corpus.tokens, edit_scores=ref.key_phase_edit(0, 8, lambda layer: model.sliding_windows[layer]))
    sums, residual, nll = run_once(model, corpus, [KeyPhaseFreeze(8)], GROUPS, EARLY, batch_size=4)
    figures = run_figures(sums, residual, nll, [], PENALTY)
    table = figures.frame().set_index(["metric", "layer", "query_window", "query_bin"])
    fold = dict(zip(map(tuple, figures.keys[["metric", "layer", "query_window", "query_bin"]].values), figures.replicates, strict=True))
    for layer in range(model.n_layers):
        for window in ("early", "all"):
            parts = pr.pattern_parts(dense.scores[layer], EARLY, window)
            for metric, per_head in parts.items():
                got = table.loc[(metric, layer, window, -1), "value"]
                assert abs(got - per_head.mean()) < TOL, (name, metric, layer, window)
        for site, features in (("resid", dense.resid[layer]), ("attn_out", dense.attn_out[layer])):
            pooled, per_fold = pr.probe(features, GROUPS, PENALTY)
            assert abs(table.loc[(f"{site}_probe_r2", layer, "all", -1), "value"] - pooled) < TOL, (name, site, layer)
            assert np.abs(fold[(f"{site}_probe_r2", layer, "all", -1)] - per_fold).max() < TOL
            assert abs(table.loc[(f"{site}_eta2", layer, "all", -1), "value"] - pr.eta_squared(features)) < TOL
    loss = pr.next_token_loss(dense.logits, corpus.tokens.numpy())
    assert np.abs(nll - loss).max() < TOL
    assert abs(table.loc[("next_token_loss", -1, "all", -1), "value"] - loss[:, 1:].mean()) < TOL


def test_mask_only_profile_matches_the_reference(case):
    name, model, corpus, ref = case
    baseline = poslens.measure(model, corpus, groups=GROUPS, early=EARLY, batch_size=4, probe=False, progress=False)
    heads = [(1, 0), (2, 1), (2, 3)]
    unedited = ref.run(corpus.tokens)
    absolute = {layer: pr.absolute_cells(unedited.scores[layer], GROUPS, EARLY) for layer in {l for l, _ in heads}}
    groups = nr.group_of(N_SEQS, GROUPS)
    for dose in (0.5, 1.0):
        dense = ref.run(corpus.tokens, edit_pattern=pr.mask_only_edit(absolute, heads, groups, EARLY, SEQ_LEN, dose))
        profile = MaskOnlySinkProfile.from_baseline(baseline, corpus, heads, dose=dose)
        patterns, logits = _poslens_forward(model, corpus.tokens, _WithAfter(profile))
        for layer in range(model.n_layers):
            assert np.abs(patterns[layer] - dense.patterns[layer]).max() < TOL, (name, dose, layer)
        assert np.abs(logits - dense.logits).max() < TOL
        assert np.abs(dense.logits - unedited.logits).max() > 1e3 * TOL


class _WithAfter:
    """An edit with no hooks after the capture, in the shape ``_poslens_forward`` calls."""

    def __init__(self, edit):
        self.edit = edit

    def hooks(self, model, tokens):
        return self.edit.hooks(model, tokens)

    def hooks_after_capture(self, model, tokens):
        return []


def test_the_reference_notices_a_wrong_rotation(case):
    """The reference's own check: a RoPE base off by 1% misses the model's scores (so its agreement means something)."""
    name, model, corpus, ref = case
    ref.freqs = ref.freqs * 1.01
    with pytest.raises(AssertionError, match="own RoPE misses"):
        ref.run(corpus.tokens[:2])
