"""Tiny models built by hand for the controls of the path-specific tests (methodology §12.5).

:func:`phase_model`: a float64 tiny Llama (RoPE θ = 500, T = 64) whose layer-0 head 0 reads
key 0 through RoPE alone. Every token's embedding has the same norm (so RMSNorm scales
all alike), a constant feature (dimension 0) and, for BOS only, a marker (dimension 1);
dimension 2 holds token noise. Head 0's query reads the constant feature onto two
rotary pairs, its key reads the BOS marker onto the same pairs, so

    s_i0 = A·cos(i·ω₄) + B·cos(i·ω₇),   s_ij = 0 for j > 0,

with ω₄ = 500^(−1/2) (i·ω₄ runs from 0 to 2.8 over the sequence: the phase) and
ω₇ = 500^(−7/8) (nearly constant: a sink bias B that keeps the mask's dilution small).
Its value reads the BOS marker, and its output alone (the other heads and the MLP are
silenced) is written to dimension 2, on top of the token noise: the residual stream
entering layer 1 carries position only through a_i0, so through key 0's RoPE phase.
``zero_phase=True`` zeroes the query on the phase pair (A = 0): the same model with
the phase signal gone, which the mask alone leaves nearly flat.

:class:`RawKeyZeroTerm`: an intervention that adds a raw, non-RoPE term c·log(i + 1) to
the key-0 logits of some heads (the specificity control's injection).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import poslens
from poslens.testing import save_tiny_model

SEQ_LEN = 64


def phase_model(folder, zero_phase: bool = False, amplitude: float = 8.0, bias: float = 10.0, noise: float = 0.3):
    """The float64 tiny Llama of the module docstring, saved in ``folder`` and loaded (a ``PosModel``)."""
    saved = save_tiny_model(folder, "llama", seed=0, num_key_value_heads=4, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    model = poslens.load_model(saved, dtype=torch.float64)
    hf = model.hf_model
    with torch.no_grad():
        embed = hf.model.embed_tokens.weight
        generator = torch.Generator().manual_seed(0)
        embed.zero_()
        embed[:, 3:] = torch.randn(embed.shape[0], embed.shape[1] - 3, generator=generator, dtype=embed.dtype)
        embed[:, 2] = noise * torch.randn(embed.shape[0], generator=generator, dtype=embed.dtype)
        embed[:, 0] = 1.0
        embed[1, 1] = 1.0  # the BOS marker
        width = embed.shape[1]
        embed[:, 3:] *= ((width - embed[:, :3].pow(2).sum(1, keepdim=True)) / embed[:, 3:].pow(2).sum(1, keepdim=True)).sqrt()
        layer = hf.model.layers[0]
        layer.input_layernorm.weight.fill_(1.0)  # RMSNorm(x) = x: every row has norm √width
        attention = layer.self_attn
        q, k, v, o = attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight, attention.o_proj.weight
        head_dim = 16
        scale = head_dim**0.5  # the logit is q·k / √d
        q[:head_dim] = 0.0
        k[:head_dim] = 0.0
        v[:head_dim] = 0.0
        if not zero_phase:
            q[4, 0] = amplitude * scale  # the phase pair (dimensions 4 and 12)
        q[7, 0] = bias * scale  # the slowest pair (7 and 15): a near-constant sink bias
        k[4, 1] = 1.0
        k[7, 1] = 1.0
        v[0, 1] = 1.0
        o.zero_()
        o[2, 0] = 1.0  # head 0's output, alone, onto the noisy dimension 2
        layer.mlp.down_proj.weight.zero_()
    return model


@dataclass
class RawKeyZeroTerm:
    """Add c·log(i + 1) to the key-0 logits of rows i ≥ 1 of ``heads`` in ``layer`` (a raw term, not through RoPE)."""

    layer: int
    heads: tuple[int, ...]
    c: float
    label: str = "raw-key0-term"

    def describe(self) -> dict[str, Any]:
        return {"intervention": "raw-key0-term", "layer": self.layer, "heads": list(self.heads), "c": self.c}

    def hooks(self, model, tokens):
        def hook(scores, hook):
            out = scores.clone()
            t = out.shape[-1]
            term = self.c * torch.log(torch.arange(1, t, dtype=torch.float64) + 1.0).to(out.dtype)
            for head in self.heads:
                out[:, head, 1:, 0] += term
            return out

        return [(f"blocks.{self.layer}.attn.hook_attn_scores", hook)]
