"""Memory estimates, batch planning and the machine's readings (poslens.runtime.estimate, .planner, .system).

The estimate's agreement with measured peaks is not tested here: a measured
peak depends on the machine (allocator, BLAS threads, library versions; one
machine measured 37 MiB for an estimated 18 at B=1, T=256), so it is a
calibration run, ``python benchmarks/memory_calibration.py``. These tests
check what does not depend on the machine: the estimate's terms, the planner's
choices for given budgets, and that the free and resident memory agree with
psutil and respect a cgroup limit.
"""

from __future__ import annotations

import inspect
import re

import psutil
import pytest
import torch

import poslens
from poslens.runtime import estimate, planner, system
from poslens.runtime.estimate import MiB, estimate_peak_bytes
from poslens.runtime.planner import InsufficientMemoryError, choose_batch_size, parse_bytes, plan_batch
from poslens.runtime.system import cgroup_room_bytes, free_memory_bytes, resident_bytes

# ----------------------------------------------------------------------------- planning


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir, device="cpu")  # the planning tests are CPU figures, also on a GPU machine


def _need(model, b: int, t: int, groups: int = estimate.DEFAULT_GROUPS) -> int:
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
    runtime = system.runtime_bytes(tiny)
    assert runtime > 100 * MiB
    budget = _need(tiny, 4, 128) + runtime
    assert plan_batch(tiny, 128, 64, budget_bytes=budget, runtime=runtime) == 4
    more = runtime + _need(tiny, 4, 128) - _need(tiny, 2, 128)  # the same budget, a larger process
    assert plan_batch(tiny, 128, 64, budget_bytes=budget, runtime=more) == 2


def test_plan_batch_default_budget_is_free_memory(tiny, monkeypatch):
    increase = estimate_peak_bytes(tiny, 3, 128).increase
    monkeypatch.setattr(planner, "free_memory_bytes", lambda device=None: int(increase / planner.FREE_SHARE) + 1)
    assert plan_batch(tiny, 128, n_seqs=64) == 3
    monkeypatch.setattr(planner, "free_memory_bytes", lambda device=None: 1 << 20)
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
    assert est.weights == sum(p.numel() * 4 for p in tiny.hf_model.parameters()) + sum(b.numel() * b.element_size() for b in tiny.hf_model.buffers())
    assert est.scores == e * 2 * h * 256 * 256
    assert est.attention == 2 * est.scores  # float32: scores + softmax
    assert est.logits == e * 2 * 1 * tiny.hf_model.config.vocab_size  # only the last position (logits_to_keep=1)
    half = estimate_peak_bytes(tiny, 2, 256, dtype=torch.bfloat16)
    assert half.scores == est.scores // 2 and half.weights < est.weights
    assert half.attention == 2 * h * 256 * 256 * (2 + 4 + 2)  # bf16 scores, float32 softmax, its bf16 cast
    text = est.describe()
    assert re.search(r"peak [\d.]+ MiB = weights [\d.]+ \+ runtime", text)
    held = estimate_peak_bytes(tiny, 2, 256, runtime_overhead_bytes=5 * MiB)
    assert held.runtime == 5 * MiB and held.total == est.total + 5 * MiB and held.increase == est.increase


