"""The claims C1–C8 of methodology §9, §11 and §13 as data, and :func:`evaluate`, which decides them from tidy tables.

Every verdict is ``supported``, ``not supported`` or ``inconclusive`` (or
``not measured`` when a claim's input tables were not given) and is computed
from estimates and their 95% intervals in tidy tables (the columns of
:data:`poslens.measurement.result.COLUMNS`), never written by hand.

Each claim is a :class:`~poslens.study.claim_table.Claim` object, listed in
:data:`CLAIMS`: its statement, the parts it reads, the commands that measure
them, its rule(s) and its headline estimate. The claims are defined beside the
lookups of the parts they read: :mod:`poslens.study.claims_leakage` (C1, C2),
:mod:`poslens.study.claims_path` (C3, from the path-specific tests),
:mod:`poslens.study.claims_compare` (C4), :mod:`poslens.study.claims_position0`
(C5, C6), :mod:`poslens.study.claims_relativize` (C7) and :mod:`poslens.study.claims_split` (C8, from the
sink path's split). They decide through
the rule engine of :mod:`poslens.study.rules` (a :class:`~poslens.study.rules.Rule`
writes its own words and :func:`~poslens.study.rules.verdict` applies it), read
estimates through :mod:`poslens.study.lookup` and write the tables of
:mod:`poslens.study.claim_table`.

Conventions shared by all claims:

- A claim that needs several estimates (C1, C2, C3, C6) gives one row per
  estimate, and all rows of one evaluation carry the same verdict, decided by
  one rule on all of them.
- Claims are evaluated per (model, variant) found in the input, except C4,
  which compares cases with each other.
- A required row that is missing (or present more than once) raises
  ``ValueError`` naming the metric, layer, head, window and intervention.

:func:`evaluate` collects all seven into one :class:`~poslens.study.claim_table.Claims`;
a claim whose input table was not given gets one row with verdict and rule
``not measured`` (and no inputs), and :func:`not_measured_summary` names the
commands that would measure it.

Example:
    >>> C3.rules[0].text().split("; ")[0]
    'supported if fall ci_low > 0 and fall beyond sham ci_low > 0'
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

from collections.abc import Iterable
from typing import Any

import pandas as pd

from poslens.study.claim_table import Claim, Claims, not_measured_row
from poslens.study.claims_compare import C4, C4_DIRECTIONS, C4_QUERY_WINDOW, c4_rows, c4_sign_rule
from poslens.study.claims_leakage import C1, C2, claim_c1, claim_c2
from poslens.study.claims_path import C3, claim_c3
from poslens.study.claims_position0 import C5, C6, claim_c5, claim_c6
from poslens.study.claims_relativize import C7, claim_c7
from poslens.study.claims_split import C8, claim_c8
from poslens.study.lookup import figure_row  # noqa: F401 (the examples build tables with it)
from poslens.study.part_registry import command_line, providers
from poslens.study.rules import NOT_MEASURED

CLAIMS: dict[str, Claim] = {claim.name: claim for claim in (C1, C2, C3, C4, C5, C6, C7, C8)}
"""The claims, C1–C8, by name."""

STATEMENTS = {name: claim.statement for name, claim in CLAIMS.items()}
"""The statement of each claim, C1–C8 (:attr:`~poslens.study.claim_table.Claim.statement`)."""

MEASURED_BY = {name: claim.measured_by or providers(claim.parts) for name, claim in CLAIMS.items()}
"""The ``poslens`` commands (and parts) whose tables each claim reads (C3 also reports the leakage, ablate-sinks and
relativize parts when they were run)."""


def not_measured_summary(table: pd.DataFrame | Claims, out: Any = "DIR", present: Iterable[str] = (), settings: dict[str, Any] | None = None) -> str:
    """One line naming the claims of ``table`` that were not measured and the commands that would measure them.

    ``present`` names the parts already in ``out``: their commands are not
    suggested again (a claim whose parts are all present, say C3 when no head
    reads the sink, names all of them). ``settings`` (the parts' recorded
    settings) are spelled out in each command, so that it agrees with the parts
    already there (:func:`poslens.study.part_registry.command_line`). Empty when every
    claim was measured.

    Args:
        table: The claims (a :class:`~poslens.study.claim_table.Claims`, or its claims table).
        out: The study folder the commands write to.
        present: The parts already in ``out``.
        settings: The study's settings, for the commands' options.

    Returns:
        The line (empty when every claim was measured).

    Example:
        >>> leakage = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06), figure_row("probe_r2", 0.6, 0.5, 0.7)])
        >>> table = evaluate(leakage=leakage, claims=["C1", "C3", "C6"])
        >>> not_measured_summary(table, "results/quick", present=["leakage"])
        'not measured: C3 (run: poslens path-tests --out results/quick), C6 (run: poslens fingerprint --out results/quick)'
        >>> not_measured_summary(table, "A", present=["leakage"], settings={"n_seqs": 4, "groups": 2})
        'not measured: C3 (run: poslens path-tests --n-seqs 4 --groups 2 --out A), C6 (run: poslens fingerprint --n-seqs 4 --groups 2 --out A)'
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


