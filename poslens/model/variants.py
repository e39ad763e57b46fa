"""Inference-time architecture variants (methodology §7).

A variant string is one or more specs joined by ``+``:

- ``ntk:<alpha>``: NTK-aware scaling, every RoPE base θ becomes θ·α^(d/(d−2)),
  d the rotary dimension;
- ``window:<W>``: a sliding window of width W ≥ 2 imposed in every layer (query i
  sees keys max(0, i−W+1)..i; a layer that already has a narrower window keeps it).
  W = 1 is refused: each query would see only itself, so its attention is 1 on
  that key whatever the scores, and there is no pattern to decompose;
- ``rope-base:<θ>``: every RoPE base set to θ, a finite number > 1 (the rotation
  frequencies θ^(−2k/d) then fall from 1 towards 1/θ).

Malformed specs raise :class:`~poslens.errors.InputError` (a ``ValueError``)
when parsed, before any model is loaded; the ``poslens`` command shows them as
``Invalid value for '--variant': ...``.

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

from poslens.errors import InputError, PoslensError


@dataclass(frozen=True)
class Variant:
    """A parsed variant; ``str(variant)`` gives back the canonical spec.

    Attributes:
        ntk_alpha: The NTK scaling factor α (``ntk:α``), or ``None``.
        sliding_window: An imposed sliding window W (``window:W``), or ``None``.
        rope_base: An imposed RoPE base θ (``rope-base:θ``), or ``None``.

    Example:
        >>> v = parse_variant("ntk:4+window:64")
        >>> v.ntk_alpha, v.sliding_window, str(v)
        (4.0, 64, 'ntk:4+window:64')
    """

    ntk_alpha: float | None = None
    sliding_window: int | None = None
    rope_base: float | None = None

    def __str__(self) -> str:
        parts = []
        if self.ntk_alpha is not None:
            parts.append(f"ntk:{_fmt(self.ntk_alpha)}")
        if self.rope_base is not None:
            parts.append(f"rope-base:{_fmt(self.rope_base)}")
        if self.sliding_window is not None:
            parts.append(f"window:{self.sliding_window}")
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


VARIANT_HELP = "variants are 'ntk:<alpha>' (alpha > 0), 'window:<W>' (W ≥ 2 tokens), 'rope-base:<theta>' (theta > 1), joined by '+'"

#: Why a RoPE base must exceed 1, for the messages of :func:`parse_variant` and :func:`apply_rope_variant`.
_BASE_RULE = (
    "a RoPE base θ must be finite and > 1, so that the rotation frequencies θ^(−2k/d) fall from 1 towards 1/θ; "
    "with θ ≤ 1 they are all 1 or grow past 1, and a tiny θ makes them overflow to inf (transformers computes them in "
    "float32, whatever the weights' dtype), which gives NaN scores"
)


def parse_variant(spec: str | Variant | None) -> Variant:
    """Parse a variant string such as ``"ntk:4"``, ``"window:64"`` or ``"rope-base:1e6"``.

    ``None``, ``""`` and ``"base"`` mean no variant.

    Args:
        spec: the variant string (``--variant`` of the ``poslens`` command,
            ``variant=`` of :func:`poslens.load_model`), or a :class:`Variant`,
            returned as it is.

    Returns:
        The parsed :class:`Variant`.

    Raises:
        InputError: a malformed spec, an unknown kind, a kind named twice, or a
            value out of range (``ntk`` alpha ≤ 0, ``window`` W not a whole
            number ≥ 2, ``rope-base`` θ not finite or ≤ 1); the message names
            the spec and lists the accepted forms.

    Example:
        >>> parse_variant("rope-base:1e6").rope_base
        1000000.0
        >>> parse_variant(None) == Variant()
        True
        >>> parse_variant("window:1")
        Traceback (most recent call last):
        poslens.errors.InputError: variant 'window:1': W must be a whole number ≥ 2: with W = 1 each query sees only itself, ...
        >>> parse_variant("rope-base:1e-300")
        Traceback (most recent call last):
        poslens.errors.InputError: variant 'rope-base:1e-300': theta must be > 1: a RoPE base θ must be finite and > 1, ...
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
            raise InputError(f"variant {spec!r} names {kind!r} twice")
        seen.add(kind)
        if not sep:
            raise InputError(f"variant {part!r} has no value; {VARIANT_HELP}")
        try:
            number = float(value)
        except ValueError:
            raise InputError(f"variant {part!r}: {value!r} is not a number; {VARIANT_HELP}") from None
        if not math.isfinite(number):
            raise InputError(f"variant {part!r}: value must be finite; {VARIANT_HELP}")
        if kind == "ntk":
            if number <= 0:
                raise InputError(f"variant {part!r}: alpha must be > 0; {VARIANT_HELP}")
            fields["ntk_alpha"] = number
        elif kind == "window":
            if number == 1:
                raise InputError(
                    f"variant {part!r}: W must be a whole number ≥ 2: with W = 1 each query sees only itself, so its "
                    "attention is 1 on that key whatever the scores, and there is no pattern to decompose (no C_res or "
                    f"C_mask); {VARIANT_HELP}"
                )
            if number < 1 or not number.is_integer() or number > 2**62:  # wider than any context: positions are int64
                raise InputError(
                    f"variant {part!r}: W must be a whole number ≥ 2 (and at most 2**62; a window at least as "
                    f"long as the sequence imposes nothing); {VARIANT_HELP}"
                )
            fields["sliding_window"] = int(number)
        elif kind == "rope-base":
            if number <= 0:
                raise InputError(f"variant {part!r}: theta must be > 0, and indeed > 1: {_BASE_RULE}; {VARIANT_HELP}")
            if number <= 1:
                raise InputError(f"variant {part!r}: theta must be > 1: {_BASE_RULE}; {VARIANT_HELP}")
            fields["rope_base"] = number
        else:
            raise InputError(f"unknown variant kind {kind!r}; {VARIANT_HELP}")
    return Variant(**fields)


