"""The path-specific tests under torchrun (2 CPU processes, gloo) equal the single-process run to 1e-10."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import poslens
from poslens.measurement.result import Result
from poslens.mechanisms.path_tests import path_specific_tests

SCRIPT = """
import sys, poslens
from poslens.runtime import distributed
from poslens.mechanisms.path_tests import path_specific_tests
model = poslens.load_model(sys.argv[1])
corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=24, position0="bos", seed=3)
result = path_specific_tests(model, corpus, offsets=[8], groups=4, early=8, batch_size=1, tau=0.05, progress=False)
assert distributed.world_size() == 2, distributed.world_size()
if distributed.is_main():
    result.save(sys.argv[2])
"""


def test_path_tests_under_torchrun_match_one_process(tiny_llama_dir, tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "dist.parquet"
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node=2", str(script), str(tiny_llama_dir), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parallel = Result.load(out).table

    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=24, position0="bos", seed=3)
    single = path_specific_tests(model, corpus, offsets=[8], groups=4, early=8, batch_size=1, tau=0.05, progress=False).table
    keys = ["intervention", "reference", "kind", "layer", "query_window", "query_bin", "metric"]
    a = single.sort_values(keys).reset_index(drop=True)
    b = parallel.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[keys], b[keys])
    for column in ("value", "ci_low", "ci_high"):
        assert np.allclose(a[column], b[column], rtol=0, atol=1e-10, equal_nan=True), column
