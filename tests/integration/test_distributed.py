"""Data-parallel runs under torchrun equal the single-process run (2 CPU processes, gloo).

The commands of docs/scaling.md run here as the page prints them, on a tiny model with small sizes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import poslens
from poslens.measurement.result import Result
from poslens.ownership import written_files
from poslens.study.output_lock import OWNER, OutputLock

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # torchrun and the installed poslens command

SCRIPT = """
import sys, poslens
from poslens.runtime import distributed
model = poslens.load_model(sys.argv[1])
corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=40, position0="bos", seed=3)
result = poslens.measure(model, corpus, groups=4, early=16, batch_size=1, progress=False, row_sums=sys.argv[3])
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
    assert parallel.meta["row_sums"]["route"] == route

    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=40, position0="bos", seed=3)
    single = poslens.measure(model, corpus, groups=4, early=16, batch_size=1, progress=False, row_sums="store")

    keys = ["layer", "head", "query_window", "metric"]
    a = single.table.sort_values(keys).reset_index(drop=True)
    b = parallel.table.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[keys], b[keys])
    for column in ("value", "ci_low", "ci_high"):
        assert np.allclose(a[column], b[column], rtol=0, atol=1e-10, equal_nan=True), column
    merged = parallel.sums.per_group.as_dict()
    for name, array in single.sums.per_group.as_dict().items():
        assert np.allclose(array, merged[name], rtol=0, atol=1e-10), name


