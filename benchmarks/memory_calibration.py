"""Measured against estimated peak memory of capture runs: the figures quoted in poslens.runtime.memory.

Usage:
    python benchmarks/memory_calibration.py [--jobs 2] [--no-smollm2] [--out calibration.json]

Each setting is one fresh ``python -m poslens.runtime.process_memory --measure MODEL B T``
process (:func:`poslens.runtime.process_memory.measure_in_subprocess`, ``OMP_NUM_THREADS=1``):
load the model, page its weights in, hand the heap's free pages back, record
the resident memory, reset the peak, run one capture pass in two groups, and
compare the peak with :func:`poslens.runtime.memory.estimate_peak_bytes`. The tiny
models are random Llama, Mistral (sliding window 8) and Gemma 3 (mixed
windows) from :func:`poslens.model.tiny.save_tiny_model`; SmolLM2-135M is the
embedded 4-bit model, dequantized to float32. Prints a Markdown table and the
range of each ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TINY_SETTINGS = [(1, 64), (16, 64), (1, 256), (4, 256), (16, 256), (4, 512), (2, 1024)]
SMOLLM2_SETTINGS = [(1, 256), (4, 256), (2, 512), (1, 1024), (2, 1024)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2, help="measuring processes at a time (default 2)")
    parser.add_argument("--no-smollm2", action="store_true", help="tiny models only")
    parser.add_argument("--out", type=Path, help="also write every measurement as JSON")
    args = parser.parse_args()

    from poslens.runtime.memory import MiB
    from poslens.runtime.process_memory import measure_in_subprocess
    from poslens.model.registry import REGISTRY
    from poslens.model.tiny import save_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="poslens-calibration-"))
    jobs = [
        (kind, str(save_tiny_model(folder / kind, kind)), b, t)
        for kind in ("llama", "mistral", "gemma3")
        for b, t in TINY_SETTINGS
    ]
    if not args.no_smollm2 and REGISTRY["smollm2-135m"].installed():
        jobs += [("smollm2-135m", "smollm2-135m", b, t) for b, t in SMOLLM2_SETTINGS]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [(label, pool.submit(measure_in_subprocess, model, b, t)) for label, model, b, t in jobs]
        results = []
        for label, future in futures:
            r = future.result()
            r["label"] = label
            results.append(r)
            print(f"  {label} B={r['batch_size']} T={r['seq_len']} done", file=sys.stderr, flush=True)

    print("| model | B | T | increase measured (MiB) | estimated (MiB) | est / measured | peak measured (MiB) | estimated (MiB) | est / measured |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        e = r["estimate"]
        print(
            f"| {r['label']} | {r['batch_size']} | {r['seq_len']} | {r['increase'] / MiB:.1f} | {e['increase'] / MiB:.1f} | "
            f"{e['increase'] / r['increase']:.2f} | {r['peak'] / MiB:.0f} | {e['total'] / MiB:.0f} | {e['total'] / r['peak']:.2f} |"
        )
    print()
    for name, chosen in (("tiny models", [r for r in results if r["label"] != "smollm2-135m"]),
                         ("smollm2-135m", [r for r in results if r["label"] == "smollm2-135m"])):
        if chosen:
            inc = [r["estimate"]["increase"] / r["increase"] for r in chosen]
            peak = [r["estimate"]["total"] / r["peak"] for r in chosen]
            print(f"{name}: estimated / measured increase {min(inc):.2f}–{max(inc):.2f}×, whole peak {min(peak):.2f}–{max(peak):.2f}×")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
