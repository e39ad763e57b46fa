"""Measure every run of a trained zoo family with the report's parts, writing small tables as it goes.

Used by benchmarks/zoo_gpu.sh after `poslens zoo`; it can be run on its own:

    python benchmarks/zoo_measure.py --zoo results/zoo --out results/zoo_measure --time-budget 180

Each run (``<member>-s<seed>/`` of the zoo folder) is measured on the family's held-out documents
(``held_out.jsonl``) through poslens.study.parts.Study, as `poslens leakage/sinks/bos-swap/relativize
--model <folder> --corpus held_out.jsonl` would, with one Study folder per run under --out. The parts go
in passes, cheapest first, over every run: leakage and sinks, then the BOS replacements, then the
relativization; seed 0 of each member comes before seed 1. After every part the tables under --out are
rewritten from what has finished:

    c_by_layer.csv   C_res, C_mask and L(log a) (leakage_pattern) per layer (head mean) and query window, per run
    sinks.csv        sink-reading heads per layer (τ from --tau) and for the model (layer -1)
    bos_swap.csv     reduction of C_res per BOS replacement and layer
    relativize.csv   r = 1 − L(edited)/L(unedited) per mode and calibration size
    parts.tsv        run, part, status, seconds
    summary.md       one row per run: the figures above at the model level

A part that would start after --time-budget seconds is skipped (status "skipped (budget)"); one that fails
is recorded with its error and the next one runs.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

import pandas as pd

from poslens.files import atomic_write, atomic_write_text
from poslens.study.parts import Settings, Study

PASSES = (("leakage", "sinks"), ("bos-swap",), ("relativize",))


def _runs(zoo: Path) -> list[dict]:
    summary = pd.read_csv(zoo / "summary.csv")
    summary = summary.sort_values(["seed"], kind="stable")  # seed 0 of every member first
    return summary.to_dict("records")


def _write_csv(path: Path, frames: list[pd.DataFrame]) -> None:
    if frames:
        table = pd.concat(frames, ignore_index=True)
        atomic_write(path, lambda tmp: table.to_csv(tmp, index=False))


def _tag(frame: pd.DataFrame, run: dict) -> pd.DataFrame:
    frame = frame.copy()
    for column in ("seed", "label", "member"):
        frame.insert(0, column, run[column])
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zoo", type=Path, required=True, help="the folder `poslens zoo` trained")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n-seqs", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=None, help="default: the family's training T")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--early", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tau", type=float, default=0.3)
    parser.add_argument("--relativize-seqs", type=int, default=16)
    parser.add_argument("--relativize-len", type=int, default=128)
    parser.add_argument("--replacements", default="mean,zero,noise,token:eos")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds; parts that would start later are skipped")
    args = parser.parse_args()

    start = time.perf_counter()
    zoo = json.loads((args.zoo / "zoo.json").read_text())
    seq_len = args.seq_len or zoo["settings"]["seq_len"]
    corpus = str((args.zoo / "held_out.jsonl").resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    runs = _runs(args.zoo)
    tables: dict[str, list[pd.DataFrame]] = {"c_by_layer": [], "sinks": [], "bos_swap": [], "relativize": []}
    status: list[dict] = []
    model_rows: dict[str, dict] = {run["folder"]: {k: run[k] for k in ("member", "label", "seed", "steps", "held_out_loss")} for run in runs}
    studies = {}
    for run in runs:
        settings = Settings(
            model=str((args.zoo / run["folder"]).resolve()),
            corpus=corpus,
            n_seqs=args.n_seqs,
            seq_len=seq_len,
            groups=args.groups,
            early=args.early,
            batch_size=args.batch_size,
            tau=args.tau,
            replacements=tuple(args.replacements.split(",")),
            relativize_seqs=args.relativize_seqs,
            relativize_len=args.relativize_len,
        )
        studies[run["folder"]] = Study(settings, args.out / run["folder"], log=lambda line: print("   ", line, flush=True))

    def write_all() -> None:
        for name, frames in tables.items():
            _write_csv(args.out / f"{name}.csv", frames)
        steps = pd.DataFrame(status, columns=["run", "part", "status", "seconds"])
        atomic_write(args.out / "parts.tsv", lambda tmp: steps.to_csv(tmp, sep="\t", index=False))
        atomic_write_text(args.out / "summary.md", _summary(model_rows, args, seq_len, time.perf_counter() - start))

    for parts in PASSES:
        for run in runs:
            folder = run["folder"]
            for part in parts:
                elapsed = time.perf_counter() - start
                if args.time_budget is not None and elapsed > args.time_budget:
                    status.append({"run": folder, "part": part, "status": "skipped (budget)", "seconds": 0})
                    continue
                print(f"[zoo_measure {elapsed:.0f}s] {folder}: {part}", flush=True)
                t0 = time.perf_counter()
                try:
                    _measure(studies[folder], part, run, tables, model_rows[folder], args.tau)
                    state = "ok"
                except Exception as error:  # one failed part must not stop the others
                    traceback.print_exc()
                    state = f"failed: {type(error).__name__}: {str(error)[:200]}"
                status.append({"run": folder, "part": part, "status": state, "seconds": round(time.perf_counter() - t0, 1)})
                write_all()
    write_all()
    print((args.out / "summary.md").read_text())


def _measure(study: Study, part: str, run: dict, tables: dict, row: dict, tau: float) -> None:
    if part == "leakage":
        table = study.leakage().table
        keep = table[(table["head"] == -1) & table["metric"].isin(["c_res", "c_mask", "leakage_pattern"])]
        tables["c_by_layer"].append(_tag(keep, run))
        for metric in ("c_res", "c_mask"):
            value = keep[(keep["layer"] == -1) & (keep["query_window"] == "all") & (keep["metric"] == metric)]["value"]
            row[f"{metric} (all)"] = float(value.iloc[0]) if len(value) else None
    elif part == "sinks":
        table = study.sinks().table
        counts = table[table["metric"] == "sink_heads"]
        tables["sinks"].append(_tag(counts, run))
        row[f"sink heads (τ={tau})"] = float(counts[counts["layer"] == -1]["value"].iloc[0])
    elif part == "bos-swap":
        table = study.bos_swap().table
        keep = table[(table["head"] == -1) & (table["metric"] == "reduction")]
        tables["bos_swap"].append(_tag(keep, run))
        mean = keep[(keep["layer"] == -1) & (keep["query_window"] == "all") & keep["intervention"].str.contains("mean")]
        row["BOS mean: reduction of C_res (all)"] = float(mean["value"].iloc[0]) if len(mean) else None
    elif part == "relativize":
        summary = study.relativize().summary
        tables["relativize"].append(_tag(summary, run))
        best = summary[(summary["mode"] == "all") & (summary["query_window"] == "all")]
        if len(best):
            row["r, mode all (all)"] = float(best.sort_values("calibration_size")["value"].iloc[-1])


def _summary(rows: dict[str, dict], args: argparse.Namespace, seq_len: int, seconds: float) -> str:
    frame = pd.DataFrame(list(rows.values()))
    lines = [
        f"# Zoo measurements ({seconds:.0f} s)",
        "",
        f"Held-out corpus, {args.n_seqs} sequences × {seq_len} tokens, {args.groups} groups; relativization "
        f"{args.relativize_seqs} × {args.relativize_len}. Empty cells: the part did not run (see parts.tsv).",
        "",
    ]
    columns = list(frame.columns)
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for record in frame.itertuples(index=False):
        cells = ["" if v is None or (isinstance(v, float) and v != v) else (f"{v:.4g}" if isinstance(v, float) else str(v)) for v in record]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
