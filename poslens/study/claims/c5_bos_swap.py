"""Claim C5, read from the BOS-replacement part: its rule, :data:`C5` and its rows.

C5's rule carries settings (its target and band), so it is built by a factory (:func:`c5_rule`) from the settings
:func:`poslens.study.claims.evaluate` is given; the claim object holds the rule at the default settings. A rule's
words are only ever :meth:`~poslens.study.claims.rules.Rule.text` of its object.

Example:
    >>> C5.rules[0].text() == c5_rule(0.4, 0.1).text()
    True
"""

from __future__ import annotations

from typing import Any

import pandas as pd  # noqa: F401 (the examples build tables with it)

from poslens.study.claims.c6_fingerprint import C6, c6_rule, claim_c6  # noqa: F401 (its old path, poslens.study.claims_position0, held C6 too)
from poslens.study.claims.lookup import (
    MODEL_AGGREGATE,
    figure_row,  # noqa: F401 (the examples build tables with it)
    pick,
    rows_where,
    runs,
    tidy_table,
)
from poslens.study.claims.rules import ZERO, Condition, Rule, threshold, verdict
from poslens.study.claims.table import DECIDES, Claim, Input, claim_row, keyed, model_label, with_roles

# --------------------------------------------------------------------------- C5


C5_TARGET = 0.4
"""The reduction of C_res at early queries C5 expects (methodology §9): ``evaluate``'s ``c5_target`` by default."""

C5_BAND = 0.1
"""Half-width of C5's band around :data:`C5_TARGET`: ``evaluate``'s ``c5_band`` by default."""


def c5_rule(target: float = C5_TARGET, band: float = C5_BAND) -> Rule:
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


def claim_c5(bos_swap: Any, target: float = C5_TARGET, band: float = C5_BAND, query_window: str = "early") -> list[dict[str, Any]]:
    """C5, BOS replacement removes about 40% of C_res at early queries.

    Figures, per (model, variant) and per replacement kind (intervention
    starting with ``bos:``, e.g. ``bos:mean``, ``bos:zero``, ``bos:noise``,
    ``bos:token:…``): ``reduction`` = 1 − C_res(after)/C_res(before) at the
    model aggregate (layer −1, head −1), query window ``early``. One row per kind,
    each with its own verdict.

    Rule: ``c5_rule(target, band)`` (:func:`c5_rule`), headline ``reduction`` (:data:`C5`).

    Args:
        bos_swap: The BOS-replacement part.
        target: The reduction C5 expects.
        band: Half-width of the band around ``target``.
        query_window: The window the figures are read in.

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`~poslens.study.claims.table.CLAIM_COLUMNS`.

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
    t = tidy_table(bos_swap, "bos_swap")
    swaps = t[t["intervention"].astype(str).str.startswith("bos:")]
    rows = []
    for model, variant in runs(swaps, "bos_swap", "an intervention starting with 'bos:'"):
        kinds = sorted(rows_where(swaps, model=model, variant=variant)["intervention"].astype(str).unique())
        for kind in kinds:
            f = pick(t, "bos_swap", metric="reduction", query_window=query_window, intervention=kind, model=model, variant=variant, **MODEL_AGGREGATE)
            inputs = with_roles(rule, (f,), C5.headline, extra=(Input(target_fig, DECIDES), Input(band_fig, DECIDES)))
            rows.append(claim_row(C5, f"{model_label(model, variant)}, {kind}", f, rule.text(), verdict(rule, (f,)), inputs))
    return keyed(rows)


C5 = Claim(
    "C5",
    "BOS replacement removes ~40% of C_res at early queries",
    parts=("bos_swap",),
    measured_by=(),
    rules=(c5_rule(),),
    headline="reduction",
    settings=("c5_target", "c5_band"),
    decide=lambda bos_swap, c5_target=C5_TARGET, c5_band=C5_BAND: claim_c5(bos_swap, c5_target, c5_band),
)
"""C5: the reduction of C_res at early queries per BOS replacement kind (:func:`claim_c5`), one verdict per kind."""

DECLARES = (C5,)
"""The claim, for :mod:`poslens.study.claims`."""
