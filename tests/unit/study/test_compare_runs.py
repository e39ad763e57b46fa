"""benchmarks/compare_runs.py compares report folders of either table format value by value (issue 38).

The older folder is tests/data/findings_format1 (the full run of 0.3.0), written by a poslens of table format 1 (the relativize part as four
``attribution*`` files, the comparisons in the meta of ``compare.parquet``). The newer one is made from it here
with the files of table format 2, so every number of the two is the same, and one changed number must show.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from poslens.measurement.result import Result
from poslens.mechanisms.attribution_table import read_old_layout
from poslens.mechanisms.comparisons import comparison_table

ROOT = Path(__file__).resolve().parents[3]
OLD = ROOT / "tests" / "data" / "findings_format1"
SCRIPT = ROOT / "benchmarks" / "compare_runs.py"


def _compare_runs():
    spec = importlib.util.spec_from_file_location("compare_runs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _new_layout(folder: Path) -> Path:
    """That folder in the files of table format 2: relativize.parquet, comparisons.parquet, compare.parquet without them."""
    folder.mkdir()
    for path in OLD.iterdir():
        if path.suffix in (".parquet", ".csv") and not path.name.startswith(("attribution", "compare")):
            shutil.copy(path, folder / path.name)
    read_old_layout(OLD).save(folder / "relativize.parquet")
    compare = pq.read_table(OLD / "compare.parquet")
    meta = json.loads(compare.schema.metadata[b"poslens"])
    Result(comparison_table(Result(pd.DataFrame(), meta)), {}).save(folder / "comparisons.parquet")
    Result(compare.to_pandas(), {k: v for k, v in meta.items() if k != "comparisons"}).save(folder / "compare.parquet")
    return folder


def test_the_three_old_tables_come_back_from_relativize_parquet_as_the_old_files_hold_them():
    """The old layout read into one table (poslens) and cut back into three (the script): the old files, exactly."""
    cut = _compare_runs().old_attribution_tables(read_old_layout(OLD).table)
    for name, table in cut.items():
        pd.testing.assert_frame_equal(table, pd.read_parquet(OLD / name), check_dtype=False)


def run(before: Path, after: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(before), str(after), "--tolerance", "1e-10"], capture_output=True, text=True, timeout=120)


def test_folders_of_the_two_formats_compare_table_by_table_and_a_changed_number_shows(tmp_path):
    new = _new_layout(tmp_path / "new")
    same = run(OLD, new)
    assert same.returncode == 0, same.stdout + same.stderr
    for name in ("attribution.parquet", "attribution_summary.parquet", "attribution_loss.parquet", "comparisons (meta", "compare.parquet"):
        assert f"| {name}" in same.stdout, same.stdout
    assert "identical within 1e-10" in same.stdout

    part = Result.load(new / "relativize.parquet")
    summary = part.table.index[part.table["metric"] == "reduction_ge2"][0]
    part.table.loc[summary, "value"] += 1e-6
    part.save(new / "relativize.parquet")
    changed = run(OLD, new)
    assert changed.returncode == 1 and "| attribution_summary.parquet | 10 | 1e-06 |" in changed.stdout, changed.stdout

    part.table.loc[summary, ["value", "layer"]] = (part.table.loc[summary, "value"] - 1e-6, 3)  # a row the old summary could not hold
    part.save(new / "relativize.parquet")
    moved = run(OLD, new)
    assert moved.returncode == 1 and "reduction_ge2 rows have layer other than -1" in moved.stdout, moved.stdout

    comparisons = Result.load(new / "comparisons.parquet")
    comparisons.table.loc[0, "se"] += 1e-3
    comparisons.save(new / "comparisons.parquet")
    part.table.loc[summary, "layer"] = -1
    part.save(new / "relativize.parquet")
    other = run(OLD, new)
    assert other.returncode == 1 and "| comparisons (meta of compare.parquet | comparisons.parquet) |" in other.stdout, other.stdout
    assert "| 0.001 |" in other.stdout, other.stdout
