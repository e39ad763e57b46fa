"""Verdicts on the claims C1–C7 of methodology §9 and §11, computed from tidy tables.

Every verdict is ``supported``, ``not supported`` or ``inconclusive`` (or
``not measured`` when a claim's input tables were not given) and is computed
here from figures and their 95% intervals in tidy tables (the columns of :data:`poslens.measurement.result.COLUMNS`), never written by hand.

Rules are data: each claim's decision rule is one :class:`Rule` object
(:data:`C1_RULE`, :data:`C2_RULE`, :data:`C3_RULE`, :data:`C4_RULES`,
:data:`C4_SLOPE_RULE`, :func:`c5_rule`, :func:`c6_rule`): ``supported`` if all
of its ``supported_if`` conditions hold, else ``not supported`` if any of its
``not_supported_if`` conditions holds, else ``inconclusive``. A
:class:`Condition` compares one number of a named :class:`Figure` (its value,
ci_low or ci_high) with a threshold or with another figure's number. The same
object writes the rule's text (:meth:`Rule.text`, with the thresholds it uses)
and decides (:func:`verdict`, the one function that turns figures into a
verdict, for every claim), so the text in the table cannot drift from the
decision. C4 combines the verdicts of its comparisons with :func:`joint`.

Claims are data. Each claim function returns a list of dict rows with the
keys of :data:`CLAIM_COLUMNS` and one more, ``inputs``: the :class:`Input`
objects (a :class:`Figure` and its role) the row's verdict rests on. Of the columns:

- ``key``: the row's key, ``"C1.1"``, ``"C1.2"``, … (claim and row number),
  which the inputs table refers to;
- ``claim``: ``"C1"`` … ``"C7"``;
- ``statement``: the claim as the methodology page states it (:data:`STATEMENTS`);
- ``model``: the model, with its variant in parentheses when it is not
  ``base`` (:func:`model_label`); C5 appends the replacement kind
  (``"smollm2-135m, bos:mean"``), C4 comparison rows read
  ``"<case> vs <standard>"`` and C4 depth rows
  ``"<case>: slope of c_res over layers >= 1"``. A label for people, never read back;
- ``group``: the rows that one line of a summary reads together: the model
  label, C5's with its replacement kind, and for C4 the compared (model,
  variant), whose comparison and depth rows form one group;
- ``case``: C4's architecture case (``standard``, ``ntk``, ``sliding``) as
  :func:`poslens.mechanisms.architectures.compare` recorded it (see
  :func:`label_cases`); empty for the other claims;
- ``figure_name``, ``figure``, ``ci_low``, ``ci_high``: which of the row's
  inputs this row shows, its number and interval;
- ``rule``: the rule's text (:meth:`Rule.text`), the words of the rule alone;
- ``own_verdict``: the verdict of the row's own rule on its own inputs (for a
  C4 comparison, that comparison alone);
- ``verdict``: the claim's verdict for the row (for C4 comparisons, :func:`joint` of all of them).

The inputs of every row form a second, long table (:data:`INPUT_COLUMNS`), one
row per (claim row ``key``, input): its ``name``, ``value`` and interval
(``ci_low``, ``ci_high``; NaN for a point value such as a p-value, a chance
level or a rule's threshold), its ``role`` (:data:`ROLES`: ``headline``, the
figure a one-line summary of the row quotes; ``decides``, read by the rule;
``reported``, shown but not used), and where it came from (the part's
``metric``, ``model``, ``variant``, ``intervention``, ``layer``, ``head`` and
``query_window``, the ``statistic`` taken over rows, and ``where`` in words).
The headline is always one the rule reads. :func:`evaluate` returns both
tables as :class:`Claims`; the report, the README table and the findings page
read these columns and never the rule's words.

Conventions shared by all claims:

- A claim that needs several figures (C1, C2, C3, C6) gives one row per
  figure, and all rows of one evaluation carry the same verdict, decided by
  one rule on all of them.
- Claims are evaluated per (model, variant) found in the input, except C4,
  which compares cases with each other.
- Comparisons are strict where the rule says ``>``/``<`` and inclusive where
  it says ``>=``/``<=``. A NaN figure or bound makes every comparison false,
  so it gives ``inconclusive``.
- A required row that is missing (or present more than once) raises
  ``ValueError`` naming the metric, layer, head, window and intervention.

:func:`evaluate` collects all seven into one :class:`Claims`; a claim whose input
table was not given gets one row with verdict and rule ``not measured`` (and no
inputs), and :func:`not_measured_summary` names the commands that would measure it.

Example:
    >>> C3_RULE.text().split(". ")[0]
    'supported if c_res ci_low > 0 and reduction ci_low > 0; not supported if c_res ci_high <= 0 or reduction ci_high <= 0; inconclusive otherwise'
    >>> verdict(C3_RULE, [Figure("c_res", 0.01, 0.005, 0.015), Figure("reduction", 0.3, -0.1, 0.7)])
    'inconclusive'
    >>> rows = [figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
    ...         figure_row("probe_r2", 0.6, 0.5, 0.7)]
    >>> out = evaluate(leakage=pd.DataFrame(rows), claims=["C1", "C5"])
    >>> out.table[["key", "claim", "verdict", "rule"]].to_dict("records")[-1]
    {'key': 'C5.1', 'claim': 'C5', 'verdict': 'not measured', 'rule': 'not measured'}
    >>> out.table["verdict"].tolist()
    ['supported', 'supported', 'not measured']
    >>> out.inputs.loc[out.inputs["key"] == "C1.1", ["name", "value", "ci_low", "ci_high", "role"]].values.tolist()
    [['leakage_pattern_heldout', 0.05, 0.04, 0.06, 'headline'], ['probe_r2', 0.6, 0.5, 0.7, 'decides']]
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from poslens.errors import InputError, NotFoundError
from poslens.fit.stats import depth_slope
from poslens.measurement.result import COLUMNS
from poslens.study.settings import command_line

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
#: The verdict of a claim whose figures the run did not measure.
NOT_MEASURED = "not measured"

#: The columns of the claims table, in order.
CLAIM_COLUMNS = ["key", "claim", "statement", "model", "group", "case", "figure_name", "figure", "ci_low", "ci_high", "rule",
                 "own_verdict", "verdict"]

#: The columns of the claim inputs table (one row per claims row and input), in order.
INPUT_COLUMNS = ["key", "claim", "name", "role", "value", "ci_low", "ci_high", "statistic", "metric", "model", "variant",
                 "intervention", "layer", "head", "query_window", "layer_first", "layer_last", "where"]

HEADLINE = "headline"
"""The role of the figure a one-line summary of a claims row quotes (one per row, always one the rule reads)."""
DECIDES = "decides"
"""The role of a figure (or threshold) the row's rule reads."""
REPORTED = "reported"
"""The role of a figure shown beside the verdict that the rule does not read."""
#: The roles an input can have.
ROLES = (HEADLINE, DECIDES, REPORTED)

#: The ``statistic`` of an input: how it was taken from the part's rows.
STATISTICS = ("row", "max over layers", "slope over layers", "difference", "threshold", "paired difference",
              "independent difference", "trend", "depth slope", "detectable")

#: The statement of each claim, C1–C7.
STATEMENTS = {
    "C1": "attention patterns carry absolute position",
    "C2": "the mask source exists by construction",
    "C3": "the residual source runs through position 0 and sink-reading heads",
    "C4": "NTK suppresses, sliding window accumulates, standard in between",
    "C5": "BOS replacement removes ~40% of C_res at early queries",
    "C6": "the fingerprint is constant with auto-BOS, varies otherwise",
    "C7": "later layers' absolute position depends on earlier layers' absolute logits",
}

ZERO = 0.0
"""The threshold of every sign rule (an interval must clear zero)."""

CONFIDENCE = 0.95
"""Level of the interval computed here (the C4 slope); the tables carry their own 95% intervals."""

CASES = ("standard", "ntk", "sliding")

_MODEL_AGGREGATE = dict(layer=-1, head=-1)


# --------------------------------------------------------------------------- helpers


def figure_row(
    metric: str,
    value: float,
    ci_low: float,
    ci_high: float,
    *,
    model: str = "m",
    variant: str = "base",
    intervention: str = "none",
    layer: int = -1,
    head: int = -1,
    query_window: str = "all",
) -> dict[str, Any]:
    """One tidy-table row (the columns of :data:`poslens.measurement.result.COLUMNS`), for building inputs by hand.

    Defaults: the model aggregate (layer −1, head −1) over all queries, no intervention.

    Args:
        metric: The ``metric`` column.
        value: The ``value`` column.
        ci_low: The ``ci_low`` column.
        ci_high: The ``ci_high`` column.
        model: The ``model`` column.
        variant: The ``variant`` column.
        intervention: The ``intervention`` column.
        layer: The ``layer`` column (−1: the mean over layers ≥ 1).
        head: The ``head`` column (−1: the mean over heads).
        query_window: The ``query_window`` column.

    Returns:
        ``{column: value}``.

    Example:
        >>> figure_row("c_res", 0.01, 0.0, 0.02, layer=3, query_window="early")["layer"]
        3
    """
    return dict(
        model=model,
        variant=variant,
        intervention=intervention,
        layer=layer,
        head=head,
        query_window=query_window,
        metric=metric,
        value=value,
        ci_low=ci_low,
        ci_high=ci_high,
    )


def model_label(model: str, variant: str | None) -> str:
    """The ``model`` column of a claim row: the model, and its variant in parentheses unless ``base``.

    Args:
        model: The model name.
        variant: Its variant (``None`` or ``base`` for none).

    Returns:
        The label.

    Example:
        >>> model_label("smollm2-135m", "base"), model_label("smollm2-135m", "ntk:4")
        ('smollm2-135m', 'smollm2-135m (ntk:4)')
    """
    if variant is None or (isinstance(variant, float) and np.isnan(variant)) or str(variant) in ("", "base"):
        return str(model)
    return f"{model} ({variant})"


def _table(x: Any, name: str, extra: Iterable[str] = ()) -> pd.DataFrame:
    """A tidy DataFrame from a DataFrame or a :class:`poslens.measurement.result.Result`; checks the columns."""
    table = getattr(x, "table", x)
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"{name}: expected a pandas DataFrame or a poslens Result, got {type(x).__name__}")
    missing = [c for c in [*COLUMNS, *extra] if c not in table.columns]
    if missing:
        raise ValueError(f"{name}: table lacks column(s) {missing}")
    return table


def _fmt(x: float) -> str:
    return "nan" if x is None or not np.isfinite(x) else f"{x:.4g}"


