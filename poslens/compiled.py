"""Whether poslens's compiled CPU loops can run here, and the module that holds them.

The loops (:mod:`poslens.compiled_loops`) are compiled by numba on first use and
cached on disk (beside the module, or in the user's cache folder where that is
read-only), so a process pays about a second once per machine, not once per run.
Where numba is not installed, or ``POSLENS_FUSED=0`` is set, every caller takes
its torch or numpy route instead; on an accelerator the torch route always runs.
Either way the figures are the same to rounding.
"""

from __future__ import annotations

import os
from functools import cache
from types import ModuleType


@cache
def fused_available() -> bool:
    """Whether the compiled loops can run here: numba imports, and ``POSLENS_FUSED`` is not ``0``.

    Returns:
        ``True`` when the CPU captures, the replay and the weights' checksum use the compiled loops by default.

    Example:
        >>> isinstance(fused_available(), bool)
        True
    """
    if os.environ.get("POSLENS_FUSED", "1") == "0":
        return False
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def compiled_loops(threads: int) -> ModuleType:
    """:mod:`poslens.compiled_loops` (importing numba), its parallel loops set to run on ``threads`` threads.

    Args:
        threads: How many threads the parallel loops may use (capped at numba's own count: the cores).

    Returns:
        The module.

    Example:
        >>> compiled_loops(1).__name__
        'poslens.compiled_loops'
    """
    import numba

    import poslens.compiled_loops as loops

    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    return loops
