"""Verdicts on the claims C1–C6 of methodology §9, computed from tidy tables.

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

Each claim function returns a list of dict rows with the keys of :data:`CLAIM_COLUMNS`:

- ``claim``: ``"C1"`` … ``"C6"``;
- ``statement``: the claim as the methodology page states it (:data:`STATEMENTS`);
- ``model``: the model, with its variant in parentheses when it is not
  ``base`` (:func:`model_label`); C5 appends the replacement kind
  (``"smollm2-135m, bos:mean"``), C4 comparison rows read
  ``"<case> vs <standard>"`` and C4 depth rows
  ``"<case>: slope of c_res over layers >= 1"``;
- ``figure``, ``ci_low``, ``ci_high``: the number this row reports and its
  interval;
- ``rule``: ``figure: <which figure the row shows: metric, layer, head, query
  window, intervention>. rule: <the rule's text>. inputs: <the figures the
  rule was applied to>``, sometimes followed by a note;
- ``verdict``.

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

:func:`evaluate` collects all six into one DataFrame; a claim whose input
table was not given gets one row with verdict and rule ``not measured``, and
:func:`not_measured_summary` names the commands that would measure it.

Example:
    >>> C3_RULE.text()
    'supported if c_res ci_low > 0 and reduction ci_low > 0; not supported if c_res ci_high <= 0 or reduction ci_high <= 0; inconclusive otherwise'
    >>> verdict(C3_RULE, [Figure("c_res", 0.01, 0.005, 0.015), Figure("reduction", 0.3, -0.1, 0.7)])
    'inconclusive'
    >>> rows = [figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
    ...         figure_row("probe_r2", 0.6, 0.5, 0.7)]
    >>> out = evaluate(leakage=pd.DataFrame(rows), claims=["C1", "C5"])
    >>> out[["claim", "verdict", "rule"]].to_dict("records")[-1]
    {'claim': 'C5', 'verdict': 'not measured', 'rule': 'not measured'}
    >>> out["verdict"].tolist()
    ['supported', 'supported', 'not measured']
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from poslens.fit.stats import depth_slope
from poslens.measurement.result import COLUMNS
from poslens.study.settings import command_line

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
#: The verdict of a claim whose figures the run did not measure.
NOT_MEASURED = "not measured"

#: The columns of the claims table, in order.
CLAIM_COLUMNS = ["claim", "statement", "model", "figure", "ci_low", "ci_high", "rule", "verdict"]

#: The statement of each claim, C1–C6.
STATEMENTS = {
    "C1": "attention patterns carry absolute position",
    "C2": "the mask source exists by construction",
    "C3": "the residual source runs through position 0 and sink-reading heads",
    "C4": "NTK suppresses, sliding window accumulates, standard in between",
    "C5": "BOS replacement removes ~40% of C_res at early queries",
    "C6": "the fingerprint is constant with auto-BOS, varies otherwise",
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
        ci_low: Lower end of its 95% interval.
        ci_high: Upper end of its 95% interval.
        where: The table row it was read from (metric, layer, head, window), as the ``rule`` column quotes it.

    Example:
        >>> Figure("probe_r2", 0.6, 0.5, 0.7).text()
        'probe_r2 = 0.6 [0.5, 0.7]'
    """

    name: str
    value: float
    ci_low: float
    ci_high: float
    where: str = ""

    def text(self) -> str:
        """The figure as it is quoted among a rule's inputs: ``name = value [ci_low, ci_high]``.

        Returns:
            The quoted figure.

        Example:
            >>> Figure("c_res", 0.01, float("nan"), 0.02).text()
            'c_res = 0.01 [nan, 0.02]'
        """
        return f"{self.name} = {_fmt(self.value)} [{_fmt(self.ci_low)}, {_fmt(self.ci_high)}]"


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
    any of ``not_supported_if`` holds, else ``inconclusive``.

    :meth:`text` is what the ``rule`` column says; :func:`verdict` applies the
    same object to figures, so the two cannot disagree. ``remark`` is shown after
    the rule (figures that are reported but not used, where a check lives).

    Attributes:
        supported_if: Conditions that all must hold for ``supported``.
        not_supported_if: Conditions any of which gives ``not supported``.
        remark: Text shown after the rule.

    Example:
        >>> rule = Rule(supported_if=(Condition("c_res", "ci_low", ">", 0.0),),
        ...             not_supported_if=(Condition("c_res", "ci_high", "<=", 0.0),))
        >>> rule.text()
        'supported if c_res ci_low > 0; not supported if c_res ci_high <= 0; inconclusive otherwise'
        >>> rule.figures()
        ('c_res',)
    """

    supported_if: tuple[Condition, ...]
    not_supported_if: tuple[Condition, ...]
    remark: str = ""

    def __post_init__(self) -> None:
        if not self.supported_if or not self.not_supported_if:
            raise ValueError("a rule needs at least one condition for 'supported' and one for 'not supported'")

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
            + "; not supported if " + " or ".join(c.text() for c in self.not_supported_if)
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
    if any(c.holds(by_name) for c in rule.not_supported_if):
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
    return Figure(name or filters["metric"], float(row["value"]), float(row["ci_low"]), float(row["ci_high"]), where)


def _keys(table: pd.DataFrame, source: str, what: str) -> list[tuple[str, str]]:
    """The (model, variant) pairs present in ``table``, in order of appearance."""
    if len(table) == 0:
        raise ValueError(f"{source}: no rows for {what}")
    pairs = table[["model", "variant"]].drop_duplicates()
    return [(str(m), str(v)) for m, v in zip(pairs["model"], pairs["variant"])]


def _row(claim: str, model: str, fig: Figure, rule: str, outcome: str) -> dict[str, Any]:
    return dict(
        claim=claim,
        statement=STATEMENTS[claim],
        model=model,
        figure=fig.value,
        ci_low=fig.ci_low,
        ci_high=fig.ci_high,
        rule=rule,
        verdict=outcome,
    )


def _rule_text(shows: str, rule: str, inputs: Iterable[Figure], note: str = "") -> str:
    text = f"figure: {shows}. rule: {rule}. inputs: " + "; ".join(f.text() for f in inputs)
    return text + (f". {note}" if note else "")


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
        for f in figs:
            rows.append(_row("C1", model_label(model, variant), f, _rule_text(f.where, C1_RULE.text(), figs), outcome))
    return rows


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
      there means C_mask > C_res. The point difference c_mask − c_res is quoted
      in the rule's note;
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
        note = f"C_mask - C_res at layer 0 = {_fmt(mask0.value - res0.value)} (point value; no interval in the table, decided through rho_mask)"
        for f in figs:
            rows.append(_row("C2", model_label(model, variant), f, _rule_text(f.where, C2_RULE.text(), figs, note), outcome))
    return rows


# --------------------------------------------------------------------------- C3


C3_RULE = Rule(
    supported_if=(Condition("c_res", "ci_low", ">", ZERO), Condition("reduction", "ci_low", ">", ZERO)),
    not_supported_if=(Condition("c_res", "ci_high", "<=", ZERO), Condition("reduction", "ci_high", "<=", ZERO)),
)
"""C3's rule: C_res and its reduction by sink-path ablation both above zero, or either at or below it."""


