"""Wall time, peak memory and temporary disk of the two counterfactual routes against a plain forward, as T and N grow.

Usage:
    python benchmarks/bench_scale.py [--only smollm gemma nsweep] [--lengths 256 512 1024 2048 4096]
                                     [--rounds 2] [--json FILE] [--tiny] [--fits]

The per-sequence counterfactual of methodology §4.4 (i) needs each row's
per-offset-bin sums of exp(s). ``collect_sums`` gets them by one of two routes
(its ``row_sums=`` keyword): ``store`` keeps them on temporary disk between
the pass and a replay (8·L·H·T·(1 + bins) bytes per sequence), ``second-pass``
recomputes them with a second forward pass once A is fitted (no disk). Three
routes run on the same tokens and the same batches:

- plain: a bridge forward with no hooks (``run_with_hooks``), ending where
  poslens's pass ends (after the last layer's attention scores);
- store: ``collect_sums(..., row_sums="store", probe=False)``;
- second-pass: ``collect_sums(..., row_sums="second-pass", probe=False)``.

With ``--fits`` the two routes call ``poslens.measure`` (every fit with its
intervals) instead. Each route's record (``sums.row_sums_route``) must name the
route asked for, or the process fails.

The parts (``--only``), all on CPU in float32, random-token corpora with BOS:

- smollm: SmolLM2-135M at T = 256, 512, 1024, 2048, 4096 (``--lengths``),
  N = 2 sequences, 2 groups, batch 1;
- gemma: Gemma 3 270M (sliding window 512 in 15 of its 18 layers) at
  T = 8192 (``--gemma-lengths``), N = 2, 2 groups, batch 1;
- nsweep: SmolLM2-135M at T = 512 (``--nsweep-length``) with
  N = 8, 16, 32, 64 (``--n-values``), 8 groups, batch 4.

Rounds: each route runs once per round in a fresh process, round r starting at
route r, as in ``benchmarks/bench_measure.py``; ``--rounds`` (default 2)
applies to T ≤ 2048 and the N sweep, one round is run above T = 2048. A
route's ratios to plain are taken within each round and the table gives the
median over rounds with the range.

Memory: each route runs in a fresh subprocess. Once the model is loaded and
warmed up, the heap's free pages are handed back (``malloc_trim``) and the
peak resident memory (VmHWM) is reset, so the peak is the route's own and not
the loader's (the approach of ``benchmarks/bench_measure.py``). Temporary
disk is ``sums.row_sums_route["stored_bytes"]`` (bytes written to ``TMPDIR``),
0 for plain and second-pass.

Goals, printed beside each row: the store route's time ≤ 1.25× and peak ≤ 1.1×
plain at every T ≥ 1024; the second-pass route's ≤ 2.3× and ≤ 1.1×; and memory
flat in N for both routes, judged as the median peak at the largest N of the
sweep within 5% of the median peak at the smallest (N = 64 against N = 8).
A goal is judged on the medians over rounds.

Run time (estimated on a 2-core CPU, where a plain SmolLM2-135M forward of one
sequence takes about 0.6, 1.6, 5, 17 and 60 s at T = 256 … 4096 and Gemma 3
270M about 150 s at T = 8192; each fresh process adds about 12 s of loading):
smollm about 12 min for T ≤ 2048 (2 rounds) plus 10 min for T = 4096;
gemma about 25 min; nsweep about 35 min (2 rounds of 120 sequences per
route). About 1.5 hours in all. ``--tiny`` (tiny random Llama and Gemma 3
models, one round, 15 processes) takes 2–3 minutes on an idle machine, most of
it each process's start; its ratios only check the harness.

Prints one Markdown table, the per-round table and the flatness table, and
writes every process's figures to ``--json FILE``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from bench_measure import status_mb  # this folder is on sys.path when the script runs

ROUTES = ("plain", "store", "second-pass")
#: Goals per route: (time / plain, peak / plain), at every T ≥ GOAL_MIN_LENGTH.
GOALS = {"store": (1.25, 1.1), "second-pass": (2.3, 1.1)}
GOAL_MIN_LENGTH = 1024
#: Memory is flat in N when the median peak at the largest N is within this share of the peak at the smallest.
FLAT_SHARE = 0.05
#: Above this length one round is run whatever ``--rounds`` says.
ONE_ROUND_ABOVE = 2048


def run_route(case: dict, route: str) -> dict:
    """One route of one case in this (fresh) process: its wall time, peak resident memory and temporary disk."""
    import gc

    import torch
    from memory_calibration import reset_peak_resident  # benchmarks/, this script's folder

    import poslens
    from poslens.measurement.batching import batches
    from poslens.measurement.pipeline import collect_sums
    from poslens.model.hooks import attn_scores, run_with_hooks
    from poslens.runtime.system import release_free_heap

    torch.manual_seed(0)
    model = poslens.load_model(case["model"])
    n, t = case["n_seqs"], case["seq_len"]
    corpus = poslens.make_corpus(model, "random", n_seqs=n, seq_len=t, position0="bos", seed=0)
    plan = batches(n, case["groups"], case["batch_size"])
    last = attn_scores(model.n_layers - 1)
    run_with_hooks(model, corpus.tokens[:1, : min(t, 256)], stop_after=last)  # warm-up, the same in every route
    gc.collect()
    release_free_heap()
    loaded = status_mb("VmRSS")
    reset = reset_peak_resident()
    kwargs: dict = dict(groups=case["groups"], batch_size=case["batch_size"], probe=False, progress=False)
    if route != "plain":
        kwargs["row_sums"] = route
    start = time.perf_counter()
    record = None
    if route == "plain":
        for index, _ in plan:
            run_with_hooks(model, corpus.tokens[index], stop_after=last)
    elif case["fits"]:
        record = poslens.measure(model, corpus, **kwargs).meta["row_sums"]
    else:
        record = collect_sums(model, corpus, **kwargs).row_sums_route
    seconds = time.perf_counter() - start
    if route != "plain" and record["route"] != route:
        raise RuntimeError(f"asked for the {route} route, but poslens ran the {record['route']} route: {record['reason']}")
    peak = status_mb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        **case,
        "route": route,
        "seconds": seconds,
        "peak_mb": peak,
        "loaded_mb": loaded,
        "stored_bytes": 0 if record is None else int(record["stored_bytes"]),
        "row_sums": record,
        "peak_reset": reset,
    }


# ----------------------------------------------------------------------------- the parts, in child processes


def cases(args: argparse.Namespace, models: dict[str, str]) -> list[dict]:
    """Every (part, model, T, N, groups, batch) the run measures, with its number of rounds."""
    common = {"fits": args.fits}
    out = []

    def add(part: str, model: str, seq_len: int, n_seqs: int, groups: int, batch_size: int) -> None:
        rounds = 1 if seq_len > ONE_ROUND_ABOVE else args.rounds
        out.append(
            {
                "part": part,
                "model": model,
                "seq_len": seq_len,
                "n_seqs": n_seqs,
                "groups": groups,
                "batch_size": batch_size,
                "rounds": rounds,
                **common,
            }
        )

    if "smollm" in args.only:
        for t in args.lengths:
            add("smollm", models["smollm"], t, 2, 2, 1)
    if "gemma" in args.only:
        for t in args.gemma_lengths:
            add("gemma", models["gemma"], t, 2, 2, 1)
    if "nsweep" in args.only:
        for n in args.n_values:
            add("nsweep", models["smollm"], args.nsweep_length, n, args.nsweep_groups, args.nsweep_batch)
    return out


def run_child(case: dict, route: str) -> dict:
    """:func:`run_route` in a fresh process; a failure is recorded (with its last lines) and the run goes on."""
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(case), route], capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        print(f"  {route} failed:\n{tail}", file=sys.stderr)
        return {**case, "route": route, "error": tail}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_all(todo: list[dict], json_path: Path | None, settings: dict) -> list[dict]:
    """Each case's routes, once per round, each in a fresh process; round r starts at route r (mod routes)."""
    rows = []
    for case in todo:
        for r in range(case["rounds"]):
            for route in ROUTES[r % len(ROUTES) :] + ROUTES[: r % len(ROUTES)]:
                row = {**run_child(case, route), "round": r}
                rows.append(row)
                what = f"{case['part']} T={case['seq_len']} N={case['n_seqs']} round {r + 1} {route}"
                if "seconds" in row:
                    print(
                        f"  {what}: {row['seconds']:.1f} s, peak {row['peak_mb']:.0f} MB, disk {row['stored_bytes'] / 1e6:.1f} MB",
                        file=sys.stderr,
                        flush=True,
                    )
                else:
                    print(f"  {what}: failed", file=sys.stderr, flush=True)
                if json_path is not None:  # after every process, so that a stopped run keeps what it measured
                    json_path.write_text(json.dumps({"settings": settings, "rows": rows}, indent=1))
    return rows


