"""The bad-input tour and determinism (listed, with the messages users see, in docs/reliability.md).

Bad inputs already covered elsewhere are not repeated here:

- unknown model, missing model package, folder without config.json, BERT
  folder, GPT-2 folder, sequence past the context: ``tests/unit/model/test_models.py``;
- malformed variant strings (``parse_variant`` and ``load_model``): ``tests/unit/model/test_variants.py``;
- corpus too small, position 0 without BOS on an in-memory tokenizer: ``tests/unit/model/test_corpus.py``;
- corrupted and concurrently built cache entries: ``tests/unit/model/test_cache.py``.

Everything here uses real objects: tiny Llama folders saved to disk, the
``poslens`` command through typer's CliRunner or as a subprocess. The only
stand-in is a simulated interrupt inside pyarrow's writer, to check that an
interrupted save never leaves a half file.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import poslens
from poslens.capture.score_checks import MaskMismatchError, NonFiniteScoresError
from poslens.measurement.result import Result
from poslens.measurement.result_files import OutputNotWritableError
from poslens.model.cache import cached_folder, entry_is_valid
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.study.cli import app
from poslens.testing import byte_tokenizer, save_tiny_model

runner = CliRunner()
# the hidden files poslens keeps in a folder it writes: which files it wrote, and the locks of that list and of the folder
BOOKKEEPING = {".poslens-files.json", ".poslens-files.json.lock", ".poslens.lock"}


def _default_sigint() -> None:
    """In the child, SIGINT's default action: a shell's background job (``make test &``) starts with SIGINT ignored,
    and Python then never raises KeyboardInterrupt, so a Ctrl-C test would see the run finish instead."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def flat(text: str) -> str:
    """CLI output with rich's box drawing removed and whitespace collapsed (panels wrap long lines)."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def small_measure(model, n_seqs: int = 8, seq_len: int = 24, groups: int = 4, **kwargs) -> Result:
    corpus = poslens.make_corpus(model, "random", n_seqs=n_seqs, seq_len=seq_len, seed=3)
    return poslens.measure(model, corpus, groups=groups, batch_size=2, progress=False, **kwargs)


@pytest.fixture(scope="module")
def short_context_dir(tmp_path_factory) -> Path:
    """A tiny Llama whose context is 32 tokens."""
    return save_tiny_model(tmp_path_factory.mktemp("ctx32"), "llama", max_position_embeddings=32)


@pytest.fixture(scope="module")
def no_bos_dir(tmp_path_factory) -> Path:
    """A tiny Llama saved with a tokenizer that declares no BOS token."""
    folder = save_tiny_model(tmp_path_factory.mktemp("nobos"), "llama")
    tokenizer = byte_tokenizer()
    tokenizer.bos_token = None
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir)


@pytest.fixture
def blocked_dir(tmp_path) -> Path:
    """A folder path that cannot be created, even by root: its parent is a regular file."""
    file = tmp_path / "file.txt"
    file.write_text("not a folder")
    return file / "sub"


# ---------------------------------------------------------------- 1. unknown model (CLI)


def test_cli_unknown_model_fails_with_the_known_names(tmp_path):
    result = runner.invoke(app, ["leakage", "--model", "no-such-model-xyz", "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert isinstance(result.exception, ValueError)
    message = str(result.exception)
    assert "unknown model 'no-such-model-xyz'" in message and "smollm2-135m, gemma3-270m" in message


# ---------------------------------------------------------------- 4. T larger than the context


def test_sequence_longer_than_context_is_refused_naming_both_numbers(short_context_dir):
    model = poslens.load_model(short_context_dir)
    assert model.max_context == 32
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=48)
    with pytest.raises(ValueError) as info:
        poslens.measure(model, corpus, groups=2, progress=False)
    assert re.search(r"\b48\b", str(info.value)) and re.search(r"\b32\b", str(info.value))
    with pytest.raises(ValueError) as info:
        run_with_hooks(model, corpus.tokens, [])
    message = str(info.value)
    assert "sequence length 48 exceeds" in message and "context of 32 tokens" in message
    assert "at most 32 tokens" in message
    # At the limit it runs.
    at_limit = poslens.make_corpus(model, "random", n_seqs=2, seq_len=32)
    assert len(poslens.measure(model, at_limit, groups=2, progress=False).table) > 0


# ---------------------------------------------------------------- 5. corpus too small for N × T


def test_fewer_sequences_than_groups_is_refused(tiny):
    corpus = poslens.make_corpus(tiny, "random", n_seqs=3, seq_len=16)
    with pytest.raises(ValueError, match=re.escape("3 sequences cannot fill 4 groups; use at least 4 sequences or fewer groups")):
        poslens.measure(tiny, corpus, groups=4, progress=False)


def test_cli_corpus_too_small_names_the_numbers(tiny_llama_dir, tmp_path):
    text = tmp_path / "short.txt"
    text.write_text("x" * 50)  # 50 byte tokens + EOS
    result = runner.invoke(
        app,
        [
            "leakage",
            "--model",
            str(tiny_llama_dir),
            "--corpus",
            str(text),
            "--n-seqs",
            "6",
            "--seq-len",
            "11",
            "--groups",
            "2",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code != 0
    message = str(result.exception)
    assert "has 51 tokens: 5 non-overlapping windows of 10, but 6 sequences were asked for" in message
    assert not (tmp_path / "out" / "leakage.parquet").exists()


# ---------------------------------------------------------------- 6. position 0 without BOS


def test_missing_bos_is_not_silently_replaced(no_bos_dir, tmp_path):
    model = poslens.load_model(no_bos_dir)
    # TransformerLens sets a missing BOS to EOS on the tokenizer it is given; poslens undoes that.
    assert model.bos_token_id is None and model.bos_token is None
    assert model.tokenizer.eos_token == "</s>"
    with pytest.raises(ValueError, match=re.escape("position0 (--bos) is 'bos' but this tokenizer has no BOS token")):
        poslens.make_corpus(model, "docs", n_seqs=2, seq_len=16, position0="bos")
    # --bos none on the same model is fine, end to end.
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "leakage",
            "--model",
            str(no_bos_dir),
            "--bos",
            "none",
            "--corpus",
            "random",
            "--n-seqs",
            "4",
            "--seq-len",
            "16",
            "--groups",
            "2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    saved = Result.load(out / "leakage.parquet")
    assert saved.meta["corpus"]["position0"] == "none" and saved.meta["model"]["bos_token_id"] is None
    # and --bos bos fails with the message.
    result = runner.invoke(
        app,
        [
            "leakage",
            "--model",
            str(no_bos_dir),
            "--corpus",
            "random",
            "--n-seqs",
            "4",
            "--seq-len",
            "16",
            "--groups",
            "2",
            "--out",
            str(tmp_path / "out2"),
        ],
    )
    assert result.exit_code != 0 and "no BOS token" in str(result.exception)


# ---------------------------------------------------------------- 7. malformed variants through the CLI


@pytest.mark.parametrize(
    "spec, hint",
    [
        ("ntk:0", "variant 'ntk:0': alpha must be > 0"),
        ("ntk:-1", "variant 'ntk:-1': alpha must be > 0"),
        ("window:0", "variant 'window:0': W must be a whole number ≥ 2"),
        ("window:1", "with W = 1 each query sees only itself"),
        ("rope-base:1e-300", "variant 'rope-base:1e-300': theta must be > 1"),
        ("rope-base:abc", "variant 'rope-base:abc': 'abc' is not a number"),
    ],
)
def test_cli_bad_variant_is_a_usage_error(spec, hint, tmp_path):
    # The model does not exist: the variant is refused when the command line is parsed, before any loading.
    result = runner.invoke(app, ["leakage", "--model", "no-such-model-xyz", "--variant", spec, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    text = flat(result.output)
    assert "Invalid value for '--variant'" in text and hint in text
    assert "ntk:<alpha>" in text and "window:<W>" in text  # the accepted forms
    assert "unknown model" not in text and not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 8. NaN / inf in attention scores


class PoisonHead:
    """An intervention that writes NaN into one head's visible scores, on the ``on_call``-th forward pass."""

    label = "poison"

    def __init__(self, layer: int, head: int, on_call: int = 1) -> None:
        self.layer, self.head, self.on_call, self.calls = layer, head, on_call, 0

    def hooks(self, model, tokens):
        self.calls += 1
        if self.calls != self.on_call:
            return []

        def poison(scores, hook):
            t = scores.shape[-1]
            visible = torch.ones(t, t, dtype=torch.bool, device=scores.device).tril()
            scores = scores.clone()
            scores[:, self.head, visible] = float("nan")
            return scores

        return [(attn_scores(self.layer), poison)]

    def describe(self):
        return {"kind": "poison", "layer": self.layer, "head": self.head}


