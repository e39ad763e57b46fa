"""``poslens zoo-measure``'s warnings: each once, in the command's flags (--relativize-seqs, not n_seqs), with no source path.

zoo-measure measures every run with several parts and the relativization on its own corpora; a corpus that
leaves a group with one sequence used to warn once per part and run, with the file and line, naming n_seqs.
"""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from poslens.study.cli import app

runner = CliRunner()
FAMILY = ["--task", "bigram-backcopy", "--steps", "2", "--seq-len", "32", "--width", "16", "--depth", "2", "--heads", "2",
          "--batch-size", "4", "--eval-every", "2", "--eval-seqs", "4", "--device", "cpu", "--seeds", "0,1"]  # fmt: skip


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_zoo_measure_warns_once_in_its_own_flags(tmp_path):
    family = tmp_path / "family"
    trained = runner.invoke(app, ["zoo", *FAMILY, "--out", str(family)])
    assert trained.exit_code == 0, trained.output
    args = ["zoo-measure", "--zoo", str(family), "--out", str(tmp_path / "tables"), "--work", str(tmp_path / "work")]
    done = runner.invoke(app, [*args, "--n-seqs", "8", "--groups", "4", "--early", "8", "--relativize-seqs", "6", "--replacement", "zero"])
    assert done.exit_code == 0, done.output
    lines = [line for line in done.output.splitlines() if line.startswith("warning: ")]  # the Python warnings' lines
    small = [line for line in lines if "sequences in 4 groups" in line]
    assert len(small) == 1, lines  # the relativization's corpora (6 sequences): once for the three runs and their calibrations
    assert small[0].startswith("warning: 6 sequences in 4 groups") and small[0].endswith("(--relativize-seqs 8), or pass --groups 3")
    assert len(lines) == len(set(lines)), lines
    assert ".py:" not in done.output and "n_seqs=" not in done.output and "SmallGroupsWarning" not in done.output
