"""Results: a tidy table plus provenance, saved to and loaded from Parquet.

The table has one row per number: ``model, variant, intervention, layer, head,
query_window, metric, value, ci_low, ci_high`` (head = −1: aggregate over
heads; layer = −1: aggregate over layers ≥ 1). The provenance dict travels in
the Parquet file's schema metadata; the cell sums, when kept, in a sibling
``.sums.npz`` file so a result can be refit or merged later.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

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


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` through a temporary sibling and one ``os.replace``: never a half file."""
    # Not mkstemp: its files are private (0600); the writer creates this one with the usual permissions.
    tmp = path.parent / f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp{path.suffix}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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

        Example:
            >>> result.select("c_res", "early", head=-1)  # doctest: +SKIP
        """
        t = self.table[self.table["metric"] == metric]
        for column, wanted in (("query_window", query_window), ("layer", layer), ("head", head)):
            if wanted is not None:
                t = t[t[column] == wanted]
        return t

    def value(self, metric: str, query_window: str = "all", layer: int = -1, head: int = -1) -> float:
        """One figure (model aggregate by default).

        Example:
            >>> result.value("c_res", "early")  # doctest: +SKIP
            0.012...
        """
        rows = self.select(metric, query_window, layer, head)
        if len(rows) != 1:
            raise KeyError(f"{len(rows)} rows for metric={metric!r}, window={query_window!r}, layer={layer}, head={head}")
        return float(rows["value"].iloc[0])

    def summary(self, query_window: str = "early", metrics: tuple[str, ...] = ("leakage_pattern", "c_res", "c_mask", "key0_mass", "probe_r2")) -> pd.DataFrame:
        """Per-layer aggregates (head = −1) of a few metrics, one column each, formatted ``value [low, high]``.

        Example:
            >>> print(result.summary("early"))  # doctest: +SKIP
        """
        rows = self.table[(self.table["head"] == -1) & (self.table["query_window"] == query_window) & self.table["metric"].isin(metrics)]
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
            _write_atomically(sums_path, self.sums.save)
        else:
            sums_path.unlink(missing_ok=True)  # stale sums of an earlier result would be loaded with this table
        if csv:
            _write_atomically(path.with_suffix(".csv"), lambda tmp: self.table.to_csv(tmp, index=False))
        _write_atomically(path, lambda tmp: pq.write_table(table.replace_schema_metadata(meta), tmp))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Result":
        """Read a result written by :meth:`save` (with its sums if they were saved).

        Example:
            >>> Result.load("out/leakage.parquet").meta["model"]["model"]  # doctest: +SKIP
            'smollm2-135m'
        """
        path = Path(path)
        table = pq.read_table(path)
        raw = (table.schema.metadata or {}).get(META_KEY)
        meta = json.loads(raw) if raw else {}
        sums_path = path.with_suffix(".sums.npz")
        sums = CellSums.load(sums_path) if sums_path.exists() else None
        return cls(table.to_pandas(), meta, sums)


def concat(results: list[Result]) -> Result:
    """Stack several results' tables; provenance is kept as a list under ``parts``.

    Example:
        >>> concat([result_a, result_b]).table.shape  # doctest: +SKIP
    """
    return Result(pd.concat([r.table for r in results], ignore_index=True), {"parts": [r.meta for r in results]})
