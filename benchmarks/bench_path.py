"""Cost of the path-specific tests (methodology §12): one edited run against a plain forward of the same tokens.

Usage:
    python benchmarks/bench_path.py [--model smollm2-135m] [--n-seqs 8] [--seq-len 256] [--batch-size 4] [--rounds 3]

On the same corpus (``docs``, seed 7), in one process, each round times once, in
turn: (a) a plain forward pass with logits, batch by batch (the model's own
cost); (b) ``run_once`` unedited (the same forward with the capture of the cell
sums and the residual readouts); (c) ``run_once`` with key 0's phase frozen at
D = 64 (edit P0); (d) the fits that turn one run's sums into its figures
(``run_figures``). The table gives, per route, the median over rounds of its
time and of its ratio to the same round's plain forward (a shared machine's
speed drifts between rounds, which moves a round's routes together), with the
range over rounds. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import poslens
from poslens.fit.path_figures import run_figures
from poslens.fit.residual_readout import PROBE_PENALTY
from poslens.measurement.batching import batches
from poslens.mechanisms.key_phase import KeyPhaseFreeze
from poslens.mechanisms.path_tests import run_once
from poslens.model.hooks import run_with_hooks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n-seqs", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = poslens.load_model(args.model)
    corpus = poslens.make_corpus(model, "docs", n_seqs=args.n_seqs, seq_len=args.seq_len, seed=7)
    plan = batches(corpus.n_seqs, args.groups, args.batch_size)

    def plain() -> None:
        for index, _ in plan:
            run_with_hooks(model, corpus.tokens[index], [], logits=True)

    kept = {}

    def unedited() -> None:
        kept["sums"] = run_once(model, corpus, [], args.groups, 32, args.batch_size)

    def frozen() -> None:
        run_once(model, corpus, [KeyPhaseFreeze(64)], args.groups, 32, args.batch_size)

    def fits() -> None:
        run_figures(*kept["sums"], [], PROBE_PENALTY)

    routes = {"plain forward": plain, "unedited run (capture + readouts)": unedited, "key-0 phase frozen, D = 64": frozen, "fits of one run": fits}
    times: dict[str, list[float]] = {name: [] for name in routes}
    with torch.inference_mode():
        plain()  # warm-up: the first pass pays one-off costs
    for _ in range(args.rounds):
        for name, route in routes.items():
            start = time.perf_counter()
            route()
            times[name].append(time.perf_counter() - start)
    print(f"{args.model}, {args.n_seqs} × {args.seq_len} tokens, batch {args.batch_size}, {args.rounds} rounds, {torch.get_num_threads()} threads")
    print("| route | seconds (median [min, max]) | × plain forward (median [min, max]) |")
    print("|---|---|---|")
    for name, values in times.items():
        ratios = [v / p for v, p in zip(values, times["plain forward"], strict=True)]
        print(
            f"| {name} | {statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}] | "
            f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}] |"
        )


if __name__ == "__main__":
    main()
