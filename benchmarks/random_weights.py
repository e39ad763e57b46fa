"""Save a model folder with a config's architecture and random weights, for timing without the weights.

Usage:
    python benchmarks/random_weights.py CONFIG_FOLDER OUT_FOLDER

CONFIG_FOLDER holds a Hugging Face ``config.json`` and tokenizer files (no
weights). Run time and memory of poslens depend on the architecture and T,
not on the weights' values, so a benchmark on the saved folder times what the
real model would; its figures (leakage and the rest) mean nothing. Used on
machines the real weights cannot travel to (see docs/benchmarks.md).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def save_random_weights(config_folder: str | Path, out: str | Path, seed: int = 0) -> Path:
    """Build ``config_folder``'s model with seeded random weights and save it, with the tokenizer, to ``out``.

    Example:
        >>> save_random_weights("smollm2-config", "/tmp/smollm2-random")  # doctest: +SKIP
        PosixPath('/tmp/smollm2-random')
    """
    config_folder, out = Path(config_folder), Path(out)
    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(config_folder)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    for file in config_folder.iterdir():
        if file.name.startswith("tokenizer") or file.name in ("chat_template.jinja", "special_tokens_map.json"):
            shutil.copy(file, out / file.name)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(save_random_weights(sys.argv[1], sys.argv[2]))
