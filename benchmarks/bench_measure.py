"""Wall time and peak memory of poslens.measurement.pipeline against a plain forward and the naive route.

Usage:
    python benchmarks/bench_measure.py [--model smollm2-135m] [--lengths 256 512 1024] [--n-seqs 2] [--rounds 3]
                                       [--device cpu|cuda]
    python benchmarks/bench_measure.py --device cuda --model FOLDER --dtype bfloat16 --batch-size 4 --groups 2
                                       --n-seqs 8 --lengths 1024 2048 4096 --routes plain capture poslens naive
                                       --repeats 1 --warmup-len 256 --time-budget 150 --json bench.json --markdown bench.md

The second form is the CUDA part of ``benchmarks/gpu_suite.sh`` (see "CUDA" below).

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

CUDA: ``--batch-size`` sequences per forward pass (a batch may span several of
the ``--groups`` groups; the CPU rounds keep batch 1 and one group per
sequence), weights in ``--dtype``. Every route first runs once, untimed, at
``--warmup-len`` (CUDA's one-off costs: kernel loading, cuBLAS handles, the
allocator's first blocks), then ``--repeats`` times per length with the
fastest kept; lengths run in the order given. The naive route is skipped at a
length where its cached scores and patterns would need more than 80% of the
GPU's memory (the estimate is written in the row). ``--time-budget`` seconds
bound the timed part: a length whose predicted time (the last length's, scaled
by T²) would overrun it is skipped, and so is every route once the budget is spent. ``--json`` and
``--markdown`` are rewritten after every route, so a run killed by an outer
timeout keeps what it measured. The targets checked at the longest length
measured are poslens ≤ 2.5× the plain forward's time and ≤ 1.3× its peak.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

ROUTES = ("plain", "poslens", "poslens+probe", "capture", "naive")
# Targets of the attribution issue for the GPU suite, at its longest length: poslens / plain.
TARGET_TIME, TARGET_PEAK = 2.5, 1.3
NAIVE_MEMORY_SHARE = 0.8  # the naive route is skipped where its estimate exceeds this share of the GPU's memory


def status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    return status_mb("VmRSS")


def load(model_name: str, device: str, dtype: str = "float32"):
    import torch

    import poslens
    from poslens.model.hooks import run_with_hooks

    torch.manual_seed(0)
    model = poslens.load_model(model_name, device=device, dtype=dtype)
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


class DeviceMemory:
    """The memory readings of one process's routes: CUDA's allocator statistics, or on the CPU (the GPU suite's dry
    run) the resident memory and its peak (VmHWM, reset before each route where the kernel allows it)."""

    def __init__(self, device: str):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def synchronize(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)

    def allocated(self) -> int:
        """Bytes held now (CUDA: allocated by torch; CPU: resident)."""
        import torch

        return torch.cuda.memory_allocated(self.device) if self.cuda else int(rss_mb() * 2**20)

    def reset_peak(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            from memory_calibration import release_free_heap, reset_peak_resident  # benchmarks/, this script's folder

            release_free_heap()
            reset_peak_resident()

    def peak(self) -> int:
        """Peak bytes since :meth:`reset_peak`."""
        import torch

        return torch.cuda.max_memory_allocated(self.device) if self.cuda else int(status_mb("VmHWM") * 2**20)

    def total(self) -> int:
        """The device's memory: the GPU's, or the machine's."""
        import torch

        if self.cuda:
            return torch.cuda.get_device_properties(self.device).total_memory
        import psutil

        return psutil.virtual_memory().total

    def name(self) -> str:
        import torch

        return torch.cuda.get_device_name(self.device) if self.cuda else platform.processor() or platform.machine()


def naive_bytes(model, seq_len: int, batch_size: int, held: int) -> int:
    """Estimated peak bytes of the naive route: ``held`` (the weights and buffers held now), every layer's cached
    scores and pattern [B, H, T, T] in the model's dtype, and one layer's eager softmax (float32, then cast back)."""
    itemsize = next(model.hf_model.parameters()).element_size()
    square = batch_size * model.n_heads * seq_len * seq_len
    return int(held + 2 * model.n_layers * square * itemsize + square * (4 + itemsize))


