"""The compiled capture loop and replay (poslens.capture.fused_rows) against a naive computation and against the torch route.

The naive reference walks every (sequence, head, row) with its visible keys
taken from the causal / sliding-window mask written out here, in float64 numpy,
and adds each score to its cells one pair at a time: nothing in it is shared
with either route. The torch route (``fused=False``) is the one the GPU runs.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from poslens import compiled
from poslens.capture import cell_sum_capture, counterfactual_replay
from poslens.capture.capture_plan import CapturePlan
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.capture.counterfactual_replay import CounterfactualReplay
from poslens.capture.fused_rows import RowTables, row_pieces
from poslens.capture.row_bin_store import RowBinStore
from poslens.capture.score_checks import MaskMismatchError, NonFiniteScoresError
from poslens.compiled import fused_available
from poslens.fit.binning import Binning
from poslens.fit.cross_fit import CrossFit
from poslens.fit.sums import QUERY_WINDOWS
from poslens.measurement.pipeline import measure_scores

pytestmark = pytest.mark.skipif(not fused_available(), reason="numba is not installed")

T, EARLY, HEADS = 24, 8, 3


def _scores(n: int, window: int | None, dtype: torch.dtype, sink: float, seed: int) -> torch.Tensor:
    """Masked scores [n, HEADS, T, T]: noise, a relative slope, and key 0 raised by ``sink`` (a strong sink at 20)."""
    g = torch.Generator().manual_seed(seed)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    invisible = (j > i) | (((i - j) >= window) if window is not None else torch.zeros(T, T, dtype=torch.bool))
    s = torch.randn(n, HEADS, T, T, generator=g, dtype=torch.float64) * 2.0 + 0.1 * (i - j)
    s[..., 0] += sink
    return s.to(dtype).masked_fill(invisible, torch.finfo(dtype).min)


def _naive(scores: np.ndarray, binning: Binning, window: int | None) -> dict[str, np.ndarray]:
    """Every piece, pair by pair, from the mask written out here (float64)."""
    n, heads, t, _ = scores.shape
    n_b = binning.n_offset_bins
    offset_bin = np.asarray(binning.offset_bin)
    windows = {w: np.asarray(binning.query_windows[w])[np.asarray(binning.query_bin)] for w in QUERY_WINDOWS}
    out = {name: np.zeros((n, heads, t)) for name in ("log_z", "row_sum", "row_js", "row_sq", "key0")}
    out.update(features=np.zeros((n, heads, t, 4)), row_bins=np.zeros((n, heads, t, 1 + n_b)))
    out.update(cells=np.zeros((n, heads, binning.n_query_bins, n_b)), offsets=np.zeros((n, 2, heads, t)))
    for b in range(n):
        for h in range(heads):
            for i in range(t):
                keys = [j for j in range(i + 1) if window is None or i - j < window]
                s = scores[b, h, i, keys].astype(np.float64)
                m = s.max()
                e = np.exp(s - m)
                p = e.sum()
                a = e / p
                # the entropy in extended precision: next to a strong sink, log a_i0 of a float64 a_i0 keeps few digits
                a_long = np.exp(s.astype(np.longdouble) - m) / np.exp(s.astype(np.longdouble) - m).sum()
                out["log_z"][b, h, i] = m + np.log(p)
                out["row_sum"][b, h, i], out["row_js"][b, h, i], out["row_sq"][b, h, i] = s.sum(), (np.array(keys) * s).sum(), (s * s).sum()
                out["features"][b, h, i] = [a[0] if keys[0] == 0 else 0.0, float(-(a_long * np.log(a_long)).sum()), a[-1], a.max()]
                out["key0"][b, h, i] = s[0] if keys[0] == 0 else 0.0
                out["row_bins"][b, h, i, 0] = m
                for j, value, weight in zip(keys, s, e, strict=True):
                    d = i - j
                    out["row_bins"][b, h, i, 1 + offset_bin[d]] += weight
                    out["cells"][b, h, binning.query_bin[i], offset_bin[d]] += value
                    for k, w in enumerate(("all", "early")):  # the layout of offset_sums
                        if windows[w][i]:
                            out["offsets"][b, k, h, d] += value
    return out


@pytest.mark.parametrize("window", [None, 5], ids=["causal", "sliding-window-5"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=["float32", "float64", "bfloat16"])
def test_row_pieces_match_the_naive_pair_by_pair_computation(window, dtype):
    """Every piece of every row within 1e-12 (relative) of the naive walk, with a sink at key 0 strong enough that
    float32 would round a_i0 to 1: the loop works in float64, so 1 − a_i0 keeps its digits too, and the entropy
    (about 1e-7 next to such a sink) is within 1e-10 of an extended-precision −Σ a log a where numpy has one."""
    binning = Binning(T, early=EARLY)
    scores = _scores(2, window, dtype, sink=20.0, seed=3)
    got = row_pieces(scores, CapturePlan.build(binning, window).row_tables(), row_bins=True)
    want = _naive(scores.double().numpy(), binning, window)
    pairs = {"log_z": got.log_z, "row_sum": got.row_sum, "row_js": got.row_js, "row_sq": got.row_sq, "key0": got.key0_logits}
    pairs.update(features=got.features, row_bins=got.row_bins, cells=got.logit_cells, offsets=got.offset_sums)
    entropy_tol = 1e-10 if np.finfo(np.longdouble).eps < 1e-18 else 1e-6
    for name, value in pairs.items():
        if name == "features":
            np.testing.assert_allclose(value[..., 1].numpy(), want[name][..., 1], rtol=entropy_tol, atol=1e-300, err_msg="entropy")
            value, want[name] = value[..., [0, 2, 3]], want[name][..., [0, 2, 3]]
        np.testing.assert_allclose(value.numpy(), want[name], rtol=1e-12, atol=1e-300, err_msg=name)
    full = slice(None) if window is None else slice(0, 5)  # rows that see key 0
    sink_gap = 1.0 - got.features[..., full, 0].numpy()[..., 1:]
    np.testing.assert_allclose(sink_gap, 1.0 - want["features"][..., full, 0][..., 1:], rtol=0, atol=1e-15)
    assert (sink_gap > 0).all()


def _capture(fused: bool, window: int | None) -> CellSumCapture:
    layout = SimpleNamespace(n_layers=2, n_heads=HEADS, sliding_windows=[None, window])
    return CellSumCapture(layout, Binning(T, early=EARLY), groups=3, probe=True, store=RowBinStore(), fused=fused)


def test_the_compiled_and_torch_captures_give_the_same_sums_and_store():
    """The whole capture, a batch spanning three groups over two passes and a sliding-window layer: every sum
    within 1e-12 and every stored row bin within 1e-14 (the torch route takes bins as differences of a running sum of
    weights up to 1, which keeps their absolute, not their relative, digits)."""
    captures = {fused: _capture(fused, 5) for fused in (True, False)}
    for capture in captures.values():
        for k, groups in enumerate([np.array([0, 0, 1]), np.array([1, 2, 2])]):
            capture.sequence_groups = groups
            capture.add_structure(3)
            capture.reduce(0, _scores(3, None, torch.float32, sink=6.0, seed=10 + k))
            capture.reduce(1, _scores(3, 5, torch.float32, sink=6.0, seed=20 + k))
            capture.flush()
    compiled, torch_route = captures[True].sums, captures[False].sums
    for name, value in torch_route.per_group.as_dict().items():
        np.testing.assert_allclose(compiled.per_group.as_dict()[name], value, rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(compiled.row_features, torch_route.row_features, rtol=1e-12, atol=1e-12)
    stored = [list(captures[fused].store.read()) for fused in (True, False)]
    assert [(g, layer) for g, layer, _ in stored[0]] == [(g, layer) for g, layer, _ in stored[1]]
    for (_, _, a), (_, _, b) in zip(*stored, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)  # weights ≤ 1; the running sum's differences keep ~1e-16 of it


@pytest.mark.parametrize("fused", [True, False], ids=["compiled", "torch"])
def test_both_routes_raise_the_same_errors(fused):
    """A layer with no causal mask fails its first batch's check, a NaN on head 1 names head 1, a masked visible
    key is refused, and a NaN among the masked keys of a first batch is reported as such (the loop never reads them)."""
    capture = _capture(fused, None)
    capture.sequence_groups = np.array([0])
    with pytest.raises(MaskMismatchError, match="layer 0: keys poslens treats as invisible"):
        capture.reduce(0, torch.zeros(1, HEADS, T, T))
    scores = _scores(1, None, torch.float32, sink=0.0, seed=1)
    capture.reduce(0, scores)  # checked now
    scores[0, 1, 7, 3] = float("nan")
    with pytest.raises(NonFiniteScoresError, match="layer 0, head 1"):
        capture.reduce(0, scores)
    masked_visible = _scores(1, None, torch.float32, sink=0.0, seed=1)
    masked_visible[0, 0, 5, 2] = torch.finfo(torch.float32).min
    with pytest.raises(MaskMismatchError, match="keys poslens treats as visible are masked"):
        capture.reduce(1, masked_visible)
    hidden_nan = _scores(1, None, torch.float32, sink=0.0, seed=2)
    hidden_nan[0, 2, 3, 9] = float("nan")  # key 9 of row 3: masked
    with pytest.raises(NonFiniteScoresError, match="layer 1"):
        _capture(fused, None).reduce(1, hidden_nan)


def test_the_compiled_replay_matches_the_per_row_reference():
    """Σ log Z' per group, variant, layer, head and row: the compiled replay within 1e-13 of the reference
    written out with each row's own exp(−A) (as in test_row_bin_store), over two batches of one group."""
    binning, groups = Binning(T, early=EARLY), 3
    rng = np.random.default_rng(4)
    cells = binning.n_query_bins * binning.n_offset_bins
    fits = {w: rng.normal(size=(groups, 2, HEADS, cells)) for w in QUERY_WINDOWS}
    cross = CrossFit(fits, {w: x.sum(axis=0) for w, x in fits.items()}, rng.uniform(1.0, 3.0, size=groups))
    replay = CounterfactualReplay(SimpleNamespace(n_layers=2, n_heads=HEADS), binning, cross, groups, fused=True)
    want = {w: np.zeros_like(replay.log_partition[w]) for w in QUERY_WINDOWS}
    for g, layer in [(0, 0), (2, 1), (2, 1), (1, 0)]:
        row_bins = np.concatenate([rng.normal(size=(2, HEADS, T, 1)), rng.uniform(0.0, 2.0, size=(2, HEADS, T, binning.n_offset_bins))], -1)
        replay.add(g, layer, row_bins)
        for w, rows in (("early", EARLY), ("all", T)):
            a = cross.variants(g)[w][:, layer].reshape(groups, HEADS, binning.n_query_bins, binning.n_offset_bins)
            for v in range(groups):
                for h in range(HEADS):
                    for i in range(rows):
                        z = (row_bins[:, h, i, 1:] * np.exp(-a[v, h, binning.query_bin[i]])).sum(-1)
                        want[w][g, v, layer, h, i] += (np.log(z) + row_bins[:, h, i, 0]).sum()
    for w in QUERY_WINDOWS:
        np.testing.assert_allclose(replay.log_partition[w], want[w], rtol=1e-13, atol=0, err_msg=w)
        assert np.abs(want[w]).sum() > 0


