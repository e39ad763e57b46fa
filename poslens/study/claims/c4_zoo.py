"""Claim C4 inside the zoo: trained members compared with seeds as replicates, by the rules of C4 by differences.

The zoo (:mod:`poslens.zoo`) trains members that differ only in their position
scheme, with several seeds; each seed gives the initial weights and the data
order, shared by the members. C4's zoo case compares them by
:data:`ZOO_COMPARISONS`, fixed before the family was measured:

- ``large-base-trained`` against ``standard``, C_res: the claim's "NTK
  suppresses" is a statement about a larger RoPE base, which the member is
  trained with, so it is read as the ``ntk`` case;
- ``sliding`` against ``standard``, C_res and its depth slope;
- ``sliding``'s own depth slope of C_res (accumulation with depth).

Each comparison's figure is the mean over seeds of the per-seed difference
(member − standard of the same seed: the seed pairs them) or of the per-seed
value, with a t interval over the seeds (n − 1 degrees of freedom) and the
smallest difference the family could detect, (t₀.₉₇₅ + t₀.₈₀) · se. The seeds
are the replicates: the spread is the one of training runs, not only of
the measured sequences. The rule is the one of today's C4 by differences:
:func:`~poslens.study.claims.c4_compare.c4_sign_rule` in the direction
:data:`~poslens.study.claims.c4_compare.C4_DIRECTIONS` fixes for the (case, kind,
metric), and the comparisons are combined by :func:`~poslens.study.claims.rules.joint`.

:func:`inference_time_beside` sets each zoo comparison beside the rows of the
same case, kind and metric that the inference-time variants (``ntk:α``,
``window:W``) gave in a claims table, and says where they agree.

Example:
    >>> [(c.member, c.metric, c.case) for c in ZOO_COMPARISONS][:2]
    [('large-base-trained', 'c_res', 'ntk'), ('sliding', 'c_res', 'sliding')]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from poslens.study.claims.c4_compare import C4, C4_DIRECTIONS, DEPTH_METRIC, c4_sign_rule
from poslens.study.claims.rules import JOINT, Estimate, joint, verdict
from poslens.study.claims.table import REPORTED, Input, claim_row, keyed, with_roles

#: The figure table's columns :func:`claim_c4_zoo` reads: one row per run (member, seed) and metric.
FIGURE_COLUMNS = ("member", "seed", "metric", "value")
ZOO_WINDOW = "all"
"""The query window C4's zoo case reads, as C4 does (a window of W changes nothing for queries i < W)."""


@dataclass(frozen=True)
class ZooComparison:
    """One comparison of C4's zoo case.

    Attributes:
        member: The member compared.
        reference: The member it is compared with, seed by seed (``""``: its own value, no reference).
        metric: The figure: ``c_res`` (layers ≥ 1, all queries) or ``c_res_depth_slope``.
        kind: ``paired`` (a difference, paired by seed) or ``depth-slope`` (the member's own depth slope).
        case: The C4 case it speaks for: ``ntk`` (a larger base) or ``sliding``.

    Example:
        >>> ZooComparison("sliding", "", DEPTH_METRIC, "depth-slope", "sliding").direction
        1
    """

    member: str
    reference: str
    metric: str
    kind: str
    case: str

    @property
    def direction(self) -> int:
        """The sign the claim predicts, from :data:`~poslens.study.claims.c4_compare.C4_DIRECTIONS`.

        Example:
            >>> ZOO_COMPARISONS[0].direction
            -1
        """
        return C4_DIRECTIONS[(self.case, self.kind, self.metric)]

    def name(self) -> str:
        """The estimate's name: ``c_res (large-base-trained − standard)`` or ``c_res_depth_slope (sliding)``.

        Returns:
            The name.

        Example:
            >>> ZOO_COMPARISONS[0].name()
            'c_res (large-base-trained − standard)'
        """
        return f"{self.metric} ({self.member} − {self.reference})" if self.reference else f"{self.metric} ({self.member})"


