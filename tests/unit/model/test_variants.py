"""Inference-time variants: parsing, and parity with models built natively with that architecture.

Each variant model is compared with a Hugging Face model that transformers
builds natively from a folder saved with the same weights and the target
architecture (a RoPE base computed here from methodology §7's formula, or a Mistral
with a real sliding window), never with numbers taken from poslens itself.
"""

from __future__ import annotations

import pytest
import torch
from parity import bridge_log_probs, native_log_probs

import poslens
from poslens.model.hooks import attn_pattern, attn_scores, run_with_hooks
from poslens.model.variants import Variant, ntk_base, parse_variant
from poslens.testing import save_tiny_model

TINY_D = 16  # head_dim of the tiny Llama: hidden 64 / 4 heads; the whole head is rotary
TOL = 1e-5


def native_state_dict(folder) -> dict:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    # 32 positions: long enough for RoPE bases and an 8-wide window to matter.
    return torch.randint(4, 260, (2, 32), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def llama_base(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def llama_weights(tiny_llama_dir) -> dict:
    return native_state_dict(tiny_llama_dir)


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "spec, hint",
    [
        ("ntk:0", "alpha must be > 0"),
        ("ntk:-1", "alpha must be > 0"),
        ("window:0", "whole number"),
        ("window:1.5", "whole number"),
        ("rope-base:abc", "not a number"),
        ("rope-base:0", "theta must be > 0"),
        ("ntk:inf", "finite"),
        ("foo:1", "unknown variant kind 'foo'"),
        ("ntk", "no value"),
        ("ntk:2+ntk:3", "twice"),
    ],
)
def test_bad_variant_specs(spec, hint):
    with pytest.raises(ValueError) as info:
        parse_variant(spec)
    message = str(info.value)
    assert hint in message
    if spec != "ntk:2+ntk:3":
        # Every message shows the accepted forms.
        assert "ntk:<alpha>" in message and "window:<W>" in message and "rope-base:<theta>" in message


def test_bad_variant_fails_before_loading(tmp_path):
    # The folder does not even exist: the variant is checked first.
    with pytest.raises(ValueError, match="alpha must be > 0"):
        poslens.load_model(tmp_path / "absent", variant="ntk:0")


@pytest.mark.parametrize(
    "spec, expected, canonical",
    [
        (None, Variant(), "base"),
        ("", Variant(), "base"),
        ("base", Variant(), "base"),
        ("ntk:4", Variant(ntk_alpha=4.0), "ntk:4"),
        ("ntk:2.5", Variant(ntk_alpha=2.5), "ntk:2.5"),
        ("window:64", Variant(sliding_window=64), "window:64"),
        ("rope-base:1e6", Variant(rope_base=1e6), "rope-base:1000000"),
        ("window:16+ntk:8", Variant(ntk_alpha=8.0, sliding_window=16), "ntk:8+window:16"),
    ],
)
def test_variant_parsing_round_trip(spec, expected, canonical):
    parsed = parse_variant(spec)
    assert parsed == expected
    assert str(parsed) == canonical
    assert parse_variant(str(parsed)) == parsed
    assert parse_variant(parsed) is parsed


def test_ntk_formula():
    d = 64
    assert ntk_base(1e4, 4.0, d) == pytest.approx(1e4 * 4.0 ** (64 / 62), rel=1e-12)
    assert ntk_base(1e5, 1.0, d) == 1e5
    assert ntk_base(1e4, 8.0, 128) > ntk_base(1e4, 2.0, 128) > 1e4


# ---------------------------------------------------------------- RoPE variants


def test_ntk_matches_native_base(tmp_path, tiny_llama_dir, llama_base, llama_weights, tokens):
    theta = 1e4 * 4 ** (TINY_D / (TINY_D - 2))
    reference = save_tiny_model(tmp_path / "llama_ntk4", "llama", state_dict=llama_weights, rope_theta=theta)
    model = poslens.load_model(tiny_llama_dir, variant="ntk:4")
    assert model.rotary_dim == TINY_D
    assert model.rope_base == pytest.approx([theta] * 3, rel=1e-12)
    assert model.variant_name == "ntk:4"
    expected = native_log_probs(reference, tokens)
    assert (bridge_log_probs(model, tokens) - expected).abs().max().item() <= TOL
    # The test can tell the difference: the unscaled model is measurably off.
    assert (bridge_log_probs(llama_base, tokens) - expected).abs().max().item() > 100 * TOL


def test_rope_base_matches_native(tmp_path, tiny_llama_dir, llama_base, llama_weights, tokens):
    reference = save_tiny_model(tmp_path / "llama_5e5", "llama", state_dict=llama_weights, rope_theta=5e5)
    model = poslens.load_model(tiny_llama_dir, variant="rope-base:5e5")
    assert model.rope_base == [5e5] * 3
    expected = native_log_probs(reference, tokens)
    assert (bridge_log_probs(model, tokens) - expected).abs().max().item() <= TOL
    assert (bridge_log_probs(llama_base, tokens) - expected).abs().max().item() > 100 * TOL


def test_ntk_one_is_the_base_model(tiny_llama_dir, llama_base, tokens):
    model = poslens.load_model(tiny_llama_dir, variant="ntk:1")
    assert model.rope_base == llama_base.rope_base
    assert torch.equal(run_with_hooks(model, tokens, [], logits=True), run_with_hooks(llama_base, tokens, [], logits=True))


def test_rope_base_then_ntk(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir, variant="rope-base:5e5+ntk:2")
    assert model.rope_base == pytest.approx([5e5 * 2 ** (TINY_D / (TINY_D - 2))] * 3, rel=1e-12)


def test_gemma3_ntk_scales_both_bases(tmp_path, tiny_gemma3_dir, tokens):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_gemma3_dir)
    d = config.head_dim
    factor = 2 ** (d / (d - 2))
    scaled = {kind: {"rope_type": "default", "rope_theta": params["rope_theta"] * factor} for kind, params in config.rope_parameters.items()}
    assert set(scaled) == {"sliding_attention", "full_attention"}
    model = poslens.load_model(tiny_gemma3_dir, variant="ntk:2")
    expected_bases = [scaled[t]["rope_theta"] for t in config.layer_types]
    assert model.rope_base == pytest.approx(expected_bases, rel=1e-12)
    assert model.rope_base[0] == pytest.approx(1e4 * factor) and model.rope_base[-1] == pytest.approx(1e6 * factor)
    # Native Gemma 3 with both bases scaled, same weights.
    reference = save_tiny_model(tmp_path / "gemma3_ntk2", "gemma3", state_dict=native_state_dict(tiny_gemma3_dir), rope_parameters=scaled)
    expected = native_log_probs(reference, tokens)
    assert (bridge_log_probs(model, tokens) - expected).abs().max().item() <= TOL
    base = poslens.load_model(tiny_gemma3_dir)
    assert (bridge_log_probs(base, tokens) - expected).abs().max().item() > 100 * TOL


