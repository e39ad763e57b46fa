"""Corpora: seeded sampling, disjoint windows of the token stream, and the position-0 record.

Token streams are rebuilt here from the source texts with the tokenizer alone,
and every window the corpus holds is located in that stream.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from poslens import make_corpus
from poslens.errors import InputError
from poslens.model.corpus_texts import read_texts
from poslens.testing import byte_tokenizer


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def reference_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    """Documents tokenized without special tokens, each followed by EOS; blank ones skipped."""
    ids: list[int] = []
    for text in texts:
        if text.strip():
            ids += tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return torch.tensor(ids)


def pydoc_texts() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def window_starts(stream: torch.Tensor, bodies: torch.Tensor) -> list[int]:
    """Where each body row occurs in ``stream`` (asserts it occurs, at a start that is a multiple of its length)."""
    length = bodies.shape[1]
    n = len(stream) // length
    tiles = stream[: n * length].view(n, length)
    starts = []
    for row in bodies:
        hits = (tiles == row).all(1).nonzero().flatten().tolist()
        assert hits, "a window is not an aligned slice of the token stream"
        # Several aligned tiles could be identical only for degenerate text; take the first.
        starts.append(hits[0] * length)
    return starts


# ---------------------------------------------------------------- determinism and windows


def test_same_seed_same_tokens(tok):
    a = make_corpus(tok, "docs", n_seqs=6, seq_len=48, seed=3)
    b = make_corpus(tok, "docs", n_seqs=6, seq_len=48, seed=3)
    c = make_corpus(tok, "docs", n_seqs=6, seq_len=48, seed=4)
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, c.tokens)
    assert a.tokens.shape == (6, 48) and a.tokens.dtype == torch.long
    assert (a.seed, c.seed) == (3, 4)


@pytest.mark.parametrize("position0, prefix", [("bos", 1), ("none", 0)])
def test_docs_windows_are_disjoint_slices(tok, position0, prefix):
    seq_len, n_seqs = 40, 24
    corpus = make_corpus(tok, "docs", n_seqs=n_seqs, seq_len=seq_len, position0=position0, seed=0)
    stream = reference_stream(tok, pydoc_texts())
    assert corpus.meta["source_tokens"] == len(stream)
    bodies = corpus.tokens[:, prefix:]
    length = seq_len - prefix
    starts = window_starts(stream, bodies)
    assert all(s % length == 0 for s in starts)
    assert len(set(starts)) == n_seqs  # distinct aligned starts: no two windows overlap
    # Drawn from across the stream, not just its beginning.
    assert max(starts) > len(stream) // 4


def test_smollm2_tokenizer_corpus(smollm2):
    # A PosModel is accepted in place of its tokenizer.
    corpus = make_corpus(smollm2, "docs", n_seqs=4, seq_len=64, position0="bos", seed=1)
    tokenizer = smollm2.tokenizer
    assert (corpus.tokens[:, 0] == tokenizer.bos_token_id).all()
    assert corpus.position0_tokens == ["<|im_start|>"] * 4
    stream = reference_stream(tokenizer, pydoc_texts())
    starts = window_starts(stream, corpus.tokens[:, 1:])
    assert len(set(starts)) == 4 and all(s % 63 == 0 for s in starts)
    assert corpus.tokens.max().item() < len(tokenizer)


# ---------------------------------------------------------------- position 0


def test_position0_bos(tok):
    corpus = make_corpus(tok, "docs", n_seqs=5, seq_len=16, position0="bos")
    assert corpus.tokens[:, 0].tolist() == [tok.bos_token_id] * 5
    assert corpus.position0_token_ids == [tok.bos_token_id] * 5
    assert corpus.position0_tokens == ["<s>"] * 5
    described = corpus.describe()
    assert described["position0"] == "bos"
    assert described["position0_token_id"] == tok.bos_token_id
    assert described["position0_token"] == "<s>"
    assert described["n_distinct_position0_tokens"] == 1
    # No BOS elsewhere: the body is plain text.
    assert (corpus.tokens[:, 1:] != tok.bos_token_id).all()


def test_position0_none(tok):
    corpus = make_corpus(tok, "docs", n_seqs=8, seq_len=16, position0="none", seed=2)
    first = corpus.tokens[:, 0].tolist()
    assert corpus.position0_token_ids == first
    assert corpus.position0_tokens == tok.convert_ids_to_tokens(first)
    described = corpus.describe()
    assert described["position0"] == "none"
    assert described["n_distinct_position0_tokens"] == len(set(first)) > 1
    assert described["position0_token"] == "(varies)" and described["position0_token_id"] is None


def test_position0_token_id(tok):
    corpus = make_corpus(tok, "docs", n_seqs=3, seq_len=16, position0="token:5")
    assert corpus.tokens[:, 0].tolist() == [5, 5, 5]
    assert corpus.position0_tokens == [tok.convert_ids_to_tokens(5)] * 3
    assert corpus.describe()["position0_token_id"] == 5


def test_position0_token_string(tok):
    (token_id,) = tok.encode("#", add_special_tokens=False)
    corpus = make_corpus(tok, "random", n_seqs=3, seq_len=16, position0="token:#")
    assert corpus.tokens[:, 0].tolist() == [token_id] * 3
    assert corpus.position0_tokens == ["#"] * 3
    assert corpus.position0 == "token:#"


@pytest.mark.parametrize(
    "position0, message",
    [
        ("token:ab", "2 tokens"),
        ("token:9999", "outside the vocabulary"),
        ("token:-1", "outside the vocabulary"),
        ("first", "position0 (--bos) must be"),
    ],
)
def test_bad_position0(tok, position0, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_corpus(tok, "random", n_seqs=2, seq_len=8, position0=position0)


def test_bos_without_bos_token():
    tokenizer = byte_tokenizer()
    tokenizer.bos_token = None
    assert tokenizer.bos_token_id is None
    with pytest.raises(ValueError, match="no BOS"):
        make_corpus(tokenizer, "random", n_seqs=2, seq_len=8, position0="bos")
    # 'none' works on the same tokenizer.
    assert make_corpus(tokenizer, "random", n_seqs=2, seq_len=8, position0="none").tokens.shape == (2, 8)


# ---------------------------------------------------------------- random and repeat


def test_random_source(tok):
    corpus = make_corpus(tok, "random", n_seqs=16, seq_len=64, position0="bos", seed=5)
    body = corpus.tokens[:, 1:]
    special = set(tok.all_special_ids)
    assert corpus.tokens.shape == (16, 64)
    assert (corpus.tokens[:, 0] == tok.bos_token_id).all()
    assert body.min().item() >= 0 and body.max().item() < len(tok)
    assert not any(t in special for t in body.unique().tolist())
    # Uniform over the 256 byte tokens: ~1000 draws cover most of them.
    assert len(body.unique()) > 200
    assert torch.equal(corpus.tokens, make_corpus(tok, "random", n_seqs=16, seq_len=64, seed=5).tokens)
    assert not torch.equal(corpus.tokens, make_corpus(tok, "random", n_seqs=16, seq_len=64, seed=6).tokens)


def test_repeat_source(tok):
    corpus = make_corpus(tok, "repeat", n_seqs=12, seq_len=20, position0="none", seed=0)
    rows = corpus.tokens
    assert (rows == rows[:, :1]).all()  # one token repeated along each sequence
    assert len(rows[:, 0].unique()) > 1  # different tokens across sequences
    assert not any(t in set(tok.all_special_ids) for t in rows[:, 0].tolist())
    with_bos = make_corpus(tok, "repeat", n_seqs=12, seq_len=20, position0="bos", seed=0)
    assert (with_bos.tokens[:, 0] == tok.bos_token_id).all()
    assert (with_bos.tokens[:, 1:] == with_bos.tokens[:, 1:2]).all()


# ---------------------------------------------------------------- user files


# Text without repeats, so that every window occurs at one place in the stream.
TEXT_A = " ".join(f"alpha{n:03d}" for n in range(48)) + "."  # 48 × 9 bytes: 432 bytes
JSONL_TEXTS = [" ".join(f"{word}{n}" for n in range(20)) for word in ("first", "second", "third")]


def write_jsonl(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t, "id": n}) + "\n" for n, t in enumerate(texts)))


def test_text_file_source(tok, tmp_path):
    path = tmp_path / "a.txt"
    path.write_text(TEXT_A)
    corpus = make_corpus(tok, str(path), n_seqs=10, seq_len=24, position0="none", seed=0)
    stream = reference_stream(tok, [TEXT_A])
    assert len(stream) == 433
    starts = window_starts(stream, corpus.tokens)
    assert len(set(starts)) == 10 and all(s % 24 == 0 for s in starts)
    assert corpus.source == str(path)


def test_jsonl_file_source(tok, tmp_path):
    path = tmp_path / "b.jsonl"
    write_jsonl(path, JSONL_TEXTS)
    assert read_texts(path) == JSONL_TEXTS
    corpus = make_corpus(tok, str(path), n_seqs=5, seq_len=33, position0="bos", seed=1)
    stream = reference_stream(tok, JSONL_TEXTS)
    starts = window_starts(stream, corpus.tokens[:, 1:])
    assert len(set(starts)) == 5


def test_jsonl_with_other_field(tok, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"body": "some text here " * 5}) + "\n")
    with pytest.raises(KeyError, match="body"):
        read_texts(path)
    assert read_texts(path, text_field="body") == ["some text here " * 5]


def test_folder_source(tok, tmp_path):
    folder = tmp_path / "texts"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(TEXT_A)
    write_jsonl(folder / "sub" / "b.jsonl", JSONL_TEXTS)
    (folder / "notes.md").write_text("ignored")
    texts = read_texts(folder)
    assert texts == [TEXT_A, *JSONL_TEXTS]
    corpus = make_corpus(tok, str(folder), n_seqs=8, seq_len=32, position0="none", seed=0)
    starts = window_starts(reference_stream(tok, texts), corpus.tokens)
    assert len(set(starts)) == 8


def test_empty_folder_and_missing_path(tok, tmp_path):
    with pytest.raises(ValueError, match="no .txt"):
        make_corpus(tok, str(tmp_path), n_seqs=1, seq_len=8)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_corpus(tok, str(tmp_path / "nope.txt"), n_seqs=1, seq_len=8)


def test_too_many_windows_names_the_numbers(tok, tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("x" * 50)  # 50 byte tokens + EOS = 51: five windows of 10
    assert len(reference_stream(tok, [path.read_text()])) == 51
    assert make_corpus(tok, str(path), n_seqs=5, seq_len=10, position0="none").n_seqs == 5
    with pytest.raises(ValueError) as info:
        make_corpus(tok, str(path), n_seqs=6, seq_len=10, position0="none")
    numbers = set(re.findall(r"\d+", str(info.value)))
    assert {"51", "5", "10", "6"} <= numbers


def test_bad_sizes(tok):
    with pytest.raises(ValueError, match="n_seqs"):
        make_corpus(tok, "random", n_seqs=0, seq_len=8)
    with pytest.raises(ValueError, match="seq_len"):
        make_corpus(tok, "random", n_seqs=2, seq_len=1)


def test_subset_keeps_provenance(tok):
    corpus = make_corpus(tok, "docs", n_seqs=6, seq_len=16, position0="none", seed=9)
    part = corpus.subset([4, 1])
    assert torch.equal(part.tokens, corpus.tokens[[4, 1]])
    assert part.position0_token_ids == [corpus.position0_token_ids[4], corpus.position0_token_ids[1]]
    assert (part.source, part.seed, part.position0) == (corpus.source, corpus.seed, corpus.position0)


def test_excluding_makes_two_seeds_draws_disjoint():
    """Two seeds' draws of one source share windows often (windows lie on a fixed grid): 300 of the 911 byte windows of 511 tokens
    from each seed share about a third. ``excluding`` drops exactly those, keeps the order of the rest, and refuses
    when too few are left."""
    tok = byte_tokenizer()
    measured = make_corpus(tok, "docs", n_seqs=300, seq_len=512, seed=0)
    drawn = make_corpus(tok, "docs", n_seqs=600, seq_len=512, seed=1)
    rows = {tuple(r) for r in measured.tokens.tolist()}
    shared = [tuple(r) in rows for r in drawn.tokens.tolist()]
    assert sum(shared[:300]) > 0  # the collision the plain draw would have
    kept = drawn.excluding(measured, 300)
    assert kept.n_seqs == 300 and not any(tuple(r) in rows for r in kept.tokens.tolist())
    expected = [r for r, s in zip(drawn.tokens.tolist(), shared, strict=False) if not s][:300]
    assert kept.tokens.tolist() == expected
    last = [i for i, s in enumerate(shared) if not s][299]
    assert kept.meta["excluded_shared"] == sum(shared[:last])
    with pytest.raises(InputError, match="only .* are not in the other corpus"):
        drawn.excluding(measured, 600)
