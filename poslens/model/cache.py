"""The on-disk cache of dequantized models.

Dequantizing a GGUF file to float32 takes tens of seconds; a saved float32
folder loads in well under a second. Each cache entry is a Hugging Face model
folder plus ``manifest.json`` with the sha256 of every file in it. Entries are
built in a temporary folder and moved into place with one ``os.replace``, under
a file lock (:class:`filelock.FileLock`: POSIX and Windows), so an interrupted
or concurrent build never leaves a half model that a later load would accept;
an entry whose files no longer match their hashes is rebuilt.

The cache root is ``$POSLENS_CACHE`` if set, else ``$XDG_CACHE_HOME/poslens``,
else ``~/.cache/poslens``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from filelock import FileLock, Timeout

from poslens.files import atomic_write_text

MANIFEST = "manifest.json"


def cache_root() -> Path:
    """The folder that holds poslens's caches (created on first use).

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
    root.mkdir(parents=True, exist_ok=True)
    return root


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, memoized on disk by (path, size, mtime).

    Example:
        >>> import tempfile
        >>> p = tempfile.NamedTemporaryFile(delete=False); _ = p.write(b"abc"); p.close()
        >>> file_sha256(p.name)[:12]
        'ba7816bf8f01'
    """
    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    memo_file = cache_root() / "sha256.json"
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    if key in memo:
        return memo[key]
    digest = _hash_file(path)
    memo[key] = digest
    atomic_write_text(memo_file, json.dumps(memo, indent=0))
    return digest


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_is_valid(folder: Path) -> bool:
    """Whether a cache entry is complete and every file matches its recorded hash.

    Example:
        >>> from pathlib import Path
        >>> entry_is_valid(Path("/nonexistent"))
        False
    """
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        return False
    try:
        manifest = json.loads(manifest_path.read_text())
        for name, digest in manifest["files"].items():
            file = folder / name
            if not file.exists() or _hash_file(file) != digest:
                return False
    except (OSError, ValueError, KeyError):
        return False
    return True


def cached_folder(key: str, build: Callable[[Path], None], extra: dict | None = None) -> Path:
    """Return the cache entry ``key``, building it with ``build(tmp_folder)`` if needed.

    ``build`` writes a complete model folder into the temporary folder it is
    given; only after it returns is that folder hashed and moved into place.
    A process that finds another building (or checking) the same entry says
    so once on stderr and waits for it.

    Example:
        >>> import os, tempfile
        >>> os.environ["POSLENS_CACHE"] = tempfile.mkdtemp()
        >>> folder = cached_folder("demo", lambda d: (d / "x.txt").write_text("hi"))
        >>> (folder / "x.txt").read_text()
        'hi'
    """
    root = cache_root() / "models"
    folder = root / key
    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(root / f".{key}.lock")  # one FileLock per call: threads and processes wait alike
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"waiting for another process to finish building or checking the model cache at {folder} ...",
              file=sys.stderr, flush=True)
        lock.acquire()
    try:
        if entry_is_valid(folder):
            return folder
        if folder.exists():
            shutil.rmtree(folder)  # incomplete or corrupted: rebuild
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".build-{key}-"))
        try:
            build(tmp)
            files = {
                str(p.relative_to(tmp)): _hash_file(p)
                for p in sorted(tmp.rglob("*"))
                if p.is_file()
            }
            manifest = {"key": key, "files": files, **(extra or {})}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            os.replace(tmp, folder)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        lock.release()
    return folder
