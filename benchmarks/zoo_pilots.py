"""Collect short zoo pilots into one table: per pilot and member, how many runs formed a sink by the step read.

Usage:
    python benchmarks/zoo_pilots.py PILOT_FOLDER [PILOT_FOLDER ...] --out docs/zoo_data/pilots.csv

Each PILOT_FOLDER is the ``--out`` of a ``poslens zoo`` run (its ``zoo.json`` and each run's ``log.jsonl``),
named by its label (``A``, ``B``, ...). A pilot stopped before its last step is read at its last checkpoint;
the table says which step that was. Pilots are read for their sink counts and losses only: the figures that
decide a claim come from the family, never from a pilot. The sink count is the training log's: heads whose
mean a_i0 over the held-out queries that see key 0 is at least τ (``poslens.zoo.evaluate``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

COLUMNS = [
    "pilot",
    "member",
    "seq_len",
    "window",
    "width",
    "depth",
    "heads",
    "lr",
    "warmup",
    "schedule",
    "weight_decay",
    "steps",
    "step_read",
    "runs",
    "runs_with_sink",
    "largest_sink_score",
    "highest_held_out_loss",
]


def pilot_rows(folder: Path) -> list[dict]:
    """One row per member of the pilot in ``folder``: its settings and its runs' sinks at the last checkpoint."""
    settings = json.loads((folder / "zoo.json").read_text())["settings"]
    rows = []
    for member in settings["members"]:
        last = []
        for seed in settings["seeds"]:
            log = folder / f"{member}-s{seed}" / "log.jsonl"
            if log.exists():
                last.append(json.loads(log.read_text().splitlines()[-1]))
        if not last:
            continue
        rows.append(
            {
                "pilot": folder.name,
                "member": member,
                **{key: settings[key] for key in ("seq_len", "width", "depth", "heads", "lr", "warmup", "schedule", "weight_decay", "steps")},
                "window": settings.get("window") or max(2, settings["seq_len"] // 8),
                "step_read": min(row["step"] for row in last),
                "runs": len(last),
                "runs_with_sink": sum(row["sink_heads"] >= 1 for row in last),
                "largest_sink_score": round(max(row["max_sink_score"] for row in last), 3),
                "highest_held_out_loss": round(max(row["held_out_loss"] for row in last), 3),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    table = pd.DataFrame([row for folder in args.folders for row in pilot_rows(folder)], columns=COLUMNS)
    table.to_csv(args.out, index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
