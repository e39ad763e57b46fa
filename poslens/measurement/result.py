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
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.parquet as pq

from poslens.errors import InputError, NotFoundError, OutputConflictError, PoslensError, SumsMismatchError
from poslens.files import atomic_write_together
from poslens.fit.sums import CellSums
from poslens.measurement import plots
from poslens.ownership import check_replaceable, forget_written, record_written

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
            >>> Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=0, head=-1,
            ...        query_window="all", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2)]), {"model": {"model": "m"}})
            Result(model m (base), 1 rows, 1 metrics, windows: all; see .summary(), .plot(kind), .table)
        """
        t = self.table
        if t.empty or not set(COLUMNS) <= set(t.columns):
            return f"Result({len(t)} rows; see .table)"
        runs = t[["model", "variant"]].drop_duplicates()
        what = "; ".join(f"{m} ({v})" for m, v in runs.itertuples(index=False))
        label = "model" if len(runs) == 1 else f"{len(runs)} models/variants:"
        windows = ", ".join(map(str, t["query_window"].drop_duplicates()))
        return (f"Result({label} {what}, {len(t)} rows, {t['metric'].nunique()} metrics, windows: {windows}; "
                "see .summary(), .plot(kind), .table)")

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
            heading = f"{model} ({variant}), intervention {intervention}: " if len(runs) > 1 else ""
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
        return "\n".join(pieces)

    def plot(self, kind: str, query_window: str | None = None, tau: float = 0.3) -> go.Figure:
        """A standard figure of this result, drawn by :mod:`poslens.measurement.plots`.

        ``kind`` is one of:

        - ``"sources"``: C_res and C_mask by layer with 95% intervals (window ``early`` by default);
        - ``"leakage"``: L(log a) (``leakage_pattern``) per head, layer × head (window ``all`` by default);
        - ``"sinks"``: the sink score of every head; from a sinks part
          (:func:`poslens.mechanisms.sinks.sink_table`) with the count of heads
          whose score is ≥ ``tau`` per layer, or from a measurement's per-head
          ``key0_mass`` in window ``all`` (the sink score by definition).

        An unknown kind raises ``ValueError`` naming the kinds; a table without
        the metrics a kind needs raises ``ValueError`` naming the missing metric.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=-1,
            ...            query_window="early", metric=metric, value=0.1, ci_low=0.0, ci_high=0.2)
            ...            for layer in (0, 1) for metric in ("c_res", "c_mask")]))
            >>> [trace.name for trace in r.plot("sources").data]
            ['C_res (residual stream)', 'C_mask (causal mask)']
            >>> r.plot("heads")
            Traceback (most recent call last):
            ValueError: unknown plot kind 'heads'; kinds: sources, leakage, sinks
            >>> r.plot("leakage")
            Traceback (most recent call last):
            ValueError: plot('leakage') needs metric 'leakage_pattern', which this table lacks; it has: c_mask, c_res
        """
        if kind not in PLOT_KINDS:
            close = difflib.get_close_matches(str(kind), PLOT_KINDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown plot kind {kind!r}{hint}; kinds: {', '.join(PLOT_KINDS)}")
        t = self.table
        if kind == "sources":
            window = query_window or "early"
            self._needs(kind, "c_res", "c_mask")
            for metric in ("c_res", "c_mask"):
                _rows_with(t[t["metric"] == metric], "query_window", window, f" for metric {metric!r}")
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

    Example:
        >>> concat([result_a, result_b]).table.shape  # doctest: +SKIP
    """
    return Result(pd.concat([r.table for r in results], ignore_index=True), {"parts": [r.meta for r in results]})


PLOT_KINDS = ("sources", "leakage", "sinks")


def quantized_models(*results: Result) -> list[str]:
    """Names of the models behind ``results`` whose weights are quantized, in order of first appearance.

    Reads the ``quantized`` field of each result's model metadata (and of its
    ``parts``, for a stacked result): the embedded registry models record their
    4-bit GGUF quantization there, a local folder or Hugging Face cache model records None.

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


def _esc(text: Any) -> str:
    return html.escape(str(text))


def _layer_label(layer: Any) -> str:
    return "mean of layers ≥ 1" if int(layer) == -1 else str(int(layer))


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
            text += f", from {m['source']}"
        if text not in texts:
            texts.append(text)
    if texts:
        return "; ".join(texts)
    if "model" in result.table and len(result.table):
        return "model " + ", ".join(map(str, result.table["model"].drop_duplicates()))
    return "no model recorded"


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
