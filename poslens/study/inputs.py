"""The bytes a study part is made from: hashes of its input files, known before any model loads.

A part is reused only when its settings *and* its inputs are the same. The
inputs are files: the corpus file (or every file of a corpus folder), each
local model folder's config, weight and tokenizer files, and a registry
model's GGUF file. Their sha256 (remembered by path, size and mtime, see
:func:`poslens.model.cache.file_sha256`) go into the part's key and its
metadata; :func:`changed_inputs` names the files whose bytes differ.
The built-in ``docs`` corpus is hashed as text (it comes with Python);
``random`` and ``repeat`` draw token ids from the tokenizer, whose files are
the model's.

Example:
    >>> import tempfile, pathlib
    >>> text = pathlib.Path(tempfile.mkdtemp()) / "c.txt"; _ = text.write_text("one")
    >>> before = corpus_inputs(str(text))
    >>> _ = text.write_text("two")
    >>> changed_inputs(before, corpus_inputs(str(text)))
    ['.../c.txt changed']
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

from poslens.errors import InputsChangedError, OutputConflictError
from poslens.model.cache import file_sha256
from poslens.model.corpus_texts import BUILTIN_SOURCES, docs_texts, source_files
from poslens.model.model_files import model_files
from poslens.model.registry import REGISTRY

DOCS_LABEL = "docs corpus "
"""How the input hashes name the built-in ``docs`` corpus (a text of Python's, not a file)."""


def _docs_hash() -> str:
    digest = hashlib.sha256()
    for text in docs_texts():
        digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def corpus_inputs(source: str, text_field: str = "text") -> dict[str, str]:
    """sha256 of each file the corpus ``source`` is read from, by path.

    Args:
        source: ``"docs"``, ``"random"``, ``"repeat"`` or a path (see :func:`poslens.model.corpus_texts.read_texts`).
        text_field: the JSONL / Parquet field of the text.

    Returns:
        ``{label: sha256}``; ``docs`` gives one entry for Python's documentation
        topics, ``random`` and ``repeat`` none. A missing path gives none (the
        corpus itself then says it is missing).

    Example:
        >>> list(corpus_inputs("random")), list(corpus_inputs("docs"))[0].startswith("docs corpus (pydoc_data")
        ([], True)
    """
    if source == "docs":
        return {f"{DOCS_LABEL}(pydoc_data topics of Python {platform.python_version()})": _docs_hash()}
    if source in BUILTIN_SOURCES or not Path(source).expanduser().exists():
        return {}
    return {str(path): file_sha256(path) for path in source_files(source, text_field)}


def model_inputs(name: str) -> dict[str, str]:
    """sha256 of each file that defines the model ``name``, by path.

    Args:
        name: a registry name (its GGUF file), a local model folder (its
            config, weight and tokenizer files, :func:`poslens.model.model_files.model_files`)
            or a model id in the local Hugging Face cache (the files of its snapshot).

    Returns:
        ``{path: sha256}``, empty where the model cannot be found (loading it then says why).

    Example:
        >>> import tempfile
        >>> from poslens.testing import save_tiny_model
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> sorted(path.rsplit("/", 1)[1] for path in model_inputs(str(folder)))[:3]
        ['config.json', 'generation_config.json', 'model.safetensors']
    """
    entry = REGISTRY.get(name)
    if entry is not None:
        if not entry.installed():
            return {}
        gguf = entry.locate()
        return {str(gguf): file_sha256(gguf)}
    folder = Path(name).expanduser()
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(name, local_files_only=True))
        except Exception:  # not in the cache: loading says so
            return {}
    if not (folder / "config.json").exists():
        return {}
    return {str(path): file_sha256(path) for path in model_files(folder)}


