"""Claim C4, read from the architecture comparison: the cases compare recorded, its rules, :data:`C4` and its rows.

C4 is decided per comparison with the standard case and the comparisons'
verdicts are combined by :func:`~poslens.study.claims.rules.joint`. A compare part
with a comparison table (methodology §9.1) is read by
:func:`claim_c4_differences`: one sign rule (:func:`c4_sign_rule`) per
difference, trend or depth slope whose direction :data:`C4_DIRECTIONS` fixes.
An older compare part, without that table, is read by :func:`claim_c4`: each
case's interval against the standard's (:data:`C4_RULES`) and the sliding
cases' depth slopes (:data:`C4_SLOPE_RULE`). Every row's case is the one
:func:`poslens.mechanisms.architectures.compare` recorded (its result's
``meta["cases"]``, see :func:`recorded_cases`); nothing is read from a
variant's name. A rule's words are only ever
:meth:`~poslens.study.claims.rules.Rule.text` of its object. Longer than 400
lines because it is one claim, read from both forms of the compare part: the
comparison table and, for older parts, the cases' own intervals.

Example:
    >>> C4_RULES["ntk"].text().split(";")[0]
    'supported if c_res (ntk) ci_high < c_res (standard) ci_low (wholly below)'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from poslens.errors import InputError
from poslens.fit.stats import depth_slope
from poslens.study.claims.lookup import MODEL_AGGREGATE, figure_row, pick, select, tidy_table, where_text  # noqa: F401 (figure_row: examples)
from poslens.study.claims.rules import JOINT, ZERO, Bound, Condition, Estimate, Rule, joint, verdict
from poslens.study.claims.table import REPORTED, Claim, Input, claim_row, keyed, model_label, with_roles

CONFIDENCE = 0.95
"""Level of the interval computed here (the C4 slope); the tables carry their own 95% intervals."""

CASES = ("standard", "ntk", "sliding")
"""The architecture cases C4 compares."""

# --------------------------------------------------------------------------- C4


def recorded_cases(cases: Iterable[Any]) -> dict[tuple[str, str], str]:
    """(model, variant) → case, from the cases compare recorded (:class:`~poslens.mechanisms.architectures.Case` or dicts).

    Args:
        cases: Case objects, or dicts with ``model``, ``variant`` and ``case``.

    Returns:
        The case of each (model, variant).

    Raises:
        InputError: When a case lacks a field, or a (model, variant) is recorded with two cases.

    Example:
        >>> recorded_cases([dict(model="s", variant="ntk:4", case="ntk", inference_time=True)])
        {('s', 'ntk:4'): 'ntk'}
    """
    found: dict[tuple[str, str], str] = {}
    for c in cases:
        get = c.get if isinstance(c, Mapping) else lambda name, c=c: getattr(c, name, None)
        model, variant, case = get("model"), get("variant"), get("case")
        if model is None or variant is None or case is None:
            raise InputError(f"comparison: a recorded case needs a model, a variant and a case, got {c!r}")
        key = (str(model), str(variant))
        if found.get(key, case) != case:
            raise InputError(f"comparison: {key} is recorded with two cases, {found[key]!r} and {case!r}")
        found[key] = str(case)
    return found


def label_cases(comparison: Any, cases: Iterable[Any] | None = None) -> pd.DataFrame:
    """A copy of the comparison's table with a ``case`` column for :func:`claim_c4`, from the cases ``compare`` recorded.

    Each row's case is the one :func:`poslens.mechanisms.architectures.compare`
    measured its (model, variant) as: the ``case`` of the
    :class:`~poslens.mechanisms.architectures.Case` it built, recorded in the
    result's metadata (``meta["cases"]``). Nothing is read from the variant's
    name, so an NTK-trained model is an ``ntk`` case when it was compared as one.
    ``cases`` (Case objects, or dicts with ``model``, ``variant`` and ``case``)
    replaces the recorded list, e.g. for a bare table. A (model, variant) that
    no recorded case names gets ``None`` and is left out of C4.

    Args:
        comparison: The result of ``compare`` (a :class:`~poslens.measurement.result.Result`), or its tidy table with ``cases``.
        cases: The cases the table was measured as; default: the ones the result records.

    Returns:
        The labelled copy of the table.

    Raises:
        InputError: When no cases are given or recorded (and the table has no ``case`` column), or a (model, variant)
            is recorded with two cases.

    Example:
        >>> t = pd.DataFrame([figure_row("c_res", 0, 0, 0, model=m, variant=v) for m, v in
        ...     [("smollm2-135m", "base"), ("smollm2-135m", "ntk:4"), ("gemma3-270m", "base"), ("other", "base")]])
        >>> recorded = [dict(model="smollm2-135m", variant="base", case="standard"),
        ...             dict(model="smollm2-135m", variant="ntk:4", case="ntk"), dict(model="gemma3-270m", variant="base", case="sliding")]
        >>> label_cases(t, recorded)["case"].tolist()
        ['standard', 'ntk', 'sliding', None]
        >>> from poslens.measurement.result import Result
        >>> label_cases(Result(t, {"cases": recorded}))["case"].tolist()
        ['standard', 'ntk', 'sliding', None]
    """
    t = tidy_table(comparison, "comparison").copy()
    if cases is None:
        cases = (getattr(comparison, "meta", None) or {}).get("cases")
        if cases is None:
            if "case" in t.columns:
                return t
            raise InputError(
                "comparison: no cases recorded (meta['cases'] of poslens.mechanisms.architectures.compare) and none given; "
                "pass cases=[Case(model, variant, case), ...] or rerun poslens compare"
            )
    by_key = recorded_cases(cases)
    t["case"] = pd.Series([by_key.get((str(m), str(v))) for m, v in zip(t["model"], t["variant"], strict=False)], index=t.index, dtype=object)
    return t


C4_RULES = {
    "ntk": Rule(
        supported_if=(Condition("c_res (ntk)", "ci_high", "<", Bound("c_res (standard)", "ci_low"), note="wholly below"),),
        not_supported_if=(Condition("c_res (ntk)", "ci_low", ">", Bound("c_res (standard)", "ci_high"), note="wholly above"),),
    ),
    "sliding": Rule(
        supported_if=(Condition("c_res (sliding)", "ci_low", ">", Bound("c_res (standard)", "ci_high"), note="wholly above"),),
        not_supported_if=(Condition("c_res (sliding)", "ci_high", "<", Bound("c_res (standard)", "ci_low"), note="wholly below"),),
    ),
}
"""C4's rule for one comparison with the standard case, per case (its words: ``C4_RULES[case].text()``).
The comparisons' verdicts are combined by :func:`~poslens.study.claims.rules.joint`."""

