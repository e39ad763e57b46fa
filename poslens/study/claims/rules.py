"""The rule engine of the claims: estimates, conditions, three-way rules and the one function that decides.

A :class:`Rule` is data: ``supported`` if all of its ``supported_if``
conditions hold, else ``not supported`` if any of its ``not_supported_if``
conditions holds (all of them, for an equivalence test), else
``inconclusive``. :class:`AnyOf` and :class:`AllOf` group conditions inside
either list (an "or" among "and"s, and the reverse). A :class:`Condition` compares one number of a named
:class:`Estimate` (its value, ci_low or ci_high) with a threshold or with a
:class:`Bound` of another estimate. The same object writes the rule's words
(:meth:`Rule.text`, with the thresholds it uses) and decides (:func:`verdict`,
the one function that turns estimates into a verdict, for every claim), so
the words cannot drift from the decision. :func:`joint` combines the verdicts
of several comparisons (C4), as :data:`JOINT` says.

Comparisons are strict where the rule says ``>``/``<`` and inclusive where it
says ``>=``/``<=``. A NaN estimate or bound makes every comparison false, so it
gives ``inconclusive``. The claims themselves (which estimates, which rule)
are defined in :mod:`poslens.study.claims`. Longer than 400 lines
because it is one job, the rule engine: its eight objects and two functions
decide together, each with its examples.

Example:
    >>> rule = Rule(supported_if=(Condition("c_res", "ci_low", ">", ZERO),),
    ...             not_supported_if=(Condition("c_res", "ci_high", "<=", ZERO),))
    >>> rule.text()
    'supported if c_res ci_low > 0; not supported if c_res ci_high <= 0; inconclusive otherwise'
    >>> verdict(rule, [Estimate("c_res", 0.01, 0.005, 0.015)])
    'supported'
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
#: The verdict of a claim whose estimates the run did not measure.
NOT_MEASURED = "not measured"


#: The ``statistic`` of an input: how it was taken from the part's rows.
STATISTICS = (
    "row",
    "max over layers",
    "slope over layers",
    "difference",
    "threshold",
    "paired difference",
    "independent difference",
    "trend",
    "depth slope",
    "detectable",
)


ZERO = 0.0
"""The threshold of every sign rule (an interval must clear zero)."""


def _fmt(x: float) -> str:
    return "nan" if x is None or not np.isfinite(x) else f"{x:.4g}"


@dataclass(frozen=True)
class Estimate:
    """One estimate a rule reads: its name in the rule, value, interval, and where it came from.

    Attributes:
        name: The name the rule reads it by.
        value: The point value.
        ci_low: Lower end of its 95% interval (NaN for a point value).
        ci_high: Upper end of its 95% interval (NaN for a point value).
        where: Where it came from, in words (metric, layer, head, query window, …), for people.
        statistic: How it was taken from the part's rows (:data:`STATISTICS`): ``row`` (one row),
            ``max over layers``, ``slope over layers``, ``difference`` (of two estimates) or ``threshold`` (a rule's number).
        metric: The part's metric it was read from ("" for a threshold).
        model: The ``model`` column of its row(s).
        variant: The ``variant`` column.
        intervention: The ``intervention`` column.
        layer: Its row's layer (−1: the mean over layers ≥ 1; for ``max over layers``, the layer of the maximum), or None.
        head: Its row's head (−1: the mean over heads), or None.
        query_window: The query window of its row(s) ("" when the estimate spans windows or has none).
        layer_first: For a statistic over layers, the first layer it spans.
        layer_last: For a statistic over layers, the last layer it spans.

    Example:
        >>> Estimate("probe_r2", 0.6, 0.5, 0.7).text()
        'probe_r2 = 0.6 [0.5, 0.7]'
        >>> Estimate("readout_p_value", 0.005, float("nan"), float("nan")).text()
        'readout_p_value = 0.005'
    """

    name: str
    value: float
    ci_low: float
    ci_high: float
    where: str = ""
    statistic: str = "row"
    metric: str = ""
    model: str = ""
    variant: str = ""
    intervention: str = ""
    layer: int | None = None
    head: int | None = None
    query_window: str = ""
    layer_first: int | None = None
    layer_last: int | None = None

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, got {self.statistic!r}")

    def text(self) -> str:
        """The estimate in words: ``name = value [ci_low, ci_high]``, or ``name = value`` for a point value (both bounds NaN).

        Returns:
            The estimate in words.

        Example:
            >>> Estimate("c_res", 0.01, float("nan"), 0.02).text()
            'c_res = 0.01 [nan, 0.02]'
        """
        if _isnan(self.ci_low) and _isnan(self.ci_high):
            return f"{self.name} = {_fmt(self.value)}"
        return f"{self.name} = {_fmt(self.value)} [{_fmt(self.ci_low)}, {_fmt(self.ci_high)}]"


def _isnan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x))


def as_point(estimate: Estimate) -> Estimate:
    """``estimate`` as a point value (a p-value, a chance level): its interval set to NaN, as the inputs table records it.

    Args:
        estimate: The estimate.

    Returns:
        A copy with NaN bounds.

    Example:
        >>> as_point(Estimate("readout_p_value", 0.005, 0.005, 0.005)).text()
        'readout_p_value = 0.005'
    """
    return dataclasses.replace(estimate, ci_low=np.nan, ci_high=np.nan)


def threshold(name: str, value: float, where: str) -> Estimate:
    """A number of a rule (a target, a band) as an input: a point value with statistic ``threshold``.

    Args:
        name: Its name among the inputs.
        value: The number.
        where: What it is, in words.

    Returns:
        The estimate.

    Example:
        >>> threshold("target", 0.4, "the reduction C5 expects").text()
        'target = 0.4'
    """
    return Estimate(name, float(value), np.nan, np.nan, where, statistic="threshold")


BOUNDS = ("value", "ci_low", "ci_high")
"""The numbers of a estimate a condition can compare."""

_OPERATORS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


@dataclass(frozen=True)
class Bound:
    """One number of a named estimate (its ``value``, ``ci_low`` or ``ci_high``), as a condition's threshold.

    Attributes:
        estimate: The estimate's name.
        bound: ``value``, ``ci_low`` or ``ci_high``.

    Example:
        >>> Bound("c_res (standard)", "ci_low").text(), Bound("readout_chance").text()
        ('c_res (standard) ci_low', 'readout_chance')
    """

    estimate: str
    bound: str = "value"

    def __post_init__(self) -> None:
        if self.bound not in BOUNDS:
            raise ValueError(f"bound must be one of {BOUNDS}, got {self.bound!r}")

    def text(self) -> str:
        """``estimate`` for its value, ``estimate ci_low`` / ``estimate ci_high`` for a bound of its interval.

        Returns:
            The bound in words.

        Example:
            >>> Bound("c_res", "ci_high").text()
            'c_res ci_high'
        """
        return self.estimate if self.bound == "value" else f"{self.estimate} {self.bound}"

    def of(self, estimates: Mapping[str, Estimate]) -> float:
        """This number, read from ``estimates`` (keyed by name).

        Args:
            estimates: The estimates, by name.

        Returns:
            The number.

        Raises:
            ValueError: When the estimate is not among ``estimates``.

        Example:
            >>> Bound("c_res", "ci_high").of({"c_res": Estimate("c_res", 0.01, 0.0, 0.02)})
            0.02
        """
        if self.estimate not in estimates:
            raise ValueError(f"the rule reads estimate {self.estimate!r}, which is not among the estimates given: {list(estimates)}")
        return float(getattr(estimates[self.estimate], self.bound))


@dataclass(frozen=True)
class Condition:
    """``estimate``'s ``bound`` compared by ``op`` with ``threshold`` (a number, or a :class:`Bound` of another estimate).

    The same object renders itself as text (with the threshold it uses) and
    decides whether it holds on a set of estimates. A NaN on either side makes
    it false, as every comparison with NaN is. ``note`` is an explanation
    shown in parentheses after the text; it does not take part in the decision.

    Attributes:
        estimate: The estimate's name.
        bound: Which of its numbers is compared: ``value``, ``ci_low`` or ``ci_high``.
        op: The comparison: ``>``, ``>=``, ``<`` or ``<=``.
        threshold: A number, or a :class:`Bound` of another estimate.
        note: An explanation shown after the text; not part of the decision.

    Example:
        >>> c = Condition("c_res", "ci_low", ">", 0.0)
        >>> c.text(), c.holds({"c_res": Estimate("c_res", 0.01, 0.005, 0.015)})
        ('c_res ci_low > 0', True)
        >>> Condition("readout_accuracy", "ci_high", "<=", Bound("readout_chance"), note="1/K").text()
        'readout_accuracy ci_high <= readout_chance (1/K)'
    """

    estimate: str
    bound: str
    op: str
    threshold: float | Bound
    note: str = ""

    def __post_init__(self) -> None:
        Bound(self.estimate, self.bound)  # checks the bound's name
        if self.op not in _OPERATORS:
            raise ValueError(f"op must be one of {list(_OPERATORS)}, got {self.op!r}")

    def text(self) -> str:
        """The condition in words, e.g. ``rho_mask (layer 0) ci_low > 0.5``.

        Returns:
            The condition in words.

        Example:
            >>> Condition("c_res", "ci_low", ">", 0.0).text()
            'c_res ci_low > 0'
        """
        threshold = self.threshold.text() if isinstance(self.threshold, Bound) else f"{self.threshold:g}"
        return f"{Bound(self.estimate, self.bound).text()} {self.op} {threshold}" + (f" ({self.note})" if self.note else "")

    def holds(self, estimates: Mapping[str, Estimate]) -> bool:
        """Whether the condition holds on ``estimates`` (keyed by name); ``ValueError`` if a estimate it reads is absent.

        Args:
            estimates: The estimates, by name.

        Returns:
            Whether it holds (false when either side is NaN).

        Example:
            >>> Condition("c_res", "ci_high", "<=", 0.0).holds({"c_res": Estimate("c_res", 0.0, float("nan"), float("nan"))})
            False
        """
        left = Bound(self.estimate, self.bound).of(estimates)
        right = self.threshold.of(estimates) if isinstance(self.threshold, Bound) else float(self.threshold)
        return bool(_OPERATORS[self.op](left, right))


@dataclass(frozen=True)
class _Group:
    """Conditions joined by one word: what :class:`AnyOf` and :class:`AllOf` share (they differ in the word alone)."""

    conditions: tuple[Condition | AnyOf | AllOf, ...]
    note: str = ""
    word: ClassVar[str] = ""

    def text(self) -> str:
        """The group in words, in parentheses.

        Returns:
            The group in words.

        Example:
            >>> AllOf((Condition("a", "value", ">", 1.0), Condition("b", "value", ">", 1.0))).text()
            '(a > 1 and b > 1)'
        """
        return "(" + f" {self.word} ".join(c.text() for c in self.conditions) + ")" + (f" ({self.note})" if self.note else "")

    def holds(self, estimates: Mapping[str, Estimate]) -> bool:
        """Whether the conditions hold: any of them for :class:`AnyOf`, all of them for :class:`AllOf`.

        Args:
            estimates: The estimates, by name.

        Returns:
            Whether the group holds.

        Example:
            >>> AnyOf((Condition("a", "value", ">", 1.0),)).holds({"a": Estimate("a", 2.0, 1.0, 3.0)})
            True
            >>> AllOf((Condition("a", "value", ">", 1.0), Condition("a", "value", "<", 1.5))).holds({"a": Estimate("a", 2.0, 1.0, 3.0)})
            False
        """
        held = (c.holds(estimates) for c in self.conditions)
        return any(held) if self.word == "or" else all(held)

    def names(self) -> list[str]:
        """The estimates the group reads, in order.

        Returns:
            The estimate names.

        Example:
            >>> AnyOf((Condition("a", "value", ">", Bound("b")),)).names()
            ['a', 'b']
        """
        return [name for c in self.conditions for name in _names(c)]


@dataclass(frozen=True)
class AnyOf(_Group):
    """Conditions of which one must hold: a rule's "or" inside an "and" (or the reverse, with :class:`AllOf`).

    Attributes:
        conditions: The conditions (or nested groups).
        note: An explanation shown after the text; not part of the decision.

    Example:
        >>> outside = AnyOf((Condition("r", "ci_low", ">", 0.1), Condition("r", "ci_high", "<", -0.1)), note="r outside [-0.1, 0.1]")
        >>> outside.text(), outside.holds({"r": Estimate("r", -0.5, -0.7, -0.3)})
        ('(r ci_low > 0.1 or r ci_high < -0.1) (r outside [-0.1, 0.1])', True)
    """

    word: ClassVar[str] = "or"


@dataclass(frozen=True)
class AllOf(_Group):
    """Conditions that must all hold: a rule's "and" inside an "or".

    Attributes:
        conditions: The conditions (or nested groups).
        note: An explanation shown after the text; not part of the decision.

    Example:
        >>> within = AllOf((Condition("d", "ci_low", ">=", -0.01), Condition("d", "ci_high", "<=", 0.01)), note="equivalence")
        >>> within.text(), within.holds({"d": Estimate("d", 0.0, -0.005, 0.008)})
        ('(d ci_low >= -0.01 and d ci_high <= 0.01) (equivalence)', True)
    """

    word: ClassVar[str] = "and"


def _names(c: Condition | AnyOf | AllOf) -> list[str]:
    if isinstance(c, AnyOf | AllOf):
        return c.names()
    return [c.estimate] + ([c.threshold.estimate] if isinstance(c.threshold, Bound) else [])


@dataclass(frozen=True)
class Rule:
    """A three-way decision rule: ``supported`` if all of ``supported_if`` hold, else ``not supported`` if
    any of ``not_supported_if`` holds (all of them, for an equivalence test: ``not_supported_when="all"``),
    else ``inconclusive``.

    :meth:`text` is what the ``rule`` column says; :func:`verdict` applies the
    same object to estimates, so the two cannot disagree. ``remark`` is shown after
    the rule (estimates that are reported but not used, where a check lives).

    Attributes:
        supported_if: Conditions that all must hold for ``supported``.
        not_supported_if: Conditions any of which gives ``not supported`` (all of which, with ``not_supported_when="all"``).
        remark: Text shown after the rule.
        not_supported_when: ``"any"`` (default) or ``"all"``: how ``not_supported_if`` combines.

    Example:
        >>> rule = Rule(supported_if=(Condition("c_res", "ci_low", ">", 0.0),),
        ...             not_supported_if=(Condition("c_res", "ci_high", "<=", 0.0),))
        >>> rule.text()
        'supported if c_res ci_low > 0; not supported if c_res ci_high <= 0; inconclusive otherwise'
        >>> rule.estimates()
        ('c_res',)
        >>> within = (Condition("r", "ci_low", ">=", -0.1), Condition("r", "ci_high", "<=", 0.1))
        >>> Rule((Condition("r", "ci_low", ">", 0.1),), within, not_supported_when="all").text().split("; ")[1]
        'not supported if r ci_low >= -0.1 and r ci_high <= 0.1'
    """

    supported_if: tuple[Condition | AnyOf | AllOf, ...]
    not_supported_if: tuple[Condition | AnyOf | AllOf, ...]
    remark: str = ""
    not_supported_when: str = "any"

    def __post_init__(self) -> None:
        if not self.supported_if or not self.not_supported_if:
            raise ValueError("a rule needs at least one condition for 'supported' and one for 'not supported'")
        if self.not_supported_when not in ("any", "all"):
            raise ValueError(f"not_supported_when must be 'any' or 'all', got {self.not_supported_when!r}")

    def text(self) -> str:
        """The rule in words, with the thresholds it uses.

        Returns:
            The rule in words.

        Example:
            >>> Rule((Condition("c_res", "ci_low", ">", 0.0),), (Condition("c_res", "ci_high", "<=", 0.0),)).text()
            'supported if c_res ci_low > 0; not supported if c_res ci_high <= 0; inconclusive otherwise'
        """
        text = (
            "supported if "
            + " and ".join(c.text() for c in self.supported_if)
            + "; not supported if "
            + (" or " if self.not_supported_when == "any" else " and ").join(c.text() for c in self.not_supported_if)
            + "; inconclusive otherwise"
        )
        return text + (f". {self.remark}" if self.remark else "")

    def estimates(self) -> tuple[str, ...]:
        """The names of the estimates the rule reads, in order of first use.

        Returns:
            The estimate names.

        Example:
            >>> Rule((Condition("c_res", "ci_low", ">", 0.0),), (Condition("reduction", "ci_high", "<=", Bound("c_res")),)).estimates()
            ('c_res', 'reduction')
        """
        names = []
        for c in (*self.supported_if, *self.not_supported_if):
            names += _names(c)
        return tuple(dict.fromkeys(names))


def verdict(rule: Rule, estimates: Iterable[Estimate]) -> str:
    """``supported``, ``not supported`` or ``inconclusive``: ``rule`` applied to ``estimates`` (matched by name).

    Every claim decides through this function. A NaN in a estimate a condition
    reads makes that condition false, so NaN alone never gives ``supported`` or
    ``not supported``. ``ValueError`` if two estimates share a name or a estimate the
    rule reads is missing.

    Args:
        rule: The rule.
        estimates: The estimates it reads, with distinct names.

    Returns:
        ``supported``, ``not supported`` or ``inconclusive``.

    Raises:
        ValueError: When two estimates share a name, or a estimate the rule reads is missing.

    Example:
        >>> rule = Rule((Condition("r", "ci_low", ">", 0.0),), (Condition("r", "ci_high", "<=", 0.0),))
        >>> [verdict(rule, [Estimate("r", v, lo, hi)]) for v, lo, hi in
        ...  [(0.3, 0.1, 0.5), (-0.3, -0.5, -0.1), (0.1, -0.1, 0.3), (0.3, float("nan"), 0.5)]]
        ['supported', 'not supported', 'inconclusive', 'inconclusive']
    """
    by_name: dict[str, Estimate] = {}
    for f in estimates:
        if f.name in by_name:
            raise ValueError(f"two estimates are named {f.name!r}; a rule reads estimates by name")
        by_name[f.name] = f
    missing = [name for name in rule.estimates() if name not in by_name]
    if missing:
        raise ValueError(f"the rule reads estimate(s) {missing}, which are not among the estimates given: {list(by_name)}")
    if all(c.holds(by_name) for c in rule.supported_if):
        return SUPPORTED
    refuting = [c.holds(by_name) for c in rule.not_supported_if]
    if any(refuting) if rule.not_supported_when == "any" else all(refuting):
        return NOT_SUPPORTED
    return INCONCLUSIVE


JOINT = "supported if every comparison is supported; not supported if any is not supported; inconclusive otherwise"
"""In words, how :func:`joint` combines the verdicts of several comparisons (C4)."""


def joint(verdicts: Iterable[str]) -> str:
    """The verdict of several comparisons taken together, as :data:`JOINT` says.

    Args:
        verdicts: At least one verdict.

    Returns:
        The joint verdict.

    Raises:
        ValueError: When ``verdicts`` is empty.

    Example:
        >>> joint(["supported", "supported"]), joint(["supported", "inconclusive"]), joint(["inconclusive", "not supported"])
        ('supported', 'inconclusive', 'not supported')
    """
    verdicts = list(verdicts)
    if not verdicts:
        raise ValueError("joint: no verdicts to combine")
    if all(v == SUPPORTED for v in verdicts):
        return SUPPORTED
    if any(v == NOT_SUPPORTED for v in verdicts):
        return NOT_SUPPORTED
    return INCONCLUSIVE
