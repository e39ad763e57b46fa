"""poslens.sink_heads: the sink-reading heads joined with their C_res and C_mask, against a hand-join of the long table.

The model is the tiny Llama whose layer 0 is edited to hold sink heads of
graded strength (``sink_state_dict`` of test_sinks_effects_reference), so
τ = 0.3 picks some heads and not others. The reference walks the rows of
``result.to_frame()`` one by one: it never calls sink_table or sink_reading_heads.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

import poslens
from poslens.errors import InputError, ParameterTypeError
from poslens.measurement.result import Result, concat
from poslens.mechanisms import sinks
from poslens.mechanisms.interventions import BosReplacement
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[2]))
from test_sinks_effects_reference import sink_state_dict  # noqa: E402

SETTINGS = dict(groups=4, early=16, batch_size=4, progress=False, probe=False)
METRICS = ("sink_score", "c_res", "c_mask")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path):
    folder = save_tiny_model(tmp_path_factory.mktemp("sink_heads"), "llama", state_dict=sink_state_dict(tiny_llama_dir))
    model = poslens.load_model(folder)
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=32, position0="bos", seed=3)
    baseline = poslens.measure(model, corpus, **SETTINGS)
    replaced = poslens.measure(model, corpus, interventions=[BosReplacement("mean")], **SETTINGS)
    return baseline, replaced


def hand_join(result: Result, tau: float, window: str) -> list[dict]:
    """One dict per head with key0_mass (window all) ≥ τ, its figures read row by row from the long table."""
    cells: dict[tuple, tuple[float, float, float]] = {}
    for row in result.to_frame().itertuples(index=False):
        if row.layer >= 0 and row.head >= 0:
            cells[(row.metric, row.query_window, int(row.layer), int(row.head))] = (row.value, row.ci_low, row.ci_high)
    heads = sorted(
        (layer, head) for (metric, w, layer, head), (value, _, _) in cells.items() if metric == "key0_mass" and w == "all" and value >= tau
    )
    out = []
    for layer, head in heads:
        entry = {"layer": layer, "head": head}
        for name, metric, w in (("sink_score", "key0_mass", "all"), ("c_res", "c_res", window), ("c_mask", "c_mask", window)):
            value, low, high = cells.get((metric, w, layer, head), (math.nan, math.nan, math.nan))
            entry |= {name: value, f"{name}_ci_low": low, f"{name}_ci_high": high}
        out.append(entry)
    return out


def same(got: float, want: float) -> bool:
    return (math.isnan(got) and math.isnan(want)) or got == want


@pytest.mark.parametrize("window", ["all", "early"])
@pytest.mark.parametrize("tau", [0.3, 0.05, 0.9])
def test_matches_a_hand_join_of_the_long_table(measured, tau, window):
    baseline, _ = measured
    got = poslens.sink_heads(baseline, tau=tau, query_window=window)
    want = hand_join(baseline, tau, window)
    assert list(got.columns) == ["layer", "head"] + [f"{m}{s}" for m in METRICS for s in ("", "_ci_low", "_ci_high")]
    assert len(got) == len(want)
    for row, expected in zip(got.to_dict("records"), want, strict=False):
        assert row.keys() == expected.keys()
        for key in expected:
            assert same(float(row[key]), float(expected[key])), (tau, window, key, row[key], expected[key])
    assert got.attrs["tau"] == tau and got.attrs["query_window"] == window
    assert (got["sink_score"] >= tau).all()


def test_the_edited_heads_are_found_with_intervals(measured):
    baseline, _ = measured
    got = poslens.sink_heads(baseline)  # τ = 0.3, C_res and C_mask in window all
    assert list(zip(got["layer"], got["head"], strict=False)) == [(0, 0), (0, 2)] == sinks.sink_reading_heads(baseline)
    assert got["sink_score"].iloc[0] > 0.95
    for metric in METRICS:
        assert (got[f"{metric}_ci_low"] <= got[metric]).all() and (got[metric] <= got[f"{metric}_ci_high"]).all()
    assert got[["c_res", "c_mask"]].notna().all().all()
    # the default window is "all", as in Result.value and Result.heads
    assert got.equals(poslens.sink_heads(baseline, 0.3, "all"))
    assert not got["c_res"].equals(poslens.sink_heads(baseline, 0.3, "early")["c_res"])


def test_no_head_reaches_tau(measured):
    got = poslens.sink_heads(measured[0], tau=1.0)
    assert got.empty and "c_res_ci_high" in got.columns


def test_an_intervention_run_is_one_run(measured):
    _, replaced = measured
    got = poslens.sink_heads(replaced, tau=0.05)
    assert got.attrs["run"]["intervention"] == "bos:mean" and got.attrs["run"]["variant"] == "base"
    assert len(got) == len(hand_join(replaced, 0.05, "all"))


def test_a_missing_cell_is_nan_not_a_number(measured):
    baseline, _ = measured
    t = baseline.table
    dropped = t[~((t["metric"] == "c_res") & (t["query_window"] == "all") & (t["layer"] == 0) & (t["head"] == 2))]
    got = poslens.sink_heads(Result(dropped, baseline.meta))
    assert math.isnan(got.loc[got["head"] == 2, "c_res"].iloc[0])
    assert not math.isnan(got.loc[got["head"] == 0, "c_res"].iloc[0])


def test_results_that_lack_what_it_reads(measured):
    baseline, replaced = measured
    t = baseline.table
    with pytest.raises(InputError, match=r"needs per-head rows of 'c_res', which this result lacks"):
        poslens.sink_heads(Result(t[t["metric"] != "c_res"], baseline.meta))
    with pytest.raises(InputError, match=r"needs per-head rows of 'key0_mass', 'c_res', 'c_mask'.*\(its per-head metrics: sink_score\)"):
        poslens.sink_heads(Result(sinks.sink_table(baseline)))
    with pytest.raises(InputError, match=r"no per-head 'c_res' rows in window 'late' \(its windows for 'c_res': early, all\)"):
        poslens.sink_heads(baseline, query_window="late")
    early_mask_only = t[~((t["metric"] == "c_mask") & (t["query_window"] == "early"))]
    with pytest.raises(InputError, match=r"no per-head 'c_mask' rows in window 'early' \(its windows for 'c_mask': all\)"):
        poslens.sink_heads(Result(early_mask_only, baseline.meta), query_window="early")
    with pytest.raises(InputError, match=r"reads one run; this result holds 2 .*base/none; .*base/bos:mean"):
        poslens.sink_heads(concat([baseline, replaced]))
    with pytest.raises(InputError, match=r"repeats per-head 'key0_mass' rows"):
        poslens.sink_heads(concat([baseline, baseline]))
    with pytest.raises(InputError, match="lacks the columns"):
        poslens.sink_heads(Result(pd.DataFrame({"metric": ["c_res"], "value": [0.1]})))


@pytest.mark.parametrize(
    "tau, error, text",
    [
        (0, InputError, "tau must lie in (0, 1]"),
        (1.5, InputError, "got 1.5"),
        (float("nan"), InputError, "got nan"),
        (True, ParameterTypeError, "got bool True"),
        ("0.3", ParameterTypeError, "got str '0.3'"),
    ],
)
def test_bad_tau(measured, tau, error, text):
    with pytest.raises(error) as info:
        poslens.sink_heads(measured[0], tau=tau)
    assert text in str(info.value)


def test_bad_result_and_window(measured):
    with pytest.raises(ParameterTypeError, match="result must be a poslens Result"):
        poslens.sink_heads(measured[0].table)
    with pytest.raises(ParameterTypeError, match="query_window must be a str"):
        poslens.sink_heads(measured[0], query_window=None)