@dataclass(frozen=True)
class Figure:
    """One figure a rule reads: its name in the rule, value, interval, and where it came from.

    Attributes:
        name: The name the rule reads it by.
        value: The point value.
        ci_low: Lower end of its 95% interval (NaN for a point value).
        ci_high: Upper end of its 95% interval (NaN for a point value).
        where: Where it came from, in words (metric, layer, head, window, …), for people.
        statistic: How it was taken from the part's rows (:data:`STATISTICS`): ``row`` (one row),
            ``max over layers``, ``slope over layers``, ``difference`` (of two figures) or ``threshold`` (a rule's number).
        metric: The part's metric it was read from ("" for a threshold).
        model: The ``model`` column of its row(s).
        variant: The ``variant`` column.
        intervention: The ``intervention`` column.
        layer: Its row's layer (−1: the mean over layers ≥ 1; for ``max over layers``, the layer of the maximum), or None.
        head: Its row's head (−1: the mean over heads), or None.
        query_window: The query window of its row(s) ("" when the figure spans windows or has none).
        layer_first: For a statistic over layers, the first layer it spans.
        layer_last: For a statistic over layers, the last layer it spans.

    Example:
        >>> Figure("probe_r2", 0.6, 0.5, 0.7).text()
        'probe_r2 = 0.6 [0.5, 0.7]'
        >>> Figure("readout_p_value", 0.005, float("nan"), float("nan")).text()
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
        """The figure in words: ``name = value [ci_low, ci_high]``, or ``name = value`` for a point value (both bounds NaN).

        Returns:
            The figure in words.

        Example:
            >>> Figure("c_res", 0.01, float("nan"), 0.02).text()
            'c_res = 0.01 [nan, 0.02]'
        """
        if _isnan(self.ci_low) and _isnan(self.ci_high):
            return f"{self.name} = {_fmt(self.value)}"
        return f"{self.name} = {_fmt(self.value)} [{_fmt(self.ci_low)}, {_fmt(self.ci_high)}]"


def _isnan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x))


def _point(figure: Figure) -> Figure:
    """``figure`` as a point value (a p-value, a chance level): its interval set to NaN, as the inputs table records it."""
    return dataclasses.replace(figure, ci_low=np.nan, ci_high=np.nan)


def threshold(name: str, value: float, where: str) -> Figure:
    """A number of a rule (a target, a band) as an input: a point value with statistic ``threshold``.

    Args:
        name: Its name among the inputs.
        value: The number.
        where: What it is, in words.

    Returns:
        The figure.

    Example:
        >>> threshold("target", 0.4, "the reduction C5 expects").text()
        'target = 0.4'
    """
    return Figure(name, float(value), np.nan, np.nan, where, statistic="threshold")


@dataclass(frozen=True)
class Input:
    """One input of a claims row: a :class:`Figure` and its role (:data:`ROLES`).

    Attributes:
        figure: The figure.
        role: ``headline`` (the figure a one-line summary quotes; the rule reads it), ``decides`` (the rule reads it)
            or ``reported`` (shown, not used).

    Example:
        >>> Input(Figure("c_res", 0.01, 0.0, 0.02), "headline").record("C3.1", "C3")["role"]
        'headline'
    """

    figure: Figure
    role: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")

    def record(self, key: str, claim: str) -> dict[str, Any]:
        """The input as one row of the inputs table (:data:`INPUT_COLUMNS`).

        Args:
            key: The claims row's key.
            claim: The claim.

        Returns:
            ``{column: value}``.

        Example:
            >>> Input(Figure("r", 0.3, 0.1, 0.5, metric="reduction", layer=-1), "decides").record("C5.1", "C5")["layer"]
            -1
        """
        f = self.figure
        return dict(key=key, claim=claim, name=f.name, role=self.role, value=f.value, ci_low=f.ci_low, ci_high=f.ci_high,
                    statistic=f.statistic, metric=f.metric, model=f.model, variant=f.variant, intervention=f.intervention,
                    layer=f.layer, head=f.head, query_window=f.query_window, layer_first=f.layer_first,
                    layer_last=f.layer_last, where=f.where)


BOUNDS = ("value", "ci_low", "ci_high")
"""The numbers of a figure a condition can compare."""

_OPERATORS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


@dataclass(frozen=True)
class Bound:
    """One number of a named figure (its ``value``, ``ci_low`` or ``ci_high``), as a condition's threshold.

    Attributes:
        figure: The figure's name.
        bound: ``value``, ``ci_low`` or ``ci_high``.

    Example:
        >>> Bound("c_res (standard)", "ci_low").text(), Bound("readout_chance").text()
        ('c_res (standard) ci_low', 'readout_chance')
    """

    figure: str
    bound: str = "value"

    def __post_init__(self) -> None:
        if self.bound not in BOUNDS:
            raise ValueError(f"bound must be one of {BOUNDS}, got {self.bound!r}")

    def text(self) -> str:
        """``figure`` for its value, ``figure ci_low`` / ``figure ci_high`` for a bound of its interval.

        Returns:
            The bound in words.

        Example:
            >>> Bound("c_res", "ci_high").text()
            'c_res ci_high'
        """
        return self.figure if self.bound == "value" else f"{self.figure} {self.bound}"

    def of(self, figures: Mapping[str, Figure]) -> float:
        """This number, read from ``figures`` (keyed by name).

        Args:
            figures: The figures, by name.

        Returns:
            The number.

        Raises:
            ValueError: When the figure is not among ``figures``.

        Example:
            >>> Bound("c_res", "ci_high").of({"c_res": Figure("c_res", 0.01, 0.0, 0.02)})
            0.02
        """
        if self.figure not in figures:
            raise ValueError(f"the rule reads figure {self.figure!r}, which is not among the figures given: {list(figures)}")
        return float(getattr(figures[self.figure], self.bound))


@dataclass(frozen=True)
class Condition:
    """``figure``'s ``bound`` compared by ``op`` with ``threshold`` (a number, or a :class:`Bound` of another figure).

    The same object renders itself as text (with the threshold it uses) and
    decides whether it holds on a set of figures. A NaN on either side makes
    it false, as every comparison with NaN is. ``note`` is an explanation
    shown in parentheses after the text; it does not take part in the decision.

    Attributes:
        figure: The figure's name.
        bound: Which of its numbers is compared: ``value``, ``ci_low`` or ``ci_high``.
        op: The comparison: ``>``, ``>=``, ``<`` or ``<=``.
        threshold: A number, or a :class:`Bound` of another figure.
        note: An explanation shown after the text; not part of the decision.

    Example:
        >>> c = Condition("c_res", "ci_low", ">", 0.0)
        >>> c.text(), c.holds({"c_res": Figure("c_res", 0.01, 0.005, 0.015)})
        ('c_res ci_low > 0', True)
        >>> Condition("readout_accuracy", "ci_high", "<=", Bound("readout_chance"), note="1/K").text()
        'readout_accuracy ci_high <= readout_chance (1/K)'
    """

    figure: str
    bound: str
    op: str
    threshold: float | Bound
    note: str = ""

    def __post_init__(self) -> None:
        Bound(self.figure, self.bound)  # checks the bound's name
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
        return f"{Bound(self.figure, self.bound).text()} {self.op} {threshold}" + (f" ({self.note})" if self.note else "")

    def holds(self, figures: Mapping[str, Figure]) -> bool:
        """Whether the condition holds on ``figures`` (keyed by name); ``ValueError`` if a figure it reads is absent.

        Args:
            figures: The figures, by name.

        Returns:
            Whether it holds (false when either side is NaN).

        Example:
            >>> Condition("c_res", "ci_high", "<=", 0.0).holds({"c_res": Figure("c_res", 0.0, float("nan"), float("nan"))})
            False
        """
        left = Bound(self.figure, self.bound).of(figures)
        right = self.threshold.of(figures) if isinstance(self.threshold, Bound) else float(self.threshold)
        return bool(_OPERATORS[self.op](left, right))


@dataclass(frozen=True)
class Rule:
    """A three-way decision rule: ``supported`` if all of ``supported_if`` hold, else ``not supported`` if
    any of ``not_supported_if`` holds (all of them, for an equivalence test: ``not_supported_when="all"``),
    else ``inconclusive``.

    :meth:`text` is what the ``rule`` column says; :func:`verdict` applies the
    same object to figures, so the two cannot disagree. ``remark`` is shown after
    the rule (figures that are reported but not used, where a check lives).

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
        >>> rule.figures()
        ('c_res',)
        >>> C7_RULE.text().split("; ")[1]
        'not supported if r (all) ci_low >= -0.1 and r (all) ci_high <= 0.1 (the interval within [-0.1, 0.1]: equivalence)'
    """

    supported_if: tuple[Condition, ...]
    not_supported_if: tuple[Condition, ...]
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
            "supported if " + " and ".join(c.text() for c in self.supported_if)
            + "; not supported if " + (" or " if self.not_supported_when == "any" else " and ").join(
                c.text() for c in self.not_supported_if)
            + "; inconclusive otherwise"
        )
        return text + (f". {self.remark}" if self.remark else "")

    def figures(self) -> tuple[str, ...]:
        """The names of the figures the rule reads, in order of first use.

        Returns:
            The figure names.

        Example:
            >>> C3_RULE.figures()
            ('c_res', 'reduction')
        """
        names = []
        for c in (*self.supported_if, *self.not_supported_if):
            names += [c.figure] + ([c.threshold.figure] if isinstance(c.threshold, Bound) else [])
        return tuple(dict.fromkeys(names))


def verdict(rule: Rule, figures: Iterable[Figure]) -> str:
    """``supported``, ``not supported`` or ``inconclusive``: ``rule`` applied to ``figures`` (matched by name).

    Every claim decides through this function. A NaN in a figure a condition
    reads makes that condition false, so NaN alone never gives ``supported`` or
    ``not supported``. ``ValueError`` if two figures share a name or a figure the
    rule reads is missing.

    Args:
        rule: The rule.
        figures: The figures it reads, with distinct names.

    Returns:
        ``supported``, ``not supported`` or ``inconclusive``.

    Raises:
        ValueError: When two figures share a name, or a figure the rule reads is missing.

    Example:
        >>> rule = Rule((Condition("r", "ci_low", ">", 0.0),), (Condition("r", "ci_high", "<=", 0.0),))
        >>> [verdict(rule, [Figure("r", v, lo, hi)]) for v, lo, hi in
        ...  [(0.3, 0.1, 0.5), (-0.3, -0.5, -0.1), (0.1, -0.1, 0.3), (0.3, float("nan"), 0.5)]]
        ['supported', 'not supported', 'inconclusive', 'inconclusive']
    """
    by_name: dict[str, Figure] = {}
    for f in figures:
        if f.name in by_name:
            raise ValueError(f"two figures are named {f.name!r}; a rule reads figures by name")
        by_name[f.name] = f
    missing = [name for name in rule.figures() if name not in by_name]
    if missing:
        raise ValueError(f"the rule reads figure(s) {missing}, which are not among the figures given: {list(by_name)}")
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


def _where(**filters: Any) -> str:
    parts = []
    for key in ("metric", "layer", "head", "query_window", "intervention", "model", "variant"):
        if key in filters and filters[key] is not None:
            value = filters[key]
            label = "window" if key == "query_window" else key
            parts.append(f"{label} {value!r}" if isinstance(value, str) else f"{label} {value}")
    return ", ".join(parts)


def _select(table: pd.DataFrame, **filters: Any) -> pd.DataFrame:
    keep = np.ones(len(table), dtype=bool)
    for column, wanted in filters.items():
        if wanted is not None:
            keep &= (table[column] == wanted).to_numpy()
    return table[keep]


def _pick(table: pd.DataFrame, source: str, name: str | None = None, **filters: Any) -> Figure:
    """The single row matching ``filters``; ``ValueError`` naming the filters if there is none or several."""
    rows = _select(table, **filters)
    where = _where(**filters)
    if len(rows) == 0:
        raise ValueError(f"{source}: no row for {where}")
    if len(rows) > 1:
        raise ValueError(f"{source}: {len(rows)} rows for {where}; expected exactly one")
    row = rows.iloc[0]
    return Figure(
        name or filters["metric"], float(row["value"]), float(row["ci_low"]), float(row["ci_high"]), where,
        metric=str(row["metric"]), model=str(row["model"]), variant=str(row["variant"]),
        intervention=str(row["intervention"]), layer=int(row["layer"]), head=int(row["head"]),
        query_window=str(row["query_window"]),
    )


def _keys(table: pd.DataFrame, source: str, what: str) -> list[tuple[str, str]]:
    """The (model, variant) pairs present in ``table``, in order of appearance."""
    if len(table) == 0:
        raise ValueError(f"{source}: no rows for {what}")
    pairs = table[["model", "variant"]].drop_duplicates()
    return [(str(m), str(v)) for m, v in zip(pairs["model"], pairs["variant"])]


def _inputs(rule: Rule, figures: Iterable[Figure], headline: str, extra: Iterable[Input] = ()) -> tuple[Input, ...]:
    """The inputs of a row: each figure with its role (``headline``, else ``decides`` if ``rule`` reads it, else
    ``reported``), then ``extra``."""
    read = set(rule.figures())
    if headline not in read:
        raise ValueError(f"the headline figure {headline!r} is not one the rule reads: {sorted(read)}")
    roles = tuple(Input(f, HEADLINE if f.name == headline else DECIDES if f.name in read else REPORTED) for f in figures)
    return roles + tuple(extra)


def _row(claim: str, model: str, fig: Figure, rule: str, outcome: str, inputs: Iterable[Input], *,
         group: str | None = None, case: str | None = None, own: str | None = None) -> dict[str, Any]:
    """One claims row; ``inputs`` go with it as a field (``inputs``), ``fig`` must be one of them."""
    inputs = tuple(inputs)
    names = [i.figure.name for i in inputs]
    if len(set(names)) != len(names):
        raise ValueError(f"{claim}: two inputs share a name: {names}")
    if fig.name not in names:
        raise ValueError(f"{claim}: the row shows {fig.name!r}, which is not among its inputs {names}")
    if sum(i.role == HEADLINE for i in inputs) != 1:
        raise ValueError(f"{claim}: a row needs exactly one headline input, got {[(i.figure.name, i.role) for i in inputs]}")
    return dict(
        key="",
        claim=claim,
        statement=STATEMENTS[claim],
        model=model,
        group=model if group is None else group,
        case=case,
        figure_name=fig.name,
        figure=fig.value,
        ci_low=fig.ci_low,
        ci_high=fig.ci_high,
        rule=rule,
        own_verdict=outcome if own is None else own,
        verdict=outcome,
        inputs=inputs,
    )


def _keyed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with their keys, ``"<claim>.<n>"`` numbered from 1 per claim."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["claim"]] = counts.get(r["claim"], 0) + 1
        r["key"] = f"{r['claim']}.{counts[r['claim']]}"
    return rows


# --------------------------------------------------------------------------- C1


C1_RULE = Rule(
    supported_if=(Condition("leakage_pattern_heldout", "ci_low", ">", ZERO), Condition("probe_r2", "ci_low", ">", ZERO)),
    not_supported_if=(Condition("leakage_pattern_heldout", "ci_high", "<=", ZERO), Condition("probe_r2", "ci_high", "<=", ZERO)),
)
"""C1's rule: both intervals above zero, or either at or below it."""


