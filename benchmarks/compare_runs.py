"""Compare every table of two ``poslens report`` folders, value by value.

Usage:
    python benchmarks/compare_runs.py BEFORE_DIR AFTER_DIR [--tolerance 1e-12] [--ignore rule]

Reads each ``*.parquet`` part and ``claims.csv`` in both folders, aligns rows
on their non-numeric columns, and prints, per table, the number of rows and the
largest absolute difference of the numeric columns. Exits with status 1 if a
table is missing, its rows differ, or a difference exceeds the tolerance.
Used to show that a refactoring changed no figure (the architecture issue).

Folders of either table format compare value by value (issue 38):

- the relativize part: table format 1 wrote ``attribution.parquet``,
  ``attribution_summary.parquet`` and ``attribution_loss.parquet``; table format 2
  writes one ``relativize.parquet``. :func:`old_attribution_tables` cuts the latter
  into the former's three tables: ``mode`` is ``intervention`` without its
  ``relativize:`` prefix (``none`` and ``placebo:…`` as they are), ``edit`` is
  ``intervention``; the rows of ``leakage_pattern``, ``c_res`` and ``c_mask`` are
  ``attribution.parquet``, those of ``reduction_ge2`` the summary, those of
  ``loss_change`` the loss. The columns the older tables lack must hold what the
  older layout implied (:data:`IMPLIED`: ``head`` −1; the summary's and the loss's
  ``layer`` −1; their ``kind`` ``reduction`` and ``difference``; the loss's window
  ``all``), else the table is reported as differing.
- the comparisons: table format 1 kept them in ``meta["comparisons"]`` of
  ``compare.parquet`` (pandas' split form); table format 2 writes
  ``comparisons.parquet``. Both are compared as the table :data:`COMPARISONS`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

#: The columns of the relativize part's three tables in table format 1, in their order.
OLD_COLUMNS = {
    "attribution.parquet": ["model", "variant", "mode", "calibration_size", "metric", "query_window", "layer", "kind", "value", "ci_low", "ci_high"],
    "attribution_summary.parquet": ["model", "variant", "mode", "calibration_size", "metric", "query_window", "value", "ci_low", "ci_high"],
    "attribution_loss.parquet": ["model", "variant", "edit", "metric", "query_bin", "query_low", "query_high", "value", "ci_low", "ci_high"],
}
#: The metrics of the rows of each of them in ``relativize.parquet``.
OLD_METRICS = {
    "attribution.parquet": ("leakage_pattern", "c_res", "c_mask"),
    "attribution_summary.parquet": ("reduction_ge2",),
    "attribution_loss.parquet": ("loss_change",),
}
#: What the columns each older table lacks must hold in ``relativize.parquet``.
IMPLIED = {
    "attribution.parquet": {"head": -1},
    "attribution_summary.parquet": {"head": -1, "layer": -1, "kind": "reduction"},
    "attribution_loss.parquet": {"head": -1, "layer": -1, "kind": "difference", "query_window": "all"},
}
#: The name under which the comparisons of either format are compared.
COMPARISONS = "comparisons (meta of compare.parquet | comparisons.parquet)"


def _read(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def old_attribution_tables(table: pd.DataFrame) -> dict[str, pd.DataFrame | str]:
    """The three tables of table format 1 cut from ``relativize.parquet``'s table, or for each a problem found.

    Example:
        >>> row = dict(model="m", variant="base", intervention="relativize:all", layer=-1, head=-1, query_window="all",
        ...            metric="reduction_ge2", value=0.3, ci_low=0.2, ci_high=0.4, kind="reduction", calibration_size=8,
        ...            query_bin=-1, query_low=1, query_high=16)
        >>> old_attribution_tables(pd.DataFrame([row]))["attribution_summary.parquet"]["mode"].tolist()
        ['all']
        >>> old_attribution_tables(pd.DataFrame([row | {"layer": 3}]))["attribution_summary.parquet"]
        "relativize.parquet's reduction_ge2 rows have layer other than -1"
    """
    t = table.assign(mode=table["intervention"].astype(str).str.removeprefix("relativize:"), edit=table["intervention"])
    out: dict[str, pd.DataFrame | str] = {}
    for name, metrics in OLD_METRICS.items():
        rows = t[t["metric"].isin(metrics)]
        wrong = [column for column, value in IMPLIED[name].items() if not (rows[column] == value).all()]
        out[name] = (
            f"relativize.parquet's {', '.join(metrics)} rows have {', '.join(wrong)} other than {', '.join(str(IMPLIED[name][c]) for c in wrong)}"
            if wrong
            else rows[OLD_COLUMNS[name]].reset_index(drop=True)
        )
    return out


def comparison_rows(folder: Path) -> pd.DataFrame | None:
    """The comparisons of ``folder``: ``comparisons.parquet``, or (table format 1) the meta of ``compare.parquet``.

    Example:
        >>> comparison_rows(Path("no/such/folder")) is None
        True
    """
    if (folder / "comparisons.parquet").exists():
        return pd.read_parquet(folder / "comparisons.parquet")
    if not (folder / "compare.parquet").exists():
        return None
    stored = json.loads((pq.read_schema(folder / "compare.parquet").metadata or {}).get(b"poslens", b"{}")).get("comparisons")
    return pd.DataFrame(stored["data"], columns=stored["columns"]) if stored else None


def read_tables(folder: Path) -> dict[str, pd.DataFrame | str]:
    """Every table of a report folder under the names of table format 1, the comparisons under :data:`COMPARISONS`.

    Example:
        >>> read_tables(Path("no/such/folder"))
        {}
    """
    found: dict[str, pd.DataFrame | str] = {p.name: _read(p) for p in sorted(folder.glob("*.parquet"))}
    relativize = found.pop("relativize.parquet", None)
    if isinstance(relativize, pd.DataFrame) and "attribution.parquet" not in found:
        found.update(old_attribution_tables(relativize))
    found.pop("comparisons.parquet", None)
    comparisons = comparison_rows(folder)
    if comparisons is not None:
        found[COMPARISONS] = comparisons
    if (folder / "claims.csv").exists():
        found["claims.csv"] = _read(folder / "claims.csv")
    return found


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
    before_tables, after_tables = read_tables(args.before), read_tables(args.after)
    names = sorted(set(before_tables) | {"claims.csv"})
    failed = False
    print("| table | rows | largest absolute difference |\n|---|---:|---:|")
    for name in names:
        if name not in after_tables or name not in before_tables:
            print(f"| {name} | missing {'after' if name not in after_tables else 'before'} | |")
            failed = True
            continue
        before, after = before_tables[name], after_tables[name]
        if isinstance(after, str) or isinstance(before, str):
            print(f"| {name} | | {after if isinstance(after, str) else before} |")
            failed = True
            continue
        before, after = before.drop(columns=args.ignore, errors="ignore"), after.drop(columns=args.ignore, errors="ignore")
        problem, worst = compare_tables(before, after)
        failed |= bool(problem) or worst > args.tolerance
        print(f"| {name} | {len(before)} | {problem or f'{worst:.3g}'} |")
    print("identical within", args.tolerance if not failed else "NO: see above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
