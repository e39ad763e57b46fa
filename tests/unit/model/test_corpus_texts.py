"""make_corpus on texts given in Python (a list, tuple or pandas Series of strings), against the same texts in a file.

The file route (a .jsonl file: texts taken as they are, one per line) is the
reference: the same texts, seed and sizes must give the same token ids, the
same "too few tokens" refusal, and the provenance must name the texts, not a path.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import poslens
from poslens.errors import CorpusError, InputError, ParameterTypeError
from poslens.model.corpus import make_corpus, texts_sha256
from poslens.testing import byte_tokenizer

TEXTS = [
    "The lighthouse keeper wrote in his log every evening, noting the wind and the ships that passed.",
    "   ",  # blank: skipped by the file route too
    "Tides rose and fell; the lamp turned; nobody came.\nA second line, after a line break.",
    "",
    "In spring the gulls returned, loud and hungry, and the keeper counted them from the gallery.",
]


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def as_jsonl(folder: Path, texts: list[str]) -> Path:
    path = folder / "texts.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["list", "tuple", "series"])
@pytest.mark.parametrize("position0", ["bos", "none"])
def test_texts_give_the_tokens_of_the_same_texts_in_a_file(tok, tmp_path, kind, position0):
    source = {"list": list(TEXTS), "tuple": tuple(TEXTS), "series": pd.Series(TEXTS, index=list("abcde"))}[kind]
    settings = dict(n_seqs=6, seq_len=24, position0=position0, seed=4)
    given = make_corpus(tok, source, **settings)
    from_file = make_corpus(tok, as_jsonl(tmp_path, TEXTS), **settings)
    assert torch.equal(given.tokens, from_file.tokens)
    assert given.position0_token_ids == from_file.position0_token_ids
    assert given.meta["source_tokens"] == from_file.meta["source_tokens"]
    # the stream is the texts' bytes with EOS (id 2) after each non-blank text: the windows come from it
    stream = [i for t in TEXTS if t.strip() for i in tok(t, add_special_tokens=False).input_ids + [2]]
    assert given.meta["source_tokens"] == len(stream)
    body = given.tokens[:, 1:] if position0 == "bos" else given.tokens
    width = body.shape[1]
    windows = [stream[k * width : (k + 1) * width] for k in range(len(stream) // width)]
    assert all(row in windows for row in body.tolist())


def test_provenance_names_the_texts(tok):
    label = {"list": "list of 5 texts", "tuple": "tuple of 5 texts", "series": "pandas Series of 5 texts"}
    want = hashlib.sha256(json.dumps(TEXTS).encode()).hexdigest()
    for kind, source in (("list", TEXTS), ("tuple", tuple(TEXTS)), ("series", pd.Series(TEXTS))):
        corpus = make_corpus(tok, source, n_seqs=2, seq_len=16)
        described = corpus.describe()
        assert corpus.source == described["corpus_source"] == label[kind]
        assert described["texts_sha256"] == want
    assert make_corpus(tok, ["x" * 40], n_seqs=2, seq_len=16).source == "list of 1 text"
    # the hash follows the texts and their split, not only their bytes
    assert texts_sha256(["ab", "c"]) != texts_sha256(["a", "bc"])
    edited = TEXTS[:2] + [TEXTS[2] + "!"] + TEXTS[3:]
    assert make_corpus(tok, edited, n_seqs=2, seq_len=16).meta["texts_sha256"] != want
    # a file corpus records no texts hash (its files are hashed by the study)
    assert "texts_sha256" not in make_corpus(tok, "docs", n_seqs=2, seq_len=16).meta


def test_too_few_tokens_is_the_file_routes_error(tok, tmp_path):
    texts = ["short text one", "and two"]
    settings = dict(n_seqs=3, seq_len=12)
    with pytest.raises(InputError) as from_file:
        make_corpus(tok, as_jsonl(tmp_path, texts), **settings)
    with pytest.raises(InputError) as given:
        make_corpus(tok, texts, **settings)
    tail = str(from_file.value).split(" has ", 1)[1]
    assert str(given.value) == f"corpus (list of 2 texts) has {tail}"
    assert "has 23 tokens: 2 non-overlapping windows of 11, but 3 sequences were asked for" in str(given.value)


def test_blank_texts_only(tok):
    with pytest.raises(InputError, match=r"corpus \(list of 2 texts\) has 0 tokens"):
        make_corpus(tok, ["", "  \n"], n_seqs=1, seq_len=8)


@pytest.mark.parametrize("source, kind", [([], "list"), ((), "tuple"), (pd.Series([], dtype=object), "pandas Series")])
def test_no_texts(tok, source, kind):
    with pytest.raises(InputError) as info:
        make_corpus(tok, source, n_seqs=1, seq_len=8)
    assert str(info.value) == f"source is an empty {kind}; give at least one text (a str)"


@pytest.mark.parametrize(
    "item, shown",
    [(3, "an int (3)"), (None, "None"), (b"bytes", "a bytes (b'bytes')"), (float("nan"), "a float (nan)"), (["nested"], "a list (['nested'])")],
)
def test_an_item_that_is_not_a_str(tok, item, shown):
    with pytest.raises(ParameterTypeError) as info:
        make_corpus(tok, ["fine text", "another", item], n_seqs=1, seq_len=8)
    assert str(info.value) == f"source[2] is {shown}, not a str; every item of a list of texts must be a str (the text itself)"
    with pytest.raises(ParameterTypeError, match=r"^source\[0\] is .*tuple of texts"):
        make_corpus(tok, (item,), n_seqs=1, seq_len=8)


@pytest.mark.parametrize("missing", [np.nan, None, pd.NA])
def test_series_with_a_missing_value(tok, missing):
    series = pd.Series(["fine text", missing, "more"], index=[10, 20, 30], dtype="string" if missing is pd.NA else object)
    with pytest.raises(InputError) as info:
        make_corpus(tok, series, n_seqs=1, seq_len=8)
    message = str(info.value)
    assert "missing value" in message and "at index 20 (position 1, counting from 0)" in message
    assert "series.dropna()" in message


def test_series_with_a_non_str_and_a_dataframe(tok):
    with pytest.raises(ParameterTypeError, match=r"holds an int \(7\) at index 'b' \(position 1, counting from 0\), not a str"):
        make_corpus(tok, pd.Series(["fine", 7], index=["a", "b"]), n_seqs=1, seq_len=8)
    with pytest.raises(ParameterTypeError, match=r"source is a pandas DataFrame \(columns: \['text'\]\); give the column"):
        make_corpus(tok, pd.DataFrame({"text": ["a"]}), n_seqs=1, seq_len=8)


def test_unpaired_surrogate(tok):
    with pytest.raises(CorpusError, match=r"source\[1\] holds an unpaired surrogate"):
        make_corpus(tok, ["fine", "bad \ud800 text"], n_seqs=1, seq_len=8)


def test_other_types_still_refused(tok):
    for source in ({"a set"}, np.array(["a", "b"]), iter(["a"])):
        with pytest.raises(ParameterTypeError, match="or a list, tuple or pandas Series of texts"):
            make_corpus(tok, source, n_seqs=1, seq_len=8)


def test_a_texts_corpus_is_measured(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, TEXTS * 3, n_seqs=4, seq_len=16, seed=1)
    result = poslens.measure(model, corpus, groups=2, early=8, progress=False, probe=False)
    assert result.meta["corpus"]["corpus_source"] == "list of 15 texts"
    assert result.meta["corpus"]["texts_sha256"] == texts_sha256(TEXTS * 3)
    assert np.isfinite(result.value("c_res", "early"))
