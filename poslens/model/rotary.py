"""The model's own rotary tables and score arithmetic, read from the loaded modules: what an edit of one logit needs.

For layer l, :func:`layer_rotary` returns a :class:`LayerRotary`: how many
dimensions of each query and key head RoPE rotates, the model's own cos/sin
tables for that layer at any position (computed as the model's rotary module
computes them, with its frequencies: NTK, llama3 and yarn scaling, per-layer
bases such as Gemma 3's local and global ones, an attention factor, the
model's dtype), how the rotated dimensions are paired (``"half"``: dimension k
with k + d/2, as transformers does; ``"adjacent"``: 2k with 2k + 1, as GPT-J
and some HookedTransformers), the factor that multiplies q·k, and the soft-cap
applied after it (Gemma 2), if any.

With these, :func:`move` takes a query as the hook ``hook_rot_q`` saw it,
rotated at its position i, and gives it as the model would have rotated it at
another position: it undoes the model's rotation at i exactly and applies the
model's rotation there. :mod:`poslens.mechanisms.key_phase` uses it to freeze
the key-0 phase (methodology §12).

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from poslens.errors import PoslensError

__all__ = ["LayerRotary", "RotaryNotReadableError", "layer_rotary", "move", "rotate_half_pairs"]


class RotaryNotReadableError(PoslensError, ValueError):
    """The model's rotary tables or score arithmetic cannot be read, so a logit cannot be recomputed from q and k.

    Example:
        >>> raise RotaryNotReadableError("no rotary module")
        Traceback (most recent call last):
        poslens.model.rotary.RotaryNotReadableError: no rotary module
    """


@dataclass(frozen=True, eq=False)
class LayerRotary:
    """How one layer rotates its queries and keys and turns them into logits.

    Attributes:
        layer: The layer.
        rotary_dim: The leading dimensions of each head that RoPE rotates (the rest pass through).
        pairing: ``"half"`` (dimension k pairs with k + rotary_dim/2) or ``"adjacent"`` (2k with 2k + 1).
        scale: The factor on q·k (1/√d_head for most models).
        softcap: ``c`` of the soft-cap c·tanh(x / c) applied after the scale, or ``None``.
        tables: ``tables(positions)`` gives the model's own (cos, sin) at those positions, [n, rotary_dim] each in the
            pairing's layout, with the values (and the rounding) the model's forward uses, as float64.

    Example:
        >>> import math
        >>> def tables(p):
        ...     angle = p.to(torch.float64)[:, None] * torch.tensor([1.0, 1.0], dtype=torch.float64)
        ...     return torch.cos(angle), torch.sin(angle)
        >>> facts = LayerRotary(0, 2, "half", 0.5, None, tables)
        >>> facts.logit(torch.tensor([2.0]))
        tensor([1.])
        >>> [round(float(v), 6) for v in facts.omega]   # the angle per position step of each rotated dimension
        [1.0, 1.0]
    """

    layer: int
    rotary_dim: int
    pairing: str
    scale: float
    softcap: float | None
    tables: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

    @property
    def omega(self) -> torch.Tensor:
        """The angle each rotated dimension turns by per position, [rotary_dim] float64 (read off the tables at position 1).

        Example:
            >>> facts = LayerRotary(0, 2, "half", 1.0, None, lambda p: (torch.cos(0.3 * p[:, None].double().expand(-1, 2)),
            ...                                                        torch.sin(0.3 * p[:, None].double().expand(-1, 2))))
            >>> [round(float(v), 6) for v in facts.omega]
            [0.3, 0.3]
        """
        cos, sin = self.tables(torch.tensor([1]))
        return torch.atan2(sin[0], cos[0])

    def logit(self, dot: torch.Tensor) -> torch.Tensor:
        """The model's logit from a q·k dot product: the scale, then the soft-cap if the model has one.

        Args:
            dot: q·k values (any shape).

        Returns:
            The logits, of ``dot``'s shape.

        Example:
            >>> LayerRotary(0, 2, "half", 1.0, 2.0, lambda p: None).logit(torch.tensor([100.0]))
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


