"""The batches of a run and the forward pass over each: consecutive sequences, whatever their groups; every pass stops at the last layer's scores.

A batch may hold sequences of several groups: the captures split every sum over
the batch by group (:class:`poslens.capture.batch_groups.BatchGroups`), so the
figures do not depend on how the corpus is cut into batches, and the default
settings (8 groups, batches of 4) run full batches even when a group holds one
sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import numpy as np
import torch

from poslens.fit.groups import group_of
from poslens.measurement.arguments import Intervention
from poslens.model.corpus import Corpus
from poslens.model.hooks import Hook, attn_scores, run_with_hooks
from poslens.model.pos_model import PosModel
from poslens.progress import progress_bar


class PassOwner(Protocol):
    """What a forward pass fills: :class:`~poslens.capture.cell_sum_capture.CellSumCapture` or :class:`~poslens.capture.second_pass.SecondPass`.

    Example:
        >>> from types import SimpleNamespace
        >>> from poslens.capture.second_pass import SecondPass
        >>> from poslens.fit.binning import Binning
        >>> owner: PassOwner = SecondPass(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), None)
        >>> [name for name, _ in owner.hooks()]
        ['blocks.0.attn.hook_attn_scores']
    """

    sequence_groups: np.ndarray | None

    def hooks(self) -> list[Hook]:
        """The hooks of one forward pass.

        Returns:
            ``[(hook name, hook function)]``.

        Example:
            >>> from types import SimpleNamespace
            >>> from poslens.capture.second_pass import SecondPass
            >>> from poslens.fit.binning import Binning
            >>> len(SecondPass(SimpleNamespace(n_layers=2, n_heads=1, sliding_windows=[None, None]), Binning(8), None).hooks())
            2
        """
        ...

    def flush(self) -> None:
        """Finish the batch: add what the hooks left on the device to the sums.

        Example:
            >>> from types import SimpleNamespace
            >>> from poslens.capture.cell_sum_capture import CellSumCapture
            >>> from poslens.fit.binning import Binning
            >>> CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2).flush()
        """
        ...


class Batch(NamedTuple):
    """One forward pass's sequences and the group of each.

    Attributes:
        sequences: The sequences' indices in the corpus.
        groups: The group of each (:func:`~poslens.fit.groups.group_of`).

    Example:
        >>> Batch(np.array([2, 3]), np.array([0, 1])).groups.tolist()
        [0, 1]
    """

    sequences: np.ndarray
    groups: np.ndarray


def batches(n_seqs: int, groups: int, batch_size: int) -> list[Batch]:
    """The forward passes of a run: consecutive sequences, ``batch_size`` at a time, with the group of each.

    A batch may span several groups; the captures split its sums by group.

    Args:
        n_seqs: Number of sequences.
        groups: Number of groups.
        batch_size: The most sequences per forward pass.

    Returns:
        ``[Batch(sequence indices, their groups)]``, in order.

    Raises:
        ValueError: When ``batch_size`` is below 1 (or the groups cannot be filled, as in :func:`group_of`).

    Example:
        >>> [(b.sequences.tolist(), b.groups.tolist()) for b in batches(6, 3, 4)]
        [([0, 1, 2, 3], [0, 0, 1, 1]), ([4, 5], [2, 2])]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    assignment = group_of(n_seqs, groups)
    return [Batch(np.arange(k, min(k + batch_size, n_seqs)), assignment[k : k + batch_size]) for k in range(0, n_seqs, batch_size)]


def hooks_after_capture(model: PosModel | None, tokens: torch.Tensor, interventions: Sequence[Intervention]) -> list[Hook]:
    """The hooks interventions ask to run after the capture's (``hooks_after_capture``, e.g. a relativizing edit).

    An intervention that edits a layer's scores after they are measured (methodology §11) defines
    ``hooks_after_capture(model, tokens)``; the others add nothing here.

    Args:
        model: The loaded model.
        tokens: The batch's token ids, [batch, pos].
        interventions: The run's interventions.

    Returns:
        ``[(hook name, hook function)]`` in the interventions' order.

    Example:
        >>> from poslens.mechanisms.interventions import BosReplacement
        >>> hooks_after_capture(None, torch.zeros(1, 4), [BosReplacement("mean")])
        []
    """
    return [h for iv in interventions if hasattr(iv, "hooks_after_capture") for h in iv.hooks_after_capture(model, tokens)]


def forward_passes(
    model: PosModel,
    corpus: Corpus,
    plan: Sequence[Batch],
    interventions: Sequence[Intervention],
    owner: PassOwner,
    progress: bool,
    description: str,
    before_each: Callable[[int], None] | None = None,
) -> None:
    """Run one forward pass per batch of ``plan`` with the interventions' hooks, then ``owner``'s, up to the last layer's scores.

    Hooks an intervention asks to run after the capture (:func:`hooks_after_capture`) come last.

    ``owner`` is a :class:`~poslens.capture.cell_sum_capture.CellSumCapture` (the
    first pass) or a :class:`~poslens.capture.second_pass.SecondPass`: its
    ``sequence_groups`` are set before each pass and its ``flush()`` called after it. The
    second pass runs this with the first pass's plan, so that both see the same
    batches with the same interventions.

    Args:
        model: The loaded model.
        corpus: The token corpus.
        plan: The batches of this process (:func:`batches`).
        interventions: Interventions whose hooks run before ``owner``'s.
        owner: What the hooks fill: its ``sequence_groups``, ``hooks()`` and ``flush()``.
        progress: Whether to show a progress bar.
        description: The progress bar's label.
        before_each: Called with the batch size before each pass (the first pass's structural sums).

    Example:
        >>> forward_passes(model, corpus, batches(16, 8, 4), (), capture, False, "measuring")  # doctest: +SKIP
    """
    for index, groups in progress_bar(plan, desc=description, unit="batch", disable=not progress, leave=False):
        tokens = corpus.tokens[index]
        extra: list[Hook] = [h for iv in interventions for h in iv.hooks(model, tokens)]
        after = hooks_after_capture(model, tokens, interventions)
        owner.sequence_groups = groups
        if before_each is not None:
            before_each(len(index))
        # nothing after the last layer's scores is measured: the pass ends there
        run_with_hooks(model, tokens, extra + owner.hooks() + after, stop_after=attn_scores(model.n_layers - 1))
        owner.flush()