@pytest.mark.parametrize("on_call", [1, 2], ids=["first-batch", "later-batch"])
def test_nan_scores_are_reported_with_layer_and_head(tiny, on_call):
    with pytest.raises(NonFiniteScoresError) as info:
        small_measure(tiny, n_seqs=4, seq_len=16, groups=2, interventions=[PoisonHead(1, 2, on_call)])
    assert str(info.value) == (
        "NaN or inf in the attention scores of layer 1, head 2 (in float16 this is usually overflow: use --dtype float32 or bfloat16)"
    )


def test_float16_overflow_is_reported_as_such(tmp_path, tiny_llama_dir):
    # Layer 1's query and key weights scaled up: its scores reach ~5e5, past float16's 65504.
    from safetensors.torch import load_file

    weights = load_file(str(tiny_llama_dir / "model.safetensors"))
    for name in weights:
        if "layers.1.self_attn.q_proj" in name or "layers.1.self_attn.k_proj" in name:
            weights[name] = weights[name] * 1500
    folder = save_tiny_model(tmp_path / "hot", "llama", state_dict=weights)
    assert len(small_measure(poslens.load_model(folder), n_seqs=2, seq_len=16, groups=2).table) > 0  # float32 is fine
    half = poslens.load_model(folder, dtype=torch.float16)
    with pytest.raises(NonFiniteScoresError, match=r"layer 1, head \d.*use --dtype float32 or bfloat16"):
        small_measure(half, n_seqs=2, seq_len=16, groups=2)


