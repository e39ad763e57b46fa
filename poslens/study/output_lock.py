"""One writer per output folder: a run holds a lock on its ``--out`` for as long as it writes there.

A second ``poslens`` run into the same folder is refused at once with
:class:`~poslens.errors.OutputInUseError`, naming the process that holds the
lock (its pid, host and command), so files from two runs never interleave.
The lock is an operating-system file lock (:class:`filelock.FileLock`): a
killed run releases it with its process, and the next run takes it. Under
torchrun only rank 0 takes it (the other ranks write nothing).

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with OutputLock(folder):
    ...     try:
    ...         OutputLock(folder).acquire()
    ...     except OutputInUseError as error:
    ...         print(str(error).split(" is being written")[0] == folder)
    True
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
from pathlib import Path

from filelock import FileLock, Timeout

from poslens.errors import OutputInUseError

LOCK = ".poslens.lock"
OWNER = ".poslens.lock.owner"


class OutputLock:
    """The lock of one output folder (a context manager; :meth:`acquire` and :meth:`release` by hand).

    Args:
        folder: the output folder (it must exist).

    Example:
        >>> import tempfile
        >>> with OutputLock(tempfile.mkdtemp()) as lock:
        ...     lock.held
        True
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        # thread_local=False and is_singleton=False: a second OutputLock in this process is a second writer too
        self._lock = FileLock(self.folder / LOCK, thread_local=False, is_singleton=False)
        self.held = False

    def acquire(self) -> None:
        """Take the lock, or raise :class:`~poslens.errors.OutputInUseError` at once naming its holder.

        Returns:
            None.

        Raises:
            OutputInUseError: another process (or another OutputLock) holds the folder.

        Example:
            >>> import tempfile
            >>> lock = OutputLock(tempfile.mkdtemp()); lock.acquire(); lock.held
            True
            >>> lock.release(); lock.held
            False
        """
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise OutputInUseError(
                f"{self.folder} is being written by another poslens run ({self._holder()}); wait for it to finish, or choose another --out"
            ) from None
        self.held = True
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "command": shlex.join(["poslens", *sys.argv[1:]])}
        with contextlib.suppress(OSError):  # the lock holds without the note
            (self.folder / OWNER).write_text(json.dumps(owner))

    def release(self) -> None:
        """Give the lock back (its owner note is removed).

        Returns:
            None.

        Example:
            >>> import tempfile
            >>> lock = OutputLock(tempfile.mkdtemp()); lock.acquire(); lock.release(); lock.acquire(); lock.release()
        """
        if self.held:
            (self.folder / OWNER).unlink(missing_ok=True)
            self._lock.release()
            self.held = False

    def remove_files(self) -> None:
        """Release the lock and delete its files (for a folder the run created and leaves empty).

        Returns:
            None.

        Example:
            >>> import tempfile, pathlib
            >>> folder = pathlib.Path(tempfile.mkdtemp()); lock = OutputLock(folder); lock.acquire()
            >>> lock.remove_files(); list(folder.iterdir())
            []
        """
        self.release()
        (self.folder / LOCK).unlink(missing_ok=True)

    def _holder(self) -> str:
        try:
            owner = json.loads((self.folder / OWNER).read_text())
            return f"pid {owner['pid']} on {owner['host']}: {owner['command']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "a process that left no note"

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
