"""A run's provenance: the model, corpus (with the hash of its tokens), settings and software versions that ``Result.meta`` records."""

from __future__ import annotations

import hashlib
import platform
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch

from poslens.model.corpus import Corpus
from poslens.model.pos_model import PosModel
from poslens.version import __version__


def tokens_sha256(tokens: torch.Tensor) -> str:
    """sha256 of token ids as little-endian int64: the provenance of exactly what was measured.

    Args:
        tokens: token ids [n_seqs, seq_len].

    Returns:
        64 hex digits.

    Example:
        >>> tokens_sha256(torch.tensor([[1, 2, 3]])) == tokens_sha256(torch.tensor([[1, 2, 3]], dtype=torch.int32))
        True
        >>> tokens_sha256(torch.tensor([[1, 2, 3]])) == tokens_sha256(torch.tensor([[1, 2, 4]]))
        False
    """
    data = tokens.detach().to("cpu", torch.int64).contiguous().numpy().astype("<i8").tobytes()
    return hashlib.sha256(data).hexdigest()


def _memory_hash(model: PosModel) -> dict[str, str]:
    """For a model measured from memory: the sha256 of its state dict now, as its source hash (taken at each measurement)."""
    if model.source != "memory":
        return {}
    from poslens.model.in_memory import state_dict_sha256

    return {"source_sha256": state_dict_sha256(model.module), "state_dict_sha256_at": "measurement"}


def run_metadata(model: PosModel, corpus: Corpus, settings: dict[str, Any]) -> dict[str, Any]:
    """Provenance of a run: model (with its RoPE type and scaling), corpus, settings and software versions.

    Args:
        model: The loaded model.
        corpus: The corpus.
        settings: The run's settings.

    Returns:
        The metadata, JSON-ready.

    Example:
        >>> run_metadata(model, corpus, {"groups": 8})["settings"]["groups"]  # doctest: +SKIP
        8
    """
    import transformer_lens
    import transformers

    return {
        "poslens_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {**model.describe(), **model.rope_record(), **_memory_hash(model)},
        "corpus": {**corpus.describe(), "tokens_sha256": tokens_sha256(corpus.tokens)},
        "settings": settings,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "transformer_lens": getattr(transformer_lens, "__version__", "?"),
            "numpy": np.__version__,
        },
    }