def test_mask_wider_than_recorded_is_reported(tiny_llama_dir):
    # A full-causal model recorded as windowed: keys poslens treats as invisible carry finite scores.
    model = poslens.load_model(tiny_llama_dir)
    model.sliding_windows = [4] * model.n_layers
    with pytest.raises(MaskMismatchError, match=r"^layer 0: keys poslens treats as invisible \(window=4\) carry finite"):
        small_measure(model, n_seqs=2, seq_len=16, groups=2)


def test_mask_narrower_than_recorded_is_reported(tiny_llama_dir):
    # A window:4 variant recorded as full causal: keys poslens treats as visible are masked.
    model = poslens.load_model(tiny_llama_dir, variant="window:4")
    model.sliding_windows = [None] * model.n_layers
    with pytest.raises(MaskMismatchError, match=r"^layer 0: keys poslens treats as visible are masked in the scores"):
        small_measure(model, n_seqs=2, seq_len=16, groups=2)


@pytest.mark.parametrize("block_elements", [None, 12], ids=["one-block", "row-blocks"])
@pytest.mark.parametrize("where", ["future", "before-window"])
def test_one_unmasked_invisible_key_is_reported_wherever_the_row_blocks_fall(block_elements, where):
    """One invisible key of row 6 of a window-3 layer left unmasked (key 7, in its future, or key 3, before its
    window) is found whether it falls inside its row block's key span (one block) or outside it (row blocks)."""
    from types import SimpleNamespace

    from poslens.capture.cell_sum_capture import CellSumCapture
    from poslens.fit.binning import Binning

    t, window, row = 8, 3, 6
    capture = CellSumCapture(SimpleNamespace(n_layers=1, n_heads=2, sliding_windows=[window]), Binning(t), groups=2, block_elements=block_elements)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    invisible = (j > i) | (i - j >= window)
    scores = torch.randn(1, 2, t, t).masked_fill(invisible, torch.finfo(torch.float32).min)
    capture.reduce(0, scores.clone())  # the mask as recorded: no error
    capture._checked.clear()
    leaked = 7 if where == "future" else row - window
    assert invisible[row, leaked]
    scores[0, 1, row, leaked] = 0.5
    with pytest.raises(MaskMismatchError, match="keys poslens treats as invisible"):
        capture.reduce(0, scores)


# ---------------------------------------------------------------- 9. output folder not writable


