"""``poslens relativize``: the cumulative attribution through the command line, on the tiny Llama.

It writes the part as one result, ``relativize.parquet``, with the modes asked for, reuses
them on a rerun with the same settings, refuses to replace them with other
settings, and refuses bad options (unknown modes, a calibration seed equal to the
measured one, sizes above the calibration corpus) with one clear message before
any model is loaded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from poslens.measurement.intervention_plots import plot_attribution, plot_loss_change
from poslens.measurement.result import Result
from poslens.mechanisms.attribution import attribution_figure
from poslens.study.cli import app
from poslens.study.part_cache import SettingsMismatchError

runner = CliRunner()
SMALL = ["--corpus", "random", "--n-seqs", "8", "--seq-len", "16", "--groups", "2", "--early", "6"]
NO_MODEL = ["--model", "no-such-model-xyz"]


def load(out) -> Result:
    """The relativize part saved in ``out``."""
    return Result.load(out / "relativize.parquet")


def message(output: str) -> str:
    """The text of typer's error box, on one line."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())


@pytest.fixture(scope="module")
def measured(tiny_llama_dir, tmp_path_factory):
    """One run: modes all and key0, calibration sizes 4 and 6 of 6 calibration sequences, with the loss."""
    out = tmp_path_factory.mktemp("relativize") / "out"
    args = [
        "relativize",
        "--model",
        str(tiny_llama_dir),
        *SMALL,
        "--modes",
        "key0,all",
        "--calibration-seqs",
        "6",
        "--calibration-sizes",
        "6,4",
        "--out",
        str(out),
    ]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    return out, args, done.output


def test_the_files_load_and_hold_the_modes_asked_for(measured):
    out, _, output = measured
    from poslens.measurement.result_files import TABLE_FORMAT_KEY
    from poslens.ownership import written_files
    from poslens.version import TABLE_FORMAT

    assert {"relativize.parquet", "relativize.csv"} <= set(written_files(out))  # poslens's, in the folder's manifest
    assert not list(out.glob("attribution*"))  # the four files of table format 1 are no more
    stamp = pq.read_schema(out / "relativize.parquet").metadata[TABLE_FORMAT_KEY]
    assert int(stamp) == TABLE_FORMAT == 2
    a = load(out)
    t = a.table
    figures = t[t["metric"].isin(["leakage_pattern", "c_res", "c_mask"])]
    assert set(figures["intervention"]) == {"none", "relativize:key0", "relativize:all", "placebo:all"}
    sizes = {edit: sorted(set(rows["calibration_size"])) for edit, rows in figures.groupby("intervention")}
    assert sizes["relativize:key0"] == [6]  # other modes: the largest size
    assert sizes["relativize:all"] == [4, 6]  # the calibration's noise
    assert sizes["placebo:all"] == [6] and sizes["none"] == [0]  # the placebo: largest size only
    assert set(t.loc[t["metric"] == "reduction_ge2", "intervention"]) == {"relativize:key0", "relativize:all", "placebo:all"}
    loss = t[t["metric"] == "loss_change"]
    assert set(loss["intervention"]) == {"relativize:all", "relativize:key0", "placebo:all", "placebo:key0-shift"}
    assert set(loss["calibration_size"]) == {6} and set(loss["kind"]) == {"difference"}
    assert set(t.loc[t["metric"] == "reduction_ge2", "layer"]) == {-1} and set(t["head"]) == {-1}
    assert a.meta["settings"]["relativize_modes"] == ["key0", "all"] and a.meta["settings"]["calibration_sizes"] == [4, 6]
    # the calibration corpus: the measured source and length, 4 and 6 sequences, seed --seed + 1
    calibration = a.meta["calibration"]["all@6"]["calibration"]
    assert calibration["seed"] == 1 and calibration["n_seqs"] == 6 and calibration["seq_len"] == 16
    assert a.meta["calibration"]["all@4"]["calibration"]["n_seqs"] == 4 and "key0@4" not in a.meta["calibration"]
    # every layer of the tiny Llama (3), both windows, per mode and size; r per mode and size
    levels = t[(t["metric"] == "leakage_pattern") & (t["kind"] == "level") & (t["layer"] >= 0)]
    assert len(levels) == 3 * 2 * (1 + 1 + 2 + 1)  # none, key0, all at two sizes, the placebo
    assert np.isfinite(attribution_figure(a, "all")["value"]) and np.isfinite(attribution_figure(a, "key0", "early")["value"])
    # the summary printed: one r row per mode, size and window, and the loss over all positions per edit
    assert "relativize:key0" in output and "placebo:all" in output and "calibration size" in output
    # the figure draws what was saved
    fig = plot_attribution(t)
    assert [t.name for t in fig.data] == [
        "unedited",
        "relativized: every column (n = 6)",
        "relativized: key 0 only (n = 6)",
        "placebo: relative, matched norm (n = 6)",
    ]
    assert len(plot_loss_change(t).data) == 4


