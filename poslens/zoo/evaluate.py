"""What each checkpoint logs: the held-out loss and the sink count, from the model under training.

The sink score of a head here is the mean attention weight a_i0 on key 0 over
the queries i ≥ 1 that can see key 0 (under a sliding window of W keys,
1 ≤ i < W), averaged over the held-out sequences: the mean that
:func:`poslens.mechanisms.sinks.key0_means` takes. Without a window it is
poslens's sink score (methodology §6); under a window, poslens's sink score also
counts the queries that cannot see key 0 (as 0), so it is (W − 1)/(T − 1) of this one. A head is a sink head when its score is at least τ
(default 0.3). Here the weights come from the transformers model itself
(eager attention, ``output_attentions``), so a checkpoint needs no bridge.
"""

from __future__ import annotations

import contextlib

import torch
from transformers import PreTrainedModel

from poslens.errors import InputError
from poslens.options import DEFAULTS

#: The sink-score threshold τ of the sink count (poslens's default).
DEFAULT_TAU = DEFAULTS.tau


def autocast(device: torch.device | str) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA, nothing (float32) elsewhere: the precision of the zoo's training and checkpoints.

    Args:
        device: Where the model runs.

    Returns:
        A context manager.

    Example:
        >>> with autocast("cpu"):
        ...     (torch.ones(2) @ torch.ones(2)).dtype
        torch.float32
    """
    if torch.device(device).type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def next_token_loss(model: PreTrainedModel, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats per token) of ``tokens`` [B, T]: positions 1..T-1 predicted from the ones before.

    Args:
        model: A transformers causal LM.
        tokens: Token ids, on the model's device.

    Returns:
        The loss, a scalar tensor (with its graph, for training).

    Example:
        >>> from poslens.zoo.family import initial_model, member_config
        >>> model = initial_model(member_config("standard", 32, 1, 2, 16), seed=0)
        >>> round(next_token_loss(model, torch.randint(4, 260, (2, 16))).item(), 1)  # about log 260 = 5.56 at random weights
        5.6
    """
    logits = model(tokens).logits[:, :-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))


@torch.no_grad()
def held_out_loss(model: PreTrainedModel, tokens: torch.Tensor, batch_size: int = 16) -> float:
    """Mean next-token loss over held-out sequences, batch by batch, in eval mode (the model's mode is restored).

    Args:
        model: A transformers causal LM.
        tokens: Held-out token ids [N, T].
        batch_size: Sequences per forward.

    Returns:
        The loss in nats per token.

    Example:
        >>> from poslens.zoo.family import initial_model, member_config
        >>> model = initial_model(member_config("standard", 32, 1, 2, 16), seed=0)
        >>> 5 < held_out_loss(model, torch.randint(4, 260, (3, 16)), batch_size=2) < 6
        True
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for start in range(0, tokens.shape[0], batch_size):
            batch = tokens[start : start + batch_size].to(device)
            with autocast(device):
                total += float(next_token_loss(model, batch)) * batch.shape[0]
            count += batch.shape[0]
    finally:
        model.train(was_training)
    return total / count


@torch.no_grad()
def sink_scores(model: PreTrainedModel, tokens: torch.Tensor, batch_size: int = 16) -> torch.Tensor:
    """Each head's sink score: mean a_i0 over the queries i ≥ 1 that see key 0, over held-out sequences.

    The model runs with eager attention for this (``output_attentions``); its attention implementation and mode are restored.

    Args:
        model: A transformers causal LM (Mistral: ``config.sliding_window`` hides key 0 from queries i ≥ W).
        tokens: Held-out token ids [N, T], position 0 holding BOS.
        batch_size: Sequences per forward.

    Returns:
        Scores, float32 [layers, heads].

    Raises:
        InputError: When the model returns no attention weights (a model wrapped by a TransformerLens bridge).

    Example:
        >>> from poslens.zoo.family import initial_model, member_config
        >>> model = initial_model(member_config("standard", 32, 2, 2, 16), seed=0)
        >>> scores = sink_scores(model, torch.randint(4, 260, (2, 16)))
        >>> scores.shape, bool(((scores > 0) & (scores < 1)).all())
        (torch.Size([2, 2]), True)
    """
    device = next(model.parameters()).device
    window = getattr(model.config, "sliding_window", None)
    t = tokens.shape[1]
    stop = min(t, window) if window else t
    if stop < 2:
        return torch.full((model.config.num_hidden_layers, model.config.num_attention_heads), float("nan"))
    implementation, was_training = model.config._attn_implementation, model.training
    model.set_attn_implementation("eager")
    model.eval()
    sums, count = None, 0
    try:
        for start in range(0, tokens.shape[0], batch_size):
            batch = tokens[start : start + batch_size].to(device)
            with autocast(device):
                attentions = model(batch, output_attentions=True).attentions
            if not attentions:
                raise InputError(
                    "the model returned no attention weights (output_attentions): pass the transformers model "
                    "itself, not one a TransformerLens bridge wraps (load it with AutoModelForCausalLM.from_pretrained)"
                )
            # [layers, batch, heads]: the mean over the visible queries of each sequence's key-0 weight
            key0 = torch.stack([a[:, :, 1:stop, 0].float().mean(dim=-1) for a in attentions])
            part = key0.sum(dim=1).cpu()
            sums = part if sums is None else sums + part
            count += batch.shape[0]
    finally:
        model.set_attn_implementation(implementation)
        model.train(was_training)
    return sums / count


def sink_count(scores: torch.Tensor, tau: float = DEFAULT_TAU) -> int:
    """How many heads have a sink score of at least τ.

    Args:
        scores: Sink scores [layers, heads] (:func:`sink_scores`).
        tau: The threshold τ.

    Returns:
        The count.

    Example:
        >>> sink_count(torch.tensor([[0.9, 0.1], [0.3, 0.29]]))
        2
    """
    return int((scores >= tau).sum())
