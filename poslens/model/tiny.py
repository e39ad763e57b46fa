"""Tiny real Hugging Face models for tests, tutorials and quick experiments.

Each is a genuine transformers model class (Llama, Mistral with a sliding
window, Gemma 3 text) with random weights and a byte-level tokenizer, saved to
a folder so that :func:`poslens.load_model` loads it like any local model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

TINY_KINDS = ("llama", "mistral", "gemma3")
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]


def byte_tokenizer() -> Any:
    """A byte-level BPE tokenizer with no merges: 4 special tokens + 256 bytes.

    BOS is ``<s>`` (id 1), EOS ``</s>`` (id 2); it does not add BOS by itself.

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
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def tiny_config(kind: str = "llama", **overrides: Any) -> Any:
    """The config of a tiny model of ``kind`` in ``TINY_KINDS``; ``overrides`` change fields.

    Example:
        >>> cfg = tiny_config("mistral", sliding_window=8)
        >>> cfg.model_type, cfg.sliding_window, cfg.num_hidden_layers
        ('mistral', 8, 3)
    """
    from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig

    common = dict(
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
    if kind == "llama":
        config = LlamaConfig(**{**common, "rope_theta": 10000.0, **overrides})
    elif kind == "mistral":
        config = MistralConfig(**{**common, "rope_theta": 10000.0, "sliding_window": 8, "head_dim": 16, **overrides})
    elif kind == "gemma3":
        fields = {
            **common,
            "num_hidden_layers": 4,
            "head_dim": 16,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            },
            "query_pre_attn_scalar": 16,
            **overrides,
        }
        config = Gemma3TextConfig(**fields)
    else:
        raise ValueError(f"unknown tiny model kind {kind!r}; choose from {TINY_KINDS}")
    config.architectures = [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "gemma3": "Gemma3ForCausalLM"}[kind]]
    return config


def save_tiny_model(folder: str | Path, kind: str = "llama", seed: int = 0, state_dict: dict | None = None, **overrides: Any) -> Path:
    """Build a tiny random model of ``kind`` and save it with its tokenizer to ``folder``.

    ``state_dict`` reuses weights (e.g. a Llama's weights in a Mistral).
    Returns the folder, ready for :func:`poslens.load_model`.

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
