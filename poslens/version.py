"""The package version and the versions of the two file formats poslens writes, in a module every layer can read.

A change to what a saved file holds bumps its format number here, bumps the
package's minor version (here and in ``pyproject.toml``) and gets a CHANGELOG
entry (``tests/unit/test_version.py`` checks all three agree):

- :data:`SUMS_FORMAT`: the ``.sums.npz`` cell sums (:func:`poslens.fit.sums_files.save_sums`);
- :data:`TABLE_FORMAT`: the result table's Parquet file, its columns and provenance
  (:meth:`poslens.measurement.result.Result.save`).

A loader reads every format up to its own and refuses a newer one with
:func:`newer_format_message`, which names both versions.

The version string itself is ``poslens.__version__``. This module is
``poslens.version``: shown, it says so, and as text (``str``, an f-string) it is the
version; ``poslens.version.version`` is the string too, as in NumPy.

Example:
    >>> import poslens
    >>> poslens.__version__.count("."), str(poslens.version) == poslens.__version__ == poslens.version.version
    (2, True)
    >>> poslens.version   # doctest: +ELLIPSIS
    <module 'poslens.version': poslens 0...; the version string is poslens.__version__>
"""

from __future__ import annotations

import sys
import types

__version__ = "0.7.8"

#: Format of the saved cell sums. 1: poslens 0.1.0, the per-sequence counterfactual's cells stored among the sums
#: (``a_counterfactual_*``), no format number in the file. 2: poslens 0.2.0, the cells stored apart (``cf_*``).
SUMS_FORMAT = 2
#: Format of the saved result table (its columns and metadata). 1: poslens 0.1.0 to 0.3.0. 2: poslens 0.4.0, the
#: relativize part one result (``relativize.parquet``, not the four ``attribution*`` files) and the compare part's
#: comparisons a result of their own (``comparisons.parquet``, not ``meta["comparisons"]`` of ``compare.parquet``).
TABLE_FORMAT = 2
#: The poslens version that first wrote each format, for messages that name both versions.
FORMAT_INTRODUCED = {"sums": {1: "0.1.0", 2: "0.2.0"}, "table": {1: "0.1.0", 2: "0.4.0"}}


def newer_format_message(kind: str, found: int, written_by: str | None = None) -> str | None:
    """The refusal for a file of a newer format than this poslens reads, or ``None`` when it can read it.

    Args:
        kind: ``"sums"`` or ``"table"``: which of the two formats.
        found: The format number stored in the file (a file that stores none is format 1).
        written_by: The poslens version recorded in the file, if any (named in the message).

    Returns:
        ``None`` when ``found`` is at most this poslens's format for ``kind``; otherwise a sentence naming the
        file's format and poslens version and this one's, with what to do.

    Raises:
        ValueError: ``kind`` is neither ``"sums"`` nor ``"table"``.

    Example:
        >>> newer_format_message("sums", 1) is None
        True
        >>> newer_format_message("sums", 9, written_by="0.9.0")  # doctest: +ELLIPSIS
        'sums format 9 (written by poslens 0.9.0) is newer than this poslens 0.7.8 reads (sums format 2): ...'
    """
    current = {"sums": SUMS_FORMAT, "table": TABLE_FORMAT}
    if kind not in current:
        raise ValueError(f"kind must be 'sums' or 'table', not {kind!r}")
    if found <= current[kind]:
        return None
    by = f" (written by poslens {written_by})" if written_by else ""
    return (
        f"{kind} format {found}{by} is newer than this poslens {__version__} reads ({kind} format {current[kind]}): "
        "upgrade poslens to read it, or measure again with this one"
    )


#: The version string under the name NumPy uses for it (``poslens.version.version``).
version = __version__


class _VersionModule(types.ModuleType):
    """``poslens.version`` as it shows itself: the version, and where the string is."""

    def __repr__(self) -> str:
        return f"<module 'poslens.version': poslens {__version__}; the version string is poslens.__version__>"

    def __str__(self) -> str:
        return __version__


sys.modules[__name__].__class__ = _VersionModule
