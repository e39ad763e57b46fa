"""``poslens heads``: per-head figures of a results folder, equal to Result.heads(metric, window, intervals=True) on it.

A real folder is made here by the ``sinks`` command on the tiny Llama of the fixtures (it writes the leakage
and sinks parts); the command's CSV is read back at full precision and compared with the library's answer on
the same files, bit for bit, for each filter; the findings run's folder (docs/findings_data) is read too.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from poslens.measurement.result import Result
from poslens.measurement.table import DEFAULT_QUERY_WINDOW
from poslens.mechanisms.sinks import sink_reading_heads
from poslens.study.cli import app
from poslens.study.heads_command import default_query_window

ROOT = Path(__file__).resolve().parents[3]
FINDINGS = ROOT / "docs" / "findings_data"
runner = CliRunner()
TAU = 0.1


@pytest.fixture(scope="module")
def folder(tiny_llama_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("heads") / "study"
    args = ["sinks", "--model", str(tiny_llama_dir), "--corpus", "random", "--n-seqs", "8", "--seq-len", "16", "--groups", "4"]
    done = runner.invoke(app, [*args, "--early", "4", "--tau", str(TAU), "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "'all' (layer −1): every layer's heads together, the sum of the rows above" in " ".join(done.output.split())
    return out


def read_exactly(source) -> pd.DataFrame:
    """A CSV the command wrote, each figure parsed by Python's float (correctly rounded: the repr read back is the number)."""
    frame = pd.read_csv(source, dtype=str)
    return frame.astype({"layer": int, "head": int}).assign(**{c: frame[c].map(float) for c in ("value", "ci_low", "ci_high")})


def heads_csv(*args: str) -> pd.DataFrame:
    done = runner.invoke(app, ["heads", *args, "--csv", "-"])
    assert done.exit_code == 0, done.output
    return read_exactly(io.StringIO(done.stdout))


def flat(text: str) -> str:
    """The output's words on one line: the error box's characters and the line breaks out."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def library(path: Path, metric: str = "c_res", window: str = DEFAULT_QUERY_WINDOW) -> pd.DataFrame:
    return Result.load(path, sums=False).heads(metric, window, intervals=True)


def same(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True), check_exact=True, check_dtype=False)


def test_every_head_equals_result_heads_on_the_same_folder(folder):
    expected = library(folder / "leakage.parquet")
    assert len(expected) == 3 * 4  # 3 layers × 4 heads
    same(heads_csv("--out", str(folder)), expected)
    same(heads_csv("--out", str(folder), "--metric", "c_mask", "--query-window", "all"), library(folder / "leakage.parquet", "c_mask", "all"))


def test_sink_score_comes_from_the_sinks_part(folder):
    same(heads_csv("--out", str(folder), "--metric", "sink_score", "--query-window", "all"), library(folder / "sinks.parquet", "sink_score", "all"))


def test_the_filters_keep_the_rows_they_say(folder):
    expected = library(folder / "leakage.parquet")
    same(heads_csv("--out", str(folder), "--layer", "0", "--layer", "2"), expected[expected["layer"].isin([0, 2])])
    top = expected.assign(size=expected["value"].abs()).sort_values("size", ascending=False, kind="stable").drop(columns="size").head(3)
    same(heads_csv("--out", str(folder), "--top-k", "3"), top)
    leakage = Result.load(folder / "leakage.parquet", sums=False)

    def reading(tau: float) -> pd.DataFrame:
        chosen = set(sink_reading_heads(leakage, tau))
        return expected[[(layer, head) in chosen for layer, head in zip(expected["layer"], expected["head"], strict=True)]]

    same(heads_csv("--out", str(folder), "--sink-reading"), reading(TAU))  # τ: the one the sinks part recorded
    median = float(library(folder / "sinks.parquet", "sink_score", "all")["value"].median())  # a random model's heads differ little
    assert 0 < len(reading(median)) < len(expected)  # the filter keeps some heads and drops some: it can fail
    same(heads_csv("--out", str(folder), "--sink-reading", "--tau", repr(median)), reading(median))
    assert heads_csv("--out", str(folder), "--sink-reading", "--tau", "1").empty


def test_the_printed_table_names_the_metric_window_and_file_and_writes_csv(folder, tmp_path):
    target = tmp_path / "heads.csv"
    done = runner.invoke(app, ["heads", "--out", str(folder), "--top-k", "1", "--csv", str(target)])
    assert done.exit_code == 0, done.output
    best = library(folder / "leakage.parquet").assign(size=lambda f: f["value"].abs()).sort_values("size", ascending=False).iloc[0]
    text = " ".join(done.output.split())
    assert f"c_res per head, {DEFAULT_QUERY_WINDOW} queries, value and 95% interval: 1 head of {folder / 'leakage.parquet'}" in text
    assert f"{best['value']:.4g}" in text and f"{best['ci_low']:.4g}" in text and f"wrote {target}" in text
    assert read_exactly(target)["value"].tolist() == [best["value"]]


def test_the_findings_folder_reads_as_the_library_reads_it():
    expected = library(FINDINGS / "leakage.parquet")
    assert len(expected) == 30 * 9  # SmolLM2-135M: 30 layers × 9 heads
    same(heads_csv("--out", str(FINDINGS)), expected)
    key0 = heads_csv("--out", str(FINDINGS), "--metric", "key0_mass", "--query-window", "all")
    same(key0, library(FINDINGS / "leakage.parquet", "key0_mass", "all"))


def test_the_default_window_is_the_librarys_and_help_shows_it():
    assert default_query_window() == DEFAULT_QUERY_WINDOW
    done = runner.invoke(app, ["heads", "--help"], env={"COLUMNS": "200"})
    assert f"[default: {DEFAULT_QUERY_WINDOW}]" in " ".join(done.output.split())


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--metric", "c_rez"], "unknown metric 'c_rez' (did you mean 'c_res'?)"),
        (["--query-window", "late"], "unknown window 'late'"),
        (["--layer", "7"], "layer 7 is not in the leakage part"),
        (["--part", "compare"], "compare.parquet is not there"),
    ],
)
def test_bad_options_name_the_fix(folder, args, expected):
    done = runner.invoke(app, ["heads", "--out", str(folder), *args])
    assert done.exit_code == 2 and expected in flat(done.output), done.output


def test_a_folder_without_tables_is_refused(tmp_path):
    done = runner.invoke(app, ["heads", "--out", str(tmp_path)])
    assert done.exit_code == 2 and "holds none of the parts' tables with per-head rows" in flat(done.output)