C4_SLOPE_RULE = Rule(
    supported_if=(Condition("c_res slope per layer", "ci_low", ">", ZERO),),
    not_supported_if=(Condition("c_res slope per layer", "ci_high", "<=", ZERO),),
)
"""C4's rule on the depth slope of a sliding case, accumulation with depth (its words: ``C4_SLOPE_RULE.text()``)."""


#: The query window C4 reads, part of its rule: an imposed window of W changes nothing for queries i < W, so the
#: cases are compared over all queries (the claims read no default window; each claim names its own).
C4_QUERY_WINDOW = "all"


def claim_c4(comparison: Any, query_window: str = C4_QUERY_WINDOW) -> list[dict[str, Any]]:
    """C4, NTK suppresses, sliding window accumulates, standard in between.

    ``comparison`` is a tidy table of several (model, variant) runs with an
    extra column ``case`` ∈ {``standard``, ``ntk``, ``sliding``}, added by the
    caller (e.g. with :func:`label_cases`); rows with another case, or none, are
    ignored. There must be exactly one standard (model, variant) and at least
    one NTK and one sliding case. Only intervention ``none`` is used.

    Comparison rows, one per NTK or sliding case: ``c_res`` at the model
    aggregate (layer −1, head −1) in ``query_window`` (default :data:`C4_QUERY_WINDOW`, ``all``),
    against the standard's. Each comparison gets the verdict of its case's rule
    (:data:`C4_RULES`). Every comparison row carries the joint verdict
    (:func:`~poslens.study.claims.rules.joint`); its ``own_verdict`` says how its own
    comparison came out. A case's comparison and depth rows share its ``group``
    (the compared model label) and carry its ``case``.

    Depth rows, one per sliding case: the least-squares slope of per-layer
    ``c_res`` (head −1, same query window) on the layer index over layers ≥ 1, in
    ΔR² per layer, with a 95% **delete-one-layer jackknife** interval (see
    :func:`poslens.fit.stats.depth_slope`; the layers' own intervals are not
    used, since they share sequences and are not independent), decided by
    :data:`C4_SLOPE_RULE`.

    Args:
        comparison: The comparison part, with a ``case`` column.
        query_window: The window the figures are read in.

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`~poslens.study.claims.table.CLAIM_COLUMNS`.

    Raises:
        ValueError: When a (model, variant) has more than one case, there is not exactly one standard,
            or an NTK or sliding case is missing.

    Example:
        >>> rows = [figure_row("c_res", v, lo, hi, model=m, variant=var, query_window="all", layer=layer)
        ...         for m, var, layer, v, lo, hi in [
        ...             ("smollm2-135m", "base", -1, 0.010, 0.008, 0.012),
        ...             ("smollm2-135m", "ntk:4", -1, 0.002, 0.001, 0.003),
        ...             ("gemma3-270m", "base", -1, 0.030, 0.020, 0.040),
        ...             ("gemma3-270m", "base", 1, 0.01, 0.0, 0.02),
        ...             ("gemma3-270m", "base", 2, 0.03, 0.02, 0.04),
        ...             ("gemma3-270m", "base", 3, 0.05, 0.04, 0.06)]]
        >>> cases = [dict(model="smollm2-135m", variant="base", case="standard"),
        ...          dict(model="smollm2-135m", variant="ntk:4", case="ntk"), dict(model="gemma3-270m", variant="base", case="sliding")]
        >>> out = claim_c4(label_cases(pd.DataFrame(rows), cases))
        >>> [(r["model"], r["verdict"]) for r in out]  # doctest: +NORMALIZE_WHITESPACE
        [('smollm2-135m (ntk:4) vs smollm2-135m', 'supported'),
         ('gemma3-270m vs smollm2-135m', 'supported'),
         ('gemma3-270m: slope of c_res over layers >= 1', 'supported')]
    """
    t = tidy_table(comparison, "comparison", extra=("case",))
    t = t[t["case"].isin(CASES) & (t["intervention"] == "none")]
    pairs = t[["model", "variant", "case"]].drop_duplicates()
    doubled = pairs[pairs.duplicated(["model", "variant"], keep=False)]
    if len(doubled):
        doubled_runs = sorted(set(zip(doubled["model"], doubled["variant"], strict=True)))
        raise ValueError(f"comparison: (model, variant) labelled with more than one case: {doubled_runs}")
    by_case = {c: [(str(m), str(v)) for m, v in zip(sub["model"], sub["variant"], strict=False)] for c, sub in pairs.groupby("case")}
    standards = by_case.get("standard", [])
    if len(standards) != 1:
        raise ValueError(f"comparison: need exactly one (model, variant) with case 'standard' and intervention 'none', found {len(standards)}")
    for needed in ("ntk", "sliding"):
        if not by_case.get(needed):
            raise ValueError(f"comparison: no rows with case {needed!r} and intervention 'none' (metric 'c_res', window {query_window!r})")

    def pick_case(model: str, variant: str, case: str) -> Estimate:
        return pick(
            t,
            "comparison",
            f"c_res ({case})",
            metric="c_res",
            query_window=query_window,
            intervention="none",
            model=model,
            variant=variant,
            **MODEL_AGGREGATE,
        )

    std_key = standards[0]
    std = pick_case(*std_key, "standard")
    std_label = model_label(*std_key)
    comparisons: list[tuple[str, tuple[str, str], Estimate, str]] = []
    for case in ("ntk", "sliding"):
        rule = C4_RULES[case]
        for key in by_case[case]:
            f = pick_case(*key, case)
            comparisons.append((case, key, f, verdict(rule, (f, std))))
    together = joint(c[3] for c in comparisons)
    rule_text = f"ntk case: {C4_RULES['ntk'].text()}. sliding case: {C4_RULES['sliding'].text()}. all comparisons together: {JOINT}"
    rows = []
    for case, key, f, outcome in comparisons:
        inputs = with_roles(C4_RULES[case], (f, std), f.name)
        rows.append(
            claim_row(C4, f"{model_label(*key)} vs {std_label}", f, rule_text, together, inputs, group=model_label(*key), case=case, own=outcome)
        )

    slope_rule = (
        f"least-squares slope of per-layer c_res on the layer index over layers >= 1 (delta R^2 per layer), "
        f"{CONFIDENCE:.0%} delete-one-layer jackknife interval (t quantile, n_layers - 1 df); {C4_SLOPE_RULE.text()}"
    )
    for key in by_case["sliding"]:
        model, variant = key
        per_layer = select(t, "comparison", "c_res", query_window, head=-1, intervention="none", model=model, variant=variant)
        per_layer = per_layer[per_layer["layer"] >= 1]
        where = where_text(metric="c_res", head=-1, query_window=query_window, intervention="none", model=model, variant=variant)
        if per_layer["layer"].duplicated().any():
            raise ValueError(f"comparison: several rows per layer for {where}")
        if len(per_layer) < 3:
            raise ValueError(f"comparison: {len(per_layer)} per-layer rows (layer >= 1) for {where}; the depth slope needs at least 3")
        per_layer = per_layer.sort_values("layer")
        s, lo, hi = depth_slope(per_layer["layer"].to_numpy(), per_layer["value"].to_numpy(), CONFIDENCE)
        first, last = int(per_layer["layer"].min()), int(per_layer["layer"].max())
        fig = Estimate(
            "c_res slope per layer",
            s,
            lo,
            hi,
            f"{where}, layers {first}..{last}",
            statistic="slope over layers",
            metric="c_res",
            model=model,
            variant=variant,
            intervention="none",
            head=-1,
            query_window=query_window,
            layer_first=first,
            layer_last=last,
        )
        outcome = verdict(C4_SLOPE_RULE, (fig,))
        rows.append(
            claim_row(
                C4,
                f"{model_label(*key)}: slope of c_res over layers >= 1",
                fig,
                slope_rule,
                outcome,
                with_roles(C4_SLOPE_RULE, (fig,), fig.name),
                group=model_label(*key),
                case="sliding",
            )
        )
    return keyed(rows)


