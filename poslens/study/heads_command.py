"""``poslens heads``: one metric per head, with its 95% interval, from the tables a results folder holds.

The folder is one that ``poslens report`` or the measuring commands wrote (``--out``). :func:`head_table`
finds the part whose table holds the metric per head (``leakage.parquet`` for ``c_res``, ``c_mask``,
``key0_mass`` and the other measured metrics, ``sinks.parquet`` for ``sink_score``), reads it with
:meth:`poslens.measurement.result.Result.heads` (``intervals=True``), and keeps the heads asked for:
some layers, the sink-reading heads (sink score ≥ τ, :func:`poslens.mechanisms.sinks.sink_reading_heads`,
the criterion every part of the study uses), the ``k`` of largest \\|value\\|. Its figures are those of
``Result.heads`` to the last bit; the command prints them as a table or writes them as CSV.

Only the command's options are declared here with torch, pandas and the library imported inside the
functions, so that ``poslens --help`` stays fast.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from poslens.options import DEFAULTS
from poslens.study import cli_options

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from poslens.measurement.result import Result


def default_query_window() -> str:
    """:data:`poslens.measurement.table.DEFAULT_QUERY_WINDOW`, read from its module's source so that pandas need not load.

    ``poslens --help`` lists this command's default; importing the table module would import pandas. Once the module
    is loaded (or where its source does not assign the name plainly), the attribute itself is read.

    Returns:
        The library's default query window.

    Example:
        >>> from poslens.measurement.table import DEFAULT_QUERY_WINDOW
        >>> default_query_window() == DEFAULT_QUERY_WINDOW
        True
    """
    name = "poslens.measurement.table"
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
                if any(isinstance(t, ast.Name) and t.id == "DEFAULT_QUERY_WINDOW" for t in targets) and isinstance(node.value, ast.Constant):
                    return str(node.value.value)
    from poslens.measurement.table import DEFAULT_QUERY_WINDOW

    return DEFAULT_QUERY_WINDOW


def head_table(
    folder: str | Path,
    metric: str = "c_res",
    query_window: str | None = None,
    part: str | None = None,
    layers: tuple[int, ...] = (),
    sink_reading: bool = False,
    tau: float | None = None,
    top_k: int | None = None,
) -> pd.DataFrame:
    """One metric per head from a results folder: ``layer, head, value, ci_low, ci_high``, as ``Result.heads`` gives them.

    Args:
        folder: The folder the study's commands wrote.
        metric: A metric with per-head rows (``c_res``, ``c_mask``, ``leakage_pattern``, ``key0_mass``, ``sink_score``, ...).
        query_window: ``"early"`` or ``"all"``; ``None``: the library's default (:func:`default_query_window`).
        part: The part to read (``"leakage"``, ``"sinks"``); ``None``: the first part, in the study's order, whose table
            holds ``metric`` per head.
        layers: Keep these layers only (empty: every layer).
        sink_reading: Keep the sink-reading heads only: sink score (the mean over queries i ≥ 1 of a_i0, ``key0_mass``
            in window ``all`` of the leakage part) ≥ ``tau``.
        tau: The sink-reading threshold; ``None``: the τ the folder's parts recorded, else the default (0.3).
        top_k: Keep the ``k`` heads of largest \\|value\\| (after the other filters), largest first; ``None``: every head,
            in layer and head order.

    Returns:
        The heads' rows; ``attrs`` holds ``Result.heads``'s (metric, query window, run) and ``part``, ``file`` and
        ``tau`` (where ``sink_reading``).

    Raises:
        InputError: The folder holds no part with the metric per head, the part holds several runs, a layer is not in
            the table, or ``sink_reading`` without the leakage part (the messages name the fix).

    Example:
        >>> import tempfile
        >>> head_table(tempfile.mkdtemp())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        poslens.errors.InputError: ... holds none of the parts' tables with per-head rows ...
    """
    from poslens.errors import InputError
    from poslens.study.part_registry import PARTS

    folder = Path(folder)
    window = default_query_window() if query_window is None else query_window
    loaded = _per_head_parts(folder, PARTS, part)
    if not loaded:
        raise InputError(
            f"{folder} holds none of the parts' tables with per-head rows (leakage.parquet, sinks.parquet): give the --out "
            "folder of poslens report, leakage or sinks"
        )
    name = part or next((n for n, result in loaded.items() if _holds(result, metric)), next(iter(loaded)))
    result = loaded[name]
    runs = result.table[["model", "variant", "intervention"]].drop_duplicates()
    if len(runs) > 1:
        raise InputError(
            f"the {name} part holds {len(runs)} runs (model/variant/intervention); poslens heads reads one run, as the leakage "
            "and sinks parts hold: pass --part leakage or --part sinks"
        )
    rows = result.heads(metric, window, intervals=True)
    attrs = {**rows.attrs, "part": name, "file": str(folder / PARTS[name].file)}
    if layers:
        missing = sorted(set(layers) - set(rows["layer"]))
        if missing:
            raise InputError(f"layer {', '.join(map(str, missing))} is not in the {name} part (layers {rows['layer'].min()}..{rows['layer'].max()})")
        rows = rows[rows["layer"].isin(layers)]
    if sink_reading:
        attrs["tau"] = tau = _recorded_tau(loaded) if tau is None else tau
        chosen = set(_sink_reading(folder, loaded, tau))
        rows = rows[[(layer, head) in chosen for layer, head in zip(rows["layer"], rows["head"], strict=True)]]
    if top_k is not None:
        rows = rows.assign(_size=rows["value"].abs()).sort_values("_size", ascending=False, kind="stable", na_position="last")
        rows = rows.drop(columns="_size").head(top_k)
    rows = rows.reset_index(drop=True)
    rows.attrs = attrs
    return rows


def _per_head_parts(folder: Path, parts: Any, only: str | None) -> dict[str, Result]:
    """The folder's parts whose tables hold per-head rows (one part: ``only``), in the study's order, tables only."""
    from poslens.errors import InputError
    from poslens.measurement.result import Result

    if only is not None and only not in parts:
        raise InputError(f"unknown part {only!r}; the parts: {', '.join(parts)}")
    loaded = {}
    for name, part in parts.items():
        path = folder / part.file
        if (only is None or name == only) and path.is_file():
            result = Result.load(path, sums=False)  # the table alone: the heads need no sums
            if "head" in result.table and (result.table["head"] >= 0).any():
                loaded[name] = result
    if only is not None and only not in loaded:
        raise InputError(f"{folder / parts[only].file} is not there, or holds no per-head rows; run poslens {only} --out {folder} first")
    return loaded


def _holds(result: Result, metric: str) -> bool:
    table = result.table
    return bool(((table["metric"] == metric) & (table["head"] >= 0) & (table["layer"] >= 0)).any())


def _recorded_tau(loaded: dict[str, Result]) -> float:
    """The τ the folder's parts were made with (the sinks part's first), else the default."""
    for result in loaded.values():
        tau = (result.meta.get("settings") or {}).get("tau")
        if tau is not None:
            return float(tau)
    return DEFAULTS.tau


def _sink_reading(folder: Path, loaded: dict[str, Result], tau: float) -> list[tuple[int, int]]:
    """The sink-reading heads of the folder's leakage part: sink score ≥ τ (:func:`~poslens.mechanisms.sinks.sink_reading_heads`)."""
    from poslens.errors import InputError
    from poslens.measurement.result import Result
    from poslens.mechanisms.sinks import sink_reading_heads
    from poslens.study.part_registry import baseline

    base = baseline()  # the part whose table holds every head's sink score
    leakage = loaded.get(base.name)
    if leakage is None:
        path = folder / base.file
        if not path.is_file():
            raise InputError(f"--sink-reading reads the sink scores of {path}, which is not there; run poslens {base.command} --out {folder} first")
        leakage = Result.load(path, sums=False)
    return sink_reading_heads(leakage, tau)