def test_the_unedited_rows_match_the_leakage_command(measured, tiny_llama_dir, tmp_path):
    """The 'none' levels are the ordinary measurement of the same corpus (an independent command computes them)."""
    out, _, _ = measured
    leak = tmp_path / "leak"
    done = runner.invoke(app, ["leakage", "--model", str(tiny_llama_dir), *SMALL, "--out", str(leak)])
    assert done.exit_code == 0, done.output
    from poslens.measurement.result import Result

    base = Result.load(leak / "leakage.parquet").table
    a = load(out).table
    for layer in (0, 1, 2):
        ours = a[(a["intervention"] == "none") & (a["metric"] == "c_res") & (a["query_window"] == "all") & (a["layer"] == layer)]
        theirs = base[(base["metric"] == "c_res") & (base["query_window"] == "all") & (base["layer"] == layer) & (base["head"] == -1)]
        np.testing.assert_allclose(ours["value"].to_numpy(), theirs["value"].to_numpy(), rtol=1e-9, atol=1e-12)


def test_a_rerun_reuses_the_part_and_other_settings_are_refused(measured):
    out, args, _ = measured
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "reusing" in again.output and "wrote nothing" in again.output
    other = runner.invoke(app, [*[a if a != "key0,all" else "key0" for a in args]])
    assert isinstance(other.exception, SettingsMismatchError), other.output
    assert "--modes ['key0', 'all'] there, ['key0'] now" in message(str(other.exception))
    assert set(load(out).table["intervention"]) == {"none", "relativize:key0", "relativize:all", "placebo:all", "placebo:key0-shift"}  # kept