# --------------------------------------------------------------------------- C4 by differences (methodology §9.1)


_C4_STATISTIC = {"paired": "paired difference", "independent": "independent difference", "trend": "trend", "depth-slope": "depth slope"}
DEPTH_METRIC = "c_res_depth_slope"
"""The comparison table's metric for the slope of per-layer C_res over the fraction of depth l/(L−1), layers ≥ 1."""

C4_DIRECTIONS = {
    ("ntk", "paired", "c_res"): -1,
    ("ntk", "trend", "c_res"): -1,
    ("sliding", "paired", "c_res"): +1,
    ("sliding", "paired", DEPTH_METRIC): +1,
    ("sliding", "depth-slope", DEPTH_METRIC): +1,
    ("sliding", "trend", DEPTH_METRIC): -1,
    ("sliding", "independent", "c_res"): +1,
    ("sliding", "independent", DEPTH_METRIC): +1,
}
"""C4 by differences (methodology §9.1), fixed before the full run: per (case, kind, metric) of a comparison, the
direction the claim predicts. NTK lowers C_res against its base (paired), and more with α (negative trend on log2 α);
a window raises C_res and its depth slope against its base (paired), its depth slope is positive (accumulation), and
grows as W shrinks (negative trend of the depth slope on log2 W); a natively windowed model has a larger C_res and
depth slope than the standard model (independent samples). Comparisons of other (case, kind, metric) are not read."""