def show_heads(rows: pd.DataFrame, console: Console) -> None:
    """Print :func:`head_table`'s rows as a titled table: layer, head, value and its 95% interval.

    Args:
        rows: :func:`head_table`'s answer.
        console: Where to print.

    Example:
        >>> import pandas as pd
        >>> from rich.console import Console
        >>> rows = pd.DataFrame({"layer": [1], "head": [2], "value": [0.5], "ci_low": [0.25], "ci_high": [0.75]})
        >>> rows.attrs = {"metric": "c_res", "query_window": "early", "part": "leakage", "file": "r/leakage.parquet"}
        >>> show_heads(rows, Console(width=120, color_system=None))  # doctest: +ELLIPSIS
        c_res per head, early queries, value and 95% interval: 1 head of r/leakage.parquet...
    """
    from rich.markup import escape
    from rich.table import Table

    a = rows.attrs
    run = a.get("run") or {}
    said = f" ({', '.join(str(v) for v in run.values())})" if run else ""
    chosen = f", sink-reading heads only (sink score ≥ τ = {a['tau']:g})" if "tau" in a else ""
    count = f"{len(rows)} head{'s' if len(rows) != 1 else ''}"
    title = f"{a['metric']} per head, {a['query_window']} queries, value and 95% interval{chosen}: {count} of {a['file']}{said}"
    console.print(escape(title), soft_wrap=True)
    table = Table()
    for column in ("layer", "head", "value", "95% CI low", "95% CI high"):
        table.add_column(column, justify="right")
    for row in rows.itertuples(index=False):
        table.add_row(str(row.layer), str(row.head), f"{row.value:.4g}", f"{row.ci_low:.4g}", f"{row.ci_high:.4g}")
    console.print(table)


