"""The position-0 fingerprint (methodology §8, claim C6).

Under a causal mask position 0 attends only to itself, so its residual stream
is a deterministic function of its one token. :func:`position0_trajectories`
records it, :func:`dispersion` measures its spread across inputs (zero with a
constant BOS), :func:`trajectory_similarity` compares first tokens,
:func:`readout` decodes the position-0 token from sink-reading heads' outputs at
later positions (K tokens, every token in every group, features standardized
on the training folds, chance 1/K and a label-permutation null), and
:func:`fingerprint` runs all of it into one tidy Result.

Layer index l < L means "entering block l" (``blocks.l.hook_resid_pre``;
l = 0 is the embedding); l = L means "leaving the last block". In tables,
layer −1 is the mean over layers 1..L for per-layer figures, and "all heads
read together" for the readout (whose layer l rows read layer l's heads).
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float

from poslens.fit.stats import fold_interval, jackknife_interval
from poslens.measurement.pipeline import group_of, measure, run_metadata
from poslens.measurement.result import COLUMNS, Result
from poslens.mechanisms.sinks import DEFAULT_TAU, sink_reading_heads, sink_table
from poslens.model import hooks
from poslens.model.corpus import Corpus, make_corpus
from poslens.model.loading import check_seq_len, require_pos_model

Interval = tuple[np.ndarray, np.ndarray, np.ndarray]
BOS_TOLERANCE = 1e-5  # methodology §8 built-in check: relative dispersion with a constant BOS must be this small


def position0_trajectories(model: Any, tokens: torch.Tensor, batch_size: int = 8) -> Float[torch.Tensor, "n layer d_model"]:
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
        >>> x = position0_trajectories(model, corpus.tokens)  # doctest: +SKIP
        >>> x.shape  # doctest: +SKIP
        torch.Size([32, 31, 576])
    """
    n_layers = model.n_layers
    names = [hooks.resid_pre(layer) for layer in range(n_layers)] + [hooks.resid_post(n_layers - 1)]
    out = []
    for start in range(0, tokens.shape[0], batch_size):
        seen: list[torch.Tensor | None] = [None] * len(names)

        def keep(index: int) -> Callable[..., None]:
            def hook(x: torch.Tensor, hook: Any) -> None:
                seen[index] = x[:, 0].detach().float().cpu().clone()

            return hook

        hooks.run_with_hooks(model, tokens[start : start + batch_size], [(name, keep(k)) for k, name in enumerate(names)])
        missing = [names[k] for k, x in enumerate(seen) if x is None]
        if missing:
            raise RuntimeError(f"hooks {missing} never fired; the bridge does not expose them for {model.name}")
        out.append(torch.stack(seen, dim=1))  # type: ignore[arg-type]
    return torch.cat(out)


def _relative_dispersion(x: np.ndarray) -> np.ndarray:
    """mean_n ||x_n − x̄|| / ||x̄|| per layer, for x [N, L + 1, d]."""
    centre = x.mean(axis=0)
    return np.linalg.norm(x - centre, axis=-1).mean(axis=0) / np.linalg.norm(centre, axis=-1)


