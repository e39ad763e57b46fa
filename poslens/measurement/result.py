"""Results: a tidy table plus provenance, saved to and loaded from Parquet.

The table has one row per number: ``model, variant, intervention, layer, head,
query_window, metric, value, ci_low, ci_high`` (head = −1: aggregate over
heads; layer = −1: aggregate over layers ≥ 1). The provenance dict travels in
the Parquet file's schema metadata; the cell sums, when kept, in a sibling
``.sums.npz`` file so a result can be refit or merged later.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from poslens.files import atomic_write
from poslens.fit.sums import CellSums

COLUMNS = ["model", "variant", "intervention", "layer", "head", "query_window", "metric", "value", "ci_low", "ci_high"]
META_KEY = b"poslens"


class OutputNotWritableError(OSError):
    """The output folder cannot be created or written to.

    Example:
        >>> import tempfile, pathlib; taken = pathlib.Path(tempfile.mkdtemp()) / "a-file"; taken.touch()
        >>> ensure_writable_dir(taken / "out")   # a file stands where the folder should be
        Traceback (most recent call last):
        poslens.measurement.result.OutputNotWritableError: cannot write results to .../a-file/out: Not a directory...
    """


def ensure_writable_dir(folder: str | Path) -> Path:
    """Create ``folder`` if needed and check that a file can be written in it.

    Raises :class:`OutputNotWritableError` naming the folder and the reason.

    Example:
        >>> import tempfile, pathlib
        >>> ensure_writable_dir(pathlib.Path(tempfile.mkdtemp()) / "out").is_dir()
        True
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputNotWritableError(f"cannot write results to {folder}: it is a file, not a folder; choose an output folder you can write to")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        reason = error.strerror or str(error)
        if error.filename and Path(error.filename) != folder:
            reason += f" ({error.filename})"
        raise OutputNotWritableError(
            f"cannot write results to {folder}: {reason}; choose an output folder you can write to"
        ) from error
    return folder


