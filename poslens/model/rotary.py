"""The model's own rotary tables and score arithmetic, read from the loaded modules: what an edit of one logit needs.

For layer l, :func:`layer_rotary` returns a :class:`LayerRotary`: how many
dimensions of each query and key head RoPE rotates, the angular frequency of
each rotated dimension (the model's own ``inv_freq`` for that layer: NTK, llama3
and yarn scaling, per-layer bases such as Gemma 3's local and global ones, all
as the model computes them), how the rotated dimensions are paired
(``"half"``: dimension k with k + d/2, as transformers and GPT-NeoX do;
``"adjacent"``: 2k with 2k + 1, as GPT-J), the factor that multiplies q·k, and
the soft-cap applied after it (Gemma 2), if any.

With these, a logit of query i and key j can be recomputed from the rotated
vectors the hooks ``hook_rot_q`` / ``hook_rot_k`` see, and the query rotated
further by any offset: R_a (R_i q) = R_{i+a} q for a pure rotation R (a yarn
attention factor multiplies both sides' tables and cancels in a relative
rotation). :mod:`poslens.mechanisms.key_phase` uses it to freeze the key-0
phase (methodology §12).

Example:
    >>> import tempfile, poslens
    >>> from poslens.testing import save_tiny_model
    >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "stablelm"))
    >>> facts = layer_rotary(model, 0)
    >>> facts.rotary_dim, facts.pairing, facts.scale, facts.softcap
    (4, 'half', 0.25, None)
"""

from __future__ import annotations

import math  # noqa: F401 (the examples turn by π)
from dataclasses import dataclass
from typing import Any

import torch

from poslens.errors import PoslensError

__all__ = ["LayerRotary", "RotaryNotReadableError", "layer_rotary", "rotate", "rotate_half_pairs"]


class RotaryNotReadableError(PoslensError, ValueError):
    """The model's rotary tables or score arithmetic cannot be read, so a logit cannot be recomputed from q and k.

    Example:
        >>> raise RotaryNotReadableError("no rotary module")
        Traceback (most recent call last):
        poslens.model.rotary.RotaryNotReadableError: no rotary module
    """


@dataclass(frozen=True)
class LayerRotary:
    """How one layer rotates its queries and keys and turns them into logits.

    Attributes:
        layer: The layer.
        rotary_dim: The leading dimensions of each head that RoPE rotates (the rest pass through).
        omega: Angular frequency of each rotated dimension, [rotary_dim] float64, in the pairing's layout.
        pairing: ``"half"`` (dimension k pairs with k + rotary_dim/2) or ``"adjacent"`` (2k with 2k + 1).
        scale: The factor on q·k (1/√d_head for most models).
        softcap: ``c`` of the soft-cap c·tanh(x / c) applied after the scale, or ``None``.

    Example:
        >>> facts = LayerRotary(0, 4, torch.tensor([1.0, 0.1, 1.0, 0.1], dtype=torch.float64), "half", 0.5, None)
        >>> facts.logit(torch.tensor([2.0]))
        tensor([1.])
    """

    layer: int
    rotary_dim: int
    omega: torch.Tensor
    pairing: str
    scale: float
    softcap: float | None

    def logit(self, dot: torch.Tensor) -> torch.Tensor:
        """The model's logit from a q·k dot product: the scale, then the soft-cap if the model has one.

        Args:
            dot: q·k values (any shape).

        Returns:
            The logits, of ``dot``'s shape.

        Example:
            >>> LayerRotary(0, 2, torch.ones(2, dtype=torch.float64), "half", 1.0, 2.0).logit(torch.tensor([100.0]))
            tensor([2.])
        """
        raw = dot * self.scale
        if self.softcap is None:
            return raw
        return self.softcap * torch.tanh(raw / self.softcap)


def rotate_half_pairs(x: torch.Tensor, pairing: str) -> torch.Tensor:
    """The 90° partner of each rotated dimension: [x₀, x₁] → [−x₁, x₀] for every pair of ``pairing``.

    Args:
        x: Rotated dimensions, [..., rotary_dim].
        pairing: ``"half"`` or ``"adjacent"``.

    Returns:
        The partner vector, of ``x``'s shape.

    Example:
        >>> rotate_half_pairs(torch.tensor([1.0, 2.0, 3.0, 4.0]), "half").tolist()
        [-3.0, -4.0, 1.0, 2.0]
        >>> rotate_half_pairs(torch.tensor([1.0, 2.0, 3.0, 4.0]), "adjacent").tolist()
        [-2.0, 1.0, -4.0, 3.0]
    """
    if pairing == "half":
        first, second = x.chunk(2, dim=-1)
        return torch.cat([-second, first], dim=-1)
    partner = torch.empty_like(x)
    partner[..., ::2] = -x[..., 1::2]
    partner[..., 1::2] = x[..., ::2]
    return partner


def rotate(x: torch.Tensor, angle_steps: torch.Tensor, facts: LayerRotary) -> torch.Tensor:
    """Rotate the rotated part of ``x`` further by ``angle_steps`` positions (pure rotation, no attention factor).

    Args:
        x: Vectors [..., pos, d] whose leading ``facts.rotary_dim`` dimensions are rotated (``hook_rot_q`` values,
            with the position axis second to last after any head axis is moved, or broadcastable).
        angle_steps: Positions to rotate by, one per position of ``x``'s second-to-last axis, [pos] (may be negative).
        facts: The layer's :class:`LayerRotary`.

    Returns:
        ``x`` with its rotated part turned by angle_steps·ω, the rest unchanged; float64.

    Example:
        >>> facts = LayerRotary(0, 2, torch.tensor([0.5, 0.5], dtype=torch.float64), "half", 1.0, None)
        >>> x = torch.tensor([[1.0, 0.0, 7.0]])                    # one position: a rotated pair and a passed dimension
        >>> [round(v, 6) + 0.0 for v in rotate(x, torch.tensor([math.pi]), facts)[0].tolist()]   # π · 0.5: a quarter turn
        [0.0, 1.0, 7.0]
    """
    d = facts.rotary_dim
    x = x.to(torch.float64)
    phase = angle_steps.to(torch.float64)[:, None] * facts.omega.to(x.device)[None, :]  # [pos, rotary_dim]
    part = x[..., :d]
    turned = part * torch.cos(phase) + rotate_half_pairs(part, facts.pairing) * torch.sin(phase)
    return torch.cat([turned, x[..., d:]], dim=-1)