# ----------------------------------------------------------------------------- tables


def key(case: dict) -> tuple:
    return (case["part"], case["seq_len"], case["n_seqs"])


def summarize(rows: list[dict]) -> list[dict]:
    """Per case and route: medians over rounds, ratios to the same round's plain, and the goals."""
    out = []
    for case_key in dict.fromkeys(key(r) for r in rows):
        mine = [r for r in rows if key(r) == case_key]
        rounds = sorted({r["round"] for r in mine})
        by_round = [{r["route"]: r for r in mine if r["round"] == k} for k in rounds]
        for route in ROUTES:
            runs = [by[route] for by in by_round if "seconds" in by.get(route, {})]
            summary = {"part": case_key[0], "seq_len": case_key[1], "n_seqs": case_key[2], "route": route, "rounds": len(runs)}
            if not runs:
                first = next((by[route] for by in by_round if route in by), {})
                summary["missing"] = first.get("error") or "not run"
                out.append(summary)
                continue
            paired = [by for by in by_round if "seconds" in by.get(route, {}) and "seconds" in by.get("plain", {})]
            time_ratio = [by[route]["seconds"] / by["plain"]["seconds"] for by in paired]
            peak_ratio = [by[route]["peak_mb"] / by["plain"]["peak_mb"] for by in paired]
            summary.update(
                seconds=median(r["seconds"] for r in runs),
                peak_mb=median(r["peak_mb"] for r in runs),
                increase_mb=median(r["peak_mb"] - r["loaded_mb"] for r in runs),
                stored_bytes=max(r["stored_bytes"] for r in runs),
                time_ratio=time_ratio,
                peak_ratio=peak_ratio,
            )
            summary["goal"] = goal(route, case_key[1], time_ratio, peak_ratio)
            out.append(summary)
    return out


