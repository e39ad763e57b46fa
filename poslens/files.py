"""Atomic file writes: a file is either as it was or complete, never half written.

A writer fills a temporary file in the destination's folder, which then takes
the destination's name with one ``os.replace`` (atomic on POSIX and Windows
within one file system). An interrupted or failing write leaves the old file,
if any, and no temporary file. This module is the package's base layer: it
imports nothing from poslens.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"
    >>> _ = atomic_write_text(path, "first")
    >>> _ = atomic_write_text(path, "second")
    >>> path.read_text(), [p.name for p in path.parent.iterdir()]
    ('second', ['notes.txt'])
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Callable


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` by calling ``write(tmp)`` on a temporary sibling, then one ``os.replace``.

    The temporary name keeps ``path``'s suffix (writers such as
    ``numpy.savez`` add one when it is missing) and is unique to the process
    and call, so concurrent writers of one file never share a temporary file:
    the last replace wins. If ``write`` raises, the temporary file is removed
    and ``path`` is left as it was. Returns ``path``.

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
    # Not tempfile.mkstemp: its files are private (0600); the writer creates this one with the usual permissions.
    tmp = path.parent / f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp{path.suffix}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`). Returns ``path``.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "memo.json"
        >>> atomic_write_text(path, '{"x": 1}').read_text()
        '{"x": 1}'
    """
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding=encoding))
