"""Lookups of the estimates a claim reads in a part's tidy table, through :meth:`Result.select`.

A claim reads single rows of a tidy table (the columns of
:data:`poslens.measurement.result.COLUMNS`): one run (model, variant,
intervention) and one (metric, query window, layer, head). :func:`pick`
narrows the table to the run and asks
:meth:`poslens.measurement.result.Result.select` for the rest, so a metric,
query window, layer or head that is not there is named with the ones that are;
exactly one row must match. Rows keyed by columns beyond the tidy ones (the
relativize part's calibration size and query bin) are filtered by :func:`rows_where`.

Example:
    >>> t = pd.DataFrame([figure_row("c_res", 0.01, 0.0, 0.02, query_window="early")])
    >>> pick(t, "leakage", metric="c_res", query_window="early", intervention="none", model="m", variant="base",
    ...      **MODEL_AGGREGATE).text()
    'c_res = 0.01 [0, 0.02]'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from poslens.measurement.result import COLUMNS, Result
from poslens.study.claims.rules import Estimate

MODEL_AGGREGATE = dict(layer=-1, head=-1)
"""The model aggregate of a tidy table: layer −1, head −1 (defined once: :data:`poslens.measurement.table.COLUMNS`)."""


def figure_row(
    metric: str,
    value: float,
    ci_low: float,
    ci_high: float,
    *,
    model: str = "m",
    variant: str = "base",
    intervention: str = "none",
    layer: int = -1,
    head: int = -1,
    query_window: str = "all",
) -> dict[str, Any]:
    """One tidy-table row (the columns of :data:`poslens.measurement.result.COLUMNS`), for building inputs by hand.

    Defaults: the model aggregate (layer −1, head −1) over all queries, no intervention.

    Args:
        metric: The ``metric`` column.
        value: The ``value`` column.
        ci_low: The ``ci_low`` column.
        ci_high: The ``ci_high`` column.
        model: The ``model`` column.
        variant: The ``variant`` column.
        intervention: The ``intervention`` column.
        layer: The ``layer`` column (−1: the mean over layers ≥ 1).
        head: The ``head`` column (−1: the mean over heads).
        query_window: The ``query_window`` column.

    Returns:
        ``{column: value}``.

    Example:
        >>> figure_row("c_res", 0.01, 0.0, 0.02, layer=3, query_window="early")["layer"]
        3
    """
    return dict(
        model=model,
        variant=variant,
        intervention=intervention,
        layer=layer,
        head=head,
        query_window=query_window,
        metric=metric,
        value=value,
        ci_low=ci_low,
        ci_high=ci_high,
    )


def tidy_table(x: Any, name: str, extra: Iterable[str] = ()) -> pd.DataFrame:
    """A part's tidy DataFrame, from a DataFrame or a :class:`~poslens.measurement.result.Result`; checks the columns.

    Args:
        x: The part.
        name: Its name in messages.
        extra: Columns needed beside :data:`~poslens.measurement.result.COLUMNS`.

    Returns:
        The table (not a copy).

    Raises:
        TypeError: When ``x`` is neither.
        ValueError: When the table lacks a column.

    Example:
        >>> len(tidy_table(pd.DataFrame([figure_row("c_res", 0.01, 0.0, 0.02)]), "leakage"))
        1
    """
    table = getattr(x, "table", x)
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"{name}: expected a pandas DataFrame or a poslens Result, got {type(x).__name__}")
    missing = [c for c in [*COLUMNS, *extra] if c not in table.columns]
    if missing:
        raise ValueError(f"{name}: table lacks column(s) {missing}")
    return table


def where_text(**filters: Any) -> str:
    """The filters of a lookup in words (metric, layer, head, query window, intervention, model, variant; None left out).

    Args:
        **filters: Column → wanted value.

    Returns:
        The words.

    Example:
        >>> where_text(metric="c_res", layer=-1, query_window="early", head=None)
        "metric 'c_res', layer -1, window 'early'"
    """
    parts = []
    for key in ("metric", "layer", "head", "query_window", "intervention", "model", "variant"):
        if key in filters and filters[key] is not None:
            value = filters[key]
            label = "window" if key == "query_window" else key
            parts.append(f"{label} {value!r}" if isinstance(value, str) else f"{label} {value}")
    return ", ".join(parts)


def rows_where(table: pd.DataFrame, **filters: Any) -> pd.DataFrame:
    """The rows whose columns equal the wanted values (a None value does not filter); possibly none.

    Args:
        table: Any table.
        **filters: Column → wanted value.

    Returns:
        The matching rows, in order.

    Example:
        >>> s = pd.DataFrame(dict(mode=["all", "key0"], value=[0.1, 0.2]))
        >>> rows_where(s, mode="key0", metric=None)["value"].tolist()
        [0.2]
    """
    keep = np.ones(len(table), dtype=bool)
    for column, wanted in filters.items():
        if wanted is not None:
            keep &= (table[column] == wanted).to_numpy()
    return table[keep]


def select(
    table: pd.DataFrame, source: str, metric: str, query_window: str | None = None, layer: int | None = None, head: int | None = None, **run: Any
) -> pd.DataFrame:
    """The rows of one run (``run``: model, variant, intervention) and one metric, by :meth:`Result.select`.

    Args:
        table: A tidy table.
        source: The part's name in messages.
        metric: The metric.
        query_window: The query window; default all.
        layer: The layer; default all.
        head: The head; default all.
        **run: The run's columns (``model``, ``variant``, ``intervention``) → wanted value.

    Returns:
        The matching rows (at least one).

    Raises:
        ValueError: When none match, naming the filters and what the table holds.

    Example:
        >>> t = pd.DataFrame([figure_row("c_res", 0.01, 0.0, 0.02, layer=l) for l in (-1, 0, 1)])
        >>> select(t, "leakage", "c_res", head=-1, model="m")["layer"].tolist()
        [-1, 0, 1]
    """
    rows = rows_where(table, **run)
    try:
        return Result(rows).select(metric, query_window, layer, head)
    except ValueError as error:
        where = where_text(metric=metric, layer=layer, head=head, query_window=query_window, **run)
        raise ValueError(f"{source}: no row for {where} ({error})") from None


def pick(
    table: pd.DataFrame,
    source: str,
    name: str | None = None,
    *,
    metric: str,
    query_window: str | None = None,
    layer: int | None = None,
    head: int | None = None,
    **run: Any,
) -> Estimate:
    """The single row of one run and one (metric, query window, layer, head), as an :class:`~poslens.study.claims.rules.Estimate`.

    Args:
        table: A tidy table.
        source: The part's name in messages.
        name: The estimate's name in the rule; default the metric.
        metric: The metric.
        query_window: The query window.
        layer: The layer.
        head: The head.
        **run: The run's columns (``model``, ``variant``, ``intervention``) → wanted value.

    Returns:
        The estimate, with where it came from.

    Raises:
        ValueError: When no row or several rows match.

    Example:
        >>> t = pd.DataFrame([figure_row("c_res", 0.01, 0.0, 0.02, layer=l) for l in (-1, 0)])
        >>> pick(t, "leakage", "c_res (layer 0)", metric="c_res", layer=0, head=-1, model="m").where
        "metric 'c_res', layer 0, head -1, model 'm'"
    """
    filters = dict(metric=metric, layer=layer, head=head, query_window=query_window, **run)
    where = where_text(**filters)
    rows = select(table, source, metric, query_window, layer, head, **run)
    if len(rows) > 1:
        raise ValueError(f"{source}: {len(rows)} rows for {where}; expected exactly one")
    row = rows.iloc[0]
    return Estimate(
        name or metric,
        float(row["value"]),
        float(row["ci_low"]),
        float(row["ci_high"]),
        where,
        metric=str(row["metric"]),
        model=str(row["model"]),
        variant=str(row["variant"]),
        intervention=str(row["intervention"]),
        layer=int(row["layer"]),
        head=int(row["head"]),
        query_window=str(row["query_window"]),
    )


def runs(table: pd.DataFrame, source: str, what: str) -> list[tuple[str, str]]:
    """The (model, variant) pairs present in ``table``, in order of appearance.

    Args:
        table: A table with ``model`` and ``variant`` columns.
        source: The part's name in messages.
        what: What the rows were selected for, in messages.

    Returns:
        The pairs.

    Raises:
        ValueError: When ``table`` is empty.

    Example:
        >>> runs(pd.DataFrame([figure_row("c_res", 0, 0, 0, variant=v) for v in ("base", "ntk:4", "base")]), "leakage", "c_res")
        [('m', 'base'), ('m', 'ntk:4')]
    """
    if len(table) == 0:
        raise ValueError(f"{source}: no rows for {what}")
    pairs = table[["model", "variant"]].drop_duplicates()
    return [(str(m), str(v)) for m, v in zip(pairs["model"], pairs["variant"], strict=False)]
