"""One default query window: every reading with no window given equals the same reading with the default named.

On a real measurement of a tiny random Llama, whose early and all-query figures differ, so a reading that
silently read the other window would fail; and on tables measured in one window only (a sinks part), which
every reading reads in that window.
"""

from __future__ import annotations

import inspect

import pandas as pd
import pytest

import poslens
from poslens import BosReplacement
from poslens.measurement.result import Result
from poslens.measurement.table import DEFAULT_QUERY_WINDOW, query_window_for
from poslens.mechanisms.effects import paired_difference, reduction
from poslens.mechanisms.sinks import sink_table
from poslens.testing import save_tiny_model

SETTINGS = dict(groups=4, early=8, progress=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    folder = save_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama", "llama")
    model = poslens.load_model(folder)
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24)
    base = poslens.measure(model, corpus, **SETTINGS)
    swap = poslens.measure(model, corpus, interventions=[BosReplacement("mean")], **SETTINGS)
    return {"base": base, "swap": swap}


def test_the_default_is_early_and_the_windows_differ_in_this_run(runs: dict[str, Result]) -> None:
    assert DEFAULT_QUERY_WINDOW == "early"
    base = runs["base"]
    # the test can only catch a reading of the wrong window where the windows disagree
    assert base.value("c_res", "early") != base.value("c_res", "all")
    assert not base.heads("key0_mass", "early").equals(base.heads("key0_mass", "all"))


def test_no_window_equals_the_default_named_for_every_reading(runs: dict[str, Result]) -> None:
    base = runs["base"]
    d = DEFAULT_QUERY_WINDOW
    for metric in ("c_res", "c_mask", "leakage_pattern", "key0_mass"):
        assert base.value(metric) == base.value(metric, d)
        assert base.value(metric, layer=1) == base.value(metric, d, layer=1)
        pd.testing.assert_frame_equal(base.heads(metric), base.heads(metric, d))
        pd.testing.assert_frame_equal(base.heads(metric, intervals=True), base.heads(metric, d, intervals=True))
        assert base.heads(metric).attrs["query_window"] == d
        pd.testing.assert_frame_equal(base.heads_excluding_zero(metric), base.heads_excluding_zero(metric, d))
    pd.testing.assert_frame_equal(base.summary(), base.summary(d))
    for kind, metric in (("sources", None), ("leakage", None), ("sinks", None), ("heads", "c_res"), ("layers", "c_res")):
        assert base.plot(kind, metric=metric).to_json() == base.plot(kind, d, metric=metric).to_json(), kind
    swap = runs["swap"]
    pd.testing.assert_frame_equal(reduction(base, swap), reduction(base, swap, query_window=d))
    pd.testing.assert_frame_equal(paired_difference(base, swap), paired_difference(base, swap, query_window=d))


def test_every_reading_names_none_or_the_default_in_its_signature() -> None:
    """A reading whose signature carries a literal window (as value() carried "all") would read its own default."""
    readings = [Result.value, Result.summary, Result.heads, Result.heads_excluding_zero, Result.plot, reduction, paired_difference]
    for reading in readings:
        default = inspect.signature(reading).parameters["query_window"].default
        assert default in (None, DEFAULT_QUERY_WINDOW), (reading.__qualname__, default)


def test_a_metric_held_in_one_window_is_read_there(runs: dict[str, Result]) -> None:
    sinks = Result(sink_table(runs["base"]))
    held = set(sinks.table.loc[sinks.table["metric"] == "sink_score", "query_window"])
    assert held == {"all"}  # the sink score is a mean over all queries
    assert query_window_for(sinks.table, "sink_score") == "all"
    pd.testing.assert_frame_equal(sinks.heads("sink_score"), sinks.heads("sink_score", "all"))
    with pytest.raises(Exception, match="early"):  # naming a window the table lacks is an error, never a silent switch
        sinks.heads("sink_score", "early")


def test_plot_sinks_titles_the_window_it_read(runs: dict[str, Result]) -> None:
    base = runs["base"]
    default = base.plot("sinks")
    assert "early queries" in (default.layout.title.text or "") + "".join(a.text for a in default.layout.annotations)
    all_queries = base.plot("sinks", "all")
    assert "i ≥ 1" in "".join(a.text for a in all_queries.layout.annotations) + (all_queries.layout.title.text or "")