@dataclass
class Result:
    """A tidy table of figures with the provenance of the run that made them.

    Example:
        >>> import pandas as pd
        >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=0, head=-1,
        ...            query_window="all", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2)]), {"seed": 0})
        >>> r.value("c_res", layer=0)
        0.1
    """

    table: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    sums: CellSums | None = None

    def to_frame(self) -> pd.DataFrame:
        """The tidy table (a copy).

        Example:
            >>> r = Result(pd.DataFrame({"metric": ["c_res"], "value": [0.1]}))
            >>> frame = r.to_frame(); frame.loc[0, "value"] = 9.0
            >>> float(r.table.loc[0, "value"])   # editing the copy leaves the result as it was
            0.1
        """
        return self.table.copy()

    def select(self, metric: str, query_window: str | None = None, layer: int | None = None, head: int | None = None) -> pd.DataFrame:
        """Rows of one metric, optionally for one window, layer and head.

        A metric, window, layer or head that this table does not hold raises
        ``ValueError`` naming those it does hold (for the choices made before it).

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=head,
            ...            query_window=window, metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2)
            ...            for layer in (-1, 0, 1, 2) for head in (-1, 0, 1) for window in ("early", "all")]))
            >>> r.select("c_res", "early", head=-1)["layer"].tolist()
            [-1, 0, 1, 2]
            >>> r.select("c_rez")
            Traceback (most recent call last):
            ValueError: unknown metric 'c_rez' (did you mean 'c_res'?); this table has: c_res
            >>> r.select("c_res", "early", layer=7)
            Traceback (most recent call last):
            ValueError: layer 7 not in this table for metric 'c_res', window 'early'; layers: -1 (all layers ≥ 1), 0 … 2
        """
        t = _rows_with(self.table, "metric", metric, "")
        context = f" for metric {metric!r}"
        for column, wanted, label in (("query_window", query_window, "window"), ("layer", layer, "layer"), ("head", head, "head")):
            if wanted is not None:
                t = _rows_with(t, column, wanted, context)
                context += f", {label} {_shown(wanted)}"
        return t

    def value(self, metric: str, query_window: str = "all", layer: int = -1, head: int = -1) -> float:
        """One figure (model aggregate by default).

        Unknown choices raise ``ValueError`` as in :meth:`select`; so does a
        table holding several runs (models, variants or interventions) that
        all have this figure.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=-1, head=-1,
            ...            query_window="early", metric="c_res", value=0.012, ci_low=0.0, ci_high=0.02)]))
            >>> r.value("c_res", "early")
            0.012
            >>> r.value("c_res", "late")
            Traceback (most recent call last):
            ValueError: unknown query window 'late' for metric 'c_res'; this table has: early
        """
        rows = self.select(metric, query_window, layer, head)
        if len(rows) != 1:  # select() never returns no rows, so several runs or repeated rows hold this figure
            runs = rows[["model", "variant", "intervention"]].drop_duplicates()
            listed = "; ".join("/".join(map(str, run)) for run in runs.itertuples(index=False))
            where = f"{len(runs)} runs (model/variant/intervention: {listed})" if len(runs) > 1 else "repeated rows"
            raise ValueError(
                f"{len(rows)} rows for metric={metric!r}, window={query_window!r}, layer={layer}, head={head} "
                f"come from {where}; take them all with select(), or keep one run's rows of result.table first"
            )
        return float(rows["value"].iloc[0])

    def summary(self, query_window: str = "early", metrics: tuple[str, ...] | None = None) -> pd.DataFrame:
        """Per-layer aggregates (head = −1) of a few metrics, one column each, formatted ``value [low, high]``.

        ``metrics`` defaults to those of ``leakage_pattern, c_res, c_mask,
        key0_mass, probe_r2`` that the table holds; metrics named explicitly
        must all be in it. An unknown window or metric raises ``ValueError``
        naming those the table holds.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=-1,
            ...            query_window="early", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2) for layer in (-1, 0, 1)]))
            >>> table = r.summary("early")   # metrics the table lacks (c_mask, probe_r2, ...) are left out
            >>> table.index.tolist(), table.loc[-1, "c_res"]
            ([0, 1, -1], '0.1000 [0.0000, 0.2000]')
            >>> r.summary("early", metrics=("c_res", "c_mask"))
            Traceback (most recent call last):
            ValueError: unknown metric 'c_mask'; this table has: c_res
        """
        table = self.table
        _rows_with(table, "query_window", query_window, "")
        if metrics is None:
            held = set(table["metric"])
            metrics = tuple(m for m in ("leakage_pattern", "c_res", "c_mask", "key0_mass", "probe_r2") if m in held)
        for metric in metrics:
            _rows_with(table, "metric", metric, "")
        rows = table[(table["head"] == -1) & (table["query_window"] == query_window) & table["metric"].isin(metrics)]
        if rows.empty:
            raise ValueError(
                f"no per-layer rows (head -1) in window {query_window!r} for metrics {', '.join(metrics) or '(none)'}; "
                f"this table has metrics: {', '.join(sorted(set(table['metric'])))}; pass metrics=(...)"
            )
        cells = rows.assign(text=[f"{v:.4f} [{lo:.4f}, {hi:.4f}]" for v, lo, hi in zip(rows["value"], rows["ci_low"], rows["ci_high"])])
        wide = cells.pivot_table(index="layer", columns="metric", values="text", aggfunc="first")
        order = sorted(wide.index, key=lambda layer: (layer < 0, layer))
        return wide.reindex(index=order, columns=[m for m in metrics if m in wide.columns])

    def save(self, path: str | Path, csv: bool = True) -> Path:
        """Write ``path`` (Parquet with provenance), a ``.csv`` twin and, if present, ``.sums.npz``.

        Each file is written under a temporary name and moved into place with
        ``os.replace``; the Parquet file comes last, so an interrupted save
        never leaves a half file, and never a new Parquet file without its sums.
        An unwritable folder raises :class:`OutputNotWritableError`.

        Example:
            >>> result.save("out/leakage.parquet")  # doctest: +SKIP
        """
        path = Path(path)
        ensure_writable_dir(path.parent)
        table = pa.Table.from_pandas(self.table, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[META_KEY] = json.dumps(self.meta, default=str).encode()
        sums_path = path.with_suffix(".sums.npz")
        if self.sums is not None:
            atomic_write(sums_path, self.sums.save)
        else:
            sums_path.unlink(missing_ok=True)  # stale sums of an earlier result would be loaded with this table
        if csv:
            atomic_write(path.with_suffix(".csv"), lambda tmp: self.table.to_csv(tmp, index=False))
        atomic_write(path, lambda tmp: pq.write_table(table.replace_schema_metadata(meta), tmp))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Result":
        """Read a result written by :meth:`save` (with its sums if they were saved).

        A missing file raises ``FileNotFoundError``; a ``.csv`` twin, a file
        that is not Parquet, or a Parquet file poslens did not write (no
        provenance, or columns missing) raise ``ValueError`` saying what to load.

        Example:
            >>> Result.load("out/leakage.parquet").meta["model"]["model"]  # doctest: +SKIP
            'smollm2-135m'
            >>> import tempfile, pathlib
            >>> foreign = pathlib.Path(tempfile.mkdtemp()) / "other.parquet"
            >>> pd.DataFrame({"a": [1]}).to_parquet(foreign)
            >>> Result.load(foreign)
            Traceback (most recent call last):
            ValueError: .../other.parquet was not written by poslens (it has no poslens metadata); ...
        """
        path = Path(path)
        _check_loadable(path)
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as error:
            raise ValueError(
                f"{path} cannot be read as Parquet ({error}); Result.load reads the .parquet files that "
                "Result.save and the poslens commands write"
            ) from error
        raw = (table.schema.metadata or {}).get(META_KEY)
        if raw is None:
            raise ValueError(
                f"{path} was not written by poslens (it has no poslens metadata); Result.load reads the .parquet "
                "files that Result.save and the poslens commands write"
            )
        try:
            meta = json.loads(raw)
        except ValueError as error:
            raise ValueError(f"{path}: its poslens metadata is not valid JSON ({error}); the file is damaged") from error
        missing = [c for c in COLUMNS if c not in table.column_names]
        if missing:
            raise ValueError(
                f"{path} lacks the result columns {', '.join(missing)} (a poslens result has {', '.join(COLUMNS)}; "
                f"this file has {', '.join(table.column_names) or 'none'})"
            )
        sums_path = path.with_suffix(".sums.npz")
        sums = CellSums.load(sums_path) if sums_path.exists() else None
        return cls(table.to_pandas(), meta, sums)


def _check_loadable(path: Path) -> None:
    """Raise the error that says what to load when ``path`` is missing, a folder or a ``.csv`` twin."""
    if path.suffix.lower() == ".csv":
        twin = path.with_suffix(".parquet")
        if twin.is_file():
            raise ValueError(
                f"{path} is the CSV copy of a result, for reading by eye; Result.load reads the Parquet file, "
                f"which keeps the provenance and sums: load {twin}"
            )
        if path.exists():
            raise ValueError(
                f"{path} is a CSV file; Result.load reads the .parquet file that Result.save writes beside the .csv, "
                f"and there is no {twin.name} beside it"
            )
    if not path.exists():
        raise FileNotFoundError(f"no result file at {path}")
    if path.is_dir():
        raise ValueError(f"{path} is a folder; give the path of a result's .parquet file in it (e.g. {path / 'leakage.parquet'})")


def concat(results: list[Result]) -> Result:
    """Stack several results' tables; provenance is kept as a list under ``parts``.

    Example:
        >>> concat([result_a, result_b]).table.shape  # doctest: +SKIP
    """
    return Result(pd.concat([r.table for r in results], ignore_index=True), {"parts": [r.meta for r in results]})


def _rows_with(rows: pd.DataFrame, column: str, wanted: Any, context: str) -> pd.DataFrame:
    """The rows whose ``column`` equals ``wanted``; if none, ``ValueError`` naming the values ``rows`` holds."""
    picked = rows[rows[column] == wanted]
    if len(picked):
        return picked
    present = rows[column].drop_duplicates().tolist()
    if column in ("layer", "head"):
        raise ValueError(f"{column} {_shown(wanted)} not in this table{context}; {column}s: {_numbers(present, column)}")
    choices = [str(c) for c in (sorted(present) if column == "metric" else present)]
    close = difflib.get_close_matches(str(wanted), choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    name = "query window" if column == "query_window" else column
    raise ValueError(f"unknown {name} {wanted!r}{context}{hint}; this table has: {', '.join(choices) or 'no rows'}")


def _shown(value: Any) -> str:
    """A wanted value as the message shows it: strings quoted, numbers plain (also NumPy's)."""
    return repr(value) if isinstance(value, str) else str(value)


def _numbers(values: list[Any], column: str) -> str:
    """Layer or head numbers as text: the aggregate −1 first and named, runs of three or more as ``a … b``."""
    numbers = sorted(int(v) for v in values)
    parts = [f"-1 (all {'layers ≥ 1' if column == 'layer' else 'heads'})"] if -1 in numbers else []
    runs: list[list[int]] = []
    for n in (n for n in numbers if n != -1):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    for run in runs:
        parts += [f"{run[0]} … {run[-1]}"] if len(run) >= 3 else [str(n) for n in run]
    return ", ".join(parts) or "none"
