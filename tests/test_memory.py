"""Memory estimates against measured peaks, and batch planning (poslens.runtime.memory, poslens.runtime.process_memory).

Each measurement is a fresh ``python -m poslens.runtime.process_memory --measure MODEL B T``
process (``OMP_NUM_THREADS=1``): it loads the model, pages its weights in,
hands the heap's free pages back (``malloc_trim``), records its resident
memory, resets the peak (VmHWM) and runs one capture pass through
``collect_sums``. Without the trim, the hundreds of MiB that dequantizing a
GGUF file frees stay resident and the pass reuses them unseen: on a cold model
cache SmolLM2 at B=2, T=512 measured a 7 MiB increase for an estimated 106.

The test compares the increase over the loaded model (peak − resident after
load) with ``estimate.increase`` (activations, sums and the largest phase).
The whole peak needs no test of its own: the estimate's runtime term is the
measured baseline (resident after load − weight bytes: Python, torch,
tokenizer, ≈ 0.5 GiB), so estimate − measured is the same for the peak as
for the increase, and the issue's 25% bound on the peak is far looser.

The subprocesses run two at a time (2 CPU cores); all of them take about a
minute, the SmolLM2 ones most of it.
"""

from __future__ import annotations

import inspect
import re
from concurrent.futures import Future, ThreadPoolExecutor

import subprocess
import sys

import pytest
import torch

import poslens
from poslens.runtime import memory
from poslens.runtime.memory import (
    MiB,
    InsufficientMemoryError,
    estimate_peak_bytes,
    parse_bytes,
    plan_batch,
)
from poslens.runtime.process_memory import free_memory_bytes, measure_in_subprocess
from poslens.model.registry import REGISTRY

TOLERANCE = 0.25  # the bound, on the whole peak
#: The increase over the loaded model: estimates were 0.80–1.22× the measured increase (repeat runs
#: of one setting within 3% of each other), the allocator's share being the least certain term.
INCREASE_TOLERANCE = 0.40
#: First-pass allocations (thread pools, oneDNN primitives) are a few MiB that may differ between
#: machines; the smallest run's increase is 17 MiB.
INCREASE_FLOOR = 8 * MiB
TINY_RUNS = [(1, 256), (4, 512), (2, 1024)]
SMOLLM2_RUNS = [(2, 512), (1, 256)]  # the longer first, so the short ones fill the other core


def _embedded_selected(request: pytest.FixtureRequest) -> bool:
    return any(
        item.get_closest_marker("embedded") is not None and item.module is request.module for item in request.session.items
    )


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tiny_llama_dir) -> dict[tuple[str, int, int], Future]:
    """Measurement subprocesses, started together, two at a time: {(model, B, T): future of the JSON}."""
    jobs: list[tuple[str, int, int]] = []
    if REGISTRY["smollm2-135m"].installed() and _embedded_selected(request):
        jobs += [("smollm2-135m", b, t) for b, t in SMOLLM2_RUNS]
    jobs += [(str(tiny_llama_dir), b, t) for b, t in TINY_RUNS]
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {job: pool.submit(measure_in_subprocess, *job) for job in jobs}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _row(r: dict) -> str:
    e = r["estimate"]
    return (
        f"{r['model'][-14:]:>14} B={r['batch_size']:<2} T={r['seq_len']:<5} increase measured {r['increase'] / MiB:7.1f} "
        f"estimated {e['increase'] / MiB:7.1f} ({e['increase'] / r['increase']:.2f}×) | peak measured "
        f"{r['peak'] / MiB:7.1f} estimated {e['total'] / MiB:7.1f} ({e['total'] / r['peak']:.2f}×) MiB"
    )


def _check(results: list[dict]) -> None:
    table = "\n".join(_row(r) for r in results)
    print("\n" + table)
    for r in results:
        e = r["estimate"]
        assert r["runtime"] > 100 * MiB, "the runtime baseline is Python + torch + transformers"
        allowed = max(INCREASE_TOLERANCE * r["increase"], INCREASE_FLOOR)
        assert abs(e["increase"] - r["increase"]) <= allowed, f"increase off by more than 40% (or 8 MiB):\n{table}"
        # The whole peak's 25% bound follows: both sides count the same weights and measured runtime,
        # so estimate − measured is the same number for the peak as for the increase, and the increase's
        # bound (at most 40% of an increase, or 8 MiB) is far below 25% of a peak of at least 0.5 GiB.
        assert allowed < TOLERANCE * r["peak"]


def test_estimate_matches_measured_peak_tiny(runs, tiny_llama_dir):
    _check([runs[(str(tiny_llama_dir), b, t)].result() for b, t in TINY_RUNS])