def claim_c1(leakage: Any) -> list[dict[str, Any]]:
    """C1, attention patterns carry absolute position: held-out leakage and probe R².

    Figures, per (model, variant), from the rows with intervention ``none`` at
    the model aggregate (layer −1, head −1) over all queries (window ``all``):
    ``leakage_pattern_heldout`` (cross-fitted L(log a), free of the optimism of
    the extra query-bin parameters) and ``probe_r2`` (held-out ridge probe to
    log(i + 1)).

    Rule (:data:`C1_RULE`): ``supported`` if both have ci_low > 0; ``not
    supported`` if either has ci_high ≤ 0; ``inconclusive`` otherwise.

    **Choice:** two rows per model, one per figure, both with the joint verdict.

    Args:
        leakage: The leakage part (a tidy DataFrame or a :class:`~poslens.measurement.result.Result`).

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`CLAIM_COLUMNS`.

    Example:
        >>> t = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
        ...                   figure_row("probe_r2", 0.3, -0.1, 0.7)])
        >>> [r["verdict"] for r in claim_c1(t)]
        ['inconclusive', 'inconclusive']
    """
    t = _table(leakage, "leakage")
    base = dict(layer=-1, head=-1, query_window="all", intervention="none")
    rows = []
    for model, variant in _keys(_select(t, intervention="none"), "leakage", "intervention 'none'"):
        figs = [_pick(t, "leakage", metric=m, model=model, variant=variant, **base) for m in ("leakage_pattern_heldout", "probe_r2")]
        outcome = verdict(C1_RULE, figs)
        inputs = _inputs(C1_RULE, figs, "leakage_pattern_heldout")
        for f in figs:
            rows.append(_row("C1", model_label(model, variant), f, C1_RULE.text(), outcome, inputs))
    return _keyed(rows)


# --------------------------------------------------------------------------- C2


RHO_HALF = 0.5
"""C2's threshold on ρ_mask at layer 0: C_mask − C_res = (2ρ_mask − 1)·L, so ρ_mask > 1/2 ⇔ C_mask > C_res when L > 0."""

C2_RULE = Rule(
    supported_if=(
        Condition("c_mask (layer 0)", "ci_low", ">", ZERO),
        Condition("c_mask (layers >= 1)", "ci_low", ">", ZERO),
        Condition("rho_mask (layer 0)", "ci_low", ">", RHO_HALF),
    ),
    not_supported_if=(
        Condition("c_mask (layer 0)", "ci_high", "<=", ZERO),
        Condition("c_mask (layers >= 1)", "ci_high", "<=", ZERO),
        Condition("rho_mask (layer 0)", "ci_high", "<", RHO_HALF),
    ),
    remark=(
        "C_mask - C_res = (2 rho_mask - 1) L, so rho_mask > 1/2 is C_mask > C_res when L > 0, "
        "which holds when c_mask and rho_mask are both positive. c_res and count_share at layer 0 are reported, not used; "
        "the synthetic controls of methodology §4.4 are checked by the test suite (tests/test_leakage_controls.py), not by this table"
    ),
)
"""C2's rule: the mask source above zero at layer 0 and over layers ≥ 1, and ρ_mask above 1/2 at layer 0."""


def claim_c2(leakage: Any) -> list[dict[str, Any]]:
    """C2, the mask source exists by construction: C_mask > 0 at layer 0 and over layers ≥ 1, and C_mask > C_res at layer 0.

    Figures, per (model, variant), from the rows with intervention ``none``,
    head −1 (mean over heads), window ``all``:

    - ``c_mask`` at layer 0 and at layer −1 (the mean over layers ≥ 1);
    - ``c_res`` at layer 0 (reported);
    - ``rho_mask`` at layer 0: the mask's share ρ_mask of L(log a). The tables
      hold no interval for C_mask − C_res, but C_mask + C_res = L, so
      C_mask − C_res = 2·C_mask − L = (2ρ_mask − 1)·L, and with L > 0 it is
      positive exactly when ρ_mask > 1/2. When the rule says ``supported``,
      L = C_mask/ρ_mask > 0 holds as well (both positive), so ρ_mask > 1/2
      there means C_mask > C_res. The point difference c_mask − c_res is a
      reported input (``c_mask - c_res (layer 0)``, no interval);
    - ``count_share`` at layer 0 (C_count / C_mask, the count term's part of the
      mask source; reported, not used by the rule, but required).

    Rule (:data:`C2_RULE`): ``supported`` if c_mask ci_low > 0 at layer 0 and at layer −1 and
    rho_mask ci_low > 0.5 at layer 0; ``not supported`` if either c_mask has
    ci_high ≤ 0 or rho_mask has ci_high < 0.5 at layer 0; ``inconclusive``
    otherwise. The synthetic controls of methodology §4.4 (C_res = 0 for
    mask-only heads, clearly non-zero for absolute ones) are not table rows:
    the test suite checks them (``tests/test_leakage_controls.py``).

    Five rows per model (c_mask at layer 0, c_mask at layer −1, c_res,
    rho_mask and count_share at layer 0), with the joint verdict.

    Args:
        leakage: The leakage part (a tidy DataFrame or a :class:`~poslens.measurement.result.Result`).

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`CLAIM_COLUMNS`.

    Example:
        >>> t = pd.DataFrame([figure_row("c_mask", 0.02, 0.01, 0.03, layer=0),
        ...                   figure_row("c_mask", 0.01, 0.005, 0.015, layer=-1),
        ...                   figure_row("c_res", 0.002, -0.001, 0.005, layer=0),
        ...                   figure_row("rho_mask", 0.9, 0.8, 1.0, layer=0),
        ...                   figure_row("count_share", 0.9, 0.8, 1.0, layer=0)])
        >>> [r["verdict"] for r in claim_c2(t)] == ["supported"] * 5
        True
    """
    t = _table(leakage, "leakage")
    base = dict(head=-1, query_window="all", intervention="none")
    rows = []
    for model, variant in _keys(_select(t, intervention="none"), "leakage", "intervention 'none'"):
        def pick(metric: str, layer: int) -> Figure:
            label = "layer 0" if layer == 0 else "layers >= 1"
            return _pick(t, "leakage", f"{metric} ({label})", metric=metric, layer=layer, model=model, variant=variant, **base)

        mask0, mask_deep, res0, rho0, share0 = pick("c_mask", 0), pick("c_mask", -1), pick("c_res", 0), pick("rho_mask", 0), pick("count_share", 0)
        figs = (mask0, mask_deep, res0, rho0, share0)
        outcome = verdict(C2_RULE, figs)
        difference = Figure(
            "c_mask - c_res (layer 0)", mask0.value - res0.value, np.nan, np.nan,
            "c_mask (layer 0) - c_res (layer 0), a point value: the table holds no interval for it, the rule decides through rho_mask",
            statistic="difference", metric="", model=model, variant=variant, intervention="none", layer=0, head=-1,
            query_window="all",
        )
        inputs = _inputs(C2_RULE, figs, "c_mask (layer 0)", extra=(Input(difference, REPORTED),))
        for f in figs:
            rows.append(_row("C2", model_label(model, variant), f, C2_RULE.text(), outcome, inputs))
    return _keyed(rows)


# --------------------------------------------------------------------------- C3


C3_RULE = Rule(
    supported_if=(Condition("c_res", "ci_low", ">", ZERO), Condition("reduction", "ci_low", ">", ZERO)),
    not_supported_if=(Condition("c_res", "ci_high", "<=", ZERO), Condition("reduction", "ci_high", "<=", ZERO)),
    remark=(
        "r (key0), the reduction of mean L(log a) over layers >= 2 with key 0 relativized in every layer, is reported "
        "beside the ablation when the relativize part was run, not used: a null key-0 result does not refute C3 "
        "by itself (methodology §11)"
    ),
)
"""C3's rule: C_res and its reduction by sink-path ablation both above zero, or either at or below it."""


