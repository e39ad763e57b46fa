"""Nothing stale, nothing lost (issue 49): the failures of the third reliability tour, each with the behaviour that replaced it.

Everything is real: tiny Llama folders saved to disk (``poslens.testing.save_tiny_model``)
and the ``poslens`` command through typer's CliRunner. poslens's own modules are
imported inside the tests that need new names, so that each test fails on its
own assertion when run against the code from before the change.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from poslens.measurement.result import Result
from poslens.study.cli import app

runner = CliRunner()


def small(model_dir: Path, *extra: str) -> list[str]:
    return ["--model", str(model_dir), "--corpus", "random", "--n-seqs", "4", "--seq-len", "32", "--groups", "2", "--early", "8", *extra]


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def error_text(result) -> str:
    return f"{result.exception}\n{result.output}"


def flat(text: str) -> str:
    """The text with the Error box's borders and line breaks taken out."""
    return " ".join(text.replace("│", " ").split())


# ---------------------------------------------------------------- 1. every weights file is hashed


def _sharded(folder: Path, shard: str) -> Path:
    """Move a tiny model's weights to ``shard`` (a subfolder or a hidden name) and name it in an index."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        keys = list(handle.keys())
    (folder / shard).parent.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").rename(folder / shard)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {key: shard for key in keys}}))
    return folder


@pytest.mark.parametrize("shard", ["sub/w.safetensors", ".w.safetensors"])
def test_a_shard_in_a_subfolder_or_hidden_is_hashed_and_never_reused_stale(tmp_path, shard):
    from poslens.testing import save_tiny_model

    model = _sharded(save_tiny_model(tmp_path / "model", "llama", seed=0), shard)
    other = save_tiny_model(tmp_path / "other", "llama", seed=1)
    out = tmp_path / "out"
    first = invoke("leakage", *small(model), "--out", out)
    assert first.exit_code == 0, error_text(first)
    assert str(model / shard) in Result.load(out / "leakage.parquet").meta["inputs"]
    shutil.copyfile(other / "model.safetensors", model / shard)  # another model's weights over the shard
    again = invoke("leakage", *small(model), "--out", out)
    assert again.exit_code != 0, again.output
    assert f"{shard} changed since leakage.parquet was made" in error_text(again)
    assert "wrote nothing" not in again.output


# ---------------------------------------------------------------- 2. poslens zoo writes only its own files

ZOO = ["--task", "bigram-backcopy", "--steps", "2", "--seq-len", "16", "--width", "16", "--depth", "1", "--heads", "2",
       "--batch-size", "2", "--eval-every", "2", "--eval-seqs", "2", "--device", "cpu", "--seeds", "0", "--members", "standard"]  # fmt: skip


@pytest.mark.parametrize("name", ["summary.csv", "log.csv", "held_out.jsonl", "summary.md"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_zoo_never_replaces_a_users_file_in_out(tmp_path, name, overwrite):
    out = tmp_path / "zf"
    out.mkdir()
    (out / name).write_text("mine")
    result = invoke("zoo", *ZOO, *(["--overwrite"] if overwrite else []), "--out", out)
    assert result.exit_code != 0, result.output
    assert name in error_text(result) and "did not write" in error_text(result)
    assert (out / name).read_text() == "mine"


@pytest.mark.integration  # two trainings, about 40 s on 2 shared cores
def test_zoo_overwrite_keeps_a_users_file_in_a_run_folder_and_replaces_its_own(tmp_path):
    out = tmp_path / "zf"
    assert invoke("zoo", *ZOO, "--out", out).exit_code == 0
    (out / "standard-s0" / "notes.txt").write_text("mine")
    again = invoke("zoo", *[*ZOO[:3], "3", *ZOO[4:]], "--overwrite", "--out", out)  # other settings: trained again
    assert again.exit_code == 0, error_text(again)
    assert (out / "standard-s0" / "notes.txt").read_text() == "mine"
    assert json.loads((out / "standard-s0" / "run.json").read_text())["steps"] == 3
    from poslens.ownership import is_ours

    assert all(is_ours(out / name) for name in ("summary.csv", "log.csv", "held_out.jsonl", "summary.md", "zoo.json"))
    assert is_ours(out / "standard-s0" / "model.safetensors")


# ---------------------------------------------------------------- 3. --overwrite replaces the old part only once the new one is written


def test_a_failed_overwrite_keeps_the_complete_old_part(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    assert invoke("leakage", *small(tiny_llama_dir), "--out", out).exit_code == 0
    before = {name: (out / name).read_bytes() for name in ("leakage.parquet", "leakage.csv", "leakage.sums.npz")}
    text = tmp_path / "c.txt"
    text.write_text("too short")
    options = small(tiny_llama_dir)
    options[options.index("random")] = str(text)  # other inputs: measured again, and the corpus is too small
    failed = invoke("leakage", *options, "--overwrite", "--out", out)
    assert failed.exit_code != 0, failed.output
    assert {name: (out / name).read_bytes() for name in before} == before
    assert len(Result.load(out / "leakage.parquet").table) > 0
    rerun = invoke("leakage", *small(tiny_llama_dir), "--out", out)  # the old part is still poslens's, reused
    assert rerun.exit_code == 0 and "reusing" in rerun.output


def test_overwrite_replaces_an_edited_part_of_poslens_once_the_new_one_is_written(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    assert invoke("leakage", *small(tiny_llama_dir, "--seed", "0"), "--out", out).exit_code == 0
    (out / "leakage.csv").write_text("edited")
    replaced = invoke("leakage", *small(tiny_llama_dir, "--seed", "1"), "--overwrite", "--out", out)
    assert replaced.exit_code == 0, error_text(replaced)
    assert (out / "leakage.csv").read_text() != "edited"
    assert Result.load(out / "leakage.parquet").meta["settings"]["seed"] == 1


# ---------------------------------------------------------------- 4. --out apart from the model and the corpus


@pytest.mark.parametrize("where", ["model", "inside model", "holding model", "corpus", "inside corpus"])
def test_out_at_or_around_an_input_folder_is_refused_before_anything_is_written(tiny_llama_dir, tmp_path, where):
    model = Path(shutil.copytree(tiny_llama_dir, tmp_path / "inputs" / "llama"))
    corpus = tmp_path / "inputs" / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The quick brown fox jumps over the lazy dog. " * 40)
    out = {"model": model, "inside model": model / "res", "holding model": tmp_path / "inputs", "corpus": corpus, "inside corpus": corpus / "r"}[
        where
    ]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    options = small(model)
    options[options.index("random")] = str(corpus)
    result = invoke("leakage", *options, "--out", out)
    assert result.exit_code == 2, result.output
    assert "--out" in result.output and "folder" in result.output
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


# ---------------------------------------------------------------- 5. inputs that hung or gave raw errors


def _command(tiny_llama_dir: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "poslens.study.cli", "leakage", *small(tiny_llama_dir), *extra, "--out", str(out)]


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "1000"}


def _corpus_option(command: list[str], corpus: str) -> list[str]:
    command = list(command)
    command[command.index("random")] = corpus
    return command


@pytest.mark.parametrize("how", ["named pipe", "process substitution", "piped stdin"])
def test_a_corpus_that_is_a_pipe_is_refused_in_one_line_never_waited_on(tiny_llama_dir, tmp_path, how):
    text = tmp_path / "c.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    out = tmp_path / "out"
    if how == "named pipe":
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        done = subprocess.run(_corpus_option(_command(tiny_llama_dir, out), str(fifo)), capture_output=True, text=True, env=_env(), timeout=120)
    elif how == "process substitution":
        line = shlex.join(_corpus_option(_command(tiny_llama_dir, out), "CORPUS")).replace("CORPUS", f"<(cat {shlex.quote(str(text))})")
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=_env(), timeout=120)
    else:
        command = _corpus_option(_command(tiny_llama_dir, out), "/dev/stdin")
        done = subprocess.run(command, input=text.read_text(), capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("error: corpus ") and "not a regular file" in last and "save it to a file first" in last


def test_an_offset_too_large_for_any_sequence_is_refused_when_parsed(tiny_llama_dir, tmp_path):
    result = invoke("path-tests", *small(tiny_llama_dir), "--offsets", "99999999999999999999", "--out", tmp_path / "out")
    assert result.exit_code == 2, error_text(result)
    assert "--offsets" in result.output and "is larger than any sequence poslens measures" in flat(result.output)
    assert not isinstance(result.exception, OverflowError)


def test_a_random_corpus_larger_than_memory_is_refused_naming_the_options(tiny_llama_dir, tmp_path):
    options = small(tiny_llama_dir)
    options[options.index("--n-seqs") + 1] = "1000000000"
    result = invoke("leakage", *options, "--out", tmp_path / "out")
    assert result.exit_code != 0
    from poslens.errors import PoslensError

    assert isinstance(result.exception, PoslensError), repr(result.exception)
    assert "--n-seqs" in str(result.exception) and "memory" in str(result.exception)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 6. silent nonsense: warned and recorded


def test_an_offset_beyond_the_sequence_is_warned_and_recorded(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    done = invoke("path-tests", *small(tiny_llama_dir), "--offsets", "8,40", "--out", out)
    assert done.exit_code == 0, error_text(done)
    assert "warning: --offsets 40 is not below --seq-len 32" in flat(done.output)
    assert "an offset these sequences never show the model" in flat(done.output)  # the freeze still edits: D is from key 0
    assert any("--offsets 40" in note for note in Result.load(out / "path-tests.parquet").meta["warnings"])
    again = invoke("path-tests", *small(tiny_llama_dir), "--offsets", "8,40", "--out", out)  # reused: said again
    assert "reusing" in again.output and "--offsets 40 is not below" in flat(again.output)


def test_a_non_finite_loss_never_passes_in_silence(tmp_path):
    from safetensors.torch import load_file, save_file

    from poslens.testing import save_tiny_model

    model = save_tiny_model(tmp_path / "model", "llama")
    weights = load_file(model / "model.safetensors")
    weights["lm_head.weight"][5] = float("nan")  # the logits, so the loss, are NaN; the attention is untouched
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    done = invoke("relativize", *small(model), "--out", out)
    assert done.exit_code != 0 or "warning:" in done.output, done.output
    text = flat(done.output)
    assert "not finite (NaN or ±inf): loss_change (value)" in text
    assert any("not finite" in note for note in Result.load(out / "relativize.parquet").meta["warnings"])


# ---------------------------------------------------------------- 7. old files, and what a failure leaves


def test_an_old_layout_attribution_table_is_named_as_an_older_poslenss(tmp_path):
    import pandas as pd

    path = tmp_path / "attribution.parquet"
    pd.DataFrame({"layer": [0], "mode": ["all"], "value": [0.1]}).to_parquet(path)  # as the old Attribution.save wrote it
    (tmp_path / "attribution.json").write_text("{}")
    with pytest.raises(ValueError) as raised:
        Result.load(path)
    from poslens.errors import PoslensError

    assert isinstance(raised.value, PoslensError)
    message = str(raised.value)
    assert "old layout" in message and "table format 1" in message and "read_old_layout" in message
    assert "was not written by poslens" not in message


@pytest.mark.parametrize("stamp", [b"0", b"1", b"-5"])
def test_a_relativize_table_with_an_impossible_format_is_refused(tiny_llama_dir, tmp_path, stamp):
    import pyarrow.parquet as pq

    from poslens.measurement.result_files import TABLE_FORMAT_KEY

    out = tmp_path / "out"
    assert invoke("relativize", *small(tiny_llama_dir), "--out", out).exit_code == 0
    path = out / "relativize.parquet"
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, TABLE_FORMAT_KEY: stamp}), path)
    with pytest.raises(ValueError, match=f"table format {stamp.decode()}"):
        Result.load(path)


def test_a_command_that_fails_writing_leaves_no_folder_it_created(tiny_llama_dir, tmp_path):
    out = tmp_path / "new" / "out"
    limit = "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); "
    limit += "sys.argv = ['poslens', *sys.argv[1:]]; runpy.run_module('poslens.study.cli', run_name='__main__')"
    command = [sys.executable, "-c", limit, "leakage", *small(tiny_llama_dir), "--row-sums", "second-pass", "--out", str(out)]  # no TMPDIR store
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "error:" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "new").exists(), sorted(p.name for p in out.iterdir()) if out.exists() else None


def test_a_self_looping_out_symlink_is_named_as_a_loop(tmp_path):
    loopy = tmp_path / "loopy"
    loopy.symlink_to(loopy)
    result = invoke("leakage", "--model", "x", "--out", loopy)
    assert result.exit_code == 2
    text = flat(result.output)
    assert "leads back to itself" in text and "which does not exist" not in text


# ---------------------------------------------------------------- 8. what the forward reads, as the provenance records it


def _measure(model):
    import poslens

    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=3)
    return poslens.measure(model, corpus, groups=2, early=4, batch_size=2, progress=False)


def test_an_inv_freq_edited_in_memory_changes_the_recorded_state_and_is_named(tiny_llama_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import poslens

    hf = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    model = poslens.load_model(hf, tokenizer=AutoTokenizer.from_pretrained(tiny_llama_dir))
    before = _measure(model).meta["model"]
    assert "rope_in_memory" not in before
    with torch.no_grad():
        hf.model.rotary_emb.inv_freq.mul_(0.25)
    after = _measure(model).meta["model"]
    assert after["source_sha256"] != before["source_sha256"] and after["state_sha256"] != before["state_sha256"]
    assert "inv_freq in memory differ" in " ".join(after["rope_in_memory"])


def test_a_config_theta_changed_after_the_build_is_named_beside_the_recorded_base(tiny_llama_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import poslens

    hf = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    hf.config.rope_parameters["rope_theta"] = 500000.0  # the buffers keep the frequencies of 10000
    meta = _measure(poslens.load_model(hf, tokenizer=AutoTokenizer.from_pretrained(tiny_llama_dir))).meta["model"]
    notes = " ".join(meta["rope_in_memory"])
    assert "rope_theta 500000" in notes and "about 10000" in notes


def test_a_weights_file_replaced_after_loading_does_not_leave_the_measured_state_unrecorded(tmp_path):
    import poslens
    from poslens.testing import save_tiny_model

    folder = save_tiny_model(tmp_path / "model", "llama", seed=0)
    other = save_tiny_model(tmp_path / "other", "llama", seed=1)
    model = poslens.load_model(folder, device="cpu")
    staged = folder / ".staged.safetensors"
    shutil.copyfile(other / "model.safetensors", staged)
    os.replace(staged, folder / "model.safetensors")  # replaced on disk after the load
    measured = _measure(model).meta["model"]
    assert measured["state_sha256"] is not None and len(measured["state_sha256"]) == 64
    fresh = _measure(poslens.load_model(other, device="cpu")).meta["model"]
    assert measured["state_sha256"] != fresh["state_sha256"]  # the weights measured were the ones loaded, not the file's now
    assert "not code" in measured["state_sha256_covers"]
