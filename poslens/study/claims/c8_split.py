"""Claim C8, decided by the sink path's split (methodology §13.5): does the sink path's position run mostly through the mask's count?

In the sink-reading heads, the two-factor Shapley split of the residual stream's
position (read on V, the unedited code) divides the sink path's share between the
mask's count (edit m) and key 0's RoPE phase (edit p). C8 is stated as "mostly the
mask's count": **supported** where the two order-specific shares r₁ and r₂ both have
intervals above 0.5 and φ_m exceeds its sham's effect by more than 0.1·(φ_m + φ_p);
**not supported** ("mostly key 0's phase") where both lie below 0.5 and φ_p exceeds
its sham's effect likewise; **inconclusive** otherwise, also where the split has no
share (:func:`~poslens.fit.split_figures.no_share_reason`), with the reason. The
row's figure is r₁ on V; the sink path's total on V and on R², the shares and the
every-head phase freeze are reported beside it.

Example:
    >>> C8_RULE.text().split("; ")[0]
    'supported if r1 ci_low > 0.5 and r2 ci_low > 0.5 and φ_m beyond sham ci_low > 0'
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from poslens.fit import split_figures as fig
from poslens.study.claims.lookup import runs, tidy_table
from poslens.study.claims.rules import ZERO, AllOf, Condition, Estimate, Rule, verdict
from poslens.study.claims.table import REPORTED, Claim, Input, claim_row, keyed, model_label, with_roles
from poslens.study.part_registry import providers

SPLIT_COLUMNS = ("readout", "kind")
"""The columns of the split's table that the lookups need beyond the tidy ones."""
HALF = 0.5
"""The order-specific shares' threshold: above it on both orders, the mask's count carries most of the sink path."""

C8_RULE = Rule(
    supported_if=(Condition("r1", "ci_low", ">", HALF), Condition("r2", "ci_low", ">", HALF), Condition("φ_m beyond sham", "ci_low", ">", ZERO)),
    not_supported_if=(
        AllOf(
            (Condition("r1", "ci_high", "<", HALF), Condition("r2", "ci_high", "<", HALF), Condition("φ_p beyond sham", "ci_low", ">", ZERO)),
            note="mostly key 0's phase",
        ),
    ),
    remark=(
        "read on V (the unedited probe applied to the edited runs), mean over layers >= 2, in the sink-reading heads; "
        "r1 = (f0 - f_m)/(f0 - f_mp), r2 = (f_p - f_mp)/(f0 - f_mp); φ_x beyond sham = φ_x minus its sham's effect minus "
        "0.1·(φ_m + φ_p). Inconclusive also where the split has no share: the interval of φ_m + φ_p holds 0, φ_m and φ_p "
        "have intervals of opposite sign, share_m's interval leaves [0, 1], or an edit raises f above f0 beyond its "
        "interval (each beyond a numerical margin of 1e-5). Reported, not used: the sink path's total f0 - f_s on V and "
        "on R² (the refitted probe), its share of f0, share_m, φ_m, φ_p, the interaction, and the change of V and R² "
        "with key 0's phase frozen in every head"
    ),
)
"""C8's rule (its words: ``C8_RULE.text()``)."""

#: The derived figures C8 reads (decides) and reports, by the names its inputs carry.
DECIDES = {"r1": "r1", "r2": "r2", "phi_m_beyond_sham": "φ_m beyond sham", "phi_p_beyond_sham": "φ_p beyond sham"}
REPORTS = ("sink_total", "sink_share", "share_m", "phi_m", "phi_p", "interaction", "coverage", "p0_every_head_change")


def _estimate(row: pd.Series, name: str, readout: str) -> Estimate:
    return Estimate(
        name,
        float(row["value"]),
        float(row["ci_low"]),
        float(row["ci_high"]),
        f"{row['metric']} of the sink-path split, readout {readout}, layers >= 2, model {row['model']!r}, variant {row['variant']!r}",
        statistic="row",
        metric=str(row["metric"]),
        model=str(row["model"]),
        variant=str(row["variant"]),
        intervention="split",
        layer=None,  # a mean over the layers from fig.FIRST_LAYER on, which layer −1 ("layers ≥ 1") would misname
        head=-1,
        query_window="all",
        layer_first=fig.FIRST_LAYER,
    )


