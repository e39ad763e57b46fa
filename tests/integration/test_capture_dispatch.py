"""The capture's sync-free path: the same sums as the host path, deferred errors, and no host synchronization.

``CellSumCapture(sync_free=True)`` is the path CUDA takes by default; here it is
forced on the CPU. It must give the host path's sums to 1e-12 (relative to each
field's largest entry), the row-bin store's arrays, and the same
:class:`NonFiniteScoresError` / :class:`MaskMismatchError` messages once
:meth:`CellSumCapture.flush` runs. A ``TorchDispatchMode`` records every aten op
that :meth:`CellSumCapture.reduce` issues: on the sync-free path none may force a
host synchronization, and their number may not grow with the number of heads.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import poslens
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.capture.row_bin_store import RowBinStore
from poslens.capture.score_checks import MaskMismatchError, NonFiniteScoresError
from poslens.fit.binning import Binning
from poslens.model.hooks import attn_scores, run_with_hooks

T, EARLY = 40, 12
SLIDING_WINDOWS = [None, 7]  # a causal and a sliding-window layer
SYNC_OPS = {"aten._local_scalar_dense", "aten.nonzero", "aten.is_nonzero", "aten.item"}  # each waits for the device


def _scores(n: int, heads: int, sliding_window: int | None, seed: int, t: int = T) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, heads, t, t, generator=g, dtype=torch.float32) * 2.0 + 0.5
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    hidden = (j > i) if sliding_window is None else (j > i) | (i - j >= sliding_window)
    return s.masked_fill(hidden, torch.finfo(torch.float32).min)


def _capture(heads: int, sync_free: bool | None, block_elements: int, sliding_windows=SLIDING_WINDOWS, probe: bool = True) -> CellSumCapture:
    model = SimpleNamespace(n_layers=len(sliding_windows), n_heads=heads, sliding_windows=list(sliding_windows))
    binning = Binning(T, early=EARLY)
    return CellSumCapture(model, binning, groups=3, probe=probe, store=RowBinStore(), block_elements=block_elements, sync_free=sync_free)


def _run(capture: CellSumCapture, batches: dict) -> None:
    """Two passes per group, each: structure, every layer's reduce(), then flush() (as the pipeline does)."""
    for (group, _), per_layer in batches.items():
        capture.group = group
        capture.add_structure(per_layer[0].shape[0])
        for layer, scores in enumerate(per_layer):
            capture.reduce(layer, scores)
        capture.flush()


def _close(fast: np.ndarray, ref: np.ndarray, what: str) -> None:
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=1e-12 * scale, err_msg=what)


