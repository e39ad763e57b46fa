"""Wall time and peak memory of poslens.measurement.pipeline against a plain forward and the naive route.

Usage:
    python benchmarks/bench_measure.py [--model smollm2-135m] [--lengths 256 512 1024] [--n-seqs 2] [--rounds 3]
                                       [--device cpu|cuda]

For each length T, five routes run on the same tokens (``--n-seqs`` random
sequences, one per forward):

(a) plain: a bridge forward with no hooks;
(b) poslens: ``poslens.measure`` with the probe off (one forward pass per sequence
    with the streaming cell sums, which also stores each sequence's row-bin sums
    on disk; then the per-sequence counterfactual's replay and every fit with
    intervals);
(b'') poslens+probe: the same with the ridge probe of methodology §3.3 on;
(b') capture: the pass and the replay without the fits (``collect_sums``);
(c) naive: ``bridge.run_with_cache`` keeping every layer's scores and pattern,
    then the same reduction, replay and fits applied to the cached tensors.

Each route is timed twice and the faster run is kept (the first pays
one-off costs); run it on an otherwise idle machine. On CPU the routes run in
``--rounds`` rounds, each route once per round in a fresh process, starting
each round at the next route. A route's ratio to plain is taken within each
round, against that round's plain forward, and the table gives the median over
rounds with the range: a shared machine's speed drifts by tens of percent
over minutes, which moves whole rounds together.

Memory: on CPU each route runs in a fresh subprocess. Once the model is loaded,
the heap's free pages are handed back (``malloc_trim``: loading frees tens to
hundreds of MiB that a route would otherwise reuse unseen) and the peak
resident memory (VmHWM) is reset, so the peak is the route's own and not the
loader's. On CUDA all routes share one process and the peak is
``torch.cuda.max_memory_allocated`` since the route started. Peak memory
is reported whole and as the increase over the memory held once the model was
loaded. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from statistics import median

ROUTES = ("plain", "poslens", "poslens+probe", "capture", "naive")


def status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    return status_mb("VmRSS")


def load(model_name: str, device: str):
    import torch

    import poslens
    from poslens.model.hooks import run_with_hooks

    torch.manual_seed(0)
    model = poslens.load_model(model_name, device=device)
    run_with_hooks(model, torch.ones(1, 16, dtype=torch.long))  # warm-up
    return model


def corpus_for(model, seq_len: int, n_seqs: int):
    import poslens

    return poslens.make_corpus(model, "random", n_seqs=n_seqs, seq_len=seq_len, position0="bos", seed=0)


def run_cpu_route(route: str, model_name: str, seq_len: int, n_seqs: int, repeats: int = 2) -> dict:
    """One route in this (fresh) process: peak resident memory is this route's."""
    import gc

    from memory_calibration import release_free_heap, reset_peak_resident  # benchmarks/, this script's folder

    model = load(model_name, "cpu")
    corpus = corpus_for(model, seq_len, n_seqs)
    gc.collect()
    release_free_heap()
    loaded = rss_mb()
    reset = reset_peak_resident()
    seconds = min(_collected_then_timed(route, model, corpus, seq_len, n_seqs) for _ in range(repeats))
    peak = status_mb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"route": route, "seq_len": seq_len, "seconds": seconds, "peak_mb": peak, "loaded_mb": loaded}


def run_cuda_routes(model_name: str, lengths: list[int], n_seqs: int, device: str, repeats: int = 2) -> list[dict]:
    """Every route and length in one process: CUDA's allocator statistics give each route's own peak."""
    import torch

    model = load(model_name, device)
    rows = []
    for seq_len in lengths:
        corpus = corpus_for(model, seq_len, n_seqs)
        for route in ROUTES:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            loaded = torch.cuda.memory_allocated() / 2**20
            torch.cuda.reset_peak_memory_stats()
            seconds = min(_timed(route, model, corpus, seq_len, n_seqs) for _ in range(repeats))
            peak = torch.cuda.max_memory_allocated() / 2**20
            rows.append({"route": route, "seq_len": seq_len, "seconds": seconds, "peak_mb": peak, "loaded_mb": loaded})
            print(f"  {route:8s} T={seq_len}: {seconds:.3f} s, peak {peak:.0f} MB", file=sys.stderr, flush=True)
    return rows


def _collected_then_timed(route: str, model, corpus, seq_len: int, n_seqs: int) -> float:
    """A garbage collection, then :func:`_timed`: a repeat must not find the last one's result still held by a
    reference cycle that the collector has not reached yet (its sums would count twice in the peak)."""
    import gc

    gc.collect()
    return _timed(route, model, corpus, seq_len, n_seqs)


