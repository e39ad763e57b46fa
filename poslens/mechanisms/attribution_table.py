"""The relativize part's table: its columns, the labels of its edits, its r lookup, and the files of its old layout.

:func:`~poslens.mechanisms.attribution.cumulative_attribution` writes one tidy
result: the columns of every table plus :data:`EXTRA_COLUMNS`, each edit
named in ``intervention`` (:func:`edit_label`), r and the change in next-token
loss as rows of their own metrics (:data:`R_METRIC`, :data:`LOSS_METRIC`). This
module reads that table without loading torch, so the claims can import it;
:func:`read_old_layout` reads the four files of table format 1 into the same rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from poslens.errors import InputError, OldLayoutError
from poslens.measurement.result import Result
from poslens.measurement.table import COLUMNS
from poslens.version import FORMAT_INTRODUCED, TABLE_FORMAT, __version__

#: The columns of the relativize part's table beyond the tidy ones (:data:`~poslens.measurement.table.COLUMNS`).
EXTRA_COLUMNS = ["kind", "calibration_size", "query_bin", "query_low", "query_high"]
#: The metric of r, one row per edit, calibration size and query window (layer −1, kind ``reduction``).
R_METRIC = "reduction_ge2"
#: The metric of the change in next-token loss, one row per edit and query bin (layer −1, kind ``difference``).
LOSS_METRIC = "loss_change"


def edit_label(mode: str) -> str:
    """The ``intervention`` label of a relativization mode's rows: ``relativize:<mode>``; ``none`` and placebos as they are.

    Args:
        mode: ``none`` (the unedited run), a relativization mode, or a placebo's label (``placebo:…``).

    Returns:
        The label, as the claims and the loss rows name the edit.

    Example:
        >>> edit_label("all"), edit_label("none"), edit_label("placebo:all")
        ('relativize:all', 'none', 'placebo:all')
    """
    return mode if mode == "none" or mode.startswith("placebo:") else f"relativize:{mode}"


def attribution_figure(result: Result, mode: str, query_window: str = "all") -> pd.Series:
    """The row of r for ``mode`` at the largest calibration size (what C3 and C7 read), from the relativize part.

    Args:
        result: The relativize part (:func:`cumulative_attribution`, ``Study.relativize()``).
        mode: ``"all"``, ``"key0"``, ``"all-but-key0"`` or a placebo's label (``"placebo:all"``).
        query_window: ``"all"`` or ``"early"``.

    Returns:
        The row: value, ci_low, ci_high and the rest of its columns.

    Raises:
        InputError: When the part has no such row (the message names the edits it has).

    Example:
        >>> row = dict(model="m", variant="base", intervention="relativize:all", layer=-1, head=-1, query_window="all",
        ...            metric=R_METRIC, value=0.3, ci_low=0.2, ci_high=0.4, kind="reduction", calibration_size=8)
        >>> float(attribution_figure(Result(pd.DataFrame([row, {**row, "calibration_size": 4, "value": 0.1}])), "all")["value"])
        0.3
        >>> attribution_figure(Result(pd.DataFrame([row])), "key0")
        Traceback (most recent call last):
        poslens.errors.InputError: no r row (metric reduction_ge2) for mode 'key0' in window 'all'; the part has r of: relativize:all
    """
    t = result.table
    held = t[t["metric"] == R_METRIC] if len(t) and "calibration_size" in t else t.iloc[0:0]
    rows = held[(held["intervention"] == edit_label(mode)) & (held["query_window"] == query_window)]
    if not len(rows):
        have = ", ".join(dict.fromkeys(map(str, held["intervention"]))) if len(held) else "none (not a relativize part?)"
        raise InputError(f"no r row (metric {R_METRIC}) for mode {mode!r} in window {query_window!r}; the part has r of: {have}")
    return rows[rows["calibration_size"] == rows["calibration_size"].max()].iloc[0]


#: The files of the relativize part in the layout of table format 1: three tables and the provenance.
OLD_FILES = ("attribution.json", "attribution.parquet", "attribution_summary.parquet", "attribution_loss.parquet")


def old_layout_message(folder: str | Path) -> str:
    """What the folder holds and what this poslens writes instead, naming both versions.

    Args:
        folder: The study folder holding ``attribution.json``.

    Returns:
        The sentence (without the fix, which depends on who reads it).

    Example:
        >>> old_layout_message("out")  # doctest: +ELLIPSIS
        'out holds the relativize part in its old layout of table format 1 (attribution.json, attribution.parquet, ...'
    """
    return (
        f"{folder} holds the relativize part in its old layout of table format 1 ({', '.join(OLD_FILES)}, "
        f"written by poslens before {FORMAT_INTRODUCED['table'][2]}); this poslens {__version__} keeps it as one result, "
        f"relativize.parquet (table format {TABLE_FORMAT})"
    )


def read_old_layout(folder: str | Path) -> Result:
    """The relativize part of an older poslens (:data:`OLD_FILES`), as the rows :func:`cumulative_attribution` now makes.

    Each old table becomes rows of the one table: a mode is the label of its edit (:func:`edit_label`), the summary's
    r rows get layer −1 and kind ``reduction``, the loss rows (at the largest calibration size) window ``all`` and
    kind ``difference``; every number is kept as it was.

    Args:
        folder: The folder holding the four files.

    Returns:
        The part, with the old ``attribution.json`` as its ``meta``.

    Raises:
        OldLayoutError: When a file is missing or cannot be read (the message names both layouts).

    Example:
        >>> import json, tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> pd.DataFrame([dict(model="m", variant="base", mode="all", calibration_size=8, metric=R_METRIC,
        ...                    query_window="all", value=0.3, ci_low=0.2, ci_high=0.4)]).to_parquet(folder / "attribution_summary.parquet")
        >>> for name in ("attribution.parquet", "attribution_loss.parquet"):
        ...     pd.DataFrame().to_parquet(folder / name)
        >>> _ = (folder / "attribution.json").write_text(json.dumps({"corpus": {"seq_len": 16}}))
        >>> read_old_layout(folder).table[["intervention", "layer", "kind", "calibration_size", "value"]]
             intervention  layer       kind  calibration_size  value
        0  relativize:all     -1  reduction                 8    0.3
    """
    folder = Path(folder)
    try:
        meta = json.loads((folder / "attribution.json").read_text())
        layers, summary, loss = (pd.read_parquet(folder / name) for name in OLD_FILES[1:])
    except (OSError, ValueError) as error:
        raise OldLayoutError(f"{old_layout_message(folder)}; the old files cannot be read ({type(error).__name__}: {error})") from error
    seq_len = int((meta.get("corpus") or {}).get("seq_len") or (loss["query_high"].max() if len(loss) else 0))
    frames = []
    if len(layers):
        frames.append(layers.assign(intervention=layers["mode"].astype(str).map(edit_label), head=-1))
    if len(summary):
        frames.append(summary.assign(intervention=summary["mode"].astype(str).map(edit_label), layer=-1, head=-1, kind="reduction"))
    if len(loss):
        largest = int(summary["calibration_size"].max()) if len(summary) else 0
        frames.append(loss.assign(intervention=loss["edit"], layer=-1, head=-1, query_window="all", kind="difference", calibration_size=largest))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*COLUMNS, *EXTRA_COLUMNS])
    for column, value in (("query_bin", -1), ("query_low", 1), ("query_high", seq_len)):
        table[column] = table[column].fillna(value).astype(int) if column in table else value
    return Result(table[[*COLUMNS, *EXTRA_COLUMNS]].astype({"layer": int, "head": int, "calibration_size": int}), meta)


__all__ = ["EXTRA_COLUMNS", "LOSS_METRIC", "OLD_FILES", "R_METRIC", "attribution_figure", "edit_label", "old_layout_message", "read_old_layout"]
