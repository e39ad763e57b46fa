"""``poslens relativize``: the cumulative attribution through the command line, on the tiny Llama.

It writes the four files of ``Attribution.save`` with the modes asked for, reuses
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

import numpy as np
import pytest
from typer.testing import CliRunner

from poslens.measurement.intervention_plots import plot_attribution, plot_loss_change
from poslens.mechanisms.attribution import Attribution
from poslens.study.cli import app
from poslens.study.part_cache import SettingsMismatchError
from poslens.study.parts import RELATIVIZE_FILES

runner = CliRunner()
SMALL = ["--corpus", "random", "--n-seqs", "8", "--seq-len", "16", "--groups", "2", "--early", "6"]
NO_MODEL = ["--model", "no-such-model-xyz"]


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
    for name in RELATIVIZE_FILES:
        assert (out / name).exists(), name
    a = Attribution.load(out)
    assert set(a.table["mode"]) == {"none", "key0", "all", "placebo:all"}
    assert sorted(set(a.table.loc[a.table["mode"] == "key0", "calibration_size"])) == [6]  # other modes: the largest size
    assert sorted(set(a.table.loc[a.table["mode"] == "all", "calibration_size"])) == [4, 6]  # the calibration's noise
    assert set(a.table.loc[a.table["mode"] == "placebo:all", "calibration_size"]) == {6}  # the placebo: largest size only
    assert set(a.summary["mode"]) == {"key0", "all", "placebo:all"}
    assert set(a.loss["edit"]) == {"relativize:all", "relativize:key0", "placebo:all", "placebo:key0-shift"}
    assert a.meta["settings"]["relativize_modes"] == ["key0", "all"] and a.meta["settings"]["calibration_sizes"] == [4, 6]
    # the calibration corpus: the measured source and length, 4 and 6 sequences, seed --seed + 1
    calibration = a.meta["calibration"]["all@6"]["calibration"]
    assert calibration["seed"] == 1 and calibration["n_seqs"] == 6 and calibration["seq_len"] == 16
    assert a.meta["calibration"]["all@4"]["calibration"]["n_seqs"] == 4 and "key0@4" not in a.meta["calibration"]
    # every layer of the tiny Llama (3), both windows, per mode and size; r per mode and size
    levels = a.table[(a.table["metric"] == "leakage_pattern") & (a.table["kind"] == "level") & (a.table["layer"] >= 0)]
    assert len(levels) == 3 * 2 * (1 + 1 + 2 + 1)  # none, key0, all at two sizes, the placebo
    assert np.isfinite(a.figure("all")["value"]) and np.isfinite(a.figure("key0", "early")["value"])
    # the summary printed: one r row per mode, size and window, and the loss over all positions per edit
    assert "relativize:key0" in output and "placebo:all" in output and "calibration size" in output
    # the figure draws what was saved
    fig = plot_attribution(a.table)
    assert [t.name for t in fig.data] == [
        "unedited",
        "relativized: every column (n = 6)",
        "relativized: key 0 only (n = 6)",
        "placebo: relative, matched norm (n = 6)",
    ]
    assert len(plot_loss_change(a.loss).data) == 4


def test_the_unedited_rows_match_the_leakage_command(measured, tiny_llama_dir, tmp_path):
    """The 'none' levels are the ordinary measurement of the same corpus (an independent command computes them)."""
    out, _, _ = measured
    leak = tmp_path / "leak"
    done = runner.invoke(app, ["leakage", "--model", str(tiny_llama_dir), *SMALL, "--out", str(leak)])
    assert done.exit_code == 0, done.output
    from poslens.measurement.result import Result

    base = Result.load(leak / "leakage.parquet").table
    a = Attribution.load(out).table
    for layer in (0, 1, 2):
        ours = a[(a["mode"] == "none") & (a["metric"] == "c_res") & (a["query_window"] == "all") & (a["layer"] == layer)]
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
    assert set(Attribution.load(out).table["mode"]) == {"none", "key0", "all", "placebo:all"}  # not replaced


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
    a = Attribution.load(out)
    assert set(a.table["mode"]) == {"none", "key0"}  # no placebo without mode all
    assert sorted(set(a.summary["calibration_size"])) == [2, 4]  # default: half and all of --n-seqs
    assert a.loss.empty and a.meta["settings"]["relativize_loss"] is False
    assert "change in next-token loss" not in done.output
    with pytest.raises(ValueError, match="no loss_change rows"):
        plot_loss_change(a.loss)


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