def evaluate(
    leakage: Any = None,
    ablation: Any = None,
    bos_swap: Any = None,
    comparison: Any = None,
    fingerprint: Any = None,
    attribution: Any = None,
    path: Any = None,
    split: Any = None,
    *,
    claims: Iterable[str] = tuple(STATEMENTS),
    c4_query_window: str = C4_QUERY_WINDOW,
    c4_comparisons: pd.DataFrame | None = None,
    c5_target: float = 0.4,
    c5_band: float = 0.1,
    c6_tolerance: float = 1e-5,
    c6_alpha: float = 0.05,
) -> Claims:
    """All claims' verdicts and their inputs: the claims table and the inputs table (:class:`~poslens.study.claim_table.Claims`).

    Inputs are tidy DataFrames or :class:`poslens.measurement.result.Result` objects:
    ``leakage`` (C1, C2, C3), ``ablation`` (C3), ``bos_swap`` (C5),
    ``comparison`` (C4, the cases compare recorded, see :func:`~poslens.study.claims_compare.c4_rows`),
    ``fingerprint`` (C6), ``attribution`` (C7; C3 reports its causal figure from it) and ``path`` (C3, the
    path-specific tests; the leakage and ablation parts are reported beside it). A claim whose inputs were not all given gets one row
    with verdict and rule ``not measured`` (:data:`NOT_MEASURED`). ``claims`` limits
    which claims are evaluated at all (the others are left out of the table).
    ``c6_tolerance`` and ``c6_alpha`` pass to :func:`~poslens.study.claims_position0.claim_c6` (BOS dispersion
    bound; level of the readout's permutation test).
    A required row missing from a given table raises ``ValueError``.

    Args:
        leakage: The leakage part (C1, C2, C3).
        ablation: The sink-ablation part (C3).
        bos_swap: The BOS-replacement part (C5).
        comparison: The compare part (C4): its :class:`~poslens.measurement.result.Result`, whose ``meta["cases"]``
            records each run's case, or a table labelled by :func:`~poslens.study.claims_compare.label_cases`.
        fingerprint: The fingerprint part (C6).
        attribution: The relativize part (C7, and C3's reported causal figure):
            its :class:`~poslens.measurement.result.Result` (or that result's table).
        path: The path-specific tests' part (C3).
        split: The sink path's split (C8).
        claims: The claims to evaluate.
        c4_query_window: The query window (``early`` or ``all``) C4 reads; default its rule's,
            :data:`~poslens.study.claims_compare.C4_QUERY_WINDOW` (``all``).
        c4_comparisons: The comparison table compare recorded (:func:`poslens.mechanisms.comparisons.comparison_table`);
            when it holds rows, C4 is decided by differences (:func:`~poslens.study.claims_compare.claim_c4_differences`,
            methodology §9.1) with the cases compare recorded; else (a compare part of an older poslens) by
            :func:`~poslens.study.claims_compare.claim_c4`.
        c5_target: The reduction C5 expects.
        c5_band: Half-width of C5's band around ``c5_target``.
        c6_tolerance: The largest BOS dispersion C6 counts as constant.
        c6_alpha: The level of C6's permutation test.

    Returns:
        The claims (:class:`~poslens.study.claim_table.Claims`: ``table`` and ``inputs``).

    Raises:
        ValueError: When ``claims`` names an unknown claim, or a given table lacks a row a claim needs.

    Example:
        >>> from poslens.study.claim_table import CLAIM_COLUMNS
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
    given = dict(
        leakage=leakage,
        ablation=ablation,
        bos_swap=bos_swap,
        comparison=comparison,
        fingerprint=fingerprint,
        attribution=attribution,
        path=path,
        split=split,
    )
    decide = {
        "C1": lambda: claim_c1(leakage),
        "C2": lambda: claim_c2(leakage),
        "C3": lambda: claim_c3(path, leakage, ablation, attribution),
        "C4": lambda: c4_rows(comparison, c4_query_window, c4_comparisons),
        "C5": lambda: claim_c5(bos_swap, c5_target, c5_band),
        "C6": lambda: claim_c6(fingerprint, c6_tolerance, c6_alpha),
        "C7": lambda: claim_c7(attribution),
        "C8": lambda: claim_c8(split),
    }
    rows: list[dict[str, Any]] = []
    for name, claim in CLAIMS.items():
        if name not in wanted:
            continue
        measured = all(given[part] is not None for part in claim.parts)
        rows.extend(decide[name]() if measured else [not_measured_row(claim)])
    return Claims.from_rows(rows)


def rules_table() -> str:
    """The rule of every claim as a Markdown table, in the words :meth:`~poslens.study.rules.Rule.text` writes.

    The methodology page shows this table (docs/_hooks/claim_rules.py puts it
    in at build time), so no page restates a rule by hand. C4's rows are its
    sign rule per comparison of :data:`~poslens.study.claims_compare.C4_DIRECTIONS`
    (a compare part with a comparison table, methodology §9.1), then the rules
    of an older compare part.

    Returns:
        The table: one row per claim and rule, with the parts it reads.

    Example:
        >>> print(rules_table().splitlines()[2].split(";")[0])
        | C1 | leakage | supported if leakage_pattern_heldout ci_low > 0 and probe_r2 ci_low > 0
    """
    lines = ["| claim | reads | rule |", "|---|---|---|"]
    for name, claim in CLAIMS.items():
        reads = ", ".join(MEASURED_BY[name])
        rules = list(claim.rules)
        if name == "C4":
            rules = [c4_sign_rule(f"{metric} ({case}, {kind})", direction) for (case, kind, metric), direction in C4_DIRECTIONS.items()] + rules
        for rule in rules:
            lines.append(f"| {name} | {reads} | {rule.text().replace('|', '&#124;')} |")
    return "\n".join(lines)
