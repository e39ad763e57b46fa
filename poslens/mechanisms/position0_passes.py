"""The forward passes of the position-0 fingerprint (methodology §8): position 0's residual stream, and heads' outputs at later positions.

Layer index l < L means "entering block l" (``blocks.l.hook_resid_pre``;
l = 0 is the embedding); l = L means "leaving the last block". Each hook keeps
only what it reads; the statistics on these arrays are in
:mod:`poslens.fit.dispersion` and :mod:`poslens.fit.readout`, the table in
:mod:`poslens.mechanisms.fingerprint`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from jaxtyping import Float

from poslens.model import hooks
from poslens.model.pos_model import PosModel

__all__ = ["position0_trajectories", "readout_features"]


def position0_trajectories(model: PosModel, tokens: torch.Tensor, batch_size: int = 8) -> Float[torch.Tensor, "n layer d_model"]:
    """Residual stream at position 0 entering every block plus leaving the last: [N, L + 1, d_model].

    Hooks copy only ``x[:, 0]``; nothing else is kept. Returned in float32 on the CPU.

    Args:
        model: The loaded model.
        tokens: Token ids, [N, T].
        batch_size: Sequences per forward pass.

    Returns:
        The position-0 residuals, [N, L + 1, d_model], float32 on the CPU.

    Raises:
        RuntimeError: When a residual hook never fires (the bridge does not expose it).

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> x = position0_trajectories(model, poslens.make_corpus(model, "random", n_seqs=3, seq_len=8).tokens)
        >>> x.shape[0], x.shape[1] == model.n_layers + 1, x.dtype
        (3, True, torch.float32)
    """
    n_layers = model.n_layers
    names = [hooks.resid_pre(layer) for layer in range(n_layers)] + [hooks.resid_post(n_layers - 1)]
    out = []
    for start in range(0, tokens.shape[0], batch_size):
        seen: list[torch.Tensor | None] = [None] * len(names)

        def keep(index: int, seen: list[torch.Tensor | None] = seen) -> Callable[..., None]:
            def hook(x: torch.Tensor, hook: Any) -> None:
                seen[index] = x[:, 0].detach().float().cpu().clone()

            return hook

        hooks.run_with_hooks(model, tokens[start : start + batch_size], [(name, keep(k)) for k, name in enumerate(names)])
        missing = [names[k] for k, kept in enumerate(seen) if kept is None]
        if missing:
            raise RuntimeError(f"hooks {missing} never fired; the bridge does not expose them for {model.name}")
        out.append(torch.stack(seen, dim=1))  # type: ignore[arg-type]
    return torch.cat(out)


def readout_features(
    model: PosModel, tokens: torch.Tensor, heads: Sequence[tuple[int, int]], positions: Sequence[int] | None = None, batch_size: int = 8
) -> np.ndarray:
    """Per sequence, the mean over ``positions`` (default: all i ≥ 1) of the concatenated ``hook_z`` of ``heads``.

    Returns [N, len(heads) · d_head] in float64; heads in the order given.

    Args:
        model: The loaded model.
        tokens: Token ids, [N, T].
        heads: ``(layer, head)`` pairs to read.
        positions: Query positions to average over; default all i ≥ 1.
        batch_size: Sequences per forward pass.

    Returns:
        The features, [N, len(heads) · d_head], float64.

    Raises:
        ValueError: When ``heads`` is empty or a position is outside 1..T − 1.

    Example:
        >>> readout_features(model, corpus.tokens, [(3, 0), (5, 2)]).shape  # doctest: +SKIP
        (32, 128)
    """
    if not heads:
        raise ValueError("no heads to read; give at least one (layer, head)")
    index = list(range(1, tokens.shape[1])) if positions is None else list(positions)
    if not index or min(index) < 1 or max(index) >= tokens.shape[1]:
        raise ValueError(f"positions must lie in 1..{tokens.shape[1] - 1}, got {index[:5]}...")
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(int(layer), []).append(int(head))
    out = []
    for start in range(0, tokens.shape[0], batch_size):
        seen: dict[tuple[int, int], torch.Tensor] = {}

        def keep(layer: int, seen: dict[tuple[int, int], torch.Tensor] = seen) -> Callable[..., None]:
            def hook(z: torch.Tensor, hook: Any) -> None:  # [batch, pos, head, d_head]
                for head in by_layer[layer]:
                    seen[(layer, head)] = z[:, index, head].double().mean(dim=1).cpu()

            return hook

        hooks.run_with_hooks(model, tokens[start : start + batch_size], [(hooks.attn_z(l), keep(l)) for l in by_layer])
        out.append(torch.cat([seen[(int(l), int(h))] for l, h in heads], dim=1))
    return torch.cat(out).numpy()
