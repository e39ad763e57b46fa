"""Token corpora and the record of how position 0 was filled (METHOD §2).

A :class:`Corpus` is N sequences × T token ids plus its provenance. Text
sources are tokenized without special tokens into one stream; windows of
T (or T − 1 when a position-0 token is prepended) are cut from it end to end,
so no two windows overlap, and N of them are drawn with a seeded generator.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

BUILTIN_SOURCES = ("docs", "random", "repeat")
# Texts whose encodings tell tokenizers apart (with the vocabulary size and BOS/EOS ids).
_PROBE_TEXTS = ("The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x ** 2  # ünïcode, 12345")


@dataclass
class Corpus:
    """Token ids [n_seqs, seq_len] with the provenance every result records.

    ``position0`` is ``"bos"``, ``"none"`` or ``"token:<id>"``;
    ``position0_token_ids`` holds the id actually at position 0 of each sequence.

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

    def subset(self, index: Sequence[int]) -> "Corpus":
        """The sequences at ``index``, with the same provenance.

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


def docs_texts() -> list[str]:
    """The offline default text: CPython's bundled documentation topics, in sorted key order.

    Example:
        >>> len(docs_texts()) > 50
        True
    """
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def read_texts(path: str | Path, text_field: str = "text") -> list[str]:
    """Texts from a .txt file, a .jsonl file (field ``text_field``), or a folder.

    A folder is a Hugging Face dataset saved with ``save_to_disk`` (needs the
    ``datasets`` package) or holds .txt / .jsonl / .parquet files, read in
    sorted order.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = p.write_text('{"text": "hello"}\\n{"text": "world"}\\n')
        >>> read_texts(p)
        ['hello', 'world']
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"corpus {path} does not exist; give a .txt/.jsonl file, a folder, or one of {BUILTIN_SOURCES}")
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "state.json").exists() or (path / "dataset_dict.json").exists():
            return _read_hf_dataset(path, text_field)
        files = sorted(p for p in path.rglob("*") if p.suffix in (".txt", ".jsonl", ".parquet"))
        if not files:
            raise ValueError(f"folder {path} holds no .txt, .jsonl or .parquet files and is not a saved dataset")
        return [t for f in files for t in read_texts(f, text_field)]
    if path.suffix == ".jsonl":
        texts = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if text_field not in record:
                raise KeyError(f"{path}:{n} has no field {text_field!r} (fields: {sorted(record)}); pass text_field=")
            texts.append(str(record[text_field]))
        return texts
    if path.suffix == ".parquet":
        import pandas as pd

        frame = pd.read_parquet(path)
        if text_field not in frame:
            raise KeyError(f"{path} has no column {text_field!r} (columns: {list(frame.columns)})")
        return [str(t) for t in frame[text_field]]
    return [path.read_text()]


def _read_hf_dataset(path: Path, text_field: str) -> list[str]:
    try:
        import datasets
    except ImportError:
        raise ImportError(f"{path} is a saved Hugging Face dataset; reading it needs: pip install datasets") from None
    data = datasets.load_from_disk(str(path))
    if isinstance(data, datasets.DatasetDict):
        data = data[sorted(data)[0]]
    if text_field not in data.column_names:
        raise KeyError(f"dataset {path} has no column {text_field!r} (columns: {data.column_names})")
    return [str(t) for t in data[text_field]]


def _position0(tokenizer: Any, position0: str) -> int | None:
    if position0 == "none":
        return None
    if position0 == "bos":
        if tokenizer.bos_token_id is None:
            raise ValueError("position0 (--bos) is 'bos' but this tokenizer has no BOS token; use 'none' or 'token:<id>'")
        return int(tokenizer.bos_token_id)
    if position0.startswith("token:"):
        value = position0[len("token:"):]
        if value.lstrip("-").isdigit():
            token_id = int(value)
        else:
            ids = tokenizer(value, add_special_tokens=False).input_ids
            if len(ids) != 1:
                raise ValueError(f"position0 (--bos) {position0!r}: {value!r} is {len(ids)} tokens, not one")
            token_id = ids[0]
        if not 0 <= token_id < len(tokenizer):
            raise ValueError(f"position0 (--bos) token id {token_id} is outside the vocabulary (0..{len(tokenizer) - 1})")
        return token_id
    raise ValueError(f"position0 (--bos) must be 'bos', 'none' or 'token:<id or string>', not {position0!r}")