commands = typer.Typer()
"""This module's command, ``heads``; ``poslens.study.cli`` adds it to the ``poslens`` app."""


@commands.command()
def heads(
    out: Path = typer.Option(..., help="The results folder (the --out of poslens report, leakage or sinks)."),
    metric: str = typer.Option("c_res", help="A metric with per-head rows: c_res, c_mask, leakage_pattern, key0_mass, sink_score, ..."),
    query_window: str = typer.Option(default_query_window(), help="Query window: early (1 ≤ i < Q) or all (every i ≥ 1)."),
    part: str | None = typer.Option(None, help="The part to read (leakage, sinks); default: the first that holds --metric per head."),
    layer: list[int] = typer.Option([], help="Only this layer; repeat for several."),
    sink_reading: bool = typer.Option(
        False, "--sink-reading", help="Only the sink-reading heads: sink score (mean a_i0 over queries i ≥ 1, all queries) ≥ --tau."
    ),
    tau: float | None = typer.Option(
        None,
        callback=lambda value: value if value is None else cli_options.check_tau(value),
        help="With --sink-reading: the threshold τ, in (0, 1]. \\[default: the τ the folder's parts recorded, else poslens sinks' --tau]",
    ),
    top_k: int | None = typer.Option(None, min=1, help="Only the k heads of largest |value| (after --layer and --sink-reading), largest first."),
    csv: str | None = typer.Option(None, help="Write the rows as CSV to this file ('-': print them as CSV instead of the table)."),
) -> None:
    """Print one metric per head with its 95% interval, from a results folder: layer, head, value, interval.

    The figures are Result.heads(metric, query_window, intervals=True)'s on the part's table; the filters keep
    some of its rows. Without --top-k the heads are in layer and head order.

    Example: poslens heads --out results/quick --metric c_res --sink-reading --top-k 10
    """
    from rich.console import Console
    from rich.markup import escape

    from poslens.errors import PoslensError

    if not Path(out).is_dir():
        raise typer.BadParameter(f"{out} is not a folder; give the --out folder of poslens report, leakage or sinks", param_hint="'--out'")
    try:
        rows = head_table(out, metric, query_window, part, tuple(layer), sink_reading, tau, top_k)
    except PoslensError as error:
        raise typer.BadParameter(str(error)) from None
    if csv == "-":
        sys.stdout.write(rows.to_csv(index=False))
        return
    console = Console()
    show_heads(rows, Console(width=max(console.width, 100)))
    if csv is not None:
        rows.to_csv(csv, index=False)
        console.print(escape(f"wrote {csv}"), soft_wrap=True)