def test_measure_gives_the_same_table_on_either_route(monkeypatch):
    """The whole measurement (store route, a sliding-window layer, four groups) with the compiled loops and without:
    every value and interval end within 1e-10."""
    layers = [_scores(8, None, torch.float32, sink=4.0, seed=30), _scores(8, 5, torch.float32, sink=4.0, seed=31)]
    tables = {}
    for fused in (True, False):
        monkeypatch.setattr(cell_sum_capture, "fused_available", lambda fused=fused: fused)
        monkeypatch.setattr(counterfactual_replay, "fused_available", lambda fused=fused: fused)
        tables[fused] = measure_scores(layers, groups=4, early=EARLY, layer_windows=[None, 5], row_sums="store").table
    keys = ["layer", "head", "query_window", "metric"]
    a, b = (tables[f].sort_values(keys).reset_index(drop=True) for f in (True, False))
    pd.testing.assert_frame_equal(a[keys], b[keys])
    assert a["metric"].str.startswith("c_res").any()
    for column in ("value", "ci_low", "ci_high"):
        np.testing.assert_allclose(a[column].to_numpy(), b[column].to_numpy(), rtol=0, atol=1e-10, equal_nan=True)


def test_row_tables_refuse_visible_keys_with_a_gap():
    valid = torch.ones(4, 4, dtype=torch.bool).tril()
    valid[3, 1] = False
    plan = SimpleNamespace(geometry=SimpleNamespace(valid=valid))
    with pytest.raises(ValueError, match="no gaps"):
        RowTables.of(plan)


def test_poslens_fused_0_turns_the_compiled_loops_off(monkeypatch):
    monkeypatch.setenv("POSLENS_FUSED", "0")
    compiled.fused_available.cache_clear()
    try:
        assert compiled.fused_available() is False
    finally:
        monkeypatch.delenv("POSLENS_FUSED")
        compiled.fused_available.cache_clear()
    assert compiled.fused_available() is True