def claim_c3(leakage: Any, ablation: Any, query_window: str = "early") -> list[dict[str, Any]]:
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

    Two rows per (model, ablation), with the joint verdict.

    Args:
        leakage: The leakage part (a tidy DataFrame or a :class:`~poslens.measurement.result.Result`).
        ablation: The sink-ablation part.
        query_window: The window the figures are read in.

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
    rows = []
    for model, variant in _keys(sink, "ablation", "an intervention starting with 'sink-ablation'"):
        res = _pick(leak, "leakage", metric="c_res", query_window=query_window, intervention="none", model=model, variant=variant, **_MODEL_AGGREGATE)
        labels = _select(sink, model=model, variant=variant)["intervention"].drop_duplicates()
        for label in labels:
            red = _pick(abl, "ablation", metric="reduction", query_window=query_window, intervention=label,
                        model=model, variant=variant, **_MODEL_AGGREGATE)
            outcome = verdict(C3_RULE, (res, red))
            for f in (res, red):
                rows.append(_row("C3", model_label(model, variant), f, _rule_text(f.where, C3_RULE.text(), (res, red)), outcome))
    return rows


# --------------------------------------------------------------------------- C4


def label_cases(table: Any, standard: tuple[str, str] = ("smollm2-135m", "base")) -> pd.DataFrame:
    """A copy of ``table`` with a ``case`` column for :func:`claim_c4`.

    - ``standard``: the (model, variant) pair ``standard``;
    - ``ntk``: a variant with an ``ntk:α`` part;
    - ``sliding``: a variant with a ``window:W`` part, or model ``gemma3-270m``;
    - ``None`` (left out of C4) otherwise, and when a row is both NTK and sliding
      (e.g. ``ntk:2+window:64``, or gemma3-270m with NTK), which would confound
      the comparison.

    Args:
        table: A tidy table of several (model, variant) runs.
        standard: The (model, variant) that is the standard case.

    Returns:
        The labelled copy.

    Example:
        >>> t = pd.DataFrame([figure_row("c_res", 0, 0, 0, model=m, variant=v) for m, v in
        ...     [("smollm2-135m", "base"), ("smollm2-135m", "ntk:4"), ("smollm2-135m", "window:64"),
        ...      ("gemma3-270m", "base"), ("gemma3-270m", "ntk:2"), ("other", "base")]])
        >>> label_cases(t)["case"].tolist()
        ['standard', 'ntk', 'sliding', 'sliding', None, None]
    """
    t = _table(table, "comparison").copy()

    def case(model: str, variant: str) -> str | None:
        if (model, variant) == tuple(standard):
            return "standard"
        parts = str(variant).split("+")
        ntk = any(p.startswith("ntk:") for p in parts)
        sliding = any(p.startswith("window:") for p in parts) or model == "gemma3-270m"
        if ntk and not sliding:
            return "ntk"
        if sliding and not ntk:
            return "sliding"
        return None

    t["case"] = pd.Series([case(str(m), str(v)) for m, v in zip(t["model"], t["variant"])], index=t.index, dtype=object)
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
    any is not, ``inconclusive`` otherwise. Each row's rule text also says how
    its own comparison came out.

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
        >>> out = claim_c4(label_cases(pd.DataFrame(rows)))
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
    said = {SUPPORTED: "as claimed", NOT_SUPPORTED: "against the claim", INCONCLUSIVE: "undecided"}
    comparisons: list[tuple[str, tuple[str, str], Figure, str, str]] = []
    for case in ("ntk", "sliding"):
        rule = C4_RULES[case]
        for key in by_case[case]:
            f = pick(*key, case)
            outcome = verdict(rule, (f, std))
            figures = {f.name: f, std.name: std}
            # the note of the condition that holds says where this interval lies ("wholly below"/"wholly above")
            held = [c.note for c in (*rule.supported_if, *rule.not_supported_if) if c.holds(figures)]
            note = f"this comparison: {case} interval {held[0] if held else 'overlapping'} the standard's ({said[outcome]})"
            comparisons.append((case, key, f, note, outcome))
    together = joint(c[4] for c in comparisons)
    rule_text = (
        f"ntk case: {C4_RULES['ntk'].text()}. sliding case: {C4_RULES['sliding'].text()}. "
        f"all comparisons together: {JOINT}"
    )
    rows = []
    for case, key, f, note, _ in comparisons:
        shows = f"{f.where} ({case}) against the standard {std.where}"
        rows.append(_row("C4", f"{model_label(*key)} vs {std_label}", f, _rule_text(shows, rule_text, (f, std), note), together))

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
        fig = Figure("c_res slope per layer", s, lo, hi, f"{where}, layers {int(per_layer['layer'].min())}..{int(per_layer['layer'].max())}")
        outcome = verdict(C4_SLOPE_RULE, (fig,))
        rows.append(_row("C4", f"{model_label(*key)}: slope of c_res over layers >= 1", fig, _rule_text(fig.where, slope_rule, (fig,)), outcome))
    return rows


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
    t = _table(bos_swap, "bos_swap")
    swaps = t[t["intervention"].astype(str).str.startswith("bos:")]
    rows = []
    for model, variant in _keys(swaps, "bos_swap", "an intervention starting with 'bos:'"):
        kinds = sorted(_select(swaps, model=model, variant=variant)["intervention"].astype(str).unique())
        for kind in kinds:
            f = _pick(t, "bos_swap", metric="reduction", query_window=query_window, intervention=kind,
                      model=model, variant=variant, **_MODEL_AGGREGATE)
            rows.append(_row("C5", f"{model_label(model, variant)}, {kind}", f, _rule_text(f.where, rule.text(), (f,)), verdict(rule, (f,))))
    return rows


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
        bos_fig = Figure(
            "max dispersion (bos)", bos_max, float(top_row["ci_low"]), float(top_row["ci_high"]),
            f"maximum over layers {int(bos['layer'].min())}..{int(bos['layer'].max())} of {where} (at layer {int(top_row['layer'])})",
        )
        none = _pick(t, "fingerprint", "dispersion (none)", metric="dispersion", layer=-1, head=-1,
                     intervention="position0:none", model=model, variant=variant)
        varied = dict(layer=-1, head=-1, intervention="position0:varied", model=model, variant=variant)
        acc = _pick(t, "fingerprint", metric="readout_accuracy", **varied)
        chance, k = _readout_chance(t, model, variant)
        null = _pick(t, "fingerprint", "readout_chance_permuted (null mean, central 95%)", metric="readout_chance_permuted", **varied)
        p_value = _pick(t, "fingerprint", metric="readout_p_value", **varied)
        outcome = verdict(rule, (bos_fig, none, acc, chance, p_value))
        note = f"readout_chance = {_fmt(chance.value)} (1/K, K = {k}); {null.text()}; readout_p_value = {_fmt(p_value.value)}"
        for f in (bos_fig, none, acc):
            rows.append(_row("C6", model_label(model, variant), f, _rule_text(f.where, rule.text(), (bos_fig, none, acc), note), outcome))
    return rows


