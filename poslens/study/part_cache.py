"""The cache of the study's parts: a saved part is reused only when its settings and input files match.

A part's table records its settings (``meta["settings"]``), the hashes of its
input files (``meta["inputs"]``) and a key of both (:func:`part_key`).
:func:`cached_part` reuses a saved part whose key matches, measures it when
there is none, and otherwise refuses, naming each difference
(:class:`SettingsMismatchError`, :class:`~poslens.errors.InputsChangedError`),
unless ``overwrite`` asks to measure it again. :func:`check_same_settings`
refuses to combine parts made with different settings. :class:`poslens.study.parts.Study`
runs every part through this cache.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from poslens.errors import InputsChangedError, PoslensError, SumsMismatchError
from poslens.measurement.result import Result
from poslens.measurement.result_files import saved_files
from poslens.model.reads import recording_reads
from poslens.ownership import check_replaceable, reclaim_ours, written_files
from poslens.runtime import distributed
from poslens.study.inputs import changed_inputs, inputs_as_read, inputs_key
from poslens.study.part_registry import OPTION_NAMES
from poslens.study.part_warnings import part_warnings
from poslens.study.settings import Settings, settings_values


class SettingsMismatchError(PoslensError, ValueError):
    """A saved part was made with other settings than the ones asked for; poslens does not overwrite it.

    Example:
        >>> issubclass(SettingsMismatchError, ValueError)  # the CLI prints it as one error line
        True
    """


class UnreadablePartError(PoslensError, ValueError):
    """A saved part cannot be read (a newer format, an array of objects, a damaged file); poslens neither reuses nor deletes it.

    Example:
        >>> issubclass(UnreadablePartError, ValueError)  # the CLI prints it as one error line
        True
    """


class MixedSettingsError(PoslensError, ValueError):
    """Parts given to the claims were made with different settings (or record none); claims would mix them.

    Example:
        >>> issubclass(MixedSettingsError, ValueError)  # the CLI prints it as one error line
        True
    """


def _spelled(settings: dict[str, Any], names: list[str]) -> str:
    return ", ".join(f"{OPTION_NAMES.get(name, name)} {settings[name]}" for name in names)


def check_same_settings(parts: dict[str, Result]) -> None:
    """Raise :class:`MixedSettingsError` unless every two ``parts`` agree on every setting both record.

    ``parts`` maps part names (``"leakage"``, ``"compare"``, …) to results.
    Parts depend on different settings (the architecture comparison shares
    only groups, early, seed, corpus and batch size with the others), so only
    the names present in both parts' ``meta["settings"]`` are compared. A part
    without ``meta["settings"]`` (written by an older poslens) is refused.

    Args:
        parts: The study parts, by name.

    Raises:
        MixedSettingsError: When a part records no settings, or two parts disagree on a setting both record.

    Example:
        >>> import pandas as pd
        >>> small = Result(pd.DataFrame(), {"settings": {"n_seqs": 2, "seq_len": 32, "tau": 0.3}})
        >>> large = Result(pd.DataFrame(), {"settings": {"n_seqs": 16, "seq_len": 128, "tau": 0.3}})
        >>> check_same_settings({"leakage": large, "sinks": large})
        >>> try:
        ...     check_same_settings({"leakage": small, "bos-swap": large})
        ... except MixedSettingsError as error:
        ...     print(error)
        leakage.parquet (--n-seqs 2, --seq-len 32) and bos-swap.parquet (--n-seqs 16, --seq-len 128) were made with
        different settings; claims would mix them. Remeasure one of them into its own --out.
    """
    unrecorded = [name for name, part in parts.items() if not part.meta.get("settings")]
    if unrecorded:
        listed = ", ".join(f"{name}.parquet" for name in unrecorded)
        raise MixedSettingsError(
            f"{listed} record(s) no settings (written by an older poslens), so claims cannot check that they match the "
            f"other parts. Measure again: " + ", ".join(f"poslens {name}" for name in unrecorded) + " into a new --out."
        )
    conflicts = []
    names = list(parts)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            a, b = parts[first].meta["settings"], parts[second].meta["settings"]
            differing = [name for name in a if name in b and a[name] != b[name]]
            if differing:
                conflicts.append(
                    f"{first}.parquet ({_spelled(a, differing)}) and {second}.parquet ({_spelled(b, differing)}) were made with different settings"
                )
    if conflicts:
        raise MixedSettingsError("; ".join(conflicts) + "; claims would mix them. Remeasure one of them into its own --out.")


def complete_parts(out: str | Path, settings: Settings, names: list[str]) -> list[str]:
    """The parts among ``names`` saved in ``out`` with ``settings``: those a rerun would reuse.

    Args:
        out: The study folder.
        settings: The study's settings.
        names: Part names.

    Returns:
        The names of the parts a rerun would reuse, in the order given.

    Example:
        >>> complete_parts("no/such/folder", Settings(), ["leakage", "sinks"])
        []
    """
    complete = []
    for name in names:
        path = Path(out) / f"{name}.parquet"
        try:
            saved = Result.load(path).meta.get("settings") if path.exists() else None
        except Exception:  # unreadable: a rerun computes it again
            saved = None
        if saved and saved == settings_values(settings, tuple(saved)):
            complete.append(name)
    return complete


def mismatch_message(path: Path, saved: dict[str, Any] | None, wanted: dict[str, Any]) -> str:
    """The message for a part at ``path`` made with ``saved`` settings when ``wanted`` were asked for.

    Args:
        path: The saved part's file.
        saved: The settings it records (``None``: none).
        wanted: The settings asked for.

    Returns:
        The message, naming each setting that differs.

    Example:
        >>> print(mismatch_message(Path("out/leakage.parquet"), {"n_seqs": 32, "seq_len": 256},
        ...                        {"n_seqs": 16, "seq_len": 256}))
        out/leakage.parquet was made with other settings: --n-seqs 32 there, 16 now.
        poslens does not overwrite it: pass the same settings, choose another --out, or pass --overwrite to measure it again.
    """
    if not saved:
        differing = "settings this version of poslens cannot read"
    else:
        differing = ", ".join(
            f"{OPTION_NAMES.get(name, name)} {saved.get(name, '(not recorded)')} there, {value} now"
            for name, value in wanted.items()
            if saved.get(name) != value
        )
    return (
        f"{path} was made with other settings: {differing}. poslens does not overwrite it: "
        "pass the same settings, choose another --out, or pass --overwrite to measure it again."
    )


def part_key(settings: Settings, names: tuple[str, ...], inputs: dict[str, str]) -> str:
    """The reuse key of a part: a short hash of the settings ``names`` and of the input files' hashes.

    Args:
        settings: The study's settings.
        names: The settings the part depends on.
        inputs: ``{file: sha256}`` of the part's input files.

    Returns:
        The first 16 hex digits of a SHA-256.

    Example:
        >>> from poslens.study.part_registry import MEASURE_KEYS
        >>> part_key(Settings(), MEASURE_KEYS, {"c.txt": "00"}) == part_key(Settings(), MEASURE_KEYS, {"c.txt": "01"})
        False
    """
    return hashlib.sha256(f"{settings.key(*names)}|{inputs_key(inputs)}".encode()).hexdigest()[:16]


def cached_part(
    out: Path,
    name: str,
    settings: Settings,
    names: tuple[str, ...],
    compute: Callable[[], Result],
    log: Callable[[str], None] = print,
    inputs: dict[str, str] | None = None,
    overwrite: bool = False,
    written: list[Path] | None = None,
) -> Result:
    """Load ``out/name.parquet`` if it was made with the same settings ``names`` and inputs, else compute and save it.

    A part made with other settings, or from input files whose bytes changed
    since, is not reused and not overwritten: :class:`SettingsMismatchError`
    or :class:`~poslens.errors.InputsChangedError` names each difference, unless
    ``overwrite`` is set. A part whose ``.sums.npz`` is missing or belongs to
    another table is refused likewise (:class:`~poslens.errors.SumsMismatchError`).
    A part that cannot be read (a newer format, an array of objects in its
    sums, a damaged file) is refused naming the file and the reason
    (:class:`UnreadablePartError`) and left as it is, unless ``overwrite``
    is set. Before computing, each file the part will write is checked: one that
    poslens did not write is never replaced (:class:`~poslens.errors.OutputConflictError`).
    The inputs recorded are those the part was made from: a file the
    computation read is recorded with the hash of the bytes it read, and any
    other input must hash as it did before (:func:`~poslens.study.inputs.inputs_as_read`).
    Under torchrun, rank 0 decides whether to reuse, refuse or measure, and writes.

    Args:
        out: the output folder.
        name: the part's name (its file is ``name.parquet``).
        settings: the study's settings.
        names: the settings the part depends on.
        compute: makes the part.
        log: where progress lines go.
        inputs: ``{file: sha256}`` of the part's input files (:mod:`poslens.study.inputs`).
        overwrite: measure again a part poslens made with other settings or inputs (or damaged), replacing its files
            only once the new part is written in full: a failure on the way keeps the old part.
        written: if given, the files written are appended to it.

    Returns:
        The part, reused or computed.

    Raises:
        SettingsMismatchError: When the saved part was made with other settings (and not ``overwrite``).
        InputsChangedError: When the saved part's input files changed since (and not ``overwrite``).
        SumsMismatchError: When the saved part's ``.sums.npz`` is missing or another table's (and not ``overwrite``).
        UnreadablePartError: When the saved part cannot be read (and not ``overwrite``).
        InputsChangedError: When an input file that was not read as a whole changed while the part was computed.
        OutputConflictError: When a file the part would write was not written by poslens.

    Example:
        >>> cached_part(Path("results"), "leakage", settings, MEASURE_KEYS, lambda: ...)  # doctest: +SKIP
    """
    path = Path(out) / f"{name}.parquet"
    inputs = dict(inputs or {})
    key = part_key(settings, names, inputs)
    wanted = settings_values(settings, names)
    saved: list[Result] = []

    def look() -> str:
        previous = _saved_part(path, name, key, wanted, inputs, overwrite, log)
        saved.extend([] if previous is None else [previous])
        return "compute" if previous is None else "reuse"

    # rank 0 looks at the folder (where it writes), and every rank does as it decides
    if distributed.decided_by_main(look) == "reuse":
        reused = saved[0] if saved else Result.load(path)
        for note in reused.meta.get("warnings", []):
            log(f"[{name}] warning (recorded when it was computed): {note}")
        return reused
    log(f"[{name}] computing")
    start = time.perf_counter()
    with recording_reads() as reads:
        result = compute()
    inputs = distributed.decided_by_main(lambda: inputs_as_read(inputs, reads, f"the {name} part"))
    result.meta["settings_key"] = part_key(settings, names, inputs)
    result.meta["settings"] = wanted
    result.meta["inputs"] = inputs
    result.meta["part_seconds"] = time.perf_counter() - start
    notes = part_warnings(name, settings, result)
    if notes:  # recorded with the part, and said now and at each reuse: such figures never pass in silence
        result.meta["warnings"] = [*result.meta.get("warnings", []), *notes]
        for note in notes:
            log(f"[{name}] warning: {note}")
    if distributed.is_main():  # under torchrun, rank 0 writes
        if overwrite:
            reclaim_ours(_part_files(path))  # the old part, damaged or edited, is replaced by the new one's files
        result.save(path)
        files = saved_files(path, result)
        if written is not None:
            written.extend(files)
        log(f"[{name}] done in {result.meta['part_seconds']:.0f} s -> " + ", ".join(str(f) for f in files))
    return result


def _saved_part(
    path: Path, name: str, key: str, wanted: dict[str, Any], inputs: dict[str, str], overwrite: bool, log: Callable[[str], None]
) -> Result | None:
    """The part saved at ``path`` if it can be reused; else None, once its files may be written (see :func:`cached_part`)."""
    if path.exists():
        try:
            previous = Result.load(path)
        except Exception as error:  # noqa: BLE001 (any reason a saved part cannot be read is refused, naming it)
            if path.name not in written_files(path.parent):
                check_replaceable(path)  # not poslens's: the user's file, named as such
            if not overwrite:
                raise unreadable_error(path, error) from error
            log(f"[{name}] {path} cannot be read ({error}); measuring it again (--overwrite)")
        else:
            if previous.meta.get("settings_key") == key:
                log(f"[{name}] reusing {path}")
                return previous
            if not overwrite:
                raise refusal_error(path, previous.meta, wanted, inputs)
            log(f"[{name}] {path} was made with other settings or inputs; measuring it again (--overwrite)")
    for target in _part_files(path):
        if overwrite and target.is_file() and target.name in written_files(target.parent):
            continue  # poslens's old part: replaced once the new one is written in full, never deleted before
        check_replaceable(target)  # a file poslens did not write stops the part before it is computed
    return None


def unreadable_error(path: Path, error: BaseException) -> PoslensError:
    """The refusal of a saved part that cannot be read: it is left as it is unless ``--overwrite`` asks to replace it.

    Args:
        path: The part's file (``….parquet``).
        error: Why it cannot be read.

    Returns:
        The error to raise: a :class:`~poslens.errors.SumsMismatchError` as it is (its message says what to do),
        else an :class:`UnreadablePartError` naming the file and the reason.

    Example:
        >>> from poslens.errors import SumsFormatError
        >>> print(unreadable_error(Path("out/leakage.parquet"), SumsFormatError("out/leakage.sums.npz: sums format 9 is newer")))
        out/leakage.parquet cannot be read: out/leakage.sums.npz: sums format 9 is newer. poslens does not delete or replace it:
        pass --overwrite to measure the part again (replacing the files of it that poslens wrote), or choose another --out.
    """
    if isinstance(error, SumsMismatchError):
        return error
    reason = str(error) if isinstance(error, PoslensError) else f"{type(error).__name__}: {error}"
    reason = reason.removeprefix(f"{path}: ").removeprefix(f"{path} ")
    return UnreadablePartError(
        f"{path} cannot be read: {reason}. poslens does not delete or replace it: pass --overwrite to measure the part "
        "again (replacing the files of it that poslens wrote), or choose another --out."
    )


def _part_files(path: Path) -> list[Path]:
    return [path, path.with_suffix(".csv"), path.with_suffix(".sums.npz")]


def refusal_error(path: Path, saved_meta: dict[str, Any], wanted: dict[str, Any], inputs: dict[str, str]) -> PoslensError:
    """The error for a saved part whose key differs: its settings differ, or its input files changed.

    Args:
        path: The saved part's table.
        saved_meta: Its metadata (``settings``, and ``inputs`` unless an older poslens made it).
        wanted: The settings the part is wanted with.
        inputs: The hashes of the input files now.

    Returns:
        A :class:`SettingsMismatchError` when the settings differ, else an :class:`~poslens.errors.InputsChangedError`.

    Example:
        >>> error = refusal_error(Path("out/leakage.parquet"), {"settings": {"seed": 0}}, {"seed": 1}, {})
        >>> type(error).__name__, "seed" in str(error)
        ('SettingsMismatchError', True)
    """
    saved = saved_meta.get("settings")
    if not saved or saved != wanted:
        return SettingsMismatchError(mismatch_message(path, saved, wanted))
    if "inputs" not in saved_meta:
        what = "it was made by an older poslens that did not record the hashes of its input files"
    else:
        what = "; ".join(changed_inputs(saved_meta["inputs"], inputs)) + f" since {path.name} was made"
    return InputsChangedError(
        f"{path}: {what}. poslens does not reuse or overwrite it: pass --overwrite to measure it again, or choose another --out."
    )
