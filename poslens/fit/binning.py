"""Offset and query-position bins (methodology §3.1).

Bins are exact for 0..15, then follow geometric edges that grow by a factor
1.25, rounded up, until T: 0, 1, …, 16, 20, 25, 32, 40, 50, 63, 79, …, T.
The early-query bound Q is made an edge of the query bins (it already is for
the default Q = 32), so the early window is a union of whole query bins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from jaxtyping import Bool, Int

from poslens.options import DEFAULTS


def geometric_edges(length: int, exact: int = 16, growth: float = 1.25) -> list[int]:
    """Bin edges ``[0, 1, …, exact, ceil(exact·g), …, length]``.

    Args:
        length: The largest value binned plus one (edges end at ``length``).
        exact: Values below this get a bin each.
        growth: Ratio between successive edges beyond ``exact``.

    Returns:
        The increasing bin edges.

    Raises:
        ValueError: When ``length`` is below 1.

    Example:
        >>> geometric_edges(64)
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 25, 32, 40, 50, 63, 64]
    """
    if length < 1:
        raise ValueError(f"length must be ≥ 1, got {length}")
    edges = list(range(min(exact, length) + 1))
    while edges[-1] < length:
        edges.append(min(length, max(edges[-1] + 1, math.ceil(edges[-1] * growth))))
    return edges


@dataclass(frozen=True)
class Binning:
    """Offset bins b(Δ), query bins c(i) and the query windows for sequences of length T.

    Attributes:
        seq_len: Sequence length T.
        early: Number of query positions Q in the ``early`` window.
        offset_edges: Edges of the offset bins (set from ``seq_len``).
        query_edges: Edges of the query bins (set from ``seq_len``).

    Example:
        >>> b = Binning(64, early=32)
        >>> int(b.offset_bin[20]), int(b.query_bin[31]), b.query_windows["early"].tolist()[:3]
        (17, 18, [False, True, True])
    """

    seq_len: int
    early: int = DEFAULTS.early
    offset_edges: tuple[int, ...] = field(init=False)
    query_edges: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.early < 2:
            raise ValueError(f"the early window needs Q ≥ 2, got {self.early}")
        offset_edges = geometric_edges(self.seq_len)
        query_edges = sorted(set(offset_edges) | ({self.early} if self.early < self.seq_len else set()))
        object.__setattr__(self, "offset_edges", tuple(offset_edges))
        object.__setattr__(self, "query_edges", tuple(query_edges))

    @property
    def n_offset_bins(self) -> int:
        """Number of offset bins b(Δ).

        Example:
            >>> Binning(64).n_offset_bins   # 16 exact bins, then 20, 25, 32, 40, 50, 63, 64
            23
        """
        return len(self.offset_edges) - 1

    @property
    def n_query_bins(self) -> int:
        """Number of query bins c(i); one more than the offset bins when Q is not already an edge.

        Example:
            >>> Binning(64, early=32).n_query_bins, Binning(64, early=30).n_query_bins
            (23, 24)
        """
        return len(self.query_edges) - 1

    @property
    def offset_bin(self) -> Int[np.ndarray, " seq"]:
        """b(Δ) for Δ = 0..T−1.

        Example:
            >>> Binning(64).offset_bin[[0, 15, 16, 19, 20, 63]].tolist()
            [0, 15, 16, 16, 17, 22]
        """
        return np.searchsorted(self.offset_edges, np.arange(self.seq_len), side="right") - 1

    @property
    def query_bin(self) -> Int[np.ndarray, " seq"]:
        """c(i) for i = 0..T−1.

        Example:
            >>> Binning(64, early=30).query_bin[[25, 29, 30, 31, 32]].tolist()   # Q = 30 starts a bin
            [18, 18, 19, 19, 20]
        """
        return np.searchsorted(self.query_edges, np.arange(self.seq_len), side="right") - 1

    @property
    def query_windows(self) -> dict[str, Bool[np.ndarray, " qbins"]]:
        """Boolean masks over query bins: ``early`` (1 ≤ i < Q) and ``all`` (1 ≤ i < T); query 0 is never in.

        Example:
            >>> w = Binning(64, early=32).query_windows
            >>> int(w["early"].sum()), int(w["all"].sum()), bool(w["all"][0])   # bins in each query window
            (18, 22, False)
        """
        lower = np.array(self.query_edges[:-1])
        upper = np.array(self.query_edges[1:])
        return {"early": (lower >= 1) & (upper <= self.early), "all": lower >= 1}
