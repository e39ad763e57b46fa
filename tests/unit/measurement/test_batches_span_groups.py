"""A batch may hold sequences of several groups: its sums are split per group inside the captures.

The reference is the route poslens took before batches could span groups: every
forward pass holds sequences of one group only (each group cut into batches of
its own). Here that plan is put in place of :func:`poslens.measurement.batching.batches`
and the figures and every grouped sum must agree with those of the new plan, whose
batches cut across groups, to 1e-10: through both counterfactual routes (row-bin store
and second pass), causal, sliding-window and mixed-window models, interventions
before and after the capture, the probe, the sync-free path of the capture forced on
the CPU, the residual readout's capture and the path-specific tests' ``run_once``.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import poslens
from poslens.capture.batch_groups import BatchGroups
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.capture.residual_capture import ResidualCapture
from poslens.capture.row_bin_store import RowBinStore
from poslens.fit.binning import Binning
from poslens.fit.groups import group_of
from poslens.measurement import batching, pipeline
from poslens.measurement.batching import Batch, batches
from poslens.mechanisms import path_tests
from poslens.mechanisms.interventions import BosReplacement
from poslens.mechanisms.key_phase import KeyPhaseFreeze

N_SEQS, SEQ_LEN, GROUPS, EARLY = 7, 20, 3, 8  # groups of 3, 2 and 2 sequences
KEY = ["layer", "head", "query_window", "metric"]


def batches_within_groups(n_seqs: int, groups: int, batch_size: int) -> list[Batch]:
    """The plan before batches could span groups: each group's sequences cut into batches of their own."""
    assignment = group_of(n_seqs, groups)
    out = []
    for g in range(groups):
        members = np.nonzero(assignment == g)[0]
        out += [Batch(members[k : k + batch_size], assignment[members[k : k + batch_size]]) for k in range(0, len(members), batch_size)]
    return out


def spans_groups(plan: list[Batch]) -> bool:
    return any(len(set(batch.groups.tolist())) > 1 for batch in plan)


def grouped_fields(sums) -> dict[str, np.ndarray]:
    fields = {name: np.asarray(value) for name, value in vars(sums.per_group).items() if isinstance(value, np.ndarray)}
    fields["row_features"], fields["group_sizes"] = np.asarray(sums.row_features), np.asarray(sums.group_sizes)
    return fields


def assert_close(new: np.ndarray, old: np.ndarray, what: str, tol: float = 1e-10) -> None:
    assert np.array_equal(np.isnan(new), np.isnan(old)), f"{what}: NaNs differ"
    scale = np.maximum(1.0, np.abs(np.nan_to_num(old)))
    worst = float(np.nanmax(np.abs(new - old) / scale)) if new.size else 0.0
    assert worst <= tol, f"{what}: largest relative difference {worst:.3g}"


def assert_results_equal(new: poslens.Result, old: poslens.Result, what: str) -> None:
    a, b = new.table.sort_values(KEY).reset_index(drop=True), old.table.sort_values(KEY).reset_index(drop=True)
    assert a[KEY].equals(b[KEY]), f"{what}: different rows"
    for column in ("value", "ci_low", "ci_high"):
        assert_close(a[column].to_numpy(float), b[column].to_numpy(float), f"{what}, {column}")
    old_fields = grouped_fields(old.sums)
    for name, value in grouped_fields(new.sums).items():
        assert_close(value, old_fields[name], f"{what}, sums.{name}")
    cells_new, cells_old = new.sums.counterfactual_cells, old.sums.counterfactual_cells
    for window in cells_old.per_group:
        assert_close(cells_new.per_group[window], cells_old.per_group[window], f"{what}, counterfactual cells {window}")
        assert_close(cells_new.replicates[window], cells_old.replicates[window], f"{what}, counterfactual replicates {window}")


