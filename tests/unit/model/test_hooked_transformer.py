"""A TransformerLens 3.x HookedTransformer (and SAELens's HookedSAETransformer) measured as it is.

These run in ``make test``'s second pass, over the TransformerLens 3.9 and
sae-lens overlay (``POSLENS_REQUIRE_TL3=1``: where 3.x is missing they fail
there, and skip in the first pass, whose TransformerLens 4 has no
HookedTransformer). The HookedTransformer is built from a tiny float64 Llama's
weights by TransformerLens's own converter (tests/hooked_models.py). Its
figures must match the independent dense reference computed from its own
``hook_attn_scores`` (masked entries −inf) to 1e-8, and the transformers path
on the same weights to 1e-8.
"""

from __future__ import annotations

import naive_reference as nr
import numpy as np
import pytest
import torch
from hooked_models import float64_llama_reference, hooked_from_hf_llama, random_sae, require_transformer_lens_3

N_SEQS, SEQ_LEN, GROUPS, EARLY = 8, 40, 4, 18


@pytest.fixture(scope="module")
def tl3():
    return require_transformer_lens_3()


@pytest.fixture(scope="module")
def llama64(tiny_llama_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float64).eval(), AutoTokenizer.from_pretrained(tiny_llama_dir)


def measured(model):
    import poslens

    corpus = poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
    result = poslens.measure(model, corpus, groups=GROUPS, early=EARLY, batch_size=N_SEQS // GROUPS, progress=False)
    return corpus, result


def test_hooked_transformer_matches_the_dense_reference_from_its_own_scores(tl3, llama64):
    import poslens

    ht = hooked_from_hf_llama(*llama64)
    model = poslens.load_model(ht)
    assert model.kind == "hooked" and model.bridge is ht and model.source == "memory"
    corpus, result = measured(model)
    scores = nr.capture_scores(model, corpus.tokens, GROUPS, batch_size=N_SEQS // GROUPS)
    assert np.isneginf(scores[0][0, 0, 0, 1])  # TransformerLens 3.x masks with -inf, not the dtype minimum
    scores = [np.where(np.isneginf(s), nr.FMIN32, s) for s in scores]  # the reference's masked value
    table = nr.lookup(result.to_frame())
    binning = nr.ReferenceBins(SEQ_LEN, EARLY)
    bad = []
    for layer, s in enumerate(scores):
        for window in ("early", "all"):
            full = nr.layer_metrics(nr.PairData(s, binning, window), saturated=True, groups=GROUPS)
            ends = nr.intervals(full, nr.layer_replicates(s, binning, window, GROUPS, saturated=True))
            for metric in ("c_res", "c_mask", "leakage_pattern"):
                for head in range(model.n_heads):
                    got = [float(v) for v in table[(layer, head, window, metric)]]
                    want = [float(x[head]) for x in ends[metric]]
                    if not np.allclose(got, want, rtol=0, atol=1e-8, equal_nan=True):
                        bad.append(f"L{layer} h{head} {window} {metric}: {got} vs {want}")
    assert not bad, "\n".join(bad[:20])


def test_hooked_transformer_matches_the_transformers_path_on_the_same_weights(tl3, llama64, monkeypatch):
    import poslens

    float64_llama_reference(monkeypatch)  # transformers' Llama otherwise computes RMSNorm and RoPE in float32
    hf, tok = llama64
    _, from_hooked = measured(poslens.load_model(hooked_from_hf_llama(hf, tok)))
    _, from_hf = measured(poslens.load_model(hf, tokenizer=tok))
    np.testing.assert_allclose(from_hooked.table["value"].to_numpy(), from_hf.table["value"].to_numpy(), rtol=0, atol=1e-8)


def test_hooked_sae_transformer_with_an_sae_attached_is_measured(tl3, llama64):
    from sae_lens import HookedSAETransformer

    import poslens

    hf, tok = llama64
    model = hooked_from_hf_llama(hf, tok, cls=HookedSAETransformer)
    plain = measured(poslens.load_model(model))[1]
    sae = random_sae(hf.config.hidden_size, dtype="float64")
    model.add_sae(sae)
    with_sae = measured(poslens.load_model(model))[1]
    layer0 = (plain.table["layer"] == 0).to_numpy()
    later = (plain.table["layer"] == 2).to_numpy()
    a, b = plain.table["value"].to_numpy(), with_sae.table["value"].to_numpy()
    np.testing.assert_array_equal(a[layer0], b[layer0])  # the SAE sits before block 1: layer 0 cannot change
    assert np.nanmax(np.abs(a[later] - b[later])) > 1e-6  # later layers read the SAE's reconstruction


def test_hooked_transformers_poslens_cannot_read_are_refused(tl3, llama64):
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    import poslens

    base = dict(d_model=16, d_head=4, n_heads=4, n_layers=1, n_ctx=32, d_vocab=260, act_fn="gelu", tokenizer_name=None)
    tok = llama64[1]
    with pytest.raises(ValueError, match="'standard' positions, not rotary"):
        poslens.load_model(HookedTransformer(HookedTransformerConfig(**base), tokenizer=tok))
    sinks = HookedTransformer(HookedTransformerConfig(**base, positional_embedding_type="rotary", use_attention_sinks=True), tokenizer=tok)
    with pytest.raises(ValueError, match="attention sinks"):
        poslens.load_model(sinks)
    bidirectional = HookedTransformer(
        HookedTransformerConfig(**base, positional_embedding_type="rotary", attention_dir="bidirectional"), tokenizer=tok
    )
    with pytest.raises(ValueError, match="needs the causal mask"):
        poslens.load_model(bidirectional)


def scale_mlp_output(module, args, output):  # a hook of the user's: it stays, and it runs in poslens's passes
    return output * 1.5


def test_a_hooked_transformer_is_given_back_as_it_was_with_dtype_and_hooks_recorded(tl3, llama64):
    """Same modules, the user's hooks kept (and run), its training mode kept, no hook of poslens's left; its dtype recorded."""
    import poslens

    ht = hooked_from_hf_llama(*llama64)
    ht.train()
    ht.blocks[0].mlp.register_forward_hook(scale_mlp_output)
    dicts = ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks")
    before = [(n, id(m), m.training, [dict(getattr(m, d)) for d in dicts]) for n, m in ht.named_modules()]
    _, result = measured(poslens.load_model(ht))
    assert [(n, id(m), m.training, [dict(getattr(m, d)) for d in dicts]) for n, m in ht.named_modules()] == before
    assert result.meta["model"]["dtype"] == "float64" and result.meta["model"]["device"] == "cpu"
    assert result.meta["model"]["user_hooks"] == [
        {"module": "blocks.0.mlp", "kind": "forward", "function": "test_hooked_transformer.scale_mlp_output"}
    ]
    assert result.meta["versions"]["transformer_lens"].startswith("3.")
