"""The one place that knows the bridge's hook names, and the hooked forward pass.

Names follow TransformerLens: ``blocks.{l}.attn.hook_attn_scores`` holds the
logits fed to the softmax ([batch, head, query, key], masked entries at the
dtype minimum), ``hook_pattern`` the softmax, and so on. Measurements pass
hooks that reduce what they see on the spot; nothing is cached whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from poslens.model.context import check_seq_len
from poslens.model.user_model import in_use

Hook = tuple[str, Callable[..., Any]]


def embed() -> str:
    """Output of the token embedding (Gemma's √d scaling included).

    Returns:
        The hook name.

    Example:
        >>> embed()
        'hook_embed'
    """
    return "hook_embed"


def resid_pre(layer: int) -> str:
    """Residual stream entering block ``layer``.

    Args:
        layer: The block index.

    Returns:
        The hook name.

    Example:
        >>> resid_pre(3)
        'blocks.3.hook_resid_pre'
    """
    return f"blocks.{layer}.hook_resid_pre"


def resid_post(layer: int) -> str:
    """Residual stream leaving block ``layer``.

    Args:
        layer: The block index.

    Returns:
        The hook name.

    Example:
        >>> resid_post(3)
        'blocks.3.hook_resid_post'
    """
    return f"blocks.{layer}.hook_resid_post"


def attn_scores(layer: int) -> str:
    """Attention logits of ``layer`` as fed to the softmax, [batch, head, query, key].

    Args:
        layer: The layer index.

    Returns:
        The hook name.

    Example:
        >>> attn_scores(0)
        'blocks.0.attn.hook_attn_scores'
    """
    return f"blocks.{layer}.attn.hook_attn_scores"


def attn_pattern(layer: int) -> str:
    """Attention weights (softmax) of ``layer``, [batch, head, query, key].

    Args:
        layer: The layer index.

    Returns:
        The hook name.

    Example:
        >>> attn_pattern(0)
        'blocks.0.attn.hook_pattern'
    """
    return f"blocks.{layer}.attn.hook_pattern"


def attn_qkv(layer: int, which: str, rotated: bool = False) -> str:
    """Query, key or value of ``layer``: ``which`` in ``q``, ``k``, ``v``; ``rotated`` for RoPE'd q/k.

    Args:
        layer: The layer index.
        which: ``"q"``, ``"k"`` or ``"v"``.
        rotated: The query or key after RoPE (not for ``"v"``).

    Returns:
        The hook name.

    Raises:
        ValueError: When ``which`` is not ``q``, ``k`` or ``v``, or ``rotated`` is asked for values.

    Example:
        >>> attn_qkv(2, "q", rotated=True)
        'blocks.2.attn.hook_rot_q'
    """
    if which not in ("q", "k", "v"):
        raise ValueError(f"which must be 'q', 'k' or 'v', not {which!r}")
    if rotated:
        if which == "v":
            raise ValueError("values are not rotated; use rotated=False for 'v'")
        return f"blocks.{layer}.attn.hook_rot_{which}"
    return f"blocks.{layer}.attn.hook_{which}"


def attn_out(layer: int) -> str:
    """Output of block ``layer``'s attention, added to the residual stream, [batch, pos, d_model].

    Args:
        layer: The block index.

    Returns:
        The hook name.

    Example:
        >>> attn_out(2)
        'blocks.2.hook_attn_out'
    """
    return f"blocks.{layer}.hook_attn_out"


def attn_z(layer: int) -> str:
    """Per-head attention output before the output projection, [batch, pos, head, d_head].

    Args:
        layer: The layer index.

    Returns:
        The hook name.

    Example:
        >>> attn_z(1)
        'blocks.1.attn.hook_z'
    """
    return f"blocks.{layer}.attn.hook_z"


class _ForwardDone(Exception):
    """Raised by the hook that ``run_with_hooks(stop_after=...)`` adds, to end the forward pass there."""


def _end_forward(tensor: torch.Tensor, hook: Any) -> None:
    raise _ForwardDone


def run_with_hooks(
    model: Any, tokens: torch.Tensor, hooks: Sequence[Hook] = (), logits: bool = False, stop_after: str | None = None, context_checked: bool = False
) -> Any:
    """One forward pass of a :class:`poslens.model.loading.PosModel` with hooks, without gradients.

    The model's variant hooks (an imposed window) run first, then ``hooks`` in
    order. Returns the logits if ``logits`` is true, else ``None``. With
    ``stop_after`` (a hook name, e.g. the last layer's :func:`attn_scores`) the
    pass ends once that point's hooks have run: what follows it (the rest of
    the block, the final norm, the unembedding) is not computed, and no logits
    are returned.

    Args:
        model: The loaded model.
        tokens: Token ids, [batch, position].
        hooks: ``(hook name, hook function)`` pairs, run in order after the variant's.
        logits: Whether to return the logits.
        stop_after: A hook name after whose hooks the pass ends.
        context_checked: Whether the caller has already checked the sequences against the model's context
            (:func:`poslens.model.guards.check_seq_len` at its entry, as poslens's own runs do); otherwise it is checked here.

    Returns:
        The logits [batch, position, vocab] if ``logits``, else ``None``.

    Raises:
        ValueError: When ``tokens`` is not 2-D, or ``logits`` is asked with ``stop_after``.
        InputError: When the sequences are longer than the model's context (also a ``ValueError``).

    Example:
        >>> seen = []
        >>> _ = run_with_hooks(model, tokens, [(attn_scores(0), lambda x, hook: seen.append(x.shape))])  # doctest: +SKIP
        >>> run_with_hooks(model, tokens, capture.hooks(), stop_after=attn_scores(model.n_layers - 1))  # doctest: +SKIP
    """
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [batch, position], got shape {tuple(tokens.shape)}")
    if stop_after is not None and logits:
        raise ValueError("a pass that stops early has no logits: use logits=False with stop_after")
    if not context_checked:
        check_seq_len(model, tokens.shape[1])
    device = model.device
    all_hooks = list(model.variant_hooks()) + list(hooks)
    if stop_after is not None:
        all_hooks.append((stop_after, _end_forward))  # after the others: a point's hooks run in the order added
    try:
        with in_use(model), torch.inference_mode():  # the bridge installed in the user's model for this pass only
            if logits:
                return model.bridge.run_with_hooks(tokens.to(device), fwd_hooks=all_hooks, return_type="logits")
            if getattr(model, "kind", "bridge") == "hooked":  # a HookedTransformer takes neither keyword below
                model.bridge.run_with_hooks(tokens.to(device), fwd_hooks=all_hooks, return_type=None)
            else:  # measurements need no logits and no KV cache: keep only the last position's logits
                model.bridge.run_with_hooks(tokens.to(device), fwd_hooks=all_hooks, return_type=None, use_cache=False, logits_to_keep=1)
    except _ForwardDone:
        pass
    return None
