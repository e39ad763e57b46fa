"""What the number of groups costs in time and buys in interval width, on a notebook-sized run.

Usage:
    python benchmarks/groups_tradeoff.py [--model smollm2-135m] [--cases 8x128 32x256] [--groups 2 4 8]
                                         [--rounds 3] [--repeats 2] [--json groups_tradeoff.json]

``benchmarks/bench_notebook.py`` shows that ``poslens.measure`` at its defaults
takes more than the 1.5 × a plain forward that issue 36 set as a goal, and
``benchmarks/notebook_phases.py`` that much of the excess on small runs is the
counterfactual (G² variants of the absolute component per query window) and the
G + 1 fits of the jackknife. The number of groups G is the one setting that
moves both; ``measure`` takes 8 from 16 sequences on and min(8, N // 2) below (issue 50,
on this script's figures). This script measures the trade: for each case N × T (random
tokens, BOS first, as in ``bench_notebook.py``) and each G, it times
``measure(groups=G)`` against the plain forward at the default batch size, in
rounds as ``bench_notebook.py`` does, and reads from the last result of each G
the width of the 95% intervals (``ci_high − ci_low``) of the per-layer figures in
the default query window, as the median over layers.

The intervals are jackknife intervals over the G groups with G − 1 degrees of
freedom, so they widen as G falls both through the t quantile and through the
noisier variance estimate; the widths printed are what a researcher would see.
Prints a Markdown table; ``--json`` also writes every timing and width.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from statistics import median

from bench_notebook import load_warm, parse_cases, plain_forward  # this folder is on sys.path when the script runs

WIDTH_METRICS = ("leakage_pattern", "c_res", "c_mask")


def interval_widths(table, metrics=WIDTH_METRICS, query_window: str = "early") -> dict[str, float]:
    """Median over layers of the 95% interval width of each per-layer figure (head = −1) in one query window.

    Args:
        table: A result's tidy table (``Result.table``).
        metrics: The metrics to read.
        query_window: The query window to read.

    Returns:
        ``{metric: median of ci_high − ci_low over the layers ≥ 0}``, NaN where a metric has no finite interval.

    Example:
        >>> import pandas as pd
        >>> rows = [dict(layer=l, head=-1, query_window="early", metric="c_res", ci_low=0.0, ci_high=w) for l, w in enumerate((1, 2, 4))]
        >>> interval_widths(pd.DataFrame(rows), metrics=("c_res",))
        {'c_res': 2.0}
    """
    out = {}
    for metric in metrics:
        rows = table[(table["metric"] == metric) & (table["query_window"] == query_window) & (table["head"] == -1) & (table["layer"] >= 0)]
        widths = (rows["ci_high"] - rows["ci_low"]).dropna()
        out[metric] = float(widths.median()) if len(widths) else float("nan")
    return out


def tradeoff(model, case: tuple[int, int], groups: list[int], rounds: int, repeats: int, log=print) -> list[dict]:
    """Time ``measure(groups=G)`` against a plain forward for each G, in rounds, and read each G's interval widths.

    Round r runs the plain forward, then the Gs rotated to start at the r-th (mod the number of Gs); each run is
    timed ``repeats`` times and the fastest kept. The widths come from the last result of each G (they do not
    depend on the round: the same tokens, the same groups).

    Args:
        model: The loaded model.
        case: ``(N, T)``: sequences and tokens per sequence.
        groups: The numbers of groups to compare.
        rounds: Rounds of timings.
        repeats: Timed runs per route and round, fastest kept.
        log: Where progress lines go.

    Returns:
        One row per round and route: ``{round, n_seqs, seq_len, groups (None for plain), seconds, widths}``.

    Example:
        >>> rows = tradeoff(poslens.load_model("smollm2-135m"), (8, 128), [2, 8], rounds=1, repeats=1)  # doctest: +SKIP
        >>> [row["groups"] for row in rows]  # doctest: +SKIP
        [None, 2, 8]
    """
    import gc

    import poslens

    n, t = case
    corpus = poslens.make_corpus(model, "random", n_seqs=n, seq_len=t, position0="bos", seed=0)
    rows = []
    for r in range(rounds):
        order = groups[r % len(groups) :] + groups[: r % len(groups)]
        for g in [None, *order]:
            best, result = float("inf"), None
            for _ in range(repeats):
                gc.collect()
                start = time.perf_counter()
                if g is None:
                    plain_forward(model, corpus)
                else:
                    result = poslens.measure(model, corpus, groups=g, progress=False)
                best = min(best, time.perf_counter() - start)
            if result is not None and result.replicates().n_groups != g:
                raise RuntimeError(f"asked for {g} groups, the result has {result.replicates().n_groups}")
            widths = interval_widths(result.table) if result is not None else {}
            rows.append({"round": r, "n_seqs": n, "seq_len": t, "groups": g, "seconds": best, "widths": widths})
            log(f"  round {r + 1} {n}x{t} {'plain' if g is None else f'G = {g}':8s}: {best:.2f} s")
    return rows


def ratios(rows: list[dict], groups: int) -> list[float]:
    """Each round's time of ``measure(groups=groups)`` over that round's plain forward, for one case's rows.

    Args:
        rows: One case's rows from :func:`tradeoff`.
        groups: The G to read.

    Returns:
        One ratio per round, in round order.

    Example:
        >>> rows = [dict(round=0, groups=None, seconds=2.0), dict(round=0, groups=8, seconds=5.0)]
        >>> ratios(rows, 8)
        [2.5]
    """
    plain = {row["round"]: row["seconds"] for row in rows if row["groups"] is None}
    return [row["seconds"] / plain[row["round"]] for row in sorted(rows, key=lambda row: row["round"]) if row["groups"] == groups]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="registry name or local model folder")
    parser.add_argument("--cases", nargs="+", default=["8x128", "32x256"], help="N x T: sequences x tokens")
    parser.add_argument("--groups", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per route in a round, fastest kept")
    parser.add_argument("--json", default=None, help="write every timing and width here")
    args = parser.parse_args()
    if any(g < 2 for g in args.groups):
        parser.error("a jackknife needs at least 2 groups")
    warnings.simplefilter("ignore")  # 8 × 128 at 8 groups warns that each group holds one sequence: that is a case measured

    import torch

    model = load_warm(args.model)
    cases = parse_cases(args.cases)
    rows = [row for case in cases for row in tradeoff(model, case, args.groups, args.rounds, args.repeats)]
    threads = torch.get_num_threads()
    print(
        f"\nmodel {args.model}, CPU, float32, {threads} torch threads, {os.cpu_count()} cores, {platform.processor() or platform.machine()}; "
        f"{args.rounds} round(s), fastest of {args.repeats} per route and round; widths: median over layers, early queries\n"
    )
    print("| N × T | G | time / plain, median (range) | " + " | ".join(f"{m} width" for m in WIDTH_METRICS) + " |")
    print("|---|---|---|" + "---|" * len(WIDTH_METRICS))
    for n, t in cases:
        mine = [row for row in rows if (row["n_seqs"], row["seq_len"]) == (n, t)]
        for g in args.groups:
            per_round = ratios(mine, g)
            widths = [row for row in mine if row["groups"] == g][-1]["widths"]
            cells = " | ".join(f"{widths[m]:.3f}" for m in WIDTH_METRICS)
            print(f"| {n} × {t} | {g} | {median(per_round):.2f} ({min(per_round):.2f}–{max(per_round):.2f}) | {cells} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"model": args.model, "threads": threads, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
