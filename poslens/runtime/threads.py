"""Independent pieces of work after the forward passes, side by side on a few threads.

numpy lets go of the GIL inside its array operations, so the fits of a measurement's replicates
(:meth:`poslens.fit.replicates.Replicates.of`), many small numpy operations each, run partly in
parallel on threads: on this project's two-core machine the G + 1 fits of a notebook-sized run take
about three quarters of the time they take in turn. Results come back in the jobs' order, so whatever
the caller sums from them is summed in the same order as without threads. Work that is already
parallel inside (torch's operations on its own threads) gains nothing: the replay of the row-bin
store took a quarter longer on two threads than in turn, and stays in turn.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import TypeVar

#: The most threads :func:`map_in_threads` takes by default: one per core, up to 4.
WORKER_THREADS = min(4, os.cpu_count() or 1)

_Job = TypeVar("_Job")
_Out = TypeVar("_Out")


def map_in_threads(function: Callable[[_Job], _Out], jobs: Iterable[_Job], threads: int = WORKER_THREADS) -> Iterator[_Out]:
    """``map(function, jobs)`` on up to ``threads`` threads, in order, with at most ``threads`` jobs drawn at a time.

    Drawing jobs as they are needed keeps at most ``threads`` replicates' sums in memory at once.

    Args:
        function: What each job goes through; it must not touch the global warning filters, which
            ``warnings.catch_warnings`` does not restore safely across threads.
        jobs: The jobs, drawn lazily.
        threads: The most threads; 1 runs the jobs in turn on the caller's thread.

    Returns:
        The results, in the jobs' order.

    Example:
        >>> list(map_in_threads(lambda x: x * x, range(5), threads=2))
        [0, 1, 4, 9, 16]
    """
    iterator = iter(jobs)
    if threads <= 1:
        yield from map(function, iterator)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        while chunk := list(islice(iterator, threads)):
            yield from pool.map(function, chunk)