def test_result_save_to_unwritable_folder(tiny, blocked_dir):
    result = small_measure(tiny)
    with pytest.raises(OutputNotWritableError) as info:
        result.save(blocked_dir / "leakage.parquet")
    assert isinstance(info.value, OSError)
    assert str(info.value) == f"cannot write results to {blocked_dir}: Not a directory; choose an output folder you can write to"


@pytest.mark.parametrize("command", [["leakage", "--model", "no-such-model-xyz"], ["report", "--quick"]])
def test_cli_checks_the_output_folder_before_loading(command, blocked_dir):
    # leakage names a model that does not exist, report the default embedded one: neither is loaded.
    start = time.perf_counter()
    result = runner.invoke(app, command + ["--out", str(blocked_dir)])
    assert result.exit_code == 2, result.output
    text = flat(result.output)
    assert "Invalid value for '--out'" in text
    assert f"cannot write results to {blocked_dir}: Not a directory; choose an output folder you can write to" in text
    assert "unknown model" not in text
    assert time.perf_counter() - start < 5


# ---------------------------------------------------------------- 10. corrupted model cache, end to end


def test_corrupted_cache_entry_is_rebuilt_and_the_model_is_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLENS_CACHE", str(tmp_path / "cache"))
    built = []

    def build(tmp: Path) -> None:
        built.append(tmp)
        save_tiny_model(tmp, "llama", seed=5)

    tokens = torch.randint(4, 260, (1, 12), generator=torch.Generator().manual_seed(0))
    folder = cached_folder("tiny-e2e", build)
    before = run_with_hooks(poslens.load_model(folder), tokens, logits=True)
    weights = folder / "model.safetensors"
    with open(weights, "r+b") as handle:  # one byte of tensor data, same size: the file still loads
        handle.seek(weights.stat().st_size - 100)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x40]))
    damaged = run_with_hooks(poslens.load_model(folder), tokens, logits=True)
    assert not torch.equal(damaged, before)  # silently different weights: why entries are hashed
    assert not entry_is_valid(folder)
    again = cached_folder("tiny-e2e", build)
    assert len(built) == 2 and again == folder and entry_is_valid(again)
    assert torch.equal(run_with_hooks(poslens.load_model(again), tokens, logits=True), before)


# ---------------------------------------------------------------- 11. waiting on another's cache build