# --------------------------------------------------------------------------- all


MEASURED_BY = {
    "C1": ("leakage",),
    "C2": ("leakage",),
    "C3": ("leakage", "ablate-sinks"),
    "C4": ("compare",),
    "C5": ("bos-swap",),
    "C6": ("fingerprint",),
}
"""The ``poslens`` commands (and parts) whose tables each claim reads."""


def _not_measured(claim: str) -> dict[str, Any]:
    return dict(claim=claim, statement=STATEMENTS[claim], model=None, figure=np.nan, ci_low=np.nan, ci_high=np.nan,
                rule=NOT_MEASURED, verdict=NOT_MEASURED)


def not_measured_summary(table: pd.DataFrame, out: Any = "DIR", present: Iterable[str] = (),
                         settings: dict[str, Any] | None = None) -> str:
    """One line naming the claims of ``table`` that were not measured and the commands that would measure them.

    ``present`` names the parts already in ``out``: their commands are not
    suggested again (a claim whose parts are all present, say C3 when no head
    reads the sink, names all of them). ``settings`` (the parts' recorded
    settings) are spelled out in each command, so that it agrees with the parts
    already there (:func:`poslens.study.settings.command_line`). Empty when every
    claim was measured.

    Args:
        table: The claims table.
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
        >>> not_measured_summary(table[table["claim"] == "C1"])
        ''
    """
    present = set(present)
    pieces = []
    for claim in dict.fromkeys(table.loc[table["verdict"] == NOT_MEASURED, "claim"]):
        commands = [c for c in MEASURED_BY[claim] if c not in present] or list(MEASURED_BY[claim])
        pieces.append(f"{claim} (run: " + ", ".join(command_line(c, settings or {}, out) for c in commands) + ")")
    return "not measured: " + ", ".join(pieces) if pieces else ""