def claim_c3(leakage: Any, ablation: Any, query_window: str = "early", attribution: Any = None) -> list[dict[str, Any]]:
    """C3, the residual source runs through position 0 and sink-reading heads.

    Figures, per (model, variant) and per sink-ablation intervention found in
    ``ablation`` (rows whose intervention starts with ``sink-ablation``):

    - ``c_res`` at the model aggregate (layer −1 = mean over layers ≥ 1, head −1),
      window ``early``, intervention ``none``, from ``leakage``;
    - ``reduction`` = 1 − C_res(ablated)/C_res(baseline) at layer −1, head −1,
      window ``early``, from ``ablation``.

    Rule (:data:`C3_RULE`): ``supported`` if c_res ci_low > 0 and reduction
    ci_low > 0; ``not supported`` if c_res ci_high ≤ 0 or reduction ci_high ≤ 0;
    ``inconclusive`` otherwise.

    With ``attribution`` (the relativize part), each row also reports the causal
    figure declared for C3 (methodology §11): ``r (key0)``, the reduction of
    mean L(log a) over layers ≥ 2 with key 0 relativized in every layer, at the
    largest calibration size, window ``all`` (:func:`attribution_figure`). It is
    read beside the ablation and does not take part in the verdict: a null
    key-0 result does not refute C3 by itself.

    Two rows per (model, ablation), with the joint verdict.

    Args:
        leakage: The leakage part (a tidy DataFrame or a :class:`~poslens.measurement.result.Result`).
        ablation: The sink-ablation part.
        query_window: The window the figures are read in.
        attribution: The relativize part (:class:`~poslens.mechanisms.attribution.Attribution`, or its summary table), or None.

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`CLAIM_COLUMNS`.

    Example:
        >>> leak = pd.DataFrame([figure_row("c_res", 0.01, 0.005, 0.015, query_window="early")])
        >>> abl = pd.DataFrame([figure_row("reduction", 0.3, 0.1, 0.5, query_window="early",
        ...                                intervention="sink-ablation:0.3")])
        >>> [r["verdict"] for r in claim_c3(leak, abl)]
        ['supported', 'supported']
    """
    leak = _table(leakage, "leakage")
    abl = _table(ablation, "ablation")
    sink = abl[abl["intervention"].astype(str).str.startswith("sink-ablation")]
    summary = None if attribution is None else _attribution(attribution)[0]
    rows = []
    for model, variant in _keys(sink, "ablation", "an intervention starting with 'sink-ablation'"):
        res = _pick(leak, "leakage", metric="c_res", query_window=query_window, intervention="none", model=model, variant=variant, **_MODEL_AGGREGATE)
        causal = () if summary is None else (Input(attribution_figure(summary, model, variant, "key0"), REPORTED),)
        labels = _select(sink, model=model, variant=variant)["intervention"].drop_duplicates()
        for label in labels:
            red = _pick(abl, "ablation", metric="reduction", query_window=query_window, intervention=label,
                        model=model, variant=variant, **_MODEL_AGGREGATE)
            outcome = verdict(C3_RULE, (res, red))
            inputs = _inputs(C3_RULE, (res, red), "reduction", extra=causal)
            for f in (res, red):
                rows.append(_row("C3", model_label(model, variant), f, C3_RULE.text(), outcome, inputs))
    return _keyed(rows)


# --------------------------------------------------------------------------- C4


def _recorded_cases(cases: Iterable[Any]) -> dict[tuple[str, str], str]:
    """(model, variant) → case, from :class:`~poslens.mechanisms.architectures.Case` objects or dicts with those keys."""
    found: dict[tuple[str, str], str] = {}
    for c in cases:
        get = c.get if isinstance(c, Mapping) else lambda name, c=c: getattr(c, name, None)
        model, variant, case = get("model"), get("variant"), get("case")
        if model is None or variant is None or case is None:
            raise InputError(f"comparison: a recorded case needs a model, a variant and a case, got {c!r}")
        key = (str(model), str(variant))
        if found.get(key, case) != case:
            raise InputError(f"comparison: {key} is recorded with two cases, {found[key]!r} and {case!r}")
        found[key] = str(case)
    return found


def label_cases(comparison: Any, cases: Iterable[Any] | None = None) -> pd.DataFrame:
    """A copy of the comparison's table with a ``case`` column for :func:`claim_c4`, from the cases ``compare`` recorded.

    Each row's case is the one :func:`poslens.mechanisms.architectures.compare`
    measured its (model, variant) as: the ``case`` of the
    :class:`~poslens.mechanisms.architectures.Case` it built, recorded in the
    result's metadata (``meta["cases"]``). Nothing is read from the variant's
    name, so an NTK-trained model is an ``ntk`` case when it was compared as one.
    ``cases`` (Case objects, or dicts with ``model``, ``variant`` and ``case``)
    replaces the recorded list, e.g. for a bare table. A (model, variant) that
    no recorded case names gets ``None`` and is left out of C4.

    Args:
        comparison: The result of ``compare`` (a :class:`~poslens.measurement.result.Result`), or its tidy table with ``cases``.
        cases: The cases the table was measured as; default: the ones the result records.

    Returns:
        The labelled copy of the table.

    Raises:
        InputError: When no cases are given or recorded (and the table has no ``case`` column), or a (model, variant)
            is recorded with two cases.

    Example:
        >>> t = pd.DataFrame([figure_row("c_res", 0, 0, 0, model=m, variant=v) for m, v in
        ...     [("smollm2-135m", "base"), ("smollm2-135m", "ntk:4"), ("gemma3-270m", "base"), ("other", "base")]])
        >>> recorded = [dict(model="smollm2-135m", variant="base", case="standard"),
        ...             dict(model="smollm2-135m", variant="ntk:4", case="ntk"), dict(model="gemma3-270m", variant="base", case="sliding")]
        >>> label_cases(t, recorded)["case"].tolist()
        ['standard', 'ntk', 'sliding', None]
        >>> from poslens.measurement.result import Result
        >>> label_cases(Result(t, {"cases": recorded}))["case"].tolist()
        ['standard', 'ntk', 'sliding', None]
    """
    t = _table(comparison, "comparison").copy()
    if cases is None:
        cases = (getattr(comparison, "meta", None) or {}).get("cases")
        if cases is None:
            if "case" in t.columns:
                return t
            raise InputError(
                "comparison: no cases recorded (meta['cases'] of poslens.mechanisms.architectures.compare) and none given; "
                "pass cases=[Case(model, variant, case), ...] or rerun poslens compare"
            )
    by_key = _recorded_cases(cases)
    t["case"] = pd.Series([by_key.get((str(m), str(v))) for m, v in zip(t["model"], t["variant"])], index=t.index, dtype=object)
    return t


C4_RULES = {
    "ntk": Rule(
        supported_if=(Condition("c_res (ntk)", "ci_high", "<", Bound("c_res (standard)", "ci_low"), note="wholly below"),),
        not_supported_if=(Condition("c_res (ntk)", "ci_low", ">", Bound("c_res (standard)", "ci_high"), note="wholly above"),),
    ),
    "sliding": Rule(
        supported_if=(Condition("c_res (sliding)", "ci_low", ">", Bound("c_res (standard)", "ci_high"), note="wholly above"),),
        not_supported_if=(Condition("c_res (sliding)", "ci_high", "<", Bound("c_res (standard)", "ci_low"), note="wholly below"),),
    ),
}
"""C4's rule for one comparison with the standard case, per case: NTK wholly below, sliding wholly above.
The comparisons' verdicts are combined by :func:`joint`."""

C4_SLOPE_RULE = Rule(
    supported_if=(Condition("c_res slope per layer", "ci_low", ">", ZERO),),
    not_supported_if=(Condition("c_res slope per layer", "ci_high", "<=", ZERO),),
)
"""C4's rule on the depth slope of a sliding case (accumulation with depth): its interval above zero."""


def claim_c4(comparison: Any, query_window: str = "early") -> list[dict[str, Any]]:
    """C4, NTK suppresses, sliding window accumulates, standard in between.

    ``comparison`` is a tidy table of several (model, variant) runs with an
    extra column ``case`` ∈ {``standard``, ``ntk``, ``sliding``}, added by the
    caller (e.g. with :func:`label_cases`); rows with another case, or none, are
    ignored. There must be exactly one standard (model, variant) and at least
    one NTK and one sliding case. Only intervention ``none`` is used.

    Comparison rows, one per NTK or sliding case: ``c_res`` at the model
    aggregate (layer −1, head −1) in ``query_window`` (default ``early``),
    against the standard's. Each comparison gets the verdict of its case's rule
    (:data:`C4_RULES`): an NTK case is ``supported`` if its interval lies wholly
    below the standard's (ci_high < standard ci_low) and ``not supported`` if
    wholly above (ci_low > standard ci_high), a sliding case the other way round,
    ``inconclusive`` otherwise. Every comparison row carries the joint verdict
    (:func:`joint`): ``supported`` if every comparison is, ``not supported`` if
    any is not, ``inconclusive`` otherwise; its ``own_verdict`` says how its own
    comparison came out. A case's comparison and depth rows share its ``group``
    (the compared model label) and carry its ``case``.

    Depth rows, one per sliding case: the least-squares slope of per-layer
    ``c_res`` (head −1, same window) on the layer index over layers ≥ 1, in
    ΔR² per layer, with a 95% **delete-one-layer jackknife** interval (see
    :func:`poslens.fit.stats.depth_slope`; the layers' own intervals are not
    used, since they share sequences and are not independent). Rule on sign
    (:data:`C4_SLOPE_RULE`): ``supported`` if ci_low > 0, ``not supported`` if
    ci_high ≤ 0, ``inconclusive`` otherwise.

    Args:
        comparison: The comparison part, with a ``case`` column.
        query_window: The window the figures are read in.

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`CLAIM_COLUMNS`.

    Raises:
        ValueError: When a (model, variant) has more than one case, there is not exactly one standard,
            or an NTK or sliding case is missing.

    Example:
        >>> rows = [figure_row("c_res", v, lo, hi, model=m, variant=var, query_window="early", layer=layer)
        ...         for m, var, layer, v, lo, hi in [
        ...             ("smollm2-135m", "base", -1, 0.010, 0.008, 0.012),
        ...             ("smollm2-135m", "ntk:4", -1, 0.002, 0.001, 0.003),
        ...             ("gemma3-270m", "base", -1, 0.030, 0.020, 0.040),
        ...             ("gemma3-270m", "base", 1, 0.01, 0.0, 0.02),
        ...             ("gemma3-270m", "base", 2, 0.03, 0.02, 0.04),
        ...             ("gemma3-270m", "base", 3, 0.05, 0.04, 0.06)]]
        >>> cases = [dict(model="smollm2-135m", variant="base", case="standard"),
        ...          dict(model="smollm2-135m", variant="ntk:4", case="ntk"), dict(model="gemma3-270m", variant="base", case="sliding")]
        >>> out = claim_c4(label_cases(pd.DataFrame(rows), cases))
        >>> [(r["model"], r["verdict"]) for r in out]  # doctest: +NORMALIZE_WHITESPACE
        [('smollm2-135m (ntk:4) vs smollm2-135m', 'supported'),
         ('gemma3-270m vs smollm2-135m', 'supported'),
         ('gemma3-270m: slope of c_res over layers >= 1', 'supported')]
    """
    t = _table(comparison, "comparison", extra=("case",))
    t = t[t["case"].isin(CASES) & (t["intervention"] == "none")]
    pairs = t[["model", "variant", "case"]].drop_duplicates()
    doubled = pairs[pairs.duplicated(["model", "variant"], keep=False)]
    if len(doubled):
        raise ValueError(f"comparison: (model, variant) labelled with more than one case: {sorted(set(zip(doubled['model'], doubled['variant'])))}")
    by_case = {c: [(str(m), str(v)) for m, v in zip(sub["model"], sub["variant"])] for c, sub in pairs.groupby("case")}
    standards = by_case.get("standard", [])
    if len(standards) != 1:
        raise ValueError(f"comparison: need exactly one (model, variant) with case 'standard' and intervention 'none', found {len(standards)}")
    for needed in ("ntk", "sliding"):
        if not by_case.get(needed):
            raise ValueError(f"comparison: no rows with case {needed!r} and intervention 'none' (metric 'c_res', window {query_window!r})")

    def pick(model: str, variant: str, case: str) -> Figure:
        return _pick(t, "comparison", f"c_res ({case})", metric="c_res", query_window=query_window, intervention="none",
                     model=model, variant=variant, **_MODEL_AGGREGATE)

    std_key = standards[0]
    std = pick(*std_key, "standard")
    std_label = model_label(*std_key)
    comparisons: list[tuple[str, tuple[str, str], Figure, str]] = []
    for case in ("ntk", "sliding"):
        rule = C4_RULES[case]
        for key in by_case[case]:
            f = pick(*key, case)
            comparisons.append((case, key, f, verdict(rule, (f, std))))
    together = joint(c[3] for c in comparisons)
    rule_text = (
        f"ntk case: {C4_RULES['ntk'].text()}. sliding case: {C4_RULES['sliding'].text()}. "
        f"all comparisons together: {JOINT}"
    )
    rows = []
    for case, key, f, outcome in comparisons:
        inputs = _inputs(C4_RULES[case], (f, std), f.name)
        rows.append(_row("C4", f"{model_label(*key)} vs {std_label}", f, rule_text, together, inputs,
                         group=model_label(*key), case=case, own=outcome))

    slope_rule = (
        f"least-squares slope of per-layer c_res on the layer index over layers >= 1 (delta R^2 per layer), "
        f"{CONFIDENCE:.0%} delete-one-layer jackknife interval (t quantile, n_layers - 1 df); {C4_SLOPE_RULE.text()}"
    )
    for key in by_case["sliding"]:
        model, variant = key
        per_layer = _select(t, metric="c_res", head=-1, query_window=query_window, intervention="none", model=model, variant=variant)
        per_layer = per_layer[per_layer["layer"] >= 1]
        where = _where(metric="c_res", head=-1, query_window=query_window, intervention="none", model=model, variant=variant)
        if per_layer["layer"].duplicated().any():
            raise ValueError(f"comparison: several rows per layer for {where}")
        if len(per_layer) < 3:
            raise ValueError(f"comparison: {len(per_layer)} per-layer rows (layer >= 1) for {where}; the depth slope needs at least 3")
        per_layer = per_layer.sort_values("layer")
        s, lo, hi = depth_slope(per_layer["layer"].to_numpy(), per_layer["value"].to_numpy(), CONFIDENCE)
        first, last = int(per_layer["layer"].min()), int(per_layer["layer"].max())
        fig = Figure("c_res slope per layer", s, lo, hi, f"{where}, layers {first}..{last}", statistic="slope over layers",
                     metric="c_res", model=model, variant=variant, intervention="none", head=-1, query_window=query_window,
                     layer_first=first, layer_last=last)
        outcome = verdict(C4_SLOPE_RULE, (fig,))
        rows.append(_row("C4", f"{model_label(*key)}: slope of c_res over layers >= 1", fig, slope_rule, outcome,
                         _inputs(C4_SLOPE_RULE, (fig,), fig.name), group=model_label(*key), case="sliding"))
    return _keyed(rows)