def test_waiting_on_another_cache_build_says_so_once(tmp_path, monkeypatch, capsys):
    import threading

    from filelock import FileLock

    monkeypatch.setenv("POSLENS_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "cache" / "models"
    root.mkdir(parents=True)
    other = FileLock(root / ".tiny-wait.lock")  # another process's build, holding the entry's lock
    other.acquire()
    found = []
    waiter = threading.Thread(target=lambda: found.append(cached_folder("tiny-wait", lambda d: (d / "x.txt").write_text("hi"))))
    waiter.start()
    said = ""
    deadline = time.monotonic() + 30
    while "waiting" not in said and time.monotonic() < deadline:
        time.sleep(0.05)
        said += capsys.readouterr().err
    assert waiter.is_alive() and not found  # still waiting for the lock
    other.release()
    waiter.join(timeout=30)
    said += capsys.readouterr().err
    assert found == [root / "tiny-wait"] and (found[0] / "x.txt").read_text() == "hi"
    assert said == f"waiting for another process to finish building or checking the model cache at {root / 'tiny-wait'} ...\n"
    # With the lock free, nothing is said.
    cached_folder("tiny-wait", lambda d: None)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- 12. interrupted saves and an interrupted report


def test_interrupted_save_keeps_the_previous_file(tiny, tmp_path, monkeypatch):
    import poslens.measurement.result_files as results

    path = tmp_path / "leakage.parquet"
    first = small_measure(tiny)
    first.save(path)
    second = Result(first.table.assign(value=first.table["value"] + 1.0), {"run": "second"}, first.sums)
    real_write = results.pq.write_table

    def interrupted_write(table, where, **kwargs):  # a Ctrl-C halfway through pyarrow's write
        real_write(table, where, **kwargs)
        size = Path(where).stat().st_size
        with open(where, "r+b") as handle:
            handle.truncate(size // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(results.pq, "write_table", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        second.save(path)
    monkeypatch.undo()
    kept = Result.load(path)
    pd.testing.assert_frame_equal(kept.table, first.table, check_exact=True)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.name not in BOOKKEEPING] == []  # no temporary left
    # A result without sums does not inherit an older result's sums file.
    Result(first.table, {}).save(path)
    assert Result.load(path).sums is None and not path.with_suffix(".sums.npz").exists()


def _report_command(model: Path, out: Path) -> list[str]:
    return [
        str(Path(sys.executable).parent / "poslens"),
        "report",
        "--quick",
        "--skip-compare",
        "--model",
        str(model),
        "--n-seqs",
        "8",
        "--seq-len",
        "24",
        "--groups",
        "4",
        "--fingerprint-seqs",
        "8",
        "--fingerprint-len",
        "16",
        "--out",
        str(out),
    ]


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
def test_ctrl_c_during_report_then_rerun_resumes(tiny_llama_dir, tmp_path):
    out = tmp_path / "report"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "400"}  # no wrapped log lines
    log = tmp_path / "first.log"
    with open(log, "w") as handle:
        process = subprocess.Popen(_report_command(tiny_llama_dir, out), stdout=handle, stderr=subprocess.STDOUT, env=env, preexec_fn=_default_sigint)
        leakage = out / "leakage.parquet"
        deadline = time.monotonic() + 120
        while not leakage.exists():
            assert process.poll() is None, f"report ended before writing leakage.parquet:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "leakage.parquet did not appear within 120 s"
            time.sleep(0.02)
        assert process.poll() is None, "report finished before it could be interrupted"
        process.send_signal(signal.SIGINT)
        returncode = process.wait(timeout=60)
    assert returncode == 130, log.read_text()[-3000:]
    assert not (out / "report.html").exists()
    said = flat(log.read_text())
    assert re.search(
        rf"interrupted: leakage(, [a-z-]+)* (is|are) complete in {re.escape(str(out))}; "
        r"run the same command again to resume",
        said,
    ), said[-2000:]
    assert "Traceback" not in said and "Aborted" not in said
    # The part written before the interrupt is complete: table, provenance and sums.
    first = Result.load(leakage)
    assert first.meta["settings_key"] and first.sums is not None and len(first.table) > 0
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.name not in BOOKKEEPING] == []
    digest = hashlib.sha256(leakage.read_bytes()).hexdigest()

    rerun = subprocess.run(_report_command(tiny_llama_dir, out), capture_output=True, text=True, env=env, timeout=180)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    said = flat(rerun.stdout)
    assert f"[leakage] reusing {leakage}" in said and "[leakage] computing" not in said
    assert hashlib.sha256(leakage.read_bytes()).hexdigest() == digest
    assert (out / "report.html").exists() and (out / "run.json").exists()


# ---------------------------------------------------------------- determinism


def test_same_inputs_same_tables_on_cpu(tiny_llama_dir):
    runs = []
    for _ in range(2):
        model = poslens.load_model(tiny_llama_dir)  # a fresh load each time
        runs.append(small_measure(model))
    pd.testing.assert_frame_equal(runs[0].table, runs[1].table, check_exact=True)
    second = runs[1].sums.per_group.as_dict()
    for name, array in runs[0].sums.per_group.as_dict().items():
        assert np.array_equal(array, second[name]), name


def test_same_inputs_same_tables_smollm2(smollm2):
    first = small_measure(smollm2, n_seqs=4, seq_len=16, groups=2)
    second = small_measure(smollm2, n_seqs=4, seq_len=16, groups=2)
    pd.testing.assert_frame_equal(first.table, second.table, check_exact=True)


# ---------------------------------------------------------------- docs/reliability.md shows what users see

PAGE = Path(__file__).resolve().parents[3] / "docs" / "reliability.md"


