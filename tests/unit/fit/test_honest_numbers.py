"""Honest numbers: intervals of bounded figures stay inside the bound, groups of one sequence warn, the version is a string.

- :func:`poslens.fit.bounds.clip_interval` clips to the bound and never past the estimate; a measurement's table,
  the path tests' levels and the fingerprint's rows keep every interval of a bounded metric inside its bound, and
  the clip moves only ends that were past it (the unclipped intervals are recomputed here with the clip switched off);
- the bounds agree with the metric glossary's stated ranges, and the glossary page says for each metric whether its
  interval is clipped;
- ``poslens.measure`` warns when a group holds a single sequence, naming the fix;
- ``poslens.__version__`` is the version string, and ``poslens.version`` says where it is.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import poslens
from poslens.fit import bounds, metric_intervals
from poslens.fit.bounds import HARD_BOUNDS, clip_interval
from poslens.fit.groups import default_groups
from poslens.fit.metric_glossary import GLOSSARY
from poslens.fit.paired_figures import Figures
from poslens.measurement.arguments import SmallGroupsWarning, small_groups_message

ROOT = Path(__file__).resolve().parents[3]


def test_clip_interval_by_hand():
    low, high = clip_interval("probe_r2", np.array([0.68, 0.2]), np.array([0.13, -0.5]), np.array([1.23, 0.9]))
    assert low.tolist() == [0.13, -0.5] and high.tolist() == [1.0, 0.9]  # (−∞, 1]: only the upper end moves
    low, high = clip_interval("leakage_pattern", np.array([0.01, 1.0 + 1e-16]), np.array([-0.02, 0.98]), np.array([0.04, 1.02]))
    assert low.tolist() == [0.0, 0.98] and high.tolist() == [0.04, 1.0 + 1e-16]  # never past the estimate itself
    low, high = clip_interval("c_res", 0.1, -0.3, 2.0)  # no hard bound: unchanged
    assert (float(low), float(high)) == (-0.3, 2.0)
    low, high = clip_interval("key0_mass", np.array([np.nan]), np.array([np.nan]), np.array([np.nan]))
    assert np.isnan(low).all() and np.isnan(high).all()


@pytest.mark.parametrize("name", sorted(HARD_BOUNDS))
def test_bounds_agree_with_the_glossary_range(name):
    assert name in GLOSSARY, f"{name} has a bound but no glossary entry"
    stated = GLOSSARY[name].range.replace("−", "-")
    lower, upper = HARD_BOUNDS[name]
    numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", stated.split(";")[0].split("(row")[0])]
    if lower == -math.inf:
        assert stated.startswith("(-∞, 1]") and upper == 1.0, stated
    else:
        assert numbers and numbers[0] == lower, (stated, lower)
        if upper == math.inf:
            assert "∞" in stated or "log T" in stated, stated
        else:
            assert numbers[1] == upper, (stated, upper)


def test_glossary_page_says_how_each_interval_treats_its_range():
    page = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| \[`([^`]+)`\]\(#[^)]+\) \| .*? \| (.*?) \| methodology", page, flags=re.M)}
    assert rows, "the glossary's table was not found"
    for name in HARD_BOUNDS:
        assert "interval clipped" in rows[name], (name, rows[name])
    for name, text in rows.items():
        if text.startswith("usually"):
            assert "interval not clipped" in text, (name, text)


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=20, position0="bos", seed=2)
    return model, corpus


def test_measurement_intervals_of_bounded_figures_stay_inside_and_only_past_ends_move(tiny, monkeypatch):
    model, corpus = tiny
    result = poslens.measure(model, corpus, groups=4, early=8, progress=False)
    with monkeypatch.context() as patch:
        patch.setattr(metric_intervals, "clip_interval", lambda name, value, low, high: (np.asarray(low), np.asarray(high)))
        raw = poslens.measure(model, corpus, groups=4, early=8, progress=False)
    key = ["layer", "head", "query_window", "metric"]
    a, b = result.table.sort_values(key).reset_index(drop=True), raw.table.sort_values(key).reset_index(drop=True)
    assert a[key].equals(b[key]) and np.array_equal(a["value"], b["value"])
    moved = 0
    for name, rows in a.groupby("metric"):
        raw_rows = b.loc[rows.index]
        if name not in HARD_BOUNDS:
            assert np.array_equal(rows[["ci_low", "ci_high"]].to_numpy(), raw_rows[["ci_low", "ci_high"]].to_numpy(), equal_nan=True), name
            continue
        lower, upper = HARD_BOUNDS[name]
        v, lo, hi, raw_lo, raw_hi = (
            x.to_numpy(float) for x in (rows["value"], rows["ci_low"], rows["ci_high"], raw_rows["ci_low"], raw_rows["ci_high"])
        )
        finite = ~np.isnan(lo)
        assert (lo[finite] >= np.minimum(lower, v[finite])).all() and (hi[finite] <= np.maximum(upper, v[finite])).all(), name
        assert (lo[finite] <= v[finite]).all() and (v[finite] <= hi[finite]).all(), name
        inside = finite & (raw_lo >= lower) & (raw_hi <= upper)
        assert np.array_equal(lo[inside], raw_lo[inside]) and np.array_equal(hi[inside], raw_hi[inside]), name
        moved += int((finite & ~inside).sum())
    assert moved > 0, "no interval of this tiny measurement reached past a bound: the clip was not exercised"


def test_path_levels_are_clipped_and_differences_are_not():
    keys = pd.DataFrame({"metric": ["resid_eta2", "resid_eta2"], "layer": [0, 1], "query_window": ["all"] * 2, "query_bin": [-1, -1]})
    replicates = np.array([[0.0, 0.2, 0.0, 0.2], [0.5, 0.5, 0.5, 0.5]])
    level = Figures(keys, np.array([0.1, 0.5]), replicates, np.array(["jackknife"] * 2))
    frame = level.frame()
    assert frame["ci_low"].iloc[0] == 0.0 and frame["ci_low"].iloc[1] == pytest.approx(0.5)
    zero = Figures(keys, np.zeros(2), np.zeros((2, 4)), np.array(["jackknife"] * 2))
    difference = level.minus(zero).frame()
    assert difference["ci_low"].iloc[0] < 0.0  # a difference of η² is not bounded by η²'s range
    with pytest.raises(ValueError, match="levels and differences"):
        Figures.concat([level, level.minus(zero)])


def test_groups_of_one_sequence_warn_with_the_fix(tiny):
    model, corpus = tiny  # 8 sequences
    with pytest.warns(SmallGroupsWarning, match=r"8 sequences in 8 groups: 8 of the groups hold a single sequence.*n_seqs=16.*groups=4"):
        poslens.measure(model, corpus, groups=8, early=8, probe=False, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallGroupsWarning)
        poslens.measure(model, corpus, groups=4, early=8, probe=False, progress=False)  # groups of two: no warning
    assert small_groups_message(12, 8).startswith("12 sequences in 8 groups: 4 of the groups")
    assert small_groups_message(16, 8) is None and small_groups_message(3, 2).endswith("(n_seqs=4)")


def test_default_groups_hold_two_sequences_each_and_the_result_says_so(tiny):
    model, corpus = tiny  # 8 sequences: 4 groups by default, not 8 groups of one
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallGroupsWarning)
        chosen = poslens.measure(model, corpus, early=8, probe=False, progress=False)
    given = poslens.measure(model, corpus, groups=4, early=8, probe=False, progress=False)
    assert chosen.meta["settings"]["groups"] == 4 and chosen.meta["settings"]["groups_chosen"].startswith("default: min(8, n_seqs // 2)")
    assert given.meta["settings"]["groups_chosen"] == "given"
    assert chosen.sums.n_groups == 4
    pd.testing.assert_frame_equal(chosen.table, given.table)
    assert [default_groups(n) for n in (2, 3, 8, 9, 16, 100)] == [2, 2, 4, 4, 8, 8]


def test_version_is_a_string_and_the_module_says_where_it_is():
    import tomllib

    stated = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert isinstance(poslens.__version__, str) and poslens.__version__ == stated
    assert str(poslens.version) == f"{poslens.version}" == poslens.version.version == stated
    assert "poslens.__version__" in repr(poslens.version)
    assert poslens.version.SUMS_FORMAT >= 1  # still the module of the file formats


def test_bounds_module_lists_only_real_metrics():
    assert set(HARD_BOUNDS) <= set(GLOSSARY)
    assert bounds.interval_note("c_res_logit", GLOSSARY["c_res_logit"].range) == ""