# --------------------------------------------------------------------------- C4 by differences (methodology §9.1)


_C4_STATISTIC = {"paired": "paired difference", "independent": "independent difference", "trend": "trend",
                 "depth-slope": "depth slope"}
DEPTH_METRIC = "c_res_depth_slope"
"""The comparison table's metric for the slope of per-layer C_res over the fraction of depth l/(L−1), layers ≥ 1."""

C4_DIRECTIONS = {
    ("ntk", "paired", "c_res"): -1,
    ("ntk", "trend", "c_res"): -1,
    ("sliding", "paired", "c_res"): +1,
    ("sliding", "paired", DEPTH_METRIC): +1,
    ("sliding", "depth-slope", DEPTH_METRIC): +1,
    ("sliding", "trend", DEPTH_METRIC): -1,
    ("sliding", "independent", "c_res"): +1,
    ("sliding", "independent", DEPTH_METRIC): +1,
}
"""C4 by differences (methodology §9.1), fixed before the full run: per (case, kind, metric) of a comparison, the
direction the claim predicts. NTK lowers C_res against its base (paired), and more with α (negative trend on log2 α);
a window raises C_res and its depth slope against its base (paired), its depth slope is positive (accumulation), and
grows as W shrinks (negative trend of the depth slope on log2 W); a natively windowed model has a larger C_res and
depth slope than the standard model (independent samples). Comparisons of other (case, kind, metric) are not read."""


def c4_sign_rule(name: str, direction: int) -> Rule:
    """The rule of one C4 comparison: its interval excludes 0 in the predicted ``direction`` (supported) or the opposite one.

    Args:
        name: The figure's name.
        direction: +1 (the claim predicts a positive difference, slope or trend) or −1.

    Returns:
        The rule.

    Raises:
        ValueError: When ``direction`` is not ±1.

    Example:
        >>> c4_sign_rule("c_res (ntk:4 - base)", -1).text()
        'supported if c_res (ntk:4 - base) ci_high < 0; not supported if c_res (ntk:4 - base) ci_low > 0; inconclusive otherwise'
    """
    if direction not in (-1, 1):
        raise ValueError(f"direction must be +1 or -1, got {direction}")
    up, down = Condition(name, "ci_low", ">", ZERO), Condition(name, "ci_high", "<", ZERO)
    return Rule((up,), (down,)) if direction > 0 else Rule((down,), (up,))


def _c4_case_of(by_key: Mapping[tuple[str, str], str], row: Any) -> str | None:
    """The case a comparison row speaks for, from the cases compare recorded (a trend: its members' case)."""
    if row["kind"] == "trend":
        members = {case for (m, _), case in by_key.items() if m == row["model"] and case in ("ntk", "sliding")}
        wanted = {"log2 alpha": "ntk", "log2 window": "sliding"}.get(str(row["parameter"]))
        return wanted if wanted in members else None
    return by_key.get((str(row["model"]), str(row["variant"])))


def claim_c4_differences(comparisons: pd.DataFrame, cases: Iterable[Any], query_window: str = "all") -> list[dict[str, Any]]:
    """C4 decided by the intervals of differences, trends and depth slopes (methodology §9.1).

    ``comparisons`` is the comparison table of
    :func:`poslens.mechanisms.architectures.compare`
    (:func:`poslens.mechanisms.comparisons.comparison_table`); ``cases`` are the
    cases compare recorded (``meta["cases"]``), which give each row its case.
    Every row at the model aggregate (layer −1) in ``query_window`` whose
    (case, kind, metric) :data:`C4_DIRECTIONS` names is one comparison: NTK
    against its base (paired) and the trend over α; a window against its base
    (C_res and its depth slope, paired), its own depth slope, and the trend of
    the depth slope over W; a natively windowed model against the standard
    model (independent samples). Each comparison's rule (:func:`c4_sign_rule`):
    ``supported`` when its interval excludes 0 in the predicted direction, ``not
    supported`` when it excludes 0 in the other, ``inconclusive`` otherwise
    (``own_verdict``). Every row carries the claim's joint verdict
    (:func:`joint`) and reports how large a difference the data could have
    detected (``detectable``: two-sided 5%, 80% power) beside its figure.

    Args:
        comparisons: The comparison table.
        cases: The recorded cases (:class:`~poslens.mechanisms.architectures.Case` objects or dicts).
        query_window: The window read (C4 reads ``all``: a window of W changes nothing for queries i < W).

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`CLAIM_COLUMNS` and their ``inputs``.

    Raises:
        ValueError: When the table holds no NTK comparison or no sliding-window comparison.

    Example:
        >>> base = dict(intervention="none", query_window="all", layer=-1, head=-1, parameter="", se=0.001, df=7.0, detectable=0.003)
        >>> table = pd.DataFrame([
        ...     dict(base, model="s", variant="ntk:4", metric="c_res", value=-0.002, ci_low=-0.003, ci_high=-0.001,
        ...          comparison="ntk:4 − base", kind="paired", reference_model="s", reference_variant="base"),
        ...     dict(base, model="s", variant="window:64", metric="c_res", value=0.002, ci_low=-0.001, ci_high=0.005,
        ...          comparison="window:64 − base", kind="paired", reference_model="s", reference_variant="base")])
        >>> cases = [dict(model="s", variant="base", case="standard"), dict(model="s", variant="ntk:4", case="ntk"),
        ...          dict(model="s", variant="window:64", case="sliding")]
        >>> [(r["model"], r["own_verdict"], r["verdict"]) for r in claim_c4_differences(table, cases)]  # doctest: +NORMALIZE_WHITESPACE
        [('s (ntk:4) − s: c_res, paired', 'supported', 'inconclusive'),
         ('s (window:64) − s: c_res, paired', 'inconclusive', 'inconclusive')]
    """
    by_key = _recorded_cases(cases)
    t = comparisons[(comparisons["layer"] == -1) & (comparisons["query_window"] == query_window)]
    found: list[tuple[str, Any, Figure, Rule, tuple[Input, ...]]] = []
    for _, r in t.iterrows():
        case = _c4_case_of(by_key, r)
        if r["kind"] == "independent" and by_key.get((str(r["reference_model"]), str(r["reference_variant"]))) != "standard":
            continue  # a natively windowed (or NTK-trained) model is compared with the standard one only
        direction = C4_DIRECTIONS.get((case, str(r["kind"]), str(r["metric"])))
        if direction is None:
            continue
        name = f"{r['metric']} ({r['comparison']})"
        where = (f"comparison {r['comparison']!r} ({r['kind']}), metric {r['metric']!r}, layer -1, head -1, window "
                 f"{query_window!r}, model {r['model']!r}, variant {r['variant']!r}"
                 + (f", against model {r['reference_model']!r}, variant {r['reference_variant']!r}" if r["reference_model"] else "")
                 + (f", per unit of {r['parameter']}" if r["parameter"] else "")
                 + f"; {r['df']:g} df")
        figure = Figure(name, float(r["value"]), float(r["ci_low"]), float(r["ci_high"]), where,
                        statistic=_C4_STATISTIC[str(r["kind"])], metric=str(r["metric"]), model=str(r["model"]),
                        variant=str(r["variant"]), intervention=str(r["intervention"]), layer=-1, head=-1,
                        query_window=query_window)
        detectable = Figure(f"detectable |{name}|", float(r["detectable"]), np.nan, np.nan,
                            f"the smallest |value| this comparison would detect (two-sided 5%, 80% power): "
                            f"(t_0.975 + t_0.80) x se, se = {r['se']:.4g}, {r['df']:g} df",
                            statistic="detectable", metric=str(r["metric"]), model=str(r["model"]), variant=str(r["variant"]),
                            intervention=str(r["intervention"]), layer=-1, head=-1, query_window=query_window)
        rule = c4_sign_rule(name, direction)
        found.append((case, r, figure, rule, _inputs(rule, (figure,), name, extra=(Input(detectable, REPORTED),))))
    for needed in ("ntk", "sliding"):
        if not any(case == needed for case, *_ in found):
            raise ValueError(f"comparison table: no {needed} comparison C4 reads (layer -1, window {query_window!r}); "
                             f"rerun poslens compare with {needed} cases")
    outcomes = [verdict(rule, (figure,)) for _, _, figure, rule, _ in found]
    together = joint(outcomes)
    rows = []
    for (case, r, figure, rule, inputs), outcome in zip(found, outcomes):
        kind = str(r["kind"])
        subject = model_label(str(r["model"]), str(r["variant"]))
        if kind in ("paired", "independent"):
            label = f"{subject} − {model_label(str(r['reference_model']), str(r['reference_variant']))}: {r['metric']}, {kind}"
        elif kind == "trend":
            subject = f"{r['model']}, {case} cases"
            label = f"{subject}: trend of {r['metric']} on {r['parameter']}"
        else:
            label = f"{subject}: {r['metric']}"
        rules = f"this comparison: {rule.text()}. all comparisons together: {JOINT}"
        rows.append(_row("C4", label, figure, rules, together, inputs, group=subject, case=case, own=outcome))
    return _keyed(rows)


