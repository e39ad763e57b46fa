"""How close the notebook case could come to its goal if the fits and the intervals cost nothing.

Usage:
    python benchmarks/notebook_ceiling.py [--model smollm2-135m] [--case 8x128] [--rounds 3] [--repeats 2]

Issue 50 asks for ``poslens.measure`` at its defaults ≤ 1.5 × the plain forward at 8 × 128
(``benchmarks/bench_notebook.py``). This script asks what the forward passes, the capture and the
counterfactual alone leave of that: each round times ``measure`` as it is (``real``), then with the
in-sample fits (``Replicates.of``) and the intervals (``metrics_with_intervals``) replaced by the
results of a first run on the same tokens (``free-fits``: every figure the same, their cost zero), each
against a plain forward timed just before it, the fastest of ``--repeats`` per route and round. Prints
each route's ratio per round and the best round. A ``free-fits`` ratio above 1.5 says that no speed-up of
the fits and intervals alone can meet the goal.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from bench_notebook import load_warm, parse_cases, plain_forward


@contextmanager
def free_fits(sums: object) -> Iterator[None]:
    """Inside: ``measure`` takes the in-sample fits and the intervals of ``sums`` from one earlier fit, at no cost.

    Args:
        sums: The cell sums of a measurement of the same tokens (``Result.sums``): every figure is then the same.

    Example:
        >>> with free_fits(result.sums):   # doctest: +SKIP
        ...     poslens.measure(model, corpus)
    """
    from poslens.fit.replicates import Replicates
    from poslens.measurement import pipeline

    fits = Replicates.of(sums)
    intervals = pipeline.metrics_with_intervals(sums, probe=True, replicates=fits)

    class CachedReplicates:
        @staticmethod
        def of(_sums: object) -> Replicates:
            return fits

    kept = pipeline.Replicates, pipeline.metrics_with_intervals
    pipeline.Replicates, pipeline.metrics_with_intervals = CachedReplicates, lambda *_args, **_kwargs: intervals
    try:
        yield
    finally:
        pipeline.Replicates, pipeline.metrics_with_intervals = kept


def ratios(model: object, corpus: object, rounds: int, repeats: int) -> list[dict[str, float]]:
    """Per round, ``measure`` / plain for each route (``real``, ``free-fits``), the fastest of ``repeats``.

    Args:
        model: The loaded model.
        corpus: The corpus measured.
        rounds: Rounds.
        repeats: Timed runs per route and round.

    Returns:
        One ``{route: ratio}`` per round.

    Example:
        >>> ratios(model, corpus, rounds=1, repeats=1)   # doctest: +SKIP
        [{'real': 2.0, 'free-fits': 1.8}]
    """
    import poslens

    sums = poslens.measure(model, corpus, progress=False).sums
    out = []
    for _ in range(rounds):
        row = {}
        for route in ("real", "free-fits"):
            with free_fits(sums) if route == "free-fits" else nullcontext():
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    plain_forward(model, corpus)
                    plain = time.perf_counter() - start
                    start = time.perf_counter()
                    poslens.measure(model, corpus, progress=False)
                    times.append((time.perf_counter() - start) / plain)
            row[route] = min(times)
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="registry name or local model folder")
    parser.add_argument("--case", default="8x128", help="N x T: sequences x tokens")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per route in a round, fastest kept")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # 8 sequences in 4 groups warn that groups are small: that is the case measured

    import torch

    import poslens

    load_before = os.getloadavg()[0]
    model = load_warm(args.model)
    ((n_seqs, seq_len),) = parse_cases([args.case])
    corpus = poslens.make_corpus(model, "random", n_seqs=n_seqs, seq_len=seq_len, position0="bos", seed=0)
    by_round = ratios(model, corpus, args.rounds, args.repeats)
    for r, row in enumerate(by_round):
        print(f"  round {r + 1}: " + ", ".join(f"{route} {ratio:.2f}" for route, ratio in row.items()), flush=True)
    print(
        f"\nmodel {args.model}, {args.case}, CPU, {torch.get_num_threads()} torch threads, wall time; load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    for route in by_round[0]:
        print(f"measure / plain, best round, {route}: {min(row[route] for row in by_round):.2f}")


if __name__ == "__main__":
    main()