def documented_commands() -> list[str]:
    """The torchrun command lines of docs/scaling.md's first bash block, continuation lines joined."""
    text = (ROOT / "docs" / "scaling.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    joined = re.sub(r"\\\n\s*", "", block)
    return [line.strip() for line in joined.splitlines() if "torchrun" in line and not line.lstrip().startswith("#")]


def documented(kind: str, **values: str) -> str:
    """The documented CPU command of ``kind`` (``-m poslens.study.cli`` or ``command -v poslens``) with ``values`` for its options."""
    [line] = [c for c in documented_commands() if kind in c and c.startswith("OMP_NUM_THREADS=1")]
    for option, value in values.items():
        line, count = re.subn(rf"--{option} \S+", f"--{option} {value}", line)
        assert count == 1, (option, line)
    return line


def run_in_bash(line: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``line`` pasted into bash, with this Python's torchrun and poslens first on PATH and this checkout imported."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def test_the_documented_cli_command_under_torchrun_equals_one_process(tiny_llama_dir, tmp_path):
    """docs/scaling.md's CPU command (two ranks, gloo): one lock, rank 0 writes, the tables of the one-process run."""
    out = tmp_path / "two ranks"
    line = documented("-m poslens.study.cli", model=str(tiny_llama_dir), **{"n-seqs": "8", "seq-len": "64", "out": f"'{out}'"})
    done = run_in_bash(line)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("wrote ") == 1 and "being written by another poslens run" not in done.stdout + done.stderr
    assert not (out / OWNER).exists()
    single_out = tmp_path / "one process"
    single = subprocess.run(
        [
            sys.executable,
            "-m",
            "poslens.study.cli",
            "leakage",
            "--model",
            str(tiny_llama_dir),
            "--n-seqs",
            "8",
            "--seq-len",
            "64",
            "--out",
            str(single_out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    parallel, alone = Result.load(out / "leakage.parquet"), Result.load(single_out / "leakage.parquet")
    assert parallel.meta["settings"] == alone.meta["settings"] and parallel.meta["settings"]["n_seqs"] == 8
    keys = ["layer", "head", "query_window", "metric"]
    a = alone.table.sort_values(keys).reset_index(drop=True)
    b = parallel.table.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[keys], b[keys])
    for column in ("value", "ci_low", "ci_high"):
        assert np.allclose(a[column], b[column], rtol=0, atol=1e-10, equal_nan=True), column
    assert sorted(written_files(out)) == ["leakage.csv", "leakage.parquet", "leakage.sums.npz"]


def test_a_second_run_into_a_locked_folder_is_refused_on_every_rank(tiny_llama_dir, tmp_path):
    """The first run (here this test) holds the lock; the documented command stops at once on both ranks, naming it."""
    out = tmp_path / "held"
    out.mkdir()
    line = documented("-m poslens.study.cli", model=str(tiny_llama_dir), **{"n-seqs": "8", "seq-len": "64", "out": str(out)})
    with OutputLock(out):
        done = run_in_bash(line, timeout=120)
        holder = json.loads((out / OWNER).read_text())
    assert done.returncode != 0
    said = " ".join((done.stdout + done.stderr).split())
    # each rank stops with rank 0's refusal, and none takes the lock for itself
    assert said.count(f"error: {out} is being written by another poslens run (pid {os.getpid()}") == 2, said[-3000:]
    assert holder["pid"] == os.getpid() and sorted(p.name for p in out.iterdir()) == [".poslens.lock"]


def test_report_through_the_installed_command_under_torchrun_writes_once(tiny_llama_dir, tmp_path):
    """docs/scaling.md's report line (the installed command as torchrun's script): it runs, and rank 0 alone writes and prints."""
    out = tmp_path / "report"
    line = documented("command -v poslens", model=str(tiny_llama_dir), out=str(out))
    line += " --n-seqs 4 --seq-len 32 --groups 2 --fingerprint-seqs 4 --fingerprint-len 16 --relativize-seqs 4 --relativize-len 16"
    done = run_in_bash(line)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = " ".join(done.stdout.split())
    assert done.stdout.count("wrote ") == 1 and len(re.findall(r"part 1/\d+: leakage", said)) == 1, done.stdout[-3000:]
    assert "path-tests" in said, said[-3000:]  # the path-specific tests ran under torchrun too
    manifest = written_files(out)
    assert {"report.html", "run.json", "claims.csv", "leakage.parquet", "path-tests.parquet", "relativize.parquet"} <= set(manifest)
    for name, entry in manifest.items():  # each file whole, as rank 0 recorded it: no second writer changed it since
        assert (out / name).stat().st_size == entry["size"], name
    run = json.loads((out / "run.json").read_text())
    assert run["settings"]["n_seqs"] == 4 and Result.load(out / "leakage.parquet").meta["settings"]["n_seqs"] == 4


def test_path_tests_through_the_cli_under_torchrun_equals_one_process(tiny_llama_dir, tmp_path):
    """`poslens path-tests` as docs/scaling.md runs the measuring commands: one writer, the one-process tables to 1e-10."""
    small = {"n-seqs": "8", "seq-len": "32"}
    extra = " --groups 2 --early 8 --offsets 4 --tau 0.01"  # a low tau: the mask-only profile and the ablation run too
    out = tmp_path / "two ranks"
    line = documented("-m poslens.study.cli", model=str(tiny_llama_dir), out=f"'{out}'", **small)
    line = line.replace(" poslens.study.cli leakage ", " poslens.study.cli path-tests ", 1) + extra
    done = run_in_bash(line)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("wrote ") == 1 and not (out / OWNER).exists()
    single_out = tmp_path / "one process"
    argv = ["path-tests", "--model", str(tiny_llama_dir), "--n-seqs", "8", "--seq-len", "32", *extra.split(), "--out", str(single_out)]
    single = subprocess.run(
        [sys.executable, "-m", "poslens.study.cli", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    parallel, alone = Result.load(out / "path-tests.parquet"), Result.load(single_out / "path-tests.parquet")
    assert {"key0-phase:D=4", "key1-phase:D=4", "sink-mask-only:1", "sink-ablation"} <= set(parallel.table["intervention"])
    keys = [c for c in alone.table.columns if c not in ("value", "ci_low", "ci_high")]
    a = alone.table.sort_values(keys).reset_index(drop=True)
    b = parallel.table.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[keys], b[keys])
    for column in ("value", "ci_low", "ci_high"):
        assert np.allclose(a[column], b[column], rtol=0, atol=1e-10, equal_nan=True), column
    assert sorted(written_files(out)) == sorted(written_files(single_out))  # the leakage baseline and the path tests, once each
