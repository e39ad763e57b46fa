"""Nothing stale, nothing lost (issue 49): the failures of the third reliability tour, each with the behaviour that replaced it.

Everything is real: tiny Llama folders saved to disk (``poslens.testing.save_tiny_model``)
and the ``poslens`` command through typer's CliRunner. poslens's own modules are
imported inside the tests that need new names, so that each test fails on its
own assertion when run against the code from before the change.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from poslens.measurement.result import Result
from poslens.study.cli import app

runner = CliRunner()


def small(model_dir: Path, *extra: str) -> list[str]:
    return ["--model", str(model_dir), "--corpus", "random", "--n-seqs", "4", "--seq-len", "32", "--groups", "2", "--early", "8", *extra]


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def error_text(result) -> str:
    return f"{result.exception}\n{result.output}"


# ---------------------------------------------------------------- 1. every weights file is hashed


def _sharded(folder: Path, shard: str) -> Path:
    """Move a tiny model's weights to ``shard`` (a subfolder or a hidden name) and name it in an index."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        keys = list(handle.keys())
    (folder / shard).parent.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").rename(folder / shard)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {key: shard for key in keys}}))
    return folder


@pytest.mark.parametrize("shard", ["sub/w.safetensors", ".w.safetensors"])
def test_a_shard_in_a_subfolder_or_hidden_is_hashed_and_never_reused_stale(tmp_path, shard):
    from poslens.testing import save_tiny_model

    model = _sharded(save_tiny_model(tmp_path / "model", "llama", seed=0), shard)
    other = save_tiny_model(tmp_path / "other", "llama", seed=1)
    out = tmp_path / "out"
    first = invoke("leakage", *small(model), "--out", out)
    assert first.exit_code == 0, error_text(first)
    assert str(model / shard) in Result.load(out / "leakage.parquet").meta["inputs"]
    shutil.copyfile(other / "model.safetensors", model / shard)  # another model's weights over the shard
    again = invoke("leakage", *small(model), "--out", out)
    assert again.exit_code != 0, again.output
    assert f"{shard} changed since leakage.parquet was made" in error_text(again)
    assert "wrote nothing" not in again.output