def ntk_base(theta: float, alpha: float, rotary_dim: int) -> float:
    """NTK-aware scaled RoPE base θ·α^(d/(d−2)).

    Args:
        theta: The model's RoPE base θ.
        alpha: The scaling factor α.
        rotary_dim: The rotary dimension d.

    Returns:
        The scaled base.

    Example:
        >>> round(ntk_base(1e4, 4.0, 64))
        41829
        >>> ntk_base(1e4, 1.0, 64)
        10000.0
    """
    return theta * alpha ** (rotary_dim / (rotary_dim - 2))


def rope_parameter_dicts(config: Any) -> list[dict]:
    """The rope-parameter dicts of a transformers config (one, or one per layer type).

    Args:
        config: A transformers model config.

    Returns:
        The dicts, as they are in the config (edits change it).

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


class VariantNotSupportedError(PoslensError, ValueError):
    """The variant has no well-defined meaning for this model; the message says why.

    Raised by :func:`apply_rope_variant` (so by :func:`poslens.load_model`)
    before any weights are read: ``ntk:`` under a RoPE scaling of the model's
    own, or a variant that would give the model a RoPE base that is not
    finite or not > 1 (e.g. a tiny ``ntk`` alpha).

    Example:
        >>> from transformers import LlamaConfig
        >>> cfg = LlamaConfig(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0})
        >>> apply_rope_variant(cfg, parse_variant("ntk:2"), rotary_dim=16)
        Traceback (most recent call last):
        ...
        poslens.model.variants.VariantNotSupportedError: variant 'ntk:2' is refused for llama, rope_type 'linear': NTK-aware scaling ...
    """


def rope_types(config: Any) -> list[str]:
    """The ``rope_type`` of each rope-parameter dict of a config (``"default"`` = plain RoPE).

    Args:
        config: A transformers model config.

    Returns:
        One ``rope_type`` per rope-parameter dict.

    Example:
        >>> from transformers import LlamaConfig
        >>> rope_types(LlamaConfig()), rope_types(LlamaConfig(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}))
        (['default'], ['yarn'])
    """
    return [str(p.get("rope_type", "default")) for p in rope_parameter_dicts(config)]


def variant_refusal(config: Any, variant: Variant) -> str | None:
    """Why ``variant`` cannot be applied to a model with this config, or None if it can.

    ``ntk:`` is NTK-aware scaling of plain RoPE (methodology §7). A config whose RoPE
    is already scaled (``llama3``, ``yarn``, ``linear``, ``dynamic``, ``longrope``)
    rescales frequencies by its own rule around ``rope_theta``; scaling θ under it
    would compose two schemes, which is not NTK scaling, so it is refused.
    ``rope-base:`` sets θ under whatever scaling the model has, as the native model
    with that θ would, and ``window:`` masks scores: both apply to every RoPE model.

    Args:
        config: A transformers model config.
        variant: The variant to apply.

    Returns:
        The reason, or ``None``.

    Example:
        >>> from transformers import LlamaConfig
        >>> cfg = LlamaConfig(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0})
        >>> variant_refusal(cfg, parse_variant("rope-base:1e5")) is None
        True
        >>> variant_refusal(cfg, parse_variant("ntk:2"))
        "rope_type 'yarn': NTK-aware scaling θ·α^(d/(d−2)) is defined for plain RoPE; ..."
    """
    dicts = rope_parameter_dicts(config)
    if variant.changes_rope and not dicts:
        return "the config has no RoPE parameters to change"
    if variant.ntk_alpha is not None:
        scaled = sorted({t for t in rope_types(config) if t != "default"})
        if scaled:
            return (
                f"rope_type {scaled[0]!r}: NTK-aware scaling θ·α^(d/(d−2)) is defined for plain RoPE; this model's "
                f"{scaled[0]} rope scaling already rescales its frequencies by its own rule, so scaling θ under it "
                "would mean something else. Use 'rope-base:<theta>' to change θ under the model's own scaling"
            )
    return None


def apply_rope_variant(config: Any, variant: Variant, rotary_dim: int) -> None:
    """Change the RoPE base(s) of a transformers config in place, as the variant says.

    Raises :class:`VariantNotSupportedError` where :func:`variant_refusal` gives a
    reason, or where a resulting base is not finite or not > 1 (then the config
    is left unchanged).

    Args:
        config: A transformers model config, changed in place.
        variant: The variant to apply.
        rotary_dim: The rotary dimension d (for NTK scaling).

    Raises:
        VariantNotSupportedError: When the variant is refused for this config, or gives a base that is
            not finite or not > 1.

    Example:
        >>> from transformers import LlamaConfig
        >>> cfg = LlamaConfig(rope_theta=1e4, hidden_size=64, num_attention_heads=4)
        >>> apply_rope_variant(cfg, parse_variant("rope-base:5e5"), rotary_dim=16)
        >>> cfg.rope_parameters["rope_theta"]
        500000.0
    """
    reason = variant_refusal(config, variant)
    if reason is not None:
        raise VariantNotSupportedError(f"variant {str(variant)!r} is refused for {getattr(config, 'model_type', '?')}, {reason}")
    dicts = rope_parameter_dicts(config)
    thetas = []
    for params in dicts:
        theta = float(params["rope_theta"])
        if variant.rope_base is not None:
            theta = float(variant.rope_base)
        if variant.ntk_alpha is not None:
            try:
                theta = ntk_base(theta, variant.ntk_alpha, rotary_dim)
            except OverflowError:
                theta = math.inf
        if not (math.isfinite(theta) and theta > 1):
            raise VariantNotSupportedError(
                f"variant {str(variant)!r} gives {getattr(config, 'model_type', '?')} a RoPE base of {theta:g} "
                f"(from {float(params['rope_theta']):g}): {_BASE_RULE}. Choose an ntk alpha or rope-base that keeps it "
                "finite and > 1"
            )
        thetas.append(theta)
    for params, theta in zip(dicts, thetas, strict=False):
        params["rope_theta"] = theta


def window_hook(width: int):
    """A forward hook for ``hook_attn_scores`` that imposes a sliding window of ``width``.

    Scores of keys j ≤ i − width become the dtype minimum, the value the models'
    own masks use, so the softmax gives them weight 0.

    Args:
        width: The window W.

    Returns:
        ``hook(scores, hook)``, returning the masked scores.

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


