"""Each sequence's per-row offset-bin sums of exp(s), kept on disk between the capture and the counterfactual replay.

The per-sequence counterfactual of methodology §4.4 (i) renormalizes every sequence's
own logits after removing the head's absolute component A, which is fitted only
once the whole corpus has been seen. A is constant over each (query bin, offset
bin) cell, so for one row all it needs of the sequence's logits is, per offset
bin b, S_ib = Σ_{j∈b} exp(s_ij − m_i) with m_i the row's maximum:

    log Z'_i = m_i + log Σ_b exp(−A_{c(i)b}) · S_ib

The first pass computes S and m from the exp(s − m) it already has and writes
them here, float64, one [batch, H, T, 1 + bins] array per layer and forward
pass (m first); :mod:`poslens.capture.counterfactual_replay` reads them back once
A is known. That takes the place of a second forward pass over the model. The
file is anonymous (it disappears when the store is closed or the process ends)
and lives in the system's temporary folder (``TMPDIR``): 8·L·H·T·(1 + bins)
bytes per sequence (:func:`store_bytes`), about 80 MB for SmolLM2-135M at T = 1024.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO

import numpy as np
from jaxtyping import Float

from poslens.errors import DiskFullError, PoslensError
from poslens.files import bytes_text


class InsufficientDiskError(PoslensError, OSError):
    """The temporary folder has too little free space for the row-bin store.

    Example:
        >>> issubclass(InsufficientDiskError, OSError)
        True
    """


def store_bytes(n_seqs: int, layers: int, heads: int, seq_len: int, n_offset_bins: int) -> int:
    """Bytes the store holds for ``n_seqs`` sequences: 8·L·H·T·(1 + bins) each.

    Args:
        n_seqs: Number of sequences.
        layers: Number of layers L.
        heads: Number of heads H per layer.
        seq_len: Sequence length T.
        n_offset_bins: Number of offset bins.

    Returns:
        The bytes of the stored arrays.

    Example:
        >>> store_bytes(1, layers=30, heads=9, seq_len=1024, n_offset_bins=35) / 1e6   # SmolLM2-135M
        79.62624
    """
    return 8 * n_seqs * layers * heads * seq_len * (1 + n_offset_bins)


def check_disk_space(needed: int, directory: str | None = None) -> None:
    """Raise :class:`InsufficientDiskError` unless ``directory`` (default: the temporary folder) has ``needed`` bytes free.

    Args:
        needed: Bytes the store will hold.
        directory: The folder the store goes in; default the temporary folder.

    Raises:
        InsufficientDiskError: When the folder has less than ``needed`` bytes free.

    Example:
        >>> check_disk_space(1)
        >>> check_disk_space(1 << 62)
        Traceback (most recent call last):
        ...
        poslens.capture.row_bin_store.InsufficientDiskError: the per-sequence counterfactual needs 4,611,686 TB of temporary disk in ...
    """
    directory = directory or tempfile.gettempdir()
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise InsufficientDiskError(
            f"the per-sequence counterfactual needs {bytes_text(needed)} of temporary disk in {directory}, "
            f"which has {bytes_text(free)} free; point TMPDIR at a folder with more room, or measure fewer or shorter sequences"
        )


_FULL = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))


@dataclass
class RowBinStore:
    """An append-only temporary file of per-(forward pass, layer) row-bin arrays, read back in the order written.

    Attributes:
        directory: The folder the temporary file goes in; default the temporary folder.
        entries: ``(group, layer, shape, offset)`` of every array written, in order.

    Example:
        >>> store = RowBinStore()
        >>> store.write(group=1, layer=0, row_bins=np.ones((2, 3, 4, 5)))
        >>> [(group, layer, bins.shape) for group, layer, bins in store.read()]
        [(1, 0, (2, 3, 4, 5))]
        >>> store.close()
    """

    directory: str | None = None
    entries: list[tuple[int, int, tuple[int, ...], int]] = field(default_factory=list)  # group, layer, shape, byte offset
    _file: IO[bytes] | None = None
    _end: int = 0

    def write(self, group: int, layer: int, row_bins: Float[np.ndarray, "batch heads seq bins"]) -> None:
        """Append one layer's row-bin array of one forward pass (float64, C order).

        Args:
            group: The group of the forward pass's sequences.
            layer: The layer index.
            row_bins: Each row's maximum, then its sums of exp(s − max) per offset bin, [batch, H, T, 1 + bins].

        Raises:
            DiskFullError: The temporary folder filled up (or a file-size limit was reached); the message names it
                and the route that writes nothing.

        Example:
            >>> store = RowBinStore(); store.write(0, 2, np.zeros((1, 1, 2, 3))); store.entries
            [(0, 2, (1, 1, 2, 3), 0)]
        """
        data = np.ascontiguousarray(row_bins, dtype=np.float64)
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(dir=self.directory)  # noqa: SIM115 (open for the store's life; close() ends it)
            self._file.seek(self._end)
            self._file.write(data.data.cast("B"))  # the contiguous array's own buffer, as bytes
            self._file.flush()  # a full disk shows here, not later in a read of half an array
        except OSError as error:
            if error.errno is None or error.errno not in _FULL:
                raise
            raise DiskFullError(
                f"the temporary folder {self.directory or tempfile.gettempdir()} (TMPDIR) filled up while the per-sequence "
                f"counterfactual's row-bin store was written ({os.strerror(error.errno)}, after {bytes_text(self._end)}): free "
                "space there, point TMPDIR at a folder with more room, or pass --row-sums second-pass "
                "(row_sums='second-pass'), which writes nothing to disk and gives the same figures"
            ) from error
        self.entries.append((group, layer, data.shape, self._end))
        self._end += data.nbytes

    def read(self, order: Sequence[int] | None = None) -> Iterator[tuple[int, int, Float[np.ndarray, "batch heads seq bins"]]]:
        """Yield (group, layer, array) for every entry, in the order written or in ``order``; each array is a fresh copy.

        Args:
            order: The indices into :attr:`entries` to read, in the order to read them; default every entry as written.

        Yields:
            ``(group, layer, row_bins)`` of every entry.

        Example:
            >>> store = RowBinStore(); store.write(0, 0, np.arange(6.0).reshape(1, 1, 2, 3)); store.write(1, 0, np.ones((1, 1, 1, 1)))
            >>> next(store.read())[2].ravel().tolist()
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
            >>> [group for group, _, _ in store.read(order=[1, 0])]
            [1, 0]
        """
        for k in range(len(self.entries)) if order is None else order:
            group, layer, shape, offset = self.entries[k]
            assert self._file is not None
            self._file.seek(offset)
            yield group, layer, np.fromfile(self._file, dtype=np.float64, count=int(np.prod(shape))).reshape(shape)

    @property
    def nbytes(self) -> int:
        """Bytes written so far.

        Example:
            >>> store = RowBinStore(); store.write(0, 0, np.zeros((1, 1, 2, 3))); store.nbytes
            48
        """
        return self._end

    def close(self) -> None:
        """Delete the file (it is deleted at exit in any case).

        Example:
            >>> store = RowBinStore(); store.write(0, 0, np.zeros((1, 1, 1, 1))); store.close(); store.nbytes
            0
        """
        if self._file is not None:
            self._file.close()
        self._file, self._end, self.entries = None, 0, []