def move(x: torch.Tensor, from_positions: torch.Tensor, to_positions: torch.Tensor, facts: LayerRotary) -> torch.Tensor:
    """Vectors the model rotated at ``from_positions``, as the model would have rotated them at ``to_positions``.

    Each vector's rotation is undone exactly (the inverse of the 2 × 2 blocks the model's
    tables give at its position, so any attention factor of the tables cancels too), then
    the model's own rotation at the new position is applied: R_to q, from R_from q.

    Args:
        x: Rotated vectors [..., n, d] (e.g. ``hook_rot_q`` with the heads moved before the positions).
        from_positions: The position each of the n vectors was rotated at, [n].
        to_positions: The position to rotate each at instead, [n].
        facts: The layer's :class:`LayerRotary`.

    Returns:
        The moved vectors, float64, of ``x``'s shape (dimensions past ``facts.rotary_dim`` unchanged).

    Example:
        >>> def tables(p):
        ...     angle = p.to(torch.float64)[:, None] * torch.tensor([0.5, 0.5], dtype=torch.float64)
        ...     return torch.cos(angle), torch.sin(angle)
        >>> facts = LayerRotary(0, 2, "half", 1.0, None, tables)
        >>> x = torch.tensor([[1.0, 0.0, 7.0]])                    # at position 0: a rotated pair and a passed dimension
        >>> moved = move(x, torch.tensor([0]), torch.tensor([1]), facts)   # one step on: a turn of 0.5
        >>> [round(v, 6) for v in moved[0].tolist()], [round(math.cos(0.5), 6), round(math.sin(0.5), 6)]
        ([0.877583, 0.479426, 7.0], [0.877583, 0.479426])
    """
    d = facts.rotary_dim
    x = x.to(torch.float64)
    cos_from, sin_from = (t.to(x.device) for t in facts.tables(from_positions))
    cos_to, sin_to = (t.to(x.device) for t in facts.tables(to_positions))
    part = x[..., :d]
    unrotated = (part * cos_from - rotate_half_pairs(part, facts.pairing) * sin_from) / (cos_from**2 + sin_from**2)
    turned = unrotated * cos_to + rotate_half_pairs(unrotated, facts.pairing) * sin_to
    return torch.cat([turned, x[..., d:]], dim=-1)


def _hf_rotary_module(hf_model: Any) -> Any:
    found = [module for name, module in hf_model.named_modules() if name.endswith("rotary_emb")]
    found = [getattr(module, "original_component", module) for module in found]
    return found[0] if found else None


def _hf_tables(model: Any, layer: int) -> tuple[int, Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]]:
    """(rotated width, tables) of a transformers model's layer, computed as its rotary module's forward computes them."""
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
    prefixes = ([f"{layer_types[layer]}_"] if layer_types is not None else []) + [""]
    prefix = next((p for p in prefixes if isinstance(getattr(module, f"{p}inv_freq", None), torch.Tensor)), None)
    if prefix is None:
        names = ", ".join(f"{p}inv_freq" for p in prefixes)
        raise RotaryNotReadableError(
            f"{model.name}'s rotary module {type(module).__name__} holds none of {names}: its RoPE frequencies cannot be read"
        )
    dtype = next(model.module.parameters()).dtype

    def tables(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # transformers' rotary forward, step by step: float32 angles, cos/sin times the attention factor, then the
        # model's dtype (read at each call: a dynamic RoPE may have changed the frequencies in the forward)
        inv_freq = getattr(module, f"{prefix}inv_freq").to("cpu", torch.float32)
        scaling = getattr(module, f"{prefix}attention_scaling", 1.0)
        freqs = positions.to("cpu").float()[:, None] * inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)  # transformers pairs dimension k with k + d/2 (rotate_half)
        return (emb.cos() * scaling).to(dtype).to(torch.float64), (emb.sin() * scaling).to(dtype).to(torch.float64)

    # the module's frequencies say how many dimensions are rotated: some classes (Llama in transformers 5) ignore a
    # config's partial_rotary_factor and rotate every dimension
    return 2 * getattr(module, f"{prefix}inv_freq").numel(), tables


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
    pairing = "adjacent" if getattr(cfg, "rotary_adjacent_pairs", False) else "half"
    cap = getattr(cfg, "attn_scores_soft_cap", None)
    softcap = float(cap) if cap is not None and cap > 0 else None

    def tables(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = attention.rotary_cos, attention.rotary_sin  # [n_ctx, rotary_dim], as the model computed them
        if int(positions.max()) >= cos.shape[0]:
            raise RotaryNotReadableError(
                f"{model.name}'s rotary tables hold {cos.shape[0]} positions; position {int(positions.max())} is past them: choose a smaller offset"
            )
        index = positions.to(cos.device).long()
        return cos[index].to("cpu", torch.float64), sin[index].to("cpu", torch.float64)

    return LayerRotary(layer, int(cfg.rotary_dim), pairing, 1.0 / float(attention.attn_scale), softcap, tables)


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
    rotary_dim, tables = _hf_tables(model, layer)
    scale, softcap = _hf_scale_and_softcap(model, layer)
    return LayerRotary(layer, rotary_dim, "half", scale, softcap, tables)
