"""The claims' tables: the declarative :class:`Claim`, the claims rows and their inputs, and :class:`Claims`.

A claim is data (:class:`Claim`): its name, statement, the parts it reads,
its rule(s) and the name of its headline estimate. Evaluating it gives claims
rows, dicts with the keys of :data:`CLAIM_COLUMNS` and one more, ``inputs``:
the :class:`Input` objects (an :class:`~poslens.study.claims.rules.Estimate` and its
role) the row's verdict rests on. Of the columns:

- ``key``: the row's key, ``"C1.1"``, ``"C1.2"``, … (claim and row number),
  which the inputs table refers to;
- ``claim``: ``"C1"`` … ``"C7"``;
- ``statement``: the claim as the methodology page states it (:attr:`Claim.statement`);
- ``model``: the model, with its variant in parentheses when it is not
  ``base`` (:func:`model_label`); C5 appends the replacement kind
  (``"smollm2-135m, bos:mean"``), C4 rows name the comparison. A label for people, never read back;
- ``group``: the rows that one line of a summary reads together: the model
  label, C5's with its replacement kind, and for C4 the compared (model, variant);
- ``case``: C4's architecture case (``standard``, ``ntk``, ``sliding``) as
  :func:`poslens.mechanisms.architectures.compare` recorded it; empty for the other claims;
- ``figure_name``, ``figure``, ``ci_low``, ``ci_high``: which of the row's
  inputs this row shows, its number and interval;
- ``rule``: the rule's words (:meth:`~poslens.study.claims.rules.Rule.text`), the words of the rule alone;
- ``own_verdict``: the verdict of the row's own rule on its own inputs (for a
  C4 comparison, that comparison alone);
- ``verdict``: the claim's verdict for the row (for C4 comparisons,
  :func:`~poslens.study.claims.rules.joint` of all of them).

The inputs of every row form a second, long table (:data:`INPUT_COLUMNS`), one
row per (claim row ``key``, input): its ``name``, ``value`` and interval
(``ci_low``, ``ci_high``; NaN for a point value such as a p-value, a chance
level or a rule's threshold), its ``role`` (:data:`ROLES`: ``headline``, the
estimate a one-line summary of the row quotes; ``decides``, read by the rule;
``reported``, shown but not used), and where it came from (the part's
``metric``, ``model``, ``variant``, ``intervention``, ``layer``, ``head`` and
``query_window``, the ``statistic`` taken over rows, and ``where`` in words).
The headline is always one the rule reads. The report, the README table and
the findings page read these columns and never the rule's words.

Longer than 400 lines because it is one table of data: both tables' columns live
here together with what builds their rows and what reads them back from a
study's folder, so that one place owns the columns.

Example:
    >>> from poslens.study.claims.rules import Condition, Estimate, Rule
    >>> rule = Rule((Condition("r", "ci_low", ">", 0.0),), (Condition("r", "ci_high", "<=", 0.0),))
    >>> claim = Claim("C9", "r is positive", parts=("leakage",), measured_by=("leakage",), rules=(rule,), headline="r")
    >>> r = Estimate("r", 0.3, 0.1, 0.5)
    >>> rows = keyed([claim_row(claim, "m", r, rule.text(), "supported", with_roles(rule, (r,), "r"))])
    >>> Claims.from_rows(rows).table[["key", "statement", "verdict"]].values.tolist()
    [['C9.1', 'r is positive', 'supported']]
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from poslens.errors import InputError, NotFoundError
from poslens.study.claims.rules import NOT_MEASURED, Estimate, Rule

#: The columns of the claims table, in order.
CLAIM_COLUMNS = [
    "key",
    "claim",
    "statement",
    "model",
    "group",
    "case",
    "figure_name",
    "figure",
    "ci_low",
    "ci_high",
    "rule",
    "own_verdict",
    "verdict",
]

#: The columns of the claim inputs table (one row per claims row and input), in order.
INPUT_COLUMNS = [
    "key",
    "claim",
    "name",
    "role",
    "value",
    "ci_low",
    "ci_high",
    "statistic",
    "metric",
    "model",
    "variant",
    "intervention",
    "layer",
    "head",
    "query_window",
    "layer_first",
    "layer_last",
    "where",
]

HEADLINE = "headline"
"""The role of the estimate a one-line summary of a claims row quotes (one per row, always one the rule reads)."""
DECIDES = "decides"
"""The role of an estimate (or threshold) the row's rule reads."""
REPORTED = "reported"
"""The role of an estimate shown beside the verdict that the rule does not read."""
#: The roles an input can have.
ROLES = (HEADLINE, DECIDES, REPORTED)


CLAIMS_FILE = "claims.csv"
"""The file the claims table is written to, in a study's folder."""
INPUTS_FILE = "claim_inputs.csv"
"""The file the claims' inputs table is written to, beside :data:`CLAIMS_FILE`."""


