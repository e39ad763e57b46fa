"""The pattern edits of the sink path write exact rows, also where a float32 sink is saturated (a_i0 == 1.0).

The sink-path ablation and the mask-only sink profile once rescaled the rest of a
row by (1 − wanted)/(1 − a_i0) with a_i0 read from the float32 pattern: where a
strong sink rounds a_i0 to 1.0 that multiplied the row by ~1e30. These tests run
them in float32, in the saturated regime, and hold each edited row against a
naive float64 computation from the logits, written out here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import poslens
from poslens.errors import EditInvariantError, InputError
from poslens.fit.binning import Binning
from poslens.measurement.arguments import Intervention
from poslens.mechanisms.exact_rows import check_rows, key_zero_rows
from poslens.mechanisms.interventions import SinkAblation
from poslens.mechanisms.mask_only_sink import MaskOnlySinkProfile
from poslens.model import hooks as hook_names
from poslens.testing import save_tiny_model

T = 16


def saturated_scores() -> torch.Tensor:
    """The issue's minimal case: one head, key-0 logit 20, every other visible logit 0, masked keys at float32's minimum."""
    scores = torch.zeros(1, 1, T, T)
    scores[..., 0] = 20.0
    return torch.where(torch.ones(T, T, dtype=torch.bool).tril(), scores, torch.finfo(torch.float32).min)


def naive_rows(scores: np.ndarray, key0: np.ndarray) -> np.ndarray:
    """Rows [T, T] with a_i0 := key0[i] (rows i ≥ 1) and the rest (1 − key0) · softmax over the visible j ≥ 1, float64."""
    t = scores.shape[-1]
    out = np.zeros((t, t))
    out[0, 0] = 1.0
    for i in range(1, t):
        logits = scores[i, 1 : i + 1].astype(np.float64)
        weights = np.exp(logits - logits.max())
        out[i, 0] = key0[i]
        out[i, 1 : i + 1] = (1 - key0[i]) * weights / weights.sum()
    return out


def test_the_minimal_case_saturates_float32():
    pattern = torch.softmax(saturated_scores(), dim=-1)
    assert bool((pattern[0, 0, 1:, 0] == 1.0).all()), "the case must put a_i0 at exactly 1.0 in float32"


def test_mask_only_profile_keeps_rows_on_a_saturated_sink():
    scores = saturated_scores()
    binning = Binning(T, early=4)
    i = np.arange(T)
    key0_cells = binning.query_bin[i] * binning.n_offset_bins + binning.offset_bin[i]
    absolute = np.zeros((1, 1, 1, binning.n_query_bins * binning.n_offset_bins))
    absolute[..., key0_cells[1:]] = 4.0  # A = +4 on the cells of the key-0 pairs
    profile = MaskOnlySinkProfile([(0, 0)], absolute, binning, {}, dose=1.0)
    profile._keep(0, [0])(scores, None)
    out = profile._edit(0, [0], np.zeros(1, dtype=int))(torch.softmax(scores, dim=-1), None)
    assert float((out.sum(-1) - 1).abs().max()) <= 1e-6
    # independent: x' = (s_i0 − A_i0) − logsumexp over the visible j ≥ 1 of (s_ij − A_ij), A_ij from each pair's cell
    a = absolute[0, 0, 0]
    wanted = np.zeros(T)
    for row in range(1, T):
        shifted = np.array(
            [scores[0, 0, row, j].item() - a[binning.query_bin[row] * binning.n_offset_bins + binning.offset_bin[row - j]] for j in range(row + 1)]
        )
        wanted[row] = 1 / (1 + np.exp(np.log(np.exp(shifted[1:]).sum()) - shifted[0]))
    np.testing.assert_allclose(out[0, 0].double().numpy(), naive_rows(scores[0, 0].numpy(), wanted), atol=1e-7)


@pytest.mark.parametrize("dose", [0.25, 0.5])
def test_mask_only_profile_doses_are_exact(dose):
    scores = saturated_scores()
    scores[..., 1:, 1:] += torch.randn(1, 1, T - 1, T - 1, generator=torch.Generator().manual_seed(0)).tril()
    binning = Binning(T, early=4)
    absolute = np.full((1, 1, 1, binning.n_query_bins * binning.n_offset_bins), 3.0)
    profile = MaskOnlySinkProfile([(0, 0)], absolute, binning, {}, dose=dose)
    profile._keep(0, [0])(scores, None)
    pattern = torch.softmax(scores, dim=-1)
    out = profile._edit(0, [0], np.zeros(1, dtype=int))(pattern, None)
    full = MaskOnlySinkProfile([(0, 0)], absolute, binning, {}, dose=1.0)
    full._keep(0, [0])(scores, None)
    moved = full._edit(0, [0], np.zeros(1, dtype=int))(pattern, None)[0, 0, :, 0].double().numpy()
    before = torch.softmax(scores.double(), dim=-1)[0, 0, :, 0].numpy()
    wanted = before + dose * (moved - before)
    wanted[0] = 1.0
    np.testing.assert_allclose(out[0, 0].double().numpy(), naive_rows(scores[0, 0].double().numpy(), wanted), atol=1e-6)


def test_sink_ablation_keeps_rows_on_a_saturated_sink():
    scores = saturated_scores()
    scores[..., 1:, 1:] += torch.randn(1, 1, T - 1, T - 1, generator=torch.Generator().manual_seed(1)).tril()
    ablate = SinkAblation({(0, 0): 0.3})
    ablate._keep(0, [0])(scores, None)
    out = ablate._edit(0, {0: 0.3})(torch.softmax(scores, dim=-1), None)
    wanted = np.full(T, 0.3)
    wanted[0] = 1.0
    np.testing.assert_allclose(out[0, 0].double().numpy(), naive_rows(scores[0, 0].double().numpy(), wanted), atol=1e-7)


def test_sink_ablation_refuses_a_mean_outside_0_1():
    with pytest.raises(InputError, match="between 0 and 1"):
        SinkAblation({(0, 0): 1.5})


def test_a_broken_row_stops_the_run_naming_layer_head_and_row():
    rows = torch.softmax(saturated_scores().double(), dim=-1).expand(2, 3, T, T).clone()
    rows[1, 2, 7, 3] = float("nan")
    edited = torch.ones(2, 3, T, dtype=torch.bool)
    with pytest.raises(EditInvariantError, match=r"layer 4, head 9, sequence 1 of the batch, row 7 sums to nan"):
        check_rows(rows, edited, 4, [0, 5, 9], "sink-ablation")
    check_rows(rows, edited & False, 4, [0, 5, 9], "sink-ablation")  # rows the edit did not write are not its to check


def test_rebuilt_rows_reproduce_the_unedited_softmax():
    scores = torch.randn(2, 3, T, T, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 5
    scores = torch.where(torch.ones(T, T, dtype=torch.bool).tril(), scores, -torch.inf)
    rows = key_zero_rows(scores)
    torch.testing.assert_close(rows.rebuild(rows.x), torch.softmax(scores, dim=-1), rtol=0, atol=1e-14)


class KeyZeroBoost(Intervention):
    """Adds ``boost`` to the key-0 scores of one head before anything else reads them: a sink that float32 saturates."""

    label = "key0-boost"

    def __init__(self, layer: int, head: int, boost: float, key: int = 0) -> None:
        self.layer, self.head, self.boost, self.key = layer, head, boost, key

    def describe(self) -> dict:
        return {"intervention": "key0-boost"}

    def hooks(self, model, tokens):
        def hook(scores, hook):
            out = scores.clone()
            out[:, self.head, self.key + 1 :, self.key] += self.boost
            return out

        return [(hook_names.attn_scores(self.layer), hook)]


class RecordPattern(Intervention):
    """Keeps the pattern of one layer as the model uses it (its hook runs after every edit's)."""

    label = "record"

    def __init__(self, layer: int) -> None:
        self.layer, self.seen = layer, []

    def describe(self) -> dict:
        return {"intervention": "record"}

    def hooks(self, model, tokens):
        return [(hook_names.attn_pattern(self.layer), lambda pattern, hook: self.seen.append(pattern.detach().clone()))]


@pytest.fixture(scope="module")
def float32_llama(tmp_path_factory):
    return poslens.load_model(save_tiny_model(tmp_path_factory.mktemp("llama32"), "llama"), dtype=torch.float32)


def test_edits_in_a_float32_model_with_a_saturated_sink(float32_llama):
    """In a real float32 forward whose head (1, 0) has a_i0 == 1.0 exactly, both edits write rows summing to 1."""
    model, tokens = float32_llama, torch.randint(3, 200, (2, T), generator=torch.Generator().manual_seed(3))
    tokens[:, 0] = 1
    boost = KeyZeroBoost(1, 0, 60.0)
    unedited = RecordPattern(1)
    from poslens.measurement.batching import intervened_forward

    intervened_forward(model, tokens, [boost, unedited], [])
    assert bool((unedited.seen[0][:, 0, 1:, 0] == 1.0).all()), "the boost must saturate the sink in float32"
    binning = Binning(T, early=4)
    absolute = np.full((1, model.n_layers, model.n_heads, binning.n_query_bins * binning.n_offset_bins), 5.0)
    groups = {row.numpy().tobytes(): 0 for row in tokens}
    for edit in (SinkAblation({(1, 0): 0.4}), MaskOnlySinkProfile([(1, 0)], absolute, binning, groups, dose=1.0)):
        after = RecordPattern(1)
        logits = intervened_forward(model, tokens, [boost, edit, after], [], logits=True)
        pattern = after.seen[0]
        assert float((pattern.double().sum(-1) - 1).abs().max()) <= 1e-5, edit.label
        assert bool(torch.isfinite(logits).all()), edit.label
        if isinstance(edit, SinkAblation):
            torch.testing.assert_close(pattern[:, 0, 1:, 0], torch.full_like(pattern[:, 0, 1:, 0], 0.4))
        torch.testing.assert_close(pattern[:, 1:], unedited.seen[0][:, 1:])  # other heads untouched


def test_a_non_finite_score_stops_the_edit(float32_llama):
    model, tokens = float32_llama, torch.tensor([[1, 70, 71, 72, 73]])
    from poslens.measurement.batching import intervened_forward

    with pytest.raises(EditInvariantError, match="layer 1, head 0"):
        intervened_forward(model, tokens, [KeyZeroBoost(1, 0, float("nan"), key=1), SinkAblation({(1, 0): 0.4})], [])