# ---------------------------------------------------------------- windows


@pytest.fixture(scope="module")
def llama_window8(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir, variant="window:8")


def test_window_matches_native_mistral(tmp_path, llama_base, llama_window8, llama_weights, tokens):
    from transformers import AutoModelForCausalLM

    from poslens.testing import tiny_config

    # A Mistral holds exactly the Llama's tensors under the same names.
    mistral_keys = AutoModelForCausalLM.from_config(tiny_config("mistral", sliding_window=8)).state_dict().keys()
    assert set(mistral_keys) == set(llama_weights)
    reference = save_tiny_model(tmp_path / "mistral_w8", "mistral", state_dict=llama_weights, sliding_window=8, head_dim=TINY_D)
    assert AutoModelForCausalLM.from_pretrained(reference).config.head_dim == TINY_D == llama_base.d_head

    assert llama_window8.sliding_windows == [8, 8, 8]
    assert llama_window8.attention_kind == "sliding 8"
    expected = native_log_probs(reference, tokens)
    assert (bridge_log_probs(llama_window8, tokens) - expected).abs().max().item() <= TOL
    # Without the window the same weights give other log-probs.
    assert (bridge_log_probs(llama_base, tokens) - expected).abs().max().item() > 100 * TOL


def test_window_masks_scores_at_dtype_minimum(llama_window8, tokens):
    seen: dict[int, torch.Tensor] = {}

    def keep(layer):
        def hook(x, hook):
            seen[layer] = x.detach().clone()

        return hook

    patterns: list[torch.Tensor] = []
    hooks = [(attn_scores(l), keep(l)) for l in range(llama_window8.n_layers)]
    hooks.append((attn_pattern(0), lambda x, hook: patterns.append(x.detach().clone())))
    run_with_hooks(llama_window8, tokens, hooks)
    t = tokens.shape[1]
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    masked = (j > i) | (i - j >= 8)
    lowest = torch.finfo(torch.float32).min
    for layer in range(llama_window8.n_layers):
        scores = seen[layer]
        assert scores.shape == (2, llama_window8.n_heads, t, t)
        assert (scores[..., masked] == lowest).all()
        assert (scores[..., ~masked] > lowest / 2).all()
    # The softmax gives masked keys no weight and sums to 1 over the visible ones.
    pattern = patterns[0]
    assert (pattern[..., masked] == 0).all()
    assert torch.allclose(pattern.sum(-1), torch.ones(()), atol=1e-6)