@pytest.mark.parametrize(
    "extra, expected",
    [
        (
            ["--modes", "all,sink"],
            "Invalid value for '--modes': 'all,sink' is not a comma list of relativization modes; choose from all, key0, all-but-key0",
        ),
        (["--modes", ","], "Invalid value for '--modes'"),
        (["--modes", "key0,key0"], "names a mode twice"),
        (
            ["--seed", "3", "--calibration-seed", "3"],
            "Invalid value for '--calibration-seed': --calibration-seed 3 is the measured corpus's --seed: the calibration corpus",
        ),
        (["--calibration-sizes", "4,x"], "Invalid value for '--calibration-sizes': '4,x' is not a comma list of calibration sizes"),
        (["--calibration-sizes", "1"], "Invalid value for '--calibration-sizes'"),
        (
            ["--calibration-seqs", "6", "--calibration-sizes", "4,8"],
            "Invalid value for '--calibration-sizes': 8 is more than the 6 sequences of the calibration corpus",
        ),
        (["--n-seqs", "8", "--calibration-sizes", "12"], "12 is more than the 8 sequences"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_bad_options_are_refused_before_loading(extra, expected, tmp_path):
    out = tmp_path / "out"
    done = runner.invoke(app, ["relativize", *NO_MODEL, "--n-seqs", "8", "--groups", "2", *extra, "--out", str(out)])
    assert done.exit_code == 2, done.output
    text = message(done.output)
    assert expected in text, text
    assert "Traceback" not in done.output and "unknown model" not in text
    assert not out.exists()


def test_equal_seeds_print_one_message_and_no_traceback(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "COLUMNS": "400"}
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "poslens.study.cli",
            "relativize",
            *NO_MODEL,
            "--groups",
            "2",
            "--calibration-seed",
            "0",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    said = process.stdout + process.stderr
    assert process.returncode == 2 and "Traceback" not in said, said
    assert "--calibration-seed 0 is the measured corpus's --seed" in message(said)


def test_the_python_api_refuses_equal_seeds_before_loading(tmp_path):
    from poslens.errors import InputError
    from poslens.study.parts import Settings, Study

    study = Study(Settings(model="no-such-model-xyz", corpus="random", seed=5, calibration_seed=5), tmp_path / "out")
    with pytest.raises(InputError, match=r"--calibration-seed 5 is the measured corpus's --seed"):
        study.relativize()


def test_no_loss_skips_the_loss_and_one_mode_runs_alone(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    done = runner.invoke(
        app,
        [
            "relativize",
            "--model",
            str(tiny_llama_dir),
            "--corpus",
            "random",
            "--n-seqs",
            "4",
            "--seq-len",
            "12",
            "--groups",
            "2",
            "--early",
            "4",
            "--modes",
            "key0",
            "--no-loss",
            "--out",
            str(out),
        ],
    )
    assert done.exit_code == 0, done.output
    a = load(out)
    assert set(a.table["intervention"]) == {"none", "relativize:key0"}  # no placebo without mode all
    assert sorted(set(a.table.loc[a.table["metric"] == "reduction_ge2", "calibration_size"])) == [2, 4]  # half and all of --n-seqs
    assert "loss_change" not in set(a.table["metric"]) and a.meta["settings"]["relativize_loss"] is False
    assert "change in next-token loss" not in done.output
    with pytest.raises(ValueError, match="no loss_change rows"):
        plot_loss_change(a.table)


def test_a_corpus_too_small_for_two_disjoint_corpora_is_refused_in_words(tiny_llama_dir, tmp_path):
    # the measured corpus fits (15 windows of 15 bytes, 8 asked for), but not beside a disjoint calibration corpus
    # of as many: one message naming both counts, no traceback
    text = tmp_path / "small.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 5)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "COLUMNS": "400"}
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "poslens.study.cli",
            "relativize",
            "--model",
            str(tiny_llama_dir),
            "--corpus",
            str(text),
            "--n-seqs",
            "8",
            "--seq-len",
            "16",
            "--groups",
            "2",
            "--early",
            "6",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    said = process.stdout + process.stderr
    assert process.returncode != 0 and "Traceback" not in said, said
    assert ("the calibration corpus must be disjoint from the measured one, so the corpus must hold 8 + 8 = 16 windows of 16 tokens") in message(
        said
    ), said


def test_a_sliding_window_model_says_the_key0_modes_act_only_on_rows_below_it(tiny_mistral_dir, tmp_path):
    """Under a window of 8 (every layer of the tiny Mistral) key 0 is out of view from row 8 on: the command, the part and the report say so."""
    from poslens.study.report_figures import claim_figures

    out = tmp_path / "out"
    args = ["relativize", "--model", str(tiny_mistral_dir), *SMALL, "--modes", "key0,all-but-key0", "--no-loss", "--out", str(out)]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    said = "key 0 is visible only to rows i < W under a sliding window, so the key-0 term of mode 'key0' acts only on rows i < 8 in layers 0, 1, 2"
    assert f"note: {said}" in " ".join(done.output.split())
    attribution = load(out)
    assert attribution.meta["key0_rows"] == {"modes": ["key0"], "windows": {"8": [0, 1, 2]}, "note": said}
    captions = [caption for _, caption in claim_figures({"relativize": attribution}, {"relativize_seqs": 8, "relativize_len": 16})["C7"]]
    assert any(f"Note: {said}." in caption for caption in captions)
    full = runner.invoke(
        app, ["relativize", "--model", str(tiny_mistral_dir), *SMALL, "--modes", "all-but-key0", "--no-loss", "--out", str(tmp_path / "b")]
    )
    assert full.exit_code == 0 and "note: key 0" not in full.output  # no mode with the key-0 term: nothing to say


def test_a_relativize_parquet_poslens_did_not_write_is_refused_as_result_save_refuses_it(tiny_llama_dir, tmp_path):
    """The part goes through Result.save's ownership check: a user's file where it would write is refused with the very
    error Result.save gives, before any model loads, and no byte changes; a user's attribution.parquet (the file the
    old layout replaced without asking) is not touched either."""
    import pandas as pd

    from poslens.errors import OutputConflictError

    out = tmp_path / "out"
    out.mkdir()
    mine = out / "relativize.parquet"
    pd.DataFrame({"x": [1.0]}).to_parquet(mine)
    (out / "attribution.parquet").write_bytes(b"someone else's table")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(OutputConflictError) as by_save:
        Result(pd.DataFrame({"metric": ["c_res"], "value": [0.1]})).save(mine)
    done = runner.invoke(app, ["relativize", "--model", str(tiny_llama_dir), *SMALL, "--modes", "key0", "--no-loss", "--out", str(out)])
    assert isinstance(done.exception, OutputConflictError), done.output
    assert str(done.exception) == str(by_save.value) and "poslens did not write it" in str(done.exception)
    assert {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")} == before


FINDINGS = Path(__file__).resolve().parents[2] / "tests" / "data" / "findings_format1"  # a run folder of table format 1 (0.3.0)
OLD_FILES = ("attribution.json", "attribution.parquet", "attribution_summary.parquet", "attribution_loss.parquet")


def test_the_old_layout_is_refused_naming_both_formats_read_by_claims_and_replaced_under_overwrite(tiny_llama_dir, tmp_path):
    """A folder holding the part as an older poslens wrote it (the four attribution* files of tests/data/findings_format1, 0.3.0):
    `relativize` refuses it naming table format 1 and 2 and changes nothing; `claims` reads it (C7's figure is the
    old summary's r, read here with pandas alone); under --overwrite the old files poslens wrote are removed and the
    part is measured as relativize.parquet, a file of the user's beside them kept."""
    import csv
    import shutil

    import pandas as pd

    from poslens.errors import OldLayoutError
    from poslens.ownership import record_written, written_files

    out = tmp_path / "out"
    out.mkdir()
    for name in OLD_FILES:
        shutil.copy(FINDINGS / name, out / name)
    record_written([out / name for name in OLD_FILES])  # as the old Attribution.save's caller listed them
    (out / "attribution_notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")}
    args = ["relativize", "--model", str(tiny_llama_dir), *SMALL, "--modes", "key0", "--no-loss", "--out", str(out)]
    refused = runner.invoke(app, args)
    assert isinstance(refused.exception, OldLayoutError), refused.output
    said = message(str(refused.exception))
    assert "old layout of table format 1 (attribution.json, attribution.parquet" in said and "relativize.parquet (table format 2)" in said
    assert "--overwrite" in said
    assert {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")} == before

    read = runner.invoke(app, ["claims", "--out", str(out)])
    assert read.exit_code == 0, read.output
    with open(out / "claims.csv") as f:
        c7 = next(row for row in csv.DictReader(f) if row["claim"] == "C7")
    s = pd.read_parquet(FINDINGS / "attribution_summary.parquet")
    s = s[(s["mode"] == "all") & (s["query_window"] == "all")]
    assert float(c7["figure"]) == float(s.loc[s["calibration_size"].idxmax(), "value"])

    again = runner.invoke(app, [*args, "--overwrite"])
    assert again.exit_code == 0, again.output
    assert "is the old layout of the part" in again.output
    assert not any((out / name).exists() for name in OLD_FILES) and (out / "attribution_notes.txt").read_text() == "mine"
    assert "relativize.parquet" in written_files(out) and set(load(out).table["intervention"]) == {"none", "relativize:key0"}
