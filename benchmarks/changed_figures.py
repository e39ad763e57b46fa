"""Which figures of the claims changed between two ``poslens report`` folders, and by how much.

Usage:
    python benchmarks/changed_figures.py BEFORE_DIR AFTER_DIR [--tolerance 1e-9]

Reads ``claim_inputs.csv`` and ``claims.csv`` of both folders and pairs the inputs
by claim, name, model, variant and intervention (every input a verdict read or
reported). Prints each pair whose value or interval moved by more than the
tolerance (old → new, and the change), each input present in one folder only,
and each verdict that changed. The changelog's "Figures that change" comes from
this script.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

KEYS = ["claim", "name", "model", "variant", "intervention"]
"""What pairs an input of one folder with the same input of the other."""


def _inputs(folder: Path) -> pd.DataFrame:
    table = pd.read_csv(folder / "claim_inputs.csv")
    for key in KEYS:
        table[key] = table[key].fillna("").astype(str)
    return table.drop_duplicates(KEYS)


def changed_inputs(before: Path, after: Path, tolerance: float = 1e-9) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The inputs whose figures moved, and those present in one folder only.

    Args:
        before: The older run folder.
        after: The newer run folder.
        tolerance: The largest absolute change of value, ci_low or ci_high counted as none.

    Returns:
        ``(moved, unpaired)``: ``moved`` has the keys, ``value_before``, ``value_after``, ``change`` and both intervals;
        ``unpaired`` the keys and ``in`` (``before`` or ``after``).

    Example:
        >>> moved, unpaired = changed_inputs(Path("old"), Path("new"))  # doctest: +SKIP
    """
    old, new = _inputs(before), _inputs(after)
    both = old.merge(new, on=KEYS, how="outer", suffixes=("_before", "_after"), indicator=True)
    alone = both[both["_merge"] != "both"]
    unpaired = alone[KEYS].copy()
    unpaired["in"] = alone["_merge"].astype(str).map({"left_only": "before", "right_only": "after"})
    paired = both[both["_merge"] == "both"].copy()
    differs = np.zeros(len(paired), dtype=bool)
    for column in ("value", "ci_low", "ci_high"):
        a, b = paired[f"{column}_before"].to_numpy(float), paired[f"{column}_after"].to_numpy(float)
        differs |= ~((np.abs(a - b) <= tolerance) | (np.isnan(a) & np.isnan(b)))
    moved = paired[differs].copy()
    moved["change"] = moved["value_after"] - moved["value_before"]
    columns = [*KEYS, "value_before", "ci_low_before", "ci_high_before", "value_after", "ci_low_after", "ci_high_after", "change"]
    return moved[columns].reset_index(drop=True), unpaired.reset_index(drop=True)


def changed_verdicts(before: Path, after: Path) -> pd.DataFrame:
    """The claims whose verdict changed (and those present in one folder only), one row per claim and model.

    Args:
        before: The older run folder.
        after: The newer run folder.

    Returns:
        ``claim``, ``model``, ``verdict_before`` and ``verdict_after`` (empty where absent).

    Example:
        >>> changed_verdicts(Path("old"), Path("new"))  # doctest: +SKIP
    """
    read = lambda folder: pd.read_csv(folder / "claims.csv").drop_duplicates(["claim", "model"])[["claim", "model", "verdict"]]  # noqa: E731
    both = read(before).merge(read(after), on=["claim", "model"], how="outer", suffixes=("_before", "_after")).fillna("")
    return both[both["verdict_before"] != both["verdict_after"]].reset_index(drop=True)


def _interval(row: pd.Series, which: str) -> str:
    return f"{row[f'value_{which}']:.4g} [{row[f'ci_low_{which}']:.4g}, {row[f'ci_high_{which}']:.4g}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tolerance", type=float, default=1e-9)
    args = parser.parse_args()
    moved, unpaired = changed_inputs(args.before, args.after, args.tolerance)
    print(f"{len(moved)} inputs of the claims moved by more than {args.tolerance:g}:")
    for _, row in moved.iterrows():
        where = " ".join(v for v in (row["model"], row["variant"], row["intervention"]) if v)
        print(f"- {row['claim']} {row['name']} ({where}): {_interval(row, 'before')} -> {_interval(row, 'after')}, change {row['change']:+.4g}")
    for _, row in unpaired.iterrows():
        print(f"- only {row['in']}: {row['claim']} {row['name']} ({row['model']} {row['variant']} {row['intervention']})")
    verdicts = changed_verdicts(args.before, args.after)
    print(f"{len(verdicts)} verdicts changed:")
    for _, row in verdicts.iterrows():
        print(f"- {row['claim']} ({row['model']}): {row['verdict_before'] or 'absent'} -> {row['verdict_after'] or 'absent'}")


if __name__ == "__main__":
    main()
