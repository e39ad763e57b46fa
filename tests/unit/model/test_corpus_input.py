"""Corpus input is never silently wrong and never a raw traceback.

Every refusal is a :class:`~poslens.errors.CorpusError` (or another
:class:`~poslens.errors.PoslensError`) whose message names the file, the line
or row, and the fix; whatever is accepted is exactly the text of the file.
The functions are looked up on the module at call time, so each test fails on
its own (not at import) against corpus modules that lack what it checks.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import poslens.model.corpus as corpus
import poslens.model.corpus_texts as corpus_texts
from poslens.errors import CorpusError, InputError, ParameterTypeError, PoslensError
from poslens.testing import byte_tokenizer


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def refused(path: Path, *args, error: type[Exception] = CorpusError, **kwargs) -> str:
    """read_texts(path) raises ``error``; its message, which must name the file."""
    with pytest.raises(error) as info:
        corpus_texts.read_texts(path, *args, **kwargs)
    message = str(info.value)
    assert path.name in message, message
    return message


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------- JSONL values that are not strings


@pytest.mark.parametrize(
    "value, kind", [(None, "null"), (3, "a number"), (2.5, "a number"), (True, "a boolean"), (["a"], "an array"), ({"t": "a"}, "an object")]
)
def test_jsonl_text_that_is_not_a_string(tmp_path, value, kind):
    # Before: str(None) == "None", str(3) == "3" went into the corpus as text.
    path = write_lines(tmp_path / "values.jsonl", ['{"text": "fine"}', json.dumps({"text": value})])
    message = refused(path)
    assert f"values.jsonl:2: field 'text' is {kind}" in message
    assert "give each line a string in field 'text'" in message


def test_jsonl_line_that_is_not_an_object(tmp_path):
    # Before: TypeError: argument of type 'int' is not iterable.
    path = write_lines(tmp_path / "scalars.jsonl", ['{"text": "a"}', "", "7"])
    message = refused(path)
    assert "scalars.jsonl:3 is a JSON number (7), not an object" in message and "write one JSON object per line" in message
    path = write_lines(tmp_path / "lists.jsonl", ['["a", "b"]'])
    assert "lists.jsonl:1 is a JSON array" in refused(path)


def test_jsonl_line_that_is_not_json(tmp_path):
    # Before: a bare json.JSONDecodeError naming neither the file nor the line.
    path = write_lines(tmp_path / "broken.jsonl", ['{"text": "a"}', '{"text": "b"}', '{"text": "c"'])
    message = refused(path)
    assert "broken.jsonl:3 is not valid JSON" in message and "column" in message
    assert "write one JSON object per line" in message


def test_jsonl_nested_too_deeply(tmp_path):
    # json.loads raises RecursionError on deep nesting; that is a corpus error too.
    path = write_lines(tmp_path / "deep.jsonl", ["[" * 100_000])
    assert "deep.jsonl:1" in refused(path)


def test_jsonl_lone_surrogate_escape(tmp_path):
    # A "\ud800" escape decodes to a str that no tokenizer can encode as UTF-8.
    path = write_lines(tmp_path / "surrogate.jsonl", ['{"text": "ok"}', '{"text": "a\\ud800b"}'])
    message = refused(path)
    assert "surrogate.jsonl:2" in message and "surrogate" in message


def test_jsonl_missing_field_names_both_spellings(tmp_path):
    path = write_lines(tmp_path / "fields.jsonl", ['{"text": "a"}', '{"body": "b", "id": 1}'])
    message = refused(path, error=KeyError)  # still a KeyError, as before, and now a CorpusError
    with pytest.raises(CorpusError):
        corpus_texts.read_texts(path)
    assert "fields.jsonl:2 has no field 'text'" in message
    assert "--text-field" in message and "text_field=" in message
    assert "['body', 'id']" in message
    assert not message.startswith(("'", '"'))  # printed as it is, not as KeyError's repr


def test_jsonl_strings_taken_as_they_are_and_blank_lines_skipped(tmp_path):
    # U+2028 and \x0c inside a JSON string are not line ends (str.splitlines split them before);
    # an empty string is a text; blank lines are skipped; a BOM is no part of the first line.
    texts = ["a\u2028b", "", "form\x0cfeed", "  padded  ", "x" * 1000]
    body = "\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in texts[:2]) + "\n\n   \n"
    body += "\r\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in texts[2:]) + "\r\n"
    path = tmp_path / "strings.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    assert corpus_texts.read_texts(path) == texts


# ---------------------------------------------------------------- encodings


def test_jsonl_not_utf8(tmp_path):
    # Before: UnicodeDecodeError with no file name.
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "caf\xe9"}\n')
    message = refused(path)
    assert "latin.jsonl:2: byte 27 (0xe9; byte 13 of line 2, counting from 0) is not UTF-8" in message
    assert "iconv -f latin1 -t utf-8" in message


def test_text_not_utf8_names_line_and_offset(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes("line one\nline two\nna\u00efve\n".encode("cp1252"))
    message = refused(path)
    assert "notes.txt:3: byte 20 (0xef; byte 2 of line 3, counting from 0) is not UTF-8" in message
    assert "convert it to utf-8, for example with iconv -f latin1 -t utf-8" in message.lower()


def test_offset_counts_a_bom(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfab\ncd\xff")
    assert "bom.txt:2: byte 8 (0xff; byte 2 of line 2, counting from 0)" in refused(path)


def test_text_utf16_is_named(tmp_path):
    path = tmp_path / "wide.txt"
    path.write_bytes("hello".encode("utf-16"))
    message = refused(path)
    assert "wide.txt:1: byte 0" in message and "iconv -f utf-16 -t utf-8" in message


def test_text_file_read_as_before(tmp_path):
    # Universal newlines, as Path.read_text gave; a UTF-8 BOM is dropped.
    path = tmp_path / "plain.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\rthree\n")
    assert corpus_texts.read_texts(path) == ["one\ntwo\nthree\n"]


def test_folder_error_names_the_file_inside(tmp_path):
    (tmp_path / "a.txt").write_text("fine")
    (tmp_path / "sub").mkdir()
    write_lines(tmp_path / "sub" / "b.jsonl", ['{"text": "x"}', "null"])
    message = refused(tmp_path / "sub" / "b.jsonl")
    with pytest.raises(CorpusError) as info:
        corpus_texts.read_texts(tmp_path)
    assert str(info.value) == message and "b.jsonl:2" in message


# ---------------------------------------------------------------- Parquet and saved datasets


def test_parquet_values_that_are_not_strings(tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "numbers.parquet"
    pd.DataFrame({"text": [1, 2, 3]}).to_parquet(path)
    message = refused(path)  # before: ['1', '2', '3']
    assert re.search(r"numbers\.parquet: row 1 of 3 \(counting from 1\) of column 'text' is an? \w+ \(1\), not a string", message)
    path = tmp_path / "gaps.parquet"
    pd.DataFrame({"text": ["a", None, "c"]}).to_parquet(path)
    message = refused(path)  # before: 'None' as a text
    assert "gaps.parquet: row 2 of 3" in message and "is null" in message
    path = tmp_path / "good.parquet"
    pd.DataFrame({"text": ["a", "", "c"], "n": [1, 2, 3]}).to_parquet(path)
    assert corpus_texts.read_texts(path) == ["a", "", "c"]
    message = refused(path, error=KeyError, text_field="body")
    assert "--text-field" in message and "text_field=" in message and "['text', 'n']" in message


def test_parquet_that_is_not_parquet(tmp_path):
    pytest.importorskip("pandas")
    path = tmp_path / "fake.parquet"
    path.write_bytes(b"not parquet at all")
    refused(path)


def test_saved_dataset_values_and_files(tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": ["a", "b"], "score": [1, 2]}).save_to_disk(str(folder))
    assert corpus_texts.read_texts(folder) == ["a", "b"]
    with pytest.raises(CorpusError) as info:
        corpus_texts.read_texts(folder, text_field="score")  # before: ['1', '2']
    assert "saved" in str(info.value) and "row 1 of 2" in str(info.value)
    files = corpus_texts.source_files(folder)
    assert files == sorted(p for p in folder.rglob("*") if p.is_file()) and len(files) >= 3
    assert any(p.suffix == ".arrow" for p in files)


# ---------------------------------------------------------------- source_files


def test_source_files_lists_what_read_texts_reads(tmp_path, monkeypatch):
    assert [corpus_texts.source_files(name) for name in ("docs", "random", "repeat")] == [[], [], []]
    (tmp_path / "z.txt").write_text("last")
    (tmp_path / "a").mkdir()
    write_lines(tmp_path / "a" / "m.jsonl", ['{"text": "middle"}'])
    (tmp_path / "b.txt").write_text("first")
    (tmp_path / "notes.md").write_text("ignored")
    (tmp_path / "dir.txt").mkdir()  # a folder with a corpus suffix is no file
    files = corpus_texts.source_files(tmp_path)
    assert files == [tmp_path / "a" / "m.jsonl", tmp_path / "b.txt", tmp_path / "z.txt"]
    assert corpus_texts.source_files(tmp_path / "b.txt") == [tmp_path / "b.txt"]
    assert corpus_texts.read_texts(tmp_path) == ["middle", "first", "last"]
    # read_texts reads exactly the listing (one function lists the folder).
    monkeypatch.setattr(corpus_texts, "source_files", lambda source, text_field="text": [tmp_path / "z.txt"])
    assert corpus_texts.read_texts(tmp_path) == ["last"]


def test_missing_path_and_empty_folder(tmp_path, tok):
    with pytest.raises(corpus_texts.CorpusNotFoundError) as info:
        corpus_texts.read_texts(tmp_path / "nope.txt")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, PoslensError)
    assert "nope.txt" in str(info.value) and "does not exist" in str(info.value)
    with pytest.raises(corpus_texts.CorpusNotFoundError):
        corpus_texts.source_files(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        corpus.make_corpus(tok, str(tmp_path / "nope.txt"), n_seqs=1, seq_len=8)
    with pytest.raises(CorpusError, match="no .txt"):
        corpus.make_corpus(tok, str(tmp_path), n_seqs=1, seq_len=8)


# ---------------------------------------------------------------- make_corpus arguments


@pytest.mark.parametrize(
    "name, value, shown",
    [
        ("n_seqs", "2", "n_seqs must be an int, got str '2'; pass n_seqs=2"),
        ("n_seqs", 2.0, "n_seqs must be an int, got float 2.0; pass n_seqs=2"),
        ("n_seqs", True, "n_seqs must be an int, got bool True"),
        ("seq_len", 8.5, "seq_len must be an int, got float 8.5; pass a whole number"),
        ("seq_len", "8", "seq_len must be an int, got str '8'"),
        ("seed", 1.0, "seed must be an int, got float 1.0; pass seed=1"),
        ("seed", False, "seed must be an int, got bool False"),
        ("seed", "0", "seed must be an int, got str '0'"),
    ],
)
def test_make_corpus_integers(tok, name, value, shown):
    kwargs = dict(n_seqs=2, seq_len=8, seed=0) | {name: value}
    with pytest.raises(ParameterTypeError) as info:
        corpus.make_corpus(tok, "random", **kwargs)
    assert str(info.value).startswith(shown), str(info.value)


def test_make_corpus_accepts_numpy_ints(tok):
    np = pytest.importorskip("numpy")
    made = corpus.make_corpus(tok, "random", n_seqs=np.int64(2), seq_len=np.int32(8), seed=np.int64(3))
    assert made.tokens.shape == (2, 8) and type(made.seed) is int


@pytest.mark.parametrize("source", [torch.zeros(2, 8, dtype=torch.long), {"a.txt"}, 3, None])  # a list of texts is a source
def test_make_corpus_source_type(tok, source):
    with pytest.raises(ParameterTypeError) as info:
        corpus.make_corpus(tok, source, n_seqs=2, seq_len=8)
    message = str(info.value)
    assert message.startswith("source must be a str or os.PathLike: one of ('docs', 'random', 'repeat') or the path")
    assert f"got {type(source).__name__}" in message and "Corpus(" in message


def test_make_corpus_path_source(tok, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("x" * 100)
    assert corpus.make_corpus(tok, path, n_seqs=2, seq_len=10, position0="none").source == str(path)


def test_make_corpus_ranges_are_input_errors(tok):
    for kwargs in (dict(n_seqs=0, seq_len=8), dict(n_seqs=2, seq_len=1)):
        with pytest.raises(InputError, match=re.escape("need n_seqs ≥ 1 and seq_len ≥ 2")):
            corpus.make_corpus(tok, "random", **kwargs)
    with pytest.raises(InputError, match=re.escape("position0 (--bos) must be")):
        corpus.make_corpus(tok, "random", n_seqs=2, seq_len=8, position0="first")
    with pytest.raises(InputError, match="sequences were asked for"):
        corpus.make_corpus(tok, "docs", n_seqs=100_000, seq_len=64)


def test_read_texts_docstring_shows_an_error():
    doc = corpus_texts.read_texts.__doc__
    assert "Traceback (most recent call last):" in doc and "poslens.errors.CorpusError:" in doc
    for function in (corpus_texts.read_texts, corpus_texts.source_files, corpus.make_corpus):
        assert "Args:" in function.__doc__ and "Returns:" in function.__doc__ and ">>>" in function.__doc__


# ---------------------------------------------------------------- property: accepted exactly, or refused by name

ENCODINGS = ("utf-8", "latin-1", "utf-16", "cp1252")
HUGE = "y" * 1_000_000
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["text", "id", "body"]), inner, max_size=3),
    max_leaves=6,
)
good_lines = st.one_of(
    st.text(max_size=30).map(lambda t: json.dumps({"text": t})),  # ASCII escapes
    st.text(max_size=30).map(lambda t: json.dumps({"text": t, "id": 1}, ensure_ascii=False)),
    st.sampled_from(["", "   "]),
)
jsonl_lines = st.one_of(
    json_values.map(json.dumps),  # any JSON value
    good_lines,
    st.dictionaries(st.sampled_from(["id", "body"]), json_values, max_size=2).map(json.dumps),  # no field
    st.text(max_size=20),  # mostly not JSON
    st.sampled_from(["", "   ", "\t", '{"text": ', "{'text': 'a'}", "NaN", '{"text": "\\ud834"}']),
    st.just(json.dumps({"text": HUGE})),
    st.just("z" * 1_000_000),
)


def expected_jsonl(data: bytes) -> list[str] | None:
    """The texts a JSONL file holds, or None where it must be refused (an independent reading of the rules)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    texts = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            return None
        try:
            record["text"].encode("utf-8")
        except UnicodeEncodeError:
            return None
        texts.append(record["text"])
    return texts


