"""What a caller checks of the model it was given: that it is a PosModel, that a sequence fits its context, and that a corpus fits its tokenizer.

:func:`check_seq_len` is written in :mod:`poslens.model.context` and re-exported here.

Example:
    >>> import tempfile, poslens
    >>> from poslens.testing import save_tiny_model
    >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama", max_position_embeddings=64))
    >>> require_pos_model(model, "measure()"); check_seq_len(model, 64)
"""

from __future__ import annotations

import os
from typing import Any

from poslens.errors import InputError
from poslens.model.context import check_seq_len  # noqa: F401 (re-exported: callers check the context here)
from poslens.model.corpus import Corpus, tokenizer_record
from poslens.model.in_memory import model_kind
from poslens.model.pos_model import PosModel


def require_pos_model(model: Any, where: str) -> None:
    """Raise ``TypeError`` unless ``model`` is a :class:`PosModel`, saying what was passed and how to load one.

    ``where`` names the caller in the message, e.g. ``"measure()"``. poslens
    records the window, RoPE and BOS facts of a model when it wraps it, so a
    bridge, a HookedTransformer or a Hugging Face model is first wrapped by
    :func:`load_model` (as it is, without a copy): the message says so.

    Args:
        model: What the caller was given.
        where: The caller, as the message names it.

    Raises:
        TypeError: When ``model`` is not a :class:`PosModel`.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> require_pos_model(model, "measure()")   # a PosModel passes
        >>> require_pos_model(model.bridge, "measure()")
        Traceback (most recent call last):
        TypeError: measure() needs a model loaded by poslens.load_model(...) (a PosModel); got TransformerBridge...
    """
    if isinstance(model, PosModel):
        return
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedModel

    kind = type(model).__name__
    load = "Pass the model's registry name, local folder or cached Hugging Face id to poslens.load_model"
    if isinstance(model, TransformerBridge) or model_kind(model) == "hooked":
        advice = "Wrap it first, as it is: model = poslens.load_model(bridge) (no copy is made, nothing is saved)"
    elif isinstance(model, PreTrainedModel):
        advice = "Wrap it first, as it is: model = poslens.load_model(hf_model, tokenizer=tokenizer) (no copy is made, nothing is saved)"
    elif isinstance(model, (str, os.PathLike)):
        advice = f"Load it first: model = poslens.load_model({str(model)!r})"
    else:
        advice = f"{load} and pass what it returns"
    raise TypeError(f"{where} needs a model loaded by poslens.load_model(...) (a PosModel); got {kind}. {advice}.")


def check_corpus_fits(model: PosModel, corpus: Corpus) -> None:
    """Raise :class:`~poslens.errors.InputError` unless ``corpus`` was tokenized for ``model``'s tokenizer and its ids fit the model.

    A corpus from :func:`poslens.model.corpus.make_corpus` carries a :func:`poslens.model.corpus.tokenizer_record`; it must
    match the model's. Any corpus, with or without the record (say one built
    by hand), must hold only ids in ``0 … vocabulary size − 1`` of the model's
    embedding. ``measure`` and ``collect_sums`` call this first.

    Args:
        model: The loaded model.
        corpus: the corpus to check.

    Raises:
        InputError: When the corpus was tokenized for another tokenizer (naming both), or holds an id
            outside the model's vocabulary (naming the first); also a ``ValueError``.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> import torch
        >>> from poslens.model.corpus import Corpus
        >>> check_corpus_fits(model, poslens.make_corpus(model, "random", n_seqs=2, seq_len=8))   # fits
        >>> check_corpus_fits(model, Corpus(torch.full((1, 4), 999), "random", 0, "none", [999], ["?"]))
        Traceback (most recent call last):
        poslens.errors.InputError: the corpus holds token id 999 but the model ... has 260 token ids (0 … 259); ...
    """
    record = {key: corpus.meta.get(key) for key in ("tokenizer_of", "tokenizer_vocab", "tokenizer_fingerprint")}
    if record["tokenizer_fingerprint"] is not None:
        mine = tokenizer_record(model)
        if record["tokenizer_fingerprint"] != mine["tokenizer_fingerprint"]:
            same_size = record["tokenizer_vocab"] == mine["tokenizer_vocab"]
            theirs_id = f", tokenizer {record['tokenizer_fingerprint']}" if same_size else ""
            mine_id = f", tokenizer {mine['tokenizer_fingerprint']}" if same_size else ""
            raise InputError(
                f"this corpus was tokenized for {record['tokenizer_of']} (vocab {record['tokenizer_vocab']}{theirs_id}) "
                f"but the model is {model.name} (vocab {mine['tokenizer_vocab']}{mine_id}); "
                f"make the corpus with poslens.make_corpus(model, ...) for this model"
            )
    n_ids = _embedding_size(model)
    if corpus.tokens.numel() == 0 or n_ids is None:
        return
    low, high = int(corpus.tokens.min()), int(corpus.tokens.max())
    if low < 0 or high >= n_ids:
        bad = low if low < 0 else high
        raise InputError(
            f"the corpus holds token id {bad} but the model {model.name} has {n_ids} token ids (0 … {n_ids - 1}); "
            f"make the corpus with poslens.make_corpus(model, ...) for this model"
        )


def _embedding_size(model: PosModel) -> int | None:
    try:
        return int(model.vocab_size())
    except (AttributeError, TypeError):
        return None
