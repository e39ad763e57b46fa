"""Options are checked when the command line is parsed, named as typed, and a failed run leaves no empty --out behind.

The commands name a model that does not exist (``no-such-model-xyz``): an
option error must come first, before anything is loaded, and ``--out`` must
not be created. Failures after loading use a tiny Llama saved to disk.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from poslens.study.cli import app

runner = CliRunner()
NO_MODEL = ["--model", "no-such-model-xyz"]
SMALL = ["--corpus", "random", "--n-seqs", "4", "--seq-len", "16", "--groups", "2"]


def message(output: str) -> str:
    """The text of typer's error box, on one line."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())


@pytest.mark.parametrize(
    "args, expected",
    [
        (["report", *NO_MODEL, "--groups", "0"], "Invalid value for '--groups': Input should be greater than or equal to 2"),
        (["report", *NO_MODEL, "--groups", "-2"], "Invalid value for '--groups': Input should be greater than or equal to 2"),
        (["report", *NO_MODEL, "--n-seqs", "0"], "Invalid value for '--n-seqs': Input should be greater than or equal to 1"),
        (["report", *NO_MODEL, "--seq-len", "1"], "Invalid value for '--seq-len': Input should be greater than or equal to 2"),
        (["report", *NO_MODEL, "--fingerprint-seqs", "0"], "Invalid value for '--fingerprint-seqs'"),
        (["report", *NO_MODEL, "--compare-len", "1"], "Invalid value for '--compare-len'"),
        (["leakage", *NO_MODEL, "--groups", "0"], "Invalid value for '--groups': Input should be greater than or equal to 2"),
        (
            ["leakage", *NO_MODEL, "--n-seqs", "3", "--groups", "4"],
            "Invalid value for '--n-seqs': 3 sequences cannot fill --groups 4; use --n-seqs 4 or more, or fewer --groups",
        ),
        (
            ["sinks", *NO_MODEL, "--n-seqs", "4"],  # the default --groups is 8
            "Invalid value for '--n-seqs': 4 sequences cannot fill --groups 8; use --n-seqs 8 or more, or fewer --groups",
        ),
        (
            ["fingerprint", *NO_MODEL, "--fingerprint-seqs", "2"],
            "Invalid value for '--fingerprint-seqs': 2 sequences cannot fill --groups 8; use --fingerprint-seqs 8 or more, or fewer --groups",
        ),
        (["compare", "--n-seqs", "2"], "Invalid value for '--n-seqs': 2 sequences cannot fill --groups 8; use --n-seqs 8 or more, or fewer --groups"),
        (
            ["report", *NO_MODEL, "--n-seqs", "4"],
            "Invalid value for '--n-seqs': 4 sequences cannot fill --groups 8; use --n-seqs 8 or more, or fewer --groups",
        ),
        (
            ["report", *NO_MODEL, "--compare-seqs", "4"],
            "Invalid value for '--compare-seqs': 4 sequences cannot fill --groups 8; use --compare-seqs 8 or more, or fewer --groups",
        ),
        (
            ["leakage", *NO_MODEL, "--bos", "first"],
            "Invalid value for '--bos': 'first' is not bos, none or token:<id or string> (an id ≥ 0, or a string that is one token)",
        ),
        (["leakage", *NO_MODEL, "--bos", "token:"], "Invalid value for '--bos': 'token:' is not bos, none"),
        (["leakage", *NO_MODEL, "--bos", "token:-1"], "Invalid value for '--bos': 'token:-1' is not bos, none"),
        (
            ["bos-swap", *NO_MODEL, "--replacement", "zero", "--replacement", "ones"],
            "Invalid value for '--replacement': unknown BOS replacement 'ones'; choose from mean, zero, noise, token:<id or string>",
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_options_are_refused_before_loading_with_their_own_name(args, expected, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = message(result.output)
    assert expected in text
    assert "unknown model" not in text and "position0" not in text and "n_seqs" not in text
    assert not out.exists()


def test_report_with_enough_sequences_for_its_groups_is_not_refused(tmp_path):
    # The same shape of settings as a refused one, but consistent: it gets past the options to the (missing) model.
    result = runner.invoke(
        app, ["report", *NO_MODEL, "--n-seqs", "4", "--groups", "4", "--fingerprint-seqs", "4", "--skip-compare", "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 1 and "unknown model 'no-such-model-xyz'" in str(result.exception)


@pytest.mark.parametrize("bos", ["bos", "none", "token:7", "token:<s>"])
def test_valid_bos_forms_pass_the_parse(bos, tmp_path):
    result = runner.invoke(app, ["leakage", *NO_MODEL, "--bos", bos, "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "unknown model" in str(result.exception)


def test_failed_run_removes_the_out_folders_it_created(tiny_llama_dir, tmp_path):
    out = tmp_path / "new" / "deeper"
    result = runner.invoke(app, ["leakage", "--model", str(tiny_llama_dir), *SMALL, "--bos", "token:99999", "--out", str(out)])
    assert result.exit_code == 1 and "outside the vocabulary" in str(result.exception)  # failed after loading
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("holds_a_file", [False, True], ids=["empty", "not-empty"])
def test_failed_run_keeps_an_out_folder_that_existed(holds_a_file, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    if holds_a_file:
        (out / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["leakage", *NO_MODEL, "--out", str(out)])
    assert result.exit_code == 1
    assert out.is_dir() and (not holds_a_file or (out / "notes.txt").read_text() == "mine")


def test_out_naming_a_file_says_it_is_a_file(tmp_path):
    file = tmp_path / "results.csv"
    file.write_text("a,b\n")
    for command in (["leakage", *NO_MODEL], ["report", *NO_MODEL]):
        result = runner.invoke(app, [*command, "--out", str(file)])
        assert result.exit_code == 2, result.output
        assert (
            f"Invalid value for '--out': cannot write results to {file}: it is a file, not a folder; choose an output folder you can write to"
        ) in message(result.output)
    assert file.read_text() == "a,b\n"


def test_ensure_writable_dir_on_a_file(tmp_path):
    from poslens.measurement.result_files import OutputNotWritableError, ensure_writable_dir

    file = tmp_path / "taken"
    file.touch()
    with pytest.raises(OutputNotWritableError, match="it is a file, not a folder"):
        ensure_writable_dir(Path(file))


# ---------------------------------------------------------------- the entry point: poslens errors in one line, bugs with their traceback (issue 38)


@pytest.fixture
def entry_point(monkeypatch):
    """``poslens.study.cli.run`` with ``sys.argv`` set; SIGTERM's handler is put back after, and the console is wide."""
    import signal
    import sys

    from poslens.study import cli

    monkeypatch.setattr(cli.console, "width", 1000)
    previous = signal.getsignal(signal.SIGTERM)

    def call(*args: str) -> None:
        monkeypatch.setattr(sys, "argv", ["poslens", *args])
        try:
            cli.run()
        finally:
            signal.signal(signal.SIGTERM, previous)

    return call


def test_a_user_error_prints_one_error_line_and_exits_1(entry_point, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        entry_point("leakage", *NO_MODEL, "--out", str(tmp_path / "out"))
    assert stopped.value.code == 1
    printed = capsys.readouterr()
    lines = [line for line in printed.out.splitlines() if line.strip()]
    assert lines[-1].startswith("error: unknown model 'no-such-model-xyz'."), printed.out
    assert "Traceback" not in printed.out + printed.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bug", [ValueError, KeyError, RuntimeError, OSError])
def test_an_internal_bug_is_not_turned_into_an_error_line(bug, entry_point, tmp_path, capsys, monkeypatch):
    # the exceptions run() used to print as one line: a plain one raised inside a part is a bug, and escapes run() as it is
    from poslens.study.parts import Study

    def broken(self):
        raise bug("a bug inside the leakage part")

    monkeypatch.setattr(Study, "leakage", broken)
    with pytest.raises(bug, match="a bug inside the leakage part"):
        entry_point("leakage", *NO_MODEL, "--out", str(tmp_path / "out"))
    assert "error:" not in capsys.readouterr().out
    assert not (tmp_path / "out").exists()  # the folder the run created still goes


@pytest.mark.parametrize("kind", ["host", "torch"])
def test_running_out_of_memory_is_one_line_with_the_fix(kind, entry_point, tmp_path, capsys, monkeypatch):
    # not a bug but a resource: said in one line, with the options that lower the memory
    import torch

    from poslens.study.parts import Study

    def out_of_memory(self):
        raise MemoryError("cannot allocate") if kind == "host" else torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")

    monkeypatch.setattr(Study, "leakage", out_of_memory)
    with pytest.raises(SystemExit) as stopped:
        entry_point("leakage", *NO_MODEL, "--out", str(tmp_path / "out"))
    assert stopped.value.code == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert "error: out of memory" in printed and "--max-memory" in printed and "--batch-size" in printed
    assert "Traceback" not in printed


def test_the_command_shows_a_bugs_traceback_and_exits_non_zero(tmp_path):
    # the same through a real process: Python prints the traceback of what run() let through
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from poslens.study import cli\n"
        "from poslens.study.parts import Study\n"
        "def broken(self):\n"
        "    raise ValueError('a bug inside the leakage part')\n"
        "Study.leakage = broken\n"
        "sys.argv = ['poslens', *sys.argv[1:]]\n"
        "cli.run()\n"
    )
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, "leakage", *NO_MODEL, "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "ValueError: a bug inside the leakage part" in done.stderr
    assert "error:" not in done.stdout
