"""Every command goes through Study to its saved table, and no part made with other settings is overwritten.

The sequence that used to lose a user's table: ``poslens leakage --out X`` at
chosen sizes, then ``poslens sinks --out X`` at the default sizes, silently
recomputed ``leakage.parquet`` at the defaults and overwrote it.
"""

from __future__ import annotations

import hashlib
import re

from typer.testing import CliRunner

from poslens.measurement.result import Result
from poslens.study.cli import app
from poslens.study.part_cache import SettingsMismatchError

runner = CliRunner()
SMALL = ["--n-seqs", "8", "--seq-len", "24", "--groups", "4", "--early", "8"]


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_leakage_then_sinks_keeps_the_users_table(tiny_llama_dir, tmp_path):
    model = ["--model", str(tiny_llama_dir)]
    first = runner.invoke(app, ["leakage", *model, *SMALL, "--out", str(tmp_path)])
    assert first.exit_code == 0, first.output
    leakage = tmp_path / "leakage.parquet"
    digest = _digest(leakage)
    saved = Result.load(leakage).meta["settings"]
    assert (saved["n_seqs"], saved["seq_len"], saved["groups"], saved["model"]) == (8, 24, 4, str(tiny_llama_dir))

    # sinks at its default sizes (16 × 128): refused, naming each differing setting; the table is untouched
    refused = runner.invoke(app, ["sinks", *model, "--out", str(tmp_path)])
    assert isinstance(refused.exception, SettingsMismatchError), refused.output
    message = _flat(str(refused.exception))
    for said in ("--n-seqs 8 there, 16 now", "--seq-len 24 there, 128 now", "--groups 4 there, 8 now", "--early 8 there, 32 now"):
        assert said in message, message
    assert "does not overwrite" in message and str(leakage) in message
    assert _digest(leakage) == digest and not (tmp_path / "sinks.parquet").exists()

    # with the same settings, sinks reuses the user's leakage table and writes beside it
    agreed = runner.invoke(app, ["sinks", *model, *SMALL, "--out", str(tmp_path)])
    assert agreed.exit_code == 0, agreed.output
    assert f"[leakage] reusing {leakage}" in _flat(agreed.output) and "[leakage] computing" not in agreed.output
    assert _digest(leakage) == digest
    sinks = Result.load(tmp_path / "sinks.parquet")
    assert sinks.meta["settings"]["n_seqs"] == 8 and sinks.meta["settings"]["tau"] == 0.3


def test_every_saved_part_records_its_settings(tiny_llama_dir, tmp_path):
    model = ["--model", str(tiny_llama_dir)]
    done = runner.invoke(app, ["ablate-sinks", *model, *SMALL, "--tau", "0.05", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    for name in ("leakage", "ablate-sinks"):
        settings = Result.load(tmp_path / f"{name}.parquet").meta["settings"]
        assert settings["n_seqs"] == 8 and settings["batch_size"] == 4 and settings["position0"] == "bos", name
    assert Result.load(tmp_path / "ablate-sinks.parquet").meta["settings"]["tau"] == 0.05
    # a different τ is a different ablation: refused too, not overwritten
    digest = _digest(tmp_path / "ablate-sinks.parquet")
    again = runner.invoke(app, ["ablate-sinks", *model, *SMALL, "--tau", "0.5", "--out", str(tmp_path)])
    assert isinstance(again.exception, SettingsMismatchError) and "--tau 0.05 there, 0.5 now" in _flat(str(again.exception))
    assert _digest(tmp_path / "ablate-sinks.parquet") == digest