def c4_sign_rule(name: str, direction: int) -> Rule:
    """The rule of one C4 comparison: its interval excludes 0 in the predicted ``direction`` (supported) or the opposite one.

    Args:
        name: The estimate's name.
        direction: +1 (the claim predicts a positive difference, slope or trend) or −1.

    Returns:
        The rule.

    Raises:
        ValueError: When ``direction`` is not ±1.

    Example:
        >>> c4_sign_rule("c_res (ntk:4 - base)", -1).text()
        'supported if c_res (ntk:4 - base) ci_high < 0; not supported if c_res (ntk:4 - base) ci_low > 0; inconclusive otherwise'
    """
    if direction not in (-1, 1):
        raise ValueError(f"direction must be +1 or -1, got {direction}")
    up, down = Condition(name, "ci_low", ">", ZERO), Condition(name, "ci_high", "<", ZERO)
    return Rule((up,), (down,)) if direction > 0 else Rule((down,), (up,))


def _c4_case_of(by_key: Mapping[tuple[str, str], str], row: Any) -> str | None:
    """The case a comparison row speaks for, from the cases compare recorded (a trend: its members' case)."""
    if row["kind"] == "trend":
        members = {case for (m, _), case in by_key.items() if m == row["model"] and case in ("ntk", "sliding")}
        wanted = {"log2 alpha": "ntk", "log2 window": "sliding"}.get(str(row["parameter"]))
        return wanted if wanted in members else None
    return by_key.get((str(row["model"]), str(row["variant"])))


