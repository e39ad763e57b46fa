"""This process's memory: readings, peaks, and the measuring run that checks the estimate.

:mod:`poslens.runtime.memory` predicts a capture run's peak and plans batches; this
module reads what the machine says. On CPU the readings come from
/proc/self/status (VmRSS, VmHWM; psutil where there is no /proc), the free
memory from /proc/meminfo and the cgroup limit; on CUDA from PyTorch's
allocator statistics.

A peak on CPU is a rise in resident memory, so two things are done before the
baseline is read: the C heap's free pages are handed back
(:func:`release_free_heap`, glibc ``malloc_trim``), else a run can reuse memory
that an earlier step freed without the resident set growing; and the peak
(VmHWM) is reset (:func:`reset_peak_resident`), else the loader's own peak
counts. :func:`measure_run` (``python -m poslens.runtime.process_memory --measure MODEL
B T``, one fresh process per setting) loads a model, runs one capture pass and
reports the measured peak next to :func:`poslens.runtime.memory.estimate_peak_bytes`;
``benchmarks/memory_calibration.py`` runs it over a grid.

Example:
    >>> from poslens.runtime.process_memory import measured_peak_bytes, resident_bytes
    >>> resident_bytes() > 0
    True
    >>> measured_peak_bytes(lambda: bytearray(32 << 20)) >= 30 << 20
    True
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

import torch

#: Groups of a measuring run (measure_run): two, the fewest that give an interval.
MEASURE_GROUPS = 2


def _proc_status() -> dict[str, int]:
    """The byte-valued fields of /proc/self/status (VmRSS, VmHWM, RssAnon, …)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0]) * 1024
    return out


def resident_bytes() -> int:
    """This process's resident memory now (VmRSS), in bytes.

    Example:
        >>> resident_bytes() > 0
        True
    """
    try:
        return _proc_status()["VmRSS"]
    except (OSError, KeyError):
        import psutil

        return int(psutil.Process().memory_info().rss)


def free_memory_bytes(device: str | torch.device | None = None) -> int:
    """Memory available for new allocations on ``device`` (default CPU), in bytes.

    CPU: ``MemAvailable`` from /proc/meminfo (psutil's ``available`` where
    there is no /proc), and no more than the room left under a cgroup memory
    limit. CUDA: the free bytes of ``torch.cuda.mem_get_info`` plus what
    PyTorch's caching allocator holds unused.

    Example:
        >>> free_memory_bytes("cpu") > 0
        True
    """
    device = torch.device(device or "cpu")
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + unused)
    if device.type != "cpu":
        raise ValueError(f"poslens does not know the free memory of a {device.type} device; give a budget (--max-memory)")
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        import psutil

        available = int(psutil.virtual_memory().available)
    room = _cgroup_room()
    return min(available, room) if room is not None else available


