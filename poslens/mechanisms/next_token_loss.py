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
from poslens.measurement.batching import hooks_after_capture
from poslens.model.corpus import Corpus
from poslens.model.hooks import run_with_hooks
from poslens.model.pos_model import PosModel

__all__ = ["loss_change", "next_token_nll"]


def next_token_nll(model: PosModel, corpus: Corpus, interventions: Sequence[Any] = (), batch_size: int = 4) -> np.ndarray:
    """Next-token negative log-likelihood at every position of every sequence, with the interventions' hooks, [N, T − 1].

    Position i's entry is −log p(token i + 1 | tokens ≤ i), in nats, in float64. The full forward runs (no early stop).

    Args:
        model: The loaded model.
        corpus: The token corpus.
        interventions: Interventions whose hooks (before and after the capture's place) run in the pass.
        batch_size: Sequences per forward pass.

    Returns:
        The losses, [N, T − 1].

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> next_token_nll(model, poslens.make_corpus(model, "random", n_seqs=2, seq_len=8)).shape
        (2, 7)
    """
    out = []
    for start in range(0, corpus.n_seqs, batch_size):
        tokens = corpus.tokens[start : start + batch_size]
        hooks = [h for iv in interventions for h in iv.hooks(model, tokens)] + hooks_after_capture(model, tokens, interventions)
        logits = run_with_hooks(model, tokens, hooks, logits=True)
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