ZOO_COMPARISONS = (
    ZooComparison("large-base-trained", "standard", "c_res", "paired", "ntk"),
    ZooComparison("sliding", "standard", "c_res", "paired", "sliding"),
    ZooComparison("sliding", "standard", DEPTH_METRIC, "paired", "sliding"),
    ZooComparison("sliding", "", DEPTH_METRIC, "depth-slope", "sliding"),
)
"""C4's zoo comparisons, fixed before the family was measured (their directions: ``C4_DIRECTIONS``)."""


@dataclass(frozen=True)
class SeedEstimate:
    """A mean over seeds with its t interval and the smallest |value| the seeds could detect.

    Attributes:
        value: The mean over seeds.
        ci_low: Lower end of the 95% t interval (NaN with fewer than 2 seeds).
        ci_high: Upper end.
        se: Standard error, sd / √n.
        df: Degrees of freedom, n − 1.
        detectable: (t₀.₉₇₅ + t₀.₈₀) · se: the smallest true |value| found four times in five at the 5% level.
        n: Seeds.

    Example:
        >>> e = seed_estimate([1.0, 2.0, 3.0])
        >>> e.value, round(e.se, 4), e.df, round(e.ci_high - e.value, 3)   # t(0.975, 2) = 4.303
        (2.0, 0.5774, 2, 2.484)
    """

    value: float
    ci_low: float
    ci_high: float
    se: float
    df: int
    detectable: float
    n: int