def expected_txt(data: bytes) -> list[str] | None:
    if b"\x00" in data:  # no text holds NUL: UTF-16 without a byte-order mark, refused
        return None
    try:
        return [data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")]
    except UnicodeDecodeError:
        return None


def check_read(path: Path, expected: list[str] | None) -> None:
    try:
        texts = corpus_texts.read_texts(path)
    except CorpusError as error:
        assert path.name in str(error), str(error)
        assert expected is None, f"refused a good file: {error}"
        event("refused")
        return
    event("read")
    assert isinstance(texts, list) and all(isinstance(t, str) for t in texts)
    assert texts == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(lines=st.lists(jsonl_lines, max_size=6) | st.lists(good_lines, max_size=6), encoding=st.sampled_from(ENCODINGS), crlf=st.booleans())
def test_property_jsonl(lines, encoding, crlf):
    body = ("\r\n" if crlf else "\n").join(lines)
    data = body.encode(encoding, errors="replace")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "prop-corpus.jsonl"
        path.write_bytes(data)
        check_read(path, expected_jsonl(data))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=st.text(max_size=60), encoding=st.sampled_from(ENCODINGS), huge=st.booleans())
def test_property_txt(text, encoding, huge):
    data = (text + ("\n" + HUGE if huge else "")).encode(encoding, errors="replace")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "prop-corpus.txt"
        path.write_bytes(data)
        check_read(path, expected_txt(data))