def _cgroup_room() -> int | None:
    """Bytes left under this cgroup's memory limit (v2, then v1), or None without a limit."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            with open(limit_file) as f:
                raw = f.read().strip()
            if raw == "max" or int(raw) >= 1 << 60:
                return None
            with open(usage_file) as f:
                return max(0, int(raw) - int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return None


def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim(0)``).

    Memory that the process freed earlier (while loading a model, say) stays
    resident in the allocator's arenas; a later allocation can reuse it without
    the resident set growing, so a peak measured as a rise in resident memory
    would miss it. Trimming first makes every page a run touches count.
    Returns False where the C library has no ``malloc_trim`` (not glibc).

    Example:
        >>> isinstance(release_free_heap(), bool)
        True
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def reset_peak_resident() -> bool:
    """Reset this process's peak resident memory (VmHWM) to its current RSS.

    Writes ``5`` to /proc/self/clear_refs (Linux ≥ 4.0). Returns False where
    that is refused; VmHWM then keeps the process's lifetime peak.

    Example:
        >>> isinstance(reset_peak_resident(), bool)
        True
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measured_peak_bytes(fn: Callable[[], Any], device: str | torch.device | None = None) -> int:
    """Run ``fn()`` and return its peak memory increase on ``device`` (default CPU), in bytes.

    CPU: VmHWM after the run minus VmRSS before it, the heap's free pages
    released (:func:`release_free_heap`) and VmHWM reset first
    (:func:`reset_peak_resident`). Where it cannot be reset the lifetime peak
    counts, so measure in a fresh process (:func:`measure_in_subprocess`).
    CUDA: ``torch.cuda.max_memory_allocated`` after a reset, minus the bytes
    allocated before.

    Example:
        >>> n = measured_peak_bytes(lambda: bytearray(64 << 20))
        >>> n >= 60 << 20
        True
    """
    device = torch.device(device or "cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - before)
    gc.collect()
    release_free_heap()
    before = resident_bytes()
    reset_peak_resident()
    fn()
    return max(0, _proc_status().get("VmHWM", resident_bytes()) - before)


def measure_run(model_name: str, batch_size: int, seq_len: int, dtype: str = "float32", device: str = "cpu") -> dict[str, Any]:
    """Load a model, run one capture pass, and report measured and estimated memory.

    The pass is :func:`poslens.measurement.pipeline.collect_sums` over a random corpus in
    two groups: ``batch_size`` sequences (with the first-batch mask check),
    then ``batch_size - 1`` (at least 1). Returns a dict of bytes: ``weights``,
    ``after_load`` (resident memory after loading, weights paged in),
    ``increase`` (peak minus after_load), ``peak``, ``runtime``
    (after_load minus weights), and ``estimate``
    (:meth:`poslens.runtime.memory.MemoryEstimate.as_dict` with that runtime). Run it in a fresh
    process (:func:`measure_in_subprocess`): a process's earlier allocations
    change what the allocator holds.

    Example:
        >>> run = measure_run("smollm2-135m", batch_size=1, seq_len=256)  # doctest: +SKIP
        >>> run["increase"] / run["estimate"]["increase"]  # doctest: +SKIP
        0.97...
    """
    import poslens
    from poslens.model.corpus import make_corpus
    from poslens.measurement.pipeline import collect_sums
    from poslens.runtime.memory import estimate_peak_bytes, runtime_bytes, weight_bytes

    start = time.perf_counter()
    dev = torch.device(device)
    model = poslens.load_model(model_name, dtype=dtype, device=dev)  # never the default: it picks CUDA where there is one
    corpus = make_corpus(model, "random", n_seqs=max(2, 2 * batch_size - 1), seq_len=seq_len, seed=0)
    weights = weight_bytes(model)
    runtime = runtime_bytes(model, dev)  # on CPU: weights paged in, the heap's free pages handed back
    after_load = weights + runtime
    reset = dev.type == "cuda" or reset_peak_resident()
    run = lambda: collect_sums(model, corpus, groups=MEASURE_GROUPS, batch_size=batch_size, progress=False)  # noqa: E731
    increase = measured_peak_bytes(run, dev)
    estimate = estimate_peak_bytes(model, batch_size, seq_len, runtime_bytes=runtime, device=dev, groups=MEASURE_GROUPS)
    return {
        "model": model_name,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "dtype": dtype,
        "device": device,
        "weights": weights,
        "after_load": after_load,
        "runtime": runtime,
        "increase": increase,
        "peak": after_load + increase,
        "peak_reset": bool(reset),
        "estimate": estimate.as_dict(),
        "seconds": round(time.perf_counter() - start, 2),
    }


def measure_in_subprocess(
    model_name: str, batch_size: int, seq_len: int, dtype: str = "float32", device: str = "cpu", timeout: float = 600
) -> dict[str, Any]:
    """:func:`measure_run` in a fresh Python process: ``python -m poslens.runtime.process_memory --measure``.

    The child gets ``OMP_NUM_THREADS=1`` and ``HF_HUB_OFFLINE=1`` unless the
    environment sets them.

    Example:
        >>> r = measure_in_subprocess("smollm2-135m", 1, 256)        # doctest: +SKIP
        >>> round(r["estimate"]["increase"] / r["increase"], 2)      # doctest: +SKIP
        1.04
    """
    env = {**os.environ}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    args = [sys.executable, "-m", "poslens.runtime.process_memory", "--measure", str(model_name), str(batch_size), str(seq_len),
            "--dtype", dtype, "--device", device]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed with exit code {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """``python -m poslens.runtime.process_memory --measure MODEL BATCH T``: print one JSON line (see :func:`measure_run`).

    Example:
        >>> main(["--measure", "smollm2-135m", "1", "256"])  # doctest: +SKIP
        {"model": "smollm2-135m", "batch_size": 1, "seq_len": 256, "dtype": "float32", "device": "cpu", "weights": 538256896, "after_load": 1105719296, "runtime": 567462400, "increase": 51765248, ...}
        0
    """
    parser = argparse.ArgumentParser(
        prog="python -m poslens.runtime.process_memory",
        description="Measure the peak memory of one poslens capture pass, next to poslens's estimate.",
    )
    parser.add_argument("--measure", nargs=3, metavar=("MODEL", "BATCH", "T"), required=True,
                        help="load MODEL, run a capture pass of BATCH sequences of T tokens, print JSON")
    parser.add_argument("--dtype", default="float32", help="model dtype (default float32)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:n] (default cpu)")
    args = parser.parse_args(argv)
    name, batch, t = args.measure
    print(json.dumps(measure_run(name, int(batch), int(t), args.dtype, args.device)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
