"""Tiny real Hugging Face models for docstring examples, tutorials, benchmarks and tests.

A handful of kinds (:data:`TINY_MODELS`: Llama, Mistral, Gemma 1, 2 and 3, StableLM and
Phi), each a genuine transformers model class with random weights and a byte-level
tokenizer (:func:`byte_tokenizer`), saved to a folder by :func:`save_tiny_model` so that
:func:`poslens.load_model` loads it like any local model. :func:`hooked_llama` builds a
TransformerLens 3.x ``HookedTransformer`` from a tiny Llama. The full compatibility matrix
(every supported architecture, and the refused ones) lives with the tests, in
``tests/compatibility_matrix.py``; it builds its kinds with :func:`tiny_config`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]

#: Fields every tiny model shares (except where a kind sets ``common=False``): 260 tokens, head_dim 16.
COMMON_FIELDS: dict[str, Any] = dict(
    vocab_size=260,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=3,
    tie_word_embeddings=False,
)


@dataclass(frozen=True)
class TinyKind:
    """One tiny model kind: the family it stands for and how its config is built.

    ``fields`` go on top of :data:`COMMON_FIELDS` (unless ``common`` is False);
    ``refused`` is None for kinds poslens supports, else what the model lacks
    (such kinds exist to test the refusal).

    Attributes:
        family: The model family the kind stands for.
        config_class: The transformers config class to build.
        architecture: The transformers model class (``config.architectures``).
        fields: Config fields on top of :data:`COMMON_FIELDS`.
        common: Whether :data:`COMMON_FIELDS` apply.
        refused: ``None`` for a supported kind, else what the model lacks.

    Example:
        >>> TINY_MODELS["stablelm"].family, TINY_MODELS["stablelm"].architecture
        ('StableLM', 'StableLmForCausalLM')
    """

    family: str
    config_class: str
    architecture: str
    fields: dict[str, Any] = field(default_factory=dict)
    common: bool = True
    refused: str | None = None


#: The kinds docstrings, tutorials and benchmarks use (the compatibility matrix in tests/compatibility_matrix.py
#: holds these and many more). Where the default random weights leave attention too flat for a RoPE change to
#: move the log-probs measurably (partial rotary turns only 4 or 8 of 16 dimensions), a kind gets larger ones
#: (initializer_range).
TINY_MODELS: dict[str, TinyKind] = {
    "llama": TinyKind("Llama 2 / SmolLM", "LlamaConfig", "LlamaForCausalLM", {"rope_theta": 10000.0}),
    "mistral": TinyKind("Mistral", "MistralConfig", "MistralForCausalLM", {"rope_theta": 10000.0, "sliding_window": 8, "head_dim": 16}),
    "gemma3": TinyKind(
        "Gemma 3",
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            "num_hidden_layers": 4,
            "head_dim": 16,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            },
            "query_pre_attn_scalar": 16,
        },
    ),
    # Real Gemma 2 caps at 50 (attention) and 30 (logits); tiny random scores never reach that, so the caps are
    # small here, where they bend the scores and a missing cap would show in the tests.
    "gemma2": TinyKind(
        "Gemma 2",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {
            "head_dim": 16,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "rope_theta": 10000.0,
            "query_pre_attn_scalar": 16,
            "attn_logit_softcapping": 0.5,
            "final_logit_softcapping": 0.5,
            "initializer_range": 0.2,
        },
    ),
    "stablelm": TinyKind(
        "StableLM",
        "StableLmConfig",
        "StableLmForCausalLM",
        {
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
            "initializer_range": 0.06,
        },
    ),
    "gemma": TinyKind("Gemma (1)", "GemmaConfig", "GemmaForCausalLM", {"head_dim": 16, "rope_theta": 10000.0, "initializer_range": 0.06}),
    "phi": TinyKind(
        "Phi-1 / Phi-2",
        "PhiConfig",
        "PhiForCausalLM",
        {
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "initializer_range": 0.06,
        },
    ),
}


def byte_tokenizer() -> Any:
    """A byte-level BPE tokenizer with no merges: 4 special tokens + 256 bytes.

    BOS is ``<s>`` (id 1), EOS ``</s>`` (id 2); it does not add BOS by itself.

    Returns:
        A transformers ``PreTrainedTokenizerFast``.

    Example:
        >>> tok = byte_tokenizer()
        >>> tok.bos_token_id, len(tok), tok("hi").input_ids
        (1, 260, [75, 76])
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for symbol in sorted(alphabet):
        vocab[symbol] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def tiny_config(kind: str | TinyKind = "llama", **overrides: Any) -> Any:
    """The config of a tiny model of ``kind`` (a key of :data:`TINY_MODELS`, or a :class:`TinyKind`); ``overrides`` change fields.

    Args:
        kind: A key of :data:`TINY_MODELS`, or a :class:`TinyKind` (the compatibility matrix passes its own).
        **overrides: Config fields to change.

    Returns:
        The transformers config.

    Raises:
        ValueError: When ``kind`` is not a tiny model kind.

    Example:
        >>> cfg = tiny_config("mistral", sliding_window=8)
        >>> cfg.model_type, cfg.sliding_window, cfg.num_hidden_layers
        ('mistral', 8, 3)
        >>> tiny_config(TinyKind("Qwen2", "Qwen2Config", "Qwen2ForCausalLM", {"rope_theta": 10000.0})).model_type
        'qwen2'
    """
    import transformers

    if isinstance(kind, TinyKind):
        spec = kind
    elif kind in TINY_MODELS:
        spec = TINY_MODELS[kind]
    else:
        raise ValueError(f"unknown tiny model kind {kind!r}; choose from {tuple(TINY_MODELS)} or pass a TinyKind")
    fields = {**(COMMON_FIELDS if spec.common else {}), **copy.deepcopy(spec.fields), **overrides}
    config = getattr(transformers, spec.config_class)(**fields)
    config.architectures = [spec.architecture]
    return config