def make_corpus(
    tokenizer: Any,
    source: str = "docs",
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
    or a path accepted by :func:`read_texts`. ``position0`` is ``"bos"``,
    ``"none"`` (position 0 holds the first text token) or ``"token:<id or string>"``.

    Example:
        >>> corpus = make_corpus(model, "docs", n_seqs=4, seq_len=64)  # doctest: +SKIP
        >>> corpus.tokens.shape  # doctest: +SKIP
        torch.Size([4, 64])
    """
    owner = tokenizer
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    if n_seqs < 1 or seq_len < 2:
        raise ValueError(f"need n_seqs ≥ 1 and seq_len ≥ 2, got {n_seqs} and {seq_len}")
    first = _position0(tokenizer, position0)
    body_len = seq_len - (first is not None)
    generator = torch.Generator().manual_seed(seed)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    meta: dict[str, Any] = {"tokenizer": getattr(tokenizer, "name_or_path", ""), **tokenizer_record(owner)}
    if source in ("random", "repeat"):
        allowed = torch.tensor([t for t in range(len(tokenizer)) if t not in special])
        if source == "random":
            body = allowed[torch.randint(len(allowed), (n_seqs, body_len), generator=generator)]
        else:
            body = allowed[torch.randint(len(allowed), (n_seqs, 1), generator=generator)].expand(n_seqs, body_len)
    else:
        texts = docs_texts() if source == "docs" else read_texts(source, text_field)
        stream = _token_stream(tokenizer, texts)
        n_windows = len(stream) // body_len
        meta["source_tokens"] = len(stream)
        if n_windows < n_seqs:
            raise ValueError(
                f"corpus {source!r} has {len(stream)} tokens: {n_windows} non-overlapping windows of {body_len}, "
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
        source=str(source),
        seed=seed,
        position0=position0,
        position0_token_ids=first_ids,
        position0_tokens=[tokenizer.convert_ids_to_tokens(i) for i in first_ids],
        meta=meta,
    )


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
    record in ``Corpus.meta``; :func:`check_corpus_fits` compares it with a model's.

    Example:
        >>> from poslens.model.tiny import byte_tokenizer
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


def check_corpus_fits(model: Any, corpus: Corpus) -> None:
    """Raise ``ValueError`` unless ``corpus`` was tokenized for ``model``'s tokenizer and its ids fit the model.

    A corpus from :func:`make_corpus` carries a :func:`tokenizer_record`; it must
    match the model's. Any corpus, with or without the record (say one built
    by hand), must hold only ids in ``0 … vocabulary size − 1`` of the model's
    embedding. ``measure`` and ``collect_sums`` call this first.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.model.tiny import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> check_corpus_fits(model, make_corpus(model, "random", n_seqs=2, seq_len=8))   # fits
        >>> check_corpus_fits(model, Corpus(torch.full((1, 4), 999), "random", 0, "none", [999], ["?"]))
        Traceback (most recent call last):
        ValueError: the corpus holds token id 999 but the model ... has 260 token ids (0 … 259); ...
    """
    record = {key: corpus.meta.get(key) for key in ("tokenizer_of", "tokenizer_vocab", "tokenizer_fingerprint")}
    if record["tokenizer_fingerprint"] is not None:
        mine = tokenizer_record(model)
        if record["tokenizer_fingerprint"] != mine["tokenizer_fingerprint"]:
            same_size = record["tokenizer_vocab"] == mine["tokenizer_vocab"]
            theirs_id = f", tokenizer {record['tokenizer_fingerprint']}" if same_size else ""
            mine_id = f", tokenizer {mine['tokenizer_fingerprint']}" if same_size else ""
            raise ValueError(
                f"this corpus was tokenized for {record['tokenizer_of']} (vocab {record['tokenizer_vocab']}{theirs_id}) "
                f"but the model is {model.name} (vocab {mine['tokenizer_vocab']}{mine_id}); "
                f"make the corpus with poslens.make_corpus(model, ...) for this model"
            )
    n_ids = _embedding_size(model)
    if corpus.tokens.numel() == 0 or n_ids is None:
        return
    low, high = int(corpus.tokens.min()), int(corpus.tokens.max())
    if low < 0 or high >= n_ids:
        bad = low if low < 0 else high
        raise ValueError(
            f"the corpus holds token id {bad} but the model {model.name} has {n_ids} token ids (0 … {n_ids - 1}); "
            f"make the corpus with poslens.make_corpus(model, ...) for this model"
        )


def _embedding_size(model: Any) -> int | None:
    embeddings = model.hf_model.get_input_embeddings() if hasattr(model.hf_model, "get_input_embeddings") else None
    if embeddings is not None and hasattr(embeddings, "num_embeddings"):
        return int(embeddings.num_embeddings)
    return None
