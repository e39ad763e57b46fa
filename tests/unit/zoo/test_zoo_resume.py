"""Resumable zoo training (issue 52, item 3): a family cut short and restarted ends bit for bit as one uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from poslens.zoo.resume import RESUME_FILE
from poslens.zoo.train import ZooSettings, run_name, train_family

#: A tiny Bigram-Backcopy family: two members of one seed, two more of another, 6 steps, checkpoints every 2.
SETTINGS = ZooSettings(
    task="bigram-backcopy",
    members=("standard", "sliding"),
    seeds=(0, 1),
    steps=6,
    seq_len=16,
    width=16,
    depth=2,
    heads=2,
    batch_size=2,
    eval_every=2,
    eval_seqs=2,
    lr=0.01,
    warmup=2,
    device="cpu",
)
#: The wall-clock columns, which no two runs share.
CLOCK = ("seconds",)


class Crash(RuntimeError):
    """The interruption: raised from the log when a given checkpoint is reported."""


def _crash_at(step: int):
    def log(line: str) -> None:
        if line.startswith(f"step {step}:"):
            raise Crash(line)

    return log


def _weights(out: Path) -> dict:
    return {run_name(m, s): load_file(out / run_name(m, s) / "model.safetensors") for m, s in SETTINGS.runs()}


def _log_rows(out: Path) -> dict:
    rows = {}
    for m, s in SETTINGS.runs():
        lines = (out / run_name(m, s) / "log.jsonl").read_text().splitlines()
        rows[run_name(m, s)] = [{k: v for k, v in json.loads(line).items() if k not in CLOCK} for line in lines]
    return rows


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole")
    train_family(out, SETTINGS, log=lambda line: None, show_progress=False)
    return out


@pytest.mark.integration  # three tiny families trained: minutes on a loaded 2-core CPU
@pytest.mark.parametrize("crash_step", [2, 4])
def test_a_resumed_family_ends_bit_for_bit_as_an_uninterrupted_one(uninterrupted, tmp_path, crash_step):
    # the crash falls after the checkpoint's log lines, before its resume state: the restart goes back one checkpoint
    # (to step 0 for the crash at step 2, where no state was saved yet; to step 2 for the crash at step 4)
    with pytest.raises(Crash):
        train_family(tmp_path, SETTINGS, log=_crash_at(crash_step), show_progress=False)
    assert not (tmp_path / "summary.csv").exists()
    assert (tmp_path / RESUME_FILE).exists() == (crash_step > 2)
    lines = []
    train_family(tmp_path, SETTINGS, log=lines.append, show_progress=False)
    assert any("resuming every run at step 2" in line for line in lines) == (crash_step > 2)
    assert not (tmp_path / RESUME_FILE).exists()  # finished: the state is gone
    whole, resumed = _weights(uninterrupted), _weights(tmp_path)
    assert whole.keys() == resumed.keys()
    for run in whole:
        assert whole[run].keys() == resumed[run].keys()
        for name in whole[run]:
            assert whole[run][name].dtype == resumed[run][name].dtype
            assert torch.equal(whole[run][name], resumed[run][name]), (run, name)  # exact, element by element
    assert _log_rows(uninterrupted) == _log_rows(tmp_path)
    log_whole = pd.read_csv(uninterrupted / "log.csv").drop(columns=list(CLOCK))
    pd.testing.assert_frame_equal(log_whole, pd.read_csv(tmp_path / "log.csv").drop(columns=list(CLOCK)))


@pytest.mark.integration
def test_a_resume_state_of_other_settings_is_not_used(tmp_path):
    with pytest.raises(Crash):
        train_family(tmp_path, SETTINGS, log=_crash_at(4), show_progress=False)
    other = ZooSettings(**{**SETTINGS.__dict__, "lr": 0.02})
    lines = []
    train_family(tmp_path, other, log=lines.append, show_progress=False, overwrite=True)
    assert not any("resuming" in line for line in lines)
    assert pd.read_csv(tmp_path / "log.csv")["step"].tolist().count(0) == len(SETTINGS.runs())  # trained from step 0
