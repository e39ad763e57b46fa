"""Claim C6, read from the fingerprint part: its rule, :data:`C6` and its rows.

C6's rule carries settings (the tolerance on the BOS dispersion and the level of its readout's permutation test), so
it is built by a factory (:func:`c6_rule`) from the settings :func:`poslens.study.claims.evaluate` is given; the claim
object holds the rule at the default settings.

Example:
    >>> C6.rules[0].text() == c6_rule(1e-5, 0.05).text()
    True
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from poslens.study.claims.lookup import (
    figure_row,  # noqa: F401 (the examples build tables with it)
    pick,
    runs,
    select,
    tidy_table,
    where_text,
)
from poslens.study.claims.rules import ZERO, Bound, Condition, Estimate, Rule, as_point, verdict
from poslens.study.claims.table import Claim, claim_row, keyed, model_label, with_roles

# --------------------------------------------------------------------------- C6


def _readout_chance(t: pd.DataFrame, model: str, variant: str) -> tuple[Estimate, int]:
    """The ``readout_chance`` row and its K; ``ValueError`` unless the value is 1/K for an integer K ≥ 2."""
    chance = pick(t, "fingerprint", metric="readout_chance", layer=-1, head=-1, intervention="position0:varied", model=model, variant=variant)
    k = round(1.0 / chance.value) if np.isfinite(chance.value) and 0.0 < chance.value <= 0.5 else 0
    if k < 2 or abs(chance.value - 1.0 / k) > 1e-6:  # float32 round trips keep 1/K to ~1e-8
        raise ValueError(
            f"fingerprint: readout_chance = {chance.value:.4g} for {chance.where} is not 1/K for K >= 2 position-0 tokens; "
            "a readout whose accuracy cannot exceed chance by design (one class, or a majority-class chance level from an "
            "earlier fingerprint) cannot be judged: rerun poslens.mechanisms.fingerprint.fingerprint"
        )
    return chance, k


C6_TOLERANCE = 1e-5
"""The largest BOS dispersion C6 counts as constant: ``evaluate``'s ``c6_tolerance`` by default."""

C6_ALPHA = 0.05
"""The level of C6's permutation test of the readout: ``evaluate``'s ``c6_alpha`` by default."""


def c6_rule(tolerance: float = C6_TOLERANCE, alpha: float = C6_ALPHA) -> Rule:
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


def claim_c6(fingerprint: Any, tolerance: float = C6_TOLERANCE, alpha: float = C6_ALPHA) -> list[dict[str, Any]]:
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

    Rule: ``c6_rule(tolerance, alpha)`` (:func:`c6_rule`), headline
    ``dispersion (none)`` (:data:`C6`). An accuracy interval above 1/K that the
    permutation null does not confirm leaves C6 ``inconclusive``: the fold
    interval rests on few folds, the null on the same design.

    Three rows per model (bos dispersion maximum, none dispersion, readout
    accuracy), with the joint verdict.

    Args:
        fingerprint: The fingerprint part.
        tolerance: The largest BOS dispersion that counts as constant.
        alpha: The level of the readout's permutation test.

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`~poslens.study.claims.table.CLAIM_COLUMNS`.

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
    t = tidy_table(fingerprint, "fingerprint")
    t = t[t["head"] == -1]
    rows = []
    present = t[t["intervention"].astype(str).isin(["position0:bos", "position0:none", "position0:varied"])]
    for model, variant in runs(present, "fingerprint", "interventions 'position0:bos', 'position0:none' or 'position0:varied' with head -1"):
        bos = select(t, "fingerprint", "dispersion", intervention="position0:bos", model=model, variant=variant)
        bos = bos[bos["layer"] >= 0]
        where = where_text(metric="dispersion", head=-1, intervention="position0:bos", model=model, variant=variant)
        if len(bos) == 0:
            raise ValueError(f"fingerprint: no per-layer rows (layer >= 0) for {where}")
        if bos["layer"].duplicated().any():
            raise ValueError(f"fingerprint: several rows per layer for {where}")
        values = bos["value"].to_numpy(dtype=float)
        top = int(np.nanargmax(values)) if np.isfinite(values).any() else 0
        bos_max = float(np.max(values))  # NaN if any layer is NaN: then neither side of the rule holds
        top_row = bos.iloc[top]
        first, last = int(bos["layer"].min()), int(bos["layer"].max())
        bos_fig = Estimate(
            "max dispersion (bos)",
            bos_max,
            float(top_row["ci_low"]),
            float(top_row["ci_high"]),
            f"maximum over layers {first}..{last} of {where} (at layer {int(top_row['layer'])})",
            statistic="max over layers",
            metric="dispersion",
            model=model,
            variant=variant,
            intervention="position0:bos",
            layer=int(top_row["layer"]),
            head=-1,
            layer_first=first,
            layer_last=last,
        )
        none = pick(
            t, "fingerprint", "dispersion (none)", metric="dispersion", layer=-1, head=-1, intervention="position0:none", model=model, variant=variant
        )
        varied = dict(layer=-1, head=-1, intervention="position0:varied", model=model, variant=variant)
        acc = pick(t, "fingerprint", metric="readout_accuracy", **varied)
        chance, k = _readout_chance(t, model, variant)
        null = pick(t, "fingerprint", "readout_chance_permuted (null mean, central 95%)", metric="readout_chance_permuted", **varied)
        p_value = pick(t, "fingerprint", metric="readout_p_value", **varied)
        chance = dataclasses.replace(as_point(chance), where=f"{chance.where} (1/K, K = {k} position-0 tokens)")
        p_value = as_point(p_value)
        outcome = verdict(rule, (bos_fig, none, acc, chance, p_value))
        inputs = with_roles(rule, (bos_fig, none, acc, chance, p_value, null), C6.headline)
        for f in (bos_fig, none, acc):
            rows.append(claim_row(C6, model_label(model, variant), f, rule.text(), outcome, inputs))
    return keyed(rows)


C6 = Claim(
    "C6",
    "the fingerprint is constant with auto-BOS, varies otherwise",
    parts=("fingerprint",),
    measured_by=(),
    rules=(c6_rule(),),
    headline="dispersion (none)",
    settings=("c6_tolerance", "c6_alpha"),
    decide=lambda fingerprint, c6_tolerance=C6_TOLERANCE, c6_alpha=C6_ALPHA: claim_c6(fingerprint, c6_tolerance, c6_alpha),
)
"""C6: the position-0 residual's dispersion with and without BOS and its readout (:func:`claim_c6`)."""

DECLARES = (C6,)
"""The claim, for :mod:`poslens.study.claims`."""
