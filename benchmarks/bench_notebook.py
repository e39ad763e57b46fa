"""A notebook-sized measurement at default settings against a plain forward at the same batch size, in one process.

Usage:
    python benchmarks/bench_notebook.py [--model smollm2-135m] [--cases 8x128 32x256] [--rounds 3] [--repeats 2]
                                        [--routes plain measure before] [--json bench_notebook.json]

What a researcher runs in a notebook: ``poslens.measure(model, corpus)`` with every
default (min(8, N // 2) groups, batches of 4, the probe on, the counterfactual's route chosen
by ``auto``) on a few sequences. For each case N × T (N random sequences of T
tokens, BOS first), three routes run on the same tokens in this one process,
the model loaded once:

- ``plain``: the model's forward pass with no hooks, 4 sequences at a time (the default batch size);
- ``measure``: ``poslens.measure`` at its defaults (progress bar off);
- ``before``: the same, with the batches cut as poslens cut them before a batch could span
  groups (each group's sequences in batches of their own: at 8 × 128, eight passes of one
  sequence); for the record of what changed.

Rounds as in ``benchmarks/bench_measure.py``: every route runs once per round
and case, round r starting at route r (mod routes); within a round each route
is timed ``--repeats`` times and the fastest kept (the first pays one-off
costs); a route's ratio to ``plain`` is taken within the round, and the table
gives the median over rounds with the range (a shared machine's speed drifts
by tens of percent over minutes, which moves whole rounds together). The goal
(issue 36, and issue 50's item 7) is ``measure`` ≤ 1.5 × ``plain``, read from the best
round (the smallest ratio) and from the median. Prints a Markdown table with the
number of torch threads and the load average before and after the run (set ``OMP_NUM_THREADS=1``
where another process holds a core: two threads on one free core wait on each other; and
``--clock cpu`` to time the process's CPU time, which such a process does not stretch);
``--json`` also writes every timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from statistics import median

ROUTES = ("plain", "measure", "before")
GOAL = 1.5
#: What ``--clock`` times with: wall time, or the process's CPU time (every thread of it), which a process
#: competing for the cores does not stretch; with one torch thread the two agree on an idle core.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def batches_within_groups(n_seqs: int, groups: int, batch_size: int) -> list:
    """The plan before batches could span groups: each group's sequences in batches of their own."""
    import numpy as np

    from poslens.fit.groups import group_of
    from poslens.measurement.batching import Batch

    assignment = group_of(n_seqs, groups)
    out = []
    for g in range(groups):
        members = np.nonzero(assignment == g)[0]
        out += [Batch(members[k : k + batch_size], assignment[members[k : k + batch_size]]) for k in range(0, len(members), batch_size)]
    return out


def parse_cases(cases: list[str]) -> list[tuple[int, int]]:
    """The ``--cases`` of the notebook benchmarks, ``N x T`` each, as ``(N, T)`` pairs.

    Args:
        cases: e.g. ``["8x128", "32X256"]``.

    Returns:
        ``(sequences, tokens)`` per case.

    Example:
        >>> parse_cases(["8x128", "32X256"])
        [(8, 128), (32, 256)]
    """
    return [tuple(int(x) for x in case.lower().split("x")) for case in cases]


def load_warm(name: str):
    """The model ``name`` (registry name or local folder) loaded on the CPU, after one short forward pass.

    Args:
        name: What :func:`poslens.load_model` takes.

    Returns:
        The loaded model.

    Example:
        >>> model = load_warm("smollm2-135m")  # doctest: +SKIP
    """
    import torch

    import poslens
    from poslens.model.hooks import run_with_hooks

    model = poslens.load_model(name, device="cpu")
    run_with_hooks(model, torch.ones(1, 16, dtype=torch.long))  # one-off costs
    return model


def plain_forward(model, corpus) -> None:
    """The model's forward pass over the corpus with no hooks, at the default batch size: what the ratios divide by.

    Args:
        model: The loaded model.
        corpus: The corpus that ``measure`` runs over.

    Example:
        >>> plain_forward(model, corpus)  # doctest: +SKIP
    """
    from poslens.model.hooks import run_with_hooks
    from poslens.options import DEFAULTS

    step = DEFAULTS.batch_size or 1
    for k in range(0, corpus.n_seqs, step):
        run_with_hooks(model, corpus.tokens[k : k + step])


