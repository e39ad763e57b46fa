"""The claims C1–C8 of methodology §9, §11 and §13 as data, and :func:`evaluate`, which decides them from tidy tables.

Every verdict is ``supported``, ``not supported`` or ``inconclusive`` (or
``not measured`` when a claim's input tables were not given) and is computed
from estimates and their 95% intervals in tidy tables (the columns of
:data:`poslens.measurement.result.COLUMNS`), never written by hand.

The subpackage holds every claim and what decides and words them:

- :mod:`~poslens.study.claims.rules`: the rule engine (a :class:`~poslens.study.claims.rules.Rule`
  writes its own words and :func:`~poslens.study.claims.rules.verdict` applies it);
- :mod:`~poslens.study.claims.table`: a claim as data (:class:`~poslens.study.claims.table.Claim`), its rows and
  inputs, and the :class:`~poslens.study.claims.table.Claims` tables;
- :mod:`~poslens.study.claims.lookup`: the estimates a claim reads, looked up in the parts' tables;
- :mod:`~poslens.study.claims.text`: the report's verdict summary, a sentence per claim;
- one module per claim, named ``c<N>_<what it reads>``: :mod:`~poslens.study.claims.c1_leakage`,
  :mod:`~poslens.study.claims.c2_mask`, :mod:`~poslens.study.claims.c3_path` (the path-specific tests),
  :mod:`~poslens.study.claims.c4_compare` (and :mod:`~poslens.study.claims.c4_zoo`, C4 inside a trained family),
  :mod:`~poslens.study.claims.c5_bos_swap`, :mod:`~poslens.study.claims.c6_fingerprint`,
  :mod:`~poslens.study.claims.c7_relativize` and :mod:`~poslens.study.claims.c8_split` (the sink path's split).

A claim module's ``DECLARES`` holds its :class:`~poslens.study.claims.table.Claim`: its statement, the claim inputs
it reads (named as the parts provide them, :attr:`poslens.study.part_registry.Part.provides`), the settings it takes,
the function that decides it, its rule(s) and its headline estimate. :data:`CLAIMS` is every module's declaration,
in the order of the claims' numbers; adding a claim is adding its module.

Conventions shared by all claims:

- A claim that needs several estimates (C1, C2, C3, C6) gives one row per
  estimate, and all rows of one evaluation carry the same verdict, decided by
  one rule on all of them.
- Claims are evaluated per (model, variant) found in the input, except C4,
  which compares cases with each other.
- A required row that is missing (or present more than once) raises
  ``ValueError`` naming the metric, layer, head, window and intervention.

:func:`evaluate` collects them into one :class:`~poslens.study.claims.table.Claims`;
a claim whose input tables were not given gets one row with verdict and rule
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

import importlib
import pkgutil
import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

from poslens.study.claims.c1_leakage import C1, claim_c1  # noqa: F401 (re-exported: C1-C8 were importable from here)
from poslens.study.claims.c2_mask import C2, claim_c2  # noqa: F401
from poslens.study.claims.c3_path import C3, claim_c3  # noqa: F401
from poslens.study.claims.c4_compare import C4, C4_DIRECTIONS, C4_QUERY_WINDOW, c4_rows, c4_sign_rule  # noqa: F401
from poslens.study.claims.c5_bos_swap import C5, claim_c5  # noqa: F401
from poslens.study.claims.c6_fingerprint import C6, claim_c6  # noqa: F401
from poslens.study.claims.c7_relativize import C7, claim_c7  # noqa: F401
from poslens.study.claims.c8_split import C8, claim_c8  # noqa: F401
from poslens.study.claims.lookup import figure_row  # noqa: F401 (the examples build tables with it)
from poslens.study.claims.rules import NOT_MEASURED
from poslens.study.claims.table import Claim, Claims, not_measured_row
from poslens.study.part_registry import command_line, providers

CLAIM_MODULE = re.compile(r"c(\d+)_\w+")
"""The name of a module that declares a claim: ``c<N>_<what it reads>`` (its ``DECLARES``)."""


def declared_claims() -> dict[str, Claim]:
    """Every claim the modules of this package declare (their ``DECLARES``), by name, in the order of their numbers.

    Returns:
        ``{"C1": Claim, …}``.

    Raises:
        ValueError: When two modules declare a claim of the same name.

    Example:
        >>> list(declared_claims())
        ['C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7', 'C8']
    """
    found: dict[str, Claim] = {}
    for module in pkgutil.iter_modules(__path__):
        if not CLAIM_MODULE.fullmatch(module.name):
            continue
        for claim in getattr(importlib.import_module(f"{__name__}.{module.name}"), "DECLARES", ()):
            if claim.name in found:
                raise ValueError(f"claim {claim.name} is declared twice (the second in {module.name})")
            found[claim.name] = claim
    return dict(sorted(found.items(), key=lambda item: int(re.sub(r"\D", "", item[0]) or 0)))


CLAIMS: dict[str, Claim] = declared_claims()
"""The claims, C1–C8, by name: every claim module's declaration."""

