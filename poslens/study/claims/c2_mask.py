"""Claim C2, read from the leakage part: its rule, its :class:`~poslens.study.claims.table.Claim` and its rows.

C2 states that the mask source exists by construction: C_mask at layer 0 and over layers ≥ 1, and ρ_mask at layer 0
(methodology §9). :func:`claim_c2` looks its estimates up (:mod:`poslens.study.claims.lookup`), decides by
:func:`~poslens.study.claims.rules.verdict` and writes its rows.

Example:
    >>> C2.rules[0].text().split(";")[0].startswith("supported if")
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd  # noqa: F401 (the examples build tables with it)

from poslens.study.claims.lookup import (
    figure_row,  # noqa: F401 (the examples build tables with it)
    pick,
    rows_where,
    runs,
    tidy_table,
)
from poslens.study.claims.rules import ZERO, Condition, Estimate, Rule, verdict
from poslens.study.claims.table import REPORTED, Claim, Input, claim_row, keyed, model_label, with_roles

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
        "the synthetic controls of methodology §4.4 are checked by the test suite "
        "(tests/unit/measurement/test_leakage_controls.py), not by this table"
    ),
)
"""C2's rule (its words: ``C2_RULE.text()``)."""


def claim_c2(leakage: Any) -> list[dict[str, Any]]:
    """C2, the mask source exists by construction: C_mask > 0 at layer 0 and over layers ≥ 1, and C_mask > C_res at layer 0.

    Figures, per (model, variant), from the rows with intervention ``none``,
    head −1 (the aggregate over heads), query window ``all``:

    - ``c_mask`` at layer 0 and at layer −1 (the aggregate over layers ≥ 1, :data:`poslens.measurement.table.COLUMNS`);
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

    Rule: :data:`C2_RULE`, headline ``c_mask (layer 0)`` (:data:`C2`). The synthetic controls of methodology §4.4 (C_res = 0 for
    mask-only heads, clearly non-zero for absolute ones) are not table rows:
    the test suite checks them (``tests/unit/measurement/test_leakage_controls.py``).

    Five rows per model (c_mask at layer 0, c_mask at layer −1, c_res,
    rho_mask and count_share at layer 0), with the joint verdict.

    Args:
        leakage: The leakage part (a tidy DataFrame or a :class:`~poslens.measurement.result.Result`).

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`~poslens.study.claims.table.CLAIM_COLUMNS`.

    Example:
        >>> t = pd.DataFrame([figure_row("c_mask", 0.02, 0.01, 0.03, layer=0),
        ...                   figure_row("c_mask", 0.01, 0.005, 0.015, layer=-1),
        ...                   figure_row("c_res", 0.002, -0.001, 0.005, layer=0),
        ...                   figure_row("rho_mask", 0.9, 0.8, 1.0, layer=0),
        ...                   figure_row("count_share", 0.9, 0.8, 1.0, layer=0)])
        >>> [r["verdict"] for r in claim_c2(t)] == ["supported"] * 5
        True
    """
    t = tidy_table(leakage, "leakage")
    base = dict(head=-1, query_window="all", intervention="none")
    rows = []
    for model, variant in runs(rows_where(t, intervention="none"), "leakage", "intervention 'none'"):

        def pick_at(metric: str, layer: int, model: str = model, variant: str = variant) -> Estimate:
            label = "layer 0" if layer == 0 else "layers >= 1"
            return pick(t, "leakage", f"{metric} ({label})", metric=metric, layer=layer, model=model, variant=variant, **base)

        mask0, mask_deep, res0, rho0, share0 = (
            pick_at("c_mask", 0),
            pick_at("c_mask", -1),
            pick_at("c_res", 0),
            pick_at("rho_mask", 0),
            pick_at("count_share", 0),
        )
        figs = (mask0, mask_deep, res0, rho0, share0)
        outcome = verdict(C2_RULE, figs)
        difference = Estimate(
            "c_mask - c_res (layer 0)",
            mask0.value - res0.value,
            np.nan,
            np.nan,
            "c_mask (layer 0) - c_res (layer 0), a point value: the table holds no interval for it, the rule decides through rho_mask",
            statistic="difference",
            metric="",
            model=model,
            variant=variant,
            intervention="none",
            layer=0,
            head=-1,
            query_window="all",
        )
        inputs = with_roles(C2_RULE, figs, C2.headline, extra=(Input(difference, REPORTED),))
        for f in figs:
            rows.append(claim_row(C2, model_label(model, variant), f, C2_RULE.text(), outcome, inputs))
    return keyed(rows)


C2 = Claim(
    "C2",
    "the mask source exists by construction",
    parts=("leakage",),
    measured_by=(),
    rules=(C2_RULE,),
    headline="c_mask (layer 0)",
    decide=claim_c2,
)
"""C2: C_mask at layer 0 and over layers ≥ 1, and ρ_mask at layer 0 (:func:`claim_c2`)."""

DECLARES = (C2,)
"""The claim, for :mod:`poslens.study.claims`."""
