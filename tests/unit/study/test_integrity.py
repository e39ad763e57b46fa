"""Numbers that belong to their inputs, and nothing of the user's overwritten (docs/reliability.md, "Integrity").

Each test reproduces one failure found by a hostile tour of poslens 0.1 (a
copied-in Parquet file used with another run's sums, a corpus or model folder
edited in place and reused, two runs into one folder, a user's file replaced,
bad ranges accepted, misleading hints) and checks the behaviour that replaced
it. Everything is real: tiny Llama folders saved to disk, the ``poslens``
command through typer's CliRunner or as a subprocess, real file locks held by
another process, a real file-size limit (``RLIMIT_FSIZE``). poslens's own
modules are imported inside the tests that need new names, so that each test
fails on its own assertion when run against the code from before the change.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import poslens
from poslens.measurement.result import Result
from poslens.study.cli import app

runner = CliRunner()


def small(model_dir: Path, *extra: str) -> list[str]:
    return ["--model", str(model_dir), "--corpus", "random", "--n-seqs", "4", "--seq-len", "32", "--groups", "2", "--early", "8", *extra]


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def error_text(result) -> str:
    return f"{result.exception}\n{result.output}"


@pytest.fixture
def model_copy(tiny_llama_dir, tmp_path) -> Path:
    """A private copy of the tiny Llama folder, free to edit."""
    import shutil

    return Path(shutil.copytree(tiny_llama_dir, tmp_path / "llama"))


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir)


# ---------------------------------------------------------------- 1. sums that belong to their table


def test_a_copied_in_table_is_never_paired_with_another_runs_sums(tiny_llama_dir, tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    assert invoke("leakage", *small(tiny_llama_dir, "--seed", "0"), "--out", a).exit_code == 0
    assert invoke("bos-swap", *small(tiny_llama_dir, "--seed", "1"), "--replacement", "zero", "--out", b).exit_code == 0
    (a / "leakage.parquet").write_bytes((b / "leakage.parquet").read_bytes())  # cp B/leakage.parquet A/
    result = invoke("bos-swap", *small(tiny_llama_dir, "--seed", "1"), "--replacement", "zero", "--out", a)
    assert result.exit_code != 0, result.output
    text = error_text(result)
    assert "leakage.sums.npz" in text and "leakage.parquet" in text and "does not belong" in text
    assert "reusing" not in result.output
    with pytest.raises(ValueError, match="does not belong"):
        Result.load(a / "leakage.parquet")
    # the table alone still loads, on request
    assert len(Result.load(a / "leakage.parquet", sums=False).table) > 0


def test_a_missing_sums_file_is_refused_before_anything_is_measured(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    assert invoke("leakage", *small(tiny_llama_dir), "--out", out).exit_code == 0
    (out / "leakage.sums.npz").unlink()
    result = invoke("bos-swap", *small(tiny_llama_dir), "--replacement", "zero", "--out", out)
    assert result.exit_code != 0
    text = error_text(result)
    assert "leakage.sums.npz" in text and "missing" in text and "--overwrite" in text
    assert "[bos-swap]" not in result.output  # found at the start, before the swap runs
    # --overwrite measures the leakage part again and goes on
    again = invoke("bos-swap", *small(tiny_llama_dir), "--replacement", "zero", "--overwrite", "--out", out)
    assert again.exit_code == 0, error_text(again)
    assert (out / "leakage.sums.npz").exists() and (out / "bos-swap.parquet").exists()


# ---------------------------------------------------------------- 2. inputs changed in place


def test_a_corpus_file_edited_in_place_is_not_reused(tiny_llama_dir, tmp_path):
    text = tmp_path / "c.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    options = small(tiny_llama_dir)
    options[options.index("random")] = str(text)
    out = tmp_path / "out"
    assert invoke("leakage", *options, "--out", out).exit_code == 0
    before = (out / "leakage.parquet").read_bytes()
    text.write_text("Pack my box with five dozen liquor jugs. " * 40)
    result = invoke("leakage", *options, "--out", out)
    assert result.exit_code != 0
    message = error_text(result)
    assert "c.txt changed since leakage.parquet was made" in message and "--overwrite" in message
    assert "reusing" not in result.output and (out / "leakage.parquet").read_bytes() == before
    replaced = invoke("leakage", *options, "--overwrite", "--out", out)
    assert replaced.exit_code == 0, error_text(replaced)
    assert (out / "leakage.parquet").read_bytes() != before
    meta = Result.load(out / "leakage.parquet").meta
    assert meta["inputs"][str(text)] == hashlib.sha256(text.read_bytes()).hexdigest()


def test_a_model_folder_edited_in_place_is_not_reused(model_copy, tmp_path):
    out = tmp_path / "out"
    assert invoke("leakage", *small(model_copy), "--out", out).exit_code == 0
    from safetensors.torch import load_file, save_file

    weights = load_file(model_copy / "model.safetensors")
    name = next(k for k in weights if k.endswith("q_proj.weight"))
    weights[name] = weights[name] * 2  # an in-place edit of the weights
    save_file(weights, model_copy / "model.safetensors", metadata={"format": "pt"})
    result = invoke("leakage", *small(model_copy), "--out", out)
    assert result.exit_code != 0
    assert "model.safetensors changed since leakage.parquet was made" in error_text(result)


def test_a_rerun_with_the_same_inputs_writes_nothing_and_says_so(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    first = invoke("leakage", *small(tiny_llama_dir), "--out", out)
    assert first.exit_code == 0
    for name in ("leakage.parquet", "leakage.csv", "leakage.sums.npz"):
        assert str(out / name) in " ".join(first.output.split()), name  # every file written is named
    stamp = (out / "leakage.parquet").stat().st_mtime_ns
    second = invoke("leakage", *small(tiny_llama_dir), "--out", out)
    assert second.exit_code == 0
    assert "reusing" in second.output and "wrote nothing" in second.output
    assert f"wrote {out}" not in second.output
    assert (out / "leakage.parquet").stat().st_mtime_ns == stamp


def test_provenance_records_the_hashes_of_inputs_and_measured_tokens(tiny, tiny_llama_dir, tmp_path):
    corpus = poslens.make_corpus(tiny, "random", n_seqs=4, seq_len=16, seed=5)
    result = poslens.measure(tiny, corpus, groups=2, early=8, progress=False)
    expected = hashlib.sha256(corpus.tokens.numpy().astype("<i8").tobytes()).hexdigest()
    assert result.meta["corpus"]["tokens_sha256"] == expected
    out = tmp_path / "out"
    assert invoke("leakage", *small(tiny_llama_dir), "--out", out).exit_code == 0
    inputs = Result.load(out / "leakage.parquet").meta["inputs"]
    weights = Path(tiny_llama_dir) / "model.safetensors"
    assert inputs[str(weights)] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert any(path.endswith("config.json") for path in inputs) and any("tokenizer" in path for path in inputs)


# ---------------------------------------------------------------- 3. nothing of the user's is overwritten


def one_row_result() -> Result:
    return Result(
        pd.DataFrame(
            [
                dict(
                    model="m",
                    variant="base",
                    intervention="none",
                    layer=0,
                    head=-1,
                    query_window="all",
                    metric="c_res",
                    value=0.1,
                    ci_low=0.0,
                    ci_high=0.2,
                )
            ]
        ),
        {"seed": 0},
    )


def test_save_onto_a_folder_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "results").mkdir()
    users = tmp_path / "results.csv"
    users.write_text("my own numbers\n")
    with pytest.raises(FileExistsError, match="is a folder"):
        one_row_result().save(tmp_path / "results")
    assert users.read_text() == "my own numbers\n"


def test_save_to_a_csv_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="ending in .parquet"):
        one_row_result().save(tmp_path / "x.csv")
    assert not (tmp_path / "x.csv").exists()


def test_save_never_replaces_a_twin_poslens_did_not_write(tmp_path):
    users = tmp_path / "leakage.csv"
    users.write_text("my own numbers\n")
    with pytest.raises(FileExistsError, match="poslens did not write it"):
        one_row_result().save(tmp_path / "leakage.parquet")
    assert users.read_text() == "my own numbers\n" and not (tmp_path / "leakage.parquet").exists()
    # its own files, it may replace (a notebook saving twice)
    users.unlink()
    one_row_result().save(tmp_path / "leakage.parquet")
    one_row_result().save(tmp_path / "leakage.parquet")
    assert Result.load(tmp_path / "leakage.parquet").value("c_res", layer=0) == 0.1


@pytest.mark.parametrize("name", ["leakage.parquet", "leakage.csv"])
def test_out_never_replaces_a_file_poslens_did_not_write(tiny_llama_dir, tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / name
    foreign.write_text("the user's file\n")
    result = invoke("leakage", *small(tiny_llama_dir), "--out", out)
    assert result.exit_code != 0
    assert str(foreign) in " ".join(error_text(result).split()) and "did not write" in error_text(result)
    assert foreign.read_text() == "the user's file\n"
    # --overwrite replaces poslens's parts, never a file it did not write
    result = invoke("leakage", *small(tiny_llama_dir), "--overwrite", "--out", out)
    assert result.exit_code != 0 and foreign.read_text() == "the user's file\n"


# ---------------------------------------------------------------- 4. one writer per output folder

HOLD = """
import sys, time
from poslens.study.output_lock import OutputLock
lock = OutputLock(sys.argv[1]); lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
def test_a_second_run_into_a_locked_folder_is_refused_at_once_naming_the_holder(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.perf_counter()
        result = invoke("leakage", *small(tiny_llama_dir), "--out", out)
        assert time.perf_counter() - start < 20
        assert result.exit_code != 0
        text = error_text(result)
        assert "being written by another poslens run" in text and f"pid {holder.pid}" in text
        assert not (out / "leakage.parquet").exists()
    finally:
        holder.kill()
        holder.wait()
    # the killed holder's lock is gone with its process
    assert invoke("leakage", *small(tiny_llama_dir), "--out", out).exit_code == 0


# ---------------------------------------------------------------- 7. ranges


@pytest.mark.parametrize("tau", ["-1", "nan", "0", "1.5"])
def test_tau_outside_zero_one_is_refused(tiny_llama_dir, tmp_path, tau):
    result = invoke("sinks", *small(tiny_llama_dir), "--tau", tau, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert "--tau must lie in (0, 1]" in result.output
    assert not (tmp_path / "out").exists()


def test_early_not_below_seq_len_is_refused_on_the_command_line(tiny_llama_dir, tmp_path):
    options = small(tiny_llama_dir)
    options[options.index("--early") + 1] = "200"
    result = invoke("leakage", *options, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert "--early 200 is not below --seq-len 32" in " ".join(result.output.split())


def test_early_not_below_seq_len_warns_in_python(tiny):
    from poslens.measurement.arguments import EarlyWindowWarning

    corpus = poslens.make_corpus(tiny, "random", n_seqs=4, seq_len=16)
    with pytest.warns(EarlyWindowWarning, match="early = 32 is not below the corpus's seq_len 16"):
        poslens.measure(tiny, corpus, groups=2, progress=False)


# ---------------------------------------------------------------- 8. the Python boundary and messages


def test_measure_refuses_a_tensor_naming_make_corpus(tiny):
    corpus = poslens.make_corpus(tiny, "random", n_seqs=4, seq_len=16)
    with pytest.raises(TypeError, match=r"make_corpus"):
        poslens.measure(tiny, corpus.tokens, groups=2, progress=False)


@pytest.mark.parametrize("groups", ["2", 2.5, True])
def test_measure_refuses_a_non_int_naming_the_parameter(tiny, groups):
    corpus = poslens.make_corpus(tiny, "random", n_seqs=4, seq_len=16)
    with pytest.raises(TypeError, match=r"^groups must be an int"):
        poslens.measure(tiny, corpus, groups=groups, early=8, progress=False)


def test_a_single_intervention_is_accepted_as_well_as_a_list(tiny):
    corpus = poslens.make_corpus(tiny, "random", n_seqs=4, seq_len=16)
    single = poslens.measure(tiny, corpus, groups=2, early=8, progress=False, interventions=poslens.BosReplacement("zero"))
    listed = poslens.measure(tiny, corpus, groups=2, early=8, progress=False, interventions=[poslens.BosReplacement("zero")])
    assert set(single.table["intervention"]) == {"bos:zero"}
    np.testing.assert_array_equal(single.table["value"].to_numpy(), listed.table["value"].to_numpy())


def test_the_not_measured_hint_names_a_command_that_works(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    assert invoke("leakage", *small(tiny_llama_dir), "--out", out).exit_code == 0
    result = invoke("claims", "--out", out)
    assert result.exit_code == 0
    line = " ".join(result.output.split())
    hint = line[line.index("C5 (run: ") + len("C5 (run: ") :]
    hint = hint[: hint.index(")")]
    assert hint.startswith("poslens bos-swap") and f"--model {tiny_llama_dir}" in hint and "--n-seqs 4" in hint
    words = hint.split()[1:]  # the command as the hint spells it, run as it is
    ran = invoke(*words)
    assert ran.exit_code == 0, error_text(ran)
    assert "reusing" in ran.output  # it agrees with the leakage part already there


def test_a_temporary_file_left_by_a_killed_write_is_removed_by_the_next_run(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    stale = out / ".leakage.sums.npz.999999999-0123abcd.tmp.npz"  # pid 999999999 does not run
    stale.write_bytes(b"half a file")
    result = invoke("leakage", *small(tiny_llama_dir), "--out", out)
    assert result.exit_code == 0
    assert not stale.exists()


DISK_FULL = """
import resource, sys
import pandas as pd
from poslens.measurement.result import Result
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
rows = [dict(model="m", variant="base", intervention="none", layer=i, head=-1, query_window="all", metric="c_res",
             value=float(i), ci_low=0.0, ci_high=1.0) for i in range(20000)]
try:
    Result(pd.DataFrame(rows), {}).save(sys.argv[1])
except Exception as error:
    print(type(error).__name__, "|", error)
"""


def test_a_full_disk_names_the_file_and_the_fix(tmp_path):
    target = tmp_path / "big.parquet"
    done = subprocess.run([sys.executable, "-c", DISK_FULL, str(target)], capture_output=True, text=True, timeout=120)
    name, _, message = done.stdout.strip().partition(" | ")
    assert name == "DiskFullError", done.stdout + done.stderr
    assert str(target.with_suffix(".csv")) in message or str(target) in message
    assert "free some space" in message
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".big")] == []  # no temporary file left


def test_errors_share_one_hierarchy():
    from poslens import errors
    from poslens.capture.row_bin_store import InsufficientDiskError
    from poslens.capture.score_checks import MaskMismatchError, NonFiniteScoresError
    from poslens.measurement.result_files import OutputNotWritableError
    from poslens.model.cache import CacheNotWritableError
    from poslens.model.loading import ModelNotSupportedError
    from poslens.model.variants import VariantNotSupportedError
    from poslens.runtime.planner import InsufficientMemoryError
    from poslens.study.part_cache import MixedSettingsError, SettingsMismatchError

    for cls in (
        OutputNotWritableError,
        ModelNotSupportedError,
        VariantNotSupportedError,
        SettingsMismatchError,
        MixedSettingsError,
        errors.CorpusError,
        errors.SumsMismatchError,
        errors.InputsChangedError,
        MaskMismatchError,
        NonFiniteScoresError,
        InsufficientDiskError,
        CacheNotWritableError,
        InsufficientMemoryError,
    ):
        assert issubclass(cls, errors.PoslensError), cls


def test_utf16_without_a_byte_order_mark_is_refused_not_measured(tmp_path):
    from poslens.model.corpus_texts import read_texts

    path = tmp_path / "notes.txt"
    path.write_bytes("hello world\n".encode("utf-16-le"))  # valid UTF-8 bytes, NUL between the letters
    with pytest.raises(ValueError, match=r"notes\.txt:1: .*NUL byte.*utf-16le"):
        read_texts(path)


# ---------------------------------------------------------------- 10. the page users read


def test_reliability_page_shows_the_integrity_messages_users_see(tiny_llama_dir, tmp_path):
    """Each new message, as the command prints it, appears verbatim in docs/reliability.md (paths as DIR)."""
    import re
    import shutil

    page = (Path(__file__).resolve().parents[3] / "docs" / "reliability.md").read_text()
    model = Path(shutil.copytree(tiny_llama_dir, tmp_path / "llama"))
    base = ["--model", model, "--n-seqs", "4", "--seq-len", "32", "--groups", "2", "--early", "8"]
    rand = [*base, "--corpus", "random"]

    def line(*args) -> str:
        result = invoke(*args)
        if result.exit_code == 2:
            text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split()).split(" Error ", 1)[1]
        else:
            assert result.exit_code == 1, result.output
            text = f"error: {result.exception}"
        return text.replace(str(tmp_path), "DIR")

    assert invoke("leakage", *rand, "--seed", "0", "--out", tmp_path / "A").exit_code == 0
    assert invoke("leakage", *rand, "--seed", "1", "--out", tmp_path / "B").exit_code == 0
    shutil.copy(tmp_path / "B" / "leakage.parquet", tmp_path / "A" / "leakage.parquet")
    text = tmp_path / "c.txt"
    text.write_text("The quick brown fox. " * 50)
    assert invoke("leakage", *base, "--corpus", text, "--out", tmp_path / "C").exit_code == 0
    text.write_text("Another text here. " * 50)
    (tmp_path / "E").mkdir()
    (tmp_path / "E" / "leakage.csv").write_text("mine")
    assert invoke("leakage", *rand, "--out", tmp_path / "F").exit_code == 0
    (tmp_path / "F" / "leakage.sums.npz").unlink()
    (tmp_path / "null.jsonl").write_text('{"text": "hello there"}\n{"text": null}\n')
    (tmp_path / "f.jsonl").write_text('{"body": "hello there"}\n')
    (tmp_path / "l.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    early = list(rand)
    early[early.index("--early") + 1] = "200"
    messages = [
        line("bos-swap", *rand, "--seed", "1", "--replacement", "zero", "--out", tmp_path / "A"),
        line("bos-swap", *rand, "--replacement", "zero", "--out", tmp_path / "F"),
        line("leakage", *base, "--corpus", text, "--out", tmp_path / "C"),
        line("leakage", *rand, "--out", tmp_path / "E"),
        line("sinks", *rand, "--tau", "-1", "--out", tmp_path / "G"),
        line("leakage", *early, "--out", tmp_path / "G"),
        line("leakage", *base, "--corpus", tmp_path / "null.jsonl", "--out", tmp_path / "G"),
        line("leakage", *base, "--corpus", tmp_path / "f.jsonl", "--out", tmp_path / "G"),
        line("leakage", *base, "--corpus", tmp_path / "l.txt", "--out", tmp_path / "G"),
        line("fingerprint", *rand, "--fingerprint-len", "5000", "--out", tmp_path / "G"),
    ]
    for message in messages:
        assert f"`{message}`" in page, f"docs/reliability.md lacks: {message}"


# ---------------------------------------------------------------- 11. a part that cannot be read is kept, unless --overwrite


def _damage(out: Path, how: str) -> Path:
    """Damage the leakage part in ``out`` as ``how`` says; return the file named as the reason."""
    import zipfile

    sums = out / "leakage.sums.npz"
    if how in ("newer sums format", "object array in the sums"):
        with np.load(sums) as data:
            arrays = {name: data[name] for name in data.files}
        if how == "newer sums format":
            arrays["sums_format"] = np.array(99)
        else:
            arrays["a_logit"] = np.array([{"not": "numbers"}], dtype=object)
        with zipfile.ZipFile(sums, "w") as archive:  # written as numpy would, objects pickled inside
            for name, array in arrays.items():
                with archive.open(f"{name}.npy", "w") as member:
                    np.lib.format.write_array(member, array, allow_pickle=True)
        return sums
    if how == "newer table format":
        import pyarrow.parquet as pq

        table = pq.read_table(out / "leakage.parquet")
        meta = dict(table.schema.metadata)
        meta[b"poslens_table_format"] = b"99"
        pq.write_table(table.replace_schema_metadata(meta), out / "leakage.parquet")
        return out / "leakage.parquet"
    if how == "damaged table":
        data = (out / "leakage.parquet").read_bytes()
        (out / "leakage.parquet").write_bytes(data[: len(data) // 2])
        return out / "leakage.parquet"
    data = (out / "relativize.parquet").read_bytes()  # "damaged attribution": the relativize part, one result as any
    (out / "relativize.parquet").write_bytes(data[: len(data) // 2])
    return out / "relativize.parquet"


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("newer sums format", "sums format 99"),
        ("object array in the sums", "array of Python objects"),
        ("newer table format", "table format 99"),
        ("damaged table", "cannot be read as Parquet"),
    ],
)
def test_a_part_that_cannot_be_read_is_refused_and_kept_unless_overwrite(tiny_llama_dir, tmp_path, how, reason):
    """Nothing is deleted without --overwrite: the part is refused naming its file and the reason, its bytes kept."""
    refused_then_overwritten(tiny_llama_dir, tmp_path, how, reason)


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
def test_an_attribution_that_cannot_be_read_is_refused_and_kept_unless_overwrite(tiny_llama_dir, tmp_path):
    """The relativize part likewise (its relativize.parquet damaged)."""
    refused_then_overwritten(tiny_llama_dir, tmp_path, "damaged attribution", "cannot be read as Parquet")


def refused_then_overwritten(tiny_llama_dir: Path, tmp_path: Path, how: str, reason: str) -> None:
    """The part damaged as ``how`` says is refused naming ``reason``, nothing changed; then measured again under --overwrite."""
    from poslens.ownership import written_files

    out = tmp_path / "out"
    command = (
        ("relativize", *small(tiny_llama_dir), "--n-seqs", "4", "--seq-len", "16", "--no-loss")
        if "attribution" in how
        else ("leakage", *small(tiny_llama_dir))
    )
    assert invoke(*command, "--out", out).exit_code == 0
    named = _damage(out, how)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    refused = invoke(*command, "--out", out)
    assert refused.exit_code == 1, error_text(refused)
    message = str(refused.exception)
    assert type(refused.exception).__name__ == "UnreadablePartError" and str(named) in message and reason in message, message
    assert "--overwrite" in message and "does not delete or replace it" in message
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # not a byte changed
    again = invoke(*command, "--overwrite", "--out", out)
    assert again.exit_code == 0, error_text(again)
    assert "cannot be read" in again.output and "measuring it again (--overwrite)" in again.output
    assert named.read_bytes() != before[named.name]
    own = ("relativize.",) if "attribution" in how else ("leakage.",)  # the part's own files; the others not touched
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert {name for name in after if not name.startswith(own)} == {name for name in before if not name.startswith((*own, "."))}
    assert all(after[name] == before[name] for name in after if not name.startswith(own))
    for name, entry in written_files(out).items():  # replaced by poslens, and listed as such
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == entry["sha256"], name


OVERWRITE_WORDS = (
    "`--overwrite` replaces exactly the files of the parts the command measures again (`<part>.parquet`, `<part>.csv` "
    "and `<part>.sums.npz`, and for `relativize` the four `attribution*` files of its old layout), and only those poslens wrote, even if "
    "they were changed since: it is needed to measure again a part made with other settings, from input files changed "
    "since, or that poslens cannot read. It never replaces a file poslens did not write, nor any other file in the folder."
)


def test_the_page_says_what_overwrite_replaces_and_that_is_what_it_does(tiny_llama_dir, tmp_path):
    """docs/reliability.md's sentence on --overwrite, clause by clause: the part's own files, changed or not; nothing else."""
    page = " ".join((Path(__file__).resolve().parents[3] / "docs" / "reliability.md").read_text().split())
    assert OVERWRITE_WORDS in page
    out = tmp_path / "out"
    assert invoke("sinks", *small(tiny_llama_dir), "--out", out).exit_code == 0
    (out / "notes.csv").write_text("mine")
    (out / "leakage.csv").write_text((out / "leakage.csv").read_text() + "my edit\n")  # changed since poslens wrote it
    kept = {name: (out / name).read_bytes() for name in ("notes.csv", "sinks.parquet", "sinks.csv")}
    # other settings: refused without --overwrite, nothing touched
    refused = invoke("leakage", *small(tiny_llama_dir, "--seed", "3"), "--out", out)
    assert refused.exit_code == 1 and type(refused.exception).__name__ == "SettingsMismatchError"
    assert (out / "leakage.csv").read_text().endswith("my edit\n")
    # with --overwrite: the part's three files replaced (the edited one too), nothing else
    shown = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    replaced = invoke("leakage", *small(tiny_llama_dir, "--seed", "3"), "--overwrite", "--out", out)
    assert replaced.exit_code == 0, error_text(replaced)
    now = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert set(now) == set(shown)  # no file added, none removed
    assert {name for name in now if now[name] != shown[name]} == {"leakage.parquet", "leakage.csv", "leakage.sums.npz"}
    assert not (out / "leakage.csv").read_text().endswith("my edit\n")
    assert Result.load(out / "leakage.parquet").meta["settings"]["seed"] == 3
    assert {name: (out / name).read_bytes() for name in kept} == kept
    # a file of the part's name that poslens did not write: refused even with --overwrite
    (out / "leakage.sums.npz").unlink()
    (out / "leakage.sums.npz").write_bytes(b"my own numbers")
    from poslens.ownership import forget_written

    forget_written([out / "leakage.sums.npz"])
    mine = invoke("leakage", *small(tiny_llama_dir, "--seed", "4"), "--overwrite", "--out", out)
    assert mine.exit_code == 1 and "poslens did not write it" in str(mine.exception)
    assert (out / "leakage.sums.npz").read_bytes() == b"my own numbers"


# ---------------------------------------------------------------- 12. hashes of the bytes that were read


def test_a_corpus_replaced_between_its_hash_and_its_read_is_recorded_as_read(tiny_llama_dir, tmp_path, monkeypatch):
    """The corpus's hash comes from the very bytes the corpus was built from, so the first text is never served the second's table."""
    import poslens.study.parts as parts

    corpus = tmp_path / "c.txt"
    first, second = "The quick brown fox jumps. " * 40, "Pack my box with liquor jugs. " * 40
    corpus.write_text(first)
    real = parts.make_corpus

    def replaced_just_before_the_read(*args, **kwargs):  # the race, made deterministic: after the hash, before the read
        corpus.write_text(second)
        return real(*args, **kwargs)

    monkeypatch.setattr(parts, "make_corpus", replaced_just_before_the_read)
    out = tmp_path / "out"
    options = ["--model", tiny_llama_dir, "--corpus", corpus, "--n-seqs", "4", "--seq-len", "16", "--groups", "2", "--early", "4"]
    assert invoke("leakage", *options, "--out", out).exit_code == 0
    monkeypatch.setattr(parts, "make_corpus", real)
    meta = Result.load(out / "leakage.parquet").meta
    assert meta["inputs"][str(corpus)] == hashlib.sha256(second.encode()).hexdigest()  # what was measured
    measured = poslens.make_corpus(poslens.load_model(tiny_llama_dir), corpus, n_seqs=4, seq_len=16)
    from poslens.measurement.provenance import tokens_sha256

    assert meta["corpus"]["tokens_sha256"] == tokens_sha256(measured.tokens)
    corpus.write_text(first)  # a later run with the first text: not served the second text's table
    later = invoke("leakage", *options, "--out", out)
    assert later.exit_code == 1 and "reusing" not in later.output
    assert type(later.exception).__name__ == "InputsChangedError" and f"{corpus} changed since" in str(later.exception)


def test_a_model_symlink_repointed_while_the_run_starts_is_refused(tmp_path, monkeypatch):
    """Model files are hashed again once loaded: a folder that changed under the load stops the run, and nothing is saved."""
    import poslens.study.parts as parts
    from poslens.testing import save_tiny_model

    first, second = save_tiny_model(tmp_path / "first", "llama", seed=0), save_tiny_model(tmp_path / "second", "llama", seed=1)
    link = tmp_path / "model"
    link.symlink_to(first)
    real = parts.load_model

    def repointed_just_before_the_load(*args, **kwargs):  # after the inputs' hashes, before transformers reads the files
        link.unlink()
        link.symlink_to(second)
        return real(*args, **kwargs)

    monkeypatch.setattr(parts, "load_model", repointed_just_before_the_load)
    out = tmp_path / "out"
    refused = invoke("leakage", *small(link), "--out", out)
    assert refused.exit_code == 1, error_text(refused)
    message = str(refused.exception)
    assert type(refused.exception).__name__ == "InputsChangedError" and f"{link}/model.safetensors" in message
    assert "changed while the leakage part was computed" in message and "nothing was saved" in message
    assert not (out / "leakage.parquet").exists()


# ---------------------------------------------------------------- 13. every command printed for copying is quoted

NASTY = 'it\'s "quoted";touch PASTED;$(touch SUBSHELL) `touch TICKS` & | x'  # spaces, quotes, ; and the shell's other specials


def pasted(line: str, cwd: Path, program: str) -> list[list[str]]:
    """``line`` pasted into ``bash -c`` with ``program`` replaced by a script that prints its arguments as JSON; each run's arguments."""
    import json
    import os

    bin_dir = cwd / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / program
    script.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    script.chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, cwd=cwd, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    )
    assert done.returncode == 0, done.stderr
    assert not any((cwd / name).exists() for name in ("PASTED", "SUBSHELL", "TICKS")), "a pasted hint ran a second command"
    return [json.loads(printed) for printed in done.stdout.splitlines()]


def test_the_not_measured_hints_paste_as_one_command_each(tiny_llama_dir, tmp_path):
    """A corpus and a folder named with spaces, quotes, ; and $( ): each command of the hint runs as one, with them as one argument each."""
    import re

    (tmp_path / "texts").mkdir()
    corpus = tmp_path / "texts" / f"c {NASTY}.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    out = tmp_path / f"out {NASTY}"
    options = ["--model", tiny_llama_dir, "--corpus", corpus, "--n-seqs", "4", "--seq-len", "16", "--groups", "2", "--early", "4"]
    assert invoke("leakage", *options, "--out", out).exit_code == 0
    result = invoke("claims", "--out", out)
    assert result.exit_code == 0, error_text(result)
    [line] = [line for line in result.output.splitlines() if line.startswith("not measured: ")]  # one line, never wrapped
    commands = [c for hint in re.findall(r"C\d \(run: (.*?)\)(?=, C\d \(run: |$)", line) for c in re.split(r", (?=poslens )", hint)]
    assert len(commands) >= 3 and all(c.startswith("poslens ") for c in commands), line
    for command in commands:
        [argv] = pasted(command, tmp_path, "poslens")  # one run of the program per command, nothing else
        assert argv[argv.index("--corpus") + 1] == str(corpus) and argv[argv.index("--out") + 1] == str(out)
        if argv[0] != "compare":  # compare runs its own models
            assert argv[argv.index("--model") + 1] == str(tiny_llama_dir)


def test_the_other_printed_commands_paste_as_one_command_each(tmp_path, monkeypatch):
    """The iconv hint of a non-UTF-8 corpus, the claims hint of a folder without claims, the lock holder's command."""
    import json

    from poslens.model.corpus_texts import read_texts
    from poslens.study.claims.table import Claims
    from poslens.study.output_lock import OWNER, OutputLock

    text = tmp_path / f"l {NASTY}.txt"
    text.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(ValueError) as latin:
        read_texts(text)
    hint = str(latin.value).split("for example with ", 1)[1]
    assert pasted(hint, tmp_path, "iconv") == []  # what it prints goes to the redirection's target, one file
    assert json.loads((tmp_path / f"l {NASTY}.utf8.txt").read_text()) == ["-f", "latin1", "-t", "utf-8", text.name]
    folder = tmp_path / f"results {NASTY}"
    folder.mkdir()
    with pytest.raises(FileNotFoundError) as missing:
        Claims.read(folder)
    assert pasted(str(missing.value).split("; run ", 1)[1], tmp_path, "poslens") == [["claims", "--out", str(folder)]]
    from poslens.errors import NotFoundError
    from poslens.study.zoo_measure import measure_family

    with pytest.raises(NotFoundError) as no_family:  # a folder that holds no trained family: the hint to train one
        measure_family(folder, tmp_path / "measured", tmp_path / "work")
    hint = str(no_family.value).split("(run ", 1)[1].removesuffix(" first)")
    assert pasted(hint, tmp_path, "poslens") == [["zoo", "--out", str(folder)]]
    monkeypatch.setattr(sys, "argv", ["poslens", "leakage", "--corpus", f"c {NASTY}.txt", "--out", str(folder)])
    with OutputLock(folder):
        holder = json.loads((folder / OWNER).read_text())["command"]
    assert pasted(holder, tmp_path, "poslens") == [["leakage", "--corpus", f"c {NASTY}.txt", "--out", str(folder)]]
