"""The position-0 readout (methodology §8, claim C6): a nearest-centroid classifier with fold intervals and a permutation null.

:func:`centroid_readout` decodes one of K classes (the position-0 token) from
features (the sink-reading heads' outputs, :func:`poslens.mechanisms.position0_passes.readout_features`),
trained on all contiguous groups but one (:func:`poslens.fit.groups.group_of`)
and tested on the one left out, against chance 1/K and a within-group
label-permutation null. :func:`balanced_classes` is the design that puts every
class in every group; :func:`readout_by_layer` reads all heads together and
each layer's heads alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from poslens.errors import InputError
from poslens.fit.groups import group_of
from poslens.fit.stats import fold_interval
from poslens.options import DEFAULTS


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


def centroid_readout(features: ArrayLike, labels: ArrayLike, groups: int = DEFAULTS.groups, n_permutations: int = 200, seed: int = 0) -> Readout:
    """Nearest-class-centroid accuracy on standardized features, trained on all groups but g and tested on group g.

    Groups are contiguous blocks (:func:`poslens.fit.groups.group_of`). For each
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
    single group): see :func:`poslens.mechanisms.fingerprint.varied_corpus` for a design that puts every class
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
        ValueError: When the shapes disagree.
        InputError: When ``n_permutations`` is below 1, there is one class only, or a class occurs in one group
            only (a ``ValueError``).

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
        raise InputError(f"n_permutations must be ≥ 1, got {n_permutations}")
    classes, codes = np.unique(y, return_inverse=True)
    k = len(classes)
    if k < 2:
        raise InputError(f"one class ({classes.tolist()}): accuracy equals chance by construction; a readout needs K ≥ 2 classes")
    group = group_of(len(y), groups)
    for g in range(groups):
        absent = np.setdiff1d(np.arange(k), codes[group != g])
        if len(absent):
            raise InputError(
                f"class(es) {classes[absent].tolist()} occur only in group {g}, so the fold that holds out group {g} "
                "cannot learn them; put every class in at least two groups (varied_corpus puts each in every group)"
            )
    folds = _make_folds(x, group)
    hits = _predict(folds, codes, k) == codes
    accuracy = hits.mean()
    fold_acc = np.array([hits[group == g].mean() for g in range(groups)])
    low, high = np.clip(np.array(fold_interval(np.array(accuracy), fold_acc)), 0.0, 1.0)  # accuracies live in [0, 1]
    rng = np.random.default_rng(seed)
    permuted = np.stack([permute_within_groups(codes, group, rng) for _ in range(n_permutations)])
    null = np.concatenate([(_predict(folds, chunk, k) == chunk).mean(axis=1) for chunk in np.array_split(permuted, -(-n_permutations // 50))])
    p_value = (1 + np.sum(null >= accuracy - 1e-12)) / (1 + n_permutations)
    return Readout(
        float(accuracy),
        float(low),
        float(high),
        1.0 / k,
        float(null.mean()),
        float(np.quantile(null, 0.025)),
        float(np.quantile(null, 0.975)),
        float(p_value),
        k,
        len(y),
        n_permutations,
        min(f.n_features for f in folds),
    )


def balanced_classes(n_seqs: int, n_classes: int, groups: int) -> np.ndarray:
    """Class of each sequence such that every group of :func:`poslens.fit.groups.group_of` holds every class.

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
        InputError: When K < 2, or n_seqs < K · groups (a ``ValueError``).

    Example:
        >>> balanced_classes(8, 2, 2).tolist()
        [0, 1, 0, 1, 0, 1, 0, 1]
        >>> balanced_classes(10, 3, 2).tolist()
        [0, 1, 2, 0, 1, 0, 1, 2, 0, 1]
    """
    if n_classes < 2:
        raise InputError(f"need at least 2 classes for a readout, got {n_classes}")
    if n_seqs < n_classes * groups:
        raise InputError(
            f"{n_seqs} sequences cannot put each of K = {n_classes} position-0 tokens in each of {groups} groups; "
            f"use at least K · groups = {n_classes * groups} sequences (or fewer tokens or groups)"
        )
    group = group_of(n_seqs, groups)
    start = np.searchsorted(group, group)  # index of the first sequence of each sequence's group
    return (np.arange(n_seqs) - start) % n_classes


def readout_by_layer(
    features: np.ndarray, labels: ArrayLike, heads: Sequence[tuple[int, int]], groups: int, n_permutations: int, seed: int
) -> dict[int, Readout]:
    """Readout from all ``heads`` together (key −1) and from each layer's heads alone (key = layer).

    Key −1 is the fingerprint's layer −1 row, which reads every head of every
    layer at once (the ``readout_accuracy`` glossary entry), not a mean over layers.

    Args:
        features: The heads' features side by side, [N, len(heads) · width], in the order of ``heads``.
        labels: One class per row.
        heads: The ``(layer, head)`` of each block of ``width`` columns.
        groups: Number of contiguous groups (folds).
        n_permutations: Number of label permutations of the null.
        seed: Seed of the permutations.

    Returns:
        ``{-1: all heads, layer: that layer's heads}``, one :class:`Readout` each.

    Example:
        >>> x = np.eye(2)[[0, 1] * 4]   # two one-column heads: head (1, 0) holds the class, head (2, 0) its opposite
        >>> readouts = readout_by_layer(x, [0, 1] * 4, [(1, 0), (2, 0)], groups=2, n_permutations=9, seed=0)
        >>> sorted(readouts), readouts[-1].n_features, readouts[1].n_features
        ([-1, 1, 2], 2, 1)
    """
    out = {-1: centroid_readout(features, labels, groups, n_permutations, seed)}
    width = features.shape[1] // len(heads)
    for layer in sorted({l for l, _ in heads}):
        columns = np.concatenate([np.arange(k * width, (k + 1) * width) for k, (l, _) in enumerate(heads) if l == layer])
        out[layer] = centroid_readout(features[:, columns], labels, groups, n_permutations, seed)
    return out