def _timed(route: str, model, corpus, seq_len: int, n_seqs: int) -> float:
    import torch

    import poslens
    from poslens.capture.counterfactual_replay import CounterfactualReplay
    from poslens.capture.leakage_capture import LeakageCapture
    from poslens.capture.row_bin_store import RowBinStore
    from poslens.fit.binning import Binning
    from poslens.fit.metrics import metrics_with_intervals
    from poslens.measurement.pipeline import add_counterfactual, collect_sums, cross_fitted_residuals
    from poslens.model.hooks import attn_pattern, attn_scores, run_with_hooks

    device = next(model.hf_model.parameters()).device
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    if route == "plain":
        for k in range(n_seqs):
            run_with_hooks(model, corpus.tokens[k : k + 1])
    elif route == "poslens":
        poslens.measure(model, corpus, groups=n_seqs, batch_size=1, probe=False, progress=False)
    elif route == "poslens+probe":
        poslens.measure(model, corpus, groups=n_seqs, batch_size=1, probe=True, progress=False)
    elif route == "capture":
        collect_sums(model, corpus, groups=n_seqs, batch_size=1, probe=False, progress=False)
    elif route == "naive":
        store = RowBinStore()
        capture = LeakageCapture(model, Binning(seq_len), groups=n_seqs, probe=False, store=store)
        wanted = {attn_scores(l) for l in range(model.n_layers)} | {attn_pattern(l) for l in range(model.n_layers)}
        caches = []
        for k in range(n_seqs):
            with torch.inference_mode():
                _, cache = model.bridge.run_with_cache(corpus.tokens[k : k + 1].to(device), names_filter=lambda name: name in wanted)
            capture.group = k
            capture.add_structure(1)
            for layer in range(model.n_layers):
                capture.reduce(layer, cache[attn_scores(layer)])
            caches.append(cache)
        replay = CounterfactualReplay(model, capture.sums.binning, cross_fitted_residuals(capture.sums), n_seqs)
        replay.replay(store)
        store.close()
        del caches
        add_counterfactual(capture.sums, replay)
        metrics_with_intervals(capture.sums, probe=False)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def cpu_rounds(model: str, lengths: list[int], n_seqs: int, rounds: int) -> list[list[dict]]:
    """Each route once per round and length, each in a fresh process; round r starts at route r (mod routes)."""
    out = []
    for r in range(rounds):
        rows = []
        for seq_len in lengths:
            for route in ROUTES[r % len(ROUTES) :] + ROUTES[: r % len(ROUTES)]:
                done = subprocess.run(
                    [sys.executable, __file__, "--model", model, "--child", route, str(seq_len), str(n_seqs)],
                    capture_output=True, text=True, check=True,
                )
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"  round {r + 1} {route:8s} T={seq_len}: {rows[-1]['seconds']:.1f} s, peak {rows[-1]['peak_mb']:.0f} MB", file=sys.stderr)
        out.append(rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="registry name or local model folder")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--n-seqs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every route on CPU (ratios: median over rounds)")
    parser.add_argument("--device", default=None, help="cpu or cuda[:n] (default: cuda when available)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        route, seq_len, n_seqs = args.child[0], int(args.child[1]), int(args.child[2])
        print(json.dumps(run_cpu_route(route, args.model, seq_len, n_seqs)))
        return
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        rounds = [run_cuda_routes(args.model, args.lengths, args.n_seqs, device)]
        memory = "peak CUDA memory allocated"
    else:
        rounds = cpu_rounds(args.model, args.lengths, args.n_seqs, args.rounds)
        memory = "peak RSS"
    print(f"model {args.model}, {args.n_seqs} sequences per route, batch 1, float32, device {device}, {len(rounds)} round(s)\n")
    print(
        f"| T | route | time (s), median | time / plain, median (range) | {memory} (MB), median "
        "| peak / plain, median (range) | peak − loaded (MB) |"
    )
    print("|---|---|---|---|---|---|---|")
    for seq_len in args.lengths:
        by_round = [{r["route"]: r for r in rows if r["seq_len"] == seq_len} for rows in rounds]
        for route in ROUTES:
            runs = [by[route] for by in by_round]
            time_ratio = [by[route]["seconds"] / by["plain"]["seconds"] for by in by_round]
            peak_ratio = [by[route]["peak_mb"] / by["plain"]["peak_mb"] for by in by_round]
            print(
                f"| {seq_len} | {route} | {median([r['seconds'] for r in runs]):.3f} | "
                f"{median(time_ratio):.2f} ({min(time_ratio):.2f}–{max(time_ratio):.2f}) | "
                f"{median([r['peak_mb'] for r in runs]):.0f} | {median(peak_ratio):.2f} ({min(peak_ratio):.2f}–{max(peak_ratio):.2f}) | "
                f"{median([r['peak_mb'] - r['loaded_mb'] for r in runs]):.0f} |"
            )
    if len(rounds) > 1:
        print("\nTime / plain by round (plain: its own time):\n")
        print("| T | route | " + " | ".join(f"round {r + 1}" for r in range(len(rounds))) + " |")
        print("|---|---|" + "---|" * len(rounds))
        for seq_len in args.lengths:
            by_round = [{r["route"]: r for r in rows if r["seq_len"] == seq_len} for rows in rounds]
            seconds = " | ".join(f"{by['plain']['seconds']:.2f} s" for by in by_round)
            print(f"| {seq_len} | plain (its time) | {seconds} |")
            for route in ROUTES[1:]:
                cells = " | ".join(f"{by[route]['seconds'] / by['plain']['seconds']:.2f}" for by in by_round)
                print(f"| {seq_len} | {route} | {cells} |")


if __name__ == "__main__":
    main()
