"""benchmarks/notebook_ceiling.py: its free fits give the very figures of a real measure, and it leaves poslens as it found it."""

from __future__ import annotations

import numpy as np
import pytest
from scripts import load_script

import poslens
from poslens.measurement import pipeline


@pytest.fixture(scope="module")
def notebook_ceiling():
    return load_script("benchmarks/notebook_ceiling.py")


def test_free_fits_give_the_real_figures_and_are_removed_after(notebook_ceiling, tiny_llama_dir):
    model = poslens.load_model(str(tiny_llama_dir))
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, position0="bos", seed=0)
    real = poslens.measure(model, corpus, progress=False)
    before = (pipeline.Replicates, pipeline.metrics_with_intervals)
    with notebook_ceiling.free_fits(real.sums):
        assert pipeline.Replicates is not before[0]
        cached = poslens.measure(model, corpus, progress=False)
    assert (pipeline.Replicates, pipeline.metrics_with_intervals) == before
    for column in ("value", "ci_low", "ci_high"):
        np.testing.assert_array_equal(cached.table[column].to_numpy(), real.table[column].to_numpy())
    with pytest.raises(RuntimeError), notebook_ceiling.free_fits(real.sums):
        raise RuntimeError("a measure that fails")
    assert (pipeline.Replicates, pipeline.metrics_with_intervals) == before


def test_the_ratios_are_one_per_route_and_round(notebook_ceiling, tiny_llama_dir):
    model = poslens.load_model(str(tiny_llama_dir))
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, position0="bos", seed=0)
    rounds = notebook_ceiling.ratios(model, corpus, rounds=2, repeats=1)
    assert len(rounds) == 2 and all(set(row) == {"real", "free-fits"} and min(row.values()) > 0 for row in rounds)