def rope_summary(config: Any) -> dict[str, Any]:
    """The RoPE type and scaling of a transformers config, as run metadata records them.

    ``rope_type`` is ``"default"`` for plain RoPE, else the scaling's name
    (``"llama3"``, ``"yarn"``, …); ``rope_scaling`` holds the scaling's own
    fields (None for plain RoPE). Where layer types carry their own RoPE (Gemma 3),
    both are dicts keyed by layer type.

    Args:
        config: A transformers model config.

    Returns:
        ``{"rope_type": …, "rope_scaling": …}``.

    Example:
        >>> from transformers import LlamaConfig
        >>> yarn = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 16}
        >>> rope_summary(LlamaConfig(rope_parameters=yarn))
        {'rope_type': 'yarn', 'rope_scaling': {'factor': 4.0, 'original_max_position_embeddings': 16}}
        >>> rope_summary(LlamaConfig())
        {'rope_type': 'default', 'rope_scaling': None}
    """
    params = getattr(config, "rope_parameters", None) or {}

    def one(p: dict) -> tuple[str, dict | None]:
        scaling = {k: v for k, v in p.items() if k not in ("rope_type", "rope_theta", "partial_rotary_factor")}
        return str(p.get("rope_type", "default")), (scaling or None)

    if not params:
        return {"rope_type": None, "rope_scaling": None}
    if "rope_theta" in params:
        rope_type, scaling = one(params)
        return {"rope_type": rope_type, "rope_scaling": scaling}
    per_type = {name: one(p) for name, p in params.items() if isinstance(p, dict)}
    return {
        "rope_type": {name: t for name, (t, _) in per_type.items()},
        "rope_scaling": {name: s for name, (_, s) in per_type.items()},
    }
