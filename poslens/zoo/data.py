"""The zoo's natural-text task (``--task stdlib``): what every Python install carries, split by file hash, as byte tokens.

The documents are CPython's standard-library source (every ``*.py`` file under
the folder of ``os.__file__``, sorted by path, leaving out ``site-packages``,
``dist-packages``, ``__pycache__`` and the test folders, which some
distributions strip) and the help topics of ``pydoc_data.topics`` (one document
per topic, sorted by name). A document is held out when the sha256 of its name
falls in the first ``held_out`` fraction of the hash range: the split depends
on the names alone, not on their order or number.

Tokens are bytes, with the ids of :func:`poslens.testing.byte_tokenizer`
(4 special tokens, then 256 bytes); documents are joined with EOS. A training
sequence is BOS followed by ``seq_len - 1`` tokens from a seeded random start in
the training stream; the held-out sequences are evenly spaced windows of the
held-out stream, the same for every call.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from poslens.errors import InputError
from poslens.files import atomic_write

#: Folders left out of the standard-library walk: installed packages, caches, and tests (absent in some installs).
SKIPPED_FOLDERS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"})
#: BOS and EOS of :func:`poslens.testing.byte_tokenizer`: BOS opens each sequence, EOS ends each document.
BOS_ID, EOS_ID = 1, 2


def stdlib_root() -> Path:
    """The folder of the standard library's source: the folder of ``os.__file__``.

    Returns:
        The folder.

    Example:
        >>> (stdlib_root() / "os.py").is_file()
        True
    """
    return Path(os.__file__).resolve().parent


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """Every ``*.py`` file under ``root`` (default :func:`stdlib_root`), sorted, without the :data:`SKIPPED_FOLDERS`.

    Args:
        root: The folder to walk.

    Returns:
        The files, sorted by their path relative to ``root``.

    Example:
        >>> files = stdlib_files()
        >>> stdlib_root() / "os.py" in files, any("site-packages" in f.parts for f in files)
        (True, False)
    """
    root = Path(root) if root is not None else stdlib_root()
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name not in SKIPPED_FOLDERS)
        found += [Path(folder) / name for name in names if name.endswith(".py")]
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def documents(root: str | Path | None = None) -> list[tuple[str, bytes]]:
    """The zoo's documents as ``(name, bytes)``: the standard-library files, then the ``pydoc_data`` topics.

    A file's name is its path relative to ``root`` (``"json/decoder.py"``); a topic's is ``"pydoc_data.topics:<topic>"``.

    Args:
        root: The standard-library folder (default :func:`stdlib_root`).

    Returns:
        The documents, in a fixed order.

    Example:
        >>> docs = documents()
        >>> [name for name, _ in docs if name in ("os.py", "pydoc_data.topics:for")]
        ['os.py', 'pydoc_data.topics:for']
    """
    from pydoc_data.topics import topics

    root = Path(root) if root is not None else stdlib_root()
    files = [(path.relative_to(root).as_posix(), path.read_bytes()) for path in stdlib_files(root)]
    return files + [(f"pydoc_data.topics:{name}", topics[name].encode("utf-8")) for name in sorted(topics)]


def is_held_out(name: str, held_out: float = 0.1) -> bool:
    """Whether the document ``name`` is held out: the first 8 bytes of its sha256, as a fraction of 2**64, are below ``held_out``.

    Args:
        name: The document's name.
        held_out: The fraction of the hash range held out, in (0, 1).

    Returns:
        True for a held-out document.

    Example:
        >>> sum(is_held_out(f"doc{i}.py") for i in range(1000))
        107
    """
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < held_out


def _bytes_to_symbols() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte b is written as one printable character (what the ByteLevel pre-tokenizer does)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return symbols


def byte_ids() -> np.ndarray:
    """The token id of each byte value under :func:`poslens.testing.byte_tokenizer`: an array of 256 ids.

    Returns:
        ``ids[b]`` is the id of byte ``b``.

    Example:
        >>> from poslens.testing import byte_tokenizer
        >>> text = "def f(x):\\n    return 'ü'"
        >>> byte_ids()[list(text.encode())].tolist() == byte_tokenizer()(text).input_ids
        True
    """
    from poslens.testing import byte_tokenizer

    vocab = byte_tokenizer().get_vocab()
    return np.array([vocab[symbol] for _, symbol in sorted(_bytes_to_symbols().items())], dtype=np.int64)


def encode(docs: list[bytes]) -> torch.Tensor:
    """The byte tokens of ``docs``, each document followed by EOS, as one 1-D stream.

    Args:
        docs: The documents' bytes.

    Returns:
        A long tensor of token ids.

    Example:
        >>> encode([b"ab", b"c"]).tolist()
        [68, 69, 2, 70, 2]
    """
    ids = byte_ids()
    parts = []
    for doc in docs:
        parts += [ids[np.frombuffer(doc, dtype=np.uint8)], np.array([EOS_ID])]
    return torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))


@dataclass
class ZooData:
    """The training and held-out token streams, with what they were made from.

    Attributes:
        train: The training stream (1-D token ids).
        held_out: The held-out stream.
        held_out_names: The held-out documents' names.
        held_out_texts: The held-out documents as text (UTF-8, undecodable bytes replaced), for a poslens corpus.
        n_documents: Documents in all.
        sha256: The sha256 of all documents (names and bytes, in order): the data's identity.
        root: The standard-library folder.

    Example:
        >>> data = load_data(max_documents=40)
        >>> data.n_documents, len(data.held_out_names) < 40, data.train.dtype
        (40, True, torch.int64)
    """

    train: torch.Tensor
    held_out: torch.Tensor
    held_out_names: list[str]
    held_out_texts: list[str]
    n_documents: int
    sha256: str
    root: str

    def describe(self) -> dict:
        """What the data is, for the logs: sizes, the split and its hash.

        Returns:
            A JSON-ready dict.

        Example:
            >>> sorted(load_data(max_documents=40).describe())
            ['held_out_documents', 'held_out_tokens', 'n_documents', 'root', 'sha256', 'task', 'train_tokens']
        """
        return {
            "task": self.task,
            "root": self.root,
            "n_documents": self.n_documents,
            "held_out_documents": len(self.held_out_names),
            "train_tokens": int(self.train.numel()),
            "held_out_tokens": int(self.held_out.numel()),
            "sha256": self.sha256,
        }

    task = "stdlib"
    vocab_size = 260

    def tokenizer(self) -> Any:
        """The tokenizer saved with every model: :func:`poslens.testing.byte_tokenizer`.

        Returns:
            The tokenizer.

        Example:
            >>> load_data(max_documents=40).tokenizer()("ab").input_ids
            [68, 69]
        """
        from poslens.testing import byte_tokenizer

        return byte_tokenizer()

    def batch(self, seq_len: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """``batch_size`` training sequences from the training stream (:func:`sample_batch`).

        Args:
            seq_len: Tokens per sequence, BOS included.
            batch_size: Sequences.
            generator: The seed's generator (advanced by the call).

        Returns:
            Token ids, [batch_size, seq_len].

        Example:
            >>> load_data(max_documents=40).batch(8, 2, torch.Generator().manual_seed(0)).shape
            torch.Size([2, 8])
        """
        return sample_batch(self.train, seq_len, batch_size, generator)

    def held_out_tokens(self, seq_len: int, n_seqs: int) -> torch.Tensor:
        """``n_seqs`` held-out sequences (:func:`held_out_batch`): the same on every call.

        Args:
            seq_len: Tokens per sequence, BOS included.
            n_seqs: Sequences.

        Returns:
            Token ids, [n_seqs, seq_len].

        Example:
            >>> load_data(max_documents=40).held_out_tokens(8, 2)[:, 0].tolist()
            [1, 1]
        """
        return held_out_batch(self.held_out, seq_len, n_seqs)

    def write_held_out(self, path: str | Path) -> Path:
        """Write the held-out documents as a JSONL file (one ``{"name", "text"}`` per line), for ``--corpus``.

        Args:
            path: The ``.jsonl`` file.

        Returns:
            ``path``.

        Example:
            >>> import tempfile, pathlib
            >>> path = load_data(max_documents=40).write_held_out(pathlib.Path(tempfile.mkdtemp()) / "held_out.jsonl")
            >>> sorted(json.loads(path.read_text().splitlines()[0]))
            ['name', 'text']
        """
        lines = [json.dumps({"name": name, "text": text}) for name, text in zip(self.held_out_names, self.held_out_texts, strict=False)]
        return atomic_write(Path(path), lambda tmp: tmp.write_text("\n".join(lines) + "\n", encoding="utf-8"))


def load_data(held_out: float = 0.1, max_documents: int | None = None, root: str | Path | None = None) -> ZooData:
    """The zoo's documents split into a training and a held-out stream of byte tokens.

    Args:
        held_out: The held-out fraction of the hash range (:func:`is_held_out`), in (0, 1).
        max_documents: Keep only the first this many documents (for tests); default all.
        root: The standard-library folder (default :func:`stdlib_root`).

    Returns:
        The :class:`ZooData`.

    Raises:
        InputError: When ``held_out`` is not in (0, 1), or a split is empty.

    Example:
        >>> data = load_data(max_documents=40)
        >>> data.train.numel() > data.held_out.numel() > 0
        True
    """
    if not 0 < held_out < 1:
        raise InputError(f"held_out must lie in (0, 1) (the held-out fraction of the documents), got {held_out}")
    docs = documents(root)
    if max_documents is not None:
        docs = docs[:max_documents]
    digest = hashlib.sha256()
    for name, content in docs:
        digest.update(name.encode("utf-8") + b"\0" + hashlib.sha256(content).digest())
    kept = [(name, content) for name, content in docs if not is_held_out(name, held_out)]
    out = [(name, content) for name, content in docs if is_held_out(name, held_out)]
    if not kept or not out:
        raise InputError(
            f"the split of {len(docs)} documents at held_out={held_out} leaves "
            f"{len(kept)} for training and {len(out)} held out; use more documents or another held_out"
        )
    return ZooData(
        train=encode([content for _, content in kept]),
        held_out=encode([content for _, content in out]),
        held_out_names=[name for name, _ in out],
        held_out_texts=[content.decode("utf-8", "replace") for _, content in out],
        n_documents=len(docs),
        sha256=digest.hexdigest(),
        root=str(Path(root) if root is not None else stdlib_root()),
    )


def sample_batch(stream: torch.Tensor, seq_len: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` training sequences: BOS, then ``seq_len - 1`` tokens from seeded random starts in ``stream``.

    The same generator state gives the same batch: every member of a family draws its batches from one generator per seed.

    Args:
        stream: The 1-D token stream.
        seq_len: Tokens per sequence, BOS included.
        batch_size: Sequences.
        generator: The seeded generator (advanced by the call).

    Returns:
        Token ids, [batch_size, seq_len].

    Raises:
        InputError: When the stream is shorter than one sequence.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> batch = sample_batch(torch.arange(10, 100), 8, 2, g)
        >>> batch.shape, batch[:, 0].tolist()
        (torch.Size([2, 8]), [1, 1])
    """
    span = seq_len - 1
    if stream.numel() <= span:
        raise InputError(f"the token stream has {stream.numel()} tokens, too few for sequences of {seq_len}; use a shorter seq_len")
    starts = torch.randint(0, stream.numel() - span, (batch_size,), generator=generator)
    windows = stream[starts[:, None] + torch.arange(span)[None, :]]
    return torch.cat([torch.full((batch_size, 1), BOS_ID, dtype=windows.dtype), windows], dim=1)


def held_out_batch(stream: torch.Tensor, seq_len: int, n_seqs: int) -> torch.Tensor:
    """``n_seqs`` held-out sequences (BOS, then ``seq_len - 1`` tokens) at evenly spaced starts: the same on every call.

    Args:
        stream: The held-out stream.
        seq_len: Tokens per sequence, BOS included.
        n_seqs: Sequences.

    Returns:
        Token ids, [n_seqs, seq_len].

    Raises:
        InputError: When the stream is shorter than one sequence.

    Example:
        >>> held_out_batch(torch.arange(10, 30), 4, 3).tolist()
        [[1, 10, 11, 12], [1, 18, 19, 20], [1, 27, 28, 29]]
    """
    span = seq_len - 1
    if stream.numel() < span:
        raise InputError(f"the held-out stream has {stream.numel()} tokens, too few for sequences of {seq_len}")
    starts = torch.linspace(0, stream.numel() - span, n_seqs).long()
    windows = stream[starts[:, None] + torch.arange(span)[None, :]]
    return torch.cat([torch.full((n_seqs, 1), BOS_ID, dtype=windows.dtype), windows], dim=1)