def test_parse_bytes():
    assert parse_bytes("8GB") == 8 * 10**9
    assert parse_bytes("8GiB") == parse_bytes("8G") == 8 << 30
    assert parse_bytes("1.5 MiB") == 3 << 19
    assert parse_bytes("4096") == 4096
    for bad in ("", "lots", "-1G", "0", "12XB"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_free_and_resident_memory_agree_with_psutil(tmp_path):
    # no cgroup files here: the free memory is psutil's available, which moves as other processes allocate
    before = psutil.virtual_memory().available
    free = free_memory_bytes("cpu", cgroup_root=tmp_path)
    after = psutil.virtual_memory().available
    assert min(before, after) - 256 * MiB <= free <= max(before, after) + 256 * MiB
    rss = psutil.Process().memory_info().rss
    assert abs(resident_bytes() - rss) <= 64 * MiB and resident_bytes() > 100 * MiB  # torch is imported
    grown = torch.ones(128 << 20, dtype=torch.uint8)  # 128 MiB, touched
    assert resident_bytes() - rss >= 100 * MiB
    del grown


def _cgroup_v2(root, limit: str, used: int) -> None:
    (root / "memory.max").write_text(limit + "\n")
    (root / "memory.current").write_text(f"{used}\n")


def test_cgroup_limit_bounds_the_free_memory(tmp_path):
    available = psutil.virtual_memory().available
    _cgroup_v2(tmp_path, str(1 << 30), 768 * MiB)
    assert cgroup_room_bytes(tmp_path) == 256 * MiB
    assert free_memory_bytes("cpu", cgroup_root=tmp_path) == min(256 * MiB, available)
    _cgroup_v2(tmp_path, str(2 << 30), 3 << 30)  # usage above the limit (reclaim pending): no room, not negative
    assert free_memory_bytes("cpu", cgroup_root=tmp_path) == 0
    _cgroup_v2(tmp_path, "max", 768 * MiB)  # no limit: psutil's figure
    assert cgroup_room_bytes(tmp_path) is None
    assert free_memory_bytes("cpu", cgroup_root=tmp_path) > 256 * MiB
    roomy = available + (64 << 30)  # a limit above what the machine has: psutil's figure is the smaller
    _cgroup_v2(tmp_path, str(roomy), 0)
    assert free_memory_bytes("cpu", cgroup_root=tmp_path) < roomy


def test_cgroup_v1_and_the_default_root(tmp_path, monkeypatch):
    v1 = tmp_path / "memory"
    v1.mkdir()
    (v1 / "memory.limit_in_bytes").write_text(f"{1 << 30}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{900 * MiB}\n")
    assert cgroup_room_bytes(tmp_path) == 124 * MiB
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert cgroup_room_bytes(tmp_path) is None
    (v1 / "memory.limit_in_bytes").write_text(f"{1 << 30}\n")
    monkeypatch.setattr(system, "CGROUP_ROOT", tmp_path)  # where the planner's default reading looks
    assert free_memory_bytes("cpu") == min(124 * MiB, psutil.virtual_memory().available)
    assert cgroup_room_bytes(tmp_path / "nothing-here") is None


def test_free_memory_of_an_unknown_device_names_the_choices():
    with pytest.raises(ValueError, match="cpu and cuda.*--max-memory"):
        free_memory_bytes("meta")


def test_sums_are_counted_per_group(tiny):
    from poslens.capture.counterfactual_replay import CounterfactualReplay
    from poslens.fit.binning import Binning
    from poslens.fit.cross_fit import cross_fitted_absolute_components
    from poslens.fit.sums import CellSums
    from poslens.measurement.pipeline import collect_sums

    two, eight = estimate_peak_bytes(tiny, 2, 256, groups=2), estimate_peak_bytes(tiny, 2, 256, groups=8)
    held = CellSums.zeros(groups=8, layers=tiny.n_layers, heads=tiny.n_heads, binning=Binning(256), layer_windows=tuple(tiny.sliding_windows))
    held.per_group.sequence_count[:] = 1.0
    # the replay holds per window: A per group, the current group's variants and their exp(−A) weights, and Σ log Z'
    cross_fit = cross_fitted_absolute_components(held)
    variants = cross_fit.variants(0)
    replay = CounterfactualReplay(tiny, held.binning, cross_fit, groups=8)
    replay_bytes = sum(3 * a.nbytes for a in variants.values()) + sum(a.nbytes for a in replay.log_partition.values())
    held_arrays = [
        *held.per_group.as_dict().values(),
        *held.counterfactual_cells.saved_arrays().values(),
        held.row_features,
        held.row_count,
        held.group_sizes,
    ]
    assert eight.sums == sum(a.nbytes for a in held_arrays) + replay_bytes
    assert eight.increase - two.increase == eight.sums - two.sums > 0
    # collect_sums chooses its groups from N (None: poslens.fit.groups.default_groups), never more than the estimate assumes
    from poslens.fit.groups import default_groups

    assert inspect.signature(collect_sums).parameters["groups"].default is None
    assert max(default_groups(n) for n in range(2, 1000)) == estimate.DEFAULT_GROUPS


def test_choose_batch_size(tiny, monkeypatch):
    assert choose_batch_size(tiny, 128, n_seqs=32, groups=8, batch_size=6) == 6  # no budget: unchanged
    monkeypatch.setattr(planner, "free_memory_bytes", lambda device=None: 1 << 40)
    assert choose_batch_size(tiny, 128, n_seqs=32, groups=8) == 32  # a batch may span groups: all 32 fit
    assert choose_batch_size(tiny, 128, n_seqs=5, groups=2, batch_size=16, max_memory="free") == 5  # never more than the sequences
    assert choose_batch_size(tiny, 128, n_seqs=30, groups=4, batch_size=6, max_memory="free") == 6
    budget = (_need(tiny, 3, 128, groups=2) + _need(tiny, 4, 128, groups=2)) // 2 + system.runtime_bytes(tiny)  # runtime re-measured inside
    assert choose_batch_size(tiny, 128, n_seqs=64, groups=2, batch_size=16, max_memory=budget) == 3
    with pytest.raises(InsufficientMemoryError):
        choose_batch_size(tiny, 128, n_seqs=64, groups=2, max_memory="1MiB")
