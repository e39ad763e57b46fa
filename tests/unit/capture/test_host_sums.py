"""The host path holds each layer's pieces and adds the layers of a batch to the sums together.

Held and folded together, the layers must give the sums that folding each layer alone gives (to rounding: the
fold's products run over a layer axis), on a model whose layers have two plans (a sliding window between full
causal layers, so one plan's layers are not contiguous), with a batch that spans groups; and a layer reduced twice
before a flush (two batches of one group) must count twice.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from poslens.capture import cell_sum_capture
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.fit.binning import Binning

T, HEADS = 24, 2
MODEL = SimpleNamespace(n_layers=3, n_heads=HEADS, sliding_windows=[None, 5, None])


def _scores(n: int, sliding_window: int | None, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, HEADS, T, T, generator=g) * 2.0
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    hidden = (j > i) if sliding_window is None else (j > i) | (i - j >= sliding_window)
    return s.masked_fill(hidden, torch.finfo(torch.float32).min)


def _fields(capture: CellSumCapture) -> dict[str, np.ndarray]:
    sums = capture.sums
    out = {name: np.asarray(value) for name, value in vars(sums.per_group).items() if isinstance(value, np.ndarray)}
    out["row_features"] = sums.row_features
    return out


def _capture(batches: list[tuple[list[int], int]], flush_each: bool) -> CellSumCapture:
    capture = CellSumCapture(MODEL, Binning(T, early=8), groups=2, probe=True, block_elements=200)
    for groups, seed in batches:
        capture.sequence_groups = np.array(groups)
        capture.add_structure(len(groups))
        for layer in range(MODEL.n_layers):
            capture.reduce(layer, _scores(len(groups), MODEL.sliding_windows[layer], seed=seed + layer))
        if flush_each:
            capture.flush()
    return capture


def test_layers_folded_together_give_the_sums_of_each_layer_folded_alone(monkeypatch):
    batches = [([0, 0, 1], 0), ([1, 1], 10)]  # the first batch spans both groups
    together = _fields(_capture(batches, flush_each=True))
    monkeypatch.setattr(cell_sum_capture, "HELD_BYTES", 0)  # every layer added as soon as it is held: alone
    alone = _fields(_capture(batches, flush_each=True))
    assert together.keys() == alone.keys() and "probe_gram" in together
    for name, want in alone.items():
        np.testing.assert_allclose(together[name], want, rtol=1e-13, atol=1e-12, err_msg=name)
    assert np.abs(together["logit"]).max() > 1.0 and np.abs(together["probe_gram"]).max() > 1.0  # sums of real scores


@pytest.mark.parametrize("flush_between", [True, False])
def test_a_layer_reduced_twice_before_a_flush_counts_twice(flush_between):
    """Two batches of group 0, of the same size (the same runs), with no flush between them (as a caller of reduce()
    may do) add up as with a flush."""
    twice = _fields(_capture([([0, 0], 0), ([0, 0], 20)], flush_each=flush_between))
    first, second = _fields(_capture([([0, 0], 0)], flush_each=True)), _fields(_capture([([0, 0], 20)], flush_each=True))
    for name in ("logit", "log_partition", "features", "probe_gram", "logit_by_offset_all", "row_features"):
        np.testing.assert_allclose(twice[name], first[name] + second[name], rtol=1e-13, atol=1e-12, err_msg=name)