def run_cuda_routes(
    model_name: str,
    lengths: list[int],
    n_seqs: int,
    device: str,
    repeats: int = 2,
    dtype: str = "float32",
    batch_size: int = 1,
    groups: int | None = None,
    routes: tuple[str, ...] = ROUTES,
    warmup_len: int | None = None,
    time_budget: float | None = None,
    on_row=None,
) -> list[dict]:
    """Every route and length in one process: CUDA's allocator statistics give each route's own peak.

    Lengths run in the order given (the GPU suite gives the longest first: its targets are checked there, and a
    time budget then skips only shorter lengths); ``on_row(rows)`` is called after every route (to save partial results).
    A skipped route gets a row with ``skipped`` (why) and no time or peak. On the CPU (the GPU suite's dry run)
    the same code runs with :class:`DeviceMemory`'s resident-memory readings.
    """
    groups = groups or n_seqs
    memory = DeviceMemory(device)
    model = load(model_name, device, dtype)
    total_memory = memory.total()
    if warmup_len:
        corpus = corpus_for(model, warmup_len, groups)  # one sequence per group: the same code path, briefly
        for route in routes:
            _timed(route, model, corpus, warmup_len, groups, groups, batch_size)
        print(f"  warm-up at T={warmup_len} done", file=sys.stderr, flush=True)
    rows: list[dict] = []
    start = time.perf_counter()
    last: tuple[int, float] | None = None  # (T, seconds) of the last length measured, to predict the next one
    for seq_len in lengths:
        spent = time.perf_counter() - start
        predicted = last[1] * (seq_len / last[0]) ** 2 if last else 0.0
        skip_length = time_budget is not None and spent + predicted > time_budget
        corpus = None if skip_length else corpus_for(model, seq_len, n_seqs)
        length_start = time.perf_counter()
        for route in routes:
            row = {"route": route, "seq_len": seq_len, "seconds": None, "peak_mb": None, "loaded_mb": None, "skipped": None}
            if skip_length:
                row["skipped"] = f"skipped: time budget ({time_budget:.0f} s; {spent:.0f} s spent, about {predicted:.0f} s more predicted)"
            elif time_budget is not None and time.perf_counter() - start > time_budget:
                row["skipped"] = f"skipped: time budget ({time_budget:.0f} s) spent"
            elif route == "naive":
                need = naive_bytes(model, seq_len, batch_size, memory.allocated())
                row["naive_estimate_gb"] = need / 1e9
                if need > NAIVE_MEMORY_SHARE * total_memory:
                    row["skipped"] = (
                        f"skipped: would need {need / 1e9:.1f} GB (over {NAIVE_MEMORY_SHARE:.0%} of the device's {total_memory / 1e9:.0f} GB)"
                    )
            if row["skipped"] is None:
                memory.synchronize()
                memory.reset_peak()
                row["loaded_mb"] = memory.allocated() / 2**20
                row["seconds"] = min(_timed(route, model, corpus, seq_len, n_seqs, groups, batch_size) for _ in range(repeats))
                row["peak_mb"] = memory.peak() / 2**20
                print(f"  {route:8s} T={seq_len}: {row['seconds']:.3f} s, peak {row['peak_mb']:.0f} MB", file=sys.stderr, flush=True)
            else:
                print(f"  {route:8s} T={seq_len}: {row['skipped']}", file=sys.stderr, flush=True)
            rows.append(row)
            if on_row is not None:
                on_row(rows)
        if not skip_length:
            last = (seq_len, time.perf_counter() - length_start)
    return rows


