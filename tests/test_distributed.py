"""Data-parallel runs under torchrun equal the single-process run (2 CPU processes, gloo)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import poslens
from poslens.measurement.result import Result

SCRIPT = """
import sys, poslens
from poslens.runtime import distributed
model = poslens.load_model(sys.argv[1])
corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=40, position0="bos", seed=3)
result = poslens.measure(model, corpus, groups=4, early=16, batch_size=1, progress=False, counterfactual=sys.argv[3])
assert distributed.world_size() == 2, distributed.world_size()
if distributed.is_main():
    result.save(sys.argv[2])
"""


@pytest.mark.parametrize("route", ["store", "second-pass"])
def test_torchrun_two_processes_match_one(tiny_llama_dir, tmp_path, route):
    """Each rank keeps its own share of the row-bin sums, or makes its own second pass over its own batches."""
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "dist.parquet"
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node=2", str(script), str(tiny_llama_dir), str(out), route],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parallel = Result.load(out)
    assert parallel.meta["settings"]["world_size"] == 2
    assert parallel.meta["counterfactual"]["route"] == route

    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=40, position0="bos", seed=3)
    single = poslens.measure(model, corpus, groups=4, early=16, batch_size=1, progress=False, counterfactual="store")

    keys = ["layer", "head", "query_window", "metric"]
    a = single.table.sort_values(keys).reset_index(drop=True)
    b = parallel.table.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[keys], b[keys])
    for column in ("value", "ci_low", "ci_high"):
        assert np.allclose(a[column], b[column], rtol=0, atol=1e-10, equal_nan=True), column
    merged = parallel.sums.per_group.as_dict()
    for name, array in single.sums.per_group.as_dict().items():
        assert np.allclose(array, merged[name], rtol=0, atol=1e-10), name
