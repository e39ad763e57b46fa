"""The one check of a sequence's length against the model's context, made where a run enters.

:func:`check_seq_len` is called by ``poslens.measure`` and every other entry that runs the model
(and by :func:`poslens.model.hooks.run_with_hooks` when it is called directly); the forward passes
of a run do not check again. It imports nothing of the model layer, so that the forward pass can use it.

Example:
    >>> from types import SimpleNamespace
    >>> check_seq_len(SimpleNamespace(name="tiny", max_context=64), 64)   # fits
"""

from __future__ import annotations

from typing import Any

from poslens.errors import InputError


def check_seq_len(model: Any, seq_len: int, option: str | None = None, parameter: str | None = None) -> None:
    """Raise :class:`~poslens.errors.InputError` if ``seq_len`` exceeds the model's context.

    Args:
        model: the loaded model (``max_context`` 0 means no limit known).
        seq_len: tokens per sequence.
        option: the command-line option that set ``seq_len`` (e.g. ``"--fingerprint-len"``), named in
            the message with the largest value that fits; None for the general message.
        parameter: how Python callers set it, shown after the option (e.g. ``"fingerprint_len="``).

    Raises:
        InputError: ``seq_len`` > ``model.max_context`` (also a ``ValueError``).

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama", max_position_embeddings=32))
        >>> check_seq_len(model, 32)   # fits
        >>> check_seq_len(model, 48, option="--fingerprint-len", parameter="fingerprint_len=")
        Traceback (most recent call last):
        poslens.errors.InputError: sequence length 48 exceeds ... of 32 tokens; use --fingerprint-len 32 or less (in Python: fingerprint_len=)
    """
    context = model.max_context
    if not context or seq_len <= context:
        return
    if option is None:
        fix = f"use sequences of at most {context} tokens"
    else:
        fix = f"use {option} {context} or less" + (f" (in Python: {parameter})" if parameter else "")
    raise InputError(f"sequence length {seq_len} exceeds {model.name}'s context of {context} tokens; {fix}")
