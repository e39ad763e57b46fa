"""Test helpers for TransformerLens 3.x: a rotary HookedTransformer built offline from a tiny transformers Llama.

``HookedTransformer.from_pretrained`` wants an official model name (and then the
hub); tests build the config by hand and convert the Llama weights with
TransformerLens's own ``convert_llama_weights``. Not ``load_and_process_state_dict``:
in TransformerLens 3.9 it casts every non-float32 tensor to float32 and back,
even with every processing flag off, which loses float64 precision.
"""

from __future__ import annotations

import os

import pytest
import torch


def require_transformer_lens_3():
    """Skip where TransformerLens 3.x is not installed; fail instead when ``POSLENS_REQUIRE_TL3=1`` (``make test``'s second run)."""
    import importlib.metadata

    version = importlib.metadata.version("transformer_lens")
    if not version.startswith("3."):
        if os.environ.get("POSLENS_REQUIRE_TL3") == "1":
            pytest.fail(f"POSLENS_REQUIRE_TL3=1 but TransformerLens {version} is installed, not 3.x")
        pytest.skip(f"needs TransformerLens 3.x (HookedTransformer); {version} is installed. "
                    "make test runs these with the TransformerLens 3.9 overlay")
    return version


def hooked_from_hf_llama(hf, tokenizer, cls=None):
    """A rotary HookedTransformer (or ``cls``, e.g. SAELens's HookedSAETransformer) with ``hf``'s weights, in ``hf``'s dtype."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_llama_weights

    c = hf.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    cfg = HookedTransformerConfig(
        d_model=c.hidden_size, d_head=head_dim, n_heads=c.num_attention_heads, d_mlp=c.intermediate_size,
        n_layers=c.num_hidden_layers, n_ctx=c.max_position_embeddings, eps=c.rms_norm_eps, d_vocab=c.vocab_size,
        act_fn=c.hidden_act, normalization_type="RMS", positional_embedding_type="rotary", rotary_dim=head_dim,
        rotary_adjacent_pairs=False, rotary_base=(getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0),
        final_rms=True, gated_mlp=True,
        n_key_value_heads=c.num_key_value_heads if c.num_key_value_heads != c.num_attention_heads else None,
        original_architecture="LlamaForCausalLM", tokenizer_name=None, dtype=next(hf.parameters()).dtype, device="cpu",
        default_prepend_bos=True,
    )
    model = (cls or HookedTransformer)(cfg, tokenizer=tokenizer)
    missing, unexpected = model.load_state_dict(convert_llama_weights(hf, cfg), strict=False)
    assert not unexpected and all(k.endswith(("IGNORE", "mask", "rotary_sin", "rotary_cos")) for k in missing), (missing, unexpected)
    return model.eval()


def float64_llama_reference(monkeypatch):
    """Make transformers' Llama compute its RMSNorm and rotary tables in the model's dtype (it upcasts to float32 only).

    A float64 Llama then agrees with a float64 HookedTransformer to about 1e-13 instead of 1e-7.
    """
    from transformers.models.llama import modeling_llama as ml

    def norm_forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    def rotary_forward(self, x, position_ids):
        dim = self.inv_freq.shape[0] * 2  # the frequencies again, in float64 (transformers keeps them in float32)
        base = (self.config.rope_parameters or {}).get("rope_theta", 10000.0)
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        emb = torch.cat([position_ids[..., None].to(torch.float64) * inv] * 2, dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    monkeypatch.setattr(ml.LlamaRMSNorm, "forward", norm_forward)
    monkeypatch.setattr(ml.LlamaRotaryEmbedding, "forward", rotary_forward)