def timed(route: str, model, corpus) -> float:
    """Seconds of one run of ``route`` over the corpus."""
    import gc

    import poslens
    from poslens.measurement import pipeline

    gc.collect()
    start = clock()
    if route == "plain":
        plain_forward(model, corpus)
    elif route == "measure":
        poslens.measure(model, corpus, progress=False)
    elif route == "before":
        cut = pipeline.batches
        pipeline.batches = batches_within_groups
        try:
            poslens.measure(model, corpus, progress=False)
        finally:
            pipeline.batches = cut
    else:
        raise ValueError(f"unknown route {route!r}; routes: {', '.join(ROUTES)}")
    return clock() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="registry name or local model folder")
    parser.add_argument("--cases", nargs="+", default=["8x128", "32x256"], help="N x T: sequences x tokens")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per route in a round, fastest kept")
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=ROUTES)
    parser.add_argument("--json", default=None, help="write every timing here")
    parser.add_argument("--clock", default="wall", choices=sorted(CLOCKS), help="wall time, or the process's CPU time")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    warnings.simplefilter("ignore")  # a case of fewer than 2G sequences warns that groups hold one sequence: that is the case measured

    import torch

    import poslens

    routes = tuple(r for r in ROUTES if r in args.routes)
    if "plain" not in routes:
        parser.error("the ratios need the plain route")
    load_before = os.getloadavg()[0]
    model = load_warm(args.model)
    cases = parse_cases(args.cases)
    corpora = {case: poslens.make_corpus(model, "random", n_seqs=case[0], seq_len=case[1], position0="bos", seed=0) for case in cases}
    rows = []
    for r in range(args.rounds):
        order = routes[r % len(routes) :] + routes[: r % len(routes)]
        for case in cases:
            for route in order:
                seconds = min(timed(route, model, corpora[case]) for _ in range(args.repeats))
                rows.append({"round": r, "n_seqs": case[0], "seq_len": case[1], "route": route, "seconds": seconds})
                print(f"  round {r + 1} {case[0]}x{case[1]} {route:8s}: {seconds:.2f} s", flush=True)
    threads = torch.get_num_threads()
    print(
        f"\nmodel {args.model}, CPU, float32, {threads} torch threads, {os.cpu_count()} cores, {platform.processor() or platform.machine()}; "
        f"{args.rounds} round(s), fastest of {args.repeats} per route and round, {args.clock} time; load average {load_before:.2f} before the run, "
        f"{os.getloadavg()[0]:.2f} after\n"
    )
    print("| N × T | route | time (s), median | time / plain, median (range) | time / plain, best round |")
    print("|---|---|---|---|---|")
    summary, best = {}, {}
    for n, t in cases:
        by_round = [
            {row["route"]: row["seconds"] for row in rows if row["round"] == r and (row["n_seqs"], row["seq_len"]) == (n, t)}
            for r in range(args.rounds)
        ]
        for route in routes:
            ratios = [b[route] / b["plain"] for b in by_round]
            summary[f"{n}x{t}/{route}"], best[f"{n}x{t}/{route}"] = median(ratios), min(ratios)
            print(
                f"| {n} × {t} | {route} | {median(b[route] for b in by_round):.2f} | {median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) "
                f"| {min(ratios):.2f} |"
            )
    met = all(summary[f"{n}x{t}/measure"] <= GOAL for n, t in cases) if "measure" in routes else None
    if met is not None:
        print()
        for n, t in cases:
            at = f"{n}x{t}/measure"
            print(
                f"goal measure ≤ {GOAL} × plain at {n} × {t}: best round {best[at]:.2f} ({'met' if best[at] <= GOAL else 'not met'}), "
                f"median {summary[at]:.2f} ({'met' if summary[at] <= GOAL else 'not met'})"
            )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "model": args.model,
                    "threads": threads,
                    "clock": args.clock,
                    "load_average_before": load_before,
                    "rows": rows,
                    "median_ratio": summary,
                    "best_ratio": best,
                    "goal": GOAL,
                    "goal_met": met,
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    main()
