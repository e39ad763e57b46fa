"""The readouts of the path-specific tests (methodology §12.4) against closed forms and the package's own figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import poslens
from poslens.capture.residual_capture import ResidualCapture, residual_sums_bytes
from poslens.fit.binning import Binning
from poslens.fit.paired_figures import Figures
from poslens.fit.path_figures import loss_figures
from poslens.fit.pattern_variance import pattern_variance
from poslens.fit.residual_readout import eta_squared, probe_r2, ridge_weights
from poslens.fit.stats import ridge_fit
from poslens.mechanisms.next_token_loss import loss_change


def test_pattern_variance_is_the_measured_leakage(tiny_mistral_dir):
    model = poslens.load_model(tiny_mistral_dir)
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, seed=2)
    result = poslens.measure(model, corpus, groups=4, early=8, progress=False)
    parts = pattern_variance(result.sums.pooled(), result.sums.binning)
    for w, window in enumerate(("early", "all")):
        for layer in range(model.n_layers):
            for head in range(model.n_heads):
                measured = result.value("leakage_pattern", window, layer=layer, head=head)
                assert abs(parts["leakage_pattern"][w, layer, head] - measured) < 1e-10
    ratio = parts["leakage_pattern_numerator"] / parts["leakage_pattern_sst"]
    assert np.allclose(ratio, parts["leakage_pattern"], rtol=1e-12, atol=0)


def test_ridge_weights_is_the_ridge_fit_estimator():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)) * [1.0, 10.0, 0.1, 1.0, 3.0, 1.0]
    x[:, 3] = 2.0  # a constant feature: weight 0
    y = x @ [0.5, 0.1, 4.0, 0.0, -0.2, 1.0] + rng.normal(scale=0.3, size=200)
    design = np.c_[np.ones(200), x]
    for penalty in (1e-3, 0.1, 10.0):
        ours = ridge_weights(design.T @ design, design.T @ y, y.sum(), 200, penalty)
        theirs = ridge_fit(design.T @ design, design.T @ y, y.sum(), 200, penalty)
        assert np.abs(ours - theirs).max() < 1e-8
        assert ours[4] == 0.0


def test_eta_squared_of_a_known_position_signal():
    """x = a·f(i) + noise: η² → a²·var(f) / (a²·var(f) + σ²) as N grows; pooled and leave-one-out close to it."""
    rng = np.random.default_rng(1)
    n, t, d, a, sigma = 400, 12, 3, 2.0, 1.0
    f = np.log(np.arange(t) + 1.0)
    capture = ResidualCapture(n_layers=1, width=d, seq_len=t, groups=4)
    for g in range(4):
        capture.group = g
        x = a * np.repeat(f[None, :, None], n // 4, 0) * np.array([1.0, 0.0, 0.0]) + rng.normal(scale=sigma, size=(n // 4, t, d))
        capture.add(0, 0, torch.as_tensor(x))
    pooled, replicates = eta_squared(capture.finish())
    signal = a**2 * f[1:].var()
    assert pooled[0, 0] == pytest.approx(signal / (signal + d * sigma**2), abs=0.02)
    assert np.all(np.abs(replicates[:, 0, 0] - pooled[0, 0]) < 0.02)


def test_probe_reads_a_linear_position_signal_and_not_noise():
    rng = np.random.default_rng(2)
    t, d = 16, 4
    capture = ResidualCapture(n_layers=1, width=d, seq_len=t, groups=4)
    for g in range(4):
        capture.group = g
        noise = rng.normal(size=(8, t, d))
        signal = noise.copy()
        signal[..., 0] = np.log(np.arange(t) + 1.0)  # feature 0 is y itself
        capture.add(0, 0, torch.as_tensor(signal))
        capture.add(1, 0, torch.as_tensor(noise))
    pooled, folds, _, _ = probe_r2(capture.finish(), penalty=1e-6)
    assert pooled[0, 0] > 0.999 and np.all(folds[:, 0, 0] > 0.999)
    assert pooled[1, 0] < 0.05  # the attention-output site got noise only


def test_projection_bounds_the_width():
    capture = ResidualCapture(n_layers=1, width=40, seq_len=6, groups=2, max_width=8)
    capture.add(0, 0, torch.randn(2, 6, 40, dtype=torch.float64))
    sums = capture.finish()
    assert sums.gram.shape[-1] == 9 and sums.position_sum.shape[-1] == 8
    assert np.allclose(capture.projection.T @ capture.projection, np.eye(8))
    assert residual_sums_bytes(2, 1, 40, 6, max_width=8) == 8 * 2 * 2 * (81 + 9 + 6 * 8 + 1)


def test_loss_figures_pair_as_loss_change_does():
    rng = np.random.default_rng(3)
    base = rng.normal(size=(8, 15))
    edited = base + rng.normal(scale=0.1, size=(8, 15)) + 0.2
    binning = Binning(16, early=8)
    paired = loss_figures(edited, 4, binning).minus(loss_figures(base, 4, binning)).frame()
    reference = loss_change(edited, base, 4, binning)
    merged = paired.merge(reference, on="query_bin", suffixes=("", "_ref"))
    assert len(merged) == len(reference)
    for column in ("value", "ci_low", "ci_high"):
        assert np.abs(merged[column] - merged[f"{column}_ref"]).max() < 1e-12


def test_figures_refuse_to_pair_other_keys():
    keys = pd.DataFrame({"metric": ["m"], "layer": [0], "query_window": ["all"], "query_bin": [-1]})
    other = keys.assign(layer=[1])
    a = Figures(keys, np.zeros(1), np.zeros((1, 2)), np.array(["fold"]))
    with pytest.raises(ValueError, match="figure by figure"):
        a.minus(Figures(other, np.zeros(1), np.zeros((1, 2)), np.array(["fold"])))


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
def test_the_path_table_saves_reloads_and_plots(tiny_llama_dir, tmp_path):
    from poslens.mechanisms.path_tests import path_specific_tests

    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, seed=1)
    result = path_specific_tests(model, corpus, offsets=[8, 64], doses=(0.5, 1.0), groups=4, early=8, tau=0.05, progress=False)
    back = poslens.Result.load(result.save(tmp_path / "path-tests.parquet"))
    pd.testing.assert_frame_equal(back.table, result.table)
    assert back.meta["dose_responses"] == result.meta["dose_responses"] and back.meta["sink_heads"] == result.meta["sink_heads"]
    names = [trace.name for trace in back.plot("path").data]
    assert names[0] == "unedited" and "key 0's phase frozen, D = 8" in names and "sham: key 1's phase frozen, D = 64" in names
    assert len(back.plot("path-split").data) == 2
    assert [trace.name for trace in back.plot("path-doses").data] == ["key 0's phase", "sham: key 1's phase", "mask-only profile"]
    with pytest.raises(ValueError, match="path-specific tests"):
        poslens.measure(model, corpus, groups=4, early=8, progress=False).plot("path")


def test_a_sliding_window_records_the_rows_the_freeze_acts_on(tiny_mistral_dir, tiny_llama_dir):
    from poslens.mechanisms.key_phase import frozen_rows
    from poslens.mechanisms.path_tests import path_specific_tests

    windowed = poslens.load_model(tiny_mistral_dir)
    windows = windowed.sliding_windows
    assert any(w is not None for w in windows)  # the tiny Mistral has a window, else this test says nothing
    corpus = poslens.make_corpus(windowed, "random", n_seqs=4, seq_len=16, seed=2)
    result = path_specific_tests(windowed, corpus, offsets=[4], groups=2, early=4, tau=0.05, sham=False, ablation=False, progress=False)
    width = next(w for w in windows if w is not None)
    note = result.meta["key0_rows"]["note"]
    assert f"rows i < {width} in layers" in note and "key-1 sham on rows i < W + 1" in note
    assert result.meta["key0_rows"]["windows"] == {str(width): [layer for layer, w in enumerate(windows) if w == width]}
    assert frozen_rows([None] * len(windows)) is None
    plain = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(plain, "random", n_seqs=4, seq_len=16, seed=2)
    unwindowed = path_specific_tests(plain, corpus, offsets=[4], groups=2, early=4, tau=0.05, sham=False, ablation=False, progress=False)
    assert unwindowed.meta["key0_rows"] is None


def test_the_command_prints_the_windowed_rows(tiny_mistral_dir, tmp_path):
    from typer.testing import CliRunner

    from poslens.study.cli import app

    args = ["path-tests", "--model", str(tiny_mistral_dir), "--corpus", "random", "--n-seqs", "4", "--seq-len", "16"]
    args += ["--groups", "2", "--early", "4", "--tau", "0.05", "--offsets", "4", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "note: key 0 is visible only to rows i < W under a sliding window" in " ".join(result.output.split())
    assert (tmp_path / "out" / "path-tests.parquet").exists()
