"""Edit P0, the key-0 phase freeze (methodology §12.2), on every tiny kind: the model's own arithmetic, the identity, what it touches.

The central check uses the model as its own reference. At layer 0 the query of a token
depends on the token alone, so if position i holds the same token as position D, the
query rotated "as if at offset D from key 0" is exactly the query the model itself
computed at row D: the frozen logit s'_i0 must equal the model's own s_D0. That holds
for every rotary table (partial rotary, Gemma 3's local and global bases, NTK variants,
a HookedTransformer's adjacent or half pairs), scale and soft-cap (Gemma 2), and fails
for any error in them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hooked_models import hooked_from_hf_llama, require_transformer_lens_3

import poslens
from poslens.errors import InputError
from poslens.fit.path_figures import run_figures
from poslens.mechanisms.key_phase import KeyPhaseFreeze
from poslens.mechanisms.path_tests import run_once
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.model.rotary import RotaryNotReadableError, layer_rotary
from poslens.testing import TINY_MODELS, save_tiny_model

T, D = 24, 6  # D and the repeated rows 2 and 5 lie inside the tiny models' windows of 8
REPEATED = (2, 5, 15)
KINDS = sorted(kind for kind, spec in TINY_MODELS.items() if spec.refused is None)
GEMMA3_GLOBAL_FIRST = {"layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]}


def _scores(model, tokens, hooks=()):
    seen = {}

    def keep(layer):
        def fn(x, hook):
            seen[layer] = x.detach().to(torch.float64).clone()

        return fn

    run_with_hooks(model, tokens, [*hooks, *[(attn_scores(l), keep(l)) for l in range(model.n_layers)]])
    return seen


def _edited_scores(model, tokens, edit):
    """Every layer's scores after the edit (the edit runs after the capture's place, so record after it)."""
    seen = {}

    def keep(layer):
        def fn(x, hook):
            seen[layer] = x.detach().to(torch.float64).clone()

        return fn

    hooks = edit.hooks(model, tokens) + edit.hooks_after_capture(model, tokens) + [(attn_scores(l), keep(l)) for l in range(model.n_layers)]
    run_with_hooks(model, tokens, hooks)
    return seen


def _repeated_token_sequence(model) -> torch.Tensor:
    tokens = poslens.make_corpus(model, "random", n_seqs=1, seq_len=T, seed=5).tokens.clone()
    for row in REPEATED:
        tokens[0, row] = tokens[0, D]
    return tokens


def _check_against_own_row(model, edit_layer: int = 0) -> float:
    tokens = _repeated_token_sequence(model)
    plain = _scores(model, tokens)[edit_layer]
    edited = _edited_scores(model, tokens, KeyPhaseFreeze(D, layers=(edit_layer,)))[edit_layer]
    window = model.sliding_windows[edit_layer]
    rows = [i for i in REPEATED if window is None or i < window]
    assert rows, "no repeated row sees key 0"
    own = plain[0, :, D, 0]  # the model's own logit of the same query at offset D from key 0
    gap = max(float((edited[0, :, i, 0] - own).abs().max()) for i in rows)
    moved = max(float((plain[0, :, i, 0] - own).abs().max()) for i in rows)
    assert moved > 1e-4, "the rows' own logits equal the frozen one already: the check could not fail"
    return gap


@pytest.mark.parametrize("kind", KINDS)
def test_frozen_logit_is_the_models_own_logit_at_offset_d(kind, tmp_path):
    model = poslens.load_model(save_tiny_model(tmp_path, kind, seed=1), dtype=torch.float64)
    assert _check_against_own_row(model) < 1e-10


@pytest.mark.parametrize("variant", ["ntk:4", "rope-base:5e5", "window:12"])
def test_frozen_logit_under_variants(variant, tmp_path):
    model = poslens.load_model(save_tiny_model(tmp_path, "llama", seed=1), variant=variant, dtype=torch.float64)
    assert _check_against_own_row(model) < 1e-10


def test_gemma3_global_layer_uses_its_own_base(tmp_path):
    """Gemma 3's layers rotate with two bases; a global layer 0 checks the global table (θ = 1e6) the same way."""
    model = poslens.load_model(save_tiny_model(tmp_path, "gemma3", seed=1, **GEMMA3_GLOBAL_FIRST), dtype=torch.float64)
    assert model.rope_base[0] == 1e6 and model.rope_base[1] == 1e4
    assert _check_against_own_row(model) < 1e-10
    local = poslens.load_model(save_tiny_model(tmp_path / "local", "gemma3", seed=1), dtype=torch.float64)
    assert float(layer_rotary(model, 0).omega[1]) != pytest.approx(float(layer_rotary(local, 0).omega[1]), rel=1e-3)