# --------------------------------------------------------------------------- C5


def c5_rule(target: float = 0.4, band: float = 0.1) -> Rule:
    """C5's rule on one reduction: its interval holds ``target`` and lies above zero, or lies outside target ± band.

    Args:
        target: The reduction C5 expects.
        band: Half-width of the band around ``target`` outside which C5 is not supported.

    Returns:
        The rule.

    Raises:
        ValueError: When ``band`` is negative.

    Example:
        >>> c5_rule().text()  # doctest: +NORMALIZE_WHITESPACE
        'supported if reduction ci_low <= 0.4 and reduction ci_high >= 0.4 and reduction ci_low > 0;
         not supported if reduction ci_high < 0.3 (target 0.4 - band 0.1) or reduction ci_low > 0.5
         (target 0.4 + band 0.1); inconclusive otherwise'
    """
    if not band >= 0:
        raise ValueError(f"band must be >= 0, got {band}")
    return Rule(
        supported_if=(
            Condition("reduction", "ci_low", "<=", target),
            Condition("reduction", "ci_high", ">=", target),
            Condition("reduction", "ci_low", ">", ZERO),
        ),
        not_supported_if=(
            Condition("reduction", "ci_high", "<", target - band, note=f"target {target:g} - band {band:g}"),
            Condition("reduction", "ci_low", ">", target + band, note=f"target {target:g} + band {band:g}"),
        ),
    )


def claim_c5(bos_swap: Any, target: float = 0.4, band: float = 0.1, query_window: str = "early") -> list[dict[str, Any]]:
    """C5, BOS replacement removes about 40% of C_res at early queries.

    Figures, per (model, variant) and per replacement kind (intervention
    starting with ``bos:``, e.g. ``bos:mean``, ``bos:zero``, ``bos:noise``,
    ``bos:token:…``): ``reduction`` = 1 − C_res(after)/C_res(before) at the
    model aggregate (layer −1, head −1), window ``early``. One row per kind,
    each with its own verdict.

    Rule (:func:`c5_rule`): ``supported`` if ci_low ≤ target ≤ ci_high and
    ci_low > 0; ``not supported`` if ci_high < target − band or
    ci_low > target + band; ``inconclusive`` otherwise (default target 0.4,
    band 0.1).

    Args:
        bos_swap: The BOS-replacement part.
        target: The reduction C5 expects.
        band: Half-width of the band around ``target``.
        query_window: The window the figures are read in.

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`CLAIM_COLUMNS`.

    Example:
        >>> t = pd.DataFrame([figure_row("reduction", v, lo, hi, intervention=k, query_window="early")
        ...                   for k, v, lo, hi in [("bos:mean", 0.4, 0.35, 0.45), ("bos:zero", 0.1, 0.05, 0.15),
        ...                                        ("bos:noise", 0.6, 0.45, 0.75)]])
        >>> [(r["model"], r["verdict"]) for r in claim_c5(t)]
        [('m, bos:mean', 'supported'), ('m, bos:noise', 'inconclusive'), ('m, bos:zero', 'not supported')]
    """
    rule = c5_rule(target, band)
    target_fig = threshold("target", target, "the reduction C5 expects")
    band_fig = threshold("band", band, "half-width of the band around the target outside which C5 is not supported")
    t = _table(bos_swap, "bos_swap")
    swaps = t[t["intervention"].astype(str).str.startswith("bos:")]
    rows = []
    for model, variant in _keys(swaps, "bos_swap", "an intervention starting with 'bos:'"):
        kinds = sorted(_select(swaps, model=model, variant=variant)["intervention"].astype(str).unique())
        for kind in kinds:
            f = _pick(t, "bos_swap", metric="reduction", query_window=query_window, intervention=kind,
                      model=model, variant=variant, **_MODEL_AGGREGATE)
            inputs = _inputs(rule, (f,), "reduction", extra=(Input(target_fig, DECIDES), Input(band_fig, DECIDES)))
            rows.append(_row("C5", f"{model_label(model, variant)}, {kind}", f, rule.text(), verdict(rule, (f,)), inputs))
    return _keyed(rows)


# --------------------------------------------------------------------------- C6


def _readout_chance(t: pd.DataFrame, model: str, variant: str) -> tuple[Figure, int]:
    """The ``readout_chance`` row and its K; ``ValueError`` unless the value is 1/K for an integer K ≥ 2."""
    chance = _pick(t, "fingerprint", metric="readout_chance", layer=-1, head=-1, intervention="position0:varied", model=model, variant=variant)
    k = round(1.0 / chance.value) if np.isfinite(chance.value) and 0.0 < chance.value <= 0.5 else 0
    if k < 2 or abs(chance.value - 1.0 / k) > 1e-6:  # float32 round trips keep 1/K to ~1e-8
        raise ValueError(
            f"fingerprint: readout_chance = {_fmt(chance.value)} for {chance.where} is not 1/K for K >= 2 position-0 tokens; "
            "a readout whose accuracy cannot exceed chance by design (one class, or a majority-class chance level from an "
            "earlier fingerprint) cannot be judged: rerun poslens.mechanisms.fingerprint.fingerprint"
        )
    return chance, k


