"""Tiny real Hugging Face models for tests, tutorials and quick experiments.

Each is a genuine transformers model class (Llama, Llama 3, Qwen2, Qwen3,
Mistral, Ministral 3, Gemma 1, 2 and 3, VaultGemma, Phi, Phi-3, OLMo 1, 2 and 3, GPT-NeoX,
StableLM, StarCoder2, Granite, Cohere, GLM, GLM-4, EXAONE 3 and 4, Falcon 7B, Nemotron,
ERNIE 4.5, Apertus, Arcee, BitNet, Hunyuan, Jais 2, Seed-OSS, Youtu, and the MoE models Mixtral,
Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 and V3, GLM-4.5, OLMoE, FlexOlmo, Granite MoE, ERNIE 4.5 MoE
and MiniMax-M2; see :data:`TINY_MODELS`, which also holds the kinds poslens refuses) with random
weights and a byte-level tokenizer, saved to a folder so that :func:`poslens.load_model` loads
it like any local model. :data:`REFUSED_CONFIGS` lists architectures refused from their config alone.
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
        >>> TINY_MODELS["gpt-neox"].family, TINY_MODELS["gpt-neox"].architecture
        ('GPT-NeoX / Pythia', 'GPTNeoXForCausalLM')
    """

    family: str
    config_class: str
    architecture: str
    fields: dict[str, Any] = field(default_factory=dict)
    common: bool = True
    refused: str | None = None


# Two sliding-window layers (W = 8), then a global one: the layout of the kinds whose global layers skip RoPE.
_TWO_SLIDING_THEN_GLOBAL: dict[str, Any] = {
    "rope_theta": 10000.0, "sliding_window": 8, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
}