@pytest.mark.embedded
def test_estimate_matches_measured_peak_smollm2(runs):
    if not REGISTRY["smollm2-135m"].installed():
        pytest.skip(f"smollm2-135m is not installed: {REGISTRY['smollm2-135m'].install_command}")
    results = [runs[("smollm2-135m", b, t)].result() for b, t in SMOLLM2_RUNS]
    _check(results)
    # measuring forwards keep only the last position's logits (hooks.run_with_hooks), so they stay small
    assert all(r["estimate"]["logits"] < r["estimate"]["increase"] / 4 for r in results)


# ----------------------------------------------------------------------------- planning


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir, device="cpu")  # the planning tests are CPU figures, also on a GPU machine


def _need(model, b: int, t: int, groups: int = memory.DEFAULT_GROUPS) -> int:
    return estimate_peak_bytes(model, b, t, groups=groups).total  # runtime 0, as plan_batch(runtime=0) counts it


def test_plan_batch_smaller_budget_smaller_batch(tiny):
    # T=128: the capture keeps all 4 heads in one chunk up to B=64, so the estimate grows with B.
    assert plan_batch(tiny, 128, n_seqs=64, budget_bytes=_need(tiny, 16, 128), runtime=0) == 16
    assert plan_batch(tiny, 128, n_seqs=64, budget_bytes=_need(tiny, 2, 128), runtime=0) == 2
    assert plan_batch(tiny, 128, n_seqs=64, budget_bytes=_need(tiny, 2, 128) - 1, runtime=0) == 1
    assert plan_batch(tiny, 128, n_seqs=5, budget_bytes=_need(tiny, 16, 128), runtime=0) == 5  # ≤ n_seqs


def test_plan_batch_is_the_largest_that_fits(tiny):
    # T=512: heads per chunk drop as B grows, so the estimate steps down at some B; the plan is still the largest fit.
    budget = _need(tiny, 6, 512)
    chosen = plan_batch(tiny, 512, n_seqs=40, budget_bytes=budget, runtime=0)
    fitting = [b for b in range(1, 41) if _need(tiny, b, 512) <= budget]
    assert chosen == max(fitting)


def test_plan_batch_counts_the_runtime_with_a_budget(tiny):
    runtime = memory.runtime_bytes(tiny)
    assert runtime > 100 * MiB
    budget = _need(tiny, 4, 128) + runtime
    assert plan_batch(tiny, 128, 64, budget_bytes=budget, runtime=runtime) == 4
    more = runtime + _need(tiny, 4, 128) - _need(tiny, 2, 128)  # the same budget, a larger process
    assert plan_batch(tiny, 128, 64, budget_bytes=budget, runtime=more) == 2


def test_plan_batch_default_budget_is_free_memory(tiny, monkeypatch):
    increase = estimate_peak_bytes(tiny, 3, 128).increase
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device=None: int(increase / memory.FREE_SHARE) + 1)
    assert plan_batch(tiny, 128, n_seqs=64) == 3
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device=None: 1 << 20)
    with pytest.raises(InsufficientMemoryError, match="above the loaded model"):
        plan_batch(tiny, 128, n_seqs=64)


def test_plan_batch_refuses_with_the_numbers(tiny):
    need1 = _need(tiny, 1, 512)
    budget = need1 - 4 * MiB
    with pytest.raises(InsufficientMemoryError) as info:
        plan_batch(tiny, 512, n_seqs=64, budget_bytes=budget, runtime=0)
    error = info.value
    assert isinstance(error, MemoryError)
    message = str(error)
    assert f"{need1 / MiB:.1f} MiB" in message and f"{budget / MiB:.1f} MiB" in message
    assert error.need == need1 and error.budget == budget and error.estimate.total == need1
    longest = error.max_seq_len
    assert 2 <= longest < 512 and f"--seq-len {longest}" in message
    assert _need(tiny, 1, longest) <= budget < _need(tiny, 1, longest + 1)


def test_plan_batch_says_when_no_length_fits(tiny):
    weights = estimate_peak_bytes(tiny, 1, 2).weights
    with pytest.raises(InsufficientMemoryError, match="no sequence length fits") as info:
        plan_batch(tiny, 256, n_seqs=8, budget_bytes=weights, runtime=0)
    assert info.value.max_seq_len == 0


# ----------------------------------------------------------------------------- pieces