def claim_c4_differences(comparisons: pd.DataFrame, cases: Iterable[Any], query_window: str = C4_QUERY_WINDOW) -> list[dict[str, Any]]:
    """C4 decided by the intervals of differences, trends and depth slopes (methodology §9.1).

    ``comparisons`` is the comparison table of
    :func:`poslens.mechanisms.architectures.compare`
    (:func:`poslens.mechanisms.comparisons.comparison_table`); ``cases`` are the
    cases compare recorded (``meta["cases"]``), which give each row its case.
    Every row at the model aggregate (layer −1) in ``query_window`` whose
    (case, kind, metric) :data:`C4_DIRECTIONS` names is one comparison: NTK
    against its base (paired) and the trend over α; a window against its base
    (C_res and its depth slope, paired), its own depth slope, and the trend of
    the depth slope over W; a natively windowed model against the standard
    model (independent samples). Each comparison is decided by its sign rule
    (:func:`c4_sign_rule`; ``own_verdict``). Every row carries the claim's joint verdict
    (:func:`~poslens.study.claims.rules.joint`) and reports how large a difference the data could have
    detected (``detectable``: two-sided 5%, 80% power) beside its figure.

    Args:
        comparisons: The comparison table.
        cases: The recorded cases (:class:`~poslens.mechanisms.architectures.Case` objects or dicts).
        query_window: The window read (C4 reads ``all``: a window of W changes nothing for queries i < W).

    Returns:
        The claims rows, ``{column: value}`` with the columns of :data:`~poslens.study.claims.table.CLAIM_COLUMNS` and their ``inputs``.

    Raises:
        ValueError: When the table holds no NTK comparison or no sliding-window comparison.

    Example:
        >>> base = dict(intervention="none", query_window="all", layer=-1, head=-1, parameter="", se=0.001, df=7.0, detectable=0.003)
        >>> table = pd.DataFrame([
        ...     dict(base, model="s", variant="ntk:4", metric="c_res", value=-0.002, ci_low=-0.003, ci_high=-0.001,
        ...          comparison="ntk:4 − base", kind="paired", reference_model="s", reference_variant="base"),
        ...     dict(base, model="s", variant="window:64", metric="c_res", value=0.002, ci_low=-0.001, ci_high=0.005,
        ...          comparison="window:64 − base", kind="paired", reference_model="s", reference_variant="base")])
        >>> cases = [dict(model="s", variant="base", case="standard"), dict(model="s", variant="ntk:4", case="ntk"),
        ...          dict(model="s", variant="window:64", case="sliding")]
        >>> [(r["model"], r["own_verdict"], r["verdict"]) for r in claim_c4_differences(table, cases)]  # doctest: +NORMALIZE_WHITESPACE
        [('s (ntk:4) − s: c_res, paired', 'supported', 'inconclusive'),
         ('s (window:64) − s: c_res, paired', 'inconclusive', 'inconclusive')]
    """
    by_key = recorded_cases(cases)
    t = comparisons[(comparisons["layer"] == -1) & (comparisons["query_window"] == query_window)]
    found: list[tuple[str, Any, Estimate, Rule, tuple[Input, ...]]] = []
    for _, r in t.iterrows():
        case = _c4_case_of(by_key, r)
        if r["kind"] == "independent" and by_key.get((str(r["reference_model"]), str(r["reference_variant"]))) != "standard":
            continue  # a natively windowed (or NTK-trained) model is compared with the standard one only
        direction = C4_DIRECTIONS.get((case, str(r["kind"]), str(r["metric"])))
        if direction is None:
            continue
        name = f"{r['metric']} ({r['comparison']})"
        where = (
            f"comparison {r['comparison']!r} ({r['kind']}), metric {r['metric']!r}, layer -1, head -1, window "
            f"{query_window!r}, model {r['model']!r}, variant {r['variant']!r}"
            + (f", against model {r['reference_model']!r}, variant {r['reference_variant']!r}" if r["reference_model"] else "")
            + (f", per unit of {r['parameter']}" if r["parameter"] else "")
            + f"; {r['df']:g} df"
        )
        figure = Estimate(
            name,
            float(r["value"]),
            float(r["ci_low"]),
            float(r["ci_high"]),
            where,
            statistic=_C4_STATISTIC[str(r["kind"])],
            metric=str(r["metric"]),
            model=str(r["model"]),
            variant=str(r["variant"]),
            intervention=str(r["intervention"]),
            layer=-1,
            head=-1,
            query_window=query_window,
        )
        detectable = Estimate(
            f"detectable |{name}|",
            float(r["detectable"]),
            np.nan,
            np.nan,
            f"the smallest |value| this comparison would detect (two-sided 5%, 80% power): "
            f"(t_0.975 + t_0.80) x se, se = {r['se']:.4g}, {r['df']:g} df",
            statistic="detectable",
            metric=str(r["metric"]),
            model=str(r["model"]),
            variant=str(r["variant"]),
            intervention=str(r["intervention"]),
            layer=-1,
            head=-1,
            query_window=query_window,
        )
        rule = c4_sign_rule(name, direction)
        found.append((case, r, figure, rule, with_roles(rule, (figure,), name, extra=(Input(detectable, REPORTED),))))
    for needed in ("ntk", "sliding"):
        if not any(case == needed for case, *_ in found):
            raise ValueError(
                f"comparison table: no {needed} comparison C4 reads (layer -1, window {query_window!r}); rerun poslens compare with {needed} cases"
            )
    outcomes = [verdict(rule, (figure,)) for _, _, figure, rule, _ in found]
    together = joint(outcomes)
    rows = []
    for (case, r, figure, rule, inputs), outcome in zip(found, outcomes, strict=False):
        kind = str(r["kind"])
        subject = model_label(str(r["model"]), str(r["variant"]))
        if kind in ("paired", "independent"):
            label = f"{subject} − {model_label(str(r['reference_model']), str(r['reference_variant']))}: {r['metric']}, {kind}"
        elif kind == "trend":
            subject = f"{r['model']}, {case} cases"
            label = f"{subject}: trend of {r['metric']} on {r['parameter']}"
        else:
            label = f"{subject}: {r['metric']}"
        rules = f"this comparison: {rule.text()}. all comparisons together: {JOINT}"
        rows.append(claim_row(C4, label, figure, rules, together, inputs, group=subject, case=case, own=outcome))
    return keyed(rows)


