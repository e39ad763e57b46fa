"""The hashes of the input files as they were read: what a measurement was made from, byte for byte.

A file's hash taken before it is read can belong to other bytes than the ones
read, when the file is replaced in between. The corpus readers
(:mod:`poslens.model.corpus_texts`) therefore hash the very bytes they read and
report them here with :func:`note_read`; code that needs to know which bytes
a computation read wraps it in :func:`recording_reads`. Outside such a block
nothing is kept.

Example:
    >>> with recording_reads() as reads:
    ...     digest = note_read("corpus.txt", b"the bytes read")
    >>> reads
    {'corpus.txt': '9dbc40b164cc0c8623890d8b1139357bbe2304c4dc80c99f8a4179be812082c0'}
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from poslens.errors import InputsChangedError

_RECORDERS: list[dict[str, str]] = []


@contextmanager
def recording_reads() -> Iterator[dict[str, str]]:
    """Collect, while the block runs, the sha256 of every input file read (by the label its reader gives it).

    Blocks nest: a read is noted in every block open at the time.

    Yields:
        ``{label: sha256}``, filled as files are read.

    Example:
        >>> with recording_reads() as outer, recording_reads() as inner:
        ...     note_digest("a.txt", "00")
        >>> outer == inner == {"a.txt": "00"}
        True
    """
    reads: dict[str, str] = {}
    _RECORDERS.append(reads)
    try:
        yield reads
    finally:
        _RECORDERS.remove(reads)


def note_read(label: str, data: bytes) -> str:
    """Record that the file ``label`` was read as ``data``; return the sha256 of ``data``.

    Args:
        label: The file, as the input hashes name it (its path as given).
        data: The bytes read.

    Returns:
        The hex sha256 of ``data``.

    Raises:
        InputsChangedError: The same file was read before, in an open block, with other bytes.

    Example:
        >>> note_read("a.txt", b"")[:12]
        'e3b0c44298fc'
    """
    digest = hashlib.sha256(data).hexdigest()
    note_digest(label, digest)
    return digest


def note_digest(label: str, digest: str) -> None:
    """Record that the file ``label`` was read with sha256 ``digest`` (for readers that hash as they read).

    Args:
        label: The file, as the input hashes name it.
        digest: The hex sha256 of the bytes read.

    Raises:
        InputsChangedError: The same file was read before, in an open block, with other bytes.

    Example:
        >>> with recording_reads() as reads:
        ...     note_digest("a.txt", "00")
        ...     note_digest("a.txt", "01")
        Traceback (most recent call last):
        poslens.errors.InputsChangedError: a.txt changed between two reads of one run ...
    """
    for reads in _RECORDERS:
        if reads.get(label, digest) != digest:
            raise InputsChangedError(
                f"{label} changed between two reads of one run (sha256 {reads[label][:12]}… then {digest[:12]}…), so its "
                "figures would mix two versions of it; run the command again once the file stays as it is"
            )
        reads[label] = digest