def test_docs_show_the_messages_users_see(tiny_llama_dir, tmp_path):
    """Each scenario's one-line message, as the user sees it, appears verbatim in docs/reliability.md (paths as DIR)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "model.gguf").write_text("not a model")
    (tmp_path / "file.txt").write_text("not a folder")
    (tmp_path / "short.txt").write_text("x" * 50)
    short_context_dir = save_tiny_model(tmp_path / "ctx32", "llama", max_position_embeddings=32)
    out = ["--out", str(tmp_path / "out")]
    scenarios = [
        ["leakage", "--model", "no-such-model", *out],
        ["leakage", "--model", str(tmp_path / "nowhere"), *out],
        ["leakage", "--model", str(tmp_path / "empty"), *out],
        ["leakage", "--model", str(tmp_path / "model.gguf"), *out],
        ["leakage", "--model", str(short_context_dir), "--corpus", "random", "--n-seqs", "4", "--seq-len", "48", "--groups", "2", *out],
        [
            "leakage",
            "--model",
            str(tiny_llama_dir),
            "--corpus",
            str(tmp_path / "short.txt"),
            "--n-seqs",
            "6",
            "--seq-len",
            "11",
            "--groups",
            "2",
            *out,
        ],
        [
            "leakage",
            "--model",
            str(tiny_llama_dir),
            "--corpus",
            "random",
            "--n-seqs",
            "4",
            "--seq-len",
            "16",
            "--groups",
            "2",
            "--bos",
            "token:99999",
            *out,
        ],
        ["leakage", "--n-seqs", "3", "--groups", "4", *out],
        ["report", "--groups", "0", *out],
        ["leakage", "--bos", "first", *out],
        ["leakage", "--variant", "ntk:0", *out],
        ["leakage", "--out", str(tmp_path / "file.txt")],
        ["leakage", "--out", str(tmp_path / "file.txt" / "sub")],
    ]
    page = PAGE.read_text()
    for args in scenarios:
        result = runner.invoke(app, args)
        if result.exit_code == 2:  # an option refused at parse time: the text of typer's error box
            line = flat(result.output).split(" Error ", 1)[1]
        else:  # what poslens.study.cli.run prints
            assert result.exit_code == 1 and result.exception is not None, result.output
            line = f"error: {result.exception}"
        line = line.replace(str(tmp_path), "DIR")
        assert f"`{line}`" in page, f"docs/reliability.md lacks the message of {args[:3]}: {line}"
        assert not (tmp_path / "out").exists()


def test_the_command_prints_one_error_line_and_exits_1(tmp_path):
    command = [str(Path(sys.executable).parent / "poslens"), "leakage", "--model", "no-such-model", "--out", str(tmp_path / "out")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "1000"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]  # after the log's "[leakage] computing"
    assert line.startswith("error: unknown model 'no-such-model'.") and f"`{line}`" in PAGE.read_text()
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 13. faults and attacks that ended in a raw error (issue 40)


def _pickled_weights(tmp_path: Path, what: str) -> Path:
    """A tiny Llama folder whose weights are a pickled pytorch_model.bin (plain tensors, or a pickle of objects)."""
    import pickle
    from collections import Counter

    from safetensors.torch import load_file

    folder = save_tiny_model(tmp_path / "pickled", "llama")
    weights = load_file(folder / "model.safetensors")
    if what == "tensors":
        torch.save(weights, folder / "pytorch_model.bin")
    else:  # an object torch.load(weights_only=True) refuses with UnpicklingError
        (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": Counter(a=1)}))
    (folder / "model.safetensors").unlink()
    return folder


@pytest.mark.parametrize("what", ["tensors", "objects"])
def test_a_folder_with_pickled_weights_is_refused_naming_the_file(tmp_path, what):
    folder = _pickled_weights(tmp_path, what)
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["leakage", "--model", str(folder), "--corpus", "random", "--n-seqs", "2", "--seq-len", "8", "--groups", "2", "--out", str(out)]
    )
    assert result.exit_code == 1 and type(result.exception).__name__ == "ModelFileError", repr(result.exception)
    message = str(result.exception)
    assert f"{folder} holds its weights only as pytorch_model.bin" in message and "save_pretrained(folder)" in message
    assert not out.exists()


def test_a_newer_sums_format_is_a_poslens_error_naming_the_file_and_the_fix(tiny, tmp_path):
    import zipfile

    from poslens.errors import PoslensError

    path = tmp_path / "leakage.parquet"
    small_measure(tiny, n_seqs=4, seq_len=16, groups=2).save(path)
    sums = path.with_suffix(".sums.npz")
    with np.load(sums) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["sums_format"] = np.array(99)
    with zipfile.ZipFile(sums, "w") as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, array)
    with pytest.raises(PoslensError, match=rf"{re.escape(str(sums))}: sums format 99 .* upgrade poslens to read it, or measure again"):
        Result.load(path)


class FullDisk:
    """A temporary file on a disk that fills up after ``room`` bytes (ENOSPC), as a full TMPDIR does mid-run."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        import errno

        if self.file.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)


