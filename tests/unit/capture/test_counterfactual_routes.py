"""The per-sequence counterfactual's two routes, the row-bin store and the second forward pass, give the same figures.

The second pass (poslens.capture.second_pass) recomputes, once the absolute
component is fitted, what the store would have kept; with a disk budget below
the store's size, ``row_sums="auto"`` takes it, and the temporary folder
then holds nothing however many sequences are measured.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pandas as pd
import pytest
import torch

import poslens
from poslens.capture import counterfactual_replay
from poslens.capture.counterfactual_replay import CounterfactualReplay
from poslens.capture.row_bin_store import RowBinStore, store_bytes
from poslens.errors import InputError
from poslens.fit.binning import Binning
from poslens.fit.cross_fit import CrossFit
from poslens.measurement.pipeline import collect_sums, measure_scores
from poslens.mechanisms.interventions import BosReplacement
from poslens.runtime.disk import DEFAULT_DISK_BUDGET, choose_route, default_disk_budget


def _masked_scores(n: int, heads: int, t: int, window: int | None, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    invisible = (j > i) | ((i - j) >= window if window is not None else torch.zeros(t, t, dtype=torch.bool))
    # content noise, a relative slope and an absolute key-position term, so that every fit has work to do
    s = torch.randn(n, heads, t, t, generator=g) + 0.05 * (i - j) - 0.02 * j * torch.rand(heads, 1, 1, generator=g)
    return s.float().masked_fill(invisible, torch.finfo(torch.float32).min)


def _same_tables(a: pd.DataFrame, b: pd.DataFrame, tol: float) -> None:
    keys = ["model", "variant", "intervention", "layer", "head", "query_window", "metric"]
    x, y = a.sort_values(keys).reset_index(drop=True), b.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(x[keys], y[keys])
    for column in ("value", "ci_low", "ci_high"):
        np.testing.assert_allclose(x[column].to_numpy(), y[column].to_numpy(), rtol=0, atol=tol, equal_nan=True)


def test_second_pass_equals_store_on_given_scores() -> None:
    layers = [_masked_scores(8, 3, 40, None, 0), _masked_scores(8, 3, 40, 9, 1)]
    store = measure_scores(layers, groups=4, early=8, layer_windows=[None, 9], row_sums="store")
    second = measure_scores(layers, groups=4, early=8, layer_windows=[None, 9], row_sums="second-pass")
    assert store.table["metric"].str.startswith("c_res").any()
    _same_tables(store.table, second.table, tol=1e-10)


def test_the_second_pass_weighs_one_variant_at_a_time_and_the_store_replay_several(monkeypatch) -> None:
    """Inside the forward (second pass) the replay's product holds one variant of A, as the memory model in the
    scaling page counts it; the store's replay, after the forward, may take several at once."""
    seen: dict[str, set] = {"store": set(), "second-pass": set()}
    add = CounterfactualReplay.add
    for route in seen:

        def recording(self, group, layer, row_bins, product_bytes=0, cells=None, _route=route):
            seen[_route].add(product_bytes)
            return add(self, group, layer, row_bins, product_bytes, cells)

        monkeypatch.setattr(CounterfactualReplay, "add", recording)
        measure_scores([_masked_scores(4, 2, 24, None, 0)], groups=2, early=8, row_sums=route)
    assert seen == {"store": {counterfactual_replay.PRODUCT_BYTES}, "second-pass": {0}}


def test_measure_scores_refuses_auto() -> None:
    with pytest.raises(InputError, match="not 'auto'"):
        measure_scores([_masked_scores(4, 1, 8, None, 0)], groups=2, early=4, row_sums="auto")


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def corpus16(tiny):
    return poslens.make_corpus(tiny, "random", n_seqs=16, seq_len=48, seed=3)