def _hf_rotary_module(hf_model: Any) -> Any:
    found = [module for name, module in hf_model.named_modules() if name.endswith("rotary_emb")]
    found = [getattr(module, "original_component", module) for module in found]
    return found[0] if found else None


def _hf_omega(model: Any, layer: int) -> torch.Tensor:
    config = model.hf_model.config.get_text_config()
    if getattr(config, "qk_rope_head_dim", None) and getattr(config, "qk_nope_head_dim", None) is not None:
        raise RotaryNotReadableError(
            f"{model.name} uses multi-head latent attention (its rotated dimensions follow the unrotated ones, "
            "in the model's own layout): poslens cannot recompute its key-0 logits from the rotated q and k"
        )
    module = _hf_rotary_module(model.hf_model)
    if module is None:
        raise RotaryNotReadableError(f"{model.name} has no rotary-embedding module (a module named *rotary_emb) to read its RoPE tables from")
    layer_types = getattr(config, "layer_types", None)
    candidates = []
    if layer_types is not None:
        candidates.append(f"{layer_types[layer]}_inv_freq")
    candidates.append("inv_freq")
    inv_freq = next((getattr(module, name) for name in candidates if isinstance(getattr(module, name, None), torch.Tensor)), None)
    if inv_freq is None:
        raise RotaryNotReadableError(
            f"{model.name}'s rotary module {type(module).__name__} holds none of {', '.join(candidates)}: its RoPE frequencies cannot be read"
        )
    inv_freq = inv_freq.detach().to("cpu", torch.float64)
    if 2 * inv_freq.numel() != model.rotary_dim:
        raise RotaryNotReadableError(
            f"{model.name}'s rotary module has {inv_freq.numel()} frequencies, but the model rotates {model.rotary_dim} dimensions per head"
        )
    return torch.cat([inv_freq, inv_freq])  # transformers pairs dimension k with k + d/2 (rotate_half)


def _hf_scale_and_softcap(model: Any, layer: int) -> tuple[float, float | None]:
    attention = getattr(model.hf_model.model.layers[layer], "self_attn", None) if hasattr(model.hf_model, "model") else None
    attention = getattr(attention, "original_component", attention)
    scale = getattr(attention, "scaling", None)
    if scale is None:
        raise RotaryNotReadableError(f"{model.name}'s attention module of layer {layer} has no `scaling`: the factor on q·k cannot be read")
    config = model.hf_model.config.get_text_config()
    cap = getattr(config, "attn_logit_softcapping", None)
    return float(scale), float(cap) if cap else None


def _hooked_facts(model: Any, layer: int) -> LayerRotary:
    attention = model.bridge.blocks[layer].attn
    cfg = model.bridge.cfg
    sin, cos = attention.rotary_sin, attention.rotary_cos
    omega = torch.atan2(sin[1].to(torch.float64), cos[1].to(torch.float64))
    pairing = "adjacent" if getattr(cfg, "rotary_adjacent_pairs", False) else "half"
    cap = getattr(cfg, "attn_scores_soft_cap", None)
    softcap = float(cap) if cap is not None and cap > 0 else None
    return LayerRotary(layer, int(cfg.rotary_dim), omega, pairing, 1.0 / float(attention.attn_scale), softcap)


def layer_rotary(model: Any, layer: int) -> LayerRotary:
    """The rotary facts of ``layer`` of a loaded model, read from its own modules.

    Args:
        model: A :class:`~poslens.model.pos_model.PosModel` (a bridge over a transformers model, or a HookedTransformer).
        layer: The layer.

    Returns:
        The :class:`LayerRotary`.

    Raises:
        RotaryNotReadableError: When the model's rotary module, its frequencies or its attention scale cannot be read.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "gemma3"))
        >>> [round(float(layer_rotary(model, l).omega[1]), 4) for l in (0, 3)]   # θ^(−2/16): local θ = 1e4, global 1e6
        [0.3162, 0.1778]
    """
    if getattr(model, "kind", "bridge") == "hooked":
        return _hooked_facts(model, layer)
    omega = _hf_omega(model, layer)
    scale, softcap = _hf_scale_and_softcap(model, layer)
    return LayerRotary(layer, model.rotary_dim, omega, "half", scale, softcap)


def phase_steps(rows: torch.Tensor, key: int, offset: int | None) -> torch.Tensor:
    """Positions to turn each query row by so that it sits at ``offset`` from key ``key``: key + offset − i (0 if ``offset`` is None).

    Args:
        rows: Query positions i, [n].
        key: The key position p.
        offset: The frozen offset D, or ``None`` for every row's own offset (no turn: the identity).

    Returns:
        The steps, [n] float64.

    Example:
        >>> phase_steps(torch.arange(1, 4), 0, 8).tolist()
        [7.0, 6.0, 5.0]
    """
    if offset is None:
        return torch.zeros(rows.shape, dtype=torch.float64)
    return (key + offset - rows).to(torch.float64)