def test_the_plan_cuts_consecutive_sequences_across_groups():
    plan = batches(N_SEQS, GROUPS, 3)
    assert [b.sequences.tolist() for b in plan] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.groups.tolist() for b in plan] == [[0, 0, 0], [1, 1, 2], [2]]
    assert spans_groups(plan) and not spans_groups(batches_within_groups(N_SEQS, GROUPS, 3))
    # 8 sequences in 8 groups at batch 4: two passes, not eight
    assert [b.groups.tolist() for b in batches(8, 8, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_batch_groups_sum_equals_a_sum_per_group_label():
    labels = np.array([2, 2, 0, 1, 1, 1, 0])
    x = torch.randn(len(labels), 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    runs = BatchGroups.of(labels)
    assert runs.groups == [2, 0, 1, 0] and runs.counts == [2, 1, 3, 1]
    summed = runs.sum(x).numpy()
    for k, (g, first, end) in enumerate(runs.runs):
        assert (labels[first:end] == g).all()
        np.testing.assert_array_equal(summed[k], x.numpy()[first:end].sum(0))
    per_label = np.zeros((3, 3, 5))
    for k, g in enumerate(runs.groups):
        per_label[g] += summed[k]
    for g in range(3):
        np.testing.assert_allclose(per_label[g], x.numpy()[labels == g].sum(0), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(BatchGroups.whole(1, 7).sum(x).numpy()[0], x.sum(0).numpy())


CASES = [
    pytest.param("tiny_llama_dir", [], id="llama"),
    pytest.param("tiny_llama_dir", [BosReplacement("noise", seed=2)], id="llama-bos-noise"),
    pytest.param("tiny_llama_dir", [KeyPhaseFreeze(4)], id="llama-key-phase-after-capture"),
    pytest.param("tiny_mistral_dir", [], id="mistral-sliding-window"),
    pytest.param("tiny_gemma3_dir", [BosReplacement("mean")], id="gemma3-mixed-windows-bos-mean"),
]


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
@pytest.mark.parametrize(("model_dir", "interventions"), CASES)
@pytest.mark.parametrize("route", ["store", "second-pass"])
def test_measure_with_batches_across_groups_equals_batches_within_groups(request, monkeypatch, model_dir, interventions, route):
    model = poslens.load_model(request.getfixturevalue(model_dir))
    corpus = poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=1)
    settings = dict(groups=GROUPS, early=EARLY, batch_size=3, interventions=interventions, progress=False, row_sums=route)
    assert spans_groups(batches(N_SEQS, GROUPS, 3))
    new = poslens.measure(model, corpus, **settings)
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "batches", batches_within_groups)
        old = poslens.measure(model, corpus, **settings)
    assert new.meta["row_sums"]["route"] == old.meta["row_sums"]["route"] == route
    assert_results_equal(new, old, f"{model_dir} {route}")


def _scores(n: int, heads: int, t: int, sliding_window: int | None, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, heads, t, t, generator=g) * 2.0 + 0.5
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    hidden = (j > i) if sliding_window is None else (j > i) | (i - j >= sliding_window)
    return s.masked_fill(hidden, torch.finfo(torch.float32).min)


@pytest.mark.parametrize(
    ("sync_free", "fused"), [(False, True), (False, False), (True, False)], ids=["host-path-compiled", "host-path-torch", "sync-free-path"]
)
def test_capture_of_a_batch_across_groups_equals_one_group_at_a_time(sync_free, fused):
    windows, heads, t = [None, 5], 2, 24
    layout = SimpleNamespace(n_layers=len(windows), n_heads=heads, sliding_windows=windows)
    labels = np.array([0, 0, 1, 2, 2, 2])
    scores = [_scores(len(labels), heads, t, w, seed=layer) for layer, w in enumerate(windows)]

    def capture() -> CellSumCapture:
        return CellSumCapture(
            layout, Binning(t, early=10), groups=3, probe=True, store=RowBinStore(), sync_free=sync_free, block_elements=700, fused=fused
        )

    across, alone = capture(), capture()  # the reference: the same arithmetic (torch's for the sync-free path)
    across.sequence_groups = labels
    across.add_structure(len(labels))
    for layer, s in enumerate(scores):
        across.reduce(layer, s)
    across.flush()
    for g in range(3):  # the reference: one group per pass, on the host path
        alone.group = g
        alone.sync_free = False
        alone.add_structure(int((labels == g).sum()))
        for layer, s in enumerate(scores):
            alone.reduce(layer, s[torch.as_tensor(labels == g)])
        alone.flush()
    for name, value in grouped_fields(alone.sums).items():
        assert_close(grouped_fields(across.sums)[name], value, f"sums.{name}", tol=1e-12)
    stored = {}
    for store in (across.store, alone.store):
        by_key: dict[tuple[int, int], list[np.ndarray]] = {}
        for group, layer, bins in store.read():
            by_key.setdefault((group, layer), []).append(bins)
        stored[store is across.store] = {key: np.concatenate(parts) for key, parts in by_key.items()}
    assert stored[True].keys() == stored[False].keys() == {(g, layer) for g in range(3) for layer in range(2)}
    for key, bins in stored[False].items():
        np.testing.assert_allclose(stored[True][key], bins, rtol=1e-13, atol=0, err_msg=str(key))


def test_capture_refuses_groups_that_do_not_fit_the_batch():
    layout = SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None])
    capture = CellSumCapture(layout, Binning(8), groups=2)
    capture.sequence_groups = np.array([0, 1])
    with pytest.raises(ValueError, match="names 2 groups for a batch of 3"):
        capture.add_structure(3)
    capture.sequence_groups = np.array([0, 2])
    with pytest.raises(ValueError, match="group 2 of a batch is outside"):
        capture.add_structure(2)


