"""What poslens reads from a transformers text config: head widths, context, and each layer's kind, window and RoPE base.

These are the facts a :class:`~poslens.model.pos_model.PosModel` records when
:func:`poslens.model.wrapping.wrap_hf_model` wraps a model, and that the
support checks (:mod:`poslens.model.support`) read.

Example:
    >>> from transformers import MistralConfig
    >>> config = MistralConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, sliding_window=16)
    >>> head_dims(config), layer_windows(config, 2)
    ((16, 16), [16, 16])
"""

from __future__ import annotations

from typing import Any

from poslens.model.variants import rope_parameter_dicts


def head_dims(text_config: Any) -> tuple[int, int]:
    """(d_head, rotary_dim) of a text config: the query/key width per head and how much of it is rotated.

    Args:
        text_config: A transformers text config.

    Returns:
        ``(d_head, rotary_dim)``.

    Example:
        >>> from transformers import LlamaConfig
        >>> head_dims(LlamaConfig(hidden_size=64, num_attention_heads=4))
        (16, 16)
    """
    d_head = getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads
    # DeepSeek's multi-head latent attention: queries and keys are qk_nope_head_dim unrotated dimensions followed by
    # qk_rope_head_dim rotated ones (transformers sets head_dim to the rotated part alone).
    mla_rotary = getattr(text_config, "qk_rope_head_dim", None)
    if mla_rotary and getattr(text_config, "qk_nope_head_dim", None) is not None:
        d_head = int(text_config.qk_nope_head_dim) + int(mla_rotary)
    # transformers ≥ 5 keeps partial_rotary_factor inside rope_parameters (GPT-NeoX, Phi, StableLM).
    factor = getattr(text_config, "partial_rotary_factor", None)
    if factor is None:
        factor = next((p["partial_rotary_factor"] for p in rope_parameter_dicts(text_config) if "partial_rotary_factor" in p), None)
    return int(d_head), int(mla_rotary) if mla_rotary else int(d_head * float(factor or 1.0))


def max_context(config: Any) -> int:
    """The longest sequence poslens measures: the model's context, or less where the logits stop being relative.

    Ministral 3 multiplies its queries by 1 + β·log(1 + ⌊i / L⌋) (Llama 4's attention temperature, β =
    ``llama_4_scaling_beta``, L = ``original_max_position_embeddings``): past L its logits depend on the absolute
    position i by design, which poslens would attribute to the residual stream. Its context ends at L.

    Args:
        config: A transformers text config.

    Returns:
        The number of tokens; 0 where the config gives no context.

    Example:
        >>> from transformers import LlamaConfig
        >>> max_context(LlamaConfig(max_position_embeddings=512))
        512
    """
    context = int(getattr(config, "max_position_embeddings", 0) or 0)
    for params in rope_parameter_dicts(config):
        if params.get("llama_4_scaling_beta"):
            original = int(params["original_max_position_embeddings"])
            context = min(context, original) if context else original
    return context


def layer_types(config: Any, n_layers: int) -> list[str]:
    """Each layer's attention type (``config.layer_types``), ``full_attention`` where the config names none.

    Args:
        config: A transformers text config.
        n_layers: The number of layers.

    Returns:
        One type per layer.

    Example:
        >>> from transformers import LlamaConfig
        >>> layer_types(LlamaConfig(), 2)
        ['full_attention', 'full_attention']
    """
    types = getattr(config, "layer_types", None)
    return list(types) if types else ["full_attention"] * n_layers


def layer_windows(config: Any, n_layers: int) -> list[int | None]:
    """Each layer's sliding-window width, None for a layer that sees every earlier token.

    Args:
        config: A transformers text config.
        n_layers: The number of layers.

    Returns:
        One width (or None) per layer.

    Example:
        >>> from transformers import LlamaConfig
        >>> layer_windows(LlamaConfig(), 2)
        [None, None]
    """
    width = getattr(config, "sliding_window", None)
    if not width:
        return [None] * n_layers
    if not getattr(config, "layer_types", None):
        return [int(width)] * n_layers  # e.g. Mistral: every layer windowed
    return [int(width) if t == "sliding_attention" else None for t in layer_types(config, n_layers)]


def layer_bases(config: Any, n_layers: int) -> list[float]:
    """Each layer's RoPE base θ, from ``config.rope_parameters`` (one for all layers, or one per layer type).

    Args:
        config: A transformers text config.
        n_layers: The number of layers.

    Returns:
        One base per layer.

    Example:
        >>> from transformers import LlamaConfig
        >>> layer_bases(LlamaConfig(rope_theta=10000.0), 2)
        [10000.0, 10000.0]
    """
    params = config.rope_parameters
    if "rope_theta" in params:
        return [float(params["rope_theta"])] * n_layers
    return [float(params[t]["rope_theta"]) for t in layer_types(config, n_layers)]