#: The compatibility matrix: every kind here is built, loaded and tested by tests/test_compatibility.py,
#: and docs/make_supported_models.py writes docs/supported_models.md from it. Where the default random
#: weights leave attention too flat for a RoPE change to move the log-probs measurably (partial rotary
#: turns only 4 or 8 of 16 dimensions), a kind gets larger ones (initializer_range).
TINY_MODELS: dict[str, TinyKind] = {
    "llama": TinyKind("Llama 2 / SmolLM", "LlamaConfig", "LlamaForCausalLM", {"rope_theta": 10000.0}),
    "mistral": TinyKind(
        "Mistral", "MistralConfig", "MistralForCausalLM", {"rope_theta": 10000.0, "sliding_window": 8, "head_dim": 16}
    ),
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
    # Llama 3.x: the llama3 rope scaling; a short original context so that it changes the tiny model's frequencies.
    "llama3": TinyKind(
        "Llama 3.x",
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            "rope_parameters": {
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
            },
        },
    ),
    "qwen2": TinyKind("Qwen2 / Qwen2.5", "Qwen2Config", "Qwen2ForCausalLM", {"rope_theta": 10000.0}),
    "qwen3": TinyKind("Qwen3", "Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    "qwen3-yarn": TinyKind(
        "Qwen3 with YaRN",
        "Qwen3Config",
        "Qwen3ForCausalLM",
        {
            "head_dim": 16,
            "max_position_embeddings": 64,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16},
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
    "phi3": TinyKind("Phi-3", "Phi3Config", "Phi3ForCausalLM", {"rope_theta": 10000.0, "sliding_window": 16}),
    "olmo2": TinyKind("OLMo 2", "Olmo2Config", "Olmo2ForCausalLM", {"rope_theta": 10000.0}),
    "gpt-neox": TinyKind(
        "GPT-NeoX / Pythia",
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        {
            "vocab_size": 260, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 3, "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
            "initializer_range": 0.06,
        },
        common=False,
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
    "gemma": TinyKind(
        "Gemma (1)", "GemmaConfig", "GemmaForCausalLM", {"head_dim": 16, "rope_theta": 10000.0, "initializer_range": 0.06}
    ),
    "phi": TinyKind(
        "Phi-1 / Phi-2",
        "PhiConfig",
        "PhiForCausalLM",
        {
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "initializer_range": 0.06,
        },
    ),
    "starcoder2": TinyKind(
        "StarCoder2", "Starcoder2Config", "Starcoder2ForCausalLM", {"rope_theta": 10000.0, "sliding_window": 16}
    ),
    "granite": TinyKind("Granite", "GraniteConfig", "GraniteForCausalLM", {"rope_theta": 10000.0}),
    "cohere": TinyKind("Cohere (Command R)", "CohereConfig", "CohereForCausalLM", {"rope_theta": 10000.0, "logit_scale": 1.0}),
    "glm": TinyKind(
        "GLM",
        "GlmConfig",
        "GlmForCausalLM",
        {
            "head_dim": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "initializer_range": 0.06,
        },
    ),
    "olmo": TinyKind("OLMo (1)", "OlmoConfig", "OlmoForCausalLM", {"rope_theta": 10000.0}),
    "olmo3": TinyKind(
        "OLMo 3",
        "Olmo3Config",
        "Olmo3ForCausalLM",
        {
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
            },
        },
    ),
    "exaone": TinyKind("EXAONE 3", "ExaoneConfig", "ExaoneForCausalLM", {"rope_theta": 10000.0}),
    "mixtral": TinyKind(
        "Mixtral (MoE)",
        "MixtralConfig",
        "MixtralForCausalLM",
        {"rope_theta": 10000.0, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    "qwen2-moe": TinyKind(
        "Qwen2-MoE",
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            "rope_theta": 10000.0, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64,
        },
    ),
    "qwen3-moe": TinyKind(
        "Qwen3-MoE",
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {"rope_theta": 10000.0, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    ),
    # Multi-head latent attention: 8 unrotated + 8 rotated query/key dimensions per head. transformers' eager
    # attention needs as many key/value heads as heads here.
    "deepseek-v2": TinyKind(
        "DeepSeek-V2",
        "DeepseekV2Config",
        "DeepseekV2ForCausalLM",
        {
            "rope_theta": 10000.0, "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": None,
            "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 1, "n_shared_experts": 1,
            "n_group": 1, "topk_group": 1,
        },
    ),
    "deepseek-v3": TinyKind(
        "DeepSeek-V3",
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        {
            "rope_theta": 10000.0, "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 32,
            "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 1, "n_shared_experts": 1,
            "n_group": 1, "topk_group": 1,
        },
    ),
    "glm4": TinyKind(
        "GLM-4",
        "Glm4Config",
        "Glm4ForCausalLM",
        {
            "head_dim": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "initializer_range": 0.06,
        },
    ),
    "glm4-moe": TinyKind(
        "GLM-4.5 (MoE)",
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        {
            "head_dim": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "initializer_range": 0.06,
        },
    ),
    "olmoe": TinyKind(
        "OLMoE", "OlmoeConfig", "OlmoeForCausalLM", {"rope_theta": 10000.0, "num_experts": 4, "num_experts_per_tok": 2}
    ),
    "granite-moe": TinyKind(
        "Granite MoE",
        "GraniteMoeConfig",
        "GraniteMoeForCausalLM",
        {"rope_theta": 10000.0, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    # Falcon 7B's layout (one key/value head, parallel attention); alibi=False, as in every Falcon since the 7B.
    "falcon": TinyKind(
        "Falcon 7B",
        "FalconConfig",
        "FalconForCausalLM",
        {
            "vocab_size": 260, "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "multi_query": True,
            "parallel_attn": True, "new_decoder_architecture": False, "alibi": False, "ffn_hidden_size": 128,
            "max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
            "tie_word_embeddings": False, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        },
        common=False,
    ),
    # EXAONE 4 with global attention only (as the 1.2B): RoPE in every layer. With sliding layers, see exaone4-hybrid.
    "exaone4": TinyKind(
        "EXAONE 4 (global attention)",
        "Exaone4Config",
        "Exaone4ForCausalLM",
        {"rope_theta": 10000.0, "sliding_window": None, "layer_types": ["full_attention"] * 3},
    ),
    "nemotron": TinyKind(
        "Nemotron",
        "NemotronConfig",
        "NemotronForCausalLM",
        {
            "head_dim": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "initializer_range": 0.06,
        },
    ),
    "ernie4.5": TinyKind("ERNIE 4.5", "Ernie4_5Config", "Ernie4_5ForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    "ernie4.5-moe": TinyKind(
        "ERNIE 4.5 MoE",
        "Ernie4_5_MoeConfig",
        "Ernie4_5_MoeForCausalLM",
        {
            "rope_theta": 10000.0, "moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 32,
            "moe_num_shared_experts": 1, "moe_layer_start_index": 1,
        },
    ),
    "apertus": TinyKind(
        "Apertus",
        "ApertusConfig",
        "ApertusForCausalLM",
        {
            "rope_parameters": {
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
            },
        },
    ),
    "arcee": TinyKind("Arcee (AFM)", "ArceeConfig", "ArceeForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    "bitnet": TinyKind("BitNet", "BitNetConfig", "BitNetForCausalLM", {"rope_theta": 10000.0}),
    "hunyuan-dense": TinyKind(
        "Hunyuan (dense)", "HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}
    ),
    "jais2": TinyKind("Jais 2", "Jais2Config", "Jais2ForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    # YaRN, and a query temperature that grows past original_max_position_embeddings: poslens measures up to there.
    "ministral3": TinyKind(
        "Ministral 3",
        "Ministral3Config",
        "Ministral3ForCausalLM",
        {
            "head_dim": 16, "max_position_embeddings": 128,
            "rope_parameters": {
                "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1,
            },
        },
    ),
    "seed-oss": TinyKind("Seed-OSS", "SeedOssConfig", "SeedOssForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    "vaultgemma": TinyKind(
        "VaultGemma",
        "VaultGemmaConfig",
        "VaultGemmaForCausalLM",
        {
            "head_dim": 16, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "rope_theta": 10000.0, "query_pre_attn_scalar": 16, "initializer_range": 0.06,
        },
    ),
    "youtu": TinyKind(
        "Youtu-LLM",
        "YoutuConfig",
        "YoutuForCausalLM",
        {
            "rope_theta": 10000.0, "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 32,
            "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
        },
    ),
    "glm4-moe-lite": TinyKind(
        "GLM-4.7 Flash (MoE, latent attention)",
        "Glm4MoeLiteConfig",
        "Glm4MoeLiteForCausalLM",
        {
            "rope_theta": 10000.0, "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 32,
            "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
        },
    ),
    "flex-olmo": TinyKind(
        "FlexOlmo", "FlexOlmoConfig", "FlexOlmoForCausalLM", {"rope_theta": 10000.0, "num_experts": 4, "num_experts_per_tok": 2}
    ),
    "minimax-m2": TinyKind(
        "MiniMax-M2",
        "MiniMaxM2Config",
        "MiniMaxM2ForCausalLM",
        {"head_dim": 16, "rope_theta": 10000.0, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    # Gemma 3's image-text model: the text decoder of "gemma3" under a SigLIP tower that token inputs never reach.
    "gemma3-multimodal": TinyKind(
        "Gemma 3 (image-text)",
        "Gemma3Config",
        "Gemma3ForConditionalGeneration",
        {
            "text_config": {
                "vocab_size": 262, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 8,
                "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                },
                "query_pre_attn_scalar": 16, "max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2,
                "pad_token_id": 3,
            },
            "vision_config": {
                "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                "image_size": 28, "patch_size": 14,
            },
            "mm_tokens_per_image": 4, "boi_token_index": 260, "eoi_token_index": 261, "image_token_index": 261,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3, "tie_word_embeddings": False,
        },
        common=False,
    ),
    # Kinds poslens refuses, kept to test the refusal.
    "gpt2": TinyKind(
        "GPT-2",
        "GPT2Config",
        "GPT2LMHeadModel",
        {"vocab_size": 260, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2, "bos_token_id": 1, "eos_token_id": 2},
        common=False,
        refused="no rotary position embeddings (learned absolute positions)",
    ),
    "helium": TinyKind(
        "Helium",
        "HeliumConfig",
        "HeliumForCausalLM",
        {"head_dim": 16, "rope_theta": 10000.0},
        refused="no TransformerLens architecture adapter",
    ),
    "gptj": TinyKind(
        "GPT-J",
        "GPTJConfig",
        "GPTJForCausalLM",
        {"vocab_size": 260, "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8, "n_positions": 1024, "bos_token_id": 1, "eos_token_id": 2},
        common=False,
        refused="RoPE base fixed in transformers' code (no rope_parameters to read or change)",
    ),
    "codegen": TinyKind(
        "CodeGen",
        "CodeGenConfig",
        "CodeGenForCausalLM",
        {
            "vocab_size": 260, "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8, "n_positions": 1024, "n_ctx": 1024,
            "bos_token_id": 1, "eos_token_id": 2,
        },
        common=False,
        refused="RoPE base fixed in transformers' code (no rope_parameters to read or change)",
    ),
    "falcon-gqa": TinyKind(
        "Falcon 40B / 180B",
        "FalconConfig",
        "FalconForCausalLM",
        {
            "vocab_size": 260, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_kv_heads": 2,
            "multi_query": False, "new_decoder_architecture": True, "alibi": False, "ffn_hidden_size": 128,
            "max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
            "tie_word_embeddings": False, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        },
        common=False,
        refused="grouped key/value heads in a fused QKV matrix that TransformerLens 4.3 splits wrongly",
    ),
    # Global layers without RoPE: Cohere 2 and EXAONE 4 with sliding layers (AFMoE does the same).
    "cohere2": TinyKind(
        "Cohere 2 (Command R7B, Command A)",
        "Cohere2Config",
        "Cohere2ForCausalLM",
        _TWO_SLIDING_THEN_GLOBAL,
        refused="global layers without RoPE (NoPE layers)",
    ),
    "exaone4-hybrid": TinyKind(
        "EXAONE 4 (sliding + global)",
        "Exaone4Config",
        "Exaone4ForCausalLM",
        _TWO_SLIDING_THEN_GLOBAL,
        refused="global layers without RoPE (NoPE layers)",
    ),
    # A learned sink logit per head joins every softmax.
    "gpt-oss": TinyKind(
        "gpt-oss",
        "GptOssConfig",
        "GptOssForCausalLM",
        {
            "head_dim": 16, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
            "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
        },
        refused="attention sinks (a learned logit per head in every softmax)",
    ),
    "gemma4": TinyKind(
        "Gemma 4",
        "Gemma4TextConfig",
        "Gemma4ForCausalLM",
        {
            "num_hidden_layers": 2, "head_dim": 16, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
            "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 260,
        },
        refused="head sizes that vary from layer to layer",
    ),
    # Chunked attention and NoPE layers.
    "llama4": TinyKind(
        "Llama 4",
        "Llama4TextConfig",
        "Llama4ForCausalLM",
        {
            "head_dim": 16, "rope_theta": 10000.0, "num_local_experts": 2, "num_experts_per_tok": 1,
            "intermediate_size_mlp": 128, "num_hidden_layers": 2,
        },
        refused="chunked attention (and NoPE layers)",
    ),
    # Linear-attention (gated DeltaNet) layers between the softmax-attention ones; the other hybrids are refused alike.
    "qwen3-next": TinyKind(
        "Qwen3-Next",
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        {
            "head_dim": 16, "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32, "linear_num_value_heads": 4, "linear_num_key_heads": 2,
            "linear_key_head_dim": 16, "linear_value_head_dim": 16, "num_hidden_layers": 2,
            "layer_types": ["linear_attention", "full_attention"],
        },
        refused="layers without softmax attention (linear attention)",
    ),
    # TransformerLens' generic attention bridge: hook_attn_scores holds the post-softmax weights.
    "nanochat": TinyKind(
        "nanochat", "NanoChatConfig", "NanoChatForCausalLM", {"rope_theta": 10000.0, "num_hidden_layers": 2},
        refused="pre-softmax scores not exposed by TransformerLens 4.3",
    ),
    "jetmoe": TinyKind(
        "JetMoE",
        "JetMoeConfig",
        "JetMoeForCausalLM",
        {
            "vocab_size": 260, "hidden_size": 64, "num_hidden_layers": 2, "num_key_value_heads": 2, "kv_channels": 16,
            "intermediate_size": 64, "num_local_experts": 2, "num_experts_per_tok": 1, "max_position_embeddings": 1024,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3, "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        },
        common=False,
        refused="pre-softmax scores not exposed by TransformerLens 4.3",
    ),
    "laguna": TinyKind(
        "Laguna",
        "LagunaConfig",
        "LagunaForCausalLM",
        {
            "head_dim": 16, "rope_theta": 10000.0, "num_hidden_layers": 2, "num_experts": 2, "num_experts_per_tok": 1,
            "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
        },
        refused="pre-softmax scores not exposed by TransformerLens 4.3",
    ),
    "modernbert-decoder": TinyKind(
        "ModernBERT decoder",
        "ModernBertDecoderConfig",
        "ModernBertDecoderForCausalLM",
        {
            "vocab_size": 260, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3, "cls_token_id": 1,
            "sep_token_id": 2, "tie_word_embeddings": False,
        },
        common=False,
        refused="pre-softmax scores not exposed by TransformerLens 4.3",
    ),
    # Every third layer has no RoPE (NoPE), as in the real SmolLM3 (every fourth there).
    "smollm3": TinyKind(
        "SmolLM3",
        "SmolLM3Config",
        "SmolLM3ForCausalLM",
        {"rope_theta": 10000.0, "no_rope_layer_interval": 3},
        refused="layers without RoPE (NoPE layers)",
    ),
}
_HYBRID = "layers without softmax attention (state-space, linear-attention or convolution mixers)"
#: Architectures poslens refuses from their config alone, before any weights are read: tests/test_compatibility.py
#: saves each config class's default config (with these fields) and checks the refusal. HF class -> (config class,
#: fields, what the model has that poslens cannot measure).
REFUSED_CONFIGS: dict[str, tuple[str, dict[str, Any], str]] = {
    "BambaForCausalLM": ("BambaConfig", {}, _HYBRID),
    "FalconH1ForCausalLM": ("FalconH1Config", {}, _HYBRID),
    "GraniteMoeHybridForCausalLM": ("GraniteMoeHybridConfig", {}, _HYBRID),
    "JambaForCausalLM": ("JambaConfig", {}, _HYBRID),
    "Lfm2ForCausalLM": ("Lfm2Config", {"full_attn_idxs": [2, 5]}, _HYBRID),
    "Lfm2MoeForCausalLM": ("Lfm2MoeConfig", {"num_hidden_layers": 3, "layer_types": ["conv", "conv", "full_attention"]}, _HYBRID),
    "NemotronHForCausalLM": ("NemotronHConfig", {}, _HYBRID),
    "OlmoHybridForCausalLM": ("OlmoHybridConfig", {}, _HYBRID),
    "Qwen3_5ForCausalLM": ("Qwen3_5TextConfig", {}, _HYBRID),
    "Qwen3_5MoeForCausalLM": ("Qwen3_5MoeTextConfig", {}, _HYBRID),
    "RecurrentGemmaForCausalLM": ("RecurrentGemmaConfig", {}, _HYBRID),
    "Zamba2ForCausalLM": ("Zamba2Config", {}, _HYBRID),
    "GlmMoeDsaForCausalLM": ("GlmMoeDsaConfig", {}, "sparse attention over indexer-selected keys (indexed_attention)"),
    "DeepseekV4ForCausalLM": ("DeepseekV4Config", {}, "attention over compressed keys (compressed_sparse_attention)"),
    "AfmoeForCausalLM": ("AfmoeConfig", {}, "global layers without RoPE (NoPE layers)"),
    "Gemma4ForConditionalGeneration": ("Gemma4Config", {}, "head sizes that vary from layer to layer"),
    "Gemma4UnifiedForConditionalGeneration": ("Gemma4UnifiedConfig", {}, "head sizes that vary from layer to layer"),
    "Gemma3nForConditionalGeneration": ("Gemma3nConfig", {}, "layers that reuse earlier layers' keys and values (KV sharing)"),
    "HrmTextForCausalLM": ("HrmTextConfig", {"prefix_lm": False}, "recurrent cycles over its layers (and prefix-LM attention)"),
}
TINY_KINDS = tuple(kind for kind, spec in TINY_MODELS.items() if spec.refused is None)
UNSUPPORTED_KINDS = tuple(kind for kind, spec in TINY_MODELS.items() if spec.refused is not None)


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
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def tiny_config(kind: str = "llama", **overrides: Any) -> Any:
    """The config of a tiny model of ``kind`` (a key of :data:`TINY_MODELS`); ``overrides`` change fields.

    Args:
        kind: A key of :data:`TINY_MODELS`.
        **overrides: Config fields to change.

    Returns:
        The transformers config.

    Raises:
        ValueError: When ``kind`` is not a tiny model kind.

    Example:
        >>> cfg = tiny_config("mistral", sliding_window=8)
        >>> cfg.model_type, cfg.sliding_window, cfg.num_hidden_layers
        ('mistral', 8, 3)
        >>> tiny_config("llama3").rope_parameters["rope_type"]
        'llama3'
    """
    import transformers

    if kind not in TINY_MODELS:
        raise ValueError(f"unknown tiny model kind {kind!r}; choose from {tuple(TINY_MODELS)}")
    spec = TINY_MODELS[kind]
    fields = {**(COMMON_FIELDS if spec.common else {}), **copy.deepcopy(spec.fields), **overrides}
    config = getattr(transformers, spec.config_class)(**fields)
    config.architectures = [spec.architecture]
    return config


def save_tiny_model(folder: str | Path, kind: str = "llama", seed: int = 0, state_dict: dict | None = None, **overrides: Any) -> Path:
    """Build a tiny random model of ``kind`` and save it with its tokenizer to ``folder``.

    ``state_dict`` reuses weights (e.g. a Llama's weights in a Mistral).
    Returns the folder, ready for :func:`poslens.load_model`.

    Args:
        folder: Where to save the model.
        kind: A key of :data:`TINY_MODELS`.
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
        d_model=c.hidden_size, d_head=head_dim, n_heads=c.num_attention_heads, d_mlp=c.intermediate_size,
        n_layers=c.num_hidden_layers, n_ctx=c.max_position_embeddings, eps=c.rms_norm_eps, d_vocab=c.vocab_size,
        act_fn=c.hidden_act, normalization_type="RMS", positional_embedding_type="rotary", rotary_dim=head_dim,
        rotary_adjacent_pairs=False, rotary_base=(getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0),
        final_rms=True, gated_mlp=True,
        n_key_value_heads=c.num_key_value_heads if c.num_key_value_heads != c.num_attention_heads else None,
        original_architecture="LlamaForCausalLM", tokenizer_name=None, dtype=next(hf.parameters()).dtype,
        device=str(next(hf.parameters()).device), default_prepend_bos=True,
    )
    model = (cls or HookedTransformer)(cfg, tokenizer=tokenizer)
    missing, unexpected = model.load_state_dict(convert_llama_weights(hf, cfg), strict=False)
    buffers = ("IGNORE", "mask", "rotary_sin", "rotary_cos")
    if unexpected or not all(key.endswith(buffers) for key in missing):
        raise ValueError(f"converting the Llama weights left keys unmatched: missing {missing}, unexpected {unexpected}")
    return model.eval()
