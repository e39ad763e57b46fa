"""Test helpers for TransformerLens 3.x: the version guard, a rotary HookedTransformer from a tiny Llama
(:func:`poslens.testing.hooked_llama`), and a float64-exact transformers Llama to compare it with."""

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
        pytest.skip(
            f"needs TransformerLens 3.x (HookedTransformer); {version} is installed. make test runs these with the TransformerLens 3.9 overlay"
        )
    return version


def hooked_from_hf_llama(hf, tokenizer, cls=None):
    """A rotary HookedTransformer (or ``cls``, e.g. SAELens's HookedSAETransformer) with ``hf``'s weights, in ``hf``'s dtype."""
    from poslens.testing import hooked_llama

    return hooked_llama(hf, tokenizer, cls)


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


def random_sae(d_in: int, hook_point: str = "blocks.1.hook_resid_pre", seed: int = 0, dtype: str = "float32"):
    """A sae_lens StandardSAE of width 4 · d_in at ``hook_point``, its weights drawn N(0, 0.3²) from ``seed``."""
    from sae_lens import StandardSAE, StandardSAEConfig
    from sae_lens.saes.sae import SAEMetadata

    config = StandardSAEConfig(d_in=d_in, d_sae=4 * d_in, dtype=dtype, device="cpu", metadata=SAEMetadata(hook_name=hook_point))
    sae = StandardSAE(config)
    with torch.no_grad():
        for p in sae.parameters():
            p.normal_(0, 0.3, generator=torch.Generator().manual_seed(seed))
    return sae
