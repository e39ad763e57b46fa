"""The files of a local model folder: which define the model, and whether its tokenizer and weights are there and whole.

Before any weights are read, a model folder's files are checked: it must hold
tokenizer files (:data:`TOKENIZER_FILES`), its weights must be safetensors
(pickled weights such as ``pytorch_model.bin`` are never loaded: unpickling can
run code), and each safetensors weights file that transformers would read must be whole (its header parses and the file is
exactly as long as the header says). Otherwise :class:`~poslens.errors.ModelFileError`
names the folder or file and the fix. :func:`model_files` lists the files that
define a local model folder.

Example:
    >>> import tempfile
    >>> from poslens.testing import save_tiny_model
    >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
    >>> check_model_folder(folder)   # a whole folder passes
    >>> (folder / "model.safetensors").write_bytes(b"")
    0
    >>> check_model_folder(folder)
    Traceback (most recent call last):
    poslens.errors.ModelFileError: .../model.safetensors is truncated or damaged: it has 0 bytes, ...
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from poslens.errors import ModelFileError

#: Files any one of which holds a tokenizer transformers can load (besides any ``*.tiktoken``
#: or sentencepiece ``*.model`` file).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)
#: Files that describe a model rather than define it: left out of :func:`model_files` (matched by name
#: without suffix, any case).
PROSE_FILES = ("README", "LICENSE", "LICENCE", "NOTICE", "COPYING")
_PROSE_SUFFIXES = (".md", ".rst")


def model_files(folder: str | os.PathLike) -> list[Path]:
    """The files of a local model folder that define the model: config, weights, tokenizer, generation files.

    These are every regular file (a symlink to one counts, as in a Hugging Face
    cache snapshot) directly in ``folder`` whose name does not start with ``.``,
    except prose: ``*.md``, ``*.rst`` and files named README, LICENSE, LICENCE,
    NOTICE or COPYING with any suffix (editing a model card does not change the
    model); and every weights file that transformers would read, wherever it is:
    each shard that ``model.safetensors.index.json`` names, in a subfolder or
    with a hidden name too (:func:`weight_files`). Hash them to notice a folder
    edited in place.

    Args:
        folder: a local Hugging Face model folder.

    Returns:
        The files as ``folder / name``, sorted by name.

    Raises:
        ModelFileError: ``folder`` is not a folder.

    Example:
        >>> import tempfile, pathlib
        >>> from poslens.testing import save_tiny_model
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> _ = (folder / "README.md").write_text("# a model card")
        >>> [path.name for path in model_files(folder)]
        ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFileError(f"{folder} is not a folder; model_files() lists the files of a local model folder")
    top = {path for path in folder.iterdir() if path.is_file() and not path.name.startswith(".") and not _is_prose(path)}
    return sorted(top | {path for path in weight_files(folder) if path.is_file()}, key=str)


