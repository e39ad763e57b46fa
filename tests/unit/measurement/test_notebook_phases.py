"""benchmarks/notebook_phases.py: the phases it times are disjoint parts of one measure, and it leaves poslens as it found it."""

from __future__ import annotations

import pytest
from scripts import load_script

import poslens
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.fit.replicates import Replicates
from poslens.measurement import pipeline


@pytest.fixture(scope="module")
def notebook_phases():
    return load_script("benchmarks/notebook_phases.py")


def test_the_phases_are_parts_of_one_measure_and_the_capture_is_inside_the_forward(notebook_phases, tiny_llama_dir):
    model = poslens.load_model(str(tiny_llama_dir))
    (times,) = notebook_phases.phase_times(model, n_seqs=8, seq_len=24, rounds=1)
    assert set(times) == {"plain", "measure", *notebook_phases.PHASES}
    for phase in ("forward passes", "of which: capture", "counterfactual", "fits", "intervals", "provenance"):
        assert times[phase] > 0, phase  # every wrapped function ran
    assert times["of which: capture"] < times["forward passes"]
    named = sum(times[p] for p in ("forward passes", "counterfactual", "fits", "intervals", "provenance"))
    assert times["rest"] >= 0 and named <= times["measure"]  # no phase counted twice


def test_the_timers_are_removed_after_each_measure(notebook_phases):
    before = (pipeline.forward_passes, pipeline._add_counterfactual, pipeline.run_metadata, CellSumCapture.reduce, Replicates.__dict__["of"])
    with pytest.raises(RuntimeError), notebook_phases.timed_phases({}):
        assert pipeline.forward_passes is not before[0]
        raise RuntimeError("a measure that fails")
    after = (pipeline.forward_passes, pipeline._add_counterfactual, pipeline.run_metadata, CellSumCapture.reduce, Replicates.__dict__["of"])
    assert after == before
