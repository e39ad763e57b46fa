"""Which models poslens can measure: causal softmax attention with RoPE in every layer, read through a bridge's scores.

:func:`check_supported` reads a model's config before its weights load and
raises :class:`~poslens.model.pos_model.ModelNotSupportedError` with the reason
for what poslens cannot measure correctly: non-causal or recurrent models,
fixed or absent rotary embeddings, ALiBi, fused Falcon key/value groups, KV
sharing, per-layer head sizes, layers that are not softmax attention, and NoPE
layers. :func:`check_no_attention_sinks` and :func:`check_scores_hookable`
check the loaded model and its TransformerLens bridge, and
:func:`not_bridgeable` words TransformerLens's refusal.

Example:
    >>> from transformers import BertConfig, LlamaConfig
    >>> check_supported(LlamaConfig(), "tiny llama")    # a causal RoPE model passes
    >>> check_supported(BertConfig(), "bert")
    Traceback (most recent call last):
    poslens.model.pos_model.ModelNotSupportedError: bert (bert) is not a causal decoder: ...
"""

from __future__ import annotations

from typing import Any

from poslens.model.config_facts import layer_types
from poslens.model.pos_model import ModelNotSupportedError
from poslens.model.variants import rope_parameter_dicts

# Families whose attention is bidirectional or whose positions are not rotary.
_NON_CAUSAL = {"bert", "roberta", "deberta", "deberta-v2", "electra", "t5", "bart", "mbart", "modernbert", "distilbert"}


def check_supported(config: Any, label: str) -> None:
    """Raise unless the config describes a model poslens measures correctly (read before any weights load).

    Args:
        config: The model's transformers config (a multimodal one is read through its text config).
        label: The model's name, as the message names it.

    Raises:
        ModelNotSupportedError: the first reason the model cannot be measured correctly.

    Example:
        >>> from transformers import LlamaConfig
        >>> check_supported(LlamaConfig(), "tiny llama")
        >>> check_supported(LlamaConfig(no_rope_layers=[1, 0]), "nope")
        Traceback (most recent call last):
        poslens.model.pos_model.ModelNotSupportedError: nope (llama) has layers without rotary position embeddings (NoPE layers [1]): ...
    """
    model_type = getattr(config, "model_type", "?")
    bidirectional = getattr(config, "use_bidirectional_attention", False) or getattr(config, "prefix_lm", False)
    if getattr(config, "is_encoder_decoder", False) or model_type in _NON_CAUSAL or bidirectional:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) is not a causal decoder: poslens measures how the causal mask and "
            "position 0 carry absolute position, which needs causal attention."
        )
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "H_cycles", None) or getattr(text, "num_layers_per_stack", None):
        raise ModelNotSupportedError(
            f"{label} ({model_type}) runs its blocks several times in one forward pass (recurrent cycles): poslens "
            "measures each layer once per forward, so its figures would mix the passes."
        )
    if getattr(text, "rotary_dim", None) and not rope_parameter_dicts(text):
        raise ModelNotSupportedError(
            f"{label} ({model_type}) rotates {text.rotary_dim} dimensions of each head with a RoPE base fixed in "
            "transformers' code: its config has no rope_parameters, so poslens cannot read or change the base "
            "(rope_base, ntk:, rope-base:) it records. GPT-J and CodeGen are not supported yet."
        )
    if getattr(text, "alibi", False):
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has no rotary position embeddings (alibi=True: ALiBi biases): poslens studies "
            "RoPE models, where logits depend only on offsets."
        )
    if model_type == "falcon" and getattr(text, "new_decoder_architecture", False) and (text.num_kv_heads or 1) > 1:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) fuses {text.num_kv_heads} key/value groups into one query_key_value matrix "
            "(new_decoder_architecture, as in Falcon 40B and 180B), which the TransformerLens Falcon adapter splits "
            "as if queries, keys and values were contiguous blocks: its attention scores would be wrong. Falcon "
            "models with one key/value head (Falcon 7B) are supported."
        )
    shared = getattr(text, "num_kv_shared_layers", 0) or 0
    if shared:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) reuses the keys and values of earlier layers in its last {shared} layers (KV "
            "sharing) and mixes several residual streams per layer (AltUp): poslens has no tested path for either, so "
            "it refuses the model rather than risk figures that are silently wrong. Gemma 3n is not supported yet."
        )
    varying = sorted(getattr(text, "per_layer_attributes", None) or ())
    if varying:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has attention sizes that vary from layer to layer ({', '.join(varying)}, e.g. "
            "wider heads in the global layers): poslens records one head size for the whole model."
        )
    other = {layer: kind for layer, kind in enumerate(_layer_kinds(text)) if kind not in _SOFTMAX_LAYER_TYPES}
    if other:
        kinds = sorted(set(other.values()))
        what = "state-space, linear-attention or convolution mixers" if set(kinds) & _NO_SOFTMAX else "another attention rule"
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has layers whose token mixing is not plain causal softmax attention "
            f"({', '.join(kinds)} in layers {_some(sorted(other))}: {what}): poslens captures and fits the softmax "
            "attention scores of every layer, and cannot in these. Only models whose every layer is full or "
            "sliding-window softmax attention are supported."
        )
    no_rope = _nope_layers(text)
    if no_rope:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has layers without rotary position embeddings (NoPE layers {_some(no_rope)}): poslens "
            "treats every layer as a RoPE layer, so its figures for these layers would be wrong. Only models whose "
            "every layer uses RoPE are supported."
        )
    if not rope_parameter_dicts(text):
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has no rotary position embeddings: poslens studies RoPE models, where "
            "logits depend only on offsets; a model with learned or absolute positions carries position by design."
        )