def cuda_table(rows: list[dict]) -> str:
    """The CUDA run's Markdown table (time and peak, each with its ratio to the plain forward) and the targets' verdicts."""
    lines = [
        "| T | route | time (s) | time / plain | peak memory (MB) | peak / plain | peak − loaded (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    plain = {r["seq_len"]: r for r in rows if r["route"] == "plain" and r["seconds"] is not None}
    for r in sorted(rows, key=lambda r: (r["seq_len"], ROUTES.index(r["route"]))):
        if r["seconds"] is None:
            lines.append(f"| {r['seq_len']} | {r['route']} | {r['skipped']} | | | | |")
            continue
        p = plain.get(r["seq_len"])
        time_ratio = f"{r['seconds'] / p['seconds']:.2f}" if p else "no plain run"
        peak_ratio = f"{r['peak_mb'] / p['peak_mb']:.2f}" if p else "no plain run"
        lines.append(
            f"| {r['seq_len']} | {r['route']} | {r['seconds']:.3f} | {time_ratio} | {r['peak_mb']:.0f} | {peak_ratio} "
            f"| {r['peak_mb'] - r['loaded_mb']:.0f} |"
        )
    lines += ["", *target_lines(rows)]
    return "\n".join(lines) + "\n"


def targets(rows: list[dict]) -> dict | None:
    """poslens / plain at the longest length where both ran, against :data:`TARGET_TIME` and :data:`TARGET_PEAK`."""
    done = {(r["route"], r["seq_len"]): r for r in rows if r["seconds"] is not None}
    both = [t for (route, t) in done if route == "poslens" and ("plain", t) in done]
    if not both:
        return None
    t = max(both)
    mine, plain = done[("poslens", t)], done[("plain", t)]
    time_ratio, peak_ratio = mine["seconds"] / plain["seconds"], mine["peak_mb"] / plain["peak_mb"]
    return {
        "seq_len": t,
        "time_ratio": time_ratio,
        "peak_ratio": peak_ratio,
        "target_time": TARGET_TIME,
        "target_peak": TARGET_PEAK,
        "time_met": time_ratio <= TARGET_TIME,
        "peak_met": peak_ratio <= TARGET_PEAK,
    }


def target_lines(rows: list[dict]) -> list[str]:
    """The targets' verdicts as Markdown lines."""
    verdict = targets(rows)
    if verdict is None:
        return ["Targets: not checked (no length where both plain and poslens ran)."]
    t = verdict["seq_len"]
    met = {True: "met", False: "NOT met"}
    return [
        f"Targets at T = {t} (poslens, probe off, against the plain forward):",
        "",
        f"- time: {verdict['time_ratio']:.2f}× (target ≤ {TARGET_TIME}×): {met[verdict['time_met']]}",
        f"- peak memory: {verdict['peak_ratio']:.2f}× (target ≤ {TARGET_PEAK}×): {met[verdict['peak_met']]}",
    ]


def write_cuda_outputs(rows: list[dict], args, device: str, json_path: str | None, markdown_path: str | None) -> None:
    """Write the JSON file (settings, environment, rows, targets) and the Markdown table, each whole or not at all."""
    import torch

    memory = DeviceMemory(device)
    header = (
        f"model {args.model}, {args.n_seqs} sequences per route in {args.groups or args.n_seqs} groups, batch {args.batch_size}, "
        f"{args.dtype}, device {device} ({memory.name()}), {args.repeats} timed run(s) per route "
        f"(fastest kept), torch {torch.__version__}, CUDA {torch.version.cuda}; peak: "
        f"{'torch.cuda.max_memory_allocated' if memory.cuda else 'resident memory (VmHWM), one process for every route'}\n\n"
    )
    for path, text in (
        (markdown_path, lambda: header + cuda_table(rows)),
        (
            json_path,
            lambda: json.dumps(
                {
                    "settings": {k: v for k, v in vars(args).items() if k != "child"},
                    "environment": {
                        "python": platform.python_version(),
                        "torch": torch.__version__,
                        "cuda": torch.version.cuda,
                        "device": device,
                        "device_name": memory.name(),
                        "device_memory_bytes": memory.total(),
                    },
                    "rows": rows,
                    "targets": targets(rows),
                },
                indent=1,
            ),
        ),
    ):
        if path:
            temporary = Path(str(path) + ".part")
            temporary.write_text(text())
            temporary.replace(path)


def _collected_then_timed(route: str, model, corpus, seq_len: int, n_seqs: int) -> float:
    """A garbage collection, then :func:`_timed`: a repeat must not find the last one's result still held by a
    reference cycle that the collector has not reached yet (its sums would count twice in the peak)."""
    import gc

    gc.collect()
    return _timed(route, model, corpus, seq_len, n_seqs)


def _timed(route: str, model, corpus, seq_len: int, n_seqs: int, groups: int | None = None, batch_size: int = 1) -> float:
    """Seconds of one run of ``route`` over the corpus's first ``n_seqs`` sequences, in ``groups`` groups (default one
    per sequence) of batches of at most ``batch_size`` sequences; CUDA's queue is drained before and after."""
    import gc

    import torch

    import poslens
    from poslens.capture.cell_sum_capture import CellSumCapture
    from poslens.capture.counterfactual_replay import CounterfactualReplay
    from poslens.capture.row_bin_store import RowBinStore
    from poslens.fit.binning import Binning
    from poslens.fit.cross_fit import counterfactual_cells, cross_fitted_absolute_components
    from poslens.fit.metric_intervals import metrics_with_intervals
    from poslens.measurement.batching import batches
    from poslens.measurement.pipeline import collect_sums
    from poslens.model.hooks import attn_pattern, attn_scores, run_with_hooks

    groups = groups or n_seqs
    plan = batches(n_seqs, groups, batch_size)
    if corpus.n_seqs != n_seqs:
        corpus = corpus.subset(list(range(n_seqs)))
    device = next(model.hf_model.parameters()).device
    cuda = device.type == "cuda"
    gc.collect()  # the last route's result, if a reference cycle still holds it, must not count in this one's peak
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    if route == "plain":
        for index, _ in plan:
            run_with_hooks(model, corpus.tokens[index])
    elif route == "poslens":
        poslens.measure(model, corpus, groups=groups, batch_size=batch_size, probe=False, progress=False)
    elif route == "poslens+probe":
        poslens.measure(model, corpus, groups=groups, batch_size=batch_size, probe=True, progress=False)
    elif route == "capture":
        collect_sums(model, corpus, groups=groups, batch_size=batch_size, probe=False, progress=False)
    elif route == "naive":
        store = RowBinStore()
        capture = CellSumCapture(model, Binning(seq_len), groups=groups, probe=False, store=store)
        wanted = {attn_scores(l) for l in range(model.n_layers)} | {attn_pattern(l) for l in range(model.n_layers)}
        caches = []
        for index, sequence_groups in plan:
            with torch.inference_mode():
                _, cache = model.bridge.run_with_cache(corpus.tokens[index].to(device), names_filter=lambda name: name in wanted)
            capture.sequence_groups = sequence_groups
            capture.add_structure(len(index))
            for layer in range(model.n_layers):
                capture.reduce(layer, cache[attn_scores(layer)])
            caches.append(cache)
        cross_fit = cross_fitted_absolute_components(capture.sums)
        replay = CounterfactualReplay(model, capture.sums.binning, cross_fit, groups)
        replay.replay(store)
        store.close()
        del caches
        capture.sums.counterfactual_cells = counterfactual_cells(capture.sums, cross_fit, replay.log_partition)
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
                    capture_output=True,
                    text=True,
                    check=True,
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
    suite = parser.add_argument_group("one process for every route (CUDA; on the CPU with --one-process: the GPU suite's dry run)")
    suite.add_argument("--one-process", action="store_true", help="on the CPU too: every route in this process, as on CUDA")
    suite.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    suite.add_argument("--batch-size", type=int, default=1, help="sequences per forward pass")
    suite.add_argument("--groups", type=int, default=None, help="jackknife groups (default: one per sequence)")
    suite.add_argument("--routes", nargs="+", default=list(ROUTES), choices=ROUTES)
    suite.add_argument("--repeats", type=int, default=2, help="timed runs per route and length, fastest kept")
    suite.add_argument("--warmup-len", type=int, default=None, help="T of one untimed run of every route first")
    suite.add_argument("--time-budget", type=float, default=None, help="seconds for the timed part; later lengths are skipped")
    suite.add_argument("--json", default=None, help="write settings, environment, rows and targets here")
    suite.add_argument("--markdown", default=None, help="write the Markdown table here")
    args = parser.parse_args()
    if args.child:
        route, seq_len, n_seqs = args.child[0], int(args.child[1]), int(args.child[2])
        print(json.dumps(run_cpu_route(route, args.model, seq_len, n_seqs)))
        return
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") or args.one_process:

        def save(rows: list[dict]) -> None:
            write_cuda_outputs(rows, args, device, args.json, args.markdown)

        rows = run_cuda_routes(
            args.model,
            args.lengths,
            args.n_seqs,
            device,
            args.repeats,
            args.dtype,
            args.batch_size,
            args.groups,
            tuple(args.routes),
            args.warmup_len,
            args.time_budget,
            on_row=save,
        )
        save(rows)
        print(DeviceMemory(device).name() + "\n")
        print(cuda_table(rows))
        return
    rounds = cpu_rounds(args.model, args.lengths, args.n_seqs, args.rounds)
    memory = "peak RSS"
    print(f"model {args.model}, {args.n_seqs} sequences per route, batch 1, float32, device {device}, {len(rounds)} round(s)\n")
    print(
        f"| T | route | time (s), median | time / plain, median (range) | {memory} (MB), median | peak / plain, median (range) | peak − loaded (MB) |"
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