def weight_files(folder: str | os.PathLike) -> list[Path]:
    """The safetensors files transformers reads from a model folder: ``model.safetensors`` and every shard its index names.

    A shard may lie in a subfolder or have a hidden name (``sub/w.safetensors``,
    ``.w.safetensors``): transformers reads it all the same, so it belongs to the
    model's hashed identity. Shards that are missing are listed too (the caller
    checks that they are there).

    Args:
        folder: a local Hugging Face model folder.

    Returns:
        The files as ``folder / name``: ``model.safetensors`` where it is a file, then the index's shards, sorted.

    Raises:
        ModelFileError: ``model.safetensors.index.json`` is not a safetensors index with a ``weight_map``.

    Example:
        >>> import tempfile
        >>> from poslens.testing import save_tiny_model
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> [path.name for path in weight_files(folder)]
        ['model.safetensors']
    """
    folder = Path(folder)
    single = folder / "model.safetensors"
    files = [single] if single.is_file() else []
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return files
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted({str(name) for name in weight_map.values()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ModelFileError(
            f"{index} is damaged (not a safetensors index with a weight_map: {error}); save the model again with model.save_pretrained(folder)"
        ) from None
    return files + [folder / name for name in shards if folder / name != single]


def _is_prose(path: Path) -> bool:
    return path.suffix.lower() in _PROSE_SUFFIXES or path.name.split(".")[0].upper() in PROSE_FILES


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES) or any(
        p.is_file() and p.suffix in (".tiktoken", ".model") for p in folder.iterdir()
    )


def check_model_folder(folder: str | os.PathLike) -> None:
    """Check, before any weights are read, that a model folder holds tokenizer files and whole safetensors weights.

    Args:
        folder: a local Hugging Face model folder.

    Raises:
        ModelFileError: no tokenizer files, weights only in pickle files (``pytorch_model.bin``), a damaged or missing
            safetensors file or shard, or a damaged index.

    Example:
        >>> import tempfile, pathlib
        >>> from poslens.testing import save_tiny_model
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> check_model_folder(folder)
        >>> for name in ("tokenizer.json", "tokenizer_config.json"):
        ...     (folder / name).unlink()
        >>> check_model_folder(folder)
        Traceback (most recent call last):
        poslens.errors.ModelFileError: ... holds no tokenizer files ...
    """
    _check_tokenizer_files(Path(folder))
    _check_weights(Path(folder))


def _check_tokenizer_files(folder: Path) -> None:
    if not _has_tokenizer(folder):
        raise ModelFileError(
            f"{folder} holds no tokenizer files (none of {', '.join(TOKENIZER_FILES)}, *.tiktoken): poslens needs the "
            f"model's own tokenizer. Save it into the folder with tokenizer.save_pretrained({str(folder)!r}) (the "
            "tokenizer the model was trained with, e.g. AutoTokenizer.from_pretrained of the original model)"
        )


def _weights_to_check(folder: Path) -> list[Path]:
    """The safetensors files transformers would read from ``folder``: model.safetensors, else the index's shards."""
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return []  # other weight formats (or none): transformers says what it finds
    shards = [str(path.relative_to(folder)) for path in weight_files(folder)]
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise ModelFileError(
            f"{folder} is missing {len(missing)} of the {len(shards)} weight shards that {index.name} names "
            f"({', '.join(missing[:3])}{', …' if len(missing) > 3 else ''}); copy the whole folder again, or save the "
            "model again with model.save_pretrained(folder)"
        )
    return [folder / name for name in shards]


def _safetensors_damage(path: Path) -> str | None:
    """What is wrong with a safetensors file's layout (8-byte little-endian header length, JSON header, data), or None.

    Reads the header only: the data's bytes are not checked, its length is.
    """
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"it has {size} bytes, fewer than the 8 that give a safetensors header's length"
        length = int.from_bytes(head, "little")
        if length == 0:
            return "its first 8 bytes, the length of its header, are zero (a zeroed file)"
        if 8 + length > size:
            return f"its first 8 bytes give a header of {length} bytes, but the whole file has {size} bytes"
        raw = handle.read(length)
    try:
        header = json.loads(raw)
        ends = [int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return "its header is not a safetensors header (the bytes are overwritten or zeroed)"
    expected = 8 + length + max(ends, default=0)
    if size < expected:
        return f"it has {size} bytes, but its header describes {expected}"
    if size > expected:
        return f"it has {size} bytes, {size - expected} more than its header describes"
    return None


#: Suffixes of weights files saved with Python's pickle (``torch.save``): poslens never loads them.
PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def _check_weights(folder: Path) -> None:
    safetensors = any(p.is_file() for p in folder.glob("*.safetensors"))
    pickled = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in PICKLED_SUFFIXES)
    if pickled and not safetensors:
        raise ModelFileError(
            f"{folder} holds its weights only as {', '.join(pickled)} (PyTorch's pickle format), which poslens never loads: "
            "unpickling a file can run any code in it. Convert the weights to safetensors once, in a Python you trust with "
            "that file: AutoModelForCausalLM.from_pretrained(folder).save_pretrained(folder) writes model.safetensors; "
            f"then remove {pickled[0]}"
        )
    for path in _weights_to_check(folder):
        damage = _safetensors_damage(path)
        if damage is not None:
            raise ModelFileError(
                f"{path} is truncated or damaged: {damage}. Save the model again (model.save_pretrained(folder)) or "
                "copy the file again from its source"
            )


def is_safetensors_error(error: BaseException) -> bool:
    """Whether ``error`` comes from the safetensors library (a weights file damaged in a way the header check cannot see).

    Args:
        error: An exception raised while transformers read the weights.

    Returns:
        Whether safetensors raised it.

    Example:
        >>> is_safetensors_error(ValueError("no"))
        False
    """
    return type(error).__name__ == "SafetensorError" or type(error).__module__.startswith("safetensors")
