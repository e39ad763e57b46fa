"""The model the researcher already holds, measured as it is: a transformers model with its tokenizer, a TransformerBridge.

Real objects only: tiny Llama folders saved to disk, loaded by transformers in
the test (no poslens loading code in between), and the bridge poslens boots
for a folder. The in-memory routes must give the saved-and-reloaded path's
figures to 1e-10 (they hold the same module), measure edits made after
wrapping, and record where the model came from. (The HookedTransformer route,
TransformerLens 3.x: tests/test_hooked_transformer.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import poslens


def figures(model, seed: int = 1):
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=24, seed=seed)
    return poslens.measure(model, corpus, groups=2, early=8, progress=False)


@pytest.fixture(scope="module")
def from_disk(tiny_llama_dir):
    return figures(poslens.load_model(tiny_llama_dir))


def hf_and_tokenizer(folder):
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def test_a_transformers_model_in_memory_gives_the_saved_paths_figures(tiny_llama_dir, from_disk):
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    model = poslens.load_model(hf, tokenizer=tok)
    assert model.hf_model is hf and model.source == "memory"  # the user's module, not a copy
    got = figures(model)
    np.testing.assert_allclose(got.table["value"].to_numpy(), from_disk.table["value"].to_numpy(), rtol=0, atol=1e-10)
    assert (
        got.table[["layer", "head", "metric", "query_window"]].to_numpy() == from_disk.table[["layer", "head", "metric", "query_window"]].to_numpy()
    ).all()


def test_a_bridge_in_memory_gives_the_saved_paths_figures(tiny_llama_dir, from_disk):
    bridge = poslens.load_model(tiny_llama_dir).bridge  # a TransformerBridge the user holds
    model = poslens.load_model(bridge)
    assert model.bridge is bridge and model.source == "memory"
    np.testing.assert_allclose(figures(model).table["value"].to_numpy(), from_disk.table["value"].to_numpy(), rtol=0, atol=1e-10)


def test_an_edit_in_memory_is_measured_as_edited_and_its_hash_recorded(tiny_llama_dir):
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    model = poslens.load_model(hf, tokenizer=tok)
    before = figures(model)
    with torch.no_grad():
        hf.model.layers[1].self_attn.q_proj.weight.mul_(3.0)  # an edit after wrapping
    after = figures(model)
    edited = poslens.load_model(hf, tokenizer=tok)  # a second wrap of the edited module agrees
    again = figures(edited)
    assert np.nanmax(np.abs(after.table["value"].to_numpy() - before.table["value"].to_numpy())) > 1e-3
    np.testing.assert_array_equal(after.table["value"].to_numpy(), again.table["value"].to_numpy())
    # provenance: from memory, with the state dict's hash taken at each measurement
    import hashlib

    # the state dict as measured (the bridge adds its own zero lm_head bias), each distinct tensor once
    tensors = {t.data_ptr(): t for t in hf.state_dict().values()}.values()
    digests = sorted(
        hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode() + t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
        for t in tensors
    )
    want = hashlib.sha256("".join(digests).encode()).hexdigest()
    assert after.meta["model"]["source"] == "memory"
    assert after.meta["model"]["source_sha256"] == want != before.meta["model"]["source_sha256"]


def test_variants_on_a_model_in_memory(tiny_llama_dir):
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    windowed = poslens.load_model(hf, tokenizer=tok, variant="window:4")
    assert windowed.sliding_windows == [4, 4, 4] and windowed.variant_name == "window:4"
    from_folder = poslens.load_model(tiny_llama_dir, variant="window:4")
    np.testing.assert_allclose(figures(windowed).table["value"].to_numpy(), figures(from_folder).table["value"].to_numpy(), rtol=0, atol=1e-10)
    for variant in ("ntk:2", "rope-base:1e6"):
        with pytest.raises(ValueError, match="already built; save it .* and load the folder with variant="):
            poslens.load_model(hf, tokenizer=tok, variant=variant)


def test_refusals_name_what_is_missing(tiny_llama_dir):
    hf, _ = hf_and_tokenizer(tiny_llama_dir)
    with pytest.raises(ValueError, match="needs its tokenizer: pass tokenizer="):
        poslens.load_model(hf)
    with pytest.raises(ValueError, match="cannot read a Linear"):
        poslens.model.wrapping.from_memory(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"Wrap it first, as it is: model = poslens.load_model\(hf_model, tokenizer=tokenizer\)"):
        poslens.measure(hf, None)
