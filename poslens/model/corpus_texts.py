"""The texts a corpus is cut from: the packaged documentation topics, and text files, folders and saved datasets.

:func:`read_texts` reads a .txt file as one text, a .jsonl file one text per
line (the ``text_field`` of each record), a .parquet file or a saved Hugging
Face dataset one text per row of the ``text_field`` column, and a folder its
files in sorted order; :func:`source_files` names the files it reads, so that
their hashes are known before any model loads. :func:`poslens.model.corpus.make_corpus`
tokenizes them.
"""

from __future__ import annotations

import io
import json
import os
import shlex
from pathlib import Path
from typing import Any

from poslens.errors import CorpusError, InputError, MissingPackageError, ParameterTypeError
from poslens.model.cache import file_sha256
from poslens.model.reads import note_digest, note_read

BUILTIN_SOURCES = ("docs", "random", "repeat")


def docs_texts() -> list[str]:
    """The offline default text: CPython's bundled documentation topics, in sorted key order.

    Returns:
        One text per topic of ``pydoc_data.topics``.

    Example:
        >>> len(docs_texts()) > 50
        True
    """
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


class CorpusNotFoundError(CorpusError, FileNotFoundError):
    """The corpus path does not exist (also a ``FileNotFoundError``).

    Example:
        >>> issubclass(CorpusNotFoundError, FileNotFoundError), issubclass(CorpusNotFoundError, CorpusError)
        (True, True)
    """


