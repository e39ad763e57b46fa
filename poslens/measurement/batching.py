"""The batches of a run and the forward pass over each: consecutive sequences, whatever their groups; every pass stops at the last layer's scores.

A batch may hold sequences of several groups: the captures split every sum over
the batch by group (:class:`poslens.capture.batch_groups.BatchGroups`), so the
figures do not depend on how the corpus is cut into batches, and the default
settings (8 groups, batches of 4) run full batches even when a group holds one
sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

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
        ValueError: When the groups cannot be filled (as in :func:`group_of`). ``batch_size`` is checked at the
            entry (:func:`poslens.options.check_integers`).

    Example:
        >>> [(b.sequences.tolist(), b.groups.tolist()) for b in batches(6, 3, 4)]
        [([0, 1, 2, 3], [0, 0, 1, 1]), ([4, 5], [2, 2])]
    """
    assignment = group_of(n_seqs, groups)
    return [Batch(np.arange(k, min(k + batch_size, n_seqs)), assignment[k : k + batch_size]) for k in range(0, n_seqs, batch_size)]


def intervened_forward(
    model: PosModel,
    tokens: torch.Tensor,
    interventions: Sequence[Intervention],
    capture: Sequence[Hook],
    logits: bool = False,
    stop_after: str | None = None,
) -> Any:
    """The one forward pass of every run: the interventions' hooks, then the capture's, then the interventions' hooks after the capture.

    At a hook point the hooks run in that order: an intervention's ``hooks`` (a BOS replacement,
    a sink ablation) change what the capture reads; ``capture`` reads it (and may edit it, as
    calibration does); an intervention's ``hooks_after_capture`` (a relativizing edit, a key-phase
    freeze) edit the scores once they are measured. ``poslens.measure``, the second pass, the
    calibration of the relativizing edit, the next-token loss and the path-specific tests all run
    through here. The caller has checked the sequences against the model's context at its entry.

    Args:
        model: The loaded model.
        tokens: The batch's token ids, [batch, pos].
        interventions: The run's interventions (:func:`~poslens.measurement.arguments.as_interventions`), in order.
        capture: The hooks that read the pass, ``[(hook name, hook function)]``.
        logits: Whether to return the logits (a full pass).
        stop_after: A hook name after whose hooks the pass ends (:func:`~poslens.model.hooks.run_with_hooks`).

    Returns:
        The logits [batch, pos, vocab] if ``logits``, else ``None``.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> from poslens.model.hooks import attn_scores
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> seen = []
        >>> intervened_forward(model, torch.tensor([[1, 70, 71]]), (), [(attn_scores(0), lambda x, hook: seen.append(x.shape))],
        ...                    stop_after=attn_scores(0))
        >>> seen
        [torch.Size([1, 4, 3, 3])]
    """
    before = [h for iv in interventions for h in iv.hooks(model, tokens)]
    after = [h for iv in interventions for h in iv.hooks_after_capture(model, tokens)]
    return run_with_hooks(model, tokens, before + list(capture) + after, logits=logits, stop_after=stop_after, context_checked=True)


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

    Each pass is :func:`intervened_forward`: hooks an intervention asks to run after the capture come last.

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
        owner.sequence_groups = groups
        if before_each is not None:
            before_each(len(index))
        # nothing after the last layer's scores is measured: the pass ends there
        intervened_forward(model, corpus.tokens[index], interventions, owner.hooks(), stop_after=attn_scores(model.n_layers - 1))
        owner.flush()
