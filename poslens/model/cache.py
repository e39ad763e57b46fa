"""The on-disk cache of dequantized models, and the memo of source files' hashes.

Dequantizing a GGUF file to float32 takes tens of seconds; a saved float32
folder loads in well under a second. Each cache entry is a Hugging Face model
folder plus ``manifest.json`` with the sha256 of every file in it. Entries are
built in a temporary folder (``.build-<key>-*`` beside them) and moved into
place with one ``os.replace``, under a file lock (:class:`filelock.FileLock`:
POSIX and Windows), so an interrupted or concurrent build never leaves a half
model that a later load would accept. A temporary folder that a killed build
left behind is removed by the next build of the same key, under that key's
lock.

What is checked, and when:

- **Cache entries: every file is hashed on every load.** :func:`entry_is_valid`
  reads each file of the entry and compares its sha256 with the manifest; an
  entry with a file missing, changed (even one byte, size and mtime kept),
  truncated, or not listed in the manifest (a regular file other than
  ``manifest.json`` that the build did not write), or with a broken manifest, is
  invalid, and :func:`cached_folder` deletes and rebuilds it. Nothing about an
  entry is remembered between loads.
- **Source files (GGUF, corpus, local model files): hashed once per version.**
  :func:`file_sha256` remembers a file's sha256 by its resolved path, size and
  modification time (ns) in ``sha256.json`` in the cache root. A file rewritten
  in place with the same size and an mtime set back to the old value would keep
  its old hash; any ordinary write changes the mtime. Where the memo cannot be
  read or written (a read-only cache), the file is hashed each time.

The cache root is ``$POSLENS_CACHE`` if set, else ``$XDG_CACHE_HOME/poslens``,
else ``~/.cache/poslens``. A root that cannot be created, or (for a build) written,
raises :class:`CacheNotWritableError`; a valid entry in a read-only cache is
still used.

Example:
    >>> import os, tempfile
    >>> os.environ["POSLENS_CACHE"] = tempfile.mkdtemp()
    >>> folder = cached_folder("doc-demo", lambda d: (d / "config.json").write_text("{}"))
    >>> entry_is_valid(folder)
    True
    >>> _ = (folder / "extra.bin").write_bytes(b"not in the manifest")
    >>> entry_is_valid(folder)
    False
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

from poslens.errors import PoslensError
from poslens.files import atomic_write_text, sha256_of_file

MANIFEST = "manifest.json"
_FIX = "set POSLENS_CACHE to a folder you can write to"


class CacheNotWritableError(PoslensError, OSError):
    """The poslens cache folder cannot be created or written; the message names the folder and the fix.

    Raised by :func:`cache_root` when the root cannot be created and by
    :func:`cached_folder` when an entry has to be built (or rebuilt) and the
    cache cannot be written. Also an ``OSError``.

    Example:
        >>> import os, tempfile
        >>> blocker = tempfile.NamedTemporaryFile(delete=False).name   # a regular file: nothing can go under it
        >>> os.environ["POSLENS_CACHE"] = os.path.join(blocker, "cache")
        >>> cache_root()
        Traceback (most recent call last):
        poslens.model.cache.CacheNotWritableError: cannot create ... .../cache (Not a directory); set POSLENS_CACHE to a folder you can write to
        >>> os.environ["POSLENS_CACHE"] = tempfile.mkdtemp()
    """


def _not_writable(what: str, path: Path, error: OSError) -> CacheNotWritableError:
    reason = error.strerror or type(error).__name__
    return CacheNotWritableError(f"cannot {what} {path} ({reason}); {_FIX}")


def cache_root() -> Path:
    """The folder that holds poslens's caches (created on first use).

    Returns:
        ``$POSLENS_CACHE`` if set, else ``$XDG_CACHE_HOME/poslens``, else ``~/.cache/poslens``.

    Raises:
        CacheNotWritableError: the folder does not exist and cannot be created.

    Example:
        >>> import os, tempfile
        >>> os.environ["POSLENS_CACHE"] = tempfile.mkdtemp()
        >>> cache_root().exists()
        True
    """
    env = os.environ.get("POSLENS_CACHE")
    if env:
        root = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(base) / "poslens"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _not_writable("create the poslens cache folder", root, error) from error
    return root


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, memoized on disk by (resolved path, size, mtime).

    The memo (``sha256.json`` in :func:`cache_root`) is a convenience: when it
    cannot be read or written (a read-only or missing cache), the file is hashed
    and nothing is remembered. See the module docstring for what this does and
    does not notice.

    Args:
        path: the file to hash.

    Returns:
        The hex sha256 of the file's bytes.

    Raises:
        OSError: the file itself cannot be read (e.g. ``FileNotFoundError``).

    Example:
        >>> import tempfile
        >>> p = tempfile.NamedTemporaryFile(delete=False); _ = p.write(b"abc"); p.close()
        >>> file_sha256(p.name)[:12]
        'ba7816bf8f01'
    """
    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    try:
        memo_file = cache_root() / "sha256.json"
    except CacheNotWritableError:
        return _hash_file(path)
    try:
        memo = json.loads(memo_file.read_text())
        if not isinstance(memo, dict):
            memo = {}
    except (OSError, ValueError):
        memo = {}
    if isinstance(memo.get(key), str):
        return memo[key]
    digest = _hash_file(path)
    # One version per path: older sizes and mtimes of the same file are forgotten.
    memo = {k: v for k, v in memo.items() if not k.startswith(f"{path}|")}
    memo[key] = digest
    with contextlib.suppress(OSError):  # a read-only cache: no memo, the hash is still right
        atomic_write_text(memo_file, json.dumps(memo, indent=0))
    return digest


