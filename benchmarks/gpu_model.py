"""Save a random-weight model with Llama-3.2-1B's architecture, for timing on a machine the real weights cannot reach.

Usage:
    python benchmarks/gpu_model.py OUT_FOLDER [--device cuda] [--dtype bfloat16] [--small]

The config is Llama-3.2-1B's (16 layers, 32 query heads over 8 key/value heads
of 64 dimensions, hidden 2048, intermediate 8192, vocabulary 128256, RoPE base
500000 with the ``llama3`` frequency scaling, tied embeddings). The weights are
drawn on ``--device`` (on a GPU this takes seconds; 1.24e9 parameters drawn on
a CPU would take minutes) in ``--dtype`` and saved with safetensors, beside the
byte-level tokenizer of :func:`poslens.testing.byte_tokenizer` (260 tokens,
BOS id 1): ``poslens.load_model(OUT_FOLDER)`` then loads it like any local
model. Run time and memory depend on the architecture and T, not on the
weights' values or the tokens' ids, so the folder times what the real model
would; its figures mean nothing. ``--small`` keeps everything but the size
(2 layers, hidden 256, 4 query and 2 key/value heads of 64, intermediate 1024,
vocabulary 8192)
for the CPU dry run of ``benchmarks/gpu_suite.sh``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

#: Llama-3.2-1B's config.json, less the fields that name its own tokenizer's ids.
LLAMA32_1B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "initializer_range": 0.02,
}
#: What ``--small`` changes: the dry run's model, same code path at a CPU's size.
SMALL: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 8192,  # 128256 rows of logits in bfloat16 would take most of a CPU's dry run
}


def llama32_1b_config(small: bool = False) -> Any:
    """Llama-3.2-1B's config (``small``: the dry run's two-layer version), with the byte tokenizer's special ids.

    Args:
        small: Whether to shrink the model to :data:`SMALL`'s sizes.

    Returns:
        A transformers ``LlamaConfig``.

    Example:
        >>> cfg = llama32_1b_config()
        >>> cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.rope_parameters["rope_type"], cfg.rope_parameters["rope_theta"]
        (16, 8, 'llama3', 500000.0)
        >>> llama32_1b_config(small=True).hidden_size
        256
    """
    from transformers import LlamaConfig

    from poslens.testing import SPECIAL_TOKENS

    fields = {**LLAMA32_1B, **(SMALL if small else {})}
    # the byte tokenizer's ids (<s> = 1, </s> = 2, <pad> = 3), not Llama 3's 128000 / 128001
    ids = {f"{name}_token_id": SPECIAL_TOKENS.index(token) for name, token in (("bos", "<s>"), ("eos", "</s>"), ("pad", "<pad>"))}
    return LlamaConfig(**fields, **ids)


def save_random_llama32_1b(folder: str | Path, device: str = "cuda", dtype: str = "bfloat16", small: bool = False, seed: int = 0) -> Path:
    """Draw a random-weight Llama-3.2-1B (or the small version) on ``device`` and save it with a tokenizer to ``folder``.

    Args:
        folder: Where to save the model (created if missing).
        device: Where to draw the weights (``"cuda"``; ``"cpu"`` for the small version).
        dtype: The weights' dtype: ``"bfloat16"``, ``"float16"`` or ``"float32"``.
        seed: Seed of the random weights.
        small: Whether to save the dry run's two-layer version.

    Returns:
        The folder, ready for :func:`poslens.load_model`.

    Example:
        >>> import tempfile, poslens
        >>> folder = save_random_llama32_1b(tempfile.mkdtemp(), device="cpu", small=True)  # doctest: +SKIP
        >>> poslens.load_model(folder, dtype="bfloat16", device="cpu").n_layers  # doctest: +SKIP
        2
    """
    from transformers import AutoModelForCausalLM

    from poslens.testing import byte_tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    with torch.device(device):  # the parameters are created, and drawn, where they will run
        model = AutoModelForCausalLM.from_config(llama32_1b_config(small), dtype=getattr(torch, dtype))
    model.save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="folder to save the model in")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--small", action="store_true", help="the dry run's two-layer model")
    args = parser.parse_args()
    start = time.perf_counter()
    folder = save_random_llama32_1b(args.out, args.device, args.dtype, args.small)
    size = sum(f.stat().st_size for f in folder.iterdir())
    print(json.dumps({"folder": str(folder), "bytes": size, "seconds": round(time.perf_counter() - start, 1), "small": args.small}))


if __name__ == "__main__":
    main()
