"""Where the time of a notebook-sized ``poslens.measure`` at default settings goes, phase by phase, against a plain forward.

Usage:
    python benchmarks/notebook_phases.py [--model smollm2-135m] [--cases 8x128 32x256] [--rounds 3]

``benchmarks/bench_notebook.py`` times the whole of ``measure`` against the
model's plain forward; this script says what the difference is made of. For
each case N × T (random tokens, BOS first, as there), every round runs the
plain forward (at the default batch size, 4) and one
``measure`` at its defaults, whose phases are timed by wrapping the functions
``measure`` calls:

- ``forward passes``: the hooked forward passes, the capture inside them included;
- ``of which: capture``: the capture's fold of each layer's scores into the sums
  (``CellSumCapture.reduce``, float64 arithmetic over every score);
- ``counterfactual``: the fit of each group's absolute component, the replay of the
  row-bin store and the counterfactual's cells;
- ``fits``: the estimate and the G leave-one-group-out fits (``Replicates.of``);
- ``intervals``: the figures with their intervals, the probe's held-out folds included;
- ``provenance``: the run's metadata (``run_metadata``);
- ``rest``: everything else (checks, batch plan, the tidy table).

A warm-up ``measure`` runs first. The table gives, per phase, the median over
rounds of its seconds and of its seconds over the round's plain forward.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import warnings
from collections import defaultdict
from statistics import median

import bench_notebook  # this folder is on sys.path when the script runs
from bench_notebook import load_warm, parse_cases, plain_forward

PHASES = ("forward passes", "of which: capture", "counterfactual", "fits", "intervals", "provenance", "rest")


def timing(spent: dict[str, float], phase: str, function):
    """``function``, adding its wall time to ``spent[phase]`` at each call.

    Args:
        spent: Seconds by phase, added to.
        phase: The phase the function's time counts to.
        function: The function to time.

    Returns:
        The timed function.

    Example:
        >>> spent = defaultdict(float)
        >>> timing(spent, "fits", sum)([1, 2]), spent["fits"] > 0
        (3, True)
    """

    @functools.wraps(function)
    def timed(*args, **kwargs):
        start = bench_notebook.clock()
        try:
            return function(*args, **kwargs)
        finally:
            spent[phase] += bench_notebook.clock() - start

    return timed


@contextlib.contextmanager
def timed_phases(spent: dict[str, float]):
    """Within the block, the functions ``measure`` calls add their wall times to ``spent`` by phase; restored after.

    Args:
        spent: Seconds by phase, added to (a ``defaultdict(float)``).

    Yields:
        ``spent``.

    Example:
        >>> with timed_phases(defaultdict(float)) as spent:  # doctest: +SKIP
        ...     poslens.measure(model, corpus, progress=False)
        >>> sorted(spent)  # doctest: +SKIP
        ['counterfactual', 'fits', 'forward passes', 'intervals', 'of which: capture', 'provenance']
    """
    from poslens.capture.cell_sum_capture import CellSumCapture
    from poslens.fit.replicates import Replicates
    from poslens.measurement import pipeline

    wrapped = [
        (pipeline, "forward_passes", "forward passes"),
        (pipeline, "_add_counterfactual", "counterfactual"),
        (pipeline, "metrics_with_intervals", "intervals"),
        (pipeline, "run_metadata", "provenance"),
        (CellSumCapture, "reduce", "of which: capture"),
    ]
    originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in wrapped] + [(Replicates, "of", Replicates.__dict__["of"])]
    try:
        for owner, name, phase in wrapped:
            setattr(owner, name, timing(spent, phase, getattr(owner, name)))
        Replicates.of = classmethod(timing(spent, "fits", Replicates.__dict__["of"].__func__))
        yield spent
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def phase_times(model, n_seqs: int, seq_len: int, rounds: int) -> list[dict[str, float]]:
    """Per round: the plain forward's seconds, ``measure``'s, and each phase's (:data:`PHASES`).

    Args:
        model: A loaded :class:`~poslens.model.pos_model.PosModel`.
        n_seqs: N, random sequences (BOS first, seed 0).
        seq_len: T, tokens per sequence.
        rounds: How many rounds, after one warm-up ``measure``.

    Returns:
        One dict per round: ``plain``, ``measure`` and every phase, in seconds.

    Example:
        >>> (times,) = phase_times(poslens.load_model("smollm2-135m"), 8, 128, rounds=1)  # doctest: +SKIP
        >>> times["forward passes"] / times["plain"]  # doctest: +SKIP
        1.5
    """
    import poslens

    corpus = poslens.make_corpus(model, "random", n_seqs=n_seqs, seq_len=seq_len, position0="bos", seed=0)
    poslens.measure(model, corpus, progress=False)  # warm-up: one-off costs
    out = []
    spent: dict[str, float] = defaultdict(float)
    for _ in range(rounds):
        start = bench_notebook.clock()
        plain_forward(model, corpus)
        plain = bench_notebook.clock() - start
        spent.clear()
        with timed_phases(spent):
            start = bench_notebook.clock()
            poslens.measure(model, corpus, progress=False)
            total = bench_notebook.clock() - start
        named = sum(spent[p] for p in PHASES if p not in ("of which: capture", "rest"))
        out.append({"plain": plain, "measure": total, **{p: spent[p] for p in PHASES[:-1]}, "rest": total - named})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="registry name or local model folder")
    parser.add_argument("--cases", nargs="+", default=["8x128", "32x256"], help="N x T: sequences x tokens")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clock", default="wall", choices=sorted(bench_notebook.CLOCKS), help="wall time, or the process's CPU time")
    args = parser.parse_args()
    bench_notebook.clock = bench_notebook.CLOCKS[args.clock]
    warnings.simplefilter("ignore")  # a case of fewer than 2G sequences warns that groups hold one sequence: that is the case measured

    import torch

    model = load_warm(args.model)
    cases = parse_cases(args.cases)
    rows = {(n, t): phase_times(model, n, t, args.rounds) for n, t in cases}
    print(f"\nmodel {args.model}, CPU, float32, {torch.get_num_threads()} torch threads, {args.clock} time; median over {args.rounds} round(s)\n")
    print("| N × T | phase | seconds | × plain forward |")
    print("|---|---|---|---|")
    for (n, t), by_round in rows.items():
        for phase in ("plain", "measure", *PHASES):
            seconds = median(r[phase] for r in by_round)
            ratio = median(r[phase] / r["plain"] for r in by_round)
            print(f"| {n} × {t} | {phase} | {seconds:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