def inputs_key(inputs: dict[str, str]) -> str:
    """A short hash of ``inputs`` (labels and hashes), for a part's reuse key.

    Args:
        inputs: ``{label: sha256}`` as :func:`corpus_inputs` and :func:`model_inputs` give.

    Returns:
        16 hex digits.

    Example:
        >>> inputs_key({"a.txt": "00"}) == inputs_key({"a.txt": "00"}), inputs_key({"a.txt": "00"}) == inputs_key({"a.txt": "01"})
        (True, False)
    """
    text = "\n".join(f"{label}\t{digest}" for label, digest in sorted(inputs.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def inputs_as_read(before: dict[str, str], reads: dict[str, str], what: str) -> dict[str, str]:
    """The inputs a computation was made from: each file it read, by the hash of the bytes read; the others, checked again.

    ``before`` holds the hashes taken before the computation (which decided
    whether a saved part could be reused). A corpus file is hashed as it is read
    (:mod:`poslens.model.reads`), so its hash is the one of the bytes the
    corpus was built from, even if the file was replaced in between. The model's
    files are read by transformers, which does not tell: they are hashed again
    after the computation (which loaded them), and must hash as before.

    Args:
        before: ``{label: sha256}`` taken before the computation.
        reads: ``{label: sha256}`` of the files the computation read (:func:`poslens.model.reads.recording_reads`).
        what: What was computed, for the message (``"the leakage part"``).

    Returns:
        ``before`` updated with ``reads``.

    Raises:
        InputsChangedError: A file that was not read here hashes differently now (a model file replaced while it
            was loaded, a symlink re-pointed), or is gone.

    Example:
        >>> import tempfile, pathlib
        >>> weights = pathlib.Path(tempfile.mkdtemp()) / "model.safetensors"; _ = weights.write_bytes(b"one")
        >>> before = {str(weights): file_sha256(weights), "c.txt": "00"}
        >>> inputs_as_read(before, {"c.txt": "01"}, "the leakage part")["c.txt"]
        '01'
        >>> _ = weights.write_bytes(b"two, longer")
        >>> inputs_as_read(before, {"c.txt": "01"}, "the leakage part")
        Traceback (most recent call last):
        poslens.errors.InputsChangedError: .../model.safetensors changed while the leakage part was computed ...
    """
    changed = []
    for label, digest in before.items():
        if label in reads or label.startswith(DOCS_LABEL):
            continue  # read here (hashed as read), or no file (the docs corpus, Python's own text)
        try:
            now = file_sha256(label)
        except OSError:
            now = "gone"
        if now != digest:
            changed.append(label)
    if changed:
        raise InputsChangedError(
            f"{', '.join(changed)} changed while {what} was computed (from the hash taken before it to the one after), so "
            "the figures cannot be tied to one version of the files; nothing was saved: run the command again once they stay as they are"
        )
    return {**before, **reads}


def changed_inputs(saved: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between the inputs a part was made from and those there are now, in words.

    Args:
        saved: the part's recorded inputs.
        now: the inputs computed now.

    Returns:
        One phrase per differing file (``"c.txt changed"``, ``"c.txt is gone"``, ``"d.txt is new"``).

    Example:
        >>> changed_inputs({"a.txt": "00", "b.txt": "11"}, {"a.txt": "01", "c.txt": "22"})
        ['a.txt changed', 'b.txt is gone', 'c.txt is new']
    """
    out = []
    for label in sorted(set(saved) | set(now)):
        if label not in now:
            out.append(f"{label} is gone")
        elif label not in saved:
            out.append(f"{label} is new")
        elif saved[label] != now[label]:
            out.append(f"{label} changed")
    return out


def check_out_apart(out: str | Path, inputs: dict[str, str]) -> None:
    """Refuse an output folder that is, lies inside, or holds one of the input folders (the model's, the corpus's).

    poslens writes its tables into ``out``: written into a model folder they would
    join the model's files (and its hashed identity), into a corpus folder they would
    be read as corpus on the next run. Only inputs that are local folders count; a
    corpus file's folder may hold the results.

    Args:
        out: the output folder (``--out``), existing or not.
        inputs: ``{option: value}`` of the inputs, as typed (``{"--model": "models/tiny", "--corpus": "random"}``).

    Raises:
        OutputConflictError: naming the option, both folders and what to do.

    Example:
        >>> import tempfile, pathlib
        >>> model = pathlib.Path(tempfile.mkdtemp())
        >>> check_out_apart(model.parent / "results", {"--model": str(model)})   # beside it: fine
        >>> check_out_apart(model / "results", {"--model": str(model)})
        Traceback (most recent call last):
        poslens.errors.OutputConflictError: --out .../results lies inside the --model folder ...
    """
    try:
        target = Path(out).expanduser().resolve()
    except (RuntimeError, OSError):  # a symlink loop: the output folder's own check names it
        return
    for option, value in inputs.items():
        folder = Path(str(value)).expanduser()
        if not value or str(value) in BUILTIN_SOURCES or str(value) in REGISTRY or not folder.is_dir():
            continue  # a built-in corpus or a registry model is no folder of the user's, whatever the working folder holds
        folder = folder.resolve()
        if target == folder:
            relation = "is"
        elif target.is_relative_to(folder):
            relation = "lies inside"
        elif folder.is_relative_to(target):
            relation = "holds"
        else:
            continue
        raise OutputConflictError(
            f"--out {out} {relation} the {option} folder {value}: poslens would write its tables "
            f"{'among' if relation != 'holds' else 'around'} the files it reads; choose an --out outside {value}, such as {folder.parent / 'results'}"
        )
