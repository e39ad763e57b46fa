"""Log-probabilities from a plain transformers model and from a poslens bridge, for parity tests."""

from __future__ import annotations

from pathlib import Path

import torch

import poslens
from poslens.model.hooks import run_with_hooks


def native_log_probs(folder: str | Path, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probs from a plain transformers model loaded from ``folder``: no bridge involved."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        return model(tokens).logits.log_softmax(-1)


def bridge_log_probs(model: poslens.PosModel, tokens: torch.Tensor) -> torch.Tensor:
    return run_with_hooks(model, tokens, [], logits=True).log_softmax(-1)