def _hash_file(path: Path) -> str:
    return sha256_of_file(path)


def _entry_files(folder: Path) -> set[str]:
    """The regular files (symlinks followed) inside ``folder``, as paths relative to it, without the manifest."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() != MANIFEST}


def entry_is_valid(folder: Path) -> bool:
    """Whether a cache entry is complete, holds nothing else, and every file matches its recorded hash.

    Every file listed in ``manifest.json`` is read and hashed (each call, no
    memo). A regular file in the folder (at any depth) that the manifest does
    not list, other than ``manifest.json`` itself, also makes the entry
    invalid: a file taken off the manifest would otherwise escape the check.

    Args:
        folder: the entry's folder (``cache_root() / "models" / key``).

    Returns:
        True if the entry can be used as it is.

    Example:
        >>> from pathlib import Path
        >>> entry_is_valid(Path("/nonexistent"))
        False
    """
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return False
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
        if not isinstance(files, dict):
            return False
        if set(files) != _entry_files(folder):
            return False  # a listed file is missing, or a file is not listed
        for name, digest in files.items():
            if _hash_file(folder / name) != digest:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def _stale_builds(root: Path, key: str) -> list[Path]:
    """The temporary build folders of ``key`` in ``root`` (``.build-<key>-<random>``, random without '-')."""
    pattern = re.compile(re.escape(f".build-{key}-") + r"[^-]+")
    return [p for p in root.iterdir() if pattern.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]


def cached_folder(
    key: str, build: Callable[[Path], None], extra: dict | None = None, *, name: str | None = None, doing: str = "building its cache entry"
) -> Path:
    """Return the cache entry ``key``, building it with ``build(tmp_folder)`` if needed.

    ``build`` writes a complete model folder into the temporary folder it is
    given; only after it returns is that folder hashed and moved into place.
    A process that finds another building (or checking) the same entry says
    so once on stderr and waits for it. Under the key's lock, temporary folders
    that killed builds of the same key left behind are removed first, and an
    entry that :func:`entry_is_valid` rejects is deleted and rebuilt.

    With ``name`` given, a build says on stderr what it is doing, in one line
    before (``poslens: first load of NAME: DOING into FOLDER ...``) and one
    after (``poslens: cached NAME (SIZE) at FOLDER``); an entry that is reused
    says nothing.

    Args:
        key: the entry's name (a folder name: no path separators).
        build: writes the model folder into the folder it is given.
        extra: more fields for the entry's ``manifest.json``.
        name: what the entry holds, for the two lines a build prints (e.g. ``"smollm2-135m"``); None prints nothing.
        doing: what ``build`` does, for the first of those lines.

    Returns:
        The entry's folder, ``cache_root() / "models" / key``.

    Raises:
        CacheNotWritableError: the entry must be built but the cache cannot be written.

    Example:
        >>> import os, tempfile
        >>> os.environ["POSLENS_CACHE"] = tempfile.mkdtemp()
        >>> folder = cached_folder("demo", lambda d: (d / "x.txt").write_text("hi"))
        >>> (folder / "x.txt").read_text()
        'hi'
        >>> again = cached_folder("demo", lambda d: (d / "x.txt").write_text("hi"), name="demo")   # reused: prints nothing
    """
    root = cache_root() / "models"
    folder = root / key
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(root / f".{key}.lock")  # one FileLock per call: threads and processes wait alike
        try:
            lock.acquire(timeout=0)
        except Timeout:
            print(f"waiting for another process to finish building or checking the model cache at {folder} ...", file=sys.stderr, flush=True)
            lock.acquire()
    except OSError as error:
        # A read-only cache (no lock file can be made): nobody can build here, a valid entry is still usable.
        if entry_is_valid(folder):
            return folder
        raise _not_writable("write the poslens model cache at", root, error) from error
    try:
        for stale in _stale_builds(root, key):
            shutil.rmtree(stale, ignore_errors=True)  # left by a killed build of this key: we hold its lock
        if entry_is_valid(folder):
            return folder
        try:
            if name is not None:
                first = "rebuilding the damaged cache entry of" if folder.exists() else "first load of"
                print(f"poslens: {first} {name}: {doing} into {folder} ...", file=sys.stderr, flush=True)
            if folder.exists():
                shutil.rmtree(folder)  # incomplete or corrupted: rebuild
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".build-{key}-"))
        except OSError as error:
            raise _not_writable("write the poslens model cache at", root, error) from error
        try:
            build(tmp)
            files = {p.relative_to(tmp).as_posix(): _hash_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
            manifest = {"key": key, "files": files, **(extra or {})}
            try:
                (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
                os.replace(tmp, folder)
            except OSError as error:
                raise _not_writable("write the poslens model cache at", root, error) from error
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        lock.release()
    if name is not None:
        print(f"poslens: cached {name} ({size_text(folder_size(folder))}) at {folder}", file=sys.stderr, flush=True)
    return folder


def folder_size(folder: Path) -> int:
    """The bytes of the regular files under ``folder`` (symlinks not followed), 0 for a missing folder.

    Args:
        folder: a folder, such as a cache entry.

    Returns:
        The sum of the files' sizes in bytes.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp()); _ = (folder / "a.bin").write_bytes(b"0123")
        >>> folder_size(folder), folder_size(folder / "missing")
        (4, 0)
    """
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def size_text(n_bytes: int) -> str:
    """A byte count as people read it: ``"517 MiB"``, ``"1.1 GiB"``, ``"12 KiB"``, ``"3 bytes"``.

    Args:
        n_bytes: a size in bytes.

    Returns:
        The size with a binary unit (KiB, MiB, GiB, TiB): one decimal below 10, whole numbers above.

    Example:
        >>> size_text(3), size_text(12_345), size_text(542_000_000), size_text(1_180_000_000)
        ('3 bytes', '12 KiB', '517 MiB', '1.1 GiB')
    """
    if n_bytes < 1024:
        return f"{n_bytes} bytes"
    value = float(n_bytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):  # noqa: B007 (the unit the loop stops at is the one printed)
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