def c4_rows(comparison: Any, query_window: str, comparisons: pd.DataFrame | None) -> list[dict[str, Any]]:
    """C4's rows: by differences when ``comparisons`` holds rows, else (an older compare part) by the cases' intervals.

    The cases are the ones compare recorded: ``comparison.meta["cases"]`` of
    its :class:`~poslens.measurement.result.Result`. A bare table passed
    instead must carry them in a ``case`` column (:func:`label_cases`).

    Args:
        comparison: The compare part (a Result with its recorded cases), or a table labelled by :func:`label_cases`.
        query_window: The window read.
        comparisons: The comparison table (:func:`poslens.mechanisms.comparisons.comparison_table`), or None.

    Returns:
        The claims rows.

    Raises:
        InputError: When neither the result's record nor a ``case`` column gives the cases.

    Example:
        >>> from poslens.measurement.result import Result
        >>> rows = [figure_row("c_res", v, v - 0.001, v + 0.001, model=m, variant=var, query_window="early", layer=layer)
        ...         for m, var, v in [("s", "base", 0.01), ("s", "ntk:4", 0.002), ("g", "base", 0.03)] for layer in (-1, 1, 2, 3)]
        >>> cases = [dict(model="s", variant="base", case="standard"), dict(model="s", variant="ntk:4", case="ntk"),
        ...          dict(model="g", variant="base", case="sliding")]
        >>> [r["own_verdict"] for r in c4_rows(Result(pd.DataFrame(rows), {"cases": cases}), "early", None)]
        ['supported', 'supported', 'not supported']
    """
    recorded = (getattr(comparison, "meta", None) or {}).get("cases")
    if comparisons is None or len(comparisons) == 0:
        return claim_c4(comparison if recorded is None else label_cases(comparison), query_window)
    if recorded is None:
        t = tidy_table(comparison, "comparison")
        if "case" not in t.columns:
            raise InputError(
                "comparison: no cases recorded (meta['cases'] of poslens.mechanisms.architectures.compare) "
                "and no case column; pass the compare Result or label_cases(result)"
            )
        pairs = t[["model", "variant", "case"]].drop_duplicates()
        recorded = [dict(model=m, variant=v, case=c) for m, v, c in zip(pairs["model"], pairs["variant"], pairs["case"], strict=False) if c in CASES]
    return claim_c4_differences(comparisons, recorded, query_window)


C4 = Claim(
    "C4",
    "NTK suppresses, sliding window accumulates, standard in between",
    parts=("comparison",),
    measured_by=(),
    rules=(C4_RULES["ntk"], C4_RULES["sliding"], C4_SLOPE_RULE),
    reads=("c4_comparisons",),  # the comparison table compare recorded: C4 is decided by differences when it holds rows
    settings=("c4_query_window",),
    decide=lambda comparison, c4_comparisons=None, c4_query_window=C4_QUERY_WINDOW: c4_rows(comparison, c4_query_window, c4_comparisons),
    shown_rules=tuple(c4_sign_rule(f"{metric} ({case}, {kind})", direction) for (case, kind, metric), direction in C4_DIRECTIONS.items()),
)
"""C4: the architecture cases compared (:func:`c4_rows`). Its rules here are those of an older compare part; by
differences, each comparison's rule is :func:`c4_sign_rule` in the direction :data:`C4_DIRECTIONS` fixes. Each row's
headline is its own comparison."""

DECLARES = (C4,)
"""The claim, for :mod:`poslens.study.claims`."""