def test_hooked_transformer_frozen_logit(tiny_llama_dir):
    require_transformer_lens_3()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float64).eval()
    model = poslens.load_model(hooked_from_hf_llama(hf, AutoTokenizer.from_pretrained(tiny_llama_dir)))
    assert model.kind == "hooked"
    assert _check_against_own_row(model) < 1e-10


@pytest.mark.parametrize("kind", ["mistral", "gemma2"])
def test_edit_touches_only_the_visible_key_column(kind, tmp_path):
    model = poslens.load_model(save_tiny_model(tmp_path, kind, seed=2), dtype=torch.float64)
    tokens = poslens.make_corpus(model, "random", n_seqs=2, seq_len=T, seed=1).tokens
    for key in (0, 1):
        plain = _scores(model, tokens)[0]
        edited = _edited_scores(model, tokens, KeyPhaseFreeze(D, key=key, layers=(0,)))[0]
        changed = (edited != plain).any(dim=(0, 1))  # [T, T]
        window = model.sliding_windows[0]
        expected = torch.zeros(T, T, dtype=torch.bool)
        last = T if window is None else min(T, key + window)
        expected[key + 1 : last, key] = True
        assert torch.equal(changed, expected), (kind, key)


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
def test_identity_reproduces_the_unedited_tables(tmp_path):
    """D = i for every row: the measured table and every path readout equal the unedited ones to 1e-10."""
    model = poslens.load_model(save_tiny_model(tmp_path, "gemma3", seed=4))
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=T, seed=0)
    options = dict(groups=4, early=8, batch_size=2, progress=False)
    plain = poslens.measure(model, corpus, **options)
    for key in (0, 1):
        same = poslens.measure(model, corpus, interventions=[KeyPhaseFreeze(None, key=key)], **options)
        assert np.abs(same.table["value"].to_numpy() - plain.table["value"].to_numpy()).max() < 1e-10
    a = run_figures(*run_once(model, corpus, [], 4, 8, 2), [(1, 0)], 0.1)
    b = run_figures(*run_once(model, corpus, [KeyPhaseFreeze(None)], 4, 8, 2), [(1, 0)], 0.1)
    assert np.nanmax(np.abs(a.estimate - b.estimate)) < 1e-10
    assert np.nanmax(np.abs(a.replicates - b.replicates)) < 1e-10
    moved = run_figures(*run_once(model, corpus, [KeyPhaseFreeze(D)], 4, 8, 2), [(1, 0)], 0.1)
    assert np.nanmax(np.abs(moved.estimate - a.estimate)) > 1e-6  # a real freeze does move them


def test_cumulative_layer_is_measured_before_its_own_edit(tmp_path):
    """Editing layer 1 alone leaves layers 0 and 1's measured figures as they were, and moves layer 2's."""
    model = poslens.load_model(save_tiny_model(tmp_path, "llama", seed=4, initializer_range=0.1))
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=T, seed=0)
    plain = poslens.measure(model, corpus, groups=2, early=8, progress=False)
    edited = poslens.measure(model, corpus, groups=2, early=8, interventions=[KeyPhaseFreeze(D, layers=(1,))], progress=False)
    for layer, moves in ((0, False), (1, False), (2, True)):
        a, b = plain.value("leakage_pattern", "all", layer=layer), edited.value("leakage_pattern", "all", layer=layer)
        assert (abs(a - b) > 1e-7) is moves, layer


def test_bad_arguments_are_refused():
    with pytest.raises(InputError, match="key must be 0"):
        KeyPhaseFreeze(8, key=2)
    with pytest.raises(InputError, match="offset D"):
        KeyPhaseFreeze(-1)
    with pytest.raises(InputError, match="offset D"):
        KeyPhaseFreeze(2.5)  # type: ignore[arg-type]


def test_a_layer_out_of_range_is_refused(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    with pytest.raises(InputError, match="layer 7 is not a layer"):
        KeyPhaseFreeze(8, layers=(7,)).hooks(model, torch.zeros(1, 4, dtype=torch.long))


def test_latent_attention_is_refused_by_name(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    config = model.hf_model.config.get_text_config()
    config.qk_rope_head_dim, config.qk_nope_head_dim = 8, 8
    try:
        with pytest.raises(RotaryNotReadableError, match="multi-head latent attention"):
            layer_rotary(model, 0)
    finally:
        del config.qk_rope_head_dim, config.qk_nope_head_dim
