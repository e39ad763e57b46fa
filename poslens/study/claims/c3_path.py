"""Claim C3, decided by the path-specific tests (methodology §12): does position reach the residual stream through key 0's RoPE phase?

C3 states that the residual source runs through position 0 and the sink-reading
heads. The test that can separate that path from the mask's normalization is the
key-0 phase freeze (edit P0): with the RoPE phase of every key-0 logit frozen at
one offset in every layer, the residual stream's position content must fall, and
fall by more than under the same freeze on key 1 (the sham). The rule, its
offset and its equivalence band were fixed before the full run that decides it.

The sink-path ablation (§7) and the split of the sink path by the mask-only
profile are reported beside the verdict, not used: the ablation removes the
mask's dilution and the phase signal together.

Example:
    >>> C3_RULE.text().split("; ")[0]
    'supported if fall ci_low > 0 and fall beyond sham ci_low > 0'
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd  # noqa: F401 (the examples build tables with it)

from poslens.fit.stats import t_quantile
from poslens.mechanisms.attribution_table import edit_label
from poslens.mechanisms.comparison_stats import detectable_difference
from poslens.study.claims.c7_relativize import attribution_estimate, attribution_tables
from poslens.study.claims.lookup import MODEL_AGGREGATE, pick, rows_where, runs, tidy_table, where_text
from poslens.study.claims.rules import ZERO, AllOf, Condition, Estimate, Rule, verdict
from poslens.study.claims.table import REPORTED, Claim, Input, claim_row, keyed, model_label, with_roles
from poslens.study.part_registry import providers

PRIMARY_OFFSET = 64
"""The offset D at which C3 reads the key-0 phase freeze and its sham; fixed before the full run."""
EQUIVALENCE = 0.01
"""C3's equivalence band on the fall of the probe R² (± this much R²); fixed before the full run."""
READOUT = "resid_probe_r2_ge2"
"""The readout C3 reads: held-out probe R² of log(i + 1) from the residual stream entering each block, mean over layers ≥ 2."""
PATH_COLUMNS = ("kind", "reference", "query_bin")
"""The columns of the path-specific tests' table that the lookups need beyond the tidy ones."""

C3_RULE = Rule(
    supported_if=(Condition("fall", "ci_low", ">", ZERO), Condition("fall beyond sham", "ci_low", ">", ZERO)),
    not_supported_if=(
        Condition("fall", "ci_high", "<", ZERO, note="the freeze raises it"),
        AllOf(
            (Condition("fall", "ci_low", ">=", -EQUIVALENCE), Condition("fall", "ci_high", "<=", EQUIVALENCE)),
            note=f"within ±{EQUIVALENCE:g} R²: equivalence",
        ),
    ),
    remark=(
        f"fall = the residual stream's probe R² of log(i + 1), mean over layers >= 2, unedited minus with the RoPE phase "
        f"of every key-0 logit frozen at offset D = {PRIMARY_OFFSET} in every layer (each layer read before its own edit), "
        f"paired over the same folds; fall beyond sham = the same against the freeze of key 1 at D = {PRIMARY_OFFSET}. "
        "Reported, not used: the split of the sink path (the mask's channel = sink-path ablation minus the mask-only "
        "profile; the rest at key 0 = the mask-only profile minus unedited), the ablation itself, L(log a) over "
        "layers >= 2 and the next-token loss under the freeze and the sham, and, when those parts were run, C_res's "
        "reduction under the ablation (methodology §7) and r (key0) of the relativizing edit (§11)"
    ),
)
"""C3's rule (its words: ``C3_RULE.text()``)."""


def _difference(table: pd.DataFrame, model: str, variant: str, intervention: str, reference: str, metric: str = READOUT) -> Estimate | None:
    """The paired difference ``intervention`` − ``reference`` of a layer −1 figure over all queries, or None if absent."""
    rows = rows_where(
        table, kind="difference", intervention=intervention, reference=reference, metric=metric, query_window="all", query_bin=-1, model=model
    )
    rows = rows[(rows["variant"] == variant) & (rows["layer"] == -1)]
    if len(rows) != 1:
        return None
    row = rows.iloc[0]
    where = where_text(metric=metric, layer=-1, query_window="all", intervention=intervention, model=model, variant=variant)
    return Estimate(
        f"{metric}: {intervention} − {reference}",
        float(row["value"]),
        float(row["ci_low"]),
        float(row["ci_high"]),
        f"{where}, minus reference {reference!r} on the same tokens, paired over the groups",
        statistic="paired difference",
        metric=metric,
        model=str(model),
        variant=str(variant),
        intervention=intervention,
        layer=-1,
        head=-1,
        query_window="all",
    )


