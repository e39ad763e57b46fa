"""Errors at the API boundary name the valid choices.

On a real measured result of a tiny Llama (3 layers, 4 heads): an unknown
metric, window, layer or head passed to ``Result.select``, ``Result.value``,
``Result.summary`` or ``effects.reduction`` raises ``ValueError`` listing what
the table holds; a TransformerLens bridge, a Hugging Face model or a name passed
where poslens needs its :class:`poslens.PosModel` raises ``TypeError`` saying
what was passed and how to load the right thing.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import poslens
from poslens.measurement.pipeline import collect_sums
from poslens.measurement.result import Result, concat
from poslens.mechanisms import effects
from poslens.mechanisms.fingerprint import fingerprint
from poslens.model.guards import require_pos_model


@pytest.fixture(scope="module")
def model(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def corpus(model):
    return poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=0)


@pytest.fixture(scope="module")
def result(model, corpus):
    return poslens.measure(model, corpus, groups=2, early=4, progress=False)


def raises(error: type[Exception], text: str):
    """``pytest.raises`` on a literal piece of the message (no regular expression)."""
    return pytest.raises(error, match=re.escape(text))


# -- Result lookups ------------------------------------------------------------


def test_unknown_metric_names_every_metric_of_the_table(result):
    metrics = sorted(set(result.table["metric"]))
    assert "c_res" in metrics and len(metrics) > 10
    for lookup in (lambda: result.select("c_rez"), lambda: result.value("c_rez"), lambda: result.value("c_rez", "early", 1, 2)):
        with raises(ValueError, "unknown metric 'c_rez' (did you mean 'c_res'?); this table has: " + ", ".join(metrics)):
            lookup()


def test_unknown_window_names_the_windows(result):
    for lookup in (lambda: result.select("c_res", "late"), lambda: result.value("c_res", "late")):
        with raises(ValueError, "unknown query window 'late' for metric 'c_res'; this table has: early, all"):
            lookup()


def test_unknown_layer_names_the_layers(result):
    with raises(ValueError, "layer 40 not in this table for metric 'c_res', window 'early'; layers: -1 (all layers ≥ 1), 0 … 2"):
        result.select("c_res", "early", layer=40)
    with raises(ValueError, "layer 3 not in this table for metric 'c_res', window 'early'; layers: -1 (all layers ≥ 1), 0 … 2"):
        result.value("c_res", layer=3)
    with raises(ValueError, "layer '1' not in this table"):  # a string is not a layer number
        result.select("c_res", layer="1")
    with raises(ValueError, "layer 40 not in this table for metric 'c_res'; layers: -1"):  # NumPy integers read as numbers
        result.select("c_res", layer=np.int64(40))
    assert len(result.select("c_res", layer=np.int64(1), head=np.int64(2))) == 2  # both windows


def test_unknown_head_names_the_heads_of_that_metric(result):
    with raises(ValueError, "head 4 not in this table for metric 'c_res', window 'all', layer 1; heads: -1 (all heads), 0 … 3"):
        result.value("c_res", "all", layer=1, head=4)
    # probe_r2 exists only as a head aggregate: the choices are those of the metric asked for
    with raises(ValueError, "head 0 not in this table for metric 'probe_r2', window 'early', layer 1; heads: -1 (all heads)"):
        result.value("probe_r2", "early", layer=1, head=0)


def test_known_choices_still_work(result):
    t = result.table
    rows = result.select("c_res", "early", head=-1)
    assert sorted(rows["layer"]) == [-1, 0, 1, 2]
    assert len(result.select("c_res")) == len(t[t["metric"] == "c_res"])
    want = t[(t["metric"] == "c_res") & (t["query_window"] == "all") & (t["layer"] == 1) & (t["head"] == 2)]["value"]
    assert result.value("c_res", "all", layer=1, head=2) == float(want.iloc[0])
    assert result.value("probe_r2", "early", layer=1) == result.select("probe_r2", "early", 1, -1)["value"].iloc[0]


def test_value_over_several_runs_names_them(result):
    swapped = Result(result.table.assign(intervention="bos:mean"))
    both = concat([result, swapped])
    with raises(
        ValueError,
        "2 rows for metric='c_res', window='early', layer=-1, head=-1 come from 2 runs "
        "(model/variant/intervention: " + f"{result.table['model'].iloc[0]}/base/none; "
        f"{result.table['model'].iloc[0]}/base/bos:mean)",
    ):
        both.value("c_res", "early")
    assert len(both.select("c_res", "early", -1, -1)) == 2


def test_summary_checks_window_and_named_metrics(result):
    with raises(ValueError, "unknown query window 'late'; this table has: early, all"):
        result.summary("late")
    with raises(ValueError, "unknown metric 'c_rez' (did you mean 'c_res'?); this table has: "):
        result.summary("early", metrics=("c_res", "c_rez"))
    assert list(result.summary("early").columns) == ["leakage_pattern", "c_res", "c_mask", "key0_mass", "probe_r2"]
    # The default metrics the table lacks are left out (a result measured with probe=False has no probe_r2) ...
    without_probe = Result(result.table[result.table["metric"] != "probe_r2"])
    assert list(without_probe.summary("all").columns) == ["leakage_pattern", "c_res", "c_mask", "key0_mass"]
    # ... but a table with none of them says so and names what it has.
    only_entropy = Result(result.table[result.table["metric"] == "entropy"])
    with raises(ValueError, "no per-layer rows (head -1) in window 'early' for metrics (none); this table has metrics: entropy"):
        only_entropy.summary("early")


# -- effects.reduction -----------------------------------------------------------


def test_reduction_names_metrics_and_windows(result):
    with raises(ValueError, "unknown query window 'late'; reduction() takes: early, all"):
        effects.reduction(result, result, query_window="late")
    with raises(ValueError, "unknown metric 'c_rez' (did you mean 'c_res'?); reduction() can use: ") as caught:
        effects.reduction(result, result, metric="c_rez")
    for metric in ("c_res", "c_mask", "leakage_pattern", "key0_mass"):
        assert metric in str(caught.value)
    # in the table, but held out / probe figures are not refitted per jackknife replicate
    with raises(ValueError, "metric 'probe_r2' is in the table but is not refitted from the cell sums; reduction() can use: c_count"):
        effects.reduction(result, result, metric="probe_r2")
    same = effects.reduction(result, result, metric="c_mask", query_window="all")
    assert set(same["query_window"]) == {"all"} and (same["value"].abs() < 1e-12).all()


# -- a PosModel where poslens needs one --------------------------------------------


def test_bridge_is_refused_with_the_way_to_load(model, corpus):
    for call, where in (
        (lambda m: poslens.measure(m, corpus, groups=2, progress=False), "measure()"),
        (lambda m: collect_sums(m, corpus, groups=2, progress=False), "collect_sums()"),
        (lambda m: fingerprint(m, n_seqs=4, seq_len=8, groups=2), "fingerprint()"),
    ):
        with raises(TypeError, f"{where} needs a model loaded by poslens.load_model(...) (a PosModel); got TransformerBridge. ") as caught:
            call(model.bridge)
        assert "Wrap it first, as it is: model = poslens.load_model(bridge)" in str(caught.value)


def test_name_and_path_are_refused(model, corpus, tiny_llama_dir):
    with raises(TypeError, f"got str. Load it first: model = poslens.load_model({str(tiny_llama_dir)!r})"):
        poslens.measure(str(tiny_llama_dir), corpus, progress=False)
    with raises(TypeError, "needs a model loaded by poslens.load_model(...) (a PosModel); got PosixPath. Load it first"):
        require_pos_model(tiny_llama_dir, "measure()")
    with raises(TypeError, "got int. Pass the model's registry name, local folder or cached Hugging Face id"):
        require_pos_model(3, "measure()")
    require_pos_model(model, "measure()")


def test_hf_model_is_refused_and_the_advice_works(corpus, result, tiny_llama_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    with raises(
        TypeError,
        "measure() needs a model loaded by poslens.load_model(...) (a PosModel); got LlamaForCausalLM. "
        "Wrap it first, as it is: model = poslens.load_model(hf_model, tokenizer=tokenizer)",
    ):
        poslens.measure(hf, corpus, progress=False)
    # following the advice gives a model that measures the same figures
    again = poslens.measure(
        poslens.load_model(hf, tokenizer=AutoTokenizer.from_pretrained(tiny_llama_dir)), corpus, groups=2, early=4, progress=False
    )
    assert again.value("c_res", "early") == pytest.approx(result.value("c_res", "early"), abs=1e-10)