def _dense_logit_sums(batches: dict, binning: Binning, heads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Σ of visible s per (group, layer, head, query bin, offset bin), and per exact offset over the all / early rows, by loops."""
    n_b = binning.n_offset_bins
    cells = np.zeros((3, len(SLIDING_WINDOWS), heads, binning.n_query_bins, n_b))
    by_offset = np.zeros((2, 3, len(SLIDING_WINDOWS), heads, T))
    for (group, _), per_layer in batches.items():
        for layer, scores in enumerate(per_layer):
            s = scores.double().numpy().sum(0)  # [H, T, T]
            sliding_window = SLIDING_WINDOWS[layer]
            for i in range(T):
                q = binning.query_bin[i]
                for j in range(i + 1):
                    if sliding_window is not None and i - j >= sliding_window:
                        continue
                    cells[group, layer, :, q, binning.offset_bin[i - j]] += s[:, i, j]
                    if binning.query_windows["all"][q]:
                        by_offset[0, group, layer, :, i - j] += s[:, i, j]
                        if binning.query_windows["early"][q]:
                            by_offset[1, group, layer, :, i - j] += s[:, i, j]
    return cells, by_offset[0], by_offset[1]


@pytest.mark.parametrize("block_elements", [1 << 19, 700])  # one row block per layer, and many
def test_sync_free_gives_the_host_paths_sums(block_elements):
    heads = 3
    batches = {
        (g, k): [_scores(2, heads, w, seed=100 * g + 10 * k + layer) for layer, w in enumerate(SLIDING_WINDOWS)] for g in range(3) for k in range(2)
    }
    host, fast = _capture(heads, False, block_elements), _capture(heads, True, block_elements)
    _run(host, batches)
    _run(fast, batches)
    ref, got = host.sums.per_group.as_dict(), fast.sums.per_group.as_dict()
    assert ref.keys() == got.keys()
    for name in ref:
        _close(got[name], ref[name], name)
    _close(fast.sums.row_features, host.sums.row_features, "row_features")
    assert np.abs(host.sums.row_features).max() > 0 and np.abs(ref["probe_gram"]).max() > 0
    stored_ref, stored = list(host.store.read()), list(fast.store.read())
    assert [(g, layer, x.shape) for g, layer, x in stored] == [(g, layer, x.shape) for g, layer, x in stored_ref]
    assert len(stored) == 3 * 2 * len(SLIDING_WINDOWS)
    for (_, _, x), (_, _, y) in zip(stored, stored_ref, strict=False):
        _close(x, y, "row bins")
    # the fields the one-matmul diagonal fold writes, against loops over every visible pair
    cells, all_rows, early_rows = _dense_logit_sums(batches, host.binning, heads)
    _close(got["logit"], cells, "logit cells vs dense")
    _close(got["logit_by_offset_all"], all_rows, "logit by offset (all) vs dense")
    _close(got["logit_by_offset_early"], early_rows[..., : fast.early_rows], "logit by offset (early) vs dense")
    fast.flush()  # nothing pending: nothing changes
    _close(fast.sums.per_group.logit, got["logit"], "second flush")


def test_sync_free_on_a_tiny_model(tiny_gemma3_dir):
    """Through the hooks of a real forward pass (Gemma 3: sliding and global layers), both paths agree."""
    model = poslens.load_model(tiny_gemma3_dir)
    corpus = poslens.make_corpus(model, n_seqs=4, seq_len=24, source="random", seed=0)
    binning = Binning(24, early=8)
    captures = [CellSumCapture(model, binning, groups=2, store=RowBinStore(), block_elements=500, sync_free=flag) for flag in (False, True)]
    assert {model.sliding_windows[layer] for layer in range(model.n_layers)} >= {None, 8}
    for capture in captures:
        for group in range(2):
            capture.group = group
            capture.add_structure(2)
            run_with_hooks(model, corpus.tokens[2 * group : 2 * group + 2], capture.hooks(), stop_after=attn_scores(model.n_layers - 1))
            capture.flush()
    ref, got = (c.sums.per_group.as_dict() for c in captures)
    for name in ref:
        _close(got[name], ref[name], name)
    _close(captures[1].sums.row_features, captures[0].sums.row_features, "row_features")
    for (_, _, x), (_, _, y) in zip(captures[1].store.read(), captures[0].store.read(), strict=True):
        _close(x, y, "row bins")


def _error_of(capture: CellSumCapture, per_layer: list[torch.Tensor], flush: bool) -> Exception:
    """The error that the host path's reduce() (``flush`` False) or the sync-free path's flush() raises."""
    capture.add_structure(per_layer[0].shape[0])
    for layer, scores in enumerate(per_layer):
        capture.reduce(layer, scores)  # the sync-free path raises nothing here
    assert flush, "the host path should have raised in reduce()"
    with pytest.raises((NonFiniteScoresError, MaskMismatchError)) as caught:
        capture.flush()
    return caught.value


def _both_errors(per_layer: list[torch.Tensor], heads: int = 4) -> tuple[Exception, Exception]:
    with pytest.raises((NonFiniteScoresError, MaskMismatchError)) as caught:
        _error_of(_capture(heads, False, 700, probe=False), per_layer, flush=False)
    return caught.value, _error_of(_capture(heads, True, 700, probe=False), per_layer, flush=True)


def test_deferred_non_finite_names_the_layer_and_head():
    # a NaN on a visible key of layer 1 (sliding), head 2, sequence 1: the finite check (the mask check sees sequence 0 only)
    per_layer = [_scores(2, 4, w, seed=layer) for layer, w in enumerate(SLIDING_WINDOWS)]
    per_layer[1][1, 2, 30, 27] = float("nan")
    host, fast = _both_errors(per_layer)
    assert type(fast) is type(host) is NonFiniteScoresError
    assert str(fast) == str(host) and "layer 1, head 2 " in str(fast)
    # −inf on a visible key of sequence 0, layer 0, head 3: the mask check fails and is explained as non-finite
    per_layer = [_scores(2, 4, w, seed=layer) for layer, w in enumerate(SLIDING_WINDOWS)]
    per_layer[0][0, 3, 5, 2] = float("-inf")
    host, fast = _both_errors(per_layer)
    assert type(fast) is type(host) is NonFiniteScoresError
    assert str(fast) == str(host) and "layer 0, head 3 " in str(fast)


def test_deferred_mask_mismatch():
    # no mask at all on layer 1: invisible keys carry finite scores
    per_layer = [_scores(2, 4, None, seed=0), torch.randn(2, 4, T, T)]
    host, fast = _both_errors(per_layer)
    assert type(fast) is type(host) is MaskMismatchError
    assert str(fast) == str(host) and str(fast).startswith("layer 1: keys poslens treats as invisible (window=7)")
    # a visible key masked (padding) on layer 0
    per_layer = [_scores(2, 4, w, seed=layer) for layer, w in enumerate(SLIDING_WINDOWS)]
    per_layer[0][0, 1, 20, 3] = torch.finfo(torch.float32).min
    host, fast = _both_errors(per_layer)
    assert type(fast) is type(host) is MaskMismatchError
    assert str(fast) == str(host) and str(fast).startswith("layer 0: keys poslens treats as visible are masked")
    # the check runs on a layer's first batch only, as on the host path: a later unmasked batch is not checked
    capture = _capture(4, True, 700, probe=False)
    _run(capture, {(0, 0): [_scores(2, 4, w, seed=layer) for layer, w in enumerate(SLIDING_WINDOWS)]})
    _run(capture, {(0, 1): [_scores(2, 4, None, seed=0), torch.randn(2, 4, T, T)]})


class _Ops(TorchDispatchMode):
    """Records the aten op packet of every call that reaches the dispatcher."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.device_copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops[str(func.overloadpacket)] += 1
        if str(func.overloadpacket) == "aten._to_copy" and kwargs.get("device") is not None:
            self.device_copies += 1
        return func(*args, **kwargs)


def _ops_of(capture: CellSumCapture, layer: int, scores: torch.Tensor) -> _Ops:
    with _Ops() as recorded:
        capture.reduce(layer, scores)
    return recorded


ROWS_KEYS = 260  # rows × keys of one row block, per (sequence, head): the same blocks for every head count


def _op_counts(heads: int, sync_free: bool, batch: int = 2) -> dict[str, _Ops]:
    sliding_windows = [None, 7, None, 7]
    capture = _capture(heads, sync_free, ROWS_KEYS * batch * heads, sliding_windows=sliding_windows)
    scores = [_scores(batch, heads, w, seed=layer) for layer, w in enumerate(sliding_windows)]
    for layer in (0, 1):  # builds both plans' blocks and device copies
        capture.reduce(layer, scores[layer])
    capture.flush()
    counts = {
        "causal, checking the mask": _ops_of(capture, 2, scores[2]),
        "sliding window, checking the mask": _ops_of(capture, 3, scores[3]),
        "causal": _ops_of(capture, 0, scores[0]),
        "sliding window": _ops_of(capture, 1, scores[1]),
    }
    capture.flush()
    return counts


def test_sync_free_reduce_issues_no_sync_and_a_head_independent_number_of_ops():
    blocks = {len(_capture(h, True, ROWS_KEYS * 2 * h).geometry(0).row_blocks(ROWS_KEYS)) for h in (1, 2, 4, 8)}
    assert blocks == {5}, blocks  # several row blocks, the same for every head count
    by_heads = {heads: _op_counts(heads, sync_free=True) for heads in (1, 2, 4, 8)}
    for heads, counts in by_heads.items():
        for case, recorded in counts.items():
            assert not SYNC_OPS & set(recorded.ops), (heads, case, SYNC_OPS & set(recorded.ops))
            assert recorded.device_copies == 0, (heads, case)
            # with one head a few reshapes are free views instead of copies: 1 head may take fewer ops, never more
            total, two_heads = sum(recorded.ops.values()), sum(by_heads[2][case].ops.values())
            extra = recorded.ops - by_heads[2][case].ops
            assert total == two_heads or (heads == 1 and total <= two_heads), f"{case}: {total} ops with {heads} heads, {two_heads} with 2: {extra}"
    per_block = sum(by_heads[8]["causal"].ops.values()) / 5
    assert per_block < 200, per_block  # a few dozen kernels per row block, whatever the heads
    # the control: the host path synchronizes (bool() of the mask check, the finite check), which the counter sees
    host = _op_counts(2, sync_free=False)
    assert host["causal, checking the mask"].ops["aten._local_scalar_dense"] > 1
    assert host["causal"].ops["aten._local_scalar_dense"] >= 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_reduce_never_synchronizes_and_matches_the_host_path():
    """On CUDA the sync-free path is the default; torch's sync debug mode turns any host synchronization into an error."""
    heads = 3
    batches = {(g, 0): [_scores(2, heads, w, seed=10 * g + layer) for layer, w in enumerate(SLIDING_WINDOWS)] for g in range(3)}
    host, cuda = _capture(heads, None, 700), _capture(heads, None, 700)
    _run(host, batches)
    cuda.group = 0
    for layer, scores in enumerate(batches[0, 0]):  # builds the plans (their one-off copies to the device may wait)
        cuda.reduce(layer, scores.cuda())
    assert cuda._pending, "the CUDA path should defer to flush()"
    cuda.flush()
    for (group, _), per_layer in list(batches.items())[1:]:
        cuda.group = group
        on_device = [scores.cuda() for scores in per_layer]
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for layer, scores in enumerate(on_device):
                cuda.reduce(layer, scores)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        cuda.flush()
    for group in range(3):
        cuda.group = group
        cuda.add_structure(2)
    ref, got = host.sums.per_group.as_dict(), cuda.sums.per_group.as_dict()
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(ref[name]).max())), err_msg=name)
    for (_, _, x), (_, _, y) in zip(cuda.store.read(), host.store.read(), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(y).max())))