def _jackknife(statistic: Callable[[np.ndarray], np.ndarray], x: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Estimate on all of ``x`` and delete-one-group replicates [G, ...] (groups label axis 0 of ``x``)."""
    estimate = statistic(x)
    replicates = np.stack([statistic(x[group != g]) for g in np.unique(group)])
    return estimate, replicates


def _with_layer_mean(estimate: np.ndarray, replicates: np.ndarray) -> Interval:
    """Values and jackknife intervals for layers 0..L followed by the mean over layers 1..L."""
    estimate = np.append(estimate, estimate[1:].mean())
    replicates = np.concatenate([replicates, replicates[:, 1:].mean(axis=1, keepdims=True)], axis=1)
    low, high = jackknife_interval(estimate, replicates)
    return estimate, low, high


def dispersion(trajectories: torch.Tensor | np.ndarray, groups: int = 8) -> Interval:
    """Relative dispersion per layer, mean_n ||x_n − x̄|| / ||x̄||, with a 95% delete-one-group jackknife interval.

    ``trajectories`` is [N, L + 1, d] (from :func:`position0_trajectories`);
    inputs are split into ``groups`` contiguous groups (:func:`poslens.measurement.pipeline.group_of`).
    Returns (value, ci_low, ci_high), each [L + 1]. Computed in float64.

    Args:
        trajectories: Position-0 residuals, [N, L + 1, d].
        groups: Number of contiguous groups for the jackknife.

    Returns:
        ``(value, ci_low, ci_high)``, each [L + 1].

    Example:
        >>> x = np.ones((4, 2, 3)); x[:, 1] += np.arange(4)[:, None]
        >>> value, low, high = dispersion(x, groups=2)
        >>> value.round(3).tolist()
        [0.0, 0.4]
    """
    x = np.asarray(trajectories, dtype=np.float64)
    estimate, replicates = _jackknife(_relative_dispersion, x, group_of(x.shape[0], groups))
    return (estimate, *jackknife_interval(estimate, replicates))


def _mean_pairwise_cosine(x: np.ndarray) -> np.ndarray:
    """Mean over pairs a < b of cos(x_a, x_b) per layer, for x [K, L + 1, d]."""
    unit = x / np.linalg.norm(x, axis=-1, keepdims=True)
    cos = np.einsum("ald,bld->lab", unit, unit)
    a, b = np.triu_indices(x.shape[0], k=1)
    return cos[:, a, b].mean(axis=1)


def _cosine_jackknife(trajectories: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(trajectories, dtype=np.float64)
    if x.shape[0] < 3:
        raise ValueError(f"trajectory similarity needs at least 3 distinct first tokens for an interval, got {x.shape[0]}")
    return _jackknife(_mean_pairwise_cosine, x, np.arange(x.shape[0]))


def trajectory_similarity(model: Any, token_ids: Sequence[int]) -> Interval:
    """Mean pairwise cosine similarity of the position-0 trajectories of different first tokens, per layer.

    Each token is run as a one-token input: position 0 sees only itself, so
    this is its trajectory in any sequence. The 95% interval is a
    delete-one-token jackknife (the tokens are a sample of possible first
    tokens). Returns (value, ci_low, ci_high), each [L + 1].

    Args:
        model: The loaded model.
        token_ids: Distinct first tokens.

    Returns:
        ``(value, ci_low, ci_high)``, each [L + 1].

    Raises:
        ValueError: When ``token_ids`` holds a token twice.

    Example:
        >>> value, low, high = trajectory_similarity(model, [13, 28, 30, 253])  # doctest: +SKIP
        >>> value[-1]  # cosine after the last block  # doctest: +SKIP
    """
    if len(set(token_ids)) != len(token_ids):
        raise ValueError(f"token_ids must be distinct, got {list(token_ids)}")
    x = position0_trajectories(model, torch.tensor(list(token_ids), dtype=torch.long)[:, None])
    estimate, replicates = _cosine_jackknife(x)
    return (estimate, *jackknife_interval(estimate, replicates))


@dataclass
class Readout:
    """Held-out readout accuracy against chance 1/K and a label-permutation null (see :func:`centroid_readout`).

    ``chance`` is 1/K; ``permuted_chance`` is the mean accuracy under the null,
    [``permuted_low``, ``permuted_high``] its central 95% range, and ``p_value``
    the permutation p-value (1 + #{null ≥ accuracy}) / (1 + ``n_permutations``).

    Attributes:
        accuracy: Held-out accuracy, pooled over folds.
        ci_low: Lower end of its 95% interval over folds.
        ci_high: Upper end of its 95% interval over folds.
        chance: 1/K.
        permuted_chance: Mean accuracy under the label-permutation null.
        permuted_low: Lower end of the null's central 95% range.
        permuted_high: Upper end of the null's central 95% range.
        p_value: The permutation p-value.
        n_classes: Number of classes K.
        n_seqs: Number of sequences N.
        n_permutations: Number of label permutations of the null.
        n_features: Number of features per sequence (before constant ones are dropped).

    Example:
        >>> r = centroid_readout(np.eye(2)[[0, 1] * 4], [0, 1] * 4, groups=2, n_permutations=99)
        >>> r.accuracy, r.chance, r.n_classes, r.n_seqs, r.n_features
        (1.0, 0.5, 2, 8, 2)
    """

    accuracy: float
    ci_low: float
    ci_high: float
    chance: float
    permuted_chance: float
    permuted_low: float
    permuted_high: float
    p_value: float
    n_classes: int
    n_seqs: int
    n_permutations: int
    n_features: int


CONSTANT_FEATURE = 1e-9
"""A feature whose training-fold sd is ≤ this times its |mean| (or exactly 0) is dropped from that fold."""


@dataclass
class _Fold:
    """One cross-validation fold in kernel form: Gram matrices of the standardized features."""

    train: np.ndarray  # indices
    test: np.ndarray  # indices
    gram_train: np.ndarray  # z_train z_trainᵀ
    cross: np.ndarray  # z_test z_trainᵀ
    n_features: int  # features kept after dropping the fold's constant ones


def _standardize(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both blocks standardized with the mean and sd (ddof 0) of ``train`` alone; training-constant features dropped.

    Example:
        >>> a, b = _standardize(np.array([[0.0, 5.0], [2.0, 5.0]]), np.array([[4.0, 7.0]]))
        >>> a.tolist(), b.tolist()
        ([[-1.0], [1.0]], [[3.0]])
    """
    mean, sd = train.mean(axis=0), train.std(axis=0)
    keep = sd > np.maximum(CONSTANT_FEATURE * np.abs(mean), 0.0)
    return (train[:, keep] - mean[keep]) / sd[keep], (test[:, keep] - mean[keep]) / sd[keep]


def _make_folds(x: np.ndarray, group: np.ndarray) -> list[_Fold]:
    folds = []
    for g in np.unique(group):
        train, test = np.flatnonzero(group != g), np.flatnonzero(group == g)
        z_train, z_test = _standardize(x[train], x[test])
        folds.append(_Fold(train, test, z_train @ z_train.T, z_test @ z_train.T, z_train.shape[1]))
    return folds


def _predict(folds: list[_Fold], codes: np.ndarray, k: int) -> np.ndarray:
    """Nearest standardized class centroid for every sequence, trained on the other groups (class codes 0..K−1).

    ``codes`` is [N] or a batch [P, N] of labelings (e.g. permutations); the result has its shape.
    With W the training one-hot matrix scaled by 1/n_c, the centroids are Wᵀz_train, so
    ‖z − c_k‖² = ‖z‖² − 2(z z_trainᵀ W)_k + (Wᵀ z_train z_trainᵀ W)_kk: the Gram matrices
    of each fold serve every labeling. Ties go to the smaller class code.
    """
    batch = np.atleast_2d(codes)
    predicted = np.empty(batch.shape, dtype=np.int64)
    for fold in folds:
        onehot = (batch[:, fold.train, None] == np.arange(k)).astype(np.float64)  # [P, n_train, K]
        weights = onehot / onehot.sum(axis=1, keepdims=True)  # every class is in every training fold (checked by the caller)
        centroid_sq = (weights * (fold.gram_train @ weights)).sum(axis=1)  # [P, K]
        distance = centroid_sq[:, None, :] - 2.0 * (fold.cross @ weights)  # [P, n_test, K]; ‖z‖² dropped: the same for every class
        predicted[:, fold.test] = distance.argmin(axis=2)
    return predicted.reshape(np.shape(codes))


def permute_within_groups(labels: np.ndarray, group: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The labels shuffled inside each group: every group (hence every fold) keeps its class counts.

    Args:
        labels: One label per sequence.
        group: The group of each sequence.
        rng: The random generator.

    Returns:
        The shuffled labels (a new array).

    Example:
        >>> y, g = np.array([0, 1, 0, 1, 2, 2]), np.array([0, 0, 0, 1, 1, 1])
        >>> p = permute_within_groups(y, g, np.random.default_rng(0))
        >>> sorted(p[:3].tolist()), sorted(p[3:].tolist())
        ([0, 0, 1], [1, 2, 2])
    """
    out = np.array(labels, copy=True)
    for g in np.unique(group):
        index = np.flatnonzero(group == g)
        out[index] = labels[rng.permutation(index)]
    return out


def centroid_readout(features: np.ndarray, labels: Sequence[int], groups: int = 8, n_permutations: int = 200, seed: int = 0) -> Readout:
    """Nearest-class-centroid accuracy on standardized features, trained on all groups but g and tested on group g.

    Groups are contiguous blocks (:func:`poslens.measurement.pipeline.group_of`). For each
    held-out group the features are standardized with the mean and sd of the
    training groups alone (the held-out group never enters them); features
    constant in training (sd ≤ :data:`CONSTANT_FEATURE` · |mean|) are dropped.
    Each test sequence gets the class whose training centroid is nearest in
    Euclidean distance on the standardized features, so every feature weighs
    by its spread, not its raw scale. **Choice:** nearest centroid rather than
    a logistic or ridge classifier: no tuning parameter, no iterations, and it
    stays well defined with far more features than training sequences.

    Accuracy is pooled over folds (correct / N) with :func:`poslens.fit.stats.fold_interval`
    clipped to [0, 1]. ``chance`` = 1/K. The null: ``n_permutations`` seeded
    permutations of the labels **within each group** (each fold keeps its class
    counts, so the null is that of the same design), each run through the same
    folds and classifier; its mean, central 95% range and the p-value
    (1 + #{null ≥ accuracy}) / (1 + n_permutations) are reported.

    Raises ``ValueError`` for fewer than two classes (accuracy could not exceed
    chance) or when a class is missing from a training fold (a class held in a
    single group): see :func:`varied_corpus` for a design that puts every class
    in every group.

    Args:
        features: Features, [N, n_features].
        labels: One class per row.
        groups: Number of contiguous groups (folds).
        n_permutations: Number of label permutations of the null.
        seed: Seed of the permutations.

    Returns:
        The accuracy, its interval, chance and the permutation null.

    Raises:
        ValueError: When the shapes disagree, ``n_permutations`` is below 1, there is one class only,
            or a class occurs in one group only.

    Example:
        >>> r = centroid_readout(np.eye(2)[[0, 1] * 8], [0, 1] * 8, groups=4, n_permutations=99)
        >>> r.accuracy, r.chance, r.p_value
        (1.0, 0.5, 0.01)
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels)
    if x.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"features must be [N, n_features] with one label per row; got {x.shape} and {y.shape[0]} labels")
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be ≥ 1, got {n_permutations}")
    classes, codes = np.unique(y, return_inverse=True)
    k = len(classes)
    if k < 2:
        raise ValueError(f"one class ({classes.tolist()}): accuracy equals chance by construction; a readout needs K ≥ 2 classes")
    group = group_of(len(y), groups)
    for g in range(groups):
        absent = np.setdiff1d(np.arange(k), codes[group != g])
        if len(absent):
            raise ValueError(f"class(es) {classes[absent].tolist()} occur only in group {g}, so the fold that holds out group {g} "
                             "cannot learn them; put every class in at least two groups (varied_corpus puts each in every group)")
    folds = _make_folds(x, group)
    hits = _predict(folds, codes, k) == codes
    accuracy = hits.mean()
    fold_acc = np.array([hits[group == g].mean() for g in range(groups)])
    low, high = np.clip(fold_interval(np.array(accuracy), fold_acc), 0.0, 1.0)  # accuracies live in [0, 1]
    rng = np.random.default_rng(seed)
    permuted = np.stack([permute_within_groups(codes, group, rng) for _ in range(n_permutations)])
    null = np.concatenate([(_predict(folds, chunk, k) == chunk).mean(axis=1) for chunk in np.array_split(permuted, -(-n_permutations // 50))])
    p_value = (1 + np.sum(null >= accuracy - 1e-12)) / (1 + n_permutations)
    return Readout(float(accuracy), float(low), float(high), 1.0 / k, float(null.mean()), float(np.quantile(null, 0.025)),
                   float(np.quantile(null, 0.975)), float(p_value), k, len(y), n_permutations, min(f.n_features for f in folds))


def readout_features(
    model: Any, tokens: torch.Tensor, heads: Sequence[tuple[int, int]], positions: Sequence[int] | None = None, batch_size: int = 8
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

        def keep(layer: int) -> Callable[..., None]:
            def hook(z: torch.Tensor, hook: Any) -> None:  # [batch, pos, head, d_head]
                for head in by_layer[layer]:
                    seen[(layer, head)] = z[:, index, head].double().mean(dim=1).cpu()

            return hook

        hooks.run_with_hooks(model, tokens[start : start + batch_size], [(hooks.attn_z(l), keep(l)) for l in by_layer])
        out.append(torch.cat([seen[(int(l), int(h))] for l, h in heads], dim=1))
    return torch.cat(out).numpy()


def readout(
    model: Any, corpus: Corpus, heads: Sequence[tuple[int, int]], positions: Sequence[int] | None = None, groups: int = 8,
    n_permutations: int = 200, seed: int = 0,
) -> Readout:
    """How well the position-0 token of each sequence can be decoded from later positions' outputs of ``heads``.

    Features: :func:`readout_features`; labels: ``corpus.position0_token_ids``;
    classifier, chance (1/K) and permutation null: :func:`centroid_readout`.

    Args:
        model: The loaded model.
        corpus: A corpus with a varied position 0 (:func:`varied_corpus`).
        heads: ``(layer, head)`` pairs to read.
        positions: Query positions to average over; default all i ≥ 1.
        groups: Number of contiguous groups (folds).
        n_permutations: Number of label permutations of the null.
        seed: Seed of the permutations.

    Returns:
        The readout's accuracy against chance and the null.

    Example:
        >>> r = readout(model, varied_corpus(model, 64, 48, 8, groups=8), [(3, 0), (5, 2)], groups=8)  # doctest: +SKIP
        >>> r.accuracy, r.chance, r.p_value  # doctest: +SKIP
    """
    features = readout_features(model, corpus.tokens, heads, positions)
    return centroid_readout(features, corpus.position0_token_ids, groups, n_permutations, seed)


def balanced_classes(n_seqs: int, n_classes: int, groups: int) -> np.ndarray:
    """Class of each sequence such that every group of :func:`poslens.measurement.pipeline.group_of` holds every class.

    Within each contiguous group the j-th sequence gets class j mod K, so each
    group holds each class ⌊size/K⌋ or ⌈size/K⌉ times. This needs every group
    to have at least K sequences, i.e. n_seqs ≥ K · groups; otherwise
    ``ValueError`` naming that minimum.

    Args:
        n_seqs: Number of sequences.
        n_classes: Number of classes K.
        groups: Number of contiguous groups.

    Returns:
        The class of each sequence, [n_seqs].

    Raises:
        ValueError: When K < 2, or n_seqs < K · groups.

    Example:
        >>> balanced_classes(8, 2, 2).tolist()
        [0, 1, 0, 1, 0, 1, 0, 1]
        >>> balanced_classes(10, 3, 2).tolist()
        [0, 1, 2, 0, 1, 0, 1, 2, 0, 1]
    """
    if n_classes < 2:
        raise ValueError(f"need at least 2 classes for a readout, got {n_classes}")
    if n_seqs < n_classes * groups:
        raise ValueError(f"{n_seqs} sequences cannot put each of K = {n_classes} position-0 tokens in each of {groups} groups; "
                         f"use at least K · groups = {n_classes * groups} sequences (or fewer tokens or groups)")
    group = group_of(n_seqs, groups)
    start = np.searchsorted(group, group)  # index of the first sequence of each sequence's group
    return (np.arange(n_seqs) - start) % n_classes


def varied_corpus(model: Any, n_seqs: int, seq_len: int, n_first_tokens: int, seed: int = 0, groups: int = 8) -> Corpus:
    """'docs' text after a position-0 slot holding one of K frequent tokens, every token in every group.

    The K tokens are the most frequent non-special tokens of the sampled text
    (ties: smaller id). Which sequence gets which token:
    :func:`balanced_classes` (within each of the ``groups`` contiguous groups,
    the j-th sequence gets token j mod K), so every token is present in every
    training fold of :func:`centroid_readout`; ``n_seqs`` must be ≥ K · groups.
    Each sequence continues with its own text window (windows do not overlap),
    so each token is followed by n_seqs / K different continuations. The
    windows are those of ``position0='bos'`` with the same seed (the first
    n of them for a BOS corpus of n ≤ n_seqs sequences), so the corpora differ
    only at position 0.

    Args:
        model: The loaded model.
        n_seqs: Number of sequences, at least K · groups.
        seq_len: Tokens per sequence.
        n_first_tokens: Number of first tokens K.
        seed: Seed of the text windows.
        groups: Number of contiguous groups.

    Returns:
        The corpus, with ``position0_token_ids`` set.

    Raises:
        ValueError: When the sampled text holds fewer than K distinct tokens.

    Example:
        >>> c = varied_corpus(model, 64, 48, 8, groups=8)  # doctest: +SKIP
        >>> c.position0, c.meta["first_token_ids"][:2]  # doctest: +SKIP
    """
    classes = balanced_classes(n_seqs, n_first_tokens, groups)  # checks the size before any text is read
    base = make_corpus(model, "docs", n_seqs, seq_len, position0="token:0", seed=seed)
    special = set(getattr(model.tokenizer, "all_special_ids", []) or [])
    counts = Counter(t for t in base.tokens[:, 1:].flatten().tolist() if t not in special)
    first = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n_first_tokens]]
    if len(first) < n_first_tokens:
        raise ValueError(f"the sampled text holds only {len(first)} distinct tokens; ask for fewer first tokens")
    tokens = base.tokens.clone()
    tokens[:, 0] = torch.tensor(first)[torch.from_numpy(classes)]
    ids = tokens[:, 0].tolist()
    strings = model.tokenizer.convert_ids_to_tokens(first)
    meta = {**base.meta, "first_token_ids": first, "first_tokens": strings, "groups": groups,
            "first_token_rule": "within each of the contiguous groups, the j-th sequence gets token j mod K: every token in every group"}
    return Corpus(tokens, base.source, seed, "varied", ids, model.tokenizer.convert_ids_to_tokens(ids), meta)


def _row(model: Any, intervention: str, metric: str, layer: int, value: float, low: float, high: float) -> dict[str, Any]:
    return dict(model=model.name, variant=model.variant_name, intervention=intervention, layer=int(layer), head=-1,
                query_window="all", metric=metric, value=float(value), ci_low=float(low), ci_high=float(high))


def _readout_by_layer(
    features: np.ndarray, labels: Sequence[int], heads: Sequence[tuple[int, int]], groups: int, n_permutations: int, seed: int
) -> dict[int, Readout]:
    """Readout from all ``heads`` together (key −1) and from each layer's heads alone (key = layer)."""
    out = {-1: centroid_readout(features, labels, groups, n_permutations, seed)}
    width = features.shape[1] // len(heads)
    for layer in sorted({l for l, _ in heads}):
        columns = np.concatenate([np.arange(k * width, (k + 1) * width) for k, (l, _) in enumerate(heads) if l == layer])
        out[layer] = centroid_readout(features[:, columns], labels, groups, n_permutations, seed)
    return out


def _heads_to_read(sink_result: Result, tau: float) -> tuple[list[tuple[int, int]], str]:
    """Sink-reading heads (score ≥ τ), or the 3 highest-scoring heads if none reaches τ, with the rule used."""
    heads = sink_reading_heads(sink_result, tau)
    if heads:
        return heads, f"sink score >= tau = {tau}"
    scores = sink_table(sink_result, tau).query("metric == 'sink_score'").sort_values("value", ascending=False, kind="stable")
    top = sorted((int(l), int(h)) for l, h in zip(scores["layer"][:3], scores["head"][:3]))
    return top, f"no head reached tau = {tau}: the 3 heads with the highest sink score"


def fingerprint(
    model: Any,
    n_seqs: int = 32,
    seq_len: int = 64,
    n_first_tokens: int = 8,
    groups: int = 8,
    seed: int = 0,
    tau: float = DEFAULT_TAU,
    sink_result: Result | None = None,
    readout_seqs: int | None = None,
    n_permutations: int = 200,
) -> Result:
    """methodology §8 in one call: dispersion, trajectory similarity and readout, as a tidy table.

    Rows (query_window ``all``, head −1; layer 0..L per layer, −1 = mean over 1..L):

    - ``dispersion`` per layer, intervention ``position0:bos`` (docs text after
      BOS; the built-in check) and ``position0:none`` (position 0 = first text
      token), ``n_seqs`` sequences each;
    - ``trajectory_cosine`` per layer, ``position0:varied``: the K first tokens
      run as one-token inputs (interval: delete-one-token jackknife);
    - readout, intervention ``position0:varied``, on ``readout_seqs`` sequences
      (default 4 · K · groups, i.e. 4 sequences per token per group: 256 with the
      defaults; at least K · groups) whose position-0 token is one of the K most
      frequent text tokens, every token in every group (:func:`varied_corpus`):
      ``readout_accuracy`` (held-out, interval over folds), ``readout_chance``
      = 1/K, ``readout_chance_permuted`` (the within-group label-permutation
      null: mean and central 95% range) and ``readout_p_value`` (interval =
      value); classifier: :func:`centroid_readout`. Layer −1 reads all heads
      together; layer l reads only the heads of layer l. Features are
      standardized on the training folds, so heads with large outputs do not
      swamp the rest. There is no readout with BOS: one class, so accuracy could
      not exceed chance by design; the BOS dispersion is the check there.

    The heads read are ``sink_reading_heads(sink_result, tau)``; without
    ``sink_result``, ``poslens.measure`` is run on the BOS corpus to get them.
    If no head reaches τ, the 3 heads with the highest sink score are read
    (``meta['heads_rule']`` says which). ``meta['bos_check']`` records the
    built-in check that BOS dispersion is ≤ ``BOS_TOLERANCE`` (a warning if not).

    Args:
        model: The loaded model.
        n_seqs: Sequences per dispersion corpus.
        seq_len: Tokens per sequence.
        n_first_tokens: Number of first tokens K of the readout and the similarity.
        groups: Number of contiguous groups (jackknife groups and folds).
        seed: Seed of the text windows and permutations.
        tau: Sink-score threshold of the heads read.
        sink_result: A measured result to pick the heads from; default: measured here.
        readout_seqs: Sequences of the readout corpus; default 4 · K · groups.
        n_permutations: Number of label permutations of the readout's null.

    Returns:
        The tidy table, with ``meta['heads_rule']`` and ``meta['bos_check']``.

    Example:
        >>> result = fingerprint(poslens.load_model("smollm2-135m"), n_seqs=16, seq_len=48, groups=4)  # doctest: +SKIP
        >>> result.select("readout_accuracy")[["layer", "value", "ci_low", "ci_high"]]  # doctest: +SKIP
    """
    require_pos_model(model, "fingerprint()")
    # Named as users set it: --fingerprint-len / the study's fingerprint_len, not the leakage part's --seq-len.
    check_seq_len(model, seq_len, option="--fingerprint-len",
                  parameter="fingerprint_len= of Settings or Study.with_settings, seq_len= of fingerprint()")
    readout_seqs = 4 * n_first_tokens * groups if readout_seqs is None else readout_seqs
    balanced_classes(readout_seqs, n_first_tokens, groups)  # fail before any forward pass
    bos = make_corpus(model, "docs", n_seqs, seq_len, position0="bos", seed=seed)
    none = make_corpus(model, "docs", n_seqs, seq_len, position0="none", seed=seed)
    varied = varied_corpus(model, readout_seqs, seq_len, n_first_tokens, seed, groups)
    sink_source = "given sink_result" if sink_result is not None else "poslens.measurement.pipeline on the position0:bos corpus"
    if sink_result is None:
        sink_result = measure(model, bos, groups=groups, probe=False, progress=False)
    heads, rule = _heads_to_read(sink_result, tau)
    layers, rows = list(range(model.n_layers + 1)) + [-1], []
    for label, corpus in (("position0:bos", bos), ("position0:none", none)):
        x = np.asarray(position0_trajectories(model, corpus.tokens), dtype=np.float64)
        values = _with_layer_mean(*_jackknife(_relative_dispersion, x, group_of(n_seqs, groups)))
        rows += [_row(model, label, "dispersion", *row) for row in zip(layers, *values)]
        if label == "position0:bos":
            worst = float(values[0][:-1].max())
            bos_check = dict(max_dispersion=worst, tolerance=BOS_TOLERANCE, passed=worst <= BOS_TOLERANCE)
            if worst > BOS_TOLERANCE:
                warnings.warn(f"position-0 dispersion with BOS is {worst:.2e} > {BOS_TOLERANCE:g}: position 0 is not "
                              "a closed system in this forward pass (check hooks, padding or masks)", stacklevel=2)
    first = varied.meta["first_token_ids"]
    values = _with_layer_mean(*_cosine_jackknife(position0_trajectories(model, torch.tensor(first)[:, None])))
    rows += [_row(model, "position0:varied", "trajectory_cosine", *row) for row in zip(layers, *values)]
    features = readout_features(model, varied.tokens, heads)
    readouts = _readout_by_layer(features, varied.position0_token_ids, heads, groups, n_permutations, seed)
    for layer, r in readouts.items():
        rows += [_row(model, "position0:varied", metric, layer, *figures) for metric, figures in (
            ("readout_accuracy", (r.accuracy, r.ci_low, r.ci_high)),
            ("readout_chance", (r.chance,) * 3),
            ("readout_chance_permuted", (r.permuted_chance, r.permuted_low, r.permuted_high)),
            ("readout_p_value", (r.p_value,) * 3),
        )]
    settings = dict(n_seqs=n_seqs, seq_len=seq_len, n_first_tokens=n_first_tokens, groups=groups, seed=seed, tau=tau,
                    readout_seqs=readout_seqs, n_permutations=n_permutations)
    meta = run_metadata(model, bos, settings)
    meta.update(
        corpora={"position0:bos": bos.describe(), "position0:none": none.describe(), "position0:varied": varied.describe()},
        first_token_ids=first,
        first_tokens=varied.meta["first_tokens"],
        heads=[list(h) for h in heads],
        head_sink_scores=[float(sink_result.select("key0_mass", "all", l, h)["value"].iloc[0]) for l, h in heads],
        heads_rule=rule,
        sink_source=sink_source,
        bos_check=bos_check,
        readout={"position0:varied": vars(readouts[-1])},
        readout_design=dict(
            classes=n_first_tokens, groups=groups, n_seqs=readout_seqs, assignment=varied.meta["first_token_rule"],
            features="per sequence, the mean over positions i >= 1 of each read head's hook_z, concatenated",
            classifier="nearest class centroid on features standardized with the training groups' mean and sd",
            chance="1/K", null=f"{n_permutations} label permutations within groups, same folds and classifier",
        ),
    )
    return Result(pd.DataFrame(rows, columns=COLUMNS), meta)