def _intervals(table: pd.DataFrame, readout: str) -> dict[str, tuple[float, float]]:
    """The intervals :func:`~poslens.fit.split_figures.no_share_reason` reads, from one (model, variant)'s rows."""
    rows = table[(table["readout"] == readout) & (table["layer"] == -1)]
    out = {str(r["metric"]): (float(r["ci_low"]), float(r["ci_high"])) for _, r in rows[rows["kind"] == "derived"].iterrows()}
    for _, r in rows[rows["kind"] == "difference"].iterrows():
        out[f"change_{r['intervention']}"] = (float(r["ci_low"]), float(r["ci_high"]))
    level = rows[(rows["kind"] == "level") & (rows["intervention"] == "none")]
    out["f0"] = (float(level["ci_low"].iloc[0]), float(level["ci_high"].iloc[0])) if len(level) == 1 else (np.nan, np.nan)
    return out


def _pick(derived: pd.DataFrame, metric: str, readout: str, name: str, model: str, variant: str) -> Estimate:
    """The one derived row ``metric`` on ``readout`` as an estimate named ``name``."""
    found = derived[(derived["metric"] == metric) & (derived["readout"] == readout)]
    if len(found) != 1:
        raise ValueError(f"sink-split: no single derived row {metric!r} on readout {readout!r}, model {model!r}, variant {variant!r}")
    return _estimate(found.iloc[0], name, readout)


def claim_c8(split: Any) -> list[dict[str, Any]]:
    """C8, the sink path's position runs mostly through the mask's count, not key 0's phase (methodology §13.5).

    One row per (model, variant) of the sink-split part: its figure r₁ on V (the mask's share with m removed first), its verdict
    by :data:`C8_RULE`, made inconclusive where the split has no share (the reason is an input, reported).

    Args:
        split: The sink-split part (a :class:`~poslens.measurement.result.Result` or its table).

    Returns:
        The claims rows.

    Raises:
        ValueError: When a (model, variant) lacks a figure C8 reads.

    Example:
        >>> def row(metric, value, low, high, kind="derived", intervention="split", readout="V"):
        ...     return dict(model="m", variant="base", intervention=intervention, layer=-1, head=-1, query_window="all",
        ...                 metric=metric, value=value, ci_low=low, ci_high=high, readout=readout, kind=kind)
        >>> rows = [row(name, 0.8, 0.7, 0.9) for name in ("r1", "r2", "share_m")]
        >>> rows += [row(name, 0.3, 0.2, 0.4) for name in ("phi_m", "phi_sum", "sink_total", "phi_m_beyond_sham")]
        >>> rows += [row(name, 0.05, 0.01, 0.09) for name in ("phi_p", "phi_p_beyond_sham")]
        >>> rows += [row("f", 1.0, 0.9, 1.1, "level", "none")]
        >>> rows += [row("f_change", -0.3, -0.4, -0.2, "difference", edit) for edit in ("m", "p", "mp", "s")]
        >>> [(r["figure_name"], r["verdict"]) for r in claim_c8(pd.DataFrame(rows))]
        [('r1', 'supported')]
    """
    source = ", ".join(providers(C8.parts))  # the part that provides the split, in messages
    table = tidy_table(split, source, extra=SPLIT_COLUMNS)
    present = table[(table["kind"] == "derived") & (table["metric"] == "r1") & (table["readout"] == "V")]
    out = []
    for model, variant in runs(present, source, "a derived row 'r1' on readout 'V'"):
        mine = table[(table["model"] == model) & (table["variant"] == variant) & (table["layer"] == -1)]
        derived = mine[mine["kind"] == "derived"]

        decides = [_pick(derived, metric, "V", name, model, variant) for metric, name in DECIDES.items()]
        extra = [
            Input(_pick(derived, metric, readout, f"{metric} ({readout})", model, variant), REPORTED)
            for readout in ("V", "R2")
            for metric in REPORTS
            if ((derived["metric"] == metric) & (derived["readout"] == readout)).any()
        ]
        outcome = verdict(C8_RULE, decides)
        reason = fig.no_share_reason(_intervals(mine, "V"))
        if reason is not None:
            outcome = "inconclusive"
            extra.append(Input(Estimate(f"no share: {reason}", np.nan, np.nan, np.nan, reason, statistic="threshold"), REPORTED))
        inputs = with_roles(C8_RULE, decides, C8.headline, extra=extra)
        out.append(claim_row(C8, model_label(model, variant), decides[0], C8_RULE.text(), outcome, inputs))
    return keyed(out)


C8 = Claim(
    "C8",
    "the sink path's position runs mostly through the mask's count, not key 0's RoPE phase",
    parts=("split",),
    measured_by=(),
    rules=(C8_RULE,),
    headline="r1",
    decide=claim_c8,
)
"""C8: the split of the sink path's share of the residual stream's position (:func:`claim_c8`)."""

DECLARES = (C8,)
"""The claim, for :mod:`poslens.study.claims`."""
