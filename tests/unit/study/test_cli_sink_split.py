"""``poslens sink-split``: the command runs the split on the leakage part's corpus, prints both readouts and C8, and saves the part."""

from __future__ import annotations

from typer.testing import CliRunner

from poslens.measurement.result import Result
from poslens.study.cli import app

runner = CliRunner()


def test_the_command_prints_both_readouts_and_c8_and_saves_the_part(tiny_llama_dir, tmp_path):
    out = tmp_path / "study"
    args = ["sink-split", "--model", tiny_llama_dir, "--corpus", "random", "--n-seqs", "12", "--seq-len", "16", "--groups", "4"]
    done = runner.invoke(app, [str(a) for a in [*args, "--early", "4", "--tau", "0.05", "--split-offset", "4", "--out", out]])
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "V (unedited code)" in text and "R² (content)" in text and "C8 (read on V):" in text
    saved = Result.load(out / "sink-split.parquet")
    assert saved.meta["settings"]["split_offset"] == 4 and saved.meta["c8"]["verdict"] in text
    assert {"V", "R2", "loss"} == set(saved.table["readout"])
    again = runner.invoke(app, [str(a) for a in [*args, "--early", "4", "--tau", "0.05", "--split-offset", "4", "--out", out]])
    assert again.exit_code == 0 and "reusing" in again.output  # the part is reused, not measured again


def test_a_negative_offset_is_refused_by_the_command_line(tiny_llama_dir, tmp_path):
    done = runner.invoke(app, ["sink-split", "--model", str(tiny_llama_dir), "--split-offset", "-1", "--out", str(tmp_path / "x")])
    assert done.exit_code == 2 and "--split-offset" in done.output


def test_the_saved_part_keeps_the_offset_it_ran_at(tiny_llama_dir, tmp_path):
    from poslens.mechanisms.sink_split import split_offset_of

    out = tmp_path / "study"
    args = ["sink-split", "--model", tiny_llama_dir, "--corpus", "random", "--n-seqs", "12", "--seq-len", "16", "--groups", "4"]
    done = runner.invoke(app, [str(a) for a in [*args, "--early", "4", "--tau", "0.05", "--out", out]])
    assert done.exit_code == 0, done.output
    saved = Result.load(out / "sink-split.parquet")
    assert saved.meta["settings"]["split_offset"] is None and split_offset_of(saved) == saved.meta["split_settings"]["offset"] == 64


def test_a_split_without_sink_reading_heads_leaves_c8_not_measured(tiny_llama_dir, tmp_path):
    out = tmp_path / "study"
    args = ["sink-split", "--model", tiny_llama_dir, "--corpus", "random", "--n-seqs", "12", "--seq-len", "16", "--groups", "4", "--early", "4"]
    done = runner.invoke(app, [str(a) for a in [*args, "--tau", "1.0", "--out", out]])  # no head reads the sink at τ = 1
    assert done.exit_code == 0, done.output
    assert "no head is sink-reading" in " ".join(done.output.split())
    claims = runner.invoke(app, ["claims", "--out", str(out)])
    assert claims.exit_code == 0, claims.output
    import pandas as pd

    table = pd.read_csv(out / "claims.csv").set_index("claim")
    assert table.loc["C8", "verdict"] == "not measured"
