"""The sliding member's window (``poslens zoo --window``): checked, recorded, and saved in the member's config."""

from __future__ import annotations

import json

import pytest

from poslens.errors import InputError
from poslens.zoo.settings import ZooSettings
from poslens.zoo.train import train_family


@pytest.mark.parametrize("window", [1, 33])
def test_a_window_outside_two_to_t_keys_is_refused(window):
    with pytest.raises(InputError, match="window must lie between 2 keys and seq_len = 32"):
        ZooSettings(seq_len=32, window=window)


def test_an_unset_window_is_not_recorded_so_families_trained_before_it_still_resume():
    assert "window" not in ZooSettings(seq_len=32).to_dict()
    assert ZooSettings(seq_len=32, window=12).to_dict()["window"] == 12


def test_the_sliding_member_is_saved_with_the_window_given_and_the_standard_one_with_none(tmp_path):
    settings = ZooSettings(
        task="bigram-backcopy", members=("standard", "sliding"), seeds=(0,), steps=2, warmup=1, seq_len=16, window=6,
        width=16, depth=1, heads=2, batch_size=2, eval_every=2, eval_seqs=2, device="cpu",
    )  # fmt: skip
    train_family(tmp_path, settings, log=lambda message: None)
    sliding = json.loads((tmp_path / "sliding-s0" / "config.json").read_text())
    standard = json.loads((tmp_path / "standard-s0" / "config.json").read_text())
    assert (sliding["sliding_window"], standard["sliding_window"]) == (6, None)
    assert json.loads((tmp_path / "zoo.json").read_text())["settings"]["window"] == 6
