"""Why the capture floors the argument of exp (``poslens.capture.row_blocks.EXP_FLOOR``).

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/exp_floor.py [--model smollm2-135m] [--layer 15]

Takes one layer's scores of one random-token sequence at T = 1024 and times, per
score, the capture's s − max and exp on two of its float64 row blocks: rows
0–240 (keys 0–240, half of them masked, at the dtype minimum) and rows 968–1023
(keys 0–1023, 3% masked). Each block is timed as the scores come (masked keys
far below float64's exp range), with the floor, and on random normal scores of
the same shape.
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_measure import corpus_for, load  # benchmarks/, this script's folder

from poslens.capture.row_blocks import EXP_FLOOR
from poslens.model.hooks import attn_scores, run_with_hooks


def ns_per_score(x: torch.Tensor, floor: float | None, repeats: int = 20) -> float:
    """Nanoseconds per element of ``torch.sub(x, max, out=e)`` (then ``clamp_(floor)``) and ``e.exp_()``."""
    e = torch.empty_like(x)
    row_max = x.amax(-1, keepdim=True)

    def once() -> None:
        torch.sub(x, row_max, out=e)
        if floor is not None:
            e.clamp_(min=floor)
        e.exp_()

    once()
    start = time.perf_counter()
    for _ in range(repeats):
        once()
    return (time.perf_counter() - start) / repeats / x.numel() * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--layer", type=int, default=15)
    args = parser.parse_args()
    model = load(args.model, "cpu")
    corpus = corpus_for(model, 1024, 1)
    kept = {}
    run_with_hooks(
        model,
        corpus.tokens[:1],
        [(attn_scores(args.layer), lambda x, hook: kept.setdefault("scores", x.clone()))],
        stop_after=attn_scores(args.layer),
    )
    scores = kept["scores"]
    print(f"{args.model}, layer {args.layer}, T = 1024, {model.n_heads} heads, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| rows | masked | as captured (ns/score) | floored at EXP_FLOOR | random normal |\n|---|---|---|---|---|")
    for r0, r1 in ((0, 241), (968, 1024)):
        block = scores[:, :, r0:r1, :r1].double().contiguous()
        masked = float((block < torch.finfo(torch.float32).min / 2).double().mean())
        cells = [ns_per_score(block, None), ns_per_score(block, EXP_FLOOR), ns_per_score(torch.randn_like(block), None)]
        print(f"| {r0}–{r1 - 1} | {masked:.0%} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