def test_residual_capture_of_a_batch_across_groups_equals_one_group_at_a_time():
    labels = np.array([0, 1, 1, 1, 2])
    x = torch.randn(len(labels), 6, 4, generator=torch.Generator().manual_seed(3))
    across, alone = (ResidualCapture(n_layers=1, width=4, seq_len=6, groups=3) for _ in range(2))
    across.sequence_groups = labels
    for site in (0, 1):
        across.add(site, 0, x)
    for g in range(3):
        alone.group = g
        for site in (0, 1):
            alone.add(site, 0, x[torch.as_tensor(labels == g)])
    a, b = across.finish(), alone.finish()
    for name in ("gram", "design_x_target", "target", "target_sq", "rows", "position_sum", "position_rows", "square_total"):
        assert_close(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)), name, tol=1e-12)


def test_path_run_once_with_batches_across_groups_equals_batches_within_groups(tiny_llama_dir, monkeypatch):
    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "random", n_seqs=6, seq_len=16, position0="bos", seed=1)
    assert spans_groups(batches(6, 4, 4))
    new = path_tests.run_once(model, corpus, [KeyPhaseFreeze(4)], groups=4, early=6, batch_size=4)
    monkeypatch.setattr(path_tests, "batches", batches_within_groups)
    old = path_tests.run_once(model, corpus, [KeyPhaseFreeze(4)], groups=4, early=6, batch_size=4)
    old_fields = grouped_fields(old[0])
    for name, value in grouped_fields(new[0]).items():
        assert_close(value, old_fields[name], f"cell sums.{name}")
    for name in ("gram", "design_x_target", "target", "target_sq", "rows", "position_sum", "position_rows", "square_total"):
        assert_close(np.asarray(getattr(new[1], name)), np.asarray(getattr(old[1], name)), f"residual sums.{name}")
    assert_close(new[2], old[2], "next-token losses")


def test_forward_passes_hand_each_batch_its_sequences_groups(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "random", n_seqs=5, seq_len=12, seed=0)
    seen = []

    class Recorder:
        sequence_groups = None

        def hooks(self):
            return []

        def flush(self):
            seen.append(self.sequence_groups.tolist())

    batching.forward_passes(model, corpus, batches(5, 2, 4), (), Recorder(), False, "test")
    assert seen == [[0, 0, 0, 1], [1]]
