"""How the residual probe's ridge penalty was fixed (poslens.fit.residual_readout.PROBE_PENALTY), before any edit ran.

Usage:
    python benchmarks/probe_penalty.py [--model smollm2-135m] [--n-seqs 16] [--seq-len 128] [--seed 99] [--groups 8]

Runs the model **unedited** once over a corpus that no claim reads (``docs``,
seed 99 by default: the study's corpora use seeds 0 and 1), keeps the readout
sums of the path-specific tests (:func:`poslens.mechanisms.path_tests.run_once`),
and prints the held-out probe R² of log(i + 1) from the residual stream, mean
over layers ≥ 2, for each penalty of the grid. The penalty with the highest
R² there is the package's default. No edit is run: the choice cannot lean on
what the edits do.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import poslens
from poslens.fit.residual_readout import SITES, probe_r2
from poslens.mechanisms.path_tests import run_once

GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n-seqs", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=99)
    parser.add_argument("--groups", type=int, default=8)
    args = parser.parse_args()
    model = poslens.load_model(args.model)
    corpus = poslens.make_corpus(model, "docs", n_seqs=args.n_seqs, seq_len=args.seq_len, seed=args.seed)
    start = time.perf_counter()
    _, residual, _ = run_once(model, corpus, [], groups=args.groups, early=32, batch_size=4, progress=True)
    print(f"unedited pass: {time.perf_counter() - start:.0f} s ({args.model}, {args.n_seqs} × {args.seq_len}, seed {args.seed})")
    print("| penalty | " + " | ".join(f"{site} probe R², layers ≥ 2" for site in SITES) + " |")
    print("|---|" + "---|" * len(SITES))
    best = None
    for penalty in GRID:
        pooled, *_ = probe_r2(residual, penalty)
        means = [float(np.nanmean(pooled[s, 2:])) for s in range(len(SITES))]
        print(f"| {penalty:g} | " + " | ".join(f"{m:.4f}" for m in means) + " |")
        if best is None or means[0] > best[1]:
            best = (penalty, means[0])
    print(f"highest residual-stream R²: penalty {best[0]:g}")


if __name__ == "__main__":
    main()