def _fall(difference: Estimate, name: str, what: str) -> Estimate:
    """The fall (reference − edited) of a paired difference (edited − reference): its negation, interval swapped."""
    return Estimate(
        name,
        -difference.value,
        -difference.ci_high,
        -difference.ci_low,
        f"{what}: minus ({difference.where})",
        statistic="paired difference",
        metric=difference.metric,
        model=difference.model,
        variant=difference.variant,
        intervention=difference.intervention,
        layer=-1,
        head=-1,
        query_window="all",
    )


def _detectable(fall: Estimate, groups: int | None) -> Input | None:
    """The smallest fall the data could detect (two-sided 5%, 80% power), from the fall's interval and G − 1 degrees of freedom."""
    if not groups or groups < 2 or not np.isfinite(fall.ci_low) or not np.isfinite(fall.ci_high):
        return None
    se = (fall.ci_high - fall.ci_low) / (2 * t_quantile(groups))
    value = float(detectable_difference(se, groups - 1))
    return Input(
        Estimate(
            f"detectable |{fall.name}|",
            value,
            np.nan,
            np.nan,
            f"the smallest {fall.name} the data could detect (two-sided 5%, 80% power): (t_0.975 + t_0.8, {groups - 1} df) × se, "
            f"se from the interval of {fall.name}",
            statistic="detectable",
            metric=fall.metric,
            model=fall.model,
            variant=fall.variant,
            intervention=fall.intervention,
            layer=-1,
            head=-1,
            query_window="all",
        ),
        REPORTED,
    )


def _reported(path: pd.DataFrame, model: str, variant: str) -> list[Input]:
    key0, key1 = f"key0-phase:D={PRIMARY_OFFSET}", f"key1-phase:D={PRIMARY_OFFSET}"
    wanted = [
        ("sink-ablation", "sink-mask-only:1", READOUT),  # the mask's channel through the sink
        ("sink-mask-only:1", "none", READOUT),  # the rest at key 0
        ("sink-ablation", "none", READOUT),
        (key1, "none", READOUT),
        (key0, "none", "leakage_pattern_ge2"),
        (key0, "none", "next_token_loss"),
        (key1, "none", "next_token_loss"),
    ]
    out = []
    for intervention, reference, metric in wanted:
        estimate = _difference(path, model, variant, intervention, reference, metric)
        if estimate is not None:
            out.append(Input(estimate, REPORTED))
    return out


