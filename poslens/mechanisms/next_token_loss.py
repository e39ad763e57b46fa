"""The edit's cost to the model: next-token loss at every position, and its mean change per query bin with a paired jackknife.

:func:`poslens.mechanisms.attribution.cumulative_attribution` reports it beside
each edit's figures (methodology §11): :func:`next_token_nll` runs the forward
with the interventions' hooks, :func:`loss_change` compares two runs on the
same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from poslens.fit.binning import Binning
from poslens.fit.groups import group_of
from poslens.fit.stats import jackknife_interval
from poslens.measurement.arguments import as_interventions
from poslens.measurement.batching import intervened_forward
from poslens.model.context import check_seq_len
from poslens.model.corpus import Corpus
from poslens.model.pos_model import PosModel
from poslens.options import check_integers
from poslens.runtime.planner import choose_batch_size

__all__ = ["loss_change", "next_token_nll"]


def next_token_nll(
    model: PosModel, corpus: Corpus, interventions: Sequence[Any] = (), batch_size: int | None = 4, max_memory: int | str | None = None
) -> np.ndarray:
    """Next-token negative log-likelihood at every position of every sequence, with the interventions' hooks, [N, T − 1].

    Position i's entry is −log p(token i + 1 | tokens ≤ i), in nats, in float64. The full forward runs (no early stop),
    through the measurement's own forward pass (:func:`~poslens.measurement.batching.intervened_forward`), with the
    batch size chosen as ``poslens.measure`` chooses it (:func:`~poslens.runtime.planner.choose_batch_size`).

    Args:
        model: The loaded model.
        corpus: The token corpus.
        interventions: Interventions whose hooks (before and after the capture's place) run in the pass.
        batch_size: Sequences per forward pass (an upper bound with ``max_memory``).
        max_memory: ``"free"`` or a memory budget to plan the batch size against; ``None``: ``batch_size`` as given.

    Returns:
        The losses, [N, T − 1].

    Raises:
        InputError: When ``batch_size`` is below 1, or the sequences are longer than the model's context.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> next_token_nll(model, poslens.make_corpus(model, "random", n_seqs=2, seq_len=8)).shape
        (2, 7)
    """
    check_integers(batch_size=batch_size)
    check_seq_len(model, corpus.seq_len)
    interventions = as_interventions(interventions)
    # this pass keeps every position's logits, and their float64 log-softmax: planned as such
    size = choose_batch_size(model, corpus.seq_len, corpus.n_seqs, 1, batch_size, max_memory, logit_positions=corpus.seq_len)
    out = []
    for start in range(0, corpus.n_seqs, size):
        tokens = corpus.tokens[start : start + size]
        logits = intervened_forward(model, tokens, interventions, (), logits=True)
        logp = torch.log_softmax(logits.to(torch.float64), dim=-1)[:, :-1]
        target = tokens[:, 1:].to(logp.device)
        out.append((-logp.gather(-1, target[..., None])[..., 0]).cpu().numpy())
    return np.concatenate(out)


def loss_change(edited: np.ndarray, base: np.ndarray, groups: int, binning: Binning) -> pd.DataFrame:
    """Mean change in next-token loss per query bin (and over positions ≥ 1), with a paired jackknife over groups.

    Args:
        edited: Losses under the edit, [N, T − 1] (:func:`next_token_nll`).
        base: Losses of the unedited model on the same tokens, [N, T − 1].
        groups: Number of groups (the measurement's).
        binning: The query bins.

    Returns:
        Columns query_bin (−1: every position ≥ 1), query_low, query_high, value, ci_low, ci_high.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> base = rng.normal(size=(8, 15)); t = loss_change(base + 0.5, base, 4, Binning(16, early=8))
        >>> bool(np.allclose(t["value"], 0.5)), bool(np.allclose(t["ci_high"] - t["ci_low"], 0.0))
        (True, True)
    """
    diff = edited - base  # [N, T − 1]; column i is position i
    group = group_of(diff.shape[0], groups)
    positions = np.arange(diff.shape[1])
    qbin = binning.query_bin[positions]
    edges = binning.query_edges
    bins = [(-1, 1, diff.shape[1])] + [(c, edges[c], edges[c + 1]) for c in range(binning.n_query_bins) if edges[c] >= 1 and edges[c] < diff.shape[1]]
    rows = []
    for c, low_pos, high_pos in bins:
        columns = (positions >= 1) if c < 0 else (qbin == c)
        values = diff[:, columns]
        estimate = values.mean()
        replicates = np.array([values[group != g].mean() for g in range(groups)])
        low, high = jackknife_interval(np.array(estimate), replicates)
        rows.append(
            {
                "query_bin": c,
                "query_low": int(low_pos),
                "query_high": int(min(high_pos, diff.shape[1])),
                "value": float(estimate),
                "ci_low": float(low),
                "ci_high": float(high),
            }
        )
    return pd.DataFrame(rows)