def seed_estimate(values: Any, confidence: float = 0.95, power: float = 0.8) -> SeedEstimate:
    """The mean of per-seed values with a t interval over the seeds and the smallest detectable |mean|.

    Args:
        values: One number per seed (NaNs are dropped).
        confidence: The interval's level (two-sided).
        power: The power of the detectable difference.

    Returns:
        The :class:`SeedEstimate` (NaN interval, se and detectable with fewer than 2 seeds).

    Example:
        >>> seed_estimate([0.5]).ci_low
        nan
        >>> e = seed_estimate([-0.2, -0.1, -0.3])   # three seeds: t(0.975, 2) = 4.303, the interval reaches 0
        >>> round(e.ci_high, 3), round(e.detectable, 3)   # detectable: (4.303 + 1.061) * 0.0577
        (0.048, 0.31)
    """
    x = np.asarray([float(v) for v in values], dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return SeedEstimate(np.nan, np.nan, np.nan, np.nan, 0, np.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return SeedEstimate(mean, np.nan, np.nan, np.nan, 0, np.nan, 1)
    se = float(x.std(ddof=1) / np.sqrt(n))
    df = n - 1
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    detectable = (float(stats.t.ppf(0.5 + confidence / 2, df)) + float(stats.t.ppf(power, df))) * se
    return SeedEstimate(mean, mean - half, mean + half, se, df, detectable, n)


def _per_seed(figures: pd.DataFrame, comparison: ZooComparison) -> pd.Series:
    """Per seed: the member's value, minus the reference's of the same seed for a paired comparison."""
    t = figures[figures["metric"] == comparison.metric]
    mine = t[t["member"] == comparison.member].set_index("seed")["value"].astype(float)
    if not comparison.reference:
        return mine.sort_index()
    theirs = t[t["member"] == comparison.reference].set_index("seed")["value"].astype(float)
    seeds = sorted(set(mine.index) & set(theirs.index))
    return (mine.loc[seeds] - theirs.loc[seeds]).sort_index()


def claim_c4_zoo(figures: pd.DataFrame, family: str = "zoo", without_sinks: Any = ()) -> list[dict[str, Any]]:
    """C4 decided inside a trained family: each comparison of :data:`ZOO_COMPARISONS` by its sign rule, all by ``joint``.

    ``figures`` holds one row per run and metric (:data:`FIGURE_COLUMNS`):
    ``c_res`` at the model level (layers ≥ 1, all queries) and
    ``c_res_depth_slope``, as :mod:`poslens.study.zoo_measure` writes them. Each
    comparison's estimate is :func:`seed_estimate` of its per-seed values;
    it is decided by :func:`~poslens.study.claims.c4_compare.c4_sign_rule` in the
    direction C4 predicts (``own_verdict``), and every row carries the
    claim's joint verdict. The per-seed values and the detectable difference
    are reported beside it (role ``reported``). A comparison whose members
    are absent is left out. A run in ``without_sinks`` (no head met the sink
    criterion) is not read: C4 is about the sink path, so its seed is left out
    of every comparison it takes part in, and the row's ``where`` names it; a
    comparison with no seed left could not be read, and says so. With fewer
    than two seeds the interval is NaN, the verdict inconclusive, and ``where``
    says why.

    Args:
        figures: The per-run figures.
        family: A name for the family, the start of each row's label.
        without_sinks: ``(member, seed)`` pairs of the runs in which no sink formed.

    Returns:
        The claims rows (columns of :data:`~poslens.study.claims.table.CLAIM_COLUMNS`, with ``inputs``).

    Raises:
        ValueError: When ``figures`` lacks a column of :data:`FIGURE_COLUMNS`, or no comparison can be made.

    Example:
        >>> rows = [dict(member=m, seed=s, metric="c_res", value=v) for m, base in
        ...         [("standard", 0.02), ("large-base-trained", 0.01), ("sliding", 0.03)] for s, v in enumerate([base, base + 0.001, base - 0.001])]
        >>> rows += [dict(member="sliding", seed=s, metric="c_res_depth_slope", value=v) for s, v in enumerate([0.01, 0.02, 0.015])]
        >>> out = claim_c4_zoo(pd.DataFrame(rows))
        >>> [(r["model"], r["own_verdict"]) for r in out]  # doctest: +NORMALIZE_WHITESPACE
        [('zoo: large-base-trained − standard: c_res, paired by seed', 'supported'),
         ('zoo: sliding − standard: c_res, paired by seed', 'supported'),
         ('zoo: sliding: c_res_depth_slope, mean over seeds', 'supported')]
        >>> {r["verdict"] for r in out}
        {'supported'}
        >>> out = claim_c4_zoo(pd.DataFrame(rows), without_sinks=[("large-base-trained", s) for s in range(3)] + [("sliding", 0)])
        >>> out[0]["own_verdict"], out[0]["figure"], round(out[1]["figure"], 4)   # sliding − standard over seeds 1, 2
        ('inconclusive', nan, 0.01)
    """
    missing = [c for c in FIGURE_COLUMNS if c not in figures.columns]
    if missing:
        raise ValueError(f"zoo figures: missing column(s) {missing}; expected {list(FIGURE_COLUMNS)}")
    sinkless = {(str(m), int(s)) for m, s in without_sinks}
    found = []
    for comparison in ZOO_COMPARISONS:
        per_seed = _per_seed(figures, comparison)
        if per_seed.dropna().empty:
            continue
        members = [comparison.member] + ([comparison.reference] if comparison.reference else [])
        dropped = [f"{m}-s{int(s)}" for s in per_seed.index for m in members if (m, int(s)) in sinkless]
        per_seed = per_seed[[all((m, int(s)) not in sinkless for m in members) for s in per_seed.index]]
        est = seed_estimate(per_seed.to_numpy())
        name = comparison.name()
        seeds = ", ".join(str(int(s)) for s in per_seed.index)
        what = f"{comparison.member} − {comparison.reference} of the same seed" if comparison.reference else comparison.member
        where = f"{family}: {comparison.metric} of {what}, layers >= 1, window {ZOO_WINDOW!r}; "
        if est.n == 0:
            where += "could not be read: no seed in which every member compared formed a sink"
        else:
            where += f"mean over seeds {seeds} with a t interval over the seeds ({est.df} df)"
        if dropped:
            where += f"; left out, no sink-reading head: {', '.join(dropped)}"
        if est.n == 1:
            where += "; no interval: one seed, and an interval over seeds needs at least 2"
        statistic = "paired difference" if comparison.reference else "depth slope"
        figure = Estimate(
            name,
            est.value,
            est.ci_low,
            est.ci_high,
            where,
            statistic=statistic,
            metric=comparison.metric,
            model=comparison.member,
            variant="base",
            intervention="none",
            layer=-1,
            head=-1,
            query_window=ZOO_WINDOW,
        )
        reported = [
            Estimate(
                f"detectable |{name}|",
                est.detectable,
                np.nan,
                np.nan,
                f"the smallest |value| the seeds would detect (two-sided 5%, 80% power): (t_0.975 + t_0.80) x se, se = {est.se:.4g}, {est.df} df",
                statistic="detectable",
                metric=comparison.metric,
                model=comparison.member,
                layer=-1,
                head=-1,
                query_window=ZOO_WINDOW,
            )
        ]
        reported += [
            Estimate(
                f"{name}, seed {int(seed)}",
                float(value),
                np.nan,
                np.nan,
                f"{family}: seed {int(seed)} alone",
                statistic="difference" if comparison.reference else "row",
                metric=comparison.metric,
                model=comparison.member,
                layer=-1,
                head=-1,
                query_window=ZOO_WINDOW,
            )
            for seed, value in per_seed.items()
        ]
        rule = c4_sign_rule(name, comparison.direction)
        inputs = with_roles(rule, (figure,), name, extra=tuple(Input(r, REPORTED) for r in reported))
        found.append((comparison, figure, rule, inputs))
    if not found:
        raise ValueError("zoo figures: no comparison of C4's zoo case can be made (need standard, large-base-trained and sliding runs)")
    outcomes = [verdict(rule, (figure,)) for _, figure, rule, _ in found]
    together = joint(outcomes)
    rows = []
    for (comparison, figure, rule, inputs), outcome in zip(found, outcomes, strict=True):
        if comparison.reference:
            label = f"{family}: {comparison.member} − {comparison.reference}: {comparison.metric}, paired by seed"
        else:
            label = f"{family}: {comparison.member}: {comparison.metric}, mean over seeds"
        rules = f"this comparison: {rule.text()}. all comparisons together: {JOINT}"
        rows.append(claim_row(C4, label, figure, rules, together, inputs, group=f"{family}: {comparison.member}", case=comparison.case, own=outcome))
    return keyed(rows)


#: The statistic of a zoo comparison's figure, and the inference-time rows of C4 that answer the same question.
_SAME_QUESTION = {"paired difference": "paired difference", "depth slope": "depth slope"}


def inference_time_beside(zoo: Any, inference: Any) -> pd.DataFrame:
    """Each zoo comparison beside the inference-time variants' rows of C4 with the same case, kind and metric.

    ``zoo`` and ``inference`` are :class:`~poslens.study.claims.table.Claims`
    (``inference`` as ``poslens report --full`` wrote it: its C4 rows by
    differences). A zoo comparison of case ``ntk`` and kind ``paired``
    (``large-base-trained − standard``) stands beside the ``ntk:α − base``
    rows; the sliding member's paired rows beside ``window:W − base``; its depth
    slope beside each ``window:W`` variant's own depth slope. The rows
    compared are the inference-time variants only (a model ``(ntk:α)`` or
    ``(window:W)``), never the other natively windowed model.

    Args:
        zoo: The zoo's claims (C4 rows of :func:`claim_c4_zoo`).
        inference: The claims of a run with the inference-time variants.

    Returns:
        One row per zoo comparison: ``comparison``, ``case``, ``metric``, ``zoo_verdict``, ``zoo_figure``,
        ``inference_rows`` (the variants' rows, each with its own verdict), ``inference_verdicts`` (distinct own verdicts)
        and ``agreement`` (``agree``, ``differ`` or ``partly``: some of the variants agree; ``not read in the zoo`` where
        the zoo comparison has no figure, its runs having formed no sink).

    Example:
        >>> from poslens.study.claims.table import Claims
        >>> rows = [dict(member=m, seed=s, metric="c_res", value=v) for m, base in
        ...         [("standard", 0.02), ("large-base-trained", 0.01), ("sliding", 0.03)] for s, v in enumerate([base, base + 0.001, base - 0.001])]
        >>> zoo = Claims.from_rows(claim_c4_zoo(pd.DataFrame(rows)))
        >>> from poslens.study.claims.c4_compare import claim_c4_differences
        >>> base = dict(intervention="none", query_window="all", layer=-1, head=-1, parameter="", se=0.001, df=7.0, detectable=0.003,
        ...             kind="paired", reference_model="s", reference_variant="base", metric="c_res")
        >>> table = pd.DataFrame([dict(base, model="s", variant="ntk:4", value=-0.002, ci_low=-0.003, ci_high=-0.001, comparison="ntk:4 − base"),
        ...     dict(base, model="s", variant="window:64", value=-0.002, ci_low=-0.004, ci_high=-0.001, comparison="window:64 − base")])
        >>> cases = [dict(model="s", variant="base", case="standard"), dict(model="s", variant="ntk:4", case="ntk"),
        ...          dict(model="s", variant="window:64", case="sliding")]
        >>> beside = inference_time_beside(zoo, Claims.from_rows(claim_c4_differences(table, cases)))
        >>> beside[["comparison", "zoo_verdict", "inference_verdicts", "agreement"]].values.tolist()  # doctest: +NORMALIZE_WHITESPACE
        [['large-base-trained − standard: c_res', 'supported', 'supported', 'agree'],
         ['sliding − standard: c_res', 'supported', 'not supported', 'differ']]
    """
    rows = []
    theirs = variant_rows(inference)
    for _, r in zoo.table[zoo.table["claim"] == "C4"].iterrows():
        head = zoo.headline(r["key"])
        if head is None:
            continue
        statistic, metric, case = str(head["statistic"]), str(head["metric"]), str(r["case"])
        same = theirs[(theirs["case"] == case) & (theirs["statistic"] == _SAME_QUESTION.get(statistic, "")) & (theirs["metric"] == metric)]
        own = str(r["own_verdict"])
        found = list(dict.fromkeys(same["own_verdict"]))
        if pd.isna(r["figure"]):
            agreement = "not read in the zoo"  # no seed to read (no sink formed): nothing to agree or differ
        elif not len(same):
            agreement = "no inference-time counterpart"
        elif found == [own]:
            agreement = "agree"
        elif own in found:
            agreement = "partly"
        else:
            agreement = "differ"
        subject = str(head["name"]).split(" (", 1)[1].rstrip(")") if " (" in str(head["name"]) else str(head["model"])
        rows.append(
            dict(
                comparison=f"{subject}: {metric}",
                case=case,
                metric=metric,
                zoo_verdict=own,
                zoo_figure=_number(head),
                inference_rows="; ".join(
                    f"{m}: {_number(x)} ({v})" for m, x, v in zip(same["model"], same["rows"], same["own_verdict"], strict=True)
                ),
                inference_verdicts=", ".join(found),
                agreement=agreement,
            )
        )
    return pd.DataFrame(
        rows, columns=["comparison", "case", "metric", "zoo_verdict", "zoo_figure", "inference_rows", "inference_verdicts", "agreement"]
    )


def variant_rows(claims: Any) -> pd.DataFrame:
    """The inference-time variants' C4 rows (``ntk:α``, ``window:W``) of ``claims`` with their headline's statistic and metric.

    Args:
        claims: A run's claims (:class:`~poslens.study.claims.table.Claims`).

    Returns:
        ``model`` (the row's model column), ``case``, ``statistic``, ``metric``, ``own_verdict`` and ``rows`` (the headline
        input's record).

    Example:
        >>> variant_rows(Claims.read("docs/findings_data"))["case"].iloc[0]  # doctest: +SKIP
        'sliding'
    """
    out = []
    for _, r in claims.table[claims.table["claim"] == "C4"].iterrows():
        head = claims.headline(r["key"])
        if head is None or not str(head["variant"]).startswith(("ntk:", "window:")):
            continue
        out.append(
            dict(
                model=str(r["model"]),
                case=str(r["case"]),
                statistic=str(head["statistic"]),
                metric=str(head["metric"]),
                own_verdict=str(r["own_verdict"]),
                rows=head,
            )
        )
    return pd.DataFrame(out, columns=["model", "case", "statistic", "metric", "own_verdict", "rows"])


def _number(record: Any) -> str:
    value, lo, hi = (float(record[c]) for c in ("value", "ci_low", "ci_high"))
    return f"{value:.3g} [{lo:.3g}, {hi:.3g}]"
