"""The groups of one forward pass's sequences, and the sums over the batch split by them.

A batch may hold sequences of several groups (:func:`poslens.measurement.batching.batches`
cuts the corpus into batches without regard to the groups). Every sum the
captures take over the batch axis is taken per group instead:
:class:`BatchGroups` holds the runs of consecutive sequences of one group, and
:meth:`BatchGroups.sum` sums a tensor over the batch within each run. A batch
of one group has one run, and its sum is the plain sum over the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class BatchGroups:
    """The runs of consecutive sequences of one group in a batch: ``(group, first, end)`` each, in batch order.

    Attributes:
        runs: ``(group, first, end)`` of each run; the runs cover the batch ``0 … size`` in order.

    Example:
        >>> runs = BatchGroups.of([0, 0, 1, 2, 2])
        >>> runs.runs, runs.size
        (((0, 0, 2), (1, 2, 3), (2, 3, 5)), 5)
        >>> runs.sum(torch.arange(5.0)).tolist()   # 0 + 1, 2, 3 + 4
        [1.0, 2.0, 7.0]
    """

    runs: tuple[tuple[int, int, int], ...]

    @classmethod
    def of(cls, groups: Sequence[int] | np.ndarray) -> BatchGroups:
        """The runs of a batch from the group of each of its sequences.

        Args:
            groups: The group of each sequence of the batch, in batch order (at least one).

        Returns:
            The batch's runs; a group that comes back after another group's run gets a second run.

        Raises:
            ValueError: When ``groups`` is empty or holds a negative group.

        Example:
            >>> BatchGroups.of(np.array([3, 3, 3])).runs
            ((3, 0, 3),)
            >>> BatchGroups.of([1, 0, 1]).groups   # runs, not distinct groups
            [1, 0, 1]
        """
        labels = [int(g) for g in groups]
        if not labels or min(labels) < 0:
            raise ValueError(f"a batch needs one group ≥ 0 per sequence, got {labels}")
        runs: list[tuple[int, int, int]] = []
        first = 0
        for k in range(1, len(labels) + 1):
            if k == len(labels) or labels[k] != labels[first]:
                runs.append((labels[first], first, k))
                first = k
        return cls(tuple(runs))

    @classmethod
    def whole(cls, group: int, size: int) -> BatchGroups:
        """A batch of ``size`` sequences of one group.

        Args:
            group: The group.
            size: The batch size.

        Returns:
            One run over the whole batch.

        Example:
            >>> BatchGroups.whole(2, 4).runs
            ((2, 0, 4),)
        """
        return cls.of([group] * size)

    @property
    def size(self) -> int:
        """Sequences in the batch.

        Example:
            >>> BatchGroups.of([0, 1, 1]).size
            3
        """
        return self.runs[-1][2]

    @property
    def groups(self) -> list[int]:
        """The group of each run, in order.

        Example:
            >>> BatchGroups.of([0, 1, 1]).groups
            [0, 1]
        """
        return [g for g, _, _ in self.runs]

    @property
    def counts(self) -> list[int]:
        """The sequences of each run, in order.

        Example:
            >>> BatchGroups.of([0, 1, 1]).counts
            [1, 2]
        """
        return [end - first for _, first, end in self.runs]

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over its first (batch) axis within each run: [runs, ...].

        One run over the whole batch is ``x.sum(0)`` with the axis kept, so a batch of one group
        is summed exactly as a plain sum over the batch.

        Args:
            x: A tensor whose first axis is the batch, [batch, ...].

        Returns:
            The sums, [runs, ...].

        Raises:
            ValueError: When ``x``'s first axis is not the batch size.

        Example:
            >>> BatchGroups.of([0, 1]).sum(torch.ones(2, 3)).shape
            torch.Size([2, 3])
            >>> BatchGroups.of([0, 0]).sum(torch.ones(3, 1))
            Traceback (most recent call last):
            ...
            ValueError: a batch of 2 sequences, but the tensor's first axis has 3
        """
        if x.shape[0] != self.size:
            raise ValueError(f"a batch of {self.size} sequences, but the tensor's first axis has {x.shape[0]}")
        if len(self.runs) == 1:
            return x.sum(0, keepdim=True)
        return torch.stack([x[first:end].sum(0) for _, first, end in self.runs])


class GroupedBatches:
    """What the hooks of a pass know of the groups of the batch they run in: set before each forward pass.

    :attr:`sequence_groups` holds the group of each sequence of the next batch; setting
    :attr:`group` instead says that every sequence of it belongs to that group (and clears
    :attr:`sequence_groups`). :meth:`batch_groups` gives the batch's runs. The capture of the
    cell sums, the second pass and the residual readout's capture share it.

    Example:
        >>> owner = GroupedBatches()
        >>> owner.sequence_groups = np.array([0, 0, 1])
        >>> owner.batch_groups(3).runs
        ((0, 0, 2), (1, 2, 3))
        >>> owner.group = 1
        >>> owner.sequence_groups is None, owner.batch_groups(2).runs
        (True, ((1, 0, 2),))
    """

    sequence_groups: np.ndarray | None = None
    _group: int = 0
    n_groups: int | None = None  # when set, a batch's group must be below it

    @property
    def group(self) -> int:
        """The group of every sequence of the next batch, when :attr:`sequence_groups` is ``None``.

        Example:
            >>> owner = GroupedBatches(); owner.group = 2; owner.group
            2
        """
        return self._group

    @group.setter
    def group(self, group: int) -> None:
        """Say that every sequence of the next batch belongs to ``group``; clears :attr:`sequence_groups`.

        Args:
            group: The group.

        Example:
            >>> owner = GroupedBatches(); owner.sequence_groups = np.array([0, 1]); owner.group = 1; owner.sequence_groups is None
            True
        """
        self._group = int(group)
        self.sequence_groups = None

    def batch_groups(self, batch: int) -> BatchGroups:
        """The runs of one group in a batch of ``batch`` sequences: from :attr:`sequence_groups`, else all :attr:`group`'s.

        Args:
            batch: The batch size.

        Returns:
            The batch's runs.

        Raises:
            ValueError: When :attr:`sequence_groups` does not name one group per sequence, or names a group
                outside 0 … G − 1 (with :attr:`n_groups` set).

        Example:
            >>> owner = GroupedBatches(); owner.sequence_groups = np.array([1, 0])
            >>> owner.batch_groups(2).groups
            [1, 0]
            >>> owner.batch_groups(3)
            Traceback (most recent call last):
            ...
            ValueError: sequence_groups names 2 groups for a batch of 3 sequences
        """
        if self.sequence_groups is None:
            runs = BatchGroups.whole(self._group, batch)
        else:
            if len(self.sequence_groups) != batch:
                raise ValueError(f"sequence_groups names {len(self.sequence_groups)} groups for a batch of {batch} sequences")
            runs = BatchGroups.of(self.sequence_groups)
        if self.n_groups is not None and max(runs.groups) >= self.n_groups:
            raise ValueError(f"group {max(runs.groups)} of a batch is outside the {self.n_groups} groups of the run")
        return runs