# Layer types (config.layer_types) whose scores poslens captures; the others have no causal softmax over all
# visible keys: _NO_SOFTMAX ones have none at all ("hybrid" = attention and a state-space mixer side by side).
_SOFTMAX_LAYER_TYPES = {"full_attention", "sliding_attention"}
_NO_SOFTMAX = {"linear_attention", "hybrid", "conv", "mamba", "mamba2", "mlp", "moe", "recurrent"}


def _some(layers: list[int], most: int = 12) -> str:
    """A list of layer indices for a message, cut after ``most``."""
    return str(layers) if len(layers) <= most else f"{str(layers[:most])[:-1]}, … ({len(layers)} layers)]"


def _layer_kinds(config: Any) -> list[str]:
    """What mixes tokens in each layer, as the config names it (hybrid models name their state-space layers)."""
    for name in ("layer_types", "layers_block_type"):
        kinds = getattr(config, name, None)
        if kinds:
            return [str(kind) for kind in kinds][: config.num_hidden_layers]
    return ["full_attention"] * config.num_hidden_layers


# Architectures whose code skips RoPE in the layers that are not sliding-window layers (global NoPE), read from
# transformers' modeling code: Cohere2 (Command R7B, Command A), EXAONE 4 (when it has sliding layers) and AFMoE.
_GLOBAL_NOPE = {"cohere2": True, "exaone4": False, "afmoe": True}


def _nope_layers(config: Any) -> list[int]:
    """The layers that apply no RoPE (NoPE), from ``no_rope_layers`` (SmolLM3, Llama 4) or the architecture's rule."""
    no_rope = [layer for layer, uses in enumerate(getattr(config, "no_rope_layers", None) or []) if not uses]
    model_type = getattr(config, "model_type", "")
    if model_type in _GLOBAL_NOPE and (_GLOBAL_NOPE[model_type] or getattr(config, "sliding_window", None)):
        kinds = layer_types(config, config.num_hidden_layers)
        no_rope += [layer for layer, kind in enumerate(kinds) if kind != "sliding_attention"]
    return sorted(set(no_rope))


def _scores_hookable(bridge: Any, n_layers: int) -> bool:
    """Whether each layer's ``hook_attn_scores`` sees the pre-softmax scores, on their way into the softmax.

    TransformerLens' generic ``AttentionBridge`` runs the wrapped module as it is and fires ``hook_attn_scores``
    afterwards with the module's returned weights: post-softmax, and an edit there changes nothing downstream.
    Only the bridges that recompute attention themselves (their own ``forward``) expose the scores.
    """
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    attentions = [getattr(bridge.blocks[layer], "attn", None) for layer in range(n_layers)]
    return all(attn is not None and type(attn).forward is not AttentionBridge.forward for attn in attentions)


def _tl_version() -> str:
    from importlib.metadata import version

    return version("transformer-lens")


