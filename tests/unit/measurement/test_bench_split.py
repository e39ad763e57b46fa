"""benchmarks/bench_split.py times each route of the split against the plain forward of the same round."""

from __future__ import annotations

import pytest
from scripts import load_script

import poslens
from poslens.testing import save_tiny_model


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_split.py")


def test_each_route_is_timed_against_its_rounds_plain_forward(bench, tmp_path, monkeypatch):
    model = poslens.load_model(save_tiny_model(tmp_path, "llama"))
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=16, seed=0)
    plain, clock = [], iter(range(10_000))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: float(next(clock)))  # each call one second later
    monkeypatch.setattr(bench, "plain_forward", lambda model, corpus: plain.append(1))
    records = bench.split_cost(model, corpus, groups=2, rounds=2, tau=0.05)
    assert [r["route"] for r in records] == ["shapley", "sham", "p0-every-head", "edited-forward", "fits"]
    assert len(plain) == 2  # one plain forward per round
    for r in records:
        assert r["seconds"] == 1.0 and r["ratio"] == 1.0  # one tick per route, one per plain forward: the ratio is per round
        assert r["heads"] > 0
    assert [r["goal"] for r in records[:3]] == [5.0, 1.3, 1.3]
