"""What :func:`poslens.measure` takes, checked at the boundary: the interventions' protocol and the arguments' types and ranges."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, Protocol, TypeGuard, cast

import numpy as np
import torch

from poslens.errors import AdvisedWarning, EarlyWindowWarning, ParameterTypeError
from poslens.model.corpus import Corpus
from poslens.model.hooks import Hook
from poslens.model.pos_model import PosModel
from poslens.options import check_integers


class Intervention(Protocol):
    """What ``measure`` needs of an intervention: a label, hooks, a description, and any hooks after the capture.

    The classes in :mod:`poslens.mechanisms.interventions` subclass it; ``measure`` joins
    the labels of several interventions with ``+`` in the ``intervention`` column. A subclass
    inherits :meth:`hooks_after_capture` (none); an object that only has ``label``, ``hooks``
    and ``describe`` is accepted too: :func:`as_interventions` gives it the same default.
    A subclass gives its ``label`` as a property or a class attribute.

    Example:
        >>> from poslens.mechanisms.interventions import BosReplacement, Position0Transplant
        >>> "+".join(iv.label for iv in [BosReplacement("mean"), Position0Transplant("token:42")])
        'bos:mean+transplant:42'
    """

    @property
    def label(self) -> str:
        """The ``intervention`` column's value.

        Example:
            >>> from poslens.mechanisms.interventions import BosReplacement
            >>> BosReplacement("zero").label
            'bos:zero'
        """
        ...

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[Hook]:
        """Forward hooks for one batch ``tokens`` [batch, pos], added before the capture's own hooks.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, pos].

        Returns:
            ``[(hook name, hook function)]``, as ``run_with_hooks`` takes them.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> from poslens.mechanisms.interventions import Position0Transplant
            >>> hooks = Position0Transplant("token:42").hooks(model, torch.tensor([[1, 70, 71]]))
            >>> [name for name, _ in hooks]   # one per block
            ['blocks.0.hook_resid_pre', 'blocks.1.hook_resid_pre', 'blocks.2.hook_resid_pre']
        """
        ...

    def describe(self) -> dict[str, Any]:
        """The intervention's settings, stored under ``settings["interventions"]`` in the result's metadata.

        Returns:
            The settings, JSON-ready.

        Example:
            >>> from poslens.mechanisms.interventions import BosReplacement
            >>> BosReplacement("zero").describe()
            {'intervention': 'bos-replacement', 'kind': 'zero', 'seed': 0, 'token_id': None}
        """
        ...

    def hooks_after_capture(self, model: PosModel, tokens: torch.Tensor) -> list[Hook]:
        """Forward hooks for one batch that run after the capture's, e.g. an edit of the scores once they are measured.

        The default adds none; a relativizing edit or a key-phase freeze overrides it.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, pos].

        Returns:
            ``[(hook name, hook function)]``; here ``[]``.

        Example:
            >>> from poslens.mechanisms.interventions import BosReplacement
            >>> BosReplacement("mean").hooks_after_capture(None, torch.zeros(1, 4))
            []
        """
        return []


class ProbeSizeWarning(AdvisedWarning):
    """The residual probe has fewer training rows per fold than twice its features: its readouts cannot be read.

    Its advice names ``n_seqs`` and ``seq_len`` (:class:`~poslens.errors.AdvisedWarning`), found with ``groups`` too.

    Example:
        >>> issubclass(ProbeSizeWarning, UserWarning)
        True
    """


def warn_probe_size(n_seqs: int, seq_len: int, groups: int, width: int, stacklevel: int = 3) -> None:
    """Warn (:class:`ProbeSizeWarning`) where the residual probe trains on fewer rows per fold than twice its features.

    The probe of log(i + 1) from the residual stream is fitted on the rows 1 ≤ i < T of the other groups' sequences;
    with fewer rows than twice its ``width`` features its held-out R² and its code readout scatter beyond reading
    (8 × 32 tokens of SmolLM2 gave a ΔR² of −38 [−158, 82]).

    Args:
        n_seqs: Sequences N.
        seq_len: Tokens per sequence T.
        groups: Groups G (each fold trains on G − 1 of them).
        width: The probe's features (d_model, or the projection's width).
        stacklevel: Passed to :func:`warnings.warn`.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_probe_size(8, 32, 8, 576)
        >>> str(caught[0].message).split(":")[0]
        'the residual probe trains on about 217 rows per fold for 576 features'
        >>> str(caught[0].message).split("; ")[-1]
        'use at least 43 sequences of 32 tokens (n_seqs=43, seq_len=32)'
    """
    rows = n_seqs * (seq_len - 1) * (groups - 1) / groups
    if rows < 2 * width:
        needed = int(np.ceil(2 * width * groups / ((groups - 1) * (seq_len - 1))))
        text = (
            f"the residual probe trains on about {rows:.0f} rows per fold for {width} features: its readouts cannot be read "
            f"at this size; use at least {needed} sequences of {seq_len} tokens ({{n_seqs}}, {{seq_len}})"
        )
        found = {"n_seqs": n_seqs, "seq_len": seq_len, "groups": groups}
        warnings.warn(ProbeSizeWarning(text, {"n_seqs": needed, "seq_len": seq_len}, found), stacklevel=stacklevel)


class SmallGroupsWarning(AdvisedWarning):
    """A group holds a single sequence: its interval rests on single sequences.

    Its advice names ``n_seqs`` and ``groups`` (:class:`~poslens.errors.AdvisedWarning`), found with the same names.

    Example:
        >>> issubclass(SmallGroupsWarning, UserWarning)
        True
    """


def small_groups_message(n_seqs: int, groups: int) -> str | None:
    """The warning for ``n_seqs`` sequences in ``groups`` groups when a group holds fewer than two, else ``None``.

    The groups are contiguous blocks of near-equal size (:func:`~poslens.fit.groups.group_of`), so
    with G ≤ N < 2G sequences, 2G − N groups hold one sequence each.

    Args:
        n_seqs: Sequences measured, N.
        groups: Groups G.

    Returns:
        The message, naming the fix (at least 2G sequences, or at most N // 2 groups), or ``None``.

    Example:
        >>> small_groups_message(8, 8)
        '8 sequences in 8 groups: 8 of the groups hold a single sequence, so every interval rests on single sequences ...
        >>> small_groups_message(16, 8) is None
        True
    """
    warning = small_groups_warning(n_seqs, groups)
    return None if warning is None else str(warning)


def small_groups_warning(n_seqs: int, groups: int) -> SmallGroupsWarning | None:
    """The :class:`SmallGroupsWarning` of :func:`small_groups_message`, its advice (``n_seqs``, ``groups``) kept apart.

    Args:
        n_seqs: Sequences measured, N.
        groups: Groups G.

    Returns:
        The warning, or ``None`` when every group holds two sequences or more.

    Example:
        >>> warning = small_groups_warning(8, 8)
        >>> warning.advice, warning.found
        ({'n_seqs': 16, 'groups': 4}, {'n_seqs': 8, 'groups': 8})
        >>> warning.spelled(lambda name, value: f"--{name.replace('_', '-')} {value}").split("; ")[-1]
        'measure at least 16 sequences (--n-seqs 16), or pass --groups 4'
    """
    if not groups <= n_seqs < 2 * groups:
        return None
    singles = 2 * groups - n_seqs
    advice = {"n_seqs": 2 * groups, **({"groups": n_seqs // 2} if n_seqs >= 4 else {})}
    text = (
        f"{n_seqs} sequences in {groups} groups: {singles} of the groups hold a single sequence, so every interval rests on "
        "single sequences (each jackknife replicate leaves out one sequence, each held-out figure is scored on one) and is "
        f"unstable; measure at least {2 * groups} sequences ({{n_seqs}}){', or pass {groups}' if 'groups' in advice else ''}"
    )
    return SmallGroupsWarning(text, advice, {"n_seqs": n_seqs, "groups": groups})


def check_arguments(corpus: object, interventions: object, warn: bool = True, **integers: object) -> tuple[Intervention, ...]:
    """Check the arguments of ``measure`` and ``collect_sums`` at the boundary; returns the interventions as a tuple.

    ``corpus`` must be a :class:`~poslens.model.corpus.Corpus` (a tensor of ids
    is refused with the call that makes one); each of ``integers`` (``groups=``,
    ``early=``, ``batch_size=``) must be an int (``batch_size`` may be None),
    with ``groups ≥ 2`` and ``early ≥ 2``; an ``early`` not below the corpus's
    length warns (:class:`EarlyWindowWarning`: the early rows then repeat the
    'all' rows), and so do groups of a single sequence (:class:`SmallGroupsWarning`,
    :func:`small_groups_message`); a single intervention is accepted as well as a list.

    Args:
        corpus: the corpus argument.
        interventions: one intervention, or a sequence of them.
        warn: warn about an early query window that holds every query, and about groups of one sequence.
        **integers: the integer arguments by name.

    Returns:
        The interventions, as a tuple.

    Raises:
        ParameterTypeError: a wrong type, naming the parameter.
        InputError: a value out of range, naming the parameter.

    Example:
        >>> check_arguments(torch.zeros(2, 8), (), groups=2)
        Traceback (most recent call last):
        poslens.errors.ParameterTypeError: corpus must be a poslens Corpus, not a Tensor: make one with poslens.make_corpus(model, ...) ...
        >>> c = Corpus(torch.zeros(4, 8, dtype=torch.long), "random", 0, "none", [0] * 4, ["a"] * 4)
        >>> check_arguments(c, (), groups="2")
        Traceback (most recent call last):
        poslens.errors.ParameterTypeError: groups must be an int, got str '2'
        >>> check_arguments(c, (), groups=2, early=1)
        Traceback (most recent call last):
        poslens.errors.InputError: early must be ≥ 2 (the early window is 1 ≤ i < early), got 1
    """
    if not isinstance(corpus, Corpus):
        hint = " (its .tokens alone carry no provenance)" if isinstance(corpus, torch.Tensor) else ""
        raise ParameterTypeError(
            f"corpus must be a poslens Corpus, not a {type(corpus).__name__}: make one with poslens.make_corpus(model, ...) "
            f"from a source name, a file or a folder{hint}"
        )
    check_integers(**integers)
    early = integers.get("early")
    if warn and isinstance(early, int) and early >= corpus.seq_len:
        # check_arguments ← _checked_run ← measure or collect_sums ← the caller's line
        warnings.warn(
            f"early = {early} is not below the corpus's seq_len {corpus.seq_len}: the early window 1 ≤ i < early "
            "holds every query, so the 'early' rows repeat 'all'; pass early < seq_len for an early window",
            EarlyWindowWarning,
            stacklevel=4,
        )
    groups = integers.get("groups")
    small = small_groups_warning(corpus.n_seqs, groups) if warn and isinstance(groups, int) else None
    if small is not None:
        warnings.warn(small, stacklevel=4)
    if _is_intervention(interventions):
        return as_interventions([interventions])
    try:
        listed = tuple(cast(Iterable[object], interventions))  # a non-iterable raises TypeError here
    except TypeError:
        raise ParameterTypeError(f"interventions must be an intervention or a list of them, got {type(interventions).__name__}") from None
    for item in listed:
        if not _is_intervention(item):
            raise ParameterTypeError(f"interventions holds a {type(item).__name__}; give poslens interventions such as BosReplacement('mean')")
    return as_interventions(listed)


def as_interventions(interventions: Iterable[Any]) -> tuple[Intervention, ...]:
    """The interventions as a tuple, each with :meth:`Intervention.hooks_after_capture`.

    An :class:`Intervention` subclass, or an object with its own ``hooks_after_capture``,
    is kept as it is; an object with only ``label``, ``hooks`` and ``describe`` is given
    the default (no hooks after the capture). The entry points call this once, so that
    the forward pass (:func:`poslens.measurement.batching.intervened_forward`) can call
    every intervention's ``hooks_after_capture``.

    Args:
        interventions: The interventions, in order.

    Returns:
        The same interventions, in order, as a tuple.

    Example:
        >>> class Plain:
        ...     label = "plain"
        ...     def hooks(self, model, tokens): return []
        ...     def describe(self): return {}
        >>> [(iv.label, iv.hooks_after_capture(None, torch.zeros(1, 4))) for iv in as_interventions([Plain()])]
        [('plain', [])]
    """
    return tuple(item if callable(getattr(item, "hooks_after_capture", None)) else _WithoutHooksAfterCapture(item) for item in interventions)


class _WithoutHooksAfterCapture(Intervention):
    """An object with ``label``, ``hooks`` and ``describe`` only, given :class:`Intervention`'s default hooks after the capture."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @property
    def label(self) -> str:
        return self.inner.label

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[Hook]:
        return self.inner.hooks(model, tokens)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def _is_intervention(value: object) -> TypeGuard[Intervention]:
    return all(hasattr(value, name) for name in ("label", "hooks", "describe")) and not isinstance(value, type)