STATEMENTS = {name: claim.statement for name, claim in CLAIMS.items()}
"""The statement of each claim, C1–C8 (:attr:`~poslens.study.claims.table.Claim.statement`)."""

MEASURED_BY = {name: claim.measured_by or providers(claim.parts) for name, claim in CLAIMS.items()}
"""The ``poslens`` commands (and parts) whose tables each claim reads (C3 also reports the leakage, ablate-sinks and
relativize parts when they were run)."""

INPUTS = tuple(dict.fromkeys(name for claim in CLAIMS.values() for name in claim.inputs))
"""Every claim input some claim reads, as :func:`evaluate` takes it (a part provides it: :attr:`poslens.study.part_registry.Part.provides`)."""

SETTINGS = tuple(dict.fromkeys(name for claim in CLAIMS.values() for name in claim.settings))
"""Every setting of a claim :func:`evaluate` takes (``c5_target``, …)."""

POSITIONAL = ("leakage", "ablation", "bos_swap", "comparison", "fingerprint", "attribution", "path", "split")
"""The inputs :func:`evaluate` takes by position, in this order: the order of its parameters before the claims were
declared one module each, kept so that older calls run (a claim added since is given its inputs by name)."""


def not_measured_summary(table: pd.DataFrame | Claims, out: Any = "DIR", present: Iterable[str] = (), settings: dict[str, Any] | None = None) -> str:
    """One line naming the claims of ``table`` that were not measured and the commands that would measure them.

    ``present`` names the parts already in ``out``: their commands are not
    suggested again (a claim whose parts are all present, say C3 when no head
    reads the sink, names all of them). ``settings`` (the parts' recorded
    settings) are spelled out in each command, so that it agrees with the parts
    already there (:func:`poslens.study.part_registry.command_line`). Empty when every
    claim was measured.

    Args:
        table: The claims (a :class:`~poslens.study.claims.table.Claims`, or its claims table).
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


def evaluate(*inputs: Any, claims: Iterable[str] | None = None, **given: Any) -> Claims:
    """All claims' verdicts and their inputs: the claims table and the inputs table (:class:`~poslens.study.claims.table.Claims`).

    Each claim is decided by its own :attr:`~poslens.study.claims.table.Claim.decide`, given the inputs it declares
    (its ``parts``, and its ``reads`` when given) and the settings it takes, by name; a claim whose ``parts`` were
    not all given gets one row with verdict and rule ``not measured`` (:data:`NOT_MEASURED`). ``claims`` limits
    which claims are evaluated at all (the others are left out of the table).

    The inputs (:data:`INPUTS`) are tidy DataFrames or :class:`poslens.measurement.result.Result` objects, named as
    the parts provide them: ``leakage`` (C1, C2; reported beside C3), ``ablation`` (reported beside C3), ``path``
    (C3, the path-specific tests), ``comparison`` (C4: its Result, whose ``meta["cases"]`` records each run's case,
    or a table labelled by :func:`~poslens.study.claims.c4_compare.label_cases`) and ``c4_comparisons`` (the
    comparison table compare recorded: C4 is then decided by differences, methodology §9.1), ``bos_swap`` (C5),
    ``fingerprint`` (C6), ``attribution`` (C7, and C3's reported causal figure) and ``split`` (C8). The settings
    (:data:`SETTINGS`): ``c4_query_window`` (the window C4 reads, default
    :data:`~poslens.study.claims.c4_compare.C4_QUERY_WINDOW`), ``c5_target`` and ``c5_band`` (the reduction C5
    expects and its band), ``c6_tolerance`` and ``c6_alpha`` (the largest BOS dispersion C6 counts as constant,
    the level of its permutation test). A required row missing from a given table raises ``ValueError``.

    Args:
        *inputs: Claim inputs by position, in the order of :data:`POSITIONAL` (older calls; name them instead).
        claims: The claims to evaluate (default: every one of :data:`CLAIMS`).
        **given: The claim inputs and the claims' settings, by name (``None``: not given).

    Returns:
        The claims (:class:`~poslens.study.claims.table.Claims`: ``table`` and ``inputs``).

    Raises:
        ValueError: When ``claims`` names an unknown claim, or a given table lacks a row a claim needs.
        TypeError: When ``given`` names neither a claim input nor a setting of a claim, ``inputs`` holds more than
            :data:`POSITIONAL` names, or an input is given both by position and by name.

    Example:
        >>> from poslens.study.claims.table import CLAIM_COLUMNS
        >>> out = evaluate()
        >>> list(out.table.columns) == CLAIM_COLUMNS, set(out.table["rule"]), set(out.table["verdict"]), len(out.inputs)
        (True, {'not measured'}, {'not measured'}, 0)
        >>> t = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
        ...                   figure_row("probe_r2", -0.2, -0.3, -0.1)])
        >>> evaluate(leakage=t, claims=["C1"]).table["verdict"].tolist()
        ['not supported', 'not supported']
    """
    wanted = set(CLAIMS if claims is None else claims)
    unknown = wanted - set(CLAIMS)
    if unknown:
        raise ValueError(f"unknown claim(s) {sorted(unknown)}; known: {list(CLAIMS)}")
    if len(inputs) > len(POSITIONAL):
        raise TypeError(f"evaluate() takes at most {len(POSITIONAL)} inputs by position ({', '.join(POSITIONAL)}); name the others")
    twice = set(POSITIONAL[: len(inputs)]) & set(given)
    if twice:
        raise TypeError(f"evaluate() got {sorted(twice)} both by position and by name")
    given = {**dict(zip(POSITIONAL, inputs, strict=False)), **given}
    inputs_read = dict.fromkeys(name for claim in CLAIMS.values() for name in claim.inputs)  # INPUTS, and a claim's added since
    settings_read = dict.fromkeys(name for claim in CLAIMS.values() for name in claim.settings)
    stray = set(given) - set(inputs_read) - set(settings_read)
    if stray:
        raise TypeError(
            f"evaluate() got unknown keyword(s) {sorted(stray)}; claim inputs: {', '.join(inputs_read)}; settings: {', '.join(settings_read)}"
        )
    rows: list[dict[str, Any]] = []
    for name, claim in CLAIMS.items():
        if name not in wanted:
            continue
        if claim.decide is None or any(given.get(part) is None for part in claim.parts):
            rows.append(not_measured_row(claim))
            continue
        read = {key: given[key] for key in claim.inputs if given.get(key) is not None}
        settings = {key: given[key] for key in claim.settings if given.get(key) is not None}
        rows.extend(claim.decide(**read, **settings))
    return Claims.from_rows(rows)


def rules_table() -> str:
    """The rule of every claim as a Markdown table, in the words :meth:`~poslens.study.claims.rules.Rule.text` writes.

    The methodology page shows this table (docs/_hooks/claim_rules.py puts it
    in at build time), so no page restates a rule by hand. A claim's
    :attr:`~poslens.study.claims.table.Claim.shown_rules` come first (C4's sign rule per comparison of
    :data:`~poslens.study.claims.c4_compare.C4_DIRECTIONS`, a compare part with a comparison table,
    methodology §9.1), then its :attr:`~poslens.study.claims.table.Claim.rules` (C4's of an older compare part).

    Returns:
        The table: one row per claim and rule, with the parts it reads.

    Example:
        >>> print(rules_table().splitlines()[2].split(";")[0])
        | C1 | leakage | supported if leakage_pattern_heldout ci_low > 0 and probe_r2 ci_low > 0
    """
    lines = ["| claim | reads | rule |", "|---|---|---|"]
    for name, claim in CLAIMS.items():
        reads = ", ".join(MEASURED_BY[name])
        for rule in (*claim.shown_rules, *claim.rules):
            lines.append(f"| {name} | {reads} | {rule.text().replace('|', '&#124;')} |")
    return "\n".join(lines)