class CorpusFieldError(CorpusError, KeyError):
    """A JSONL line, Parquet file or saved dataset has no field of the text's name (also a ``KeyError``).

    Its message is printed as it is (a plain ``KeyError`` would quote it).

    Example:
        >>> str(CorpusFieldError("a.jsonl:1 has no field 'text'"))
        "a.jsonl:1 has no field 'text'"
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_TEXT_SUFFIXES = (".txt", ".jsonl", ".parquet")
_FIELD_FIX = "name the field that holds the text with --text-field (command line) or text_field= (Python)"
_JSON_TYPES = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array", dict: "an object"}


def _is_saved_dataset(folder: Path) -> bool:
    return any((folder / name).exists() for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def check_parameter_type(name: str, value: Any, types: tuple[type, ...], accepts: str) -> None:
    """Refuse a parameter of the wrong type, naming it, what it accepts and what it got.

    Args:
        name: The parameter's name.
        value: Its value.
        types: The types it accepts.
        accepts: Those types in words.

    Raises:
        ParameterTypeError: When ``value`` is none of ``types``.

    Example:
        >>> check_parameter_type("text_field", 3, (str,), "a str")
        Traceback (most recent call last):
        ...
        poslens.errors.ParameterTypeError: text_field must be a str, got int 3
    """
    if not isinstance(value, types):
        raise ParameterTypeError(f"{name} must be {accepts}, got {type(value).__name__} {value_snippet(value)}")


def value_snippet(value: Any, limit: int = 40) -> str:
    """A value's repr on one line, cut to ``limit`` characters, for an error message.

    Args:
        value: Any value.
        limit: The most characters shown.

    Returns:
        The repr, whitespace runs joined by one space, cut with ``...``.

    Example:
        >>> value_snippet({"a":   1}), value_snippet("x" * 50, limit=10)
        ("{'a': 1}", "'xxxxxx...")
    """
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def source_files(source: str | os.PathLike[str], text_field: str = "text") -> list[Path]:
    """The files :func:`read_texts` reads for ``source``, in the order it reads them.

    A file is itself; a folder gives its .txt / .jsonl / .parquet files (at
    any depth, regular files only) in sorted order; a saved Hugging Face
    dataset folder gives every regular file under it, sorted. The built-in
    sources ``"docs"``, ``"random"`` and ``"repeat"`` (given as a str) read no
    file. Hash these files to notice a corpus edited in place.

    Args:
        source: ``"docs"``, ``"random"``, ``"repeat"``, or the path of a file or folder.
        text_field: the JSONL / Parquet field of the text (the listing does not
            depend on it; it is taken for symmetry with :func:`read_texts`).

    Returns:
        The files, ``[]`` for a built-in source.

    Raises:
        CorpusNotFoundError: the path does not exist.
        CorpusError: a folder holds no corpus file and is not a saved dataset, or the path is no regular file (a named
            pipe, ``/dev/stdin`` fed by a pipe, a shell's ``<(…)``): a corpus is read twice, so it must be a file.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> for name in ("b.jsonl", "a.txt", "notes.md"):
        ...     _ = (folder / name).write_text('{"text": "x"}')
        >>> [p.name for p in source_files(folder)], source_files("random")
        (['a.txt', 'b.jsonl'], [])
    """
    check_parameter_type("source", source, (str, os.PathLike), "a str or os.PathLike")
    check_parameter_type("text_field", text_field, (str,), "a str")
    if isinstance(source, str) and source in BUILTIN_SOURCES:
        return []
    path = Path(source).expanduser()
    if not path.exists():
        raise CorpusNotFoundError(f"corpus {path} does not exist; give a .txt/.jsonl/.parquet file, a folder, or one of {BUILTIN_SOURCES}")
    if not path.is_dir():
        if not path.is_file():  # stat only: opening a named pipe would wait for a writer
            raise CorpusError(
                f"corpus {source} is not a regular file but {_file_kind(path)}; poslens reads a corpus twice (its hash, "
                "before any model loads, then its texts), which a pipe or stream cannot give: save it to a file first "
                f"(e.g. cat > corpus.txt) and pass --corpus corpus.txt"
            )
        return [path]
    if _is_saved_dataset(path):
        return sorted(p for p in path.rglob("*") if p.is_file())
    files = sorted(p for p in path.rglob("*") if p.suffix in _TEXT_SUFFIXES and p.is_file())
    if not files:
        raise CorpusError(
            f"folder {path} holds no .txt, .jsonl or .parquet files and is not a saved dataset; put the texts in such files or give one file"
        )
    return files


def _file_kind(path: Path) -> str:
    """What a path that is neither a folder nor a regular file is, in words (a named pipe, /dev/stdin from a pipe)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as error:
        return f"a path that cannot be read ({error.strerror or error})"
    for test, what in ((stat.S_ISFIFO, "a named pipe (a FIFO, or a shell's <(…) or piped stdin)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device")):  # fmt: skip
        if test(mode):
            return what
    return "a special file"


def read_texts(path: str | os.PathLike[str], text_field: str = "text") -> list[str]:
    """Texts from a .txt file, a .jsonl file (field ``text_field``), a .parquet file, or a folder.

    A folder is a Hugging Face dataset saved with ``save_to_disk`` (needs the
    ``datasets`` package) or holds .txt / .jsonl / .parquet files, read in
    sorted order (:func:`source_files` lists them); ``"docs"`` is
    :func:`docs_texts`. Files must be UTF-8 (a leading byte-order mark is
    dropped; a .txt file's line ends read as ``\\n``). A .jsonl file holds one
    JSON object per line, each with a string in ``text_field``; blank lines
    are skipped. A Parquet column or dataset column must hold strings. The
    strings are taken as they are; anything else is refused, never turned
    into a string.

    Args:
        path: a file, a folder, or ``"docs"``.
        text_field: the JSONL / Parquet / dataset field that holds the text
            (``--text-field`` on the command line).

    Returns:
        The texts, one per .txt file, JSONL line, or row.

    Raises:
        CorpusNotFoundError: the path does not exist.
        CorpusFieldError: a line, file or dataset lacks ``text_field``.
        CorpusError: a file is not UTF-8, a line is not a JSON object, a text
            is not a string; the message names the file, the line or row, and the fix.
        InputError: ``path`` is ``"random"`` or ``"repeat"``, sources drawn from token ids by make_corpus, with no texts.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = p.write_text('{"text": "hello"}\\n\\n{"text": "world"}\\n')
        >>> read_texts(p)
        ['hello', 'world']
        >>> _ = p.write_text('{"text": "hello"}\\n{"text": null}\\n')
        >>> read_texts(p)
        Traceback (most recent call last):
        poslens.errors.CorpusError: .../a.jsonl:2: field 'text' is null, not a string; give each line a string in field 'text' ...
    """
    check_parameter_type("path", path, (str, os.PathLike), "a str or os.PathLike")
    if isinstance(path, str) and path == "docs":
        return docs_texts()
    if isinstance(path, str) and path in BUILTIN_SOURCES:
        raise InputError(f"corpus {path!r} has no texts: it is drawn from the tokenizer's ids by make_corpus; give a file or folder to read_texts")
    files = source_files(path, text_field)
    folder = Path(path).expanduser()
    if folder.is_dir() and _is_saved_dataset(folder):
        return _read_hf_dataset(folder, files, text_field)
    return [text for file in files for text in _read_file(file, text_field)]


def _read_file(path: Path, text_field: str) -> list[str]:
    if path.suffix == ".parquet":
        return _read_parquet(path, text_field)
    text = _decode(path)
    if path.suffix == ".jsonl":
        return _read_jsonl(path, text, text_field)
    return [text.replace("\r\n", "\n").replace("\r", "\n")]


def _decode(path: Path) -> str:
    """The file's bytes as UTF-8 (a BOM dropped); a CorpusError names the line and byte offset of the first bad byte."""
    try:
        data = path.read_bytes()
    except OSError as error:  # no permission to read, a folder of that name, a damaged disk
        raise CorpusError(f"cannot read corpus file {path}: {error.strerror or error}; make it readable or give another --corpus") from error
    note_read(str(path), data)  # the hash of the very bytes the texts come from
    try:
        text = data.decode("utf-8")  # not utf-8-sig: its error offsets would not count the BOM
    except UnicodeDecodeError as error:
        offset = error.start
        line = data.count(b"\n", 0, offset) + 1
        column = offset - (data.rfind(b"\n", 0, offset) + 1)
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            guess, encoding = "it starts with a UTF-16 byte-order mark", "utf-16"
        else:
            guess, encoding = "it may be Latin-1 or cp1252; for cp1252 write -f cp1252 below", "latin1"
        raise CorpusError(
            f"{path}:{line}: byte {offset} (0x{data[offset]:02x}; byte {column} of line {line}, counting from 0) is not UTF-8; "
            f"the file is not UTF-8 text ({guess}). "
            f"Convert it to UTF-8, for example with {_converting(path, encoding)}"
        ) from None
    if "\x00" in text:  # valid UTF-8, but NUL between letters: UTF-16 without a byte-order mark
        offset = data.index(b"\x00")
        line = data.count(b"\n", 0, offset) + 1
        raise CorpusError(
            f"{path}:{line}: byte {offset} is a NUL byte, which no text holds; the file is probably UTF-16 without a byte-order "
            f"mark. Convert it to UTF-8, for example with {_converting(path, 'utf-16le')}"
        )
    return text[1:] if text.startswith("\ufeff") else text


def _converting(path: Path, encoding: str) -> str:
    """The shell command (quoted, to paste as it is, in the file's folder) that converts ``path`` from ``encoding`` to UTF-8."""
    return f"{shlex.join(['iconv', '-f', encoding, '-t', 'utf-8', path.name])} > {shlex.quote(f'{path.stem}.utf8{path.suffix}')}"


def _read_jsonl(path: Path, text: str, text_field: str) -> list[str]:
    texts = []
    example = json.dumps({text_field: "..."})
    for n, line in enumerate(text.split("\n"), 1):  # JSONL lines end at \n only (U+2028 and the like may sit in a string)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise CorpusError(
                f"{path}:{n} is not valid JSON ({error.msg} at column {error.colno}); write one JSON object per line, such as {example}"
            ) from None
        except RecursionError:
            raise CorpusError(f"{path}:{n} is JSON nested too deeply to read; write one JSON object per line, such as {example}") from None
        if not isinstance(record, dict):
            kind = _JSON_TYPES.get(type(record), type(record).__name__).split()[-1]
            kind = "JSON null" if kind == "null" else f"a JSON {kind}"
            raise CorpusError(f"{path}:{n} is {kind} ({value_snippet(record)}), not an object; write one JSON object per line, such as {example}")
        if text_field not in record:
            raise CorpusFieldError(f"{path}:{n} has no field {text_field!r} (the line's fields: {sorted(record)}); {_FIELD_FIX}")
        value = record[text_field]
        if not isinstance(value, str):
            kind = _JSON_TYPES.get(type(value), type(value).__name__)
            shown = "" if value is None else f" ({value_snippet(value)})"
            raise CorpusError(
                f"{path}:{n}: field {text_field!r} is {kind}{shown}, not a string; give each line a string in "
                f'field {text_field!r} (drop the line, or write "" for an empty text)'
            )
        if "\\u" in line:
            check_encodable(value, f"{path}:{n}: field {text_field!r}")
        texts.append(value)
    return texts