def claim_c3(path: Any, leakage: Any = None, ablation: Any = None, attribution: Any = None) -> list[dict[str, Any]]:
    """C3, the residual source runs through position 0 and sink-reading heads (methodology §12.6).

    Estimates, per (model, variant) of the path-specific tests' table: ``fall`` (the
    unedited residual probe R² over layers ≥ 2 minus the same with key 0's phase
    frozen at D = :data:`PRIMARY_OFFSET` in every layer) and ``fall beyond sham``
    (minus the same under the key-1 sham), both paired over the folds. Rule:
    :data:`C3_RULE`, headline ``fall`` (:data:`C3`).

    Reported beside them, not used: the smallest fall the data could detect
    (from each fall's interval, when ``path`` records its groups), the split of
    the sink path and the ablation on the same readout, L(log a) and the loss
    under the freeze, and with the other parts given, C_res at early queries and
    its reduction under the sink-path ablation (``leakage``, ``ablation``) and
    r (key0) of the relativize part.

    Two rows per model (the two decisive estimates), with the joint verdict.

    Args:
        path: The path-specific tests' part (a :class:`~poslens.measurement.result.Result` or its table).
        leakage: The leakage part, or None.
        ablation: The sink-ablation part, or None.
        attribution: The relativize part, or None.

    Returns:
        The claims rows.

    Raises:
        ValueError: When the path part lacks the freeze or the sham at D = :data:`PRIMARY_OFFSET`.

    Example:
        >>> def row(intervention, reference, value, low, high):
        ...     return dict(model="m", variant="base", intervention=intervention, layer=-1, head=-1, query_window="all",
        ...                 metric="resid_probe_r2_ge2", value=value, ci_low=low, ci_high=high, kind="difference",
        ...                 reference=reference, query_bin=-1)
        >>> t = pd.DataFrame([row("key0-phase:D=64", "none", -0.10, -0.14, -0.06),
        ...                   row("key0-phase:D=64", "key1-phase:D=64", -0.05, -0.08, -0.02)])
        >>> [(r["figure_name"], r["verdict"]) for r in claim_c3(t)]
        [('fall', 'supported'), ('fall beyond sham', 'supported')]
    """
    source = ", ".join(providers(C3.parts))  # the part that provides the tests, in messages
    table = tidy_table(path, source, extra=PATH_COLUMNS)
    key0, key1 = f"key0-phase:D={PRIMARY_OFFSET}", f"key1-phase:D={PRIMARY_OFFSET}"
    present = rows_where(table, kind="difference", intervention=key0, reference="none", metric=READOUT)
    rows = []
    for model, variant in runs(present, source, f"a difference of {READOUT!r} for {key0!r} against 'none'"):
        frozen = _difference(table, model, variant, key0, "none")
        sham = _difference(table, model, variant, key0, key1)
        if frozen is None or sham is None:
            missing = key0 if frozen is None else f"{key0} against {key1}"
            raise ValueError(f"path-tests: no single row of {READOUT!r} for {missing}, model {model!r}, variant {variant!r}")
        fall = _fall(frozen, "fall", f"the fall of the residual probe R² under the key-0 phase freeze at D = {PRIMARY_OFFSET}")
        beyond = _fall(sham, "fall beyond sham", f"the fall under the key-0 freeze beyond that under the key-1 sham, D = {PRIMARY_OFFSET}")
        groups = (getattr(path, "meta", {}) or {}).get("settings", {}).get("groups")
        extra = [d for d in (_detectable(fall, groups), _detectable(beyond, groups)) if d is not None]
        extra += _reported(table, model, variant)
        extra += _earlier_parts(leakage, ablation, attribution, model, variant)
        outcome = verdict(C3_RULE, (fall, beyond))
        inputs = with_roles(C3_RULE, (fall, beyond), C3.headline, extra=extra)
        for shown in (fall, beyond):
            rows.append(claim_row(C3, model_label(model, variant), shown, C3_RULE.text(), outcome, inputs))
    return keyed(rows)


def _earlier_parts(leakage: Any, ablation: Any, attribution: Any, model: str, variant: str) -> list[Input]:
    """C3's figures from before the path-specific tests, reported: C_res, its reduction by the ablation, r (key0)."""
    out = []
    if leakage is not None and ablation is not None:
        leak, abl = tidy_table(leakage, "leakage"), tidy_table(ablation, "ablation")
        sink = abl[abl["intervention"].astype(str).str.startswith("sink-ablation")]
        if len(rows_where(leak, metric="c_res", model=model, variant=variant)) and len(rows_where(sink, model=model, variant=variant)):
            out.append(
                Input(
                    pick(leak, "leakage", metric="c_res", query_window="early", intervention="none", model=model, variant=variant, **MODEL_AGGREGATE),
                    REPORTED,
                )
            )
            label = rows_where(sink, model=model, variant=variant)["intervention"].iloc[0]
            red = pick(abl, "ablation", metric="reduction", query_window="early", intervention=label, model=model, variant=variant, **MODEL_AGGREGATE)
            out.append(Input(red, REPORTED))
    if attribution is not None:
        summary = attribution_tables(attribution)[0]
        if len(rows_where(summary, intervention=edit_label("key0"), model=model, variant=variant)):
            out.append(Input(attribution_estimate(summary, model, variant, "key0"), REPORTED))
    return out


C3 = Claim(
    "C3",
    "the residual source runs through position 0 and sink-reading heads",
    parts=("path",),
    measured_by=(),
    rules=(C3_RULE,),
    headline="fall",
    reads=("leakage", "ablation", "attribution"),  # reported beside the verdict when they were measured
    decide=claim_c3,
)
"""C3: the fall of the residual stream's position content under the key-0 phase freeze, and beyond the sham (:func:`claim_c3`)."""

DECLARES = (C3,)
"""The claim, for :mod:`poslens.study.claims`."""