def c6_rule(tolerance: float = 1e-5, alpha: float = 0.05) -> Rule:
    """C6's rule on the fingerprint: BOS dispersion within ``tolerance``, no-BOS dispersion above zero, readout above chance.

    ``readout_chance`` is 1/K for K position-0 tokens; ``readout_p_value`` is
    the label-permutation test's p-value, judged at level ``alpha``.

    Args:
        tolerance: The largest BOS dispersion that counts as constant.
        alpha: The level of the readout's permutation test.

    Returns:
        The rule.

    Raises:
        ValueError: When ``alpha`` is not in (0, 1).

    Example:
        >>> [c.text() for c in c6_rule(tolerance=1e-6, alpha=0.01).supported_if]  # doctest: +NORMALIZE_WHITESPACE
        ['max dispersion (bos) <= 1e-06 (tolerance, at every layer)', 'dispersion (none) ci_low > 0',
         'readout_accuracy ci_low > readout_chance (1/K)', 'readout_p_value <= 0.01 (label-permutation test)']
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    bos, none, accuracy, chance = "max dispersion (bos)", "dispersion (none)", "readout_accuracy", Bound("readout_chance")
    return Rule(
        supported_if=(
            Condition(bos, "value", "<=", tolerance, note="tolerance, at every layer"),
            Condition(none, "ci_low", ">", ZERO),
            Condition(accuracy, "ci_low", ">", chance, note="1/K"),
            Condition("readout_p_value", "value", "<=", alpha, note="label-permutation test"),
        ),
        not_supported_if=(
            Condition(bos, "value", ">", tolerance, note="at some layer"),
            Condition(none, "ci_high", "<=", ZERO),
            Condition(accuracy, "ci_high", "<=", chance, note="1/K"),
        ),
        remark="dispersion (none) is the mean over layers >= 1; readout_accuracy reads all sink-reading heads together",
    )


def claim_c6(fingerprint: Any, tolerance: float = 1e-5, alpha: float = 0.05) -> list[dict[str, Any]]:
    """C6, the position-0 fingerprint is constant with auto-BOS and varies otherwise.

    Figures, per (model, variant), from rows with head −1 (any query window,
    but one row per layer):

    - ``dispersion`` with intervention ``position0:bos``, per layer ≥ 0: the
      maximum over layers of its value (row: that maximum, with that layer's
      interval);
    - ``dispersion`` with intervention ``position0:none`` at layer −1 (mean over
      layers ≥ 1);
    - ``readout_accuracy`` with intervention ``position0:varied`` at layer −1
      (all sink-reading heads read together), judged against
      ``readout_chance`` = 1/K (which must be 1/K for an integer K ≥ 2, else
      ``ValueError``: a chance level of 0, or a one-class readout, is never
      judged) and against the label-permutation null: ``readout_p_value`` and
      ``readout_chance_permuted`` (its mean and central 95% range, quoted).

    Rule (:func:`c6_rule`): ``supported`` if the maximum bos dispersion ≤ tolerance and the none
    dispersion has ci_low > 0 and readout accuracy has ci_low > 1/K and the
    permutation p-value ≤ alpha (default 0.05: the accuracy lies above the
    null's 1 − alpha quantile); ``not supported`` if the bos dispersion exceeds
    the tolerance at some layer, or the none dispersion has ci_high ≤ 0, or
    readout accuracy has ci_high ≤ 1/K; ``inconclusive`` otherwise (including
    an accuracy interval above 1/K that the permutation null does not confirm:
    the fold interval rests on few folds, the null on the same design).

    Three rows per model (bos dispersion maximum, none dispersion, readout
    accuracy), with the joint verdict.

    Args:
        fingerprint: The fingerprint part.
        tolerance: The largest BOS dispersion that counts as constant.
        alpha: The level of the readout's permutation test.

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`CLAIM_COLUMNS`.

    Raises:
        ValueError: When a model's fingerprint has no per-layer rows, or several rows per layer.

    Example:
        >>> t = pd.DataFrame([figure_row("dispersion", 0.0, 0.0, 0.0, intervention="position0:bos", layer=l) for l in (0, 1)]
        ...                  + [figure_row("dispersion", 0.2, 0.1, 0.3, intervention="position0:none"),
        ...                     figure_row("readout_accuracy", 0.9, 0.8, 1.0, intervention="position0:varied"),
        ...                     figure_row("readout_chance", 0.125, 0.125, 0.125, intervention="position0:varied"),
        ...                     figure_row("readout_chance_permuted", 0.125, 0.09, 0.16, intervention="position0:varied"),
        ...                     figure_row("readout_p_value", 0.005, 0.005, 0.005, intervention="position0:varied")])
        >>> {r["verdict"] for r in claim_c6(t)}
        {'supported'}
    """
    rule = c6_rule(tolerance, alpha)
    t = _table(fingerprint, "fingerprint")
    t = t[t["head"] == -1]
    rows = []
    present = t[t["intervention"].astype(str).isin(["position0:bos", "position0:none", "position0:varied"])]
    for model, variant in _keys(present, "fingerprint", "interventions 'position0:bos', 'position0:none' or 'position0:varied' with head -1"):
        bos = _select(t, metric="dispersion", intervention="position0:bos", model=model, variant=variant)
        bos = bos[bos["layer"] >= 0]
        where = _where(metric="dispersion", head=-1, intervention="position0:bos", model=model, variant=variant)
        if len(bos) == 0:
            raise ValueError(f"fingerprint: no per-layer rows (layer >= 0) for {where}")
        if bos["layer"].duplicated().any():
            raise ValueError(f"fingerprint: several rows per layer for {where}")
        values = bos["value"].to_numpy(dtype=float)
        top = int(np.nanargmax(values)) if np.isfinite(values).any() else 0
        bos_max = float(np.max(values))  # NaN if any layer is NaN: then neither side of the rule holds
        top_row = bos.iloc[top]
        first, last = int(bos["layer"].min()), int(bos["layer"].max())
        bos_fig = Figure(
            "max dispersion (bos)", bos_max, float(top_row["ci_low"]), float(top_row["ci_high"]),
            f"maximum over layers {first}..{last} of {where} (at layer {int(top_row['layer'])})",
            statistic="max over layers", metric="dispersion", model=model, variant=variant, intervention="position0:bos",
            layer=int(top_row["layer"]), head=-1, layer_first=first, layer_last=last,
        )
        none = _pick(t, "fingerprint", "dispersion (none)", metric="dispersion", layer=-1, head=-1,
                     intervention="position0:none", model=model, variant=variant)
        varied = dict(layer=-1, head=-1, intervention="position0:varied", model=model, variant=variant)
        acc = _pick(t, "fingerprint", metric="readout_accuracy", **varied)
        chance, k = _readout_chance(t, model, variant)
        null = _pick(t, "fingerprint", "readout_chance_permuted (null mean, central 95%)", metric="readout_chance_permuted", **varied)
        p_value = _pick(t, "fingerprint", metric="readout_p_value", **varied)
        chance = dataclasses.replace(_point(chance), where=f"{chance.where} (1/K, K = {k} position-0 tokens)")
        p_value = _point(p_value)
        outcome = verdict(rule, (bos_fig, none, acc, chance, p_value))
        inputs = _inputs(rule, (bos_fig, none, acc, chance, p_value, null), "dispersion (none)")
        for f in (bos_fig, none, acc):
            rows.append(_row("C6", model_label(model, variant), f, rule.text(), outcome, inputs))
    return _keyed(rows)


# --------------------------------------------------------------------------- C7


R_METRIC = "reduction_ge2"
"""The relativize part's summary metric: r = 1 − mean over layers ≥ 2 of L(log a) edited / unedited (methodology §11)."""

SUMMARY_COLUMNS = ("model", "variant", "mode", "calibration_size", "metric", "query_window", "value", "ci_low", "ci_high")
"""The columns of the relativize part's summary table that C3 and C7 read."""

C7_MARGIN = 0.10
"""C7's margin on r: supported above it, not supported (equivalence) within ±it; fixed before the full run."""

C7_RULE = Rule(
    supported_if=(Condition("r (all)", "ci_low", ">", C7_MARGIN),),
    not_supported_if=(
        Condition("r (all)", "ci_low", ">=", -C7_MARGIN),
        Condition("r (all)", "ci_high", "<=", C7_MARGIN, note=f"the interval within [{-C7_MARGIN:g}, {C7_MARGIN:g}]: equivalence"),
    ),
    not_supported_when="all",
    remark=(
        "r (all) = 1 - mean over layers >= 2 of L(log a) with every layer's absolute logits relativized in every column "
        "(each layer measured with exactly the layers below it edited) / unedited, on the same tokens, at the largest "
        "calibration size; r at the other calibration sizes, the matched-norm relative placebo and the change in "
        "next-token loss are reported, not used"
    ),
)
"""C7's rule: r's interval above the margin, or (equivalence) wholly within ±margin."""


def _attribution(x: Any) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The relativize part's summary table (checked) and its loss table (None when absent)."""
    summary = getattr(x, "summary", x)
    if not isinstance(summary, pd.DataFrame):
        raise TypeError(f"attribution: expected an Attribution or its summary DataFrame, got {type(x).__name__}")
    missing = [c for c in SUMMARY_COLUMNS if c not in summary.columns]
    if missing:
        raise ValueError(f"attribution: summary table lacks column(s) {missing}")
    loss = getattr(x, "loss", None)
    needed = ("model", "variant", "edit", "query_bin", "metric", "value", "ci_low", "ci_high")
    if not isinstance(loss, pd.DataFrame) or loss.empty or any(c not in loss.columns for c in needed):
        loss = None
    return summary, loss


def attribution_figure(summary: pd.DataFrame, model: str, variant: str, mode: str, query_window: str = "all",
                       calibration_size: int | None = None) -> Figure:
    """r of one relativization mode (or placebo) from the relativize part's summary, as a claim's input.

    Args:
        summary: The summary table (:data:`SUMMARY_COLUMNS`).
        model: The model.
        variant: Its variant.
        mode: ``all``, ``key0``, ``all-but-key0`` or ``placebo:<mode>``.
        query_window: The window.
        calibration_size: The calibration size; default: the largest one there is for this mode.

    Returns:
        The figure, named ``r (<mode>)`` (with the calibration size when one is asked for).

    Raises:
        ValueError: When the summary has no such row, or several.

    Example:
        >>> s = pd.DataFrame([dict(model="m", variant="base", mode="all", calibration_size=n, metric="reduction_ge2",
        ...                        query_window="all", value=v, ci_low=v - 0.1, ci_high=v + 0.1) for n, v in [(8, 0.3), (16, 0.25)]])
        >>> attribution_figure(s, "m", "base", "all").text(), attribution_figure(s, "m", "base", "all", calibration_size=8).name
        ('r (all) = 0.25 [0.15, 0.35]', 'r (all, calibration size 8)')
    """
    where = _where(metric=R_METRIC, query_window=query_window, model=model, variant=variant) + f", mode {mode!r}"
    rows = _select(summary, metric=R_METRIC, mode=mode, query_window=query_window, model=model, variant=variant)
    if len(rows) == 0:
        raise ValueError(f"attribution: no row for {where}")
    size = int(rows["calibration_size"].max()) if calibration_size is None else int(calibration_size)
    rows = rows[rows["calibration_size"] == size]
    if len(rows) != 1:
        raise ValueError(f"attribution: {len(rows)} rows for {where}, calibration size {size}; expected exactly one")
    row = rows.iloc[0]
    name = f"r ({mode})" if calibration_size is None else f"r ({mode}, calibration size {size})"
    edit = mode if mode.startswith("placebo") else f"relativize:{mode}"
    return Figure(
        name, float(row["value"]), float(row["ci_low"]), float(row["ci_high"]),
        f"{where}, calibration size {size}: 1 - mean over layers >= 2 of L(log a) edited / unedited, paired jackknife",
        metric=R_METRIC, model=str(model), variant=str(variant), intervention=edit, head=-1, query_window=query_window,
        layer_first=2,
    )


def _loss_figure(loss: pd.DataFrame, model: str, variant: str, edit: str) -> Figure | None:
    """The change in next-token loss over all positions ≥ 1 under ``edit``, or None when the table has none."""
    rows = _select(loss, metric="loss_change", edit=edit, query_bin=-1, model=model, variant=variant)
    if len(rows) != 1:
        return None
    row = rows.iloc[0]
    return Figure(f"loss_change ({edit})", float(row["value"]), float(row["ci_low"]), float(row["ci_high"]),
                  f"metric 'loss_change' (nats per token, edited - unedited), edit {edit!r}, positions >= 1, "
                  f"model {model!r}, variant {variant!r}, paired jackknife",
                  metric="loss_change", model=str(model), variant=str(variant), intervention=edit, query_window="all")


def claim_c7(attribution: Any) -> list[dict[str, Any]]:
    """C7, later layers' absolute position depends on earlier layers' absolute logits (methodology §11).

    Figure, per (model, variant) of the relativize part's summary: ``r (all)``,
    the reduction of mean L(log a) over layers ≥ 2 under the cumulative "every
    column" edit (each layer measured with exactly the layers below it
    relativized), window ``all``, at the largest calibration size
    (:func:`attribution_figure`).

    Rule (:data:`C7_RULE`, margin :data:`C7_MARGIN` = 0.10, fixed before the
    full run): ``supported`` if r's ci_low > 0.10; ``not supported`` if its
    interval lies within [−0.10, 0.10] (an equivalence test: ci_low ≥ −0.10 and
    ci_high ≤ 0.10); ``inconclusive`` otherwise.

    Reported beside it, not used: r at every other calibration size (the
    calibration's own noise), ``r (placebo:all)`` (the matched-norm, purely
    relative placebo), and the change in next-token loss under the edit and the
    placebo, when the part measured them.

    One row per (model, variant).

    Args:
        attribution: The relativize part (:class:`~poslens.mechanisms.attribution.Attribution`, or its summary table).

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`CLAIM_COLUMNS` and their ``inputs``.

    Raises:
        ValueError: When the summary has no ``all`` row for a model, or several.

    Example:
        >>> s = pd.DataFrame([dict(model="m", variant="base", mode=mode, calibration_size=16, metric="reduction_ge2",
        ...                        query_window="all", value=v, ci_low=lo, ci_high=hi)
        ...                   for mode, v, lo, hi in [("all", 0.05, -0.02, 0.08), ("placebo:all", 0.01, -0.03, 0.05)]])
        >>> [(r["model"], r["verdict"], r["figure"]) for r in claim_c7(s)]
        [('m', 'not supported', 0.05)]
    """
    summary, loss = _attribution(attribution)
    present = _select(summary, metric=R_METRIC, mode="all")
    rows = []
    for model, variant in _keys(present, "attribution", f"metric {R_METRIC!r} with mode 'all'"):
        r_all = attribution_figure(summary, model, variant, "all")
        mine = _select(summary, metric=R_METRIC, mode="all", query_window="all", model=model, variant=variant)
        others = sorted({int(n) for n in mine["calibration_size"]} - {int(mine["calibration_size"].max())})
        reported = [attribution_figure(summary, model, variant, "all", calibration_size=n) for n in others]
        if len(_select(summary, metric=R_METRIC, mode="placebo:all", query_window="all", model=model, variant=variant)):
            reported.append(attribution_figure(summary, model, variant, "placebo:all"))
        if loss is not None:
            reported += [f for f in (_loss_figure(loss, model, variant, e) for e in ("relativize:all", "placebo:all")) if f]
        outcome = verdict(C7_RULE, (r_all,))
        inputs = _inputs(C7_RULE, (r_all, *reported), r_all.name)
        rows.append(_row("C7", model_label(model, variant), r_all, C7_RULE.text(), outcome, inputs))
    return _keyed(rows)


# --------------------------------------------------------------------------- all


MEASURED_BY = {
    "C1": ("leakage",),
    "C2": ("leakage",),
    "C3": ("leakage", "ablate-sinks"),
    "C4": ("compare",),
    "C5": ("bos-swap",),
    "C6": ("fingerprint",),
    "C7": ("relativize",),
}
"""The ``poslens`` commands (and parts) whose tables each claim reads (C3 also reads ``relativize`` when it was run)."""


def _not_measured(claim: str) -> dict[str, Any]:
    return dict(key=f"{claim}.1", claim=claim, statement=STATEMENTS[claim], model=None, group=None, case=None, figure_name=None,
                figure=np.nan, ci_low=np.nan, ci_high=np.nan, rule=NOT_MEASURED, own_verdict=NOT_MEASURED,
                verdict=NOT_MEASURED, inputs=())


CLAIMS_FILE = "claims.csv"
"""The file the claims table is written to, in a study's folder."""
INPUTS_FILE = "claim_inputs.csv"
"""The file the claims' inputs table is written to, beside :data:`CLAIMS_FILE`."""

_INTEGER_INPUTS = ("layer", "head", "layer_first", "layer_last")


def _typed(table: pd.DataFrame, inputs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    table = table.astype({"figure": float, "ci_low": float, "ci_high": float})
    inputs = inputs.astype({"value": float, "ci_low": float, "ci_high": float, **{c: "Int64" for c in _INTEGER_INPUTS}})
    return table, inputs


@dataclass(frozen=True)
class Claims:
    """The verdicts of the claims and the inputs they rest on: two tidy tables joined on ``key``.

    Attributes:
        table: One row per verdict, the columns :data:`CLAIM_COLUMNS`.
        inputs: One row per (claims row, input), the columns :data:`INPUT_COLUMNS`.

    Example:
        >>> leakage = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06), figure_row("probe_r2", 0.6, 0.5, 0.7)])
        >>> claims = evaluate(leakage=leakage, claims=["C1"])
        >>> claims.inputs_of("C1.2")[["name", "role"]].values.tolist()
        [['leakage_pattern_heldout', 'headline'], ['probe_r2', 'decides']]
        >>> float(claims.headline("C1.2")["value"])
        0.05
    """

    table: pd.DataFrame
    inputs: pd.DataFrame

    def __post_init__(self) -> None:
        for name, frame, columns in (("claims table", self.table, CLAIM_COLUMNS), ("inputs table", self.inputs, INPUT_COLUMNS)):
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise InputError(f"the {name} lacks column(s) {missing} (written by an older poslens? rerun poslens claims)")
        strays = sorted(set(self.inputs["key"]) - set(self.table["key"]))
        if strays:
            raise InputError(f"the inputs table names claims rows that are not in the claims table: {strays}")

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> Claims:
        """Both tables from claims rows (the dicts the claim functions return, each with its ``inputs`` field).

        Args:
            rows: The rows, with distinct keys.

        Returns:
            The claims.

        Raises:
            ValueError: When two rows share a key.

        Example:
            >>> Claims.from_rows(claim_c1(pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
            ...                                         figure_row("probe_r2", 0.6, 0.5, 0.7)]))).inputs.shape
            (4, 18)
        """
        rows = list(rows)
        keys = [r["key"] for r in rows]
        if len(set(keys)) != len(keys):
            raise ValueError(f"claims rows share a key: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
        table = pd.DataFrame([{c: r[c] for c in CLAIM_COLUMNS} for r in rows], columns=CLAIM_COLUMNS)
        inputs = pd.DataFrame([i.record(r["key"], r["claim"]) for r in rows for i in r["inputs"]], columns=INPUT_COLUMNS)
        return cls(*_typed(table, inputs))

    @classmethod
    def read(cls, folder: str | Path) -> Claims:
        """The claims a study wrote into ``folder`` (:data:`CLAIMS_FILE` and :data:`INPUTS_FILE`).

        Args:
            folder: The study's folder.

        Returns:
            The claims.

        Raises:
            NotFoundError: When either file is missing.
            InputError: When a file lacks a column (an older poslens wrote it).

        Example:
            >>> import tempfile
            >>> folder = Path(tempfile.mkdtemp())
            >>> written = evaluate(leakage=pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
            ...                                          figure_row("probe_r2", 0.6, 0.5, 0.7)]), claims=["C1", "C5"])
            >>> _ = written.table.to_csv(folder / CLAIMS_FILE, index=False); _ = written.inputs.to_csv(folder / INPUTS_FILE, index=False)
            >>> back = Claims.read(folder)
            >>> back.table["verdict"].tolist(), back.inputs["layer"].tolist()
            (['supported', 'supported', 'not measured'], [-1, -1, -1, -1])
        """
        folder = Path(folder)
        for name in (CLAIMS_FILE, INPUTS_FILE):
            if not (folder / name).exists():
                raise NotFoundError(f"{folder / name} is missing; run poslens claims --out {folder}")
        text = {c: "string" for c in ("key", "claim", "statement", "model", "group", "case", "figure_name", "rule",
                                       "own_verdict", "verdict")}
        table = pd.read_csv(folder / CLAIMS_FILE, dtype=text, keep_default_na=False, na_values={
            c: [""] for c in CLAIM_COLUMNS})
        inputs = pd.read_csv(folder / INPUTS_FILE, keep_default_na=False, na_values={c: [""] for c in INPUT_COLUMNS}, dtype={
            c: "string" for c in ("key", "claim", "name", "role", "statistic", "metric", "model", "variant", "intervention",
                                  "query_window", "where")})
        for frame in (table, inputs):
            for column in frame.columns:
                if frame[column].dtype == "string":
                    frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
        for frame, columns in ((table, ("figure", "ci_low", "ci_high")), (inputs, ("value", "ci_low", "ci_high"))):
            for column in columns:
                frame[column] = pd.to_numeric(frame[column].replace({"nan": np.nan}))
        for column in ("metric", "model", "variant", "intervention", "query_window", "where"):
            inputs[column] = inputs[column].fillna("")
        return cls(*_typed(table, inputs))

    def inputs_of(self, key: str) -> pd.DataFrame:
        """The inputs of one claims row, in the order its claim gave them.

        Args:
            key: The row's key.

        Returns:
            Its rows of :attr:`inputs` (none for a claim not measured).

        Example:
            >>> len(evaluate(claims=["C3"]).inputs_of("C3.1"))
            0
        """
        return self.inputs[self.inputs["key"] == key]

    def headline(self, key: str) -> pd.Series | None:
        """The headline input of one claims row (role ``headline``), or None for a row without inputs.

        Args:
            key: The row's key.

        Returns:
            The input's row, or None.

        Example:
            >>> evaluate(claims=["C3"]).headline("C3.1") is None
            True
        """
        rows = self.inputs_of(key)
        rows = rows[rows["role"] == HEADLINE]
        return rows.iloc[0] if len(rows) else None


def not_measured_summary(table: pd.DataFrame | Claims, out: Any = "DIR", present: Iterable[str] = (),
                         settings: dict[str, Any] | None = None) -> str:
    """One line naming the claims of ``table`` that were not measured and the commands that would measure them.

    ``present`` names the parts already in ``out``: their commands are not
    suggested again (a claim whose parts are all present, say C3 when no head
    reads the sink, names all of them). ``settings`` (the parts' recorded
    settings) are spelled out in each command, so that it agrees with the parts
    already there (:func:`poslens.study.settings.command_line`). Empty when every
    claim was measured.

    Args:
        table: The claims (a :class:`Claims`, or its claims table).
        out: The study folder the commands write to.
        present: The parts already in ``out``.
        settings: The study's settings, for the commands' options.

    Returns:
        The line (empty when every claim was measured).

    Example:
        >>> leakage = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06), figure_row("probe_r2", 0.6, 0.5, 0.7)])
        >>> table = evaluate(leakage=leakage, claims=["C1", "C3", "C6"])
        >>> not_measured_summary(table, "results/quick", present=["leakage"])
        'not measured: C3 (run: poslens ablate-sinks --out results/quick), C6 (run: poslens fingerprint --out results/quick)'
        >>> not_measured_summary(table, "A", present=["leakage"], settings={"n_seqs": 4, "groups": 2})
        'not measured: C3 (run: poslens ablate-sinks --n-seqs 4 --groups 2 --out A), C6 (run: poslens fingerprint --n-seqs 4 --groups 2 --out A)'
        >>> not_measured_summary(table.table[table.table["claim"] == "C1"])
        ''
    """
    table = table.table if isinstance(table, Claims) else table
    present = set(present)
    pieces = []
    for claim in dict.fromkeys(table.loc[table["verdict"] == NOT_MEASURED, "claim"]):
        commands = [c for c in MEASURED_BY[claim] if c not in present] or list(MEASURED_BY[claim])
        pieces.append(f"{claim} (run: " + ", ".join(command_line(c, settings or {}, out) for c in commands) + ")")
    return "not measured: " + ", ".join(pieces) if pieces else ""


def _c4(comparison: Any, query_window: str, comparisons: pd.DataFrame | None) -> list[dict[str, Any]]:
    """C4 by differences when the comparison table holds rows, else by the intervals of the cases themselves."""
    if comparisons is None or len(comparisons) == 0:
        return claim_c4(comparison, query_window)
    cases = (getattr(comparison, "meta", None) or {}).get("cases")
    if cases is None:
        t = _table(comparison, "comparison", extra=("case",))
        pairs = t[["model", "variant", "case"]].drop_duplicates()
        cases = [dict(model=m, variant=v, case=c) for m, v, c in zip(pairs["model"], pairs["variant"], pairs["case"]) if c in CASES]
    return claim_c4_differences(comparisons, cases, query_window)


def evaluate(
    leakage: Any = None,
    ablation: Any = None,
    bos_swap: Any = None,
    comparison: Any = None,
    fingerprint: Any = None,
    attribution: Any = None,
    *,
    claims: Iterable[str] = tuple(STATEMENTS),
    c4_window: str = "early",
    c4_comparisons: pd.DataFrame | None = None,
    c5_target: float = 0.4,
    c5_band: float = 0.1,
    c6_tolerance: float = 1e-5,
    c6_alpha: float = 0.05,
) -> pd.DataFrame:
    """All claims' verdicts and their inputs: the claims table (:data:`CLAIM_COLUMNS`) and the inputs table (:data:`INPUT_COLUMNS`).

    Inputs are tidy DataFrames or :class:`poslens.measurement.result.Result` objects:
    ``leakage`` (C1, C2, C3), ``ablation`` (C3), ``bos_swap`` (C5),
    ``comparison`` (C4, with a ``case`` column, see :func:`label_cases`),
    ``fingerprint`` (C6) and ``attribution`` (C7; C3 reports its causal figure from it). A claim whose inputs were not all given gets one row
    with verdict and rule ``not measured`` (:data:`NOT_MEASURED`). ``claims`` limits
    which claims are evaluated at all (the others are left out of the table).
    ``c6_tolerance`` and ``c6_alpha`` pass to :func:`claim_c6` (BOS dispersion
    bound; level of the readout's permutation test).
    A required row missing from a given table raises ``ValueError``.

    Args:
        leakage: The leakage part (C1, C2, C3).
        ablation: The sink-ablation part (C3).
        bos_swap: The BOS-replacement part (C5).
        comparison: The comparison part, with a ``case`` column (C4).
        fingerprint: The fingerprint part (C6).
        attribution: The relativize part (C7, and C3's reported causal figure):
            a :class:`~poslens.mechanisms.attribution.Attribution` or its summary table.
        claims: The claims to evaluate.
        c4_window: The window C4 reads.
        c4_comparisons: The comparison table compare recorded (:func:`poslens.mechanisms.comparisons.comparison_table`);
            when it holds rows, C4 is decided by differences (:func:`claim_c4_differences`, methodology §9.1) with the
            cases of ``comparison.meta["cases"]``; else (a compare part of an older poslens) by :func:`claim_c4`.
        c5_target: The reduction C5 expects.
        c5_band: Half-width of C5's band around ``c5_target``.
        c6_tolerance: The largest BOS dispersion C6 counts as constant.
        c6_alpha: The level of C6's permutation test.

    Returns:
        The claims (:class:`Claims`: ``table`` and ``inputs``).

    Raises:
        ValueError: When ``claims`` names an unknown claim, or a given table lacks a row a claim needs.

    Example:
        >>> out = evaluate()
        >>> list(out.table.columns) == CLAIM_COLUMNS, set(out.table["rule"]), set(out.table["verdict"]), len(out.inputs)
        (True, {'not measured'}, {'not measured'}, 0)
        >>> t = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
        ...                   figure_row("probe_r2", -0.2, -0.3, -0.1)])
        >>> evaluate(leakage=t, claims=["C1"]).table["verdict"].tolist()
        ['not supported', 'not supported']
    """
    wanted = set(claims)
    unknown = wanted - set(STATEMENTS)
    if unknown:
        raise ValueError(f"unknown claim(s) {sorted(unknown)}; known: {list(STATEMENTS)}")
    plan = [
        ("C1", (leakage,), lambda: claim_c1(leakage)),
        ("C2", (leakage,), lambda: claim_c2(leakage)),
        ("C3", (leakage, ablation), lambda: claim_c3(leakage, ablation, attribution=attribution)),
        ("C4", (comparison,), lambda: _c4(comparison, c4_window, c4_comparisons)),
        ("C5", (bos_swap,), lambda: claim_c5(bos_swap, c5_target, c5_band)),
        ("C6", (fingerprint,), lambda: claim_c6(fingerprint, c6_tolerance, c6_alpha)),
        ("C7", (attribution,), lambda: claim_c7(attribution)),
    ]
    rows: list[dict[str, Any]] = []
    for claim, inputs, run in plan:
        if claim not in wanted:
            continue
        rows.extend(run() if all(x is not None for x in inputs) else [_not_measured(claim)])
    return Claims.from_rows(rows)
