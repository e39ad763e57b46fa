"""C4's zoo comparisons decided with a band stated before training: supported, not supported, equivalent, or a power statement.

The sign rule of each comparison (:mod:`poslens.study.claims.c4_zoo`) says supported or not supported when the
interval over seeds excludes 0, and inconclusive otherwise. An inconclusive comparison is not left bare here:

- **equivalent within ±band** when its 95% interval lies inside (−band, band), where the band is the comparison's
  planned target of the power table (:mod:`poslens.study.zoo_power`; the smallest |difference| among the
  inference-time rows of the same question, fixed before the family was trained): the data exclude a difference as
  large as the one the inference-time variants showed;
- **inconclusive, with its power statement** otherwise: the smallest difference the seeds could detect
  (two-sided 5%, power 80%) and the seeds the band would need at this family's spread.

``powered`` says whether the family's detectable difference was at most the band (the design asked for 80% power
at the band). No threshold here is tuned to the data: the band comes from ``power.csv``, written before training.

Example:
    >>> DECISION_COLUMNS[:3]
    ['key', 'comparison', 'figure']
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from poslens.study.claims.rules import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
from poslens.study.zoo_power import seeds_needed

#: The decision of a comparison with no seed to read: no run of a member it compares formed a sink.
NOT_READ = "could not be read: no sink formed"

#: The columns of :func:`decide_family`'s table.
DECISION_COLUMNS = [
    "key",
    "comparison",
    "figure",
    "ci_low",
    "ci_high",
    "n_seeds",
    "sd",
    "own_verdict",
    "band",
    "band_source",
    "detectable",
    "powered",
    "equivalent",
    "seeds_for_band",
    "decision",
]


def _inputs_of(inputs: pd.DataFrame, key: str) -> pd.DataFrame:
    return inputs[inputs["key"] == key]


def decide_family(claims: Any, power: pd.DataFrame) -> pd.DataFrame:
    """Each C4 zoo comparison with its band, whether the data show it equivalent to 0 within it, and the decision.

    Args:
        claims: The family's claims (:class:`~poslens.study.claims.table.Claims` of ``zoo-measure``: ``table`` and ``inputs``).
        power: The power table written before training (``power.csv``; its ``planned`` rows give each comparison's band).

    Returns:
        One row per comparison, the columns of :data:`DECISION_COLUMNS`. ``decision`` is ``supported``,
        ``not supported``, ``equivalent to 0 within ±band``, ``inconclusive`` or :data:`NOT_READ`; ``band`` is NaN where the power table
        planned no target for the comparison. A comparison with no seed left to read (no run of a member it compares
        formed a sink, :func:`~poslens.study.claims.c4_zoo.claim_c4_zoo`) is :data:`NOT_READ`.

    Example:
        >>> from poslens.study.claims.table import Claims
        >>> from poslens.study.claims.c4_zoo import claim_c4_zoo
        >>> rows = [dict(member=m, seed=s, metric="c_res", value=b + d) for m, b, ds in [("standard", 0.02, [0, 2, -2, 1, -1]),
        ...         ("sliding", 0.02, [1, 0, -1, 2, -2])] for s, d in enumerate(1e-4 * np.array(ds))]
        >>> power = pd.DataFrame([dict(comparison="c_res (sliding − standard)", planned=True, target=0.00217, target_row="r")])
        >>> d = decide_family(Claims.from_rows(claim_c4_zoo(pd.DataFrame(rows))), power)
        >>> d[["own_verdict", "equivalent", "decision"]].values.tolist()
        [['inconclusive', True, 'equivalent to 0 within ±0.00217']]
    """
    table, inputs = claims.table, claims.inputs
    planned = power[power["planned"].astype(bool)] if len(power) else power
    bands = {str(r.comparison): (float(r.target), str(r.target_row)) for r in planned.itertuples()}
    rows = []
    for r in table[table["claim"] == "C4"].itertuples():
        name = str(r.figure_name)
        mine = _inputs_of(inputs, r.key)
        seeds = mine[mine["name"].str.startswith(f"{name}, seed ")]["value"].astype(float).to_numpy()
        detectable = mine[mine["name"] == f"detectable |{name}|"]["value"].astype(float)
        n = int(np.isfinite(seeds).sum())
        sd = float(np.std(seeds[np.isfinite(seeds)], ddof=1)) if n > 1 else np.nan
        band, source = bands.get(name, (np.nan, ""))
        low, high = float(r.ci_low), float(r.ci_high)
        equivalent = bool(np.isfinite(band) and np.isfinite(low) and -band < low and high < band)
        if r.own_verdict == SUPPORTED:
            decision = SUPPORTED
        elif r.own_verdict == NOT_SUPPORTED:
            decision = NOT_SUPPORTED
        elif equivalent:
            decision = f"equivalent to 0 within ±{band:.3g}"
        elif n == 0:
            decision = NOT_READ
        else:
            decision = INCONCLUSIVE
        d = float(detectable.iloc[0]) if len(detectable) else np.nan
        rows.append(
            dict(
                key=r.key,
                comparison=name,
                figure=float(r.figure),
                ci_low=low,
                ci_high=high,
                n_seeds=n,
                sd=sd,
                own_verdict=r.own_verdict,
                band=band,
                band_source=source,
                detectable=d,
                powered=bool(np.isfinite(band) and np.isfinite(d) and d <= band),
                equivalent=equivalent,
                seeds_for_band=seeds_needed(sd, band) if np.isfinite(band) else None,
                decision=decision,
            )
        )
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


def decision_sentence(row: Any) -> str:
    """One comparison's decision in words, with its power statement where it is inconclusive.

    Args:
        row: A row of :func:`decide_family` (attribute access).

    Returns:
        The sentence.

    Example:
        >>> row = pd.Series(dict(comparison="c", decision="inconclusive", detectable=0.006, band=0.0002, seeds_for_band=3000, n_seeds=5))
        >>> decision_sentence(row)  # doctest: +ELLIPSIS
        'c: inconclusive; the 5 seeds detect a difference of 0.006 or more (...), above the band 0.0002, which needs 3000 seeds at this spread.'
        >>> decision_sentence(row.replace(3000, 230.0)).endswith("which needs 230 seeds at this spread.")  # a table's float column
        True
    """
    if row.decision in (SUPPORTED, NOT_SUPPORTED, NOT_READ) or str(row.decision).startswith("equivalent"):
        return f"{row.comparison}: {row.decision}."
    if not np.isfinite(row.detectable):
        return f"{row.comparison}: inconclusive; with {row.n_seeds} seed(s) there is no interval and no detectable difference."
    needed = row.seeds_for_band
    needed = f"{int(needed)}" if needed is not None and np.isfinite(needed) else "more than 100000"
    band = (
        f"above the band {row.band:.3g}, which needs {needed} seeds at this spread"
        if np.isfinite(row.band) and row.detectable > row.band
        else f"within the band {row.band:.3g}, yet the interval reaches past it"
        if np.isfinite(row.band)
        else "no band was planned for it"
    )
    detects = f"the {row.n_seeds} seeds detect a difference of {row.detectable:.3g} or more (two-sided 5%, power 80%)"
    return f"{row.comparison}: inconclusive; {detects}, {band}."


__all__ = ["DECISION_COLUMNS", "NOT_READ", "decide_family", "decision_sentence"]
