"""Cost of the sink path's split (methodology §13) as a multiple of a plain forward pass over the same tokens.

Usage:
    python benchmarks/bench_split.py [--model smollm2-135m] [--n-seqs 16] [--seq-len 256] [--batch-size 4] [--rounds 3]

On one corpus (``docs``, seed 7) and in one process: the unedited run with the
row statistics is made once (its sink-reading heads at τ 0.3 from one unedited
``poslens.measure``, not timed), then each round times, in turn:

- ``plain``: a forward pass with logits, batch by batch (the model's own cost);
- ``shapley``: the four edited runs of the split (m, p, mp, s), each a full forward with the residual
  readout and the loss, with their probe fits (V and R²);
- ``sham``: one further edited run (the m sham) with its fits;
- ``p0-every-head``: one further run, key 0's phase frozen in every head, with its fits;
- ``edited-forward``: one edited run (m) without its fits: the forward with its hooks, the residual readout's sums
  and the loss;
- ``fits``: the fits of one run alone (V from the unedited fold probes, R² refitted), on that run's sums.

The table gives per route the median over rounds of its time and of its ratio
to the same round's plain forward, with the range over rounds; the goals
(issue 54) are ``shapley`` ≤ 5× and each further run ≤ 1.3×. Run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench_notebook import load_warm, plain_forward

import poslens
from poslens.fit import split_figures as fig
from poslens.fit.groups import group_of
from poslens.fit.residual_readout import PROBE_PENALTY
from poslens.mechanisms import sinks
from poslens.mechanisms.key_phase import KeyPhaseFreeze
from poslens.mechanisms.sink_split import _forward
from poslens.mechanisms.sink_split_edits import SinkPathEdit, SinkRowStats

GOALS = {"shapley": 5.0, "sham": 1.3, "p0-every-head": 1.3, "edited-forward": float("nan"), "fits": float("nan")}
"""The issue's goals, as multiples of the plain forward."""


def split_cost(model: Any, corpus: Any, groups: int = 8, batch_size: int = 4, rounds: int = 3, tau: float = 0.3) -> list[dict[str, Any]]:
    """Time the split's routes against a plain forward, round by round (see the module docstring).

    Args:
        model: The loaded model.
        corpus: The corpus.
        groups: Groups G.
        batch_size: Sequences per forward pass.
        rounds: Rounds.
        tau: The sink-reading threshold.

    Returns:
        One record per route: ``route``, ``seconds`` and ``ratio`` (medians over rounds), ``ratio_low`` / ``ratio_high``
        (their range), ``goal`` and ``heads`` (the sink-reading heads edited).

    Example:
        >>> split_cost(model, corpus, groups=2, rounds=1)[0]["route"]  # doctest: +SKIP
        'shapley'
    """
    baseline = poslens.measure(model, corpus, groups=groups, batch_size=batch_size, probe=False, progress=False)
    heads = sinks.sink_reading_heads(baseline, tau)
    stats = SinkRowStats(heads, groups, corpus.seq_len)
    unedited, _ = _forward(model, corpus, [], stats, groups, batch_size, 1024, False, "none")
    theta = fig.fold_probes(unedited, PROBE_PENALTY)
    statistics_ = stats.finish()
    labels = group_of(corpus.n_seqs, groups)
    sequence_of = {row.tobytes(): (int(g), n) for n, (row, g) in enumerate(zip(corpus.tokens.cpu().numpy(), labels, strict=True))}

    kept: dict[str, Any] = {}

    def forward(intervention: Any) -> None:
        kept["sums"], _ = _forward(model, corpus, [intervention], None, groups, batch_size, 1024, False, "bench")

    def fits() -> None:
        fig.code_variance(theta, kept["sums"])
        fig.content_r2(kept["sums"], PROBE_PENALTY)

    def edited(intervention: Any) -> None:
        forward(intervention)
        fits()

    routes = {
        "shapley": lambda: [edited(SinkPathEdit(kind, heads, statistics_, sequence_of)) for kind in fig.EDITS],
        "sham": lambda: edited(SinkPathEdit("sham-m", heads, statistics_, sequence_of)),
        "p0-every-head": lambda: edited(KeyPhaseFreeze(64)),
        "edited-forward": lambda: forward(SinkPathEdit("m", heads, statistics_, sequence_of)),
        "fits": fits,
    }
    times: dict[str, list[float]] = {route: [] for route in routes}
    ratios: dict[str, list[float]] = {route: [] for route in routes}
    for _ in range(rounds):
        began = time.perf_counter()
        plain_forward(model, corpus)
        plain = time.perf_counter() - began
        for route, run in routes.items():
            began = time.perf_counter()
            run()
            took = time.perf_counter() - began
            times[route].append(took)
            ratios[route].append(took / plain)
    return [
        {
            "route": route,
            "seconds": statistics.median(times[route]),
            "ratio": statistics.median(ratios[route]),
            "ratio_low": min(ratios[route]),
            "ratio_high": max(ratios[route]),
            "goal": GOALS[route],
            "heads": len(heads),
        }
        for route in routes
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n-seqs", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=4, help="sequences per pass (the plain forward uses poslens's default, 4)")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the records to this file")
    args = parser.parse_args()
    model = load_warm(args.model)
    corpus = poslens.make_corpus(model, "docs", n_seqs=args.n_seqs, seq_len=args.seq_len, seed=7)
    records = split_cost(model, corpus, args.groups, args.batch_size, args.rounds)
    print(f"{args.model}, {args.n_seqs} x {args.seq_len}, {records[0]['heads']} sink-reading heads, {args.rounds} rounds")
    print(f"{'route':<15} {'seconds':>8} {'x plain':>8} {'range':>15} {'goal':>6}")
    for r in records:
        goal = "" if r["goal"] != r["goal"] else f"{r['goal']:.1f}"
        print(f"{r['route']:<15} {r['seconds']:8.1f} {r['ratio']:8.2f} {r['ratio_low']:7.2f}-{r['ratio_high']:<7.2f} {goal:>6}")
    if args.json:
        args.json.write_text(json.dumps(records, indent=2))


if __name__ == "__main__":
    main()
