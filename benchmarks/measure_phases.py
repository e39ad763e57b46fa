"""Time and peak memory of each phase of ``poslens.measure``, in one process, on the CPU.

Usage:
    python benchmarks/measure_phases.py [--model smollm2-135m] [--seq-len 1024] [--n-seqs 2]

Phases, in order, each after the last: the plain forward of every sequence (for
reference); the capture forward (cell sums, and the row-bin store written to a
temporary file); fitting the cross-fitted absolute components A; the
counterfactual replay; and the fits with their intervals (probe off). For each
it prints the wall time and the peak resident memory (VmHWM, reset before each
phase) above the memory held once the model was loaded and its free heap
handed back. ``benchmarks/bench_measure.py`` times the whole routes; this
script says where inside ``measure`` the time and the peak go.
"""

from __future__ import annotations

import argparse
import gc
import time

from bench_measure import corpus_for, load, rss_mb, status_mb  # benchmarks/, this script's folder
from memory_calibration import release_free_heap, reset_peak_resident


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--n-seqs", type=int, default=2)
    args = parser.parse_args()

    from poslens.capture.cell_sum_capture import CellSumCapture
    from poslens.capture.counterfactual_replay import CounterfactualReplay
    from poslens.capture.row_bin_store import RowBinStore
    from poslens.fit.binning import Binning
    from poslens.fit.cross_fit import counterfactual_cells, cross_fitted_absolute_components
    from poslens.fit.metric_intervals import metrics_with_intervals
    from poslens.model.hooks import attn_scores, run_with_hooks

    model = load(args.model, "cpu")
    corpus = corpus_for(model, args.seq_len, args.n_seqs)
    n = args.n_seqs
    gc.collect()
    release_free_heap()
    loaded = rss_mb()
    state: dict = {}

    def plain():
        for k in range(n):
            run_with_hooks(model, corpus.tokens[k : k + 1])

    def capture():
        state["store"] = RowBinStore()
        state["capture"] = CellSumCapture(model, Binning(args.seq_len), n, probe=False, store=state["store"])
        for k in range(n):
            state["capture"].group = k
            state["capture"].add_structure(1)
            run_with_hooks(model, corpus.tokens[k : k + 1], state["capture"].hooks(), stop_after=attn_scores(model.n_layers - 1))
            state["capture"].flush()  # the sync-free (CUDA) path adds its sums here

    def fit_a():
        state["cross_fit"] = cross_fitted_absolute_components(state["capture"].sums)
        for g in range(n):
            state["cross_fit"].variants(g)

    def replay():
        sums = state["capture"].sums
        state["replay"] = CounterfactualReplay(model, sums.binning, state["cross_fit"], n)
        state["replay"].replay(state["store"])
        state["store"].close()
        sums.counterfactual_cells = counterfactual_cells(sums, state["cross_fit"], state["replay"].log_partition)

    def fits():
        metrics_with_intervals(state["capture"].sums, probe=False)

    print(f"{args.model}, {n} sequences of {args.seq_len} tokens, batch 1, float32, cpu; loaded {loaded:.0f} MB")
    print("| phase | time (s) | peak − loaded (MB) |\n|---|---|---|")
    for name, phase in (
        ("plain forward", plain),
        ("capture forward + store", capture),
        ("fit A", fit_a),
        ("replay", replay),
        ("fits with intervals", fits),
    ):
        reset_peak_resident()
        start = time.perf_counter()
        phase()
        print(f"| {name} | {time.perf_counter() - start:.3f} | {status_mb('VmHWM') - loaded:.0f} |", flush=True)


if __name__ == "__main__":
    main()
