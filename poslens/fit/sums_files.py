"""The saved-file format of the sums: one ``.npz`` per measurement, with its format number, poslens version and tag.

:func:`save_sums` writes a :class:`~poslens.fit.sums.CellSums` (its arrays as
``a_<field>``, the counterfactual cells as ``cf_<query window>``, the binning,
the layers' sliding windows, a tag that pairs the file with its table, and
``poslens.version.SUMS_FORMAT``); :func:`load_sums` reads every format up to the
current one and refuses a newer one with a message naming both versions;
:func:`saved_tag` reads the tag alone.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from poslens.errors import SumsFormatError
from poslens.fit.binning import Binning
from poslens.fit.counterfactual_cells import CounterfactualCells
from poslens.fit.sums import QUERY_WINDOWS, CellSums, SumFields
from poslens.version import SUMS_FORMAT, __version__, newer_format_message


def save_sums(sums: CellSums, path: str | Path, tag: str = "") -> None:
    """Write ``sums`` to a ``.npz`` file (reload with :func:`load_sums`).

    ``tag`` is stored with the arrays (:func:`saved_tag` reads it back):
    :meth:`poslens.measurement.result.Result.save` writes the same tag into
    the Parquet file, so a table is never paired with another run's sums.

    Args:
        sums: The sums to write.
        path: The ``.npz`` file to write.
        tag: A label stored with the arrays, to pair them with a table (default none).

    Example:
        >>> import tempfile, pathlib; path = pathlib.Path(tempfile.mkdtemp()) / "sums.npz"
        >>> save_sums(CellSums.zeros(groups=2, layers=1, heads=1, binning=Binning(16)), path)
        >>> path.exists()
        True
    """
    assert sums.counterfactual_cells is not None, "CellSums.__post_init__ always sets the counterfactual cells"
    arrays: dict[str, np.ndarray] = {
        "seq_len": np.array(sums.binning.seq_len),
        "early": np.array(sums.binning.early),
        "row_features": sums.row_features,
        "row_count": sums.row_count,
        "group_sizes": sums.group_sizes,
        "layer_windows": np.array([-1 if w is None else w for w in sums.layer_windows], dtype=np.int64),
        "tag": np.array(tag),
        "sums_format": np.array(SUMS_FORMAT),
        "poslens_version": np.array(__version__),
        **{f"a_{name}": array for name, array in sums.per_group.as_dict().items()},
        **sums.counterfactual_cells.saved_arrays(),
    }
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]  # numpy's stub lets **kwds name allow_pickle: bool; none here does


def saved_tag(path: str | Path) -> str:
    """The tag a sums file was saved with (``""`` for none, or for sums saved by an older poslens).

    Args:
        path: A ``.npz`` file written by :func:`save_sums`.

    Returns:
        The stored tag, or ``""``.

    Example:
        >>> import tempfile, pathlib; path = pathlib.Path(tempfile.mkdtemp()) / "sums.npz"
        >>> save_sums(CellSums.zeros(groups=2, layers=1, heads=1, binning=Binning(16)), path, tag="run-1")
        >>> saved_tag(path)
        'run-1'
    """
    with np.load(path) as data:
        return str(data["tag"]) if "tag" in data.files else ""


def load_sums(path: str | Path) -> CellSums:
    """Read sums written by :func:`save_sums`; a file this poslens cannot read raises :class:`~poslens.errors.SumsFormatError`.

    Every sums format up to ``poslens.version.SUMS_FORMAT`` reads: format 1 (poslens 0.1.0, no format number
    in the file) kept the counterfactual cells among the sums (``a_counterfactual_*``). A newer format is refused
    with a message naming both versions; so are sums of an older poslens that lack arrays, an array of Python
    objects (never loaded: unpickling can run code) and a file that is not a whole ``.npz``.

    Args:
        path: A ``.npz`` file written by :func:`save_sums`.

    Returns:
        The sums as they were saved.

    Raises:
        SumsFormatError: When the file has a newer sums format than this poslens reads, lacks arrays the current
            version needs (written by an older poslens), holds an array of objects, or is damaged; the message names
            the file, the reason and what to do.

    Example:
        >>> import tempfile, pathlib; path = pathlib.Path(tempfile.mkdtemp()) / "sums.npz"
        >>> save_sums(CellSums.zeros(groups=2, layers=1, heads=1, binning=Binning(16, early=8)), path)
        >>> back = load_sums(path)
        >>> back.binning == Binning(16, early=8), back.n_groups, back.per_group.logit.shape
        (True, 2, (2, 1, 1, 16, 16))
        >>> _ = path.write_bytes(b"not a zip file")
        >>> load_sums(path)
        Traceback (most recent call last):
        poslens.errors.SumsFormatError: .../sums.npz is not a whole sums file (not an .npz archive); measure again ...
    """
    measure_again = "measure again with this poslens (the poslens commands do so with --overwrite)"
    if Path(path).is_file() and not zipfile.is_zipfile(path):
        raise SumsFormatError(f"{path} is not a whole sums file (not an .npz archive); {measure_again}")
    try:
        with np.load(path) as data:
            return _sums_of(path, data, measure_again)
    except SumsFormatError:
        raise
    except ValueError as error:
        if "Object arrays" not in str(error):
            raise SumsFormatError(f"{path} cannot be read as sums ({error}); {measure_again}") from error
        raise SumsFormatError(
            f"{path} holds an array of Python objects, which poslens never loads (unpickling it could run code); sums are "
            f"arrays of numbers, so the file was not written by poslens or was altered: {measure_again}"
        ) from None
    except (OSError, EOFError, KeyError, zipfile.BadZipFile) as error:
        raise SumsFormatError(f"{path} is not a whole sums file ({type(error).__name__}: {error}); {measure_again}") from error


def _sums_of(path: str | Path, data: Any, measure_again: str) -> CellSums:
    """The sums held by an opened ``.npz`` (see :func:`load_sums`)."""
    found = int(data["sums_format"]) if "sums_format" in data.files else 1
    written_by = str(data["poslens_version"]) if "poslens_version" in data.files else None
    newer = newer_format_message("sums", found, written_by)
    if newer is not None:
        raise SumsFormatError(f"{path}: {newer}")
    binning = Binning(int(data["seq_len"]), early=int(data["early"]))
    stored = {k[2:] for k in data.files if k.startswith("a_")}
    missing = [name for name in SumFields.names() if name not in stored]
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise SumsFormatError(f"{path}: sums written by an older poslens lack {shown}; {measure_again}")
    arrays = SumFields(**{name: data[f"a_{name}"] for name in SumFields.names()})
    cells = CounterfactualCells.from_saved(data, QUERY_WINDOWS)
    if cells is None:
        raise SumsFormatError(f"{path}: sums without the per-sequence counterfactual's cells (cf_* or a_counterfactual_*); {measure_again}")
    windows = tuple(None if w < 0 else int(w) for w in data["layer_windows"]) if "layer_windows" in data.files else ()
    return CellSums(binning, arrays, data["row_features"], data["row_count"], data["group_sizes"], windows, counterfactual_cells=cells)
