"""Compare every table of two ``poslens report`` folders, value by value.

Usage:
    python benchmarks/compare_runs.py BEFORE_DIR AFTER_DIR [--tolerance 1e-12] [--ignore rule]

Reads each ``*.parquet`` part and ``claims.csv`` in both folders, aligns rows
on their non-numeric columns, and prints, per table, the number of rows and the
largest absolute difference of the numeric columns. Exits with status 1 if a
table is missing, its rows differ, or a difference exceeds the tolerance.
Used to show that a refactoring changed no figure (the architecture issue).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def _read(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def compare_tables(before: pd.DataFrame, after: pd.DataFrame) -> tuple[str, float]:
    """(problem or "", largest absolute difference of the numeric columns) for two versions of one table.

    Example:
        >>> a = pd.DataFrame({"metric": ["x"], "value": [1.0]})
        >>> compare_tables(a, a.assign(value=1.0 + 1e-15))
        ('', 1.1102230246251565e-15)
    """
    if list(before.columns) != list(after.columns):
        return f"columns differ: {list(before.columns)} vs {list(after.columns)}", np.inf
    if len(before) != len(after):
        return f"{len(before)} rows vs {len(after)}", np.inf
    numeric = [c for c in before.columns if pd.api.types.is_float_dtype(before[c])]
    keys = [c for c in before.columns if c not in numeric]
    left = before.sort_values(keys, kind="stable").reset_index(drop=True) if keys else before
    right = after.sort_values(keys, kind="stable").reset_index(drop=True) if keys else after
    differing = [c for c in keys if not left[c].astype(str).equals(right[c].astype(str))]
    if differing:
        return f"non-numeric columns differ: {', '.join(differing)}", np.inf
    worst = 0.0
    for column in numeric:
        x, y = left[column].to_numpy(float), right[column].to_numpy(float)
        if not np.array_equal(np.isnan(x), np.isnan(y)):
            return f"{column}: NaN in different rows", np.inf
        finite = ~np.isnan(x)
        if finite.any():
            worst = max(worst, float(np.max(np.abs(x[finite] - y[finite]))))
    return "", worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tolerance", type=float, default=1e-12)
    parser.add_argument("--ignore", action="append", default=[], help="a text column to leave out (repeat for several)")
    args = parser.parse_args()
    names = sorted({p.name for p in args.before.glob("*.parquet")} | {"claims.csv"})
    failed = False
    print("| table | rows | largest absolute difference |\n|---|---:|---:|")
    for name in names:
        if not (args.after / name).exists():
            print(f"| {name} | missing after | |")
            failed = True
            continue
        before, after = _read(args.before / name), _read(args.after / name)
        before, after = before.drop(columns=args.ignore, errors="ignore"), after.drop(columns=args.ignore, errors="ignore")
        problem, worst = compare_tables(before, after)
        failed |= bool(problem) or worst > args.tolerance
        print(f"| {name} | {len(before)} | {problem or f'{worst:.3g}'} |")
    print("identical within", args.tolerance if not failed else "NO: see above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