def goal(route: str, seq_len: int, time_ratio: list[float], peak_ratio: list[float]) -> str:
    """'met' / 'not met (…)' for a route's goal at this length, '—' where none applies."""
    if route not in GOALS:
        return "—"
    if seq_len < GOAL_MIN_LENGTH:
        return f"— (T < {GOAL_MIN_LENGTH})"
    if not time_ratio:
        return "no plain run to compare"
    max_time, max_peak = GOALS[route]
    misses = []
    if median(time_ratio) > max_time:
        misses.append(f"time > {max_time}×")
    if median(peak_ratio) > max_peak:
        misses.append(f"peak > {max_peak}×")
    return f"not met ({', '.join(misses)})" if misses else f"met (≤ {max_time}×, ≤ {max_peak}×)"


def ratio_cell(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def flatness(summary: list[dict]) -> list[dict]:
    """Per route of the N sweep: the median peak at the smallest and the largest N, and whether it is flat."""
    sweep = [s for s in summary if s["part"] == "nsweep" and "peak_mb" in s]
    out = []
    for route in ROUTES:
        mine = sorted((s for s in sweep if s["route"] == route), key=lambda s: s["n_seqs"])
        if len(mine) < 2:
            continue
        low, high = mine[0], mine[-1]
        share = high["peak_mb"] / low["peak_mb"] - 1
        verdict = "—" if route == "plain" else ("met" if share <= FLAT_SHARE else "not met")
        out.append(
            {
                "route": route,
                "n_low": low["n_seqs"],
                "peak_low_mb": low["peak_mb"],
                "n_high": high["n_seqs"],
                "peak_high_mb": high["peak_mb"],
                "change": share,
                "goal": verdict,
            }
        )
    return out


def print_tables(rows: list[dict], summary: list[dict], flat: list[dict], settings: dict) -> None:
    """The Markdown tables: one row per case and route, time / plain by round, and memory flatness in N."""
    print(
        f"CPU, float32, random tokens with BOS; routes call {'poslens.measure' if settings['fits'] else 'collect_sums'} "
        f"(probe off); {settings['sweep']}; goals judged on medians over rounds\n"
    )
    print(
        "| part | T | N | route | rounds | time (s), median | time / plain, median (range) | peak RSS (MB), median "
        "| peak / plain, median (range) | peak − loaded (MB) | temporary disk (MB) | goal |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        head = f"| {s['part']} | {s['seq_len']} | {s['n_seqs']} | {s['route']} |"
        if "missing" in s:
            print(f"{head} 0 | n/a | n/a | n/a | n/a | n/a | n/a | {s['missing'].splitlines()[-1][:80]} |")
            continue
        print(
            f"{head} {s['rounds']} | {s['seconds']:.2f} | {ratio_cell(s['time_ratio'])} | {s['peak_mb']:.0f} | "
            f"{ratio_cell(s['peak_ratio'])} | {s['increase_mb']:.0f} | {s['stored_bytes'] / 1e6:.1f} | {s['goal']} |"
        )
    several = [k for k in dict.fromkeys(key(r) for r in rows) if len({r["round"] for r in rows if key(r) == k}) > 1]
    if several:
        n_rounds = max(len({r["round"] for r in rows if key(r) == k}) for k in several)
        print("\nTime / plain by round (plain: its own time):\n")
        print("| part | T | N | route | " + " | ".join(f"round {r + 1}" for r in range(n_rounds)) + " |")
        print("|---|---|---|---|" + "---|" * n_rounds)
        for k in several:
            by_round = [{r["route"]: r for r in rows if key(r) == k and r["round"] == j} for j in range(n_rounds)]
            for route in ROUTES:
                cells = []
                for by in by_round:
                    run, plain = by.get(route, {}), by.get("plain", {})
                    if "seconds" not in run:
                        cells.append("n/a")
                    elif route == "plain":
                        cells.append(f"{run['seconds']:.2f} s")
                    else:
                        cells.append(f"{run['seconds'] / plain['seconds']:.2f}" if "seconds" in plain else "n/a")
                label = "plain (its time)" if route == "plain" else route
                print(f"| {k[0]} | {k[1]} | {k[2]} | {label} | " + " | ".join(cells) + " |")
    if flat:
        print(f"\nMemory flat in N (the N sweep): median peak at the largest N within {FLAT_SHARE:.0%} of the smallest N's:\n")
        print("| route | N | peak (MB) | N | peak (MB) | change | goal |")
        print("|---|---|---|---|---|---|---|")
        for f in flat:
            print(
                f"| {f['route']} | {f['n_low']} | {f['peak_low_mb']:.0f} | {f['n_high']} | {f['peak_high_mb']:.0f} | "
                f"{f['change']:+.1%} | {f['goal']} |"
            )


# ----------------------------------------------------------------------------- main


def tiny_models(folder: Path) -> dict[str, str]:
    """A tiny random Llama (for the SmolLM2 parts) and Gemma 3 (sliding window 8), saved under ``folder``."""
    from poslens.testing import save_tiny_model

    return {"smollm": str(save_tiny_model(folder / "llama", "llama")), "gemma": str(save_tiny_model(folder / "gemma3", "gemma3"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=("smollm", "gemma", "nsweep"), default=["smollm", "gemma", "nsweep"])
    parser.add_argument("--lengths", type=int, nargs="+", help="T of the smollm part (default 256 512 1024 2048 4096; --tiny: 64 1024)")
    parser.add_argument("--gemma-lengths", type=int, nargs="+", help="T of the gemma part (default 8192; --tiny: 1024)")
    parser.add_argument("--n-values", type=int, nargs="+", help="N of the N sweep (default 8 16 32 64; --tiny: 8 16)")
    parser.add_argument("--nsweep-length", type=int, help="T of the N sweep (default 512; --tiny: 64)")
    parser.add_argument("--nsweep-groups", type=int, default=8)
    parser.add_argument("--nsweep-batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, help=f"rounds at T ≤ {ONE_ROUND_ABOVE} and in the N sweep (default 2; --tiny: 1)")
    parser.add_argument("--fits", action="store_true", help="time poslens.measure (with every fit) instead of collect_sums")
    parser.add_argument("--tiny", action="store_true", help="tiny random Llama and Gemma 3 models: checks the harness in minutes")
    parser.add_argument("--json", type=Path, help="write every process's figures here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_route(json.loads(args.child[0]), args.child[1])))
        return
    defaults = (
        dict(lengths=[64, 1024], gemma_lengths=[1024], n_values=[8, 16], nsweep_length=64, rounds=1)
        if args.tiny
        else dict(lengths=[256, 512, 1024, 2048, 4096], gemma_lengths=[8192], n_values=[8, 16, 32, 64], nsweep_length=512, rounds=2)
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    with tempfile.TemporaryDirectory() as folder:
        models = tiny_models(Path(folder)) if args.tiny else {"smollm": "smollm2-135m", "gemma": "gemma3-270m"}
        settings = {
            "models": {"smollm": "tiny llama" if args.tiny else models["smollm"], "gemma": "tiny gemma3" if args.tiny else models["gemma"]},
            "fits": args.fits,
            "rounds": args.rounds,
            "sweep": "; ".join(
                [f"{part}: N = 2, 2 groups, batch 1" for part in ("smollm", "gemma") if part in args.only]
                + [f"nsweep: T = {args.nsweep_length}, {args.nsweep_groups} groups, batch {args.nsweep_batch}"] * ("nsweep" in args.only)
            ),
        }
        rows = run_all(cases(args, models), args.json, settings)
    summary = summarize(rows)
    flat = flatness(summary)
    print_tables(rows, summary, flat, settings)
    if args.json is not None:
        args.json.write_text(json.dumps({"settings": settings, "rows": rows, "summary": summary, "flatness": flat}, indent=1))


if __name__ == "__main__":
    main()
