"""The files of a saved result: the Parquet table with its provenance, its CSV copy and its cell sums.

:func:`write_result` and :func:`read_result` do the work of
:meth:`poslens.measurement.result.Result.save` and ``Result.load``, which
document the rules: nothing of the user's is overwritten, the files are
written atomically together, and a table is never paired with another run's
sums (:data:`SUMS_TAG_KEY`).
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from poslens.errors import InputError, NotFoundError, OutputConflictError, PoslensError, SumsMismatchError
from poslens.files import atomic_write_together
from poslens.fit.sums import CellSums
from poslens.fit.sums_files import load_sums, save_sums, saved_tag
from poslens.measurement.table import COLUMNS
from poslens.ownership import forget_written, record_written, replacing
from poslens.version import TABLE_FORMAT, __version__, newer_format_message

META_KEY = b"poslens"
"""The key of the provenance (JSON) in the Parquet file's schema metadata."""
TABLE_FORMAT_KEY = b"poslens_table_format"
"""The key of the table's format number (:data:`poslens.version.TABLE_FORMAT`); a file without it is format 1."""
VERSION_KEY = b"poslens_version"
"""The key of the poslens version that wrote the file, named when a newer format is refused."""
SUMS_TAG_KEY = b"poslens_sums_tag"
"""The key of the tag saved with the ``.sums.npz`` beside the table (the same tag is inside the sums file)."""


class WithSums(Protocol):
    """What :func:`saved_files` reads of a result: whether it keeps cell sums.

    Example:
        >>> from types import SimpleNamespace
        >>> [p.name for p in saved_files("out/a.parquet", SimpleNamespace(sums=None), csv=False)]
        ['a.parquet']
    """

    sums: CellSums | None


class OutputNotWritableError(PoslensError, OSError):
    """The output folder cannot be created or written to.

    Example:
        >>> import tempfile, pathlib; taken = pathlib.Path(tempfile.mkdtemp()) / "a-file"; taken.touch()
        >>> ensure_writable_dir(taken / "out")   # a file stands where the folder should be
        Traceback (most recent call last):
        poslens.measurement.result_files.OutputNotWritableError: cannot write results to .../a-file/out: Not a directory...
    """


