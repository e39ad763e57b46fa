"""Token corpora and the record of how position 0 was filled (methodology §2).

A :class:`Corpus` is N sequences × T token ids plus its provenance. Text
sources (files, folders, or texts given as a list, tuple or pandas Series)
are tokenized without special tokens into one stream; windows of
T (or T − 1 when a position-0 token is prepended) are cut from it end to end,
so no two windows overlap, and N of them are drawn with a seeded generator.

The texts themselves are read by :mod:`poslens.model.corpus_texts`, and the
check that a corpus fits a model is :func:`poslens.model.guards.check_corpus_fits`.
Longer than 400 lines because it is one job, the :class:`Corpus` and
:func:`make_corpus`, the one function that builds it, whose every argument is
checked and refused by name.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from poslens.errors import InputError, ParameterTypeError
from poslens.model.corpus_texts import BUILTIN_SOURCES, check_encodable, check_parameter_type, read_texts, value_snippet

# Texts whose encodings tell tokenizers apart (with the vocabulary size and BOS/EOS ids).
_PROBE_TEXTS = ("The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x ** 2  # ünïcode, 12345")


@dataclass
class Corpus:
    """Token ids [n_seqs, seq_len] with the provenance every result records.

    ``position0`` is ``"bos"``, ``"none"`` or ``"token:<id>"``;
    ``position0_token_ids`` holds the id actually at position 0 of each sequence.

    Attributes:
        tokens: Token ids, [n_seqs, seq_len].
        source: Where the text came from (:func:`make_corpus`'s ``source``).
        seed: The seed of the text windows.
        position0: ``"bos"``, ``"none"`` or ``"token:<id>"``.
        position0_token_ids: The id at position 0 of each sequence.
        position0_tokens: Those ids as token strings.
        meta: Further provenance, e.g. the tokenizer record and ``texts_sha256``.

    Example:
        >>> c = Corpus(torch.zeros(2, 4, dtype=torch.long), "random", 0, "none", [0, 0], ["<unk>", "<unk>"])
        >>> c.n_seqs, c.seq_len
        (2, 4)
    """

    tokens: torch.Tensor
    source: str
    seed: int
    position0: str
    position0_token_ids: list[int]
    position0_tokens: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_seqs(self) -> int:
        """Number of sequences N (rows of ``tokens``).

        Example:
            >>> c = Corpus(torch.zeros(3, 8, dtype=torch.long), "random", 0, "none", [0, 0, 0], ["a", "a", "a"])
            >>> c.n_seqs, c.subset([0, 2]).n_seqs
            (3, 2)
        """
        return int(self.tokens.shape[0])

    @property
    def seq_len(self) -> int:
        """Sequence length T in tokens, position 0 included.

        Example:
            >>> Corpus(torch.zeros(3, 8, dtype=torch.long), "random", 0, "none", [0, 0, 0], ["a", "a", "a"]).seq_len
            8
        """
        return int(self.tokens.shape[1])

    def describe(self) -> dict[str, Any]:
        """Provenance of the corpus for result metadata.

        Returns:
            ``corpus_source``, ``corpus_seed``, sizes and the position-0 facts, JSON-ready.

        Example:
            >>> c = Corpus(torch.ones(1, 3, dtype=torch.long), "docs", 7, "bos", [1], ["<s>"])
            >>> c.describe()["position0_token"]
            '<s>'
        """
        distinct = sorted(set(self.position0_token_ids))
        return {
            "corpus_source": self.source,
            "corpus_seed": self.seed,
            "n_seqs": self.n_seqs,
            "seq_len": self.seq_len,
            "position0": self.position0,
            "position0_token_id": distinct[0] if len(distinct) == 1 else None,
            "position0_token": self.position0_tokens[0] if len(distinct) == 1 else "(varies)",
            "n_distinct_position0_tokens": len(distinct),
            **self.meta,
        }

    def subset(self, index: Sequence[int]) -> Corpus:
        """The sequences at ``index``, with the same provenance.

        Args:
            index: Sequence indices.

        Returns:
            A new corpus of those sequences.

        Example:
            >>> c = Corpus(torch.arange(6).view(3, 2), "docs", 0, "none", [0, 2, 4], ["a", "b", "c"])
            >>> c.subset([2]).tokens.tolist()
            [[4, 5]]
        """
        idx = list(index)
        return Corpus(
            self.tokens[idx],
            self.source,
            self.seed,
            self.position0,
            [self.position0_token_ids[i] for i in idx],
            [self.position0_tokens[i] for i in idx],
            dict(self.meta),
        )

    def excluding(self, other: Corpus, n_seqs: int) -> Corpus:
        """The first ``n_seqs`` sequences that are not in ``other``: a corpus disjoint from it, by construction.

        Windows of one source and length are cut on a fixed grid, so two draws
        share a window exactly or not at all: dropping the identical sequences
        makes the draws disjoint. Draw ``n_seqs + other.n_seqs`` sequences with
        the other seed and keep what this returns, as the relativization's
        calibration corpus does (methodology §11: disjoint from the measured one).

        Args:
            other: The corpus to be disjoint from (the measured one).
            n_seqs: How many sequences to keep.

        Returns:
            The sequences kept, in order, with this corpus's provenance and
            ``meta["excluded_shared"]``, the number of sequences dropped before the last one kept.

        Raises:
            InputError: Fewer than ``n_seqs`` sequences are left.

        Example:
            >>> c = Corpus(torch.arange(8).view(4, 2), "docs", 1, "none", [0, 2, 4, 6], ["a", "b", "c", "d"])
            >>> measured = c.subset([1])
            >>> kept = c.excluding(measured, 2)
            >>> kept.tokens.tolist(), kept.meta["excluded_shared"]
            ([[0, 1], [4, 5]], 1)
        """
        shared = {tuple(row) for row in other.tokens.tolist()}
        keep, dropped = [], 0
        for index, row in enumerate(self.tokens.tolist()):
            if len(keep) == n_seqs:
                break
            if tuple(row) in shared:
                dropped += 1
            else:
                keep.append(index)
        if len(keep) < n_seqs:
            raise InputError(
                f"only {len(keep)} of {self.tokens.shape[0]} sequences are not in the other corpus; {n_seqs} were asked for: draw more sequences"
            )
        kept = self.subset(keep)
        kept.meta["excluded_shared"] = dropped
        return kept


def _position0(tokenizer: Any, position0: str) -> int | None:
    if position0 == "none":
        return None
    if position0 == "bos":
        if tokenizer.bos_token_id is None:
            raise InputError("position0 (--bos) is 'bos' but this tokenizer has no BOS token; use 'none' or 'token:<id>'")
        return int(tokenizer.bos_token_id)
    if position0.startswith("token:"):
        value = position0[len("token:") :]
        if value.lstrip("-").isdigit():
            token_id = int(value)
        else:
            ids = tokenizer(value, add_special_tokens=False).input_ids
            if len(ids) != 1:
                raise InputError(f"position0 (--bos) {position0!r}: {value!r} is {len(ids)} tokens, not one")
            token_id = ids[0]
        if not 0 <= token_id < len(tokenizer):
            raise InputError(f"position0 (--bos) token id {token_id} is outside the vocabulary (0..{len(tokenizer) - 1})")
        return token_id
    raise InputError(f"position0 (--bos) must be 'bos', 'none' or 'token:<id or string>', not {position0!r}")


def _as_int(name: str, value: Any) -> int:
    """``value`` as an int; a bool, float, str or anything else is refused, naming the parameter ``name``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    whole = value if isinstance(value, float) and value.is_integer() else None
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        whole = int(value)
    fix = f"; pass {name}={int(whole)}" if whole is not None else "; pass a whole number"
    raise ParameterTypeError(f"{name} must be an int, got {type(value).__name__} {value_snippet(value)}{fix}")


def _check_token_memory(n_seqs: int, seq_len: int) -> None:
    """Refuse a corpus whose token ids alone (int64, drawn then indexed: twice) would not fit in this machine's memory."""
    import psutil

    need, total = 2 * 8 * n_seqs * seq_len, psutil.virtual_memory().total
    if need > total:
        raise InputError(
            f"n_seqs (--n-seqs) {n_seqs:,} × seq_len (--seq-len) {seq_len:,} tokens need {need / 1e9:,.1f} GB of memory for "
            f"their token ids alone, more than this machine's {total / 1e9:,.1f} GB: give fewer sequences or shorter ones"
        )


def make_corpus(
    tokenizer: Any,
    source: str | os.PathLike[str] | Sequence[str] = "docs",
    n_seqs: int = 8,
    seq_len: int = 128,
    position0: str = "bos",
    seed: int = 0,
    text_field: str = "text",
) -> Corpus:
    """Build a seeded corpus of ``n_seqs`` × ``seq_len`` token ids.

    ``tokenizer`` is a Hugging Face tokenizer or a :class:`~poslens.model.loading.PosModel`.
    ``source`` is ``"docs"`` (CPython's documentation, offline), ``"random"``
    (uniform token ids), ``"repeat"`` (each sequence one random token repeated),
    a path accepted by :func:`read_texts`, or the texts themselves as a list,
    tuple or pandas Series of strings. Given texts go the way texts read from
    a file go: each is tokenized as it is, texts are joined into one stream
    with the EOS token between them (blank texts are skipped), and windows
    are cut from that stream; too few tokens for ``n_seqs`` windows is the
    same error. Their provenance is ``source`` ``"list of 3 texts"`` (or
    tuple, Series) and ``meta["texts_sha256"]``, the sha256 of the texts in
    order. ``position0`` is ``"bos"``,
    ``"none"`` (position 0 holds the first text token) or ``"token:<id or string>"``.
    The arguments are checked first: the sizes and the seed must be ints (a
    bool, float or str is refused), ``source`` a str, ``os.PathLike`` or
    texts (every item a str; a Series without missing values).

    Args:
        tokenizer: a Hugging Face tokenizer or a PosModel.
        source: ``"docs"``, ``"random"``, ``"repeat"``, the path of a file or folder,
            or a non-empty list, tuple or pandas Series of texts (str).
        n_seqs: number of sequences N ≥ 1.
        seq_len: tokens per sequence T ≥ 2, position 0 included.
        position0: what fills position 0 (``--bos`` on the command line).
        seed: seed of the window draw (and of the ids of ``random`` / ``repeat``).
        text_field: the JSONL / Parquet field of the text (``--text-field``).

    Returns:
        The :class:`Corpus`, its provenance and tokenizer record in ``meta``.

    Raises:
        ParameterTypeError: an argument of the wrong type, naming it (for texts, the index of the first item that is not a str).
        InputError: a size out of range, a bad ``position0``, a corpus too small for N windows,
            an empty list of texts, or a Series with a missing value (naming its index).
        CorpusNotFoundError: the corpus path does not exist.
        CorpusError: a corpus file cannot be read as text (see :func:`read_texts`), or a given text
            holds an unpaired surrogate.

    Example:
        >>> from poslens.testing import byte_tokenizer
        >>> make_corpus(byte_tokenizer(), "random", n_seqs=2, seq_len=8, seed=1).tokens.shape
        torch.Size([2, 8])
        >>> texts = ["The first paragraph of my own text.", "A second one, a little longer than the first."]
        >>> mine = make_corpus(byte_tokenizer(), texts, n_seqs=4, seq_len=16)
        >>> mine.source, mine.tokens.shape, len(mine.meta["texts_sha256"])
        ('list of 2 texts', torch.Size([4, 16]), 64)
        >>> make_corpus(byte_tokenizer(), ["fine", 3])
        Traceback (most recent call last):
        poslens.errors.ParameterTypeError: source[1] is an int (3), not a str; every item of a list of texts must be a str ...
        >>> make_corpus(byte_tokenizer(), "docs", n_seqs="2")
        Traceback (most recent call last):
        poslens.errors.ParameterTypeError: n_seqs must be an int, got str '2'; pass n_seqs=2
    """
    given = _given_texts(source)
    if given is None:
        check_parameter_type(
            "source",
            source,
            (str, os.PathLike),
            f"a str or os.PathLike: one of {BUILTIN_SOURCES} or the path of a .txt/.jsonl/.parquet file or a folder, "
            "or a list, tuple or pandas Series of texts (to use token ids you already have, build a Corpus(tokens, ...) "
            "directly)",
        )
    n_seqs, seq_len, seed = (_as_int(name, value) for name, value in (("n_seqs", n_seqs), ("seq_len", seq_len), ("seed", seed)))
    check_parameter_type("position0", position0, (str,), "a str: 'bos', 'none' or 'token:<id or string>'")
    check_parameter_type("text_field", text_field, (str,), "a str (the JSONL / Parquet field that holds the text)")
    owner = tokenizer
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    if n_seqs < 1 or seq_len < 2:
        raise InputError(f"need n_seqs ≥ 1 and seq_len ≥ 2, got {n_seqs} and {seq_len}")
    _check_token_memory(n_seqs, seq_len)
    if not -(2**63) <= seed < 2**64:  # the range torch.Generator.manual_seed takes
        raise InputError(f"seed (--seed) {seed} is outside the range of torch's generator seeds, -2**63 … 2**64 − 1; pass a seed in that range")
    first = _position0(tokenizer, position0)
    body_len = seq_len - (first is not None)
    generator = torch.Generator().manual_seed(seed)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    meta: dict[str, Any] = {"tokenizer": getattr(tokenizer, "name_or_path", ""), **tokenizer_record(owner)}
    if given is None and source in ("random", "repeat"):
        allowed = torch.tensor([t for t in range(len(tokenizer)) if t not in special])
        if source == "random":
            body = allowed[torch.randint(len(allowed), (n_seqs, body_len), generator=generator)]
        else:
            body = allowed[torch.randint(len(allowed), (n_seqs, 1), generator=generator)].expand(n_seqs, body_len)
    else:
        if given is not None:
            texts, label = given
            meta["texts_sha256"] = texts_sha256(texts)
            shown = f"({label})"
        else:
            texts, label, shown = read_texts(source, text_field), str(source), repr(source)
        stream = _token_stream(tokenizer, texts)
        n_windows = len(stream) // body_len
        meta["source_tokens"] = len(stream)
        if n_windows < n_seqs:
            raise InputError(
                f"corpus {shown} has {len(stream)} tokens: {n_windows} non-overlapping windows of {body_len}, "
                f"but {n_seqs} sequences were asked for. Use fewer or shorter sequences, or a larger corpus."
            )
        chosen = torch.randperm(n_windows, generator=generator)[:n_seqs]
        windows = torch.tensor(stream[: n_windows * body_len]).view(n_windows, body_len)
        body = windows[chosen]
    body = body.contiguous().long()
    if first is not None:
        tokens = torch.cat([torch.full((n_seqs, 1), first, dtype=torch.long), body], dim=1)
    else:
        tokens = body
    first_ids = tokens[:, 0].tolist()
    return Corpus(
        tokens=tokens,
        source=label if given is not None else str(source),
        seed=seed,
        position0=position0,
        position0_token_ids=first_ids,
        position0_tokens=[tokenizer.convert_ids_to_tokens(i) for i in first_ids],
        meta=meta,
    )


def texts_sha256(texts: Sequence[str]) -> str:
    """The sha256 of ``texts`` in order, as :func:`make_corpus` records it for given texts.

    The texts are hashed as one JSON array, so the split between texts counts:
    ``["ab", "c"]`` and ``["a", "bc"]`` differ.

    Args:
        texts: the texts.

    Returns:
        64 hex digits.

    Example:
        >>> texts_sha256(["ab", "c"]) == texts_sha256(["a", "bc"]), texts_sha256(["ab"]) == texts_sha256(("ab",))
        (False, True)
    """
    return hashlib.sha256(json.dumps(list(texts), ensure_ascii=True).encode("ascii")).hexdigest()


def _given_texts(source: Any) -> tuple[list[str], str] | None:
    """The texts of a list, tuple or pandas Series ``source``, with its label (``"list of 3 texts"``); None for anything else.

    Raises ``InputError`` for no texts or a missing value in a Series, ``ParameterTypeError``
    for an item that is not a str, and ``CorpusError`` for a text holding an unpaired surrogate.
    """
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        raise ParameterTypeError(
            f"source is a pandas DataFrame (columns: {list(source.columns)}); give the column of the texts, "
            "such as frame['text'], a Series of strings"
        )
    if isinstance(source, pd.Series):
        kind, items = (
            "pandas Series",
            [(f"index {label!r} (position {n}, counting from 0)", value) for n, (label, value) in enumerate(source.items())],
        )
    elif isinstance(source, (list, tuple)):
        kind, items = type(source).__name__, [(f"source[{n}]", value) for n, value in enumerate(source)]
    else:
        return None
    if not items:
        raise InputError(f"source is an empty {kind}; give at least one text (a str)")
    for where, value in items:
        if isinstance(value, str):
            check_encodable(value, where)
            continue
        name = type(value).__name__
        if kind == "pandas Series":
            if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
                raise InputError(
                    f"the Series of texts holds a missing value ({value!r}) at {where}; every row must be a "
                    "text: drop the missing rows first, for example with series.dropna()"
                )
            raise ParameterTypeError(
                f"the Series of texts holds {'an' if name[0] in 'aeiou' else 'a'} {name} "
                f"({value_snippet(value)}) at {where}, not a str; every row must be a str (the text itself)"
            )
        shown = "None" if value is None else f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({value_snippet(value)})"
        raise ParameterTypeError(f"{where} is {shown}, not a str; every item of a {kind} of texts must be a str (the text itself)")
    return [value for _, value in items], f"{kind} of {len(items)} text{'s' if len(items) != 1 else ''}"


def _token_stream(tokenizer: Any, texts: list[str]) -> list[int]:
    stream: list[int] = []
    eos = tokenizer.eos_token_id
    for text in texts:
        if not text.strip():
            continue
        stream.extend(tokenizer(text, add_special_tokens=False).input_ids)
        if eos is not None:
            stream.append(eos)  # documents are separated as in pre-training
    return stream


def tokenizer_record(tokenizer: Any) -> dict[str, Any]:
    """Which tokenizer made a corpus: its owner's name, vocabulary size and a short fingerprint.

    ``tokenizer`` is a Hugging Face tokenizer or a :class:`~poslens.model.loading.PosModel`
    (then the model's name is recorded). The fingerprint hashes the vocabulary
    size, the BOS/EOS ids and the encodings of a few probe texts: two loads of
    one model agree, different tokenizers differ. :func:`make_corpus` stores the
    record in ``Corpus.meta``; :func:`poslens.model.guards.check_corpus_fits` compares it with a model's.

    Args:
        tokenizer: a Hugging Face tokenizer or a PosModel.

    Returns:
        ``{"tokenizer_of": name, "tokenizer_vocab": size, "tokenizer_fingerprint": 12 hex digits}``.

    Example:
        >>> from poslens.testing import byte_tokenizer
        >>> record = tokenizer_record(byte_tokenizer())
        >>> record["tokenizer_vocab"], record == tokenizer_record(byte_tokenizer())
        (260, True)
    """
    model_name = getattr(tokenizer, "name", None) if hasattr(tokenizer, "tokenizer") else None
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    facts = [
        len(tokenizer),
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        [tokenizer(text, add_special_tokens=False).input_ids for text in _PROBE_TEXTS],
    ]
    return {
        "tokenizer_of": str(model_name or getattr(tokenizer, "name_or_path", "") or "an unnamed tokenizer"),
        "tokenizer_vocab": len(tokenizer),
        "tokenizer_fingerprint": hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:12],
    }
