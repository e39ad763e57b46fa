"""poslens.hooked_transformer: a TransformerLens 3.x HookedTransformer from a Hugging Face model in memory or a folder, offline.

The built model is measured and compared with the transformers path on the same
weights (float32, 1e-6 on every figure), for each family it builds; SAELens's
HookedSAETransformer takes an SAE that moves the later layers and not layer 0;
every family it does not build is refused by name, with the reason. The builds
and the refusals run in ``make test``'s TransformerLens 3.9 pass (``POSLENS_REQUIRE_TL3=1``);
on TransformerLens 4.x every call stops first, before the model is loaded, naming the routes that work there.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hooked_models import random_sae, require_transformer_lens_3

import poslens
from poslens.errors import InputError
from poslens.model.pos_model import ModelNotSupportedError
from poslens.testing import TinyKind, save_tiny_model

N_SEQS, SEQ_LEN, GROUPS, EARLY = 8, 32, 4, 12
QWEN2 = TinyKind("Qwen2", "Qwen2Config", "Qwen2ForCausalLM", {"rope_theta": 10000.0})
MISTRAL_FULL = TinyKind("Mistral", "MistralConfig", "MistralForCausalLM", {"rope_theta": 10000.0, "sliding_window": None, "head_dim": 16})


def measured(model, corpus=None):
    corpus = corpus or poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
    return corpus, poslens.measure(model, corpus, groups=GROUPS, early=EARLY, progress=False)


def hf_and_tokenizer(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("kind, route", [("llama", "folder"), ("qwen2", "memory"), ("mistral", "memory")])
def test_built_model_measures_as_the_transformers_model(kind, route, tmp_path):
    require_transformer_lens_3()
    folder = save_tiny_model(tmp_path, {"llama": "llama", "qwen2": QWEN2, "mistral": MISTRAL_FULL}[kind])
    hf, tok = hf_and_tokenizer(folder)
    if kind == "qwen2":  # Qwen2 has q/k/v biases, zero at initialization: make them count
        with torch.no_grad():
            for layer in hf.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    hooked = poslens.hooked_transformer(folder if route == "folder" else hf, None if route == "folder" else tok)
    assert type(hooked).__name__ == "HookedTransformer" and hooked.cfg.positional_embedding_type == "rotary"
    assert next(hooked.parameters()).dtype == torch.float32
    from_hooked = poslens.load_model(hooked)
    assert from_hooked.kind == "hooked" and from_hooked.n_heads == hf.config.num_attention_heads
    corpus, a = measured(from_hooked)
    _, b = measured(poslens.load_model(hf, tokenizer=tok), corpus)
    assert a.table[["layer", "head", "query_window", "metric"]].equals(b.table[["layer", "head", "query_window", "metric"]])
    for column in ("value", "ci_low", "ci_high"):
        x, y = a.table[column].to_numpy(float), b.table[column].to_numpy(float)
        assert np.array_equal(np.isnan(x), np.isnan(y))
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6, equal_nan=True, err_msg=column)
    tokens = torch.as_tensor(corpus.tokens[:2])
    with torch.no_grad():
        np.testing.assert_allclose(hooked(tokens).numpy(), hf(tokens).logits.numpy(), rtol=0, atol=1e-5)


def test_hooked_sae_transformer_with_an_sae_attached(tmp_path):
    require_transformer_lens_3()
    from sae_lens import HookedSAETransformer

    hf, tok = hf_and_tokenizer(save_tiny_model(tmp_path, "llama"))
    model = poslens.hooked_transformer(hf, tok, cls=HookedSAETransformer)
    corpus, plain = measured(poslens.load_model(model))
    sae = random_sae(hf.config.hidden_size)
    model.add_sae(sae)
    _, with_sae = measured(poslens.load_model(model), corpus)
    a, b = plain.table["value"].to_numpy(), with_sae.table["value"].to_numpy()
    layer0, later = (plain.table["layer"] == 0).to_numpy(), (plain.table["layer"] == 2).to_numpy()
    np.testing.assert_array_equal(a[layer0], b[layer0])  # the SAE sits before block 1
    assert np.nanmax(np.abs(a[later] - b[later])) > 1e-4


@pytest.mark.parametrize(
    "kind, overrides, expected",
    [
        ("gemma", {}, r"GemmaForCausalLM is Gemma \(1\): TransformerLens 3\.9 builds a Gemma config only from its own model names"),
        ("gemma3", {}, r"Gemma3ForCausalLM is Gemma 3: TransformerLens 3\.9 builds a Gemma config only"),
        ("mistral", {}, r"this Mistral model has a sliding window \(8\): TransformerLens builds it with its local attention"),
        ("phi", {}, r"PhiForCausalLM: hooked_transformer\(\) builds Llama \(LlamaForCausalLM\), Qwen2 .*, Mistral"),
        ("llama", {"attention_bias": True}, r"this Llama model has attention_bias: TransformerLens's Llama conversion drops biases"),
        (
            "llama",
            {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}},
            r"this Llama model scales its RoPE \('linear'\)",
        ),
    ],
)
def test_families_not_built_are_refused_by_name(kind, overrides, expected, tmp_path):
    require_transformer_lens_3()
    hf, tok = hf_and_tokenizer(save_tiny_model(tmp_path, kind, **overrides))
    with pytest.raises(ModelNotSupportedError, match=expected):
        poslens.hooked_transformer(hf, tok)


def test_bad_arguments_name_the_fix(tmp_path, tiny_llama_dir):
    require_transformer_lens_3()
    with pytest.raises(InputError, match="is not a local model folder"):
        poslens.hooked_transformer(tmp_path)
    with pytest.raises(InputError, match="needs the model's tokenizer"):
        poslens.hooked_transformer(hf_and_tokenizer(tiny_llama_dir)[0])
    with pytest.raises(InputError, match="takes a transformers causal LM or a local folder, not int"):
        poslens.hooked_transformer(3)


def test_on_transformer_lens_4_the_version_is_refused_before_anything_loads(tmp_path):
    """4.x removed HookedTransformer: the call stops at once, before the folder is read, and names the routes that work."""
    import importlib.metadata

    version = importlib.metadata.version("transformer_lens")
    if version.startswith("3."):
        pytest.skip(f"TransformerLens {version} builds HookedTransformer; the 4.x refusal is checked in make test's first pass")
    missing = tmp_path / "no-such-folder"  # on 3.x this is an InputError (no config.json); on 4.x the version speaks first
    with pytest.raises(ModelNotSupportedError, match=rf"TransformerLens {version} is installed, and 4\.0 removed HookedTransformer") as caught:
        poslens.hooked_transformer(missing)
    said = str(caught.value)
    assert "poslens.load_model(folder)" in said and "poslens.load_model(model, tokenizer=...)" in said and "transformer-lens>=3.9,<4" in said
    assert not missing.exists()
    with pytest.raises(ModelNotSupportedError, match="4\\.0 removed HookedTransformer"):
        poslens.hooked_transformer(3)  # before the arguments are even looked at


def test_the_version_check_passes_3x_and_refuses_later_majors():
    from poslens.model.hooked_build import check_transformer_lens_3

    check_transformer_lens_3("3.9.0")
    check_transformer_lens_3("3.10.1")
    for later in ("4.0.0", "4.3.0", "5.0.0.dev1"):
        with pytest.raises(ModelNotSupportedError, match=rf"TransformerLens {later} is installed"):
            check_transformer_lens_3(later)


def test_an_attached_sae_is_recorded_hashed_and_named(tmp_path):
    """Each attached SAE: hook point, width and weights' hash in the provenance; the label names it; repr, display, summary show it."""
    require_transformer_lens_3()
    import copy

    from sae_lens import HookedSAETransformer

    from poslens.model.weights_hash import state_dict_sha256

    hf, tok = hf_and_tokenizer(save_tiny_model(tmp_path, "llama"))
    model = poslens.hooked_transformer(hf, tok, cls=HookedSAETransformer)
    wrapped = poslens.load_model(model)
    corpus, bare = measured(wrapped)
    point, d = "blocks.1.hook_resid_pre", hf.config.hidden_size
    first, second = random_sae(d, point, seed=0), random_sae(d, point, seed=1)
    hashes = {}
    for name, sae in (("first", first), ("second", second), ("copy", copy.deepcopy(first))):
        model.add_sae(sae)
        _, result = measured(wrapped, corpus)
        model.reset_saes()
        [record] = result.meta["model"]["saes"]
        assert record["hook_point"] == point and record["d_sae"] == 4 * d and record["d_in"] == d
        assert record["sae_class"] == "StandardSAE" and record["sha256"] == state_dict_sha256(sae)
        hashes[name] = record["sha256"]
        label = f"{wrapped.name} with SAE at {point}"
        assert set(result.table["model"]) == {label} and result.meta["model"]["model"] == label
        assert f"SAE at {point} (d_sae {4 * d})" in repr(result) and result.summary().columns.name == label
        assert f"{point}: d_sae {4 * d}, sha256 {record['sha256'][:12]}" in result._repr_html_()
    assert hashes["first"] != hashes["second"] and hashes["first"] == hashes["copy"]  # weights, not the object
    # the bare model: its own label, no SAE, and the SAE gone again after reset_saes()
    assert set(bare.table["model"]) == {wrapped.name} and bare.meta["model"]["saes"] == [] and "SAE" not in repr(bare)
    _, after = measured(wrapped, corpus)
    assert set(after.table["model"]) == {wrapped.name}
    np.testing.assert_array_equal(after.table["value"].to_numpy(), bare.table["value"].to_numpy())
    # an in-place edit of the SAE's weights changes its hash
    with torch.no_grad():
        first.W_enc[0, 0] += 1.0
    assert state_dict_sha256(first) != hashes["first"]