def _loops(link: Path) -> bool:
    """Whether the symbolic link ``link`` resolves back into itself (a loop), rather than to a missing target."""
    try:
        link.resolve(strict=True)
    except RuntimeError:  # Python < 3.13: "Symlink loop"
        return True
    except OSError as error:
        return error.errno == errno.ELOOP
    return False


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
    dangling = next((p for p in (folder, *folder.parents) if p.is_symlink() and not p.exists()), None)
    if dangling is not None:  # mkdir would say only "File exists"
        if _loops(dangling):
            raise OutputNotWritableError(
                f"cannot write results to {folder}: {dangling} is a symbolic link that leads back to itself "
                f"({dangling} -> {os.readlink(dangling)}), so it never reaches a folder; remove the link or choose another output folder"
            )
        raise OutputNotWritableError(
            f"cannot write results to {folder}: {dangling} is a symbolic link to {os.readlink(dangling)}, which does not exist; "
            "create the folder it points to, remove the link, or choose another output folder"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        reason = error.strerror or str(error)
        if error.filename and Path(error.filename) != folder:
            reason += f" ({error.filename})"
        raise OutputNotWritableError(f"cannot write results to {folder}: {reason}; choose an output folder you can write to") from error
    return folder


def write_result(path: str | Path, table: pd.DataFrame, meta: dict[str, Any], sums: CellSums | None, csv: bool = True) -> Path:
    """Write a result's files: the work of :meth:`~poslens.measurement.result.Result.save`, which states the rules.

    Args:
        path: The Parquet file to write (``….parquet``).
        table: The tidy table.
        meta: The provenance, saved as JSON in the Parquet metadata.
        sums: The cell sums, saved beside the table with a shared tag, or None.
        csv: Also write the ``.csv`` copy.

    Returns:
        ``path``.

    Raises:
        OutputConflictError: ``path`` is a folder, or one of the files would replace one poslens did not write.
        InputError: ``path`` does not end in ``.parquet``, or its name is too long.
        OutputNotWritableError: The folder cannot be written.

    Example:
        >>> folder = Path(tempfile.mkdtemp())
        >>> write_result(folder / "t.parquet", pd.DataFrame({"metric": ["c_res"]}), {"seed": 0}, None).name
        't.parquet'
    """
    path = Path(path)
    if len(os.fsencode(path.stem)) > 215:  # the temporary file of the .parquet adds up to 38 bytes; a name holds 255
        raise InputError(
            f"{path}: the name {path.name!r} is too long ({len(os.fsencode(path.name))} bytes); Result.save writes "
            f"its .csv and .sums.npz twins and temporary files beside it under longer names, which must fit in the "
            "255 bytes a file name may hold: give a name of at most 215 bytes before .parquet"
        )
    if path.is_dir():
        raise OutputConflictError(f"{path} is a folder; Result.save writes a file: give a path in it, such as {path / 'leakage.parquet'}")
    if path.suffix.lower() != ".parquet":
        raise InputError(
            f"Result.save writes Parquet (with a .csv copy beside it): give a path ending in .parquet, "
            f"such as {path.with_suffix('.parquet')}, not {path}"
        )
    ensure_writable_dir(path.parent)
    sums_path = path.with_suffix(".sums.npz")
    csv_path = path.with_suffix(".csv")
    # checked before anything is written; a concurrent save of the same files finishes first, then they are replaced
    with replacing([path, sums_path] + ([csv_path] if csv else [])):
        return _write_checked(path, table, meta, sums, csv)


def _write_checked(path: Path, table: pd.DataFrame, meta: dict[str, Any], sums: CellSums | None, csv: bool) -> Path:
    """The rest of :func:`write_result`, its files checked and the folder's manifest lock held: write together, list."""
    sums_path = path.with_suffix(".sums.npz")
    csv_path = path.with_suffix(".csv")
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    schema_meta = dict(arrow.schema.metadata or {})
    schema_meta[META_KEY] = json.dumps(meta, default=str).encode()
    schema_meta[TABLE_FORMAT_KEY] = str(TABLE_FORMAT).encode()
    schema_meta[VERSION_KEY] = __version__.encode()
    writes: list[tuple[str | Path, Callable[[Path], None]]] = []
    if sums is not None:
        tag = uuid.uuid4().hex
        schema_meta[SUMS_TAG_KEY] = tag.encode()
        writes.append((sums_path, lambda tmp: save_sums(sums, tmp, tag=tag)))
    if csv:
        writes.append((csv_path, lambda tmp: table.to_csv(tmp, index=False)))
    writes.append((path, lambda tmp: pq.write_table(arrow.replace_schema_metadata(schema_meta), tmp)))
    written = atomic_write_together(writes)  # all complete before any replaces its old version
    if sums is None and sums_path.exists():
        sums_path.unlink()  # stale sums of an earlier result would be paired with this table
        forget_written([sums_path])
    record_written(written)
    return path


#: The relativize part's Parquet files in table format 1 (poslens.mechanisms.attribution_table.OLD_FILES, which this
#: layer cannot import), which Result.load cannot read but names as an older poslens's.
OLD_RELATIVIZE_FILES = ("attribution.parquet", "attribution_summary.parquet", "attribution_loss.parquet")
#: Part files that exist only from table format 2 on: one that says format 1 (or less) was altered.
FORMAT_2_FILES = ("relativize.parquet", "comparisons.parquet")


def read_result(path: str | Path, sums: bool = True) -> tuple[pd.DataFrame, dict[str, Any], CellSums | None]:
    """Read a result's files: the work of :meth:`~poslens.measurement.result.Result.load`, which states the checks.

    Args:
        path: The ``.parquet`` file.
        sums: Read the cell sums too.

    Returns:
        ``(table, meta, sums)``; sums is None when not asked for or not saved.

    Raises:
        FileNotFoundError: No file at ``path``.
        InputError: Not a poslens result (the message says what to load; a file of the relativize part's old
            layout is named as such), a newer table format than this poslens reads (the message names both
            versions), or a table format no poslens wrote (below 1, or 1 for a file that format 2 introduced).
        SumsMismatchError: The sums beside the table are missing or belong to another table.

    Example:
        >>> folder = Path(tempfile.mkdtemp())
        >>> row = dict(model="m", variant="base", intervention="none", layer=0, head=-1, query_window="all",
        ...            metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2)
        >>> table, meta, cell_sums = read_result(write_result(folder / "t.parquet", pd.DataFrame([row]), {"seed": 0}, None))
        >>> table["value"].tolist(), meta, cell_sums
        ([0.1], {'seed': 0}, None)
    """
    path = Path(path)
    _check_loadable(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise InputError(
            f"{path} cannot be read as Parquet ({error}); Result.load reads the .parquet files that Result.save and the poslens commands write"
        ) from error
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None and path.name in OLD_RELATIVIZE_FILES:
        raise InputError(
            f"{path} is a file of the relativize part's old layout (table format 1, {', '.join(OLD_RELATIVIZE_FILES)} with "
            f"attribution.json), which an older poslens wrote; Result.load reads table format {TABLE_FORMAT} (relativize.parquet). "
            "Read the old files with poslens.mechanisms.attribution_table.read_old_layout(folder), or measure the part "
            "again: poslens relativize --overwrite --out <folder>"
        )
    if raw is None:
        raise InputError(
            f"{path} was not written by poslens (it has no poslens metadata); Result.load reads the .parquet "
            "files that Result.save and the poslens commands write"
        )
    try:
        meta = json.loads(raw)
    except ValueError as error:
        raise InputError(f"{path}: its poslens metadata is not valid JSON ({error}); the file is damaged") from error
    file_meta = table.schema.metadata or {}
    written_by = file_meta[VERSION_KEY].decode() if VERSION_KEY in file_meta else None
    try:
        found = int(file_meta.get(TABLE_FORMAT_KEY, b"1"))
    except ValueError as error:
        raise InputError(f"{path}: its table format number is not a number; the file is damaged") from error
    newer = newer_format_message("table", found, written_by)
    if newer is not None:
        raise InputError(f"{path}: {newer}")
    if found < 1:
        raise InputError(
            f"{path}: table format {found} is not one any poslens wrote (they are 1 to {TABLE_FORMAT}), so the file was altered "
            "or damaged; measure the part again (poslens <part> --overwrite), or restore the file"
        )
    if found < 2 and path.name in FORMAT_2_FILES:
        raise InputError(
            f"{path}: it says table format {found}, but poslens writes {path.name} only from table format 2 on (before, "
            "the part was other files), so the file was altered or damaged; measure the part again (poslens <part> --overwrite)"
        )
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(
            f"{path} lacks the result columns {', '.join(missing)} (a poslens result has {', '.join(COLUMNS)}; "
            f"this file has {', '.join(table.column_names) or 'none'})"
        )
    cell_sums = _matching_sums(path, (table.schema.metadata or {}).get(SUMS_TAG_KEY)) if sums else None
    return table.to_pandas(), meta, cell_sums


def saved_files(path: str | Path, result: WithSums, csv: bool = True) -> list[Path]:
    """The files :meth:`Result.save` writes for ``result`` at ``path``: the Parquet file, its CSV copy and its sums.

    Args:
        path: the ``.parquet`` path given to :meth:`Result.save`.
        result: the result saved.
        csv: whether the CSV copy is written.

    Returns:
        The paths, in the order the user reads them.

    Example:
        >>> from poslens.measurement.result import Result
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
        found = saved_tag(sums_path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise SumsMismatchError(f"{sums_path} (the cell sums of {path}) cannot be read ({error}); {alone}") from error
    if tag is None or found != tag.decode():
        why = (
            "was saved without sums"
            if tag is None and not found
            else "was saved by a poslens that did not tag its sums"
            if not found
            else "was saved with other sums"
        )
        raise SumsMismatchError(
            f"{sums_path} does not belong to {path}: the table {why} (copied from another run?); "
            f"poslens never pairs a table with another run's sums. {alone}"
        )
    return load_sums(sums_path)


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