def evaluate(
    leakage: Any = None,
    ablation: Any = None,
    bos_swap: Any = None,
    comparison: Any = None,
    fingerprint: Any = None,
    *,
    claims: Iterable[str] = tuple(STATEMENTS),
    c4_window: str = "early",
    c5_target: float = 0.4,
    c5_band: float = 0.1,
    c6_tolerance: float = 1e-5,
    c6_alpha: float = 0.05,
) -> pd.DataFrame:
    """All claims' verdicts as one DataFrame with columns :data:`CLAIM_COLUMNS`.

    Inputs are tidy DataFrames or :class:`poslens.measurement.result.Result` objects:
    ``leakage`` (C1, C2, C3), ``ablation`` (C3), ``bos_swap`` (C5),
    ``comparison`` (C4, with a ``case`` column, see :func:`label_cases`) and
    ``fingerprint`` (C6). A claim whose inputs were not all given gets one row
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
        claims: The claims to evaluate.
        c4_window: The window C4 reads.
        c5_target: The reduction C5 expects.
        c5_band: Half-width of C5's band around ``c5_target``.
        c6_tolerance: The largest BOS dispersion C6 counts as constant.
        c6_alpha: The level of C6's permutation test.

    Returns:
        The claims table.

    Raises:
        ValueError: When ``claims`` names an unknown claim, or a given table lacks a row a claim needs.

    Example:
        >>> out = evaluate()
        >>> list(out.columns) == CLAIM_COLUMNS, set(out["rule"]), set(out["verdict"])
        (True, {'not measured'}, {'not measured'})
        >>> t = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
        ...                   figure_row("probe_r2", -0.2, -0.3, -0.1)])
        >>> evaluate(leakage=t, claims=["C1"])["verdict"].tolist()
        ['not supported', 'not supported']
    """
    wanted = set(claims)
    unknown = wanted - set(STATEMENTS)
    if unknown:
        raise ValueError(f"unknown claim(s) {sorted(unknown)}; known: {list(STATEMENTS)}")
    plan = [
        ("C1", (leakage,), lambda: claim_c1(leakage)),
        ("C2", (leakage,), lambda: claim_c2(leakage)),
        ("C3", (leakage, ablation), lambda: claim_c3(leakage, ablation)),
        ("C4", (comparison,), lambda: claim_c4(comparison, c4_window)),
        ("C5", (bos_swap,), lambda: claim_c5(bos_swap, c5_target, c5_band)),
        ("C6", (fingerprint,), lambda: claim_c6(fingerprint, c6_tolerance, c6_alpha)),
    ]
    rows: list[dict[str, Any]] = []
    for claim, inputs, run in plan:
        if claim not in wanted:
            continue
        rows.extend(run() if all(x is not None for x in inputs) else [_not_measured(claim)])
    out = pd.DataFrame(rows, columns=CLAIM_COLUMNS)
    return out.astype({"figure": float, "ci_low": float, "ci_high": float})