def check_encodable(value: str, where: str) -> None:
    """Refuse a text that UTF-8 cannot encode (an unpaired surrogate escape such as ``\\ud800``).

    Args:
        value: The text.
        where: Where it came from, for the message.

    Raises:
        CorpusError: When the text holds an unpaired surrogate.

    Example:
        >>> check_encodable("plain text", "a.jsonl:1")
        >>> check_encodable("\\ud800", "a.jsonl:1")
        Traceback (most recent call last):
        ...
        poslens.errors.CorpusError: a.jsonl:1 holds an unpaired surrogate escape (\\ud800 at character 0), which is no text; ...
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CorpusError(
            f"{where} holds an unpaired surrogate escape (\\u{ord(value[error.start]):04x} at character "
            f"{error.start}), which is no text; write the character itself or its full surrogate pair"
        ) from None


def _check_strings(values: Any, where: str, text_field: str) -> list[str]:
    texts = list(values)
    for row, value in enumerate(texts, 1):
        if not isinstance(value, str):
            null = value is None or (isinstance(value, float) and value != value) or type(value).__name__ in ("NAType", "NaTType")
            name = type(value).__name__
            kind = "null" if null else f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({value_snippet(value)})"
            raise CorpusError(
                f"{where}: row {row} of {len(texts)} (counting from 1) of column {text_field!r} is {kind}, "
                f"not a string; give every row a string in column {text_field!r}"
            )
    return texts  # Arrow strings are valid UTF-8: no surrogate to look for


def _read_parquet(path: Path, text_field: str) -> list[str]:
    import pandas as pd

    try:
        data = path.read_bytes()
        note_read(str(path), data)  # the hash of the very bytes the texts come from
        frame = pd.read_parquet(io.BytesIO(data))
    except (OSError, ValueError) as error:
        raise CorpusError(
            f"{path} is not a readable Parquet file ({type(error).__name__}: {error}); write it again, for example with pandas.DataFrame.to_parquet"
        ) from None
    if text_field not in frame:
        raise CorpusFieldError(f"{path} has no column {text_field!r} (columns: {list(frame.columns)}); {_FIELD_FIX}")
    return _check_strings(frame[text_field], str(path), text_field)


def _read_hf_dataset(path: Path, files: list[Path], text_field: str) -> list[str]:
    """The texts of a saved dataset; its files (``files``) are hashed before and after, since the dataset reads them itself."""
    try:
        import datasets
    except ImportError:
        raise MissingPackageError(f"{path} is a saved Hugging Face dataset; reading it needs: pip install datasets") from None
    before = {str(file): file_sha256(file) for file in files}
    texts = _dataset_texts(datasets, path, text_field)
    for label, digest in before.items():
        if not Path(label).is_file() or file_sha256(label) != digest:
            raise CorpusError(f"{label} (of dataset {path}) changed while it was read; run again once the dataset stays as it is")
        note_digest(label, digest)
    return texts


def _dataset_texts(datasets: Any, path: Path, text_field: str) -> list[str]:
    try:
        data = datasets.load_from_disk(str(path))
    except (OSError, ValueError, KeyError) as error:
        raise CorpusError(
            f"{path} looks like a saved Hugging Face dataset but cannot be loaded ({type(error).__name__}: "
            f"{error}); save it again with Dataset.save_to_disk"
        ) from None
    if isinstance(data, datasets.DatasetDict):
        data = data[sorted(data)[0]]
    if text_field not in data.column_names:
        raise CorpusFieldError(f"dataset {path} has no column {text_field!r} (columns: {data.column_names}); {_FIELD_FIX}")
    return _check_strings(data[text_field], f"dataset {path}", text_field)
