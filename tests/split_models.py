"""Tiny models built by hand for the controls of the sink-path split (methodology §13.6).

Every model is a float64 tiny Llama with four layers, built by :func:`poslens.testing.save_tiny_model`
and then rewritten so that layer 0's head 0 (the *sink head*, the split's edited head) is the
only part of the network that writes position:

- **Embeddings of equal norm.** Every entry is 0 or ±1: dimension 0 is 1 for every token (the
  constant), dimension 1 is 1 for BOS only (the BOS marker), dimension 2 is 0 (the head writes
  there), dimension 3 is a ±1 token-content coordinate u (0 for BOS) and dimensions 4–63 are ±1
  at random. Each row's squared norm is 62, exactly, also in float32 (transformers' RMSNorm
  computes in float32 even for float64 weights), so the norm scales every token alike; its weight
  undoes that scale. The query of row i therefore is the same for every token and every row
  (``q`` reads dimension 0 only, or dimension 3 for the content term): the row's logits change
  with i only through RoPE.
- **Keys and values.** k_0 (BOS) and v_0 read the BOS marker; the keys of the other tokens read
  the constant, less the marker (so BOS has none of it), or are zero; the value of every other
  token is zero. The head's output, a_i0 · v_0 = a_i0, goes alone to dimension 2 (every other head
  of every layer and every MLP is silenced), so the residual stream entering layers ≥ 2, which
  the readouts average, carries position only through a_i0.
- Each logit is written as ``amplitude · cos(offset · ω_k)`` on a rotary pair k (dimensions k
  and k + 8, ω_k = θ^(−k/8)): the query holds amplitude · √d on the pair, the key 1.

The controls:

:func:`count_model` (θ = 1e6): q and k_0 on the slowest pair (ω₇ ≈ 5.6e−6, so the key-0 logit is
c · cos(i·ω₇) = c up to 1e−10 over the sequence, 1e−7 with transformers' float32 RoPE tables); the other
keys are zero, so every s_ij (j ≥ 1) is 0 and a_i0 = e^c / (e^c + i): the head's key-0 mass falls
with i through the mask's count of visible keys alone.

:func:`phase_model` (θ = 500): the keys j ≥ 1 carry offset-only logits on the three fast pairs
(ω = 1, 0.46, 0.21) with amplitude A = 30, less C = 3A on the slowest pair,

    s_ij = A · Σ_{k=0,1,2} cos((i − j)·ω_k) − C · cos((i − j)·ω₇),    j ≥ 1,

which is 0 on the diagonal and at least 14.8 below it at every offset 1..63 (checked by the
tests up to T), so the competing mass ell_i = logsumexp_{j≥1} s_ij is 0 up to 4e−7 whatever
i (transformers computes the RoPE tables in float32 even for a float64 model: with them the
diagonal logit, ±90 on each side, carries a rounding of a few 1e−6 that depends on i, the same in
every sequence). The key-0 logit turns with RoPE on pair 4 (ω₄ = 500^(−1/2), i·ω₄ runs from 0 to 2.8):
s_i0 = P · cos(i·ω₄), so a_i0 = sigmoid(P · cos(i·ω₄)) carries position through key 0's phase
alone. ``noise`` adds a token-content term noise · u_i to the diagonal logit (the query of pair 0
also reads the content coordinate, ±1, so the term's sd over tokens is ``noise``): ell_i then
follows each row's own token, not its position.

:func:`cancel_model` (θ = 1e6): the count model's mask (s_ij = 0, j ≥ 1, so ell_i = log i) and a
key-0 logit that rises with i on pair 2 (ω₂ = 1e6^(−1/4), i·ω₂ runs from 0 to 2): c plus the
least-squares fit of log i over i = 1..T−1 by a constant (the slowest pair) and a cos and a
sin of i·ω₂. The rising phase offsets most of the count, so a_i0 is nearly flat in i (its sd
over i about an eighth of the count model's).

:class:`Float64Softmax`: an intervention that replaces every head's pattern by a float64 softmax
of the scores the model computed (transformers' eager softmax is float32 even for float64
weights); the controls run every pass under it. It keeps the scores as its own hook on them sees
them, before any edit made after the capture (§12's P0, ``KeyPhaseFreeze``): under it such an
edit is undone, so the controls leave the split's every-head P0 run out.

:func:`sink_head_scores`: the sink head's pre-softmax scores from a plain forward, to check the
models' properties independently of the split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import poslens
from poslens.model import hooks as hook_names
from poslens.model.hooks import run_with_hooks
from poslens.testing import save_tiny_model

SEQ_LEN = 64
N_LAYERS = 4
HEAD_DIM = 16
CONSTANT, BOS_MARKER, OUTPUT, CONTENT = 0, 1, 2, 3
FAST_PAIRS = (0, 1, 2)
SLOW_PAIR = 7


def _base(folder, theta: float, seed: int = 0):
    """The common model: equal-norm embeddings, everything silenced but layer 0's head 0, whose q, k, v are zeroed.

    Returns the model and layer 0's q, k, v weights (head 0's rows are the first HEAD_DIM).
    """
    saved = save_tiny_model(
        folder,
        "llama",
        seed=seed,
        num_hidden_layers=N_LAYERS,
        num_key_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
    )
    model = poslens.load_model(saved, dtype=torch.float64)
    hf = model.hf_model
    with torch.no_grad():
        embed = hf.model.embed_tokens.weight
        vocab, width = embed.shape
        generator = torch.Generator().manual_seed(seed)
        signs = torch.randint(0, 2, (vocab, width), generator=generator).to(embed.dtype) * 2 - 1
        embed.copy_(signs)
        embed[:, CONSTANT] = 1.0
        embed[:, BOS_MARKER] = 0.0
        embed[:, OUTPUT] = 0.0
        bos = hf.config.bos_token_id
        embed[bos, BOS_MARKER] = 1.0
        embed[bos, CONTENT] = 0.0  # every row: squared norm width − 2, exactly
        square = float(width - 2) / width
        for layer in hf.model.layers:
            layer.input_layernorm.weight.fill_((square + hf.config.rms_norm_eps) ** 0.5)  # RMSNorm(x) = x (to float32's precision)
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        attention = hf.model.layers[0].self_attn
        q, k, v = attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight
        q[:HEAD_DIM] = 0.0
        k[:HEAD_DIM] = 0.0
        v[:HEAD_DIM] = 0.0
        v[0, BOS_MARKER] = 1.0  # v_0 = 1 on the head's dimension 0, every other value 0
        attention.o_proj.weight[OUTPUT, 0] = 1.0  # a_i0 · v_0 alone onto dimension 2
    return model, q, k


def _logit(q: torch.Tensor, pair: int, cos: float, sin: float = 0.0, reads: int = CONSTANT) -> None:
    """Make head 0's query give cos·cos(φ) + sin·sin(φ) on rotary ``pair`` against a key of 1 on the pair's first dimension.

    With RoPE's rotate-half, ⟨R_i q, R_j k⟩ for k = (1, 0) on the pair is q_a cos((i−j)ω) − q_b sin((i−j)ω).
    """
    scale = HEAD_DIM**0.5  # the logit is q·k / √d
    q[pair, reads] = cos * scale
    q[pair + HEAD_DIM // 2, reads] = -sin * scale


def count_model(folder, c: float = 2.0, theta: float = 1e6):
    """The count-only control of the module docstring: s_i0 = c, s_ij = 0 (j ≥ 1), a_i0 = e^c / (e^c + i)."""
    model, q, k = _base(folder, theta)
    with torch.no_grad():
        _logit(q, SLOW_PAIR, c)
        k[SLOW_PAIR, BOS_MARKER] = 1.0
    return model


def phase_model(folder, amplitude: float = 30.0, phase: float = 2.5, noise: float = 0.0, theta: float = 500.0, phase_pair: int = 4):
    """The phase-only control (``noise=0``) or the phase control with content noise of the module docstring."""
    model, q, k = _base(folder, theta)
    with torch.no_grad():
        for pair in FAST_PAIRS:  # offset-only logits on the fast pairs, keys j ≥ 1 only
            _logit(q, pair, amplitude)
            k[pair, CONSTANT] = 1.0
            k[pair, BOS_MARKER] = -1.0
        _logit(q, SLOW_PAIR, len(FAST_PAIRS) * amplitude)  # less C = 3A on the slowest pair: the diagonal logit is 0
        k[SLOW_PAIR, CONSTANT] = -1.0
        k[SLOW_PAIR, BOS_MARKER] = 1.0
        _logit(q, phase_pair, phase)  # key 0: P · cos(i·ω) through RoPE
        k[phase_pair, BOS_MARKER] = 1.0
        if noise:
            _logit(q, FAST_PAIRS[0], noise, reads=CONTENT)  # + noise · u_i on pair 0: the diagonal gets noise · u_i
    return model


def cancel_fit(seq_len: int, omega: float) -> np.ndarray:
    """(constant, cos, sin) of the least-squares fit of log i over i = 1..T−1 by a constant and a cos and a sin of i·ω."""
    i = np.arange(1, seq_len, dtype=np.float64)
    basis = np.column_stack([np.ones_like(i), np.cos(i * omega), np.sin(i * omega)])
    return np.linalg.lstsq(basis, np.log(i), rcond=None)[0]


def cancel_model(folder, c: float = 2.0, theta: float = 1e6, phase_pair: int = 2, seq_len: int = SEQ_LEN):
    """The cancel control of the module docstring: the count model's mask and a key-0 logit c + (fit of log i) rising through RoPE."""
    model, q, k = _base(folder, theta)
    omega = theta ** (-phase_pair / (HEAD_DIM // 2))
    constant, cos, sin = cancel_fit(seq_len, omega)
    with torch.no_grad():
        _logit(q, SLOW_PAIR, c + constant)
        k[SLOW_PAIR, BOS_MARKER] = 1.0
        _logit(q, phase_pair, cos, sin)
        k[phase_pair, BOS_MARKER] = 1.0
    return model


@dataclass
class Float64Softmax:
    """Replace every head's pattern by the float64 softmax of its scores (masked entries, at the dtype's minimum, get 0)."""

    label: str = "float64-softmax"
    _scores: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)

    def describe(self) -> dict[str, Any]:
        return {"intervention": "float64-softmax"}

    def hooks(self, model, tokens):
        def keep(layer: int):
            def hook(scores, hook):
                self._scores[layer] = scores.detach()

            return hook

        def replace(layer: int):
            def hook(pattern, hook):
                return torch.softmax(self._scores.pop(layer).to(torch.float64), dim=-1).to(pattern.dtype)

            return hook

        out = []
        for layer in range(model.n_layers):
            out += [(hook_names.attn_scores(layer), keep(layer)), (hook_names.attn_pattern(layer), replace(layer))]
        return out


def sink_head_scores(model, tokens: torch.Tensor, layer: int = 0, head: int = 0) -> torch.Tensor:
    """The head's pre-softmax scores of a plain forward, float64, masked entries at −inf: [batch, T, T]."""
    seen: dict[str, torch.Tensor] = {}

    def keep(scores, hook):
        seen["scores"] = scores[:, head].detach().clone()

    run_with_hooks(model, tokens, [(hook_names.attn_scores(layer), keep)], stop_after=hook_names.attn_scores(layer))
    scores = seen["scores"].to(torch.float64)
    t = scores.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    return scores.masked_fill(~causal, -torch.inf)
