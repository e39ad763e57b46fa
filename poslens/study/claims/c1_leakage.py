"""Claim C1, read from the leakage part: its rule, its :class:`~poslens.study.claims.table.Claim` and its rows.

C1 states that attention patterns carry absolute position: the held-out leakage and the probe R² at the model aggregate
over all queries (methodology §9). :func:`claim_c1` looks its estimates up (:mod:`poslens.study.claims.lookup`),
decides by :func:`~poslens.study.claims.rules.verdict` and writes its rows. A rule's words are only ever
:meth:`~poslens.study.claims.rules.Rule.text` of its object.

Example:
    >>> C1.rules[0].text().split(";")[0]
    'supported if leakage_pattern_heldout ci_low > 0 and probe_r2 ci_low > 0'
"""

from __future__ import annotations

from typing import Any

import pandas as pd  # noqa: F401 (the examples build tables with it)

from poslens.study.claims.c2_mask import C2, C2_RULE, RHO_HALF, claim_c2  # noqa: F401 (its old path, poslens.study.claims_leakage, held C2 too)
from poslens.study.claims.lookup import (
    figure_row,  # noqa: F401 (the examples build tables with it)
    pick,
    rows_where,
    runs,
    tidy_table,
)
from poslens.study.claims.rules import ZERO, Condition, Rule, verdict
from poslens.study.claims.table import Claim, claim_row, keyed, model_label, with_roles

# --------------------------------------------------------------------------- C1


C1_RULE = Rule(
    supported_if=(Condition("leakage_pattern_heldout", "ci_low", ">", ZERO), Condition("probe_r2", "ci_low", ">", ZERO)),
    not_supported_if=(Condition("leakage_pattern_heldout", "ci_high", "<=", ZERO), Condition("probe_r2", "ci_high", "<=", ZERO)),
)
"""C1's rule (its words: ``C1_RULE.text()``)."""


def claim_c1(leakage: Any) -> list[dict[str, Any]]:
    """C1, attention patterns carry absolute position: held-out leakage and probe R².

    Figures, per (model, variant), from the rows with intervention ``none`` at
    the model aggregate (layer −1, head −1) over all queries (query window ``all``):
    ``leakage_pattern_heldout`` (cross-fitted L(log a), free of the optimism of
    the extra query-bin parameters) and ``probe_r2`` (held-out ridge probe to
    log(i + 1)).

    Rule: :data:`C1_RULE`, headline ``leakage_pattern_heldout`` (:data:`C1`).

    **Choice:** two rows per model, one per figure, both with the joint verdict.

    Args:
        leakage: The leakage part (a tidy DataFrame or a :class:`~poslens.measurement.result.Result`).

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`~poslens.study.claims.table.CLAIM_COLUMNS`.

    Example:
        >>> t = pd.DataFrame([figure_row("leakage_pattern_heldout", 0.05, 0.04, 0.06),
        ...                   figure_row("probe_r2", 0.3, -0.1, 0.7)])
        >>> [r["verdict"] for r in claim_c1(t)]
        ['inconclusive', 'inconclusive']
    """
    t = tidy_table(leakage, "leakage")
    base = dict(layer=-1, head=-1, query_window="all", intervention="none")
    rows = []
    for model, variant in runs(rows_where(t, intervention="none"), "leakage", "intervention 'none'"):
        figs = [pick(t, "leakage", metric=m, model=model, variant=variant, **base) for m in ("leakage_pattern_heldout", "probe_r2")]
        outcome = verdict(C1_RULE, figs)
        inputs = with_roles(C1_RULE, figs, C1.headline)
        for f in figs:
            rows.append(claim_row(C1, model_label(model, variant), f, C1_RULE.text(), outcome, inputs))
    return keyed(rows)


C1 = Claim(
    "C1",
    "attention patterns carry absolute position",
    parts=("leakage",),
    measured_by=(),
    rules=(C1_RULE,),
    headline="leakage_pattern_heldout",
    decide=claim_c1,
)
"""C1: held-out leakage and probe R² at the model aggregate over all queries (:func:`claim_c1`)."""

DECLARES = (C1,)
"""The claim, for :mod:`poslens.study.claims`."""
