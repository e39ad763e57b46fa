"""The per-sequence counterfactual without a second forward: the row-bin store and its replay.

The first pass writes each row's maximum and its sums of exp(s − max) per offset
bin; the replay turns them into Σ_n log Z'_i(n) for any absolute component A.
Checked here against a dense logsumexp over each row's visible keys, written
without the store's algebra, on causal and sliding-window layers.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import poslens
from poslens.capture import row_bin_store
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.capture.counterfactual_replay import CounterfactualReplay
from poslens.capture.row_bin_store import InsufficientDiskError, RowBinStore, store_bytes
from poslens.fit.binning import Binning
from poslens.fit.cross_fit import CrossFit
from poslens.fit.sums import QUERY_WINDOWS
from poslens.measurement.pipeline import collect_sums

T, EARLY, HEADS, GROUPS = 40, 12, 2, 3


def _scores(n: int, sliding_window: int | None, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, HEADS, T, T, generator=g, dtype=torch.float32) * 2.0
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    hidden = (j > i) if sliding_window is None else (j > i) | (i - j >= sliding_window)
    return s.masked_fill(hidden, torch.finfo(torch.float32).min)


def _dense_log_partition(scores: torch.Tensor, residual: np.ndarray, binning: Binning, sliding_window: int | None, rows: int) -> np.ndarray:
    """Σ over sequences of log Σ_{j visible} exp(s_ij − A[c(i), b(i − j)]), per head and row: [H, rows]."""
    s = scores.double().numpy()
    out = np.zeros((HEADS, rows))
    n_b = binning.n_offset_bins
    for i in range(rows):
        keys = [j for j in range(i + 1) if sliding_window is None or i - j < sliding_window]
        cells = [binning.query_bin[i] * n_b + binning.offset_bin[i - j] for j in keys]
        for h in range(HEADS):
            x = s[:, h, i, keys] - residual[h, cells][None, :]
            top = x.max(axis=1, keepdims=True)
            out[h, i] = (top[:, 0] + np.log(np.exp(x - top).sum(axis=1))).sum()
    return out


@pytest.mark.parametrize("sliding_window", [None, 7])
def test_replay_matches_a_dense_logsumexp(sliding_window):
    binning = Binning(T, early=EARLY)
    model = SimpleNamespace(n_layers=2, n_heads=HEADS, sliding_windows=[sliding_window, None])
    store = RowBinStore()
    capture = CellSumCapture(model, binning, GROUPS, probe=False, store=store, block_elements=300)  # several row blocks
    scores = {(g, layer): _scores(2, model.sliding_windows[layer], seed=10 * g + layer) for g in range(GROUPS) for layer in range(2)}
    for g in range(GROUPS):
        capture.group = g
        capture.add_structure(2)
        for layer in range(2):
            capture.reduce(layer, scores[g, layer])
    assert len(store.entries) == GROUPS * 2
    assert store.nbytes == store_bytes(2 * GROUPS, 2, HEADS, T, binning.n_offset_bins)
    cells = binning.n_query_bins * binning.n_offset_bins
    rng = np.random.default_rng(0)
    cross = _random_cross_fit(rng, cells)
    residuals = {g: cross.variants(g) for g in range(GROUPS)}
    replay = CounterfactualReplay(model, binning, cross, GROUPS)
    replay.replay(store)
    store.close()
    for w, rows in (("early", EARLY), ("all", T)):
        for g in range(GROUPS):
            for variant in range(GROUPS):
                for layer in range(2):
                    want = _dense_log_partition(scores[g, layer], residuals[g][w][variant, layer], binning, model.sliding_windows[layer], rows)
                    np.testing.assert_allclose(replay.log_partition[w][g, variant, layer], want, rtol=0, atol=1e-10)


def _random_cross_fit(rng: np.random.Generator, cells: int) -> CrossFit:
    """Random per-group fits of A (two layers), whose variants the replay removes."""
    fits = {w: rng.normal(size=(GROUPS, 2, HEADS, cells)) for w in QUERY_WINDOWS}
    return CrossFit(fits, {w: x.sum(axis=0) for w, x in fits.items()}, rng.uniform(1.0, 3.0, size=GROUPS))


@pytest.mark.parametrize("product_bytes", ["default: one variant", "one variant", "two variants", "every variant"])
def test_replay_weighs_each_row_as_a_per_row_gather_of_exp_minus_a_would(product_bytes):
    """The replay weighs each row's bins by exp(−A) of its query bin's cells; written here variant by variant,
    from the flat cell index of each row, it must give the same Σ log Z' for every query window, variant, batch
    and layer, whether ``add`` takes the variants one at a time (its default, the second pass's), two at a time (the
    last chunk holding one; the early window's, all at once) or all at once. This is the torch route's chunking
    (``fused=False``); ``tests/unit/capture/test_fused_rows.py`` holds the compiled route to the same reference.
    To rounding, not to the bit: the same products summed over the same bins by torch's reduction of a tensor of
    another shape differ in the last bit on some CPUs (seen on an AMD EPYC with AVX-512: 3 of 432 sums, 1.7e-16)."""
    one_variant = 3 * HEADS * T * Binning(T, early=EARLY).n_offset_bins * 8  # the product of one variant over T rows, float64
    limit = {"default: one variant": None, "one variant": 1, "two variants": 2 * one_variant, "every variant": 2**40}[product_bytes]
    chunked = {} if limit is None else {"product_bytes": limit}
    binning = Binning(T, early=EARLY)
    model = SimpleNamespace(n_layers=2, n_heads=HEADS)
    rng = np.random.default_rng(1)
    cells = binning.n_query_bins * binning.n_offset_bins
    cross = _random_cross_fit(rng, cells)
    residuals = {g: cross.variants(g) for g in range(GROUPS)}
    replay = CounterfactualReplay(model, binning, cross, GROUPS, fused=False)
    want = {w: np.zeros_like(replay.log_partition[w]) for w in QUERY_WINDOWS}
    row_cells = torch.as_tensor(binning.query_bin)[:, None] * binning.n_offset_bins + torch.arange(binning.n_offset_bins)[None, :]
    for g, layer in [(0, 0), (0, 1), (2, 0), (2, 1), (2, 0), (1, 1)]:  # group 2's layer 0 twice: two batches
        row_bins = np.concatenate([rng.normal(size=(3, HEADS, T, 1)), rng.uniform(0.0, 2.0, size=(3, HEADS, T, binning.n_offset_bins))], -1)
        replay.add(g, layer, row_bins, **chunked)
        bins = torch.as_tensor(row_bins)
        for w, rows in (("early", EARLY), ("all", T)):
            weights = torch.as_tensor(np.exp(-residuals[g][w]))[:, layer][:, :, row_cells[:rows]]  # [variant, head, row, bin]
            z = torch.stack([(bins[:, :, :rows, 1:] * x).sum(-1) for x in weights], dim=1)
            want[w][g, :, layer] += (torch.log(z) + bins[:, None, :, :rows, 0]).sum(0).numpy()
    for w in QUERY_WINDOWS:
        np.testing.assert_allclose(replay.log_partition[w], want[w], rtol=1e-15, atol=0, err_msg=w)


@pytest.mark.parametrize("weights_bytes", ["each group's at once", "each entry's"])
def test_replay_of_a_store_equals_adding_its_entries_in_the_order_written(weights_bytes, monkeypatch):
    """The replay reads the store group by group and forms each group's exp(−A) once (or, over the limit, once per
    entry); every (group, layer) must still add its batches in the order written, so the sums equal those of ``add``
    on every entry in write order, to the bit."""
    from poslens.capture import counterfactual_replay

    if weights_bytes == "each entry's":
        monkeypatch.setattr(counterfactual_replay, "WEIGHTS_BYTES", 0)
    binning = Binning(T, early=EARLY)
    model = SimpleNamespace(n_layers=2, n_heads=HEADS)
    rng = np.random.default_rng(4)
    cross = _random_cross_fit(rng, binning.n_query_bins * binning.n_offset_bins)
    store, in_order = RowBinStore(), CounterfactualReplay(model, binning, cross, GROUPS)
    # four batches, groups interleaved within and between them; group 1's layers in three batches (the order of
    # three additions shows in their rounding)
    for g, layer in [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (1, 0), (2, 1), (1, 1), (1, 0), (1, 1)]:
        row_bins = np.concatenate([rng.normal(size=(2, HEADS, T, 1)), rng.uniform(0.1, 2.0, size=(2, HEADS, T, binning.n_offset_bins))], -1)
        store.write(g, layer, row_bins)
        in_order.add(g, layer, row_bins, product_bytes=counterfactual_replay.PRODUCT_BYTES)
    replayed = CounterfactualReplay(model, binning, cross, GROUPS)
    replayed.replay(store)
    store.close()
    for w in QUERY_WINDOWS:
        np.testing.assert_array_equal(replayed.log_partition[w], in_order.log_partition[w], err_msg=w)
        assert np.all(replayed.log_partition[w][:, :, :, :, 1:] != 0.0), w  # every group, variant and layer was added to


def test_store_keeps_what_was_written_in_order():
    store = RowBinStore()
    arrays = [np.random.default_rng(k).normal(size=(k + 1, 2, 3, 4)) for k in range(3)]
    for k, a in enumerate(arrays):
        store.write(group=k % 2, layer=k, row_bins=a)
    read = list(store.read())
    assert [(g, layer) for g, layer, _ in read] == [(0, 0), (1, 1), (0, 2)]
    for (_, _, got), want in zip(read, arrays, strict=False):
        np.testing.assert_array_equal(got, want)
    store.close()
    assert store.nbytes == 0 and store.entries == []


def test_collect_sums_refuses_before_running_when_the_temporary_disk_is_too_small(tiny_llama_dir, monkeypatch):
    from poslens.runtime import disk

    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=16)
    need = store_bytes(4, model.n_layers, model.n_heads, 16, Binning(16).n_offset_bins)

    def free(room):
        for module in (row_bin_store, disk):
            monkeypatch.setattr(module.shutil, "disk_usage", lambda path: SimpleNamespace(free=room))

    free(need - 1)
    with pytest.raises(InsufficientDiskError, match=r"needs [0-9.]+ kB of temporary disk in .*TMPDIR"):
        collect_sums(model, corpus, groups=2, progress=False, row_sums="store")  # the store, asked for outright
    free(need)
    assert collect_sums(model, corpus, groups=2, progress=False, row_sums="store").row_count[0] == 4  # exactly enough room
    # "auto" budgets half the free space: the store fits at twice its size free, and the second pass runs below that
    free(2 * need)
    assert collect_sums(model, corpus, groups=2, progress=False).row_sums_route["route"] == "store"
    free(2 * need - 2)
    assert collect_sums(model, corpus, groups=2, progress=False).row_sums_route["route"] == "second-pass"
