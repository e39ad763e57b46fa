"""The relativizing intervention on a real tiny model: composition, provenance and refusals (methodology §11)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import poslens
from poslens.errors import InputError
from poslens.fit.binning import Binning
from poslens.fit.mask_structure import structure
from poslens.fit.relativize import edit_solver
from poslens.mechanisms.attribution import attribution_figure, cumulative_attribution
from poslens.mechanisms.interventions import BosReplacement
from poslens.mechanisms.relativization import Relativization
from poslens.mechanisms.relativization_fit import calibrate, score_sums
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.testing import save_tiny_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return poslens.load_model(save_tiny_model(tmp_path_factory.mktemp("tiny"), "llama", initializer_range=0.1))


@pytest.fixture(scope="module")
def corpora(model):
    return (poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, seed=0), poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, seed=1))


def test_the_calibration_sees_the_other_interventions(model, corpora):
    """Layer 0's terms fitted with a BOS replacement are those of the scores the replacement produces."""
    _, calibration = corpora
    swap = BosReplacement("zero")
    fit = calibrate(model, calibration, "all", early=8, interventions=[swap])
    captured = []
    run_with_hooks(
        model,
        calibration.tokens,
        swap.hooks(model, calibration.tokens) + [(attn_scores(0), lambda x, hook: captured.append(x.clone()))],
        stop_after=attn_scores(0),
    )
    st = structure(Binning(24, early=8), rows=24, sliding_window=None)
    expected = edit_solver(st).terms(*score_sums(captured[0], st), float(calibration.n_seqs))
    np.testing.assert_allclose(fit.cells[0], expected.cells, atol=1e-10)
    plain = calibrate(model, calibration, "all", early=8)
    assert np.abs(plain.cells[0] - fit.cells[0]).max() > 1e-4  # the replacement changed what was fitted
    assert fit.calibration["interventions"] == [swap.describe()]


def test_the_edit_records_its_calibration_and_refuses_other_lengths(model, corpora):
    corpus, calibration = corpora
    fit = calibrate(model, calibration, "key0", early=8)
    edit = Relativization(fit)
    described = edit.describe()
    assert described["mode"] == "key0" and described["calibration"]["seed"] == 1
    assert described["calibration"]["n_seqs"] == 8 and len(described["calibration"]["tokens_sha256"]) == 64
    short = poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=2)
    with pytest.raises(InputError, match="calibrated for sequences of 24 tokens"):
        poslens.measure(model, short, groups=2, early=8, interventions=[edit], progress=False)


def test_the_attribution_refuses_a_calibration_that_shares_sequences(model, corpora):
    corpus, _ = corpora
    with pytest.raises(InputError, match="also appear in the measured corpus"):
        cumulative_attribution(model, corpus, corpus, modes=["all"], groups=2, early=8, progress=False, loss=False)


def test_layer_zero_is_unchanged_and_the_placebo_is_relative(model, corpora):
    """Layer 0 is measured before any edit; the placebo moves no figure's absolute component at layer 0 either."""
    corpus, calibration = corpora
    a = cumulative_attribution(model, corpus, calibration, modes=["all"], groups=2, early=8, progress=False, calibration_sizes=[8])
    diff = a.table[(a.table["kind"] == "difference") & (a.table["layer"] == 0)]
    assert len(diff) and np.abs(diff["value"]).max() < 1e-12
    t = a.table
    loss = t[(t["metric"] == "loss_change") & (t["query_bin"] == -1)].set_index("intervention")
    assert set(loss.index) == {"relativize:all", "placebo:all"}
    assert np.isfinite(loss["value"]).all()
    low, high = attribution_figure(a, "all")[["ci_low", "ci_high"]].astype(float)
    assert low <= attribution_figure(a, "all")["value"] <= high


def test_the_key0_modes_placebo_is_a_matched_constant_key0_shift(model, corpora):
    """Mode key0's loss placebo shifts the key-0 logits by a constant per head (a sink bias, no position) of the
    edit's norm, not a random relative kernel; the placebo of mode all stays the relative kernel."""
    from poslens.mechanisms.relativization import KeyZeroShiftPlacebo
    from poslens.mechanisms.relativization_fit import calibrate, edit_tensor

    corpus, calibration = corpora
    a = cumulative_attribution(model, corpus, calibration, modes=["all", "key0"], groups=2, early=8, progress=False, calibration_sizes=[8])
    assert set(a.table.loc[a.table["metric"] == "loss_change", "intervention"]) == {
        "relativize:all",
        "placebo:all",
        "relativize:key0",
        "placebo:key0-shift",
    }
    fit = calibrate(model, calibration, "key0", early=8)
    for layer in range(model.n_layers):
        shift, target = KeyZeroShiftPlacebo(fit).edit(layer), edit_tensor(fit, layer)
        assert torch.allclose((shift**2).sum((-2, -1)), (target**2).sum((-2, -1)))  # the same norm per head
        rows = shift[:, 1:, 0]
        assert torch.equal(rows, rows[:, :1].expand_as(rows))  # one constant per head on key 0
        assert torch.count_nonzero(shift[:, :, 1:]) == 0 and torch.count_nonzero(shift[:, 0]) == 0