def test_window_keeps_narrower_native_windows(tiny_gemma3_dir):
    wide = poslens.load_model(tiny_gemma3_dir, variant="window:16")
    assert wide.sliding_windows == [8, 8, 8, 16]
    narrow = poslens.load_model(tiny_gemma3_dir, variant="window:4")
    assert narrow.sliding_windows == [4, 4, 4, 4]
    assert len(wide.variant_hooks()) == wide.n_layers
    assert poslens.load_model(tiny_gemma3_dir).variant_hooks() == []


def test_ntk_uses_the_rotary_dimension_of_partial_rope(tmp_path, tokens):
    # GPT-NeoX rotates only part of each head (here 8 of 16 dimensions); NTK's d is the rotated part.
    # Larger random weights than usual make attention sharp enough for the base to matter.
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from poslens.testing import byte_tokenizer

    def save(folder, theta, state_dict=None):
        config = GPTNeoXConfig(
            vocab_size=260,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=256,
            bos_token_id=1,
            eos_token_id=2,
            initializer_range=0.2,
            rope_parameters={"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 0.5},
        )
        assert config.rope_parameters["rope_theta"] == theta
        config.architectures = ["GPTNeoXForCausalLM"]
        torch.manual_seed(0)
        model = GPTNeoXForCausalLM(config)
        if state_dict is not None:
            model.load_state_dict(state_dict)
        model.save_pretrained(folder)
        byte_tokenizer().save_pretrained(folder)
        return folder

    base = save(tmp_path / "neox", 1e4)
    rotary = 16 // 2
    theta = 1e4 * 4 ** (rotary / (rotary - 2))
    reference = save(tmp_path / "neox_ntk4", theta, state_dict=native_state_dict(base))
    model = poslens.load_model(base, variant="ntk:4")
    assert (model.d_head, model.rotary_dim) == (16, rotary)
    assert model.rope_base == pytest.approx([theta] * 2, rel=1e-12)
    expected = native_log_probs(reference, tokens)
    assert (bridge_log_probs(model, tokens) - expected).abs().max().item() <= TOL
    # Scaling with the whole head (d = 16) would give another base, and other log-probs.
    wrong = save(tmp_path / "neox_wrong", 1e4 * 4 ** (16 / 14), state_dict=native_state_dict(base))
    assert (native_log_probs(wrong, tokens) - expected).abs().max().item() > 100 * TOL
