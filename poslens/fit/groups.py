"""Contiguous groups of sequences: the delete-one-group jackknife groups and the cross-validation folds.

Every interval of poslens is computed over the same groups: a measurement's
cell sums are kept per group (:mod:`poslens.measurement.pipeline`), and the
fingerprint's jackknife and readout folds (:mod:`poslens.fit.readout`) split
the sequences the same way.
"""

from __future__ import annotations

import numpy as np

from poslens.errors import InputError


def group_of(n_seqs: int, groups: int) -> np.ndarray:
    """Group index of each sequence: contiguous, near-equal blocks.

    Args:
        n_seqs: Number of sequences.
        groups: Number of groups, at least 2.

    Returns:
        The group of each sequence, [n_seqs].

    Raises:
        InputError: When ``groups`` is below 2, or exceeds ``n_seqs`` (a ``ValueError``).

    Example:
        >>> group_of(10, 4).tolist()
        [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    """
    if groups < 2:
        raise InputError(f"groups must be ≥ 2 for intervals, got {groups}")
    if n_seqs < groups:
        raise InputError(f"{n_seqs} sequences cannot fill {groups} groups; use at least {groups} sequences or fewer groups")
    return (np.arange(n_seqs) * groups) // n_seqs


def default_groups(n_seqs: int, most: int = 8) -> int:
    """The number of groups ``measure`` takes when none is given: ``min(most, n_seqs // 2)``, and 2 at least.

    Each group then holds two sequences or more whenever N ≥ 4: at small N a group of one sequence
    makes every replicate leave out a single sequence, and costs a fit and G variants of the
    counterfactual for an interval no narrower (docs/benchmarks.md, "What the number of groups
    trades"). From N = 2·``most`` sequences on, ``most`` groups.

    Args:
        n_seqs: Number of sequences N.
        most: The number of groups from 2·``most`` sequences on (``DEFAULTS.groups``, 8).

    Returns:
        G.

    Example:
        >>> [default_groups(n) for n in (2, 4, 8, 15, 16, 32)]
        [2, 2, 4, 7, 8, 8]
    """
    return max(2, min(most, n_seqs // 2))
