"""Power before training: how many seeds each comparison of C4's zoo case needs, and the family that fits the CPU.

A trained family decides C4 only if its seeds can detect a difference of the
size that matters (methodology §9.1: state per comparison how large a difference
the data could have detected). This module answers that *before* a family is
trained, from a family already measured (``docs/zoo_data``):

- the **spread** of each comparison of :data:`~poslens.study.claims.c4_zoo.ZOO_COMPARISONS` is the standard
  deviation over seeds of its per-seed values (member − ``standard`` of the same seed, or the member's own value);
- the **target** difference is stated in advance, from the inference-time variants of the findings run
  (``docs/findings_data``): for each zoo comparison, the rows of C4 with the same case, statistic and metric
  (``ntk:α − base`` for the trained large base, ``window:W − base`` for the sliding member, ``window:W``'s own depth
  slope for its depth slope). The *planned* target (:data:`TARGET_RULE`) is the smallest |difference| among those
  rows whose own interval excludes 0: the smallest effect the inference-time variants showed to be there;
- the **seeds needed** are the smallest n with (t_{0.975, n−1} + t_{0.80, n−1}) · sd/√n ≤ target
  (:func:`~poslens.mechanisms.comparison_stats.detectable_difference`, the rule the zoo's ``detectable`` uses), with
  the spread as measured and at its one-sided 80% upper confidence bound (three seeds estimate it loosely).

:func:`write_power` writes the table as ``power.csv`` beside the family's tables and sizes the next family from it
(:func:`poslens.study.zoo_plan.plan_family`, under a CPU budget); :func:`power_markdown` words both.

Example:
    >>> seeds_needed(1.0, 2.0)   # sd 1, target 2: (t_0.975 + t_0.80, n − 1 df) / √n ≤ 2 first at n = 5
    5
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from poslens.errors import NotFoundError
from poslens.files import atomic_write
from poslens.mechanisms.comparison_stats import LEVEL, POWER, detectable_difference
from poslens.study.claims.c4_zoo import ZOO_COMPARISONS, ZooComparison, variant_rows
from poslens.study.claims.table import Claims
from poslens.study.part_registry import baseline
from poslens.study.zoo_plan import MAX_SEEDS, FamilyPlan, plan_family

#: How the planned target of each comparison is chosen, stated before any new family is trained.
TARGET_RULE = (
    "the smallest |difference| among the findings run's inference-time rows of C4 with the same case, statistic and metric "
    "whose own interval excludes 0"
)
#: The one-sided confidence of the spread's upper bound.
SD_BOUND = 0.80
#: The columns of ``power.csv``.
POWER_COLUMNS = [
    "comparison",
    "case",
    "metric",
    "n_seeds",
    "sd",
    "sd_upper",
    "target_row",
    "target",
    "target_own_verdict",
    "planned",
    "seeds_needed",
    "write_power",
    "seeds_needed_sd_upper",
]


def seeds_needed(sd: float, target: float, level: float = LEVEL, power: float = POWER, max_seeds: int = MAX_SEEDS) -> int | None:
    """The smallest number of seeds n whose t test detects ``target``: (t_{(1+level)/2, n−1} + t_{power, n−1}) · sd/√n ≤ target.

    Args:
        sd: The standard deviation over seeds of the per-seed values.
        target: The difference to detect (its absolute value is used).
        level: Two-sided coverage of the interval.
        power: The power asked for.
        max_seeds: The largest n searched.

    Returns:
        n (at least 2), or None when even ``max_seeds`` seeds would not detect it (or ``target`` is 0 or not finite).

    Example:
        >>> seeds_needed(0.000582, 0.00217)   # the sliding member's c_res against window:64 − base
        3
        >>> seeds_needed(1.0, 0.0) is None
        True
    """
    target = abs(float(target))
    if not np.isfinite(target) or target == 0 or not np.isfinite(sd):
        return None
    n = np.arange(2, max_seeds + 1, dtype=float)
    reach = detectable_difference(float(sd) / np.sqrt(n), n - 1, level, power) <= target
    return int(n[np.argmax(reach)]) if reach.any() else None


def per_seed_values(figures: pd.DataFrame, comparison: ZooComparison) -> pd.Series:
    """Per seed: the member's model-level figure, minus the reference member's of the same seed for a paired comparison.

    Args:
        figures: ``figures.csv``'s rows (member, seed, part, metric, layer, query_window, intervention, value).
        comparison: One comparison of :data:`~poslens.study.claims.c4_zoo.ZOO_COMPARISONS`.

    Returns:
        The values, indexed by seed (empty when the member is absent).

    Example:
        >>> f = pd.DataFrame([dict(member=m, seed=s, part="leakage", metric="c_res", layer=-1, query_window="all",
        ...                        intervention="none", value=v + s) for m, v in [("standard", 1.0), ("sliding", 3.0)] for s in (0, 1)])
        >>> per_seed_values(f, ZOO_COMPARISONS[1]).tolist()
        [2.0, 2.0]
    """
    t = figures[
        (figures["part"] == baseline().name)  # C4's zoo case reads the baseline part (zoo-measure measures it first)
        & (figures["layer"] == -1)
        & (figures["query_window"] == "all")
        & (figures["intervention"] == "none")
        & (figures["metric"] == comparison.metric)
    ]
    mine = t[t["member"] == comparison.member].set_index("seed")["value"].astype(float)
    if not comparison.reference:
        return mine.sort_index()
    theirs = t[t["member"] == comparison.reference].set_index("seed")["value"].astype(float)
    seeds = sorted(set(mine.index) & set(theirs.index))
    return (mine.loc[seeds] - theirs.loc[seeds]).sort_index()


def inference_targets(inference: Claims) -> pd.DataFrame:
    """The inference-time variants' C4 rows (``ntk:α``, ``window:W``): their case, statistic, metric, value and own verdict.

    Args:
        inference: The findings run's claims.

    Returns:
        One row per C4 row of a variant: ``row``, ``case``, ``statistic``, ``metric``, ``value``, ``ci_low``, ``ci_high``, ``own_verdict``.

    Example:
        >>> inference_targets(Claims.read("docs/findings_data")).iloc[0]["row"]  # doctest: +SKIP
        'smollm2-135m (window:32): c_res_depth_slope'
    """
    rows = [
        dict(
            row=r["model"],
            case=r["case"],
            statistic=r["statistic"],
            metric=r["metric"],
            value=float(r["rows"]["value"]),
            ci_low=float(r["rows"]["ci_low"]),
            ci_high=float(r["rows"]["ci_high"]),
            own_verdict=r["own_verdict"],
        )
        for _, r in variant_rows(inference).iterrows()
    ]
    return pd.DataFrame(rows, columns=["row", "case", "statistic", "metric", "value", "ci_low", "ci_high", "own_verdict"])


def power_table(figures: pd.DataFrame, inference: Claims, level: float = LEVEL, power: float = POWER) -> pd.DataFrame:
    """Per zoo comparison and inference-time target: the seeds needed to detect the target at ``level`` and ``power``.

    Args:
        figures: The measured family's ``figures.csv``.
        inference: The findings run's claims (its C4 rows by differences).
        level: Two-sided coverage of the test.
        power: The power asked for.

    Returns:
        :data:`POWER_COLUMNS`: one row per (comparison, inference-time row of the same question); ``planned`` marks the
        target :data:`TARGET_RULE` picks; ``seeds_needed`` is None where even :data:`MAX_SEEDS` seeds would not do.

    Example:
        >>> table = power_table(pd.read_csv("docs/zoo_data/figures.csv"), Claims.read("docs/findings_data"))  # doctest: +SKIP
        >>> table[table["planned"]][["comparison", "target", "seeds_needed"]]  # doctest: +SKIP
    """
    targets = inference_targets(inference)
    rows = []
    for comparison in ZOO_COMPARISONS:
        values = per_seed_values(figures, comparison).dropna()
        n = len(values)
        if n < 2:
            continue
        sd = float(values.std(ddof=1))
        sd_upper = sd * float(np.sqrt((n - 1) / stats.chi2.ppf(1 - SD_BOUND, n - 1)))
        statistic = "paired difference" if comparison.reference else "depth slope"
        same = targets[(targets["case"] == comparison.case) & (targets["statistic"] == statistic) & (targets["metric"] == comparison.metric)]
        shown = same[(same["ci_low"] > 0) | (same["ci_high"] < 0)]
        planned_row = shown.loc[shown["value"].abs().idxmin(), "row"] if len(shown) else None
        for t in same.itertuples():
            rows.append(
                dict(
                    comparison=comparison.name(),
                    case=comparison.case,
                    metric=comparison.metric,
                    n_seeds=n,
                    sd=sd,
                    sd_upper=sd_upper,
                    target_row=t.row,
                    target=abs(t.value),
                    target_own_verdict=t.own_verdict,
                    planned=t.row == planned_row,
                    seeds_needed=seeds_needed(sd, t.value, level, power),
                    seeds_needed_sd_upper=seeds_needed(sd_upper, t.value, level, power),
                )
            )
    return pd.DataFrame(rows, columns=POWER_COLUMNS).astype({"seeds_needed": "Int64", "seeds_needed_sd_upper": "Int64"})


def read_power_table(data: str | Path, findings: str | Path) -> pd.DataFrame:
    """:func:`power_table` of the family measured in ``data`` (``figures.csv``) against the findings run in ``findings``.

    Args:
        data: The family's tables (``poslens zoo-measure --out``, e.g. ``docs/zoo_data``).
        findings: The findings run's claims folder (e.g. ``docs/findings_data``).

    Returns:
        The power table.

    Raises:
        NotFoundError: When ``data`` has no ``figures.csv`` (or ``findings`` no claims).

    Example:
        >>> read_power_table("docs/zoo_data", "docs/findings_data")["planned"].sum()  # doctest: +SKIP
        4
    """
    path = Path(data) / "figures.csv"
    if not path.exists():
        raise NotFoundError(f"{path} is missing: --out must hold a measured family (run poslens zoo-measure --zoo <family> --out {data} first)")
    return power_table(pd.read_csv(path), Claims.read(findings))


#: The power table's file in a family's tables folder.
POWER_FILE = "power.csv"


def write_power(data: str | Path, findings: str | Path) -> tuple[pd.DataFrame, FamilyPlan]:
    """Compute the power table of the family in ``data`` against ``findings``, write it as ``data``/``power.csv``, and plan.

    Args:
        data: The family's tables (``figures.csv`` is read, ``power.csv`` written).
        findings: The findings run's claims folder.

    Returns:
        The power table and :func:`plan_family`'s plan.

    Raises:
        NotFoundError: When ``data`` or ``findings`` lacks its tables.

    Example:
        >>> table, plan = write_power("docs/zoo_data", "docs/findings_data")  # doctest: +SKIP
    """
    table = read_power_table(data, findings)
    atomic_write(Path(data) / POWER_FILE, lambda tmp: table.to_csv(tmp, index=False, float_format="%.6g"))
    return table, plan_family(table)


def _need(value: object) -> int | None:
    return None if pd.isna(value) else int(value)  # type: ignore[call-overload]


def _g(x: object) -> str:
    if x is None or pd.isna(x):  # type: ignore[call-overload]
        return f"> {MAX_SEEDS:,}"
    return f"{x:.3g}".replace("-", "−") if isinstance(x, float) else f"{x:,}"


def power_markdown(power: pd.DataFrame, plan: FamilyPlan) -> list[str]:
    """The power table and the planned family as Markdown lines (for ``docs/zoo.md`` and the command's output).

    Args:
        power: The power table (:func:`power_table`, or ``power.csv`` read back).
        plan: The plan (:func:`plan_family`).

    Returns:
        Lines: the table (one row per comparison and inference-time target, the planned ones in bold), then the plan.

    Example:
        >>> p = pd.DataFrame([dict(comparison="c", n_seeds=3, sd=0.1, sd_upper=0.2, target_row="r", target=0.3,
        ...                        target_own_verdict="supported", planned=True, seeds_needed=4, seeds_needed_sd_upper=9)])
        >>> power_markdown(p, plan_family(p))[2]
        '| **c** | 3 | 0.1 | 0.2 | r (supported) | **0.3** | **4** | 9 |'
    """
    header = ["comparison", "seeds now", "sd over seeds", "sd, 80% upper bound", "inference-time row (own verdict)", "target", "seeds needed"]
    rows = ["| " + " | ".join([*header, "with the upper sd"]) + " |"]
    rows.append("|:---|---:|---:|---:|---:|---:|---:|---:|")
    for r in power.itertuples():
        bold = (lambda x: f"**{x}**") if bool(r.planned) else (lambda x: x)
        cells = [bold(r.comparison), r.n_seeds, _g(float(r.sd)), _g(float(r.sd_upper)), f"{r.target_row} ({r.target_own_verdict})"]
        cells += [bold(_g(float(r.target))), bold(_g(_need(r.seeds_needed))), _g(_need(r.seeds_needed_sd_upper))]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    s = plan.shape
    beyond = "; ".join(f"{c} needs {_g(n)} seeds" for c, n in plan.beyond) or "none"
    rows += [
        "",
        f"**The planned family:** {s.members} members × {s.seeds} seeds × {s.steps} steps, width {s.width}, {s.depth} layers × "
        f"{s.heads} heads, T = {s.seq_len} (window T/8 = {s.seq_len // 8}), batch {s.batch_size}: about {plan.seconds / 3600:.1f} h "
        f"({plan.seconds:,.0f} s) of the 2-core CPU, budget {plan.budget / 3600:.0f} h ({plan.affordable} seeds at most). "
        f"Its seeds detect the planned target of: {', '.join(plan.reachable) or 'no comparison'} (with the upper sd too: "
        f"{', '.join(plan.robust) or 'none'}). Beyond the budget: {beyond}.",
    ]
    return rows


__all__ = [
    "MAX_SEEDS",
    "POWER_FILE",
    "POWER_COLUMNS",
    "SD_BOUND",
    "TARGET_RULE",
    "inference_targets",
    "per_seed_values",
    "power_markdown",
    "power_table",
    "read_power_table",
    "seeds_needed",
    "write_power",
]