class _DiskWatch:
    """Records the size on disk of every row-bin store file after each write (the real write runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        real_write = RowBinStore.write
        watch = self

        def write(store, group, layer, row_bins):
            real_write(store, group, layer, row_bins)
            watch.sizes.append(os.fstat(store._file.fileno()).st_size)

        monkeypatch.setattr(RowBinStore, "write", write)


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
def test_budget_below_the_store_takes_the_second_pass_with_the_same_figures(tiny, corpus16, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the temporary folder of this test
    binning = Binning(corpus16.seq_len, early=16)
    need = store_bytes(corpus16.n_seqs, tiny.n_layers, tiny.n_heads, corpus16.seq_len, binning.n_offset_bins)
    budget = need // 4
    watch = _DiskWatch(monkeypatch)
    noise = BosReplacement("noise", seed=2)  # the second pass must run the same intervention, seeded the same
    kept = poslens.measure(tiny, corpus16, groups=4, early=16, interventions=[noise], row_sums="store", progress=False)
    assert kept.meta["row_sums"]["route"] == "store"
    assert kept.meta["row_sums"]["stored_bytes"] == need == max(watch.sizes)
    watch.sizes.clear()
    auto = poslens.measure(tiny, corpus16, groups=4, early=16, interventions=[noise], disk_budget=budget, progress=False)
    record = auto.meta["row_sums"]
    assert record["route"] == "second-pass" and record["requested"] == "auto"
    assert record["budget_bytes"] == budget and record["estimated_store_bytes"] == need
    assert "over the budget" in record["reason"]
    assert record["stored_bytes"] == 0 and watch.sizes == []  # nothing went to the temporary folder
    assert list(tmp_path.iterdir()) == []
    assert auto.meta["settings"]["row_sums"] == "auto" and auto.meta["settings"]["disk_budget"] == str(budget)
    _same_tables(kept.table, auto.table, tol=1e-10)


def test_disk_stops_growing_with_n_once_the_budget_is_reached(tiny, monkeypatch) -> None:
    watch = _DiskWatch(monkeypatch)
    binning = Binning(32, early=8)
    per_seq = store_bytes(1, tiny.n_layers, tiny.n_heads, 32, binning.n_offset_bins)
    budget = 6 * per_seq
    used = {}
    for n in (4, 8, 16):
        corpus = poslens.make_corpus(tiny, "random", n_seqs=n, seq_len=32, seed=n)
        watch.sizes.clear()
        sums = collect_sums(tiny, corpus, groups=2, early=8, disk_budget=budget, progress=False)
        used[n] = max(watch.sizes, default=0)
        assert used[n] == sums.row_sums_route["stored_bytes"] <= budget
    assert used == {4: 4 * per_seq, 8: 0, 16: 0}


def test_auto_within_the_budget_keeps_the_store(tiny, corpus16) -> None:
    sums = collect_sums(tiny, corpus16, groups=4, early=16, disk_budget="1GB", progress=False)
    assert sums.row_sums_route["route"] == "store" and "within the budget" in sums.row_sums_route["reason"]


def test_unknown_route_is_refused_before_anything_runs(tiny, corpus16) -> None:
    with pytest.raises(InputError, match="row_sums must be one of auto, store, second-pass"):
        poslens.measure(tiny, corpus16, groups=4, row_sums="disk", progress=False)


def test_default_budget_is_the_smaller_of_4gb_and_half_the_free_space(tmp_path) -> None:
    import shutil

    free = shutil.disk_usage(tmp_path).free
    assert default_disk_budget(str(tmp_path)) == int(min(DEFAULT_DISK_BUDGET, 0.5 * free))
    assert choose_route("auto", DEFAULT_DISK_BUDGET + 1, directory=str(tmp_path)).route == "second-pass"


def test_device_accumulation_matches_the_host_path() -> None:
    """The replay's accelerator path (sums held until flush) gives the host path's figures; run here on CPU tensors."""
    b = Binning(24, early=8)
    rng = np.random.default_rng(0)
    cells = b.n_query_bins * b.n_offset_bins
    fits = {w: rng.normal(size=(2, 2, 3, cells)) * 0.1 for w in ("early", "all")}
    cross_fit = CrossFit(fits, {w: x.sum(axis=0) for w, x in fits.items()}, np.array([1.0, 2.0]))
    from types import SimpleNamespace

    model = SimpleNamespace(n_layers=2, n_heads=3)
    host, device = (CounterfactualReplay(model, b, cross_fit, groups=2) for _ in range(2))
    row_bins = np.concatenate([rng.normal(size=(2, 3, 24, 1)), rng.uniform(0.1, 2.0, size=(2, 3, 24, b.n_offset_bins))], -1)
    for group in (0, 1):
        for layer in (0, 1):
            host.add(group, layer, row_bins)
            device._add_on_device(group, layer, torch.as_tensor(row_bins))
        device.flush()
    for w in ("early", "all"):
        np.testing.assert_allclose(device.log_partition[w], host.log_partition[w], rtol=1e-13, atol=0)
        assert np.abs(host.log_partition[w]).sum() > 0


def test_cli_says_which_route_ran_and_records_it(tiny_llama_dir, tmp_path) -> None:
    from typer.testing import CliRunner

    from poslens.measurement.result import Result
    from poslens.study.cli import app

    runner = CliRunner()
    small = ["--model", str(tiny_llama_dir), "--n-seqs", "8", "--seq-len", "24", "--groups", "4", "--early", "8"]
    done = runner.invoke(app, ["leakage", *small, "--row-sums", "auto", "--disk-budget", "1kB", "--out", str(tmp_path / "a")])
    assert done.exit_code == 0, done.output
    assert "row sums: second-pass (the row-bin store would take" in " ".join(done.output.split())
    saved = Result.load(tmp_path / "a" / "leakage.parquet")
    assert saved.meta["row_sums"]["route"] == "second-pass" and saved.meta["row_sums"]["budget_bytes"] == 1000
    refused = runner.invoke(app, ["leakage", *small, "--row-sums", "disk", "--out", str(tmp_path / "b")])
    unboxed = " ".join(refused.output.replace("│", " ").split())
    assert refused.exit_code == 2 and "--row-sums must be one of auto, store, second-pass, got 'disk'" in unboxed
    refused = runner.invoke(app, ["leakage", *small, "--disk-budget", "lots", "--out", str(tmp_path / "c")])
    assert refused.exit_code == 2 and "--disk-budget" in refused.output
