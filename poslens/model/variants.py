"""Inference-time architecture variants (METHOD §7).

A variant string is one or more specs joined by ``+``:

- ``ntk:<alpha>``: NTK-aware scaling, every RoPE base θ becomes θ·α^(d/(d−2)),
  d the rotary dimension;
- ``window:<W>``: a sliding window of width W imposed in every layer (query i
  sees keys max(0, i−W+1)..i; a layer that already has a narrower window keeps it);
- ``rope-base:<θ>``: every RoPE base set to θ.

RoPE changes are applied to the Hugging Face config before the weights are
loaded, so the model is exactly the one transformers would build natively with
that base. The window is a hook on each layer's attention scores that sets the
scores outside the window to the dtype minimum, as the models' own masks do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Variant:
    """A parsed variant; ``str(variant)`` gives back the canonical spec.

    Example:
        >>> v = parse_variant("ntk:4+window:64")
        >>> v.ntk_alpha, v.window, str(v)
        (4.0, 64, 'ntk:4+window:64')
    """

    ntk_alpha: float | None = None
    window: int | None = None
    rope_base: float | None = None

    def __str__(self) -> str:
        parts = []
        if self.ntk_alpha is not None:
            parts.append(f"ntk:{_fmt(self.ntk_alpha)}")
        if self.rope_base is not None:
            parts.append(f"rope-base:{_fmt(self.rope_base)}")
        if self.window is not None:
            parts.append(f"window:{self.window}")
        return "+".join(parts) if parts else "base"

    @property
    def changes_rope(self) -> bool:
        """Whether the variant changes the RoPE base (``ntk`` or ``rope-base``), i.e. the model's config.

        Example:
            >>> parse_variant("ntk:4").changes_rope, parse_variant("window:64").changes_rope
            (True, False)
        """
        return self.ntk_alpha is not None or self.rope_base is not None


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


VARIANT_HELP = "variants are 'ntk:<alpha>' (alpha > 0), 'window:<W>' (W ≥ 1 tokens), 'rope-base:<theta>' (theta > 0), joined by '+'"


def parse_variant(spec: str | Variant | None) -> Variant:
    """Parse a variant string such as ``"ntk:4"``, ``"window:64"`` or ``"rope-base:1e6"``.

    ``None``, ``""`` and ``"base"`` mean no variant. Bad specs raise ``ValueError``
    with the accepted forms.

    Example:
        >>> parse_variant("rope-base:1e6").rope_base
        1000000.0
        >>> parse_variant(None) == Variant()
        True
    """
    if isinstance(spec, Variant):
        return spec
    if spec is None or spec.strip() in ("", "base"):
        return Variant()
    fields: dict[str, Any] = {}
    seen: set[str] = set()
    for part in spec.split("+"):
        kind, sep, value = part.strip().partition(":")
        if kind in seen:
            raise ValueError(f"variant {spec!r} names {kind!r} twice")
        seen.add(kind)
        if not sep:
            raise ValueError(f"variant {part!r} has no value; {VARIANT_HELP}")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"variant {part!r}: {value!r} is not a number; {VARIANT_HELP}") from None
        if not math.isfinite(number):
            raise ValueError(f"variant {part!r}: value must be finite; {VARIANT_HELP}")
        if kind == "ntk":
            if number <= 0:
                raise ValueError(f"variant {part!r}: alpha must be > 0; {VARIANT_HELP}")
            fields["ntk_alpha"] = number
        elif kind == "window":
            if number < 1 or not number.is_integer():
                raise ValueError(f"variant {part!r}: W must be a whole number ≥ 1; {VARIANT_HELP}")
            fields["window"] = int(number)
        elif kind == "rope-base":
            if number <= 0:
                raise ValueError(f"variant {part!r}: theta must be > 0; {VARIANT_HELP}")
            fields["rope_base"] = number
        else:
            raise ValueError(f"unknown variant kind {kind!r}; {VARIANT_HELP}")
    return Variant(**fields)


def ntk_base(theta: float, alpha: float, rotary_dim: int) -> float:
    """NTK-aware scaled RoPE base θ·α^(d/(d−2)).

    Example:
        >>> round(ntk_base(1e4, 4.0, 64))
        41829
        >>> ntk_base(1e4, 1.0, 64)
        10000.0
    """
    return theta * alpha ** (rotary_dim / (rotary_dim - 2))


def rope_parameter_dicts(config: Any) -> list[dict]:
    """The rope-parameter dicts of a transformers config (one, or one per layer type).

    Example:
        >>> from transformers import LlamaConfig
        >>> rope_parameter_dicts(LlamaConfig(rope_theta=5e4))[0]["rope_theta"]
        50000.0
    """
    params = getattr(config, "rope_parameters", None)
    if not params:
        return []
    if "rope_theta" in params:
        return [params]
    return [p for p in params.values() if isinstance(p, dict) and "rope_theta" in p]


def apply_rope_variant(config: Any, variant: Variant, rotary_dim: int) -> None:
    """Change the RoPE base(s) of a transformers config in place, as the variant says.

    Example:
        >>> from transformers import LlamaConfig
        >>> cfg = LlamaConfig(rope_theta=1e4, hidden_size=64, num_attention_heads=4)
        >>> apply_rope_variant(cfg, parse_variant("rope-base:5e5"), rotary_dim=16)
        >>> cfg.rope_parameters["rope_theta"]
        500000.0
    """
    dicts = rope_parameter_dicts(config)
    if variant.changes_rope and not dicts:
        raise ValueError("this config has no RoPE parameters to change")
    for params in dicts:
        theta = float(params["rope_theta"])
        if variant.rope_base is not None:
            theta = float(variant.rope_base)
        if variant.ntk_alpha is not None:
            theta = ntk_base(theta, variant.ntk_alpha, rotary_dim)
        params["rope_theta"] = theta


def window_hook(width: int):
    """A forward hook for ``hook_attn_scores`` that imposes a sliding window of ``width``.

    Scores of keys j ≤ i − width become the dtype minimum, the value the models'
    own masks use, so the softmax gives them weight 0.

    Example:
        >>> scores = torch.zeros(1, 1, 4, 4)
        >>> masked = window_hook(2)(scores, hook=None)
        >>> bool(masked[0, 0, 3, 1] == torch.finfo(torch.float32).min), float(masked[0, 0, 3, 2])
        (True, 0.0)
    """

    def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
        t_q, t_k = scores.shape[-2:]
        offset = t_k - t_q
        i = torch.arange(t_q, device=scores.device)[:, None] + offset
        j = torch.arange(t_k, device=scores.device)[None, :]
        outside = (i - j) >= width
        return scores.masked_fill(outside, torch.finfo(scores.dtype).min)

    return hook
