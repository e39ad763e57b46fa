"""Results: a tidy table plus provenance, saved to and loaded from Parquet.

The table has one row per number, with the columns of :data:`COLUMNS`
(defined in :mod:`poslens.measurement.table` with the aggregate rows, layer −1
and head −1). The provenance dict travels in the Parquet file's schema
metadata; the cell sums, when kept, in a sibling ``.sums.npz`` file so a
result can be refit or merged later. A result shows itself in a notebook
through :mod:`poslens.measurement.display` and draws its standard figures
through :mod:`poslens.measurement.plot_kinds`. Every reading that takes a query
window (``value``, ``summary``, ``heads``, ``heads_excluding_zero``, ``plot``) defaults to the same one,
:data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW` (``early``), or, for a metric measured in one window
only, that window (:func:`~poslens.measurement.table.query_window_for`). The module is over 400 lines because each method carries runnable examples;
the work is in the modules named above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from poslens.errors import InputError
from poslens.fit.replicates import Replicates
from poslens.fit.sums import CellSums
from poslens.measurement.display import held_note, result_html
from poslens.measurement.figure import Figure, case_label
from poslens.measurement.head_table import head_rows, heads_excluding_zero
from poslens.measurement.plot_kinds import plot_table
from poslens.measurement.result_files import read_result, write_result
from poslens.measurement.table import COLUMNS, head_grid, query_window_for, select_rows, summary_table
from poslens.options import DEFAULTS


@dataclass
class Result:
    """A tidy table of figures with the provenance of the run that made them.

    Attributes:
        table: The tidy table, with the columns of :data:`COLUMNS`.
        meta: The run's provenance: model, corpus, settings, software versions, timings.
        sums: The grouped cell sums the table was fitted from, or ``None``.
        fits: The in-sample figures and their delete-one-group replicates, as :func:`poslens.measure` fitted
            them (:class:`~poslens.fit.replicates.Replicates`); ``None`` until :meth:`replicates` fits them from
            the sums (a result loaded from disk).

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
    fits: Replicates | None = field(default=None, repr=False, compare=False)

    def replicates(self) -> Replicates:
        """The in-sample figures on all groups and without each group in turn: fitted once, then reused.

        Reductions, paired differences, comparisons and the attribution read
        these instead of refitting the sums; :func:`poslens.measure` keeps the
        fits it made for the table's intervals, and a result loaded from disk
        fits them from its sums on first use.

        Returns:
            The fits (:class:`~poslens.fit.replicates.Replicates`).

        Raises:
            InputError: When the result has no cell sums (a table loaded with ``sums=False``, or built by hand).

        Example:
            >>> fits = result.replicates()   # doctest: +SKIP
            >>> fits.estimate["c_res"].shape, fits.n_groups   # doctest: +SKIP
            ((2, 31, 10), 8)
        """
        if self.fits is None:
            if self.sums is None:
                raise InputError("this result has no cell sums to fit replicates from (poslens.measure keeps them; load with the .sums.npz file)")
            self.fits = Replicates.of(self.sums)
        return self.fits

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
            layer: A layer (−1: the aggregate over layers, as :data:`COLUMNS` defines it); default all.
            head: A head (−1: the aggregate over heads); default all.

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
        return select_rows(self.table, metric, query_window, layer, head)

    def value(self, metric: str, query_window: str | None = None, layer: int = -1, head: int = -1) -> float:
        """One figure (model aggregate by default).

        Unknown choices raise ``ValueError`` as in :meth:`select`; so does a
        table holding several runs (models, variants or interventions) that
        all have this figure.

        Args:
            metric: The metric.
            query_window: ``early`` or ``all``; default :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW`
                (``early``), or the one window a metric measured in one window only has
                (:func:`~poslens.measurement.table.query_window_for`).
            layer: A layer (−1: the aggregate over layers, as :data:`COLUMNS` defines it).
            head: A head (−1: the aggregate over heads).

        Returns:
            The figure's value.

        Raises:
            ValueError: When the table holds no such figure, or holds it for several runs.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=-1, head=-1,
            ...            query_window="early", metric="c_res", value=0.012, ci_low=0.0, ci_high=0.02)]))
            >>> r.value("c_res"), r.value("c_res", "early")   # the default window is early
            (0.012, 0.012)
            >>> r.value("c_res", "late")
            Traceback (most recent call last):
            ValueError: unknown query window 'late' for metric 'c_res'; this table has: early
        """
        query_window = query_window_for(self.table, metric, query_window)
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

    def summary(self, query_window: str | None = None, metrics: tuple[str, ...] | None = None) -> pd.DataFrame:
        """Per-layer aggregates (head = −1) of a few metrics, one column each, formatted ``value [low, high]``.

        ``metrics`` defaults to those of ``leakage_pattern, c_res, c_mask,
        key0_mass, probe_r2, reduction`` that the table holds; metrics named explicitly
        must all be in it. An unknown window or metric raises ``ValueError``
        naming those the table holds.

        Args:
            query_window: ``early`` or ``all``; default :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW`
                (``early``; :func:`~poslens.measurement.table.query_window_for`).
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
        table = summary_table(self.table, query_window, metrics)
        if "model" in self.table and self.table["model"].nunique() == 1:  # named above the columns, SAEs included
            table.columns.name = str(self.table["model"].iloc[0])
        return table

    def heads(self, metric: str, query_window: str | None = None, intervals: bool = False) -> pd.DataFrame:
        """One per-head metric as a layer × head grid (index ``layer``, columns ``head``), or with ``intervals=True`` as a
        tidy frame, one row per head with ``value``, ``ci_low`` and ``ci_high``.

        The grid holds the real heads only (layer ≥ 0, head ≥ 0). The long
        table's aggregate rows, marked −1, are kept apart in
        ``grid.attrs["aggregates"]``, a dict of plain numbers:

        - ``"layer_means"``: ``{layer: value}``, each layer's aggregate over its heads (head −1);
        - ``"head_means"``: ``{head: value}``, each head's aggregate over layers (layer −1), where the table
          holds such rows (a measurement's table does not: it is then empty);
        - ``"overall"``: the aggregate over heads and layers (layer −1, head −1), or None if absent.

        The aggregates are those of :data:`COLUMNS`, each metric's as its glossary entry states.

        ``grid.attrs`` also names the ``metric``, the ``query_window`` and the ``run``
        (model, variant, intervention). With ``intervals=True`` the answer is the tidy frame of
        :func:`~poslens.measurement.head_table.head_rows` (columns ``layer, head, value, ci_low, ci_high``,
        the same ``attrs``); :meth:`heads_excluding_zero` keeps the heads whose interval excludes 0.
        :meth:`~poslens.measurement.result.Result.plot` with kind ``"heads"`` draws
        the grid as a heatmap (:func:`~poslens.measurement.plots.leakage_heatmap`).

        Args:
            metric: a metric with per-head rows, such as ``"c_res"``, ``"leakage_pattern"`` or ``"key0_mass"``.
            query_window: ``"early"`` (1 ≤ i < Q) or ``"all"`` (every query i ≥ 1); default
                :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW` (``early``; a metric measured in one window
                only is read there, :func:`~poslens.measurement.table.query_window_for`).
            intervals: return the tidy frame with each head's 95% interval instead of the grid of values.

        Returns:
            The layer × head grid of values, with the aggregates in ``attrs["aggregates"]``; or, with
            ``intervals=True``, one row per head with its interval.

        Raises:
            InputError: the metric or query window is not in this table, the metric has no per-head rows
                (the message lists those that have), or the table holds several runs.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=head,
            ...            query_window="all", metric="c_res", value=layer + head / 10, ci_low=0.0, ci_high=2.0)
            ...            for layer in (-1, 0, 1) for head in (-1, 0, 1)]))
            >>> grid = r.heads("c_res", "all")
            >>> grid
            head    0    1
            layer
            0     0.0  0.1
            1     1.0  1.1
            >>> aggregates = grid.attrs["aggregates"]
            >>> aggregates["layer_means"], aggregates["head_means"], aggregates["overall"]
            ({0: -0.1, 1: 0.9}, {0: -1.0, 1: -0.9}, -1.1)
            >>> r.heads("c_res", "all", intervals=True).iloc[:2]
               layer  head  value  ci_low  ci_high
            0      0     0    0.0     0.0      2.0
            1      0     1    0.1     0.0      2.0
            >>> r.heads("c_rez", "all")
            Traceback (most recent call last):
            poslens.errors.InputError: unknown metric 'c_rez' (did you mean 'c_res'?); metrics with per-head rows: c_res
        """
        if intervals:
            return head_rows(self.table, metric, query_window)
        return head_grid(self.table, metric, query_window)

    def heads_excluding_zero(self, metric: str, query_window: str | None = None) -> pd.DataFrame:
        """The heads whose 95% interval of ``metric`` excludes 0, ranked (:func:`~poslens.measurement.head_table.heads_excluding_zero`).

        The first row is the head whose interval keeps farthest from 0. Each interval is a head's own: among
        the L·H heads, about 5% of those whose figure is 0 would exclude it by chance.

        Args:
            metric: a metric with per-head rows.
            query_window: ``"early"`` or ``"all"``; default :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW`
                (``early``; :func:`~poslens.measurement.table.query_window_for`).

        Returns:
            ``rank, layer, head, value, ci_low, ci_high, side, nearer_end``, one row per head that excludes 0.

        Raises:
            InputError: as :meth:`heads`.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="m", variant="base", intervention="none", layer=layer, head=head,
            ...            query_window="early", metric="c_res", value=0.1 * layer, ci_low=0.1 * layer - 0.05, ci_high=0.1 * layer + 0.05)
            ...            for layer in (0, 1, 2) for head in (0, 1)]))
            >>> r.heads_excluding_zero("c_res")[["rank", "layer", "head", "side"]]
               rank  layer  head     side
            0     1      2     0  above 0
            1     2      2     1  above 0
            2     3      1     0  above 0
            3     4      1     1  above 0
        """
        return heads_excluding_zero(self.table, metric, query_window)

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
            ``path`` (the CSV and sums files are its ``.csv`` and ``.sums.npz`` siblings: :func:`~poslens.measurement.result_files.saved_files`).

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
        return write_result(path, self.table, self.meta, self.sums, csv)

    @classmethod
    def load(cls, path: str | Path, sums: bool = True) -> Result:
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
        return cls(*read_result(path, sums))

    def __repr__(self) -> str:
        """One line: what this result holds and for which model, with what the user held (weights' hash, SAEs, own hooks).

        Example:
            >>> row = dict(model="m", variant="base", intervention="none", layer=0, head=-1,
            ...            query_window="all", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2)
            >>> Result(pd.DataFrame([row]), {"model": {"model": "m"}})
            Result(model m (base), 1 rows, 1 metrics, windows: all; see .summary(), .heads(metric), .plot(kind), .table)
            >>> Result(pd.DataFrame([{**row, "intervention": "bos:mean"}]))   # a run with an intervention names it
            Result(model m (base, bos:mean), 1 rows, 1 metrics, windows: all; see .summary(), .heads(metric), .plot(kind), .table)
            >>> shown = repr(Result(pd.DataFrame([{**row, "model": "m with SAE at blocks.1.hook_resid_pre"}]),
            ...             {"model": {"saes": [{"hook_point": "blocks.1.hook_resid_pre", "d_sae": 64}]}}))   # what the user attached
            >>> shown[:50], shown[shown.index("all;"):shown.index("; see")]
            ('Result(model m with SAE at blocks.1.hook_resid_pre', 'all; SAE at blocks.1.hook_resid_pre (d_sae 64)')
        """
        t = self.table
        if t.empty or not set(COLUMNS) <= set(t.columns):
            return f"Result({len(t)} rows; see .table)"
        runs = t[["model", "variant", "intervention"]].drop_duplicates()
        what = "; ".join(case_label(*run) for run in runs.itertuples(index=False, name=None))
        label = "model" if len(runs) == 1 else f"{len(runs)} runs (model, variant, intervention):"
        query_windows = ", ".join(map(str, t["query_window"].drop_duplicates()))
        held = held_note(self.meta.get("model")) if len(runs) == 1 else ""
        return (
            f"Result({label} {what}, {len(t)} rows, {t['metric'].nunique()} metrics, windows: {query_windows}{held}; "
            "see .summary(), .heads(metric), .plot(kind), .table)"
        )

    def _repr_html_(self) -> str:
        """The result as Jupyter shows it: model, 4-bit note, per-layer summary with 95% intervals, provenance.

        Rendered by :func:`poslens.measurement.display.result_html` from the
        templates the study report uses; every text taken from the result is escaped.

        Example:
            >>> r = Result(pd.DataFrame([dict(model="<m>", variant="base", intervention="none", layer=layer, head=-1,
            ...            query_window="early", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2) for layer in (-1, 0, 1)]),
            ...            {"model": {"model": "<m>", "variant": "base", "source": "/models/<m>"}})
            >>> page = r._repr_html_()
            >>> "0.1000 [0.0000, 0.2000]" in page, "&lt;m&gt;" in page, "<m>" in page
            (True, True, False)
        """
        return result_html(self)

    def plot(self, kind: str, query_window: str | None = None, tau: float = DEFAULTS.tau, metric: str | None = None) -> Figure:
        """A standard figure of this result, drawn by :mod:`poslens.measurement.plots`.

        ``kind`` is one of:

        - ``"sources"``: C_res and C_mask by layer with 95% intervals;
        - ``"leakage"``: L(log a) (``leakage_pattern``) per head, layer × head;
        - ``"heads"``: any per-head ``metric``, layer × head: the grid of
          :meth:`~poslens.measurement.result.Result.heads` drawn by
          :func:`~poslens.measurement.plots.leakage_heatmap`;
        - ``"layers"``: any ``metric``'s per-layer rows with 95% intervals, one line per run
          (:func:`~poslens.measurement.plots.by_layer`): before/after comparisons, e.g.
          ``Result(pd.concat([base.table, after.table])).plot("layers", metric="c_res")``, or the rows of
          :func:`~poslens.mechanisms.effects.reduction` (``metric="reduction"``);
        - ``"sinks"``: the sink score of every head; from a sinks part
          (:func:`~poslens.mechanisms.sinks.sink_table`) with the count of heads
          whose score is ≥ ``tau`` per layer, or from a measurement's per-head
          ``key0_mass`` in window ``all`` (the sink score by definition);
        - ``"path"``, ``"path-split"``, ``"path-doses"``: the path-specific tests' table
          (:func:`~poslens.mechanisms.path_tests.path_specific_tests`): the probe R² of log(i + 1) by layer under each
          key-phase freeze and sham (``metric`` ``resid_probe_r2``, the default, or ``attn_out_probe_r2``); the split
          of the sink path; the dose-responses (:mod:`poslens.measurement.path_plots`);
        - ``"sink-split"``: the sink path's split (:func:`~poslens.mechanisms.sink_split.sink_path_split`): per readout
          (V, R²), the sink path's total and its parts through the mask's count and key 0's phase, with intervals
          (:mod:`poslens.measurement.split_plots`).

        The query window defaults to :data:`~poslens.measurement.table.DEFAULT_QUERY_WINDOW` (``early``) for every
        kind, as for every other reading; a table that holds its metrics in one window only (the sinks part, the path
        tests, the split) is drawn in that window. ``"sinks"`` from a measurement draws each head's key-0 mass in the
        window (the sinks part's sink score is the key-0 mass over all queries: pass ``query_window="all"`` for it).
        Every title names the run it shows: model, variant and, if any, intervention.
        In a notebook the figure also carries an HTML rendering, so it survives
        a saved notebook's export to HTML (:class:`~poslens.measurement.figure.Figure`).

        Args:
            kind: ``"sources"``, ``"leakage"``, ``"heads"``, ``"layers"``, ``"sinks"``, ``"path"``, ``"path-split"``,
                ``"path-doses"`` or ``"sink-split"``.
            query_window: the query window (``"early"`` or ``"all"``); see above for the default.
            tau: the sink threshold of ``"sinks"``.
            metric: the metric of ``"heads"`` and ``"layers"`` (required there), the readout of a ``path…`` kind
                (optional), refused by the other kinds.

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
            >>> [trace.name for trace in r.plot("layers", metric="c_res").data]
            ['m (base)']
            >>> r.plot("head")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ValueError: unknown plot kind 'head' (did you mean 'heads'?); kinds: sources, leakage, heads, layers, sinks, ...
            >>> r.plot("leakage")
            Traceback (most recent call last):
            ValueError: plot('leakage') needs metric 'leakage_pattern', which this table lacks; it has: c_mask, c_res
        """
        return plot_table(self.table, kind, query_window, tau, metric)


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