def save_tiny_model(folder: str | Path, kind: str | TinyKind = "llama", seed: int = 0, state_dict: dict | None = None, **overrides: Any) -> Path:
    """Build a tiny random model of ``kind`` and save it with its tokenizer to ``folder``.

    ``state_dict`` reuses weights (e.g. a Llama's weights in a Mistral).
    Returns the folder, ready for :func:`poslens.load_model`.

    Args:
        folder: Where to save the model.
        kind: A key of :data:`TINY_MODELS`, or a :class:`TinyKind`.
        seed: Seed of the random weights.
        state_dict: Weights to use instead of random ones.
        **overrides: Config fields to change.

    Returns:
        The folder.

    Example:
        >>> import tempfile, poslens
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> poslens.load_model(folder).n_layers
        3
    """
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(kind, **overrides), dtype=torch.float32)
    if state_dict is not None:
        model.load_state_dict(state_dict)
    model.save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def hooked_llama(hf: Any, tokenizer: Any, cls: Any = None) -> Any:
    """A rotary TransformerLens 3.x ``HookedTransformer`` with a transformers Llama's weights, built offline.

    ``HookedTransformer.from_pretrained`` wants a model name TransformerLens
    knows (and then the hub); this builds the config by hand and converts the
    weights with TransformerLens's own ``convert_llama_weights``, in ``hf``'s
    dtype, with no weight processing (not ``load_and_process_state_dict``:
    in TransformerLens 3.9 it casts every non-float32 tensor to float32 and back).
    For tests and tutorials on the tiny models; needs TransformerLens 3.x.

    Args:
        hf: a ``LlamaForCausalLM`` (not yet wrapped by a bridge).
        tokenizer: its tokenizer.
        cls: the class to build (default ``HookedTransformer``; SAELens's ``HookedSAETransformer`` works too).

    Returns:
        The model, in eval mode.

    Raises:
        ValueError: When the converted weights do not match the model's parameters one for one.

    Example:
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer  # doctest: +SKIP
        >>> hooked = hooked_llama(AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder))  # doctest: +SKIP
        >>> hooked.cfg.positional_embedding_type  # doctest: +SKIP
        'rotary'
    """
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_llama_weights

    c = hf.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    cfg = HookedTransformerConfig(
        d_model=c.hidden_size,
        d_head=head_dim,
        n_heads=c.num_attention_heads,
        d_mlp=c.intermediate_size,
        n_layers=c.num_hidden_layers,
        n_ctx=c.max_position_embeddings,
        eps=c.rms_norm_eps,
        d_vocab=c.vocab_size,
        act_fn=c.hidden_act,
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_dim=head_dim,
        rotary_adjacent_pairs=False,
        rotary_base=(getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0),
        final_rms=True,
        gated_mlp=True,
        n_key_value_heads=c.num_key_value_heads if c.num_key_value_heads != c.num_attention_heads else None,
        original_architecture="LlamaForCausalLM",
        tokenizer_name=None,
        dtype=next(hf.parameters()).dtype,
        device=str(next(hf.parameters()).device),
        default_prepend_bos=True,
    )
    model = (cls or HookedTransformer)(cfg, tokenizer=tokenizer)
    missing, unexpected = model.load_state_dict(convert_llama_weights(hf, cfg), strict=False)
    buffers = ("IGNORE", "mask", "rotary_sin", "rotary_cos")
    if unexpected or not all(key.endswith(buffers) for key in missing):
        raise ValueError(f"converting the Llama weights left keys unmatched: missing {missing}, unexpected {unexpected}")
    return model.eval()
