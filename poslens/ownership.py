"""Which files in a folder poslens wrote: a small manifest, so that nothing of the user's is ever replaced.

Every file poslens writes into a folder (a result's Parquet, CSV and sums,
``claims.csv``, ``report.html``, ``run.json``) is listed in that folder's
``.poslens-files.json`` with its size and sha256. Before replacing a file,
poslens checks that the manifest lists it with the same hash: a file poslens
did not write, or one changed since it wrote it, is refused with
:class:`~poslens.errors.OutputConflictError` naming it. The manifest is
updated under a file lock, so concurrent writers never lose each other's
entries. This module is the package's base layer: it imports nothing from
poslens but its errors and atomic writes.

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> (folder / "notes.csv").write_text("mine")
    4
    >>> check_replaceable(folder / "notes.csv")
    Traceback (most recent call last):
    poslens.errors.OutputConflictError: .../notes.csv exists and poslens did not write it ...
    >>> written = folder / "table.csv"; _ = written.write_text("a,b")
    >>> record_written([written]); check_replaceable(written)   # poslens's own file may be replaced
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from filelock import FileLock

from poslens.errors import OutputConflictError
from poslens.files import atomic_write_text, sha256_of_file

MANIFEST = ".poslens-files.json"


def written_files(folder: str | Path) -> dict[str, dict]:
    """The manifest of ``folder``: file name -> ``{"size", "sha256"}`` of each file poslens wrote there.

    Args:
        folder: the folder.

    Returns:
        A dict, empty when poslens wrote nothing there (or the manifest is unreadable).

    Example:
        >>> import tempfile
        >>> written_files(tempfile.mkdtemp())
        {}
    """
    try:
        files = json.loads((Path(folder) / MANIFEST).read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def is_ours(path: str | Path) -> bool:
    """Whether ``path`` is a file poslens wrote and nobody changed since (its folder's manifest lists its hash).

    Args:
        path: a file.

    Returns:
        True when the manifest lists the file with its current size and sha256.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.csv"; _ = path.write_text("1")
        >>> is_ours(path), (record_written([path]), is_ours(path))[1]
        (False, True)
    """
    path = Path(path)
    entry = written_files(path.parent).get(path.name)
    if not entry or not path.is_file():
        return False
    return path.stat().st_size == entry.get("size") and sha256_of_file(path) == entry.get("sha256")


def check_replaceable(path: str | Path) -> None:
    """Raise :class:`~poslens.errors.OutputConflictError` if writing ``path`` would replace something not poslens's.

    A path that does not exist may be written. A folder is never replaced. A
    file may be replaced only when the folder's manifest lists it with its
    current hash (:func:`is_ours`).

    Args:
        path: the file about to be written.

    Returns:
        None.

    Raises:
        OutputConflictError: naming the file and what to do.

    Example:
        >>> import tempfile, pathlib
        >>> check_replaceable(pathlib.Path(tempfile.mkdtemp()) / "new.parquet")   # nothing there: fine
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir():
        raise OutputConflictError(f"{path} is a folder; poslens writes a file there and never replaces a folder: choose another name")
    if is_ours(path):
        return
    entry = written_files(path.parent).get(path.name)
    why = "poslens wrote it but it has been changed since" if entry else f"poslens did not write it (it is not in {path.parent / MANIFEST})"
    raise OutputConflictError(
        f"{path} exists and {why}; poslens never replaces a file it did not write: move it away or delete it, or choose another output folder"
    )


def record_written(paths: Iterable[str | Path]) -> None:
    """List ``paths`` (just written by poslens) in their folders' manifests, with their size and sha256.

    Args:
        paths: files poslens has just written.

    Returns:
        None.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.json"; _ = path.write_text("{}")
        >>> record_written([path]); sorted(written_files(path.parent))
        ['run.json']
    """

    def add(files: dict, path: Path) -> None:
        files[path.name] = {"size": path.stat().st_size, "sha256": sha256_of_file(path)}

    _update_manifests(paths, add)


def forget_written(paths: Iterable[str | Path]) -> None:
    """Remove ``paths`` (deleted by poslens) from their folders' manifests.

    Args:
        paths: files poslens has just deleted.

    Returns:
        None.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "old.csv"; _ = path.write_text("1")
        >>> record_written([path]); path.unlink(); forget_written([path]); written_files(path.parent)
        {}
    """
    _update_manifests(paths, lambda files, path: files.pop(path.name, None))


def writing(folder: str | Path) -> FileLock:
    """The lock of ``folder``'s manifest, to hold while checking, writing and listing files there (a context manager).

    A writer that checks a file (:func:`check_replaceable`), replaces it and lists
    it (:func:`record_written`) under this lock never sees another writer's file
    between its replacement and its listing, which would look like a file
    "changed since" poslens wrote it: two concurrent saves of one file run one
    after the other, and the last one wins. It is re-entrant within a thread
    (:func:`record_written` takes it again); other threads and processes wait.

    Args:
        folder: the folder written to (it must exist).

    Returns:
        The lock (``with writing(folder): ...``).

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp()); path = folder / "run.json"
        >>> with writing(folder):
        ...     check_replaceable(path); _ = path.write_text("{}"); record_written([path])
        >>> sorted(written_files(folder))
        ['run.json']
    """
    return FileLock(Path(folder) / f"{MANIFEST}.lock", is_singleton=True)


@contextlib.contextmanager
def replacing(paths: Iterable[str | Path]) -> Iterator[None]:
    """Around writing ``paths`` (all in one folder): each checked (:func:`check_replaceable`), then the folder's manifest lock held.

    Under the lock (:func:`writing`) the check is made again, so that a file a
    concurrent poslens writer has replaced but not yet listed is never taken
    for one "changed since": that writer finishes first. A refusal that no
    poslens writer can explain (no lock file in the folder: none ever wrote
    there) is made before the lock file is created, so a refused write leaves
    the folder as it was.

    Args:
        paths: the files about to be written, in one folder.

    Yields:
        None, with the lock held; list the files (:func:`record_written`) before leaving.

    Raises:
        OutputConflictError: a file poslens did not write, or changed since, or a folder, stands at one of ``paths``.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "claims.csv"
        >>> with replacing([path]):
        ...     _ = path.write_text("claim"); record_written([path])
        >>> is_ours(path)
        True
    """
    paths = [Path(p) for p in paths]
    folder = paths[0].parent
    try:
        for path in paths:
            check_replaceable(path)
    except OutputConflictError:
        if not (folder / f"{MANIFEST}.lock").exists():
            raise
    with writing(folder):
        for path in paths:
            check_replaceable(path)
        yield


def _update_manifests(paths: Iterable[str | Path], change: Callable[[dict, Path], object]) -> None:
    """Apply ``change(files, path)`` to the manifest of each path's folder, under that manifest's lock."""
    by_folder: dict[Path, list[Path]] = {}
    for path in map(Path, paths):
        by_folder.setdefault(path.parent, []).append(path)
    for folder, members in by_folder.items():
        with writing(folder):
            files = written_files(folder)
            for path in members:
                change(files, path)
            atomic_write_text(folder / MANIFEST, json.dumps({"files": files}, indent=1, sort_keys=True))


def remove_ours(paths: Iterable[str | Path]) -> None:
    """Delete those of ``paths`` that exist, after checking that poslens wrote each (changed since or not).

    For ``--overwrite``: a part poslens made may be replaced even if it was
    damaged or edited since; a file poslens never wrote is not touched.

    Args:
        paths: files to delete.

    Returns:
        None.

    Raises:
        OutputConflictError: one of them is not listed in its folder's manifest (nothing is deleted then).

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "leakage.csv"; _ = path.write_text("1")
        >>> remove_ours([path])
        Traceback (most recent call last):
        poslens.errors.OutputConflictError: .../leakage.csv exists and poslens did not write it ...
        >>> record_written([path]); _ = path.write_text("edited"); remove_ours([path]); path.exists()
        False
    """
    present = [Path(p) for p in paths if Path(p).is_file()]
    for path in present:
        if path.name not in written_files(path.parent):
            check_replaceable(path)  # raises, naming it
    for path in present:
        path.unlink()
    forget_written(present)


def reclaim_ours(paths: Iterable[str | Path]) -> None:
    """List again, with their current hash, those of ``paths`` that poslens wrote (changed since or not), so they may be replaced.

    For ``--overwrite``, once the new part is written in full to temporary files:
    a part poslens made, even damaged or edited since, is then replaced by one
    ``os.replace`` per file, never deleted before. A file poslens never wrote is left
    unlisted, so the write that follows still refuses it.

    Args:
        paths: the files about to be replaced.

    Returns:
        None.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "leakage.csv"; _ = path.write_text("1")
        >>> record_written([path]); _ = path.write_text("edited"); is_ours(path)
        False
        >>> reclaim_ours([path]); is_ours(path)
        True
    """
    listed = [Path(p) for p in paths if Path(p).is_file() and Path(p).name in written_files(Path(p).parent)]
    if listed:
        record_written(listed)
