"""Claim C7, read from the relativize part, and the relativize estimates C3 reports: :data:`C7_RULE`, :data:`C7` and rows.

A rule's words are only ever :meth:`~poslens.study.claims.rules.Rule.text` of its object.

Example:
    >>> C7.rules[0].text().split("; ")[1]
    'not supported if r (all) ci_low >= -0.1 and r (all) ci_high <= 0.1 (the interval within [-0.1, 0.1]: equivalence)'
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from poslens.mechanisms.attribution_table import LOSS_METRIC, R_METRIC, edit_label
from poslens.study.claims.lookup import rows_where, runs, where_text
from poslens.study.claims.rules import AnyOf, Condition, Estimate, Rule, verdict
from poslens.study.claims.table import Claim, claim_row, keyed, model_label, with_roles

# --------------------------------------------------------------------------- C7


PART_COLUMNS = ("model", "variant", "intervention", "calibration_size", "metric", "query_window", "value", "ci_low", "ci_high")
"""The columns of the relativize part's table that C3 and C7 read (:func:`~poslens.mechanisms.attribution.cumulative_attribution`)."""

C7_MARGIN = 0.10
"""C7's margin on r, read by :data:`C7_RULE`; fixed before the full run. C7 is two-sided: an r wholly below −margin
(the edit raises L: the earlier layers' absolute logits counteract position) supports it as one wholly above does."""

C7_RULE = Rule(
    supported_if=(
        AnyOf(
            (Condition("r (all)", "ci_low", ">", C7_MARGIN), Condition("r (all)", "ci_high", "<", -C7_MARGIN)),
            note=f"the interval wholly outside [{-C7_MARGIN:g}, {C7_MARGIN:g}], on either side: r > 0 when the edit lowers L, "
            "r < 0 when it raises L (the absolute logits counteract position)",
        ),
    ),
    not_supported_if=(
        Condition("r (all)", "ci_low", ">=", -C7_MARGIN),
        Condition("r (all)", "ci_high", "<=", C7_MARGIN, note=f"the interval within [{-C7_MARGIN:g}, {C7_MARGIN:g}]: equivalence"),
    ),
    not_supported_when="all",
    remark=(
        "r (all) = 1 - mean over layers >= 2 of L(log a) with every layer's absolute logits relativized in every column "
        "(each layer measured with exactly the layers below it edited) / unedited, on the same tokens, at the largest "
        "calibration size; r at the other calibration sizes, the matched-norm relative placebo and the change in "
        "next-token loss are reported, not used"
    ),
)
"""C7's rule (its words: ``C7_RULE.text()``)."""


