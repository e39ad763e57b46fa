"""Atomic file writes: a file is either as it was or complete, never half written.

A writer fills a temporary file in the destination's folder, which then takes
the destination's name with one ``os.replace`` (atomic on POSIX and Windows
within one file system). An interrupted or failing write leaves the old file,
if any, and no temporary file. This module is the package's base layer: it
imports nothing from poslens but its errors.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"
    >>> _ = atomic_write_text(path, "first")
    >>> _ = atomic_write_text(path, "second")
    >>> path.read_text(), [p.name for p in path.parent.iterdir()]
    ('second', ['notes.txt'])
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path

from poslens.errors import DiskFullError

# Temporary names of atomic_write: ".<name>.<pid>-<8 hex>.tmp<suffix>"
_TEMPORARY = re.compile(r"^\..+\.(\d+)-[0-9a-f]{8}\.tmp(\.[^.]*)?$")
_FULL = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` by calling ``write(tmp)`` on a temporary sibling, then one ``os.replace``.

    The temporary name keeps ``path``'s suffix (writers such as
    ``numpy.savez`` add one when it is missing) and is unique to the process
    and call, so concurrent writers of one file never share a temporary file:
    the last replace wins. If ``write`` raises, the temporary file is removed
    and ``path`` is left as it was. A full disk or a file-size limit
    (``ulimit -f``) raises :class:`~poslens.errors.DiskFullError` naming
    ``path``. A temporary file left by a killed process is removed by
    :func:`remove_stale_temporaries`. Returns ``path``.

    Args:
        path: The file to write.
        write: ``write(tmp)`` writes the content to ``tmp``.

    Returns:
        ``path``.

    Raises:
        DiskFullError: When the disk is full or a file-size limit is reached.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "table.csv"
        >>> atomic_write(path, lambda tmp: tmp.write_text("a,b\\n1,2\\n")).read_text()
        'a,b\\n1,2\\n'
        >>> def fails(tmp):
        ...     tmp.write_text("half")
        ...     raise OSError("disk full")
        >>> atomic_write(path, fails)
        Traceback (most recent call last):
        OSError: disk full
        >>> path.read_text(), len(list(path.parent.iterdir()))   # the old file, and no temporary one
        ('a,b\\n1,2\\n', 1)
    """
    path = Path(path)
    tmp = _temporary(path)
    try:
        _fill(tmp, path, write)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _temporary(path: Path) -> Path:
    # Not tempfile.mkstemp: its files are private (0600); the writer creates this one with the usual permissions.
    return path.parent / f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp{path.suffix}"


def _fill(tmp: Path, path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)``, with a full disk reported as :class:`~poslens.errors.DiskFullError` naming ``path``."""
    try:
        write(tmp)
    except OSError as error:
        if error.errno in _FULL:
            full = DiskFullError(
                f"cannot write {path}: {os.strerror(error.errno)} (the disk is full, or a file-size limit such as "
                "ulimit -f was reached); free some space or write to another folder"
            )
            full.errno = error.errno
            raise full from error
        raise


def atomic_write_together(writes: list[tuple[str | Path, Callable[[Path], None]]]) -> list[Path]:
    """Write several files as one: each into a temporary sibling, then all moved into place one after the other.

    Files that belong together (a table and its sums) are written completely
    before any of them replaces its old version, so an interrupted or failing
    write leaves all the old files, and the moment in which some are new and
    some old shrinks to that of a few ``os.replace`` calls.

    Args:
        writes: ``(path, write)`` pairs, in the order the files are moved into place.

    Returns:
        The paths written.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> paths = atomic_write_together([(folder / "a.txt", lambda tmp: tmp.write_text("a")),
        ...                                (folder / "b.txt", lambda tmp: tmp.write_text("b"))])
        >>> [p.read_text() for p in paths]
        ['a', 'b']
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for path, write in writes:
            path = Path(path)
            staged.append((_temporary(path), path))
            _fill(staged[-1][0], path, write)
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    return [path for _, path in staged]


def sha256_of_file(path: str | Path) -> str:
    """sha256 of a file's bytes, read in 4 MiB blocks.

    Args:
        path: the file.

    Returns:
        64 hex digits.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"; _ = path.write_bytes(b"abc")
        >>> sha256_of_file(path)[:12]
        'ba7816bf8f01'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Remove the temporary files that :func:`atomic_write` left in ``folder`` when its process was killed.

    A temporary file names the process that made it; only those of processes
    no longer running are removed, so a concurrent writer is never disturbed.

    Args:
        folder: the folder to clean (nothing happens if it does not exist).

    Returns:
        The files removed.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / ".leakage.sums.npz.999999999-0123abcd.tmp.npz").write_text("half")   # no such process
        >>> [p.name for p in remove_stale_temporaries(folder)], list(folder.iterdir())
        (['.leakage.sums.npz.999999999-0123abcd.tmp.npz'], [])
    """
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        match = _TEMPORARY.match(path.name)
        if match and path.is_file() and not _running(int(match.group(1))):
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`). Returns ``path``.

    Args:
        path: The file to write.
        text: The text.
        encoding: Its encoding.

    Returns:
        ``path``.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "memo.json"
        >>> atomic_write_text(path, '{"x": 1}').read_text()
        '{"x": 1}'
    """
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding=encoding))


def bytes_text(n_bytes: float) -> str:
    """A size in decimal units as people read it, three significant digits: ``"48 bytes"``, ``"35.2 kB"``, ``"2 GB"``.

    Args:
        n_bytes: a size in bytes.

    Returns:
        The size in bytes, kB, MB, GB or TB (powers of 1000), never rounded to zero.

    Example:
        >>> bytes_text(48), bytes_text(35_200), bytes_text(2 * 10**9), bytes_text(1.76e12), bytes_text(4.6e18)
        ('48 bytes', '35.2 kB', '2 GB', '1.76 TB', '4,600,000 TB')
    """
    value, unit = float(n_bytes), "bytes"
    for larger in ("kB", "MB", "GB", "TB"):
        if abs(value) < 1000:
            break
        value, unit = value / 1000, larger
    return f"{value:,.0f} {unit}" if abs(value) >= 1000 else f"{value:.3g} {unit}"
