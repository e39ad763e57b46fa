"""Claims never mix parts made with different settings, and claims not measured say which command measures them.

The sequence that used to give wrong verdicts silently: a ``leakage.parquet``
measured at other sizes, copied into a folder of parts, then ``poslens claims``:
C3 paired C_res of one run with the reduction of another, exit code 0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from poslens.measurement.result import Result
from poslens.study.cli import app
from poslens.study.part_cache import MixedSettingsError, check_same_settings
from poslens.study.parts import Settings, Study
from poslens.study.report import build_report

runner = CliRunner()
SMALL = ["--n-seqs", "8", "--seq-len", "24", "--groups", "4", "--early", "8"]
OTHER = ["--n-seqs", "12", "--seq-len", "16", "--groups", "4", "--early", "8"]
LEAKAGE_FILES = ("leakage.parquet", "leakage.csv", "leakage.sums.npz")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="module")
def folders(tiny_llama_dir, tmp_path_factory):
    """Two folders measured by the CLI on the tiny Llama: ``same`` (leakage, ablate-sinks, bos-swap, path-tests at SMALL),
    ``other`` (leakage at OTHER)."""
    model = ["--model", str(tiny_llama_dir)]
    same, other = tmp_path_factory.mktemp("same"), tmp_path_factory.mktemp("other")
    for command in (
        ["ablate-sinks", *model, *SMALL, "--tau", "0.05"],
        ["bos-swap", *model, *SMALL, "--replacement", "zero"],
        ["path-tests", *model, *SMALL, "--tau", "0.05", "--offsets", "8,64"],
        ["leakage", *model, *OTHER],
    ):
        done = runner.invoke(app, [*command, "--out", str(other if command[0] == "leakage" else same)])
        assert done.exit_code == 0, done.output
    return same, other


def _copy(source, names, target):
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (source / name).exists():
            shutil.copy(source / name, target / name)
    return target


def test_consistent_parts_give_claims_and_name_the_commands_of_the_rest(folders, tmp_path):
    same, _ = folders
    out = _copy(same, [p.name for p in same.iterdir()], tmp_path / "consistent")
    done = runner.invoke(app, ["claims", "--out", str(out)])
    assert done.exit_code == 0, done.output
    table = pd.read_csv(out / "claims.csv")
    verdicts = table.groupby("claim")["verdict"].agg(set).to_dict()
    assert verdicts["C4"] == verdicts["C6"] == {"not measured"}
    assert "not measured" not in verdicts["C1"] | verdicts["C3"] | verdicts["C5"]
    # each command spells the settings of the parts already there (SMALL, the model, τ of ablate-sinks), so that it agrees with them
    line = _flat(done.output)
    assert f"not measured: C4 (run: poslens compare --groups 4 --early 8 --out {out}), C6 (run: poslens fingerprint --model " in line
    assert f"--n-seqs 8 --seq-len 24 --groups 4 --early 8 --tau 0.05 --out {out})" in line


def test_the_report_shows_not_measured_claims_apart_with_their_commands(folders, tmp_path):
    same, _ = folders
    parts = {name: Result.load(same / f"{name}.parquet") for name in ("leakage", "ablate-sinks")}
    out = tmp_path / "report"
    table = Study(Settings(), out).claims(parts)
    page = build_report(parts, table, {"n_seqs": 8}, out / "report.html").read_text(encoding="utf-8")
    for claim in ("C3", "C4", "C5", "C6", "C7", "C8"):
        assert f'<tr class="not-measured"><td>{claim}</td>' in page, claim
    assert page.count('<tr class="not-measured">') == 6 and "<b>not measured</b>" in page
    assert ".not-measured {" in page  # styled apart from inconclusive
    assert (
        f'<p class="not-measured-summary">not measured: C3 (run: poslens path-tests --n-seqs 8 --out {out}), '
        f"C4 (run: poslens compare --out {out}), "
        f"C5 (run: poslens bos-swap --n-seqs 8 --out {out}), C6 (run: poslens fingerprint --n-seqs 8 --out {out}), "
        f"C7 (run: poslens relativize --out {out}), C8 (run: poslens sink-split --n-seqs 8 --out {out})</p>"
    ) in page


def test_claims_refuse_a_leakage_part_of_other_sizes(folders, tmp_path):
    same, other = folders
    out = _copy(same, [p.name for p in same.iterdir()], tmp_path / "mixed")
    _copy(other, LEAKAGE_FILES, out)
    refused = runner.invoke(app, ["claims", "--out", str(out)])
    assert isinstance(refused.exception, MixedSettingsError), refused.output
    message = _flat(str(refused.exception))
    for part in ("bos-swap", "ablate-sinks"):
        assert (
            f"leakage.parquet (--n-seqs 12, --seq-len 16) and {part}.parquet (--n-seqs 8, --seq-len 24) were made with different settings"
        ) in message, message
    assert message.endswith("; claims would mix them. Remeasure one of them into its own --out."), message
    assert not (out / "claims.csv").exists()

    # the Python API refuses the same parts
    parts = {name: Result.load(out / f"{name}.parquet") for name in ("leakage", "ablate-sinks")}
    with pytest.raises(MixedSettingsError, match=r"leakage\.parquet \(--n-seqs 12, --seq-len 16\) and ablate-sinks\.parquet"):
        Study(Settings(), out).claims(parts)

    # the command itself: one line on stderr/stdout, exit status 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "COLUMNS": "400"}
    process = subprocess.run(
        [sys.executable, "-m", "poslens.study.cli", "claims", "--out", str(out)], capture_output=True, text=True, env=env, timeout=300
    )
    assert process.returncode == 1, process.stdout + process.stderr
    said = _flat(process.stdout + process.stderr)
    assert "error:" in said and "leakage.parquet" in said and "bos-swap.parquet" in said and "Traceback" not in said, said


def test_a_part_without_recorded_settings_is_refused(folders, tmp_path):
    same, _ = folders
    old = Result.load(same / "leakage.parquet")
    for key in ("settings", "settings_key"):
        old.meta.pop(key)
    out = tmp_path / "old"
    old.save(out / "leakage.parquet")
    refused = runner.invoke(app, ["claims", "--out", str(out)])
    assert isinstance(refused.exception, MixedSettingsError), refused.output
    message = _flat(str(refused.exception))
    assert "leakage.parquet" in message and "older poslens" in message and "Measure again: poslens leakage" in message


def test_only_shared_settings_are_compared():
    leakage = Result(pd.DataFrame(), {"settings": {"n_seqs": 16, "seq_len": 128, "groups": 8, "seed": 0}})
    compare = Result(pd.DataFrame(), {"settings": {"compare_seqs": 8, "compare_len": 640, "groups": 8, "seed": 0}})
    check_same_settings({"leakage": leakage, "compare": compare})  # no setting in common differs
    seeded = Result(pd.DataFrame(), {"settings": {"compare_seqs": 8, "compare_len": 640, "groups": 8, "seed": 1}})
    with pytest.raises(MixedSettingsError, match=r"leakage\.parquet \(--seed 0\) and compare\.parquet \(--seed 1\)"):
        check_same_settings({"leakage": leakage, "compare": seeded})