def test_a_temporary_folder_that_fills_up_mid_run_is_named_with_the_fix(tiny_llama_dir, tmp_path, monkeypatch):
    from poslens.capture import row_bin_store

    real = row_bin_store.tempfile.TemporaryFile
    monkeypatch.setattr(row_bin_store.tempfile, "TemporaryFile", lambda dir=None: FullDisk(real(dir=dir), room=20_000))
    out = tmp_path / "out"
    args = ["leakage", "--model", str(tiny_llama_dir), "--corpus", "random", "--n-seqs", "4", "--seq-len", "32", "--groups", "2"]
    result = runner.invoke(app, [*args, "--row-sums", "store", "--out", str(out)])
    assert result.exit_code == 1 and type(result.exception).__name__ == "DiskFullError", repr(result.exception)
    message = str(result.exception)
    assert "(TMPDIR) filled up while the per-sequence counterfactual's row-bin store was written (No space left on device" in message
    assert "--row-sums second-pass" in message and not out.exists()


@pytest.mark.parametrize("value", ["0", "-1GB", "nan"])
def test_the_disk_budget_is_called_a_disk_budget(tmp_path, value):
    result = runner.invoke(app, ["leakage", "--disk-budget", value, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    said = flat(result.output)
    assert "Invalid value for '--disk-budget'" in said and ("disk budget" in said or "disk size" in said) and "memory" not in said


def test_small_sizes_are_not_printed_as_zero_gigabytes():
    from poslens.runtime.disk import choose_route

    route = choose_route("auto", estimated_store_bytes=48_000, budget="2GB")
    assert route.reason == "the row-bin store takes 48 kB of temporary disk, within the budget of 2 GB"
    route = choose_route("auto", estimated_store_bytes=3 * 10**9, budget=70_000_000)
    assert route.reason == "the row-bin store would take 3 GB of temporary disk, over the budget of 70 MB: a second forward pass instead"


def test_the_disk_budget_and_a_dangling_out_are_poslens_errors_in_python_too(tmp_path):
    """What the command prints as an option's usage error is a PoslensError naming the option or file and the fix."""
    from poslens.errors import PoslensError
    from poslens.measurement.result_files import ensure_writable_dir
    from poslens.runtime.disk import choose_route

    with pytest.raises(PoslensError, match=r"not a disk size: 'nan' \(examples: 8GB") as budget:
        choose_route("auto", estimated_store_bytes=1, budget="nan")
    assert "memory" not in str(budget.value)
    link = tmp_path / "results"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(PoslensError, match=rf"{re.escape(str(link))} is a symbolic link to .*gone, which does not exist; create the folder"):
        ensure_writable_dir(link)
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_a_dangling_symlink_as_out_is_named_as_such(tmp_path):
    link = tmp_path / "results"
    link.symlink_to(tmp_path / "gone")
    result = runner.invoke(app, ["leakage", "--out", str(link)])
    assert result.exit_code == 2
    said = flat(result.output)
    assert f"{link} is a symbolic link to {tmp_path / 'gone'}, which does not exist" in said and "File exists" not in said
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_two_saves_of_one_file_at_once_both_succeed(tiny, tmp_path, monkeypatch):
    """The second save waits for the first (the folder's manifest lock), then replaces its files: no 'changed since'."""
    import threading

    from poslens.measurement import result_files

    first, second = small_measure(tiny, n_seqs=4, seq_len=16, groups=2), small_measure(tiny, n_seqs=4, seq_len=12, groups=2)
    path = tmp_path / "leakage.parquet"
    replaced, go = threading.Event(), threading.Event()
    together = result_files.atomic_write_together

    def slow_first(writes):  # the first save pauses once its files are in place, before it lists them
        done = together(writes)
        if threading.current_thread().name == "first":
            replaced.set()
            go.wait(30)
        return done

    monkeypatch.setattr(result_files, "atomic_write_together", slow_first)
    errors: list[BaseException] = []

    def save(result):
        try:
            result.save(path)
        except BaseException as error:  # noqa: BLE001 (collected for the assertion below)
            errors.append(error)

    one = threading.Thread(target=save, args=(first,), name="first")
    two = threading.Thread(target=save, args=(second,), name="second")
    one.start()
    assert replaced.wait(30)
    two.start()
    time.sleep(0.5)  # the second save is now checking the files the first has replaced but not yet listed
    go.set()
    one.join(60)
    two.join(60)
    assert errors == []
    loaded = Result.load(path)
    pd.testing.assert_frame_equal(loaded.table, second.table)  # the last save wins, whole


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_print_one_line_and_leave_no_lock_note_and_no_folder(tiny_llama_dir, tmp_path, sent):
    """Killed while the folder is locked (during loading or measuring): one 'interrupted' line, the owner note and the new folder gone."""
    out = tmp_path / "new" / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "400"}
    command = [sys.executable, "-m", "poslens.study.cli", "leakage", "--model", str(tiny_llama_dir), "--corpus", "random"]
    command += ["--n-seqs", "64", "--seq-len", "256", "--groups", "2", "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=_default_sigint)
    note = out / ".poslens.lock.owner"
    deadline = time.monotonic() + 120
    while not note.exists():
        assert process.poll() is None, process.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "the run did not lock its folder within 120 s"
        time.sleep(0.01)
    time.sleep(0.3)
    process.send_signal(sent)
    said = flat(process.communicate(timeout=60)[0])
    assert process.returncode == (143 if sent == signal.SIGTERM else 130), said[-3000:]
    name = "SIGTERM" if sent == signal.SIGTERM else "Ctrl-C"
    assert f"interrupted ({name}): no half-written file is left in {out}; run the same command again to resume" in said
    assert "Traceback" not in said and "Aborted" not in said
    assert not note.exists() and not (tmp_path / "new").exists()


def test_docs_show_the_messages_of_faults_that_were_raw_errors(tmp_path, monkeypatch):
    """Rows 31, 32, 36, 37 and 38 of docs/reliability.md: each message as the command prints it (paths as DIR)."""
    import zipfile

    from safetensors.torch import load_file

    import poslens.study.parts as parts

    llama = save_tiny_model(tmp_path / "llama", "llama")
    base = ["--model", llama, "--corpus", "random", "--n-seqs", "4", "--seq-len", "32", "--groups", "2", "--early", "8"]

    def line(*args) -> str:
        result = runner.invoke(app, [str(a) for a in args])
        if result.exit_code == 2:
            return flat(result.output).split(" Error ", 1)[1].replace(str(tmp_path), "DIR")
        assert result.exit_code == 1, result.output
        return f"error: {result.exception}".replace(str(tmp_path), "DIR")

    assert runner.invoke(app, ["leakage", *map(str, base), "--out", str(tmp_path / "U")]).exit_code == 0
    sums = tmp_path / "U" / "leakage.sums.npz"
    with np.load(sums) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["sums_format"], arrays["poslens_version"] = np.array(99), np.array("9.0.0")  # as a newer poslens writes it
    with zipfile.ZipFile(sums, "w") as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, array)
    pickled = save_tiny_model(tmp_path / "pickled", "llama")
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    (tmp_path / "results").symlink_to(tmp_path / "gone")
    second, link = save_tiny_model(tmp_path / "second", "llama", seed=1), tmp_path / "model"
    link.symlink_to(llama)
    load = parts.load_model

    def repointed(*args, **kwargs):
        link.unlink()
        link.symlink_to(second)
        return load(*args, **kwargs)

    messages = [
        line("leakage", *base, "--out", tmp_path / "U"),
        line("leakage", "--model", pickled, "--out", tmp_path / "V"),
        line("leakage", "--disk-budget", "0", "--out", tmp_path / "V"),
        line("leakage", "--out", tmp_path / "results"),
    ]
    monkeypatch.setattr(parts, "load_model", repointed)
    messages.append(line("leakage", "--model", link, *base[2:], "--out", tmp_path / "X"))
    page = PAGE.read_text()
    for message in messages:
        assert f"`{message}`" in page, f"docs/reliability.md lacks: {message}"