@dataclass(frozen=True)
class Claim:
    """One claim as data: what it states, which inputs it reads, how it is decided, its rule(s) and its headline.

    A claim is declared once, in its own module of :mod:`poslens.study.claims` (the module's ``DECLARES``);
    :func:`poslens.study.claims.evaluate` calls its :attr:`decide` with the inputs it declares and nothing else.
    The inputs are named as the parts provide them (:attr:`poslens.study.part_registry.Part.provides`).

    Attributes:
        name: ``"C1"`` … ``"C8"``.
        statement: The claim as the methodology page states it (the ``statement`` column).
        parts: The claim inputs it needs; all must be given, else it is not measured.
        measured_by: The ``poslens`` commands whose parts it reads (named when it was not measured); empty (the
            claims' own): the commands of the parts that provide its ``parts`` (:func:`poslens.study.part_registry.providers`).
        rules: Its rule(s) at the default settings (:class:`~poslens.study.claims.rules.Rule`); a rule with settings
            (C5's target, C6's tolerance) is rebuilt by its factory with the settings given to ``evaluate``.
        headline: The name of the estimate a one-line summary of each row quotes (role ``headline``); empty when each
            row's headline is its own comparison (C4).
        reads: Claim inputs it reads when they are given, beside its ``parts`` (C3 reports the leakage part).
        settings: The keywords of :func:`~poslens.study.claims.evaluate` it takes (``c5_target``).
        decide: ``decide(**inputs, **settings)``: its rows, given its ``parts``, those of its ``reads`` that were
            given, and those of its ``settings`` that were given, each by name.
        shown_rules: Rules the rules table shows before :attr:`rules` (C4's sign rule per comparison).

    Example:
        >>> from poslens.study.claims.rules import Condition, Rule
        >>> rule = Rule((Condition("r", "ci_low", ">", 0.0),), (Condition("r", "ci_high", "<=", 0.0),))
        >>> Claim("C9", "r is positive", ("leakage",), ("leakage",), (rule,), "r").rules[0].estimates()
        ('r',)
    """

    name: str
    statement: str
    parts: tuple[str, ...]
    measured_by: tuple[str, ...]
    rules: tuple[Rule, ...]
    headline: str = ""
    reads: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    decide: Callable[..., list[dict[str, Any]]] | None = None
    shown_rules: tuple[Rule, ...] = ()

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every claim input it reads: its ``parts``, then its ``reads``.

        Example:
            >>> Claim("C9", "s", ("path",), (), (), reads=("leakage",)).inputs
            ('path', 'leakage')
        """
        return (*self.parts, *self.reads)


@dataclass(frozen=True)
class Input:
    """One input of a claims row: an :class:`~poslens.study.claims.rules.Estimate` and its role (:data:`ROLES`).

    Attributes:
        estimate: The estimate.
        role: ``headline`` (the estimate a one-line summary quotes; the rule reads it), ``decides`` (the rule reads it)
            or ``reported`` (shown, not used).

    Example:
        >>> Input(Estimate("c_res", 0.01, 0.0, 0.02), "headline").record("C3.1", "C3")["role"]
        'headline'
    """

    estimate: Estimate
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
            >>> Input(Estimate("r", 0.3, 0.1, 0.5, metric="reduction", layer=-1), "decides").record("C5.1", "C5")["layer"]
            -1
        """
        f = self.estimate
        return dict(
            key=key,
            claim=claim,
            name=f.name,
            role=self.role,
            value=f.value,
            ci_low=f.ci_low,
            ci_high=f.ci_high,
            statistic=f.statistic,
            metric=f.metric,
            model=f.model,
            variant=f.variant,
            intervention=f.intervention,
            layer=f.layer,
            head=f.head,
            query_window=f.query_window,
            layer_first=f.layer_first,
            layer_last=f.layer_last,
            where=f.where,
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


def with_roles(rule: Rule, estimates: Iterable[Estimate], headline: str, extra: Iterable[Input] = ()) -> tuple[Input, ...]:
    """The inputs of a claims row: each estimate with its role, then ``extra``.

    The role is ``headline`` for the estimate named ``headline``, else
    ``decides`` if ``rule`` reads it, else ``reported``.

    Args:
        rule: The row's rule.
        estimates: The estimates, in the order the inputs table lists them.
        headline: The headline's name (one the rule reads).
        extra: Inputs appended with the roles they carry.

    Returns:
        The inputs.

    Raises:
        ValueError: When the rule does not read the headline.

    Example:
        >>> from poslens.study.claims.rules import Condition
        >>> rule = Rule((Condition("r", "ci_low", ">", 0.0),), (Condition("r", "ci_high", "<=", 0.0),))
        >>> [i.role for i in with_roles(rule, (Estimate("r", 0.3, 0.1, 0.5), Estimate("s", 1.0, 0.0, 2.0)), "r")]
        ['headline', 'reported']
    """
    read = set(rule.estimates())
    if headline not in read:
        raise ValueError(f"the headline estimate {headline!r} is not one the rule reads: {sorted(read)}")
    roles = tuple(Input(f, HEADLINE if f.name == headline else DECIDES if f.name in read else REPORTED) for f in estimates)
    return roles + tuple(extra)


def claim_row(
    claim: Claim,
    model: str,
    shown: Estimate,
    rule: str,
    outcome: str,
    inputs: Iterable[Input],
    *,
    group: str | None = None,
    case: str | None = None,
    own: str | None = None,
) -> dict[str, Any]:
    """One claims row (the columns of :data:`CLAIM_COLUMNS`), with its ``inputs`` as a field; its key is set by :func:`keyed`.

    Args:
        claim: The claim.
        model: The ``model`` label (:func:`model_label`).
        shown: The estimate the row shows, one of ``inputs``.
        rule: The rule's words.
        outcome: The claim's verdict for the row.
        inputs: The row's inputs (distinct names, one headline).
        group: The ``group`` column; default ``model``.
        case: C4's case, or None.
        own: The verdict of the row's own rule; default ``outcome``.

    Returns:
        The row.

    Raises:
        ValueError: When two inputs share a name, ``shown`` is not among them, or there is not exactly one headline.

    Example:
        >>> from poslens.study.claims.rules import Condition
        >>> rule = Rule((Condition("r", "ci_low", ">", 0.0),), (Condition("r", "ci_high", "<=", 0.0),))
        >>> claim = Claim("C9", "r is positive", ("leakage",), ("leakage",), (rule,), "r")
        >>> r = Estimate("r", 0.3, 0.1, 0.5)
        >>> claim_row(claim, "m", r, rule.text(), "supported", with_roles(rule, (r,), "r"))["figure"]
        0.3
    """
    inputs = tuple(inputs)
    names = [i.estimate.name for i in inputs]
    if len(set(names)) != len(names):
        raise ValueError(f"{claim.name}: two inputs share a name: {names}")
    if shown.name not in names:
        raise ValueError(f"{claim.name}: the row shows {shown.name!r}, which is not among its inputs {names}")
    if sum(i.role == HEADLINE for i in inputs) != 1:
        raise ValueError(f"{claim.name}: a row needs exactly one headline input, got {[(i.estimate.name, i.role) for i in inputs]}")
    return dict(
        key="",
        claim=claim.name,
        statement=claim.statement,
        model=model,
        group=model if group is None else group,
        case=case,
        figure_name=shown.name,
        figure=shown.value,
        ci_low=shown.ci_low,
        ci_high=shown.ci_high,
        rule=rule,
        own_verdict=outcome if own is None else own,
        verdict=outcome,
        inputs=inputs,
    )


def keyed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with their keys, ``"<claim>.<n>"`` numbered from 1 per claim (in place).

    Args:
        rows: Claims rows.

    Returns:
        The same rows.

    Example:
        >>> [r["key"] for r in keyed([dict(claim="C1"), dict(claim="C1"), dict(claim="C2")])]
        ['C1.1', 'C1.2', 'C2.1']
    """
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["claim"]] = counts.get(r["claim"], 0) + 1
        r["key"] = f"{r['claim']}.{counts[r['claim']]}"
    return rows


def not_measured_row(claim: Claim) -> dict[str, Any]:
    """The one row of a claim whose parts were not given: verdict and rule ``not measured``, no inputs.

    Args:
        claim: The claim.

    Returns:
        The claims row.

    Example:
        >>> from poslens.study.claims import C3
        >>> not_measured_row(C3)["verdict"]
        'not measured'
    """
    return dict(
        key=f"{claim.name}.1",
        claim=claim.name,
        statement=claim.statement,
        model=None,
        group=None,
        case=None,
        figure_name=None,
        figure=np.nan,
        ci_low=np.nan,
        ci_high=np.nan,
        rule=NOT_MEASURED,
        own_verdict=NOT_MEASURED,
        verdict=NOT_MEASURED,
        inputs=(),
    )


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
        >>> from poslens.study.claims import evaluate
        >>> from poslens.study.claims.lookup import figure_row
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
            >>> from poslens.study.claims import claim_c1
            >>> from poslens.study.claims.lookup import figure_row
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
            >>> from poslens.study.claims import evaluate
            >>> from poslens.study.claims.lookup import figure_row
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
                raise NotFoundError(f"{folder / name} is missing; run {shlex.join(['poslens', 'claims', '--out', str(folder)])}")
        text = {c: "string" for c in ("key", "claim", "statement", "model", "group", "case", "figure_name", "rule", "own_verdict", "verdict")}
        table = pd.read_csv(folder / CLAIMS_FILE, dtype=text, keep_default_na=False, na_values={c: [""] for c in CLAIM_COLUMNS})
        inputs = pd.read_csv(
            folder / INPUTS_FILE,
            keep_default_na=False,
            na_values={c: [""] for c in INPUT_COLUMNS},
            dtype={
                c: "string"
                for c in ("key", "claim", "name", "role", "statistic", "metric", "model", "variant", "intervention", "query_window", "where")
            },
        )
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
            >>> from poslens.study.claims import evaluate
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
            >>> from poslens.study.claims import evaluate
            >>> evaluate(claims=["C3"]).headline("C3.1") is None
            True
        """
        rows = self.inputs_of(key)
        rows = rows[rows["role"] == HEADLINE]
        return rows.iloc[0] if len(rows) else None
