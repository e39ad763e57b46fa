"""The measurement's options and their defaults, written once: groups, early, batch size, memory budget, probe and τ.

:class:`MeasureOptions` is what :func:`poslens.measure`, the study's
:class:`~poslens.study.settings.Settings` and the command line share; every
default of these options anywhere in poslens reads :data:`DEFAULTS`, and
:meth:`MeasureOptions.validate` raises the one message each bad value gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

from poslens.errors import InputError, ParameterTypeError


@dataclass(frozen=True)
class MeasureOptions:
    """The options of one measurement, with their defaults.

    Attributes:
        groups: Number of groups of the delete-one-group jackknife, at least 2.
        early: Q, the bound of the early query window 1 ≤ i < Q, at least 2.
        batch_size: Sequences per forward pass, at least 1 (an upper bound when ``max_memory`` plans it); ``None``: planned.
        max_memory: ``"free"`` or a memory budget such as ``"8GB"`` to plan the batch size against; ``None``: no planning.
        probe: Whether to fit the position probe (``probe_r2``).
        tau: The sink-score threshold τ of the sink-reading heads, in (0, 1].

    Example:
        >>> MeasureOptions().groups, MeasureOptions().early, MeasureOptions().tau
        (8, 32, 0.3)
        >>> MeasureOptions(groups=1).validate()
        Traceback (most recent call last):
        poslens.errors.InputError: groups must be ≥ 2 (the intervals need two groups at least), got 1
    """

    groups: int = 8
    early: int = 32
    batch_size: int | None = 4
    max_memory: int | str | None = None
    probe: bool = True
    tau: float = 0.3

    def validate(self) -> MeasureOptions:
        """Check every option's type and range, naming the option; returns the options themselves.

        Returns:
            ``self``, so that ``MeasureOptions(...).validate()`` reads as one step.

        Raises:
            ParameterTypeError: An integer option that is not an int (``batch_size`` may be None), or a τ that is not a number.
            InputError: A value out of range.

        Example:
            >>> MeasureOptions(early=16).validate().early
            16
            >>> MeasureOptions(groups="2").validate()
            Traceback (most recent call last):
            poslens.errors.ParameterTypeError: groups must be an int, got str '2'
            >>> MeasureOptions(tau=1.5).validate()
            Traceback (most recent call last):
            poslens.errors.InputError: tau must lie in (0, 1] (a head reads the sink when its key-0 mass is ≥ τ), got 1.5
        """
        check_integers(groups=self.groups, early=self.early, batch_size=self.batch_size)
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)):
            raise ParameterTypeError(f"tau must be a number, got {type(self.tau).__name__} {self.tau!r}")
        if not 0 < self.tau <= 1:
            raise InputError(f"tau must lie in (0, 1] (a head reads the sink when its key-0 mass is ≥ τ), got {self.tau}")
        return self


def check_integers(**integers: object) -> None:
    """Check the integer options given by name (``groups=``, ``early=``, ``batch_size=``): their type, then their range.

    Each must be an int (``batch_size`` may be None), with ``groups ≥ 2``,
    ``early ≥ 2`` and ``batch_size ≥ 1``.

    Args:
        **integers: The options to check, by name; those not given are not checked.

    Raises:
        ParameterTypeError: A wrong type, naming the option.
        InputError: A value out of range, naming the option.

    Example:
        >>> check_integers(groups=2, batch_size=None)
        >>> check_integers(early=1)
        Traceback (most recent call last):
        poslens.errors.InputError: early must be ≥ 2 (the early window is 1 ≤ i < early), got 1
    """
    for name, value in integers.items():
        if value is None and name == "batch_size":
            continue
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ParameterTypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    groups, early, batch_size = integers.get("groups"), integers.get("early"), integers.get("batch_size")
    if groups is not None and groups < 2:
        raise InputError(f"groups must be ≥ 2 (the intervals need two groups at least), got {groups}")
    if early is not None and early < 2:
        raise InputError(f"early must be ≥ 2 (the early window is 1 ≤ i < early), got {early}")
    if batch_size is not None and batch_size < 1:
        raise InputError(f"batch_size must be ≥ 1, got {batch_size}")


#: The defaults, as one object: ``DEFAULTS.groups``, ``DEFAULTS.early``, ``DEFAULTS.tau``, …
DEFAULTS = MeasureOptions()


PATH_OFFSETS = (8, 64)
"""The fixed offsets D of the path-specific tests' key-0 phase freeze; :func:`default_path_offsets` adds T/2."""

PATH_OFFSETS_SHOWN = ",".join(map(str, PATH_OFFSETS)) + ",T/2"
"""How ``--offsets``' default is shown in ``--help`` and the docs (from :data:`PATH_OFFSETS`)."""


def default_path_offsets(seq_len: int) -> tuple[int, ...]:
    """The offsets D the path-specific tests use by default: :data:`PATH_OFFSETS` and T/2 (each once), sorted.

    The one place the default is written: the tests (:func:`poslens.mechanisms.path_tests.default_offsets`), the
    option's help (:data:`PATH_OFFSETS_SHOWN`) and the full run's estimate read it from here.

    Args:
        seq_len: T.

    Returns:
        The sorted offsets.

    Example:
        >>> default_path_offsets(128), default_path_offsets(256)
        ((8, 64), (8, 64, 128))
    """
    return tuple(sorted({*PATH_OFFSETS, seq_len // 2}))


SPLIT_OFFSET = 64
"""D of the sink-path split's phase edit by default, where no sliding window is narrower than twice it
(:func:`poslens.mechanisms.sink_split.default_split_offset`); ``--split-offset``'s help reads it from here."""