def not_bridgeable(config: Any, label: str, error: Exception) -> ModelNotSupportedError:
    """The error for a model TransformerLens could not bridge: the architecture, TransformerLens's reason and the fix.

    Args:
        config: The model's transformers config.
        label: The model's name, as the message names it.
        error: What TransformerLens raised while booting the bridge.

    Returns:
        The error to raise.

    Example:
        >>> from transformers import LlamaConfig
        >>> error = not_bridgeable(LlamaConfig(architectures=["NewLM"]), "mine", ValueError("Unsupported architecture NewLM"))
        >>> str(error).startswith("mine (NewLM) cannot be bridged: TransformerLens")
        True
    """
    architecture = ", ".join(getattr(config, "architectures", None) or []) or getattr(config, "model_type", "?")
    detail = str(error).split(". Available architectures")[0][:300]  # TransformerLens appends its whole list
    no_adapter = "supported architecture" in detail or "Unsupported architecture" in detail
    what = f"has no architecture adapter for {architecture}" if no_adapter else "failed to bridge it"
    return ModelNotSupportedError(
        f"{label} ({architecture}) cannot be bridged: TransformerLens {_tl_version()} {what} ({detail}). "
        "poslens reads attention scores through the TransformerLens bridge, so it needs an architecture "
        "TransformerLens supports; the documentation's 'Supported models' page lists the ones poslens tests."
    )


def check_weights_loaded(module: Any, label: str) -> None:
    """Raise if the model's weights are not there: parameters or buffers on PyTorch's ``meta`` device (shapes without values).

    A model built under ``torch.device("meta")`` (or loaded with ``device_map="meta"``) passes every check of its
    config, and then fails in its first forward pass; poslens stops before, naming the first such tensor.

    Args:
        module: The torch module that holds the weights.
        label: The model's name, as the message names it.

    Raises:
        ModelNotSupportedError: A parameter or buffer is on the meta device.

    Example:
        >>> import torch
        >>> check_weights_loaded(torch.nn.Linear(2, 2), "mine")
        >>> with torch.device("meta"):
        ...     empty = torch.nn.Linear(2, 2)
        >>> check_weights_loaded(empty, "mine")
        Traceback (most recent call last):
        poslens.model.pos_model.ModelNotSupportedError: mine has no weights: weight is on PyTorch's meta device ...
    """
    tensors = [*module.named_parameters(), *module.named_buffers()]
    empty = next((name for name, tensor in tensors if tensor.is_meta), None)
    if empty is not None:
        raise ModelNotSupportedError(
            f"{label} has no weights: {empty} is on PyTorch's meta device (shapes without values, as under "
            "torch.device('meta') or device_map='meta'). Load its weights first (for example "
            "AutoModelForCausalLM.from_pretrained(folder), or model.to_empty(device='cpu') then model.load_state_dict(...)), "
            "then pass it to poslens.load_model"
        )


def check_no_attention_sinks(hf: Any, label: str, model_type: str) -> None:
    """Raise if the model has learned attention sinks (a ``.sinks`` logit per head that joins each softmax).

    Args:
        hf: The transformers model.
        label: The model's name, as the message names it.
        model_type: Its config's ``model_type``, as the message names it.

    Raises:
        ModelNotSupportedError: the model has attention sinks.

    Example:
        >>> import torch
        >>> check_no_attention_sinks(torch.nn.Linear(2, 2), "linear", "none")   # no sinks: passes
    """
    sinks = sorted({param.split(".")[-2] for param, _ in hf.named_parameters() if param.endswith(".sinks")})
    if sinks:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has attention sinks ({', '.join(sinks)}.sinks): a learned logit per "
            "head joins each softmax beside the keys, so the softmax of the scores poslens captures is not the "
            "model's attention, and its fits would be wrong."
        )


def check_scores_hookable(bridge: Any, n_layers: int, label: str, model_type: str) -> None:
    """Raise unless every layer's ``hook_attn_scores`` of the bridge sees the pre-softmax scores.

    Args:
        bridge: The TransformerLens bridge around the model.
        n_layers: The number of layers.
        label: The model's name, as the message names it.
        model_type: Its config's ``model_type``, as the message names it.

    Raises:
        ModelNotSupportedError: the bridge's adapter exposes only the post-softmax weights.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> check_scores_hookable(model.bridge, model.n_layers, model.name, model.architecture)
    """
    if not _scores_hookable(bridge, n_layers):
        raise ModelNotSupportedError(
            f"{label} ({model_type}): the TransformerLens {_tl_version()} adapter for this architecture "
            "exposes only the post-softmax attention weights (its hook_attn_scores fires after the attention has run), "
            "so poslens can neither read the pre-softmax scores nor edit them in interventions."
        )
