"""A trained family kept small: every run's weights as float16 safetensors, with a sha256 for every file.

:func:`store_family` copies what ``poslens zoo`` wrote into a folder that
``poslens zoo-measure --zoo`` reads as it reads the family itself, with each
run's ``model.safetensors`` cast to float16 (half the bytes; the measurement
reads the stored weights, so its figures come from exactly these) and
``hashes.json`` listing the sha256 of every file. :func:`verify_family`
checks those hashes before a measurement reads the folder.

Example:
    >>> HASHES_FILE
    'hashes.json'
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from poslens.errors import InputError, NotFoundError
from poslens.files import atomic_write_text, sha256_of_file

#: The file that lists every stored file's sha256.
HASHES_FILE = "hashes.json"
#: The family's files kept at the top of the stored folder (the resume state and the ownership records are not).
TOP_KEPT = ("zoo.json", "held_out.jsonl", "log.csv", "summary.csv", "summary.md")
#: Files of a run folder that are not kept (poslens's ownership records).
SKIPPED = (".poslens-files.json", ".poslens-files.json.lock")


def store_family(zoo: str | Path, out: str | Path) -> dict[str, str]:
    """Copy the finished family in ``zoo`` to ``out`` with float16 weights, and write ``out``/``hashes.json``.

    Args:
        zoo: The family's folder, as ``poslens zoo`` wrote it (finished: no ``resume.pt``).
        out: A new or empty folder.

    Returns:
        ``{relative path: sha256}`` of every stored file, as written to ``hashes.json``.

    Raises:
        NotFoundError: ``zoo`` is not a trained family.
        InputError: The family is unfinished (``resume.pt`` is there), or ``out`` holds files.

    Example:
        >>> hashes = store_family("results/zoo_bb", "docs/zoo_family")  # doctest: +SKIP
    """
    import torch
    from safetensors.torch import load_file, save_file

    zoo, out = Path(zoo), Path(out)
    if not (zoo / "summary.csv").is_file() or not (zoo / "zoo.json").is_file():
        raise NotFoundError(f"{zoo} is not a family trained by poslens zoo (no summary.csv / zoo.json)")
    if (zoo / "resume.pt").exists():
        raise InputError(f"{zoo} is unfinished (resume.pt is there): run the same poslens zoo command again to finish it first")
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} holds files; store the family into a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    for name in TOP_KEPT:
        if (zoo / name).is_file():
            shutil.copyfile(zoo / name, out / name)
    for folder in pd.read_csv(zoo / "summary.csv")["folder"]:
        source, target = zoo / str(folder), out / str(folder)
        target.mkdir()
        for path in sorted(p for p in source.iterdir() if p.is_file() and p.name not in SKIPPED):
            if path.name == "model.safetensors":
                tensors = load_file(path)
                half = {k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous() for k, v in tensors.items()}
                save_file(half, target / path.name, metadata={"format": "pt", "stored_by": "poslens.zoo.store (float16)"})
            else:
                shutil.copyfile(path, target / path.name)
    hashes = {str(p.relative_to(out)): sha256_of_file(p) for p in sorted(out.rglob("*")) if p.is_file() and p.name != HASHES_FILE}
    atomic_write_text(out / HASHES_FILE, json.dumps(hashes, indent=1) + "\n")
    return hashes


def verify_family(folder: str | Path) -> int:
    """Check every file listed in ``folder``/``hashes.json`` against its sha256.

    Args:
        folder: A stored family (:func:`store_family`).

    Returns:
        The number of files checked (0 when the folder has no ``hashes.json``: a family as ``poslens zoo`` wrote it).

    Raises:
        InputError: A listed file is missing or its bytes changed (the message names it).

    Example:
        >>> import tempfile
        >>> verify_family(tempfile.mkdtemp())
        0
    """
    folder = Path(folder)
    listing = folder / HASHES_FILE
    if not listing.is_file():
        return 0
    hashes = json.loads(listing.read_text())
    for name, digest in hashes.items():
        path = folder / name
        if not path.is_file():
            raise InputError(f"{path} is listed in {listing} but missing: restore it (git checkout) or store the family again")
        if sha256_of_file(path) != digest:
            raise InputError(f"{path} changed: its sha256 is not the one {listing} records; restore it (git checkout) or store the family again")
    return len(hashes)


__all__ = ["HASHES_FILE", "store_family", "verify_family"]