def test_estimate_terms(tiny):
    est = estimate_peak_bytes(tiny, 2, 256)
    h, e = tiny.n_heads, 4
    assert est.weights == sum(p.numel() * 4 for p in tiny.hf_model.parameters()) + sum(
        b.numel() * b.element_size() for b in tiny.hf_model.buffers()
    )
    assert est.scores == e * 2 * h * 256 * 256
    assert est.attention == 2 * est.scores  # float32: scores + softmax
    assert est.logits == e * 2 * 1 * tiny.hf_model.config.vocab_size  # only the last position (logits_to_keep=1)
    half = estimate_peak_bytes(tiny, 2, 256, dtype=torch.bfloat16)
    assert half.scores == est.scores // 2 and half.weights < est.weights
    assert half.attention == 2 * h * 256 * 256 * (2 + 4 + 2)  # bf16 scores, float32 softmax, its bf16 cast
    text = est.describe()
    assert re.search(r"peak [\d.]+ MiB = weights [\d.]+ \+ runtime", text)


def test_parse_bytes():
    assert parse_bytes("8GB") == 8 * 10**9
    assert parse_bytes("8GiB") == parse_bytes("8G") == 8 << 30
    assert parse_bytes("1.5 MiB") == 3 << 19
    assert parse_bytes("4096") == 4096
    for bad in ("", "lots", "-1G", "0", "12XB"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_free_memory_and_measured_peak():
    free = free_memory_bytes("cpu")
    assert 0 < free
    # in a fresh process: memory that a long test session freed but kept resident would absorb the allocation
    code = (
        "import torch; from poslens.runtime.process_memory import measured_peak_bytes; "
        "print(measured_peak_bytes(lambda: torch.ones(64 << 20, dtype=torch.uint8)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    grown = int(done.stdout.strip().splitlines()[-1])
    assert 60 * MiB <= grown <= 200 * MiB


def test_measured_peak_counts_reused_heap():
    # 1000 freed 64 KiB holes in the C heap, pinned between live blocks so that glibc cannot trim them
    # itself: an allocation of the same size fits in them without the resident set growing, unless
    # measured_peak_bytes hands them back first.
    code = (
        "import numpy as np; from poslens.runtime.process_memory import measured_peak_bytes\n"
        "keep, drop = [], []\n"
        "for i in range(2000): (keep if i % 2 else drop).append(np.ones(8192))\n"
        "del drop\n"
        "print(measured_peak_bytes(lambda: [np.ones(8192) for _ in range(1000)]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    grown = int(done.stdout.strip().splitlines()[-1])
    assert grown >= 50 * MiB  # 62.5 MiB allocated; 0 MiB measured before the trim


def test_sums_are_counted_per_group(tiny):
    from poslens.fit.binning import Binning
    from poslens.measurement.pipeline import collect_sums
    from poslens.capture.counterfactual_capture import CounterfactualCapture
    from poslens.measurement.pipeline import cross_fitted_residuals
    from poslens.fit.sums import CellSums

    two, eight = estimate_peak_bytes(tiny, 2, 256, groups=2), estimate_peak_bytes(tiny, 2, 256, groups=8)
    held = CellSums.zeros(groups=8, layers=tiny.n_layers, heads=tiny.n_heads, binning=Binning(256), layer_windows=tuple(tiny.window))
    held.arrays["nseq"][:] = 1.0
    # the second pass holds per window: A per group, the current group's variants and their exp(−A) weights, and Σ log Z'
    variants = cross_fitted_residuals(held)(0)
    second = CounterfactualCapture(tiny, held.binning, lambda g: variants, groups=8)
    second_pass = sum(3 * a.nbytes for a in variants.values()) + sum(a.nbytes for a in second.log_partition.values())
    assert eight.sums == sum(a.nbytes for a in [*held.arrays.values(), held.row_features, held.row_count, held.group_sizes]) + second_pass
    assert eight.increase - two.increase == eight.sums - two.sums > 0
    assert memory.DEFAULT_GROUPS == inspect.signature(collect_sums).parameters["groups"].default


def test_choose_batch_size(tiny, monkeypatch):
    from poslens.runtime.memory import choose_batch_size

    assert choose_batch_size(tiny, 128, n_seqs=32, groups=8, batch_size=6) == 6  # no budget: unchanged
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device=None: 1 << 40)
    assert choose_batch_size(tiny, 128, n_seqs=32, groups=8) == 4  # a batch never spans two groups of 4
    assert choose_batch_size(tiny, 128, n_seqs=30, groups=4, batch_size=6, max_memory="free") == 6
    budget = (_need(tiny, 3, 128, groups=2) + _need(tiny, 4, 128, groups=2)) // 2 + memory.runtime_bytes(tiny)  # runtime re-measured inside
    assert choose_batch_size(tiny, 128, n_seqs=64, groups=2, batch_size=16, max_memory=budget) == 3
    with pytest.raises(InsufficientMemoryError):
        choose_batch_size(tiny, 128, n_seqs=64, groups=2, max_memory="1MiB")
