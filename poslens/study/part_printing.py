"""What each part's ``poslens`` command prints in the terminal once its part is made (or reused).

One function per part, named in the part's declaration (:attr:`poslens.study.part_registry.Part.show`);
each takes the part's :class:`~poslens.measurement.result.Result` and the console to print to. rich is
imported inside, so that ``poslens --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from poslens.measurement.result import Result


def wide(console: Console, width: int = 130) -> Console:
    """A console at least ``width`` columns wide: the tables are wider than a default terminal.

    Args:
        console: The console printed to.
        width: The least width.

    Returns:
        A console as wide as ``console``, or ``width``.

    Example:
        >>> from rich.console import Console
        >>> wide(Console(width=80)).width
        130
    """
    from rich.console import Console

    return Console(width=max(console.width, width))


def _print_frame(frame: pd.DataFrame, title: str, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    table.add_column(frame.index.name or "")
    for column in frame.columns:
        table.add_column(str(column))
    for index, row in frame.iterrows():
        table.add_row("all ≥1" if index == -1 else str(index), *[str(v) for v in row])
    wide(console, 150).print(table)


def _show_reduction(result: Result, title: str, console: Console, metric: str = "reduction") -> None:
    from rich.markup import escape

    from poslens.measurement.display import reading_notes

    rows = result.table[(result.table["metric"] == metric) & (result.table["head"] == -1)]
    out = wide(console)
    out.print(escape(title), rows[["intervention", "layer", "query_window", "value", "ci_low", "ci_high"]].to_string(index=False))
    # the same words as the notebook display: a reduction above 1 is a change of sign, not a removal of more than all
    for query_window in sorted(set(rows["query_window"])):
        for note in reading_notes(rows, query_window=query_window, metrics=(metric,)):
            out.print(escape(f"{query_window} queries: {note}"))


def show_leakage(result: Result, console: Console) -> None:
    """Print the leakage part: the head-mean summary for early and all queries.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> from rich.console import Console
        >>> show_leakage(result, Console())  # doctest: +SKIP
    """
    described = result.meta.get("model", {})
    note = f" — weights {described['quantized']}" if described.get("quantized") else ""
    for query_window in ("early", "all"):
        _print_frame(
            result.summary(query_window),
            f"{described.get('model', '?')} ({described.get('variant', '?')}), {query_window} queries, head mean, 95% CI{note}",
            console,
        )


def show_sinks(result: Result, console: Console) -> None:
    """Print the sinks part: the sink-reading head count per layer, and the model's total, in a titled table.

    The counts are :func:`poslens.mechanisms.sinks.sink_table`'s: a head reads the sink when its sink score (the mean
    over queries i ≥ 1 of a_i0) is at least τ; the interval's low end counts the heads whose whole score interval lies
    at or above τ, its high end the heads whose interval reaches τ. The table's layer −1 row, shown as "all", counts
    the heads of every layer together: the sum of the layers' rows.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> import pandas as pd
        >>> from rich.console import Console
        >>> from poslens.measurement.result import Result
        >>> rows = [dict(layer=layer, head=-1, metric="sink_heads", value=v, ci_low=v - 1, ci_high=v) for layer, v in ((0, 1.0), (1, 2.0), (-1, 3.0))]
        >>> show_sinks(Result(pd.DataFrame(rows), {"settings": {"tau": 0.3}}), Console(width=200, color_system=None))  # doctest: +ELLIPSIS
        sink-reading heads (sink score ≥ τ = 0.3) per layer; 'all' (layer −1): every layer's heads together, ...
        ...
    """
    from rich.markup import escape
    from rich.table import Table

    counts = result.table[result.table["metric"] == "sink_heads"]
    tau = (result.meta.get("settings") or {}).get("tau")
    out = wide(console)
    title = (
        f"sink-reading heads (sink score ≥ τ{'' if tau is None else f' = {tau:g}'}) per layer; 'all' (layer −1): every layer's "
        "heads together, the sum of the rows above. 95% interval: low = heads whose whole score interval is ≥ τ, "
        "high = heads whose interval reaches τ"
    )
    out.print(escape(title), soft_wrap=True)
    table = Table()
    for column in ("layer", "sink-reading heads", "95% CI low", "95% CI high"):
        table.add_column(column, justify="right")
    for row in counts.itertuples():  # the layers in order, then layer −1 (sink_table's order)
        table.add_row("all" if row.layer == -1 else str(row.layer), f"{row.value:g}", f"{row.ci_low:g}", f"{row.ci_high:g}")
    out.print(table)


def show_bos_swap(result: Result, console: Console) -> None:
    """Print the bos-swap part: the reduction of C_res under each replacement.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> show_bos_swap(result, Console())  # doctest: +SKIP
    """
    _show_reduction(result, "reduction of C_res = 1 − C_res(after)/C_res(before)", console)


def show_ablate_sinks(result: Result, console: Console) -> None:
    """Print the ablate-sinks part: the reduction of C_res under the sink-path ablation.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> show_ablate_sinks(result, Console())  # doctest: +SKIP
    """
    _show_reduction(result, "reduction of C_res under sink-path ablation", console)


def show_path_tests(result: Result, console: Console) -> None:
    """Print the path-tests part: each edit's change against its reference, and the dose-responses.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> show_path_tests(result, Console())  # doctest: +SKIP
    """
    from rich.markup import escape
    from rich.table import Table

    t = result.table
    picked = t[(t["kind"] == "difference") & (t["layer"] == -1) & (t["query_bin"] == -1) & (t["query_window"] == "all")]
    out = wide(console)
    table = Table(title="edited − reference on the same tokens, 95% CI (probes: folds; the rest: paired jackknife)")
    for column in ("edit", "reference", "Δ residual probe R², layers ≥ 2", "Δ L(log a), layers ≥ 2", "Δ loss (nats)"):
        table.add_column(column)
    for (edit, reference), rows in picked.groupby(["intervention", "reference"], sort=False):
        cells = []
        for metric in ("resid_probe_r2_ge2", "leakage_pattern_ge2", "next_token_loss"):
            row = rows[rows["metric"] == metric]
            cells.append("" if row.empty else f"{row['value'].iloc[0]:+.3g} [{row['ci_low'].iloc[0]:+.3g}, {row['ci_high'].iloc[0]:+.3g}]")
        table.add_row(escape(str(edit)), escape(str(reference)), *cells)
    out.print(table)
    for dose in result.meta.get("dose_responses", []):
        if dose["direction"] == "not monotone":
            said = f"dose-response of {dose['edit']} ({dose['metric']}) over {dose['dose_name']} = {dose['doses']}: not monotone, {dose['where_not']}"
            out.print(escape(said))
    print_notes(result, out)


def print_notes(result: Result, console: Console) -> None:
    """Print the notes a part's metadata carries: a sliding window's rows, quantized weights.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> print_notes(result, Console())  # doctest: +SKIP
    """
    from rich.markup import escape

    if result.meta.get("key0_rows"):  # a sliding window limits the key-0 edits to the rows that see key 0
        console.print(escape(f"note: {result.meta['key0_rows']['note']}"), soft_wrap=True)
    if result.meta.get("model", {}).get("quantized"):
        console.print(escape(f"weights: {result.meta['model']['quantized']} (4-bit quantized)"))


def show_fingerprint(result: Result, console: Console) -> None:
    """Print the fingerprint part: each position-0 setting's figures over all layers.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> show_fingerprint(result, Console())  # doctest: +SKIP
    """
    rows = result.table[(result.table["layer"] == -1)]
    console.print(rows[["intervention", "metric", "value", "ci_low", "ci_high"]].to_string(index=False))


def show_compare(result: Result, console: Console) -> None:
    """Print the compare part: C_res and C_mask over all layers, per case.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> show_compare(result, Console())  # doctest: +SKIP
    """
    t = result.table
    rows = t[(t["layer"] == -1) & (t["head"] == -1) & t["metric"].isin(["c_res", "c_mask"])]
    console.print(rows[["model", "variant", "query_window", "metric", "value", "ci_low", "ci_high"]].to_string(index=False))
    console.print("variants other than 'base' are inference-time changes of smollm2-135m; weights are 4-bit quantized")


def show_relativize(result: Result, console: Console) -> None:
    """Print the relativize part: r per edit and calibration size, and the change in next-token loss.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> show_relativize(result, Console())  # doctest: +SKIP
    """
    from rich.markup import escape
    from rich.table import Table

    from poslens.mechanisms.attribution_table import LOSS_METRIC, R_METRIC

    out = wide(console)
    table = Table(title="r = 1 − mean over layers ≥ 2 of L(log a) relativized / unedited, 95% CI (paired jackknife)")
    for column in ("edit", "calibration size", "queries", "r", "95% CI"):
        table.add_column(column)
    rows = result.table
    summary = rows[rows["metric"] == R_METRIC].sort_values(["intervention", "calibration_size", "query_window"])
    for row in summary.itertuples():
        interval = f"[{row.ci_low:.3g}, {row.ci_high:.3g}]"
        table.add_row(escape(str(row.intervention)), str(row.calibration_size), str(row.query_window), f"{row.value:.3g}", interval)
    out.print(table)
    if result.meta.get("key0_rows"):  # a sliding window limits the key-0 modes to the rows that see key 0
        out.print(escape(f"note: {result.meta['key0_rows']['note']}"), soft_wrap=True)
    loss = rows[(rows["metric"] == LOSS_METRIC) & (rows["query_bin"] == -1)]
    if len(loss):
        table = Table(title="change in next-token loss over all positions ≥ 1 (edited − unedited, nats per token), 95% CI")
        for column in ("edit", "Δ loss", "95% CI"):
            table.add_column(column)
        for row in loss.itertuples():
            table.add_row(escape(str(row.intervention)), f"{row.value:+.3g}", f"[{row.ci_low:+.3g}, {row.ci_high:+.3g}]")
        out.print(table)