def attribution_tables(x: Any) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The relativize part's rows of r (checked) and of the change in next-token loss (None when absent).

    Args:
        x: The relativize part (a :class:`~poslens.measurement.result.Result`), or its table.

    Returns:
        ``(r rows, loss rows)``: the rows of metric :data:`~poslens.mechanisms.attribution.R_METRIC` and of
        :data:`~poslens.mechanisms.attribution.LOSS_METRIC`.

    Raises:
        TypeError: When ``x`` is neither a result nor a DataFrame.
        ValueError: When the table lacks a column of :data:`PART_COLUMNS`.

    Example:
        >>> t = pd.DataFrame([dict(model="m", variant="base", intervention="relativize:all", calibration_size=8,
        ...                        metric="reduction_ge2", query_window="all", value=0.3, ci_low=0.2, ci_high=0.4)])
        >>> len(attribution_tables(t)[0]), attribution_tables(t)[1] is None
        (1, True)
    """
    table = getattr(x, "table", x)
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"attribution: expected the relativize part (a Result) or its table, got {type(x).__name__}")
    missing = [c for c in PART_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"attribution: the relativize part's table lacks column(s) {missing}")
    loss = table[table["metric"] == LOSS_METRIC]
    if loss.empty or "query_bin" not in loss.columns:
        return table[table["metric"] == R_METRIC], None
    return table[table["metric"] == R_METRIC], loss


def attribution_estimate(
    summary: pd.DataFrame, model: str, variant: str, mode: str, query_window: str = "all", calibration_size: int | None = None
) -> Estimate:
    """r of one relativization mode (or placebo) from the relativize part's rows, as a claim's input.

    Args:
        summary: The part's table, or its rows of r (:data:`PART_COLUMNS`).
        model: The model.
        variant: Its variant.
        mode: ``all``, ``key0``, ``all-but-key0`` or ``placebo:<mode>``.
        query_window: The window.
        calibration_size: The calibration size; default: the largest one there is for this mode.

    Returns:
        The figure, named ``r (<mode>)`` (with the calibration size when one is asked for).

    Raises:
        ValueError: When the part has no such row, or several.

    Example:
        >>> s = pd.DataFrame([dict(model="m", variant="base", intervention="relativize:all", calibration_size=n, metric="reduction_ge2",
        ...                        query_window="all", value=v, ci_low=v - 0.1, ci_high=v + 0.1) for n, v in [(8, 0.3), (16, 0.25)]])
        >>> attribution_estimate(s, "m", "base", "all").text(), attribution_estimate(s, "m", "base", "all", calibration_size=8).name
        ('r (all) = 0.25 [0.15, 0.35]', 'r (all, calibration size 8)')
    """
    edit = edit_label(mode)
    where = where_text(metric=R_METRIC, query_window=query_window, model=model, variant=variant) + f", intervention {edit!r}"
    rows = rows_where(summary, metric=R_METRIC, intervention=edit, query_window=query_window, model=model, variant=variant)
    if len(rows) == 0:
        raise ValueError(f"attribution: no row for {where}")
    size = int(rows["calibration_size"].max()) if calibration_size is None else int(calibration_size)
    rows = rows[rows["calibration_size"] == size]
    if len(rows) != 1:
        raise ValueError(f"attribution: {len(rows)} rows for {where}, calibration size {size}; expected exactly one")
    row = rows.iloc[0]
    name = f"r ({mode})" if calibration_size is None else f"r ({mode}, calibration size {size})"
    return Estimate(
        name,
        float(row["value"]),
        float(row["ci_low"]),
        float(row["ci_high"]),
        f"{where}, calibration size {size}: 1 - mean over layers >= 2 of L(log a) edited / unedited, paired jackknife",
        metric=R_METRIC,
        model=str(model),
        variant=str(variant),
        intervention=edit,
        head=-1,
        query_window=query_window,
        layer_first=2,
    )


def _loss_estimate(loss: pd.DataFrame, model: str, variant: str, edit: str) -> Estimate | None:
    """The change in next-token loss over all positions ≥ 1 under ``edit``, or None when the table has none."""
    rows = rows_where(loss, metric=LOSS_METRIC, intervention=edit, query_bin=-1, model=model, variant=variant)
    if len(rows) != 1:
        return None
    row = rows.iloc[0]
    return Estimate(
        f"loss_change ({edit})",
        float(row["value"]),
        float(row["ci_low"]),
        float(row["ci_high"]),
        f"metric 'loss_change' (nats per token, edited - unedited), edit {edit!r}, positions >= 1, "
        f"model {model!r}, variant {variant!r}, paired jackknife",
        metric=LOSS_METRIC,
        model=str(model),
        variant=str(variant),
        intervention=edit,
        query_window="all",
    )


def claim_c7(attribution: Any) -> list[dict[str, Any]]:
    """C7, later layers' absolute position depends on earlier layers' absolute logits (methodology §11).

    Estimate, per (model, variant) of the relativize part's rows of r: ``r (all)``,
    the reduction of mean L(log a) over layers ≥ 2 under the cumulative "every
    column" edit (each layer measured with exactly the layers below it
    relativized), query window ``all``, at the largest calibration size
    (:func:`attribution_estimate`).

    Rule: :data:`C7_RULE` (margin :data:`C7_MARGIN`, fixed before the full
    run; two-sided: ``supported`` when r's interval lies wholly outside
    [−margin, margin] on either side, the direction stated by r's sign;
    ``not supported`` is an equivalence test), headline ``r (all)`` (:data:`C7`).

    Reported beside it, not used: r at every other calibration size (the
    calibration's own noise), ``r (placebo:all)`` (the matched-norm, purely
    relative placebo), and the change in next-token loss under the edit and the
    placebo, when the part measured them.

    One row per (model, variant).

    Args:
        attribution: The relativize part (a :class:`~poslens.measurement.result.Result`), or its table.

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`~poslens.study.claims.table.CLAIM_COLUMNS` and their ``inputs``.

    Raises:
        ValueError: When the part has no ``relativize:all`` row of r for a model, or several.

    Example:
        >>> s = pd.DataFrame([dict(model="m", variant="base", intervention=edit, calibration_size=16, metric="reduction_ge2",
        ...                        query_window="all", value=v, ci_low=lo, ci_high=hi)
        ...                   for edit, v, lo, hi in [("relativize:all", 0.05, -0.02, 0.08), ("placebo:all", 0.01, -0.03, 0.05)]])
        >>> [(r["model"], r["verdict"], r["figure"]) for r in claim_c7(s)]
        [('m', 'not supported', 0.05)]
        >>> s.loc[s["intervention"] == "relativize:all", ["value", "ci_low", "ci_high"]] = (-0.9, -1.2, -0.6)   # the edit raises L: two-sided
        >>> [r["verdict"] for r in claim_c7(s)]
        ['supported']
    """
    summary, loss = attribution_tables(attribution)
    present = rows_where(summary, metric=R_METRIC, intervention=edit_label("all"))
    rows = []
    for model, variant in runs(present, "attribution", f"metric {R_METRIC!r} with intervention 'relativize:all'"):
        r_all = attribution_estimate(summary, model, variant, "all")
        mine = rows_where(summary, metric=R_METRIC, intervention=edit_label("all"), query_window="all", model=model, variant=variant)
        others = sorted({int(n) for n in mine["calibration_size"]} - {int(mine["calibration_size"].max())})
        reported = [attribution_estimate(summary, model, variant, "all", calibration_size=n) for n in others]
        if len(rows_where(summary, metric=R_METRIC, intervention="placebo:all", query_window="all", model=model, variant=variant)):
            reported.append(attribution_estimate(summary, model, variant, "placebo:all"))
        if loss is not None:
            reported += [f for f in (_loss_estimate(loss, model, variant, e) for e in ("relativize:all", "placebo:all")) if f]
        outcome = verdict(C7_RULE, (r_all,))
        inputs = with_roles(C7_RULE, (r_all, *reported), C7.headline)
        rows.append(claim_row(C7, model_label(model, variant), r_all, C7_RULE.text(), outcome, inputs))
    return keyed(rows)


C7 = Claim(
    "C7",
    "later layers' absolute position depends on earlier layers' absolute logits",
    parts=("attribution",),
    measured_by=(),
    rules=(C7_RULE,),
    headline="r (all)",
    decide=claim_c7,
)
"""C7: r of the cumulative every-column relativization at the largest calibration size (:func:`claim_c7`)."""

DECLARES = (C7,)
"""The claim, for :mod:`poslens.study.claims`."""
