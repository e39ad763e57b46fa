"""The command's warnings: one line each, once per run, in the command's flags, with no source path; the API keeps its own."""

from __future__ import annotations

import sys
import warnings

import pytest
from typer.testing import CliRunner

import poslens
from poslens.errors import AdvisedWarning
from poslens.measurement.arguments import SmallGroupsWarning
from poslens.study.cli import app
from poslens.study.cli_warnings import command_warnings, flag_spelling

runner = CliRunner()


def warning_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "warning" in line.lower()]


def test_small_groups_warn_once_in_the_commands_flags_without_a_path(tiny_llama_dir, tmp_path):
    before = warnings.showwarning
    args = ["sinks", "--model", str(tiny_llama_dir), "--corpus", "random", "--n-seqs", "6", "--seq-len", "16", "--groups", "4"]
    done = runner.invoke(app, [*args, "--early", "4", "--out", str(tmp_path / "a")])
    assert done.exit_code == 0, done.output
    lines = warning_lines(done.output)
    assert len(lines) == 1, lines
    assert lines[0].startswith("warning: 6 sequences in 4 groups: 2 of the groups hold a single sequence")
    assert lines[0].endswith("measure at least 8 sequences (--n-seqs 8), or pass --groups 3")
    assert ".py:" not in done.output and "SmallGroupsWarning" not in done.output and "n_seqs=" not in done.output
    assert warnings.showwarning is before  # the command's printer is gone with the command


def test_a_part_that_measures_three_corpora_warns_once_in_its_own_flag(tiny_llama_dir, tmp_path):
    # relativize measures its corpus and two calibration corpora, each in 4 groups of too few; its --n-seqs is relativize_seqs
    args = ["relativize", "--model", str(tiny_llama_dir), "--corpus", "random", "--n-seqs", "6", "--seq-len", "16", "--groups", "4"]
    done = runner.invoke(app, [*args, "--early", "4", "--modes", "all", "--no-loss", "--out", str(tmp_path / "b")])
    assert done.exit_code == 0, done.output
    lines = warning_lines(done.output)
    assert lines == [line for line in lines if line.startswith("warning: ")] and len(lines) == len(set(lines)), lines
    assert any("6 sequences in 4 groups" in line and "(--n-seqs 8), or pass --groups 3" in line for line in lines), lines
    assert ".py:" not in done.output and "relativize_seqs" not in done.output


def test_the_api_keeps_its_ordinary_warning_in_its_own_spelling(tiny_llama_dir):
    model = poslens.load_model(str(tiny_llama_dir))
    corpus = poslens.make_corpus(model, "random", n_seqs=6, seq_len=16, seed=0)
    with pytest.warns(SmallGroupsWarning, match=r"\(n_seqs=8\), or pass groups=3$"):
        poslens.measure(model, corpus, groups=4, early=4, probe=False, progress=False)


def test_the_flag_is_the_option_that_had_the_value_the_warning_found():
    # zoo-measure: --n-seqs for the measured parts, --relativize-seqs for the relativization
    options = {"n_seqs": ("--n-seqs", 16), "relativize_seqs": ("--relativize-seqs", 6), "groups": ("--groups", 4), "seq_len": ("--seq-len", None)}
    assert flag_spelling("n_seqs", 6, options) == "--relativize-seqs"
    assert flag_spelling("n_seqs", 16, options) == "--n-seqs"
    assert flag_spelling("n_seqs", 7, options) == "--n-seqs"  # no option had it: the one of the same name
    assert flag_spelling("seq_len", 64, options) == "--seq-len"  # the family's T, not typed
    assert flag_spelling("groups", 4, options) == "--groups"
    assert flag_spelling("batch_size", 4, options) is None  # no such option: the API's spelling stays
    both = {"n_seqs": ("--n-seqs", 8), "relativize_seqs": ("--relativize-seqs", 8)}
    assert flag_spelling("n_seqs", 8, both) == "--n-seqs or --relativize-seqs"


def test_each_distinct_message_prints_once_and_silenced_ones_not_at_all(capsys):
    from poslens.errors import EarlyWindowWarning, UnseenOffsetWarning

    with command_warnings() as printer:
        for _ in range(6):
            warnings.warn(AdvisedWarning("use {n_seqs}", {"n_seqs": 16}), stacklevel=1)
            warnings.warn("a library's\nwarning over two lines", FutureWarning, stacklevel=1)
        warnings.warn(AdvisedWarning("use {n_seqs}", {"n_seqs": 32}), stacklevel=1)
        warnings.warn("the command's own note says it", EarlyWindowWarning, stacklevel=1)
        warnings.warn("the part's own warning says it", UnseenOffsetWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert err.splitlines() == ["warning: use n_seqs=16", "warning: a library's warning over two lines", "warning: use n_seqs=32"]
    assert len(printer.shown) == 3 and sys.stderr is not None
