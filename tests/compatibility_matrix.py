"""The compatibility matrix: every tiny model kind tests/integration/test_compatibility.py builds, loads and tests.

:data:`TINY_MODELS` holds 64 :class:`poslens.testing.TinyKind`: one per architecture poslens supports
(48, :data:`TINY_KINDS`) and one per kind it must refuse (16, :data:`UNSUPPORTED_KINDS`);
:data:`REFUSED_CONFIGS` lists 19 architectures refused from their config alone. The kinds that
docstrings, tutorials and benchmarks use live in :mod:`poslens.testing` and are taken from there,
so each kind is written once. ``docs/make_supported_models.py`` writes docs/supported_models.md
from these tables (with tests/architecture_coverage.py). Import it from a test as
``from compatibility_matrix import ...`` (pytest puts tests/ on ``sys.path``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poslens import testing
from poslens.testing import TinyKind

# Two sliding-window layers (W = 8), then a global one: the layout of the kinds whose global layers skip RoPE.
_TWO_SLIDING_THEN_GLOBAL: dict[str, Any] = {
    "rope_theta": 10000.0,
    "sliding_window": 8,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
}

#: Every kind, supported or refused. Where the default random weights leave attention too flat for a RoPE change
#: to move the log-probs measurably (partial rotary turns only 4 or 8 of 16 dimensions), a kind gets larger ones
#: (initializer_range).
TINY_MODELS: dict[str, TinyKind] = {
    "llama": testing.TINY_MODELS["llama"],
    "mistral": testing.TINY_MODELS["mistral"],
    "gemma3": testing.TINY_MODELS["gemma3"],
    # Llama 3.x: the llama3 rope scaling; a short original context so that it changes the tiny model's frequencies.
    "llama3": TinyKind(
        "Llama 3.x",
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
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
    "gemma2": testing.TINY_MODELS["gemma2"],
    "phi3": TinyKind("Phi-3", "Phi3Config", "Phi3ForCausalLM", {"rope_theta": 10000.0, "sliding_window": 16}),
    "olmo2": TinyKind("OLMo 2", "Olmo2Config", "Olmo2ForCausalLM", {"rope_theta": 10000.0}),
    "gpt-neox": TinyKind(
        "GPT-NeoX / Pythia",
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        {
            "vocab_size": 260,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 1024,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 3,
            "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
            "initializer_range": 0.06,
        },
        common=False,
    ),
    "stablelm": testing.TINY_MODELS["stablelm"],
    "gemma": testing.TINY_MODELS["gemma"],
    "phi": testing.TINY_MODELS["phi"],
    "starcoder2": TinyKind("StarCoder2", "Starcoder2Config", "Starcoder2ForCausalLM", {"rope_theta": 10000.0, "sliding_window": 16}),
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
            "rope_theta": 10000.0,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
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
            "rope_theta": 10000.0,
            "num_key_value_heads": 4,
            "kv_lora_rank": 16,
            "q_lora_rank": None,
            "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 8,
            "v_head_dim": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "first_k_dense_replace": 1,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
        },
    ),
    "deepseek-v3": TinyKind(
        "DeepSeek-V3",
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        {
            "rope_theta": 10000.0,
            "num_key_value_heads": 4,
            "kv_lora_rank": 16,
            "q_lora_rank": 32,
            "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 8,
            "v_head_dim": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "first_k_dense_replace": 1,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
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
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
            "initializer_range": 0.06,
        },
    ),
    "olmoe": TinyKind("OLMoE", "OlmoeConfig", "OlmoeForCausalLM", {"rope_theta": 10000.0, "num_experts": 4, "num_experts_per_tok": 2}),
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
            "vocab_size": 260,
            "hidden_size": 64,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "multi_query": True,
            "parallel_attn": True,
            "new_decoder_architecture": False,
            "alibi": False,
            "ffn_hidden_size": 128,
            "max_position_embeddings": 1024,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 3,
            "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
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
            "rope_theta": 10000.0,
            "moe_num_experts": 4,
            "moe_k": 2,
            "moe_intermediate_size": 32,
            "moe_num_shared_experts": 1,
            "moe_layer_start_index": 1,
        },
    ),
    "apertus": TinyKind(
        "Apertus",
        "ApertusConfig",
        "ApertusForCausalLM",
        {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        },
    ),
    "arcee": TinyKind("Arcee (AFM)", "ArceeConfig", "ArceeForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    "bitnet": TinyKind("BitNet", "BitNetConfig", "BitNetForCausalLM", {"rope_theta": 10000.0}),
    "hunyuan-dense": TinyKind("Hunyuan (dense)", "HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    "jais2": TinyKind("Jais 2", "Jais2Config", "Jais2ForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    # YaRN, and a query temperature that grows past original_max_position_embeddings: poslens measures up to there.
    "ministral3": TinyKind(
        "Ministral 3",
        "Ministral3Config",
        "Ministral3ForCausalLM",
        {
            "head_dim": 16,
            "max_position_embeddings": 128,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.1,
            },
        },
    ),
    "seed-oss": TinyKind("Seed-OSS", "SeedOssConfig", "SeedOssForCausalLM", {"head_dim": 16, "rope_theta": 10000.0}),
    "vaultgemma": TinyKind(
        "VaultGemma",
        "VaultGemmaConfig",
        "VaultGemmaForCausalLM",
        {
            "head_dim": 16,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "rope_theta": 10000.0,
            "query_pre_attn_scalar": 16,
            "initializer_range": 0.06,
        },
    ),
    "youtu": TinyKind(
        "Youtu-LLM",
        "YoutuConfig",
        "YoutuForCausalLM",
        {
            "rope_theta": 10000.0,
            "num_key_value_heads": 4,
            "kv_lora_rank": 16,
            "q_lora_rank": 32,
            "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 8,
            "v_head_dim": 16,
        },
    ),
    "glm4-moe-lite": TinyKind(
        "GLM-4.7 Flash (MoE, latent attention)",
        "Glm4MoeLiteConfig",
        "Glm4MoeLiteForCausalLM",
        {
            "rope_theta": 10000.0,
            "num_key_value_heads": 4,
            "kv_lora_rank": 16,
            "q_lora_rank": 32,
            "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 8,
            "v_head_dim": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
        },
    ),
    "flex-olmo": TinyKind("FlexOlmo", "FlexOlmoConfig", "FlexOlmoForCausalLM", {"rope_theta": 10000.0, "num_experts": 4, "num_experts_per_tok": 2}),
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
                "vocab_size": 262,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 4,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "sliding_window": 8,
                "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                },
                "query_pre_attn_scalar": 16,
                "max_position_embeddings": 1024,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "pad_token_id": 3,
            },
            "vision_config": {
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "image_size": 28,
                "patch_size": 14,
            },
            "mm_tokens_per_image": 4,
            "boi_token_index": 260,
            "eoi_token_index": 261,
            "image_token_index": 261,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 3,
            "tie_word_embeddings": False,
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
            "vocab_size": 260,
            "n_embd": 64,
            "n_layer": 2,
            "n_head": 4,
            "rotary_dim": 8,
            "n_positions": 1024,
            "n_ctx": 1024,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        common=False,
        refused="RoPE base fixed in transformers' code (no rope_parameters to read or change)",
    ),
    "falcon-gqa": TinyKind(
        "Falcon 40B / 180B",
        "FalconConfig",
        "FalconForCausalLM",
        {
            "vocab_size": 260,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_kv_heads": 2,
            "multi_query": False,
            "new_decoder_architecture": True,
            "alibi": False,
            "ffn_hidden_size": 128,
            "max_position_embeddings": 1024,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 3,
            "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
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
            "head_dim": 16,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
            "num_hidden_layers": 2,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
        },
        refused="attention sinks (a learned logit per head in every softmax)",
    ),
    "gemma4": TinyKind(
        "Gemma 4",
        "Gemma4TextConfig",
        "Gemma4ForCausalLM",
        {
            "num_hidden_layers": 2,
            "head_dim": 16,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
            "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 260,
        },
        refused="head sizes that vary from layer to layer",
    ),
    # Chunked attention and NoPE layers.
    "llama4": TinyKind(
        "Llama 4",
        "Llama4TextConfig",
        "Llama4ForCausalLM",
        {
            "head_dim": 16,
            "rope_theta": 10000.0,
            "num_local_experts": 2,
            "num_experts_per_tok": 1,
            "intermediate_size_mlp": 128,
            "num_hidden_layers": 2,
        },
        refused="chunked attention (and NoPE layers)",
    ),
    # Linear-attention (gated DeltaNet) layers between the softmax-attention ones; the other hybrids are refused alike.
    "qwen3-next": TinyKind(
        "Qwen3-Next",
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        {
            "head_dim": 16,
            "num_experts": 2,
            "num_experts_per_tok": 1,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "linear_num_value_heads": 4,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "num_hidden_layers": 2,
            "layer_types": ["linear_attention", "full_attention"],
        },
        refused="layers without softmax attention (linear attention)",
    ),
    # TransformerLens' generic attention bridge: hook_attn_scores holds the post-softmax weights.
    "nanochat": TinyKind(
        "nanochat",
        "NanoChatConfig",
        "NanoChatForCausalLM",
        {"rope_theta": 10000.0, "num_hidden_layers": 2},
        refused="pre-softmax scores not exposed by TransformerLens 4.3",
    ),
    "jetmoe": TinyKind(
        "JetMoE",
        "JetMoeConfig",
        "JetMoeForCausalLM",
        {
            "vocab_size": 260,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "kv_channels": 16,
            "intermediate_size": 64,
            "num_local_experts": 2,
            "num_experts_per_tok": 1,
            "max_position_embeddings": 1024,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 3,
            "tie_word_embeddings": False,
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
            "head_dim": 16,
            "rope_theta": 10000.0,
            "num_hidden_layers": 2,
            "num_experts": 2,
            "num_experts_per_tok": 1,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
        },
        refused="pre-softmax scores not exposed by TransformerLens 4.3",
    ),
    "modernbert-decoder": TinyKind(
        "ModernBERT decoder",
        "ModernBertDecoderConfig",
        "ModernBertDecoderForCausalLM",
        {
            "vocab_size": 260,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 1024,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 3,
            "cls_token_id": 1,
            "sep_token_id": 2,
            "tie_word_embeddings": False,
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
#: Architectures poslens refuses from their config alone, before any weights are read: tests/integration/test_compatibility.py
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


def tiny_config(kind: str = "llama", **overrides: Any) -> Any:
    """The config of a tiny model of ``kind``, a key of :data:`TINY_MODELS`; ``overrides`` change fields.

    Args:
        kind: A key of :data:`TINY_MODELS`.
        **overrides: Config fields to change.

    Returns:
        The transformers config.

    Raises:
        ValueError: When ``kind`` is not a kind of the matrix.

    Example:
        >>> tiny_config("llama3").rope_parameters["rope_type"]
        'llama3'
    """
    if kind not in TINY_MODELS:
        raise ValueError(f"unknown tiny model kind {kind!r}; choose from {tuple(TINY_MODELS)}")
    return testing.tiny_config(TINY_MODELS[kind], **overrides)


def save_tiny_model(folder: str | Path, kind: str = "llama", seed: int = 0, state_dict: dict | None = None, **overrides: Any) -> Path:
    """Build a tiny random model of ``kind`` (a key of :data:`TINY_MODELS`) and save it with its tokenizer to ``folder``.

    Args:
        folder: Where to save the model.
        kind: A key of :data:`TINY_MODELS`.
        seed: Seed of the random weights.
        state_dict: Weights to use instead of random ones.
        **overrides: Config fields to change.

    Returns:
        The folder, ready for :func:`poslens.load_model`.

    Raises:
        ValueError: When ``kind`` is not a kind of the matrix.

    Example:
        >>> import tempfile
        >>> (save_tiny_model(tempfile.mkdtemp(), "qwen2") / "config.json").exists()
        True
    """
    if kind not in TINY_MODELS:
        raise ValueError(f"unknown tiny model kind {kind!r}; choose from {tuple(TINY_MODELS)}")
    return testing.save_tiny_model(folder, TINY_MODELS[kind], seed=seed, state_dict=state_dict, **overrides)
