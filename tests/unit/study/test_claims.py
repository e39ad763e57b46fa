"""Verdict rules of poslens.study.claims on small hand-built tidy tables.

The numbers below are constructed inputs, chosen to put each rule on each of
its three outcomes; no model runs here.
"""

from __future__ import annotations

import doctest
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from split_tables import split_table

import poslens.study.claims as claims
import poslens.study.claims.c1_leakage as claims_leakage
import poslens.study.claims.c2_mask as claims_mask
import poslens.study.claims.c3_path as claims_path
import poslens.study.claims.c4_compare as claims_compare
import poslens.study.claims.c5_bos_swap as claims_position0
import poslens.study.claims.c6_fingerprint as claims_fingerprint
import poslens.study.claims.c7_relativize as claims_relativize
import poslens.study.claims.c8_split as claims_split
import poslens.study.claims.lookup as lookup
import poslens.study.claims.rules as rules
import poslens.study.claims.table as claim_table
from poslens.fit.stats import depth_slope
from poslens.measurement.result import COLUMNS, Result
from poslens.study.claims import CLAIMS, STATEMENTS, evaluate, not_measured_summary
from poslens.study.claims.c1_leakage import C1_RULE, claim_c1
from poslens.study.claims.c2_mask import C2_RULE, claim_c2
from poslens.study.claims.c3_path import C3_RULE, claim_c3
from poslens.study.claims.c4_compare import C4_RULES, C4_SLOPE_RULE, claim_c4, label_cases
from poslens.study.claims.c5_bos_swap import c5_rule, claim_c5
from poslens.study.claims.c6_fingerprint import c6_rule, claim_c6
from poslens.study.claims.c7_relativize import C7_RULE, claim_c7
from poslens.study.claims.c8_split import C8_RULE
from poslens.study.claims.lookup import figure_row
from poslens.study.claims.rules import (
    INCONCLUSIVE,
    JOINT,
    NOT_MEASURED,
    NOT_SUPPORTED,
    SUPPORTED,
    Bound,
    Condition,
    Estimate,
    Rule,
    joint,
    verdict,
)
from poslens.study.claims.table import CLAIM_COLUMNS, INPUT_COLUMNS

row = figure_row


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=COLUMNS)


def verdicts(rows: list[dict]) -> set[str]:
    return {r["verdict"] for r in rows}


def only_verdict(rows: list[dict]) -> str:
    found = verdicts(rows)
    assert len(found) == 1, found
    return found.pop()


def inputs(r: dict) -> dict[str, tuple[float, float, float, str]]:
    """A claims row's inputs (its ``inputs`` field): name -> (value, ci_low, ci_high, role)."""
    return {i.estimate.name: (i.estimate.value, i.estimate.ci_low, i.estimate.ci_high, i.role) for i in r["inputs"]}


def same(got, want) -> bool:
    """Equal, element by element, with NaN equal to NaN (inputs are the tables' own numbers, copied, not computed)."""
    if isinstance(want, dict):
        return set(got) == set(want) and all(same(got[k], want[k]) for k in want)
    if isinstance(want, tuple):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want, strict=False))
    if isinstance(want, float) and np.isnan(want):
        return isinstance(got, float) and np.isnan(got)
    return got == want


def sources(r: dict) -> dict[str, Estimate]:
    return {i.estimate.name: i.estimate for i in r["inputs"]}


# --------------------------------------------------------------------------- C1


def c1_table(leak: tuple, probe: tuple, **kw) -> pd.DataFrame:
    return frame(row("leakage_pattern_heldout", *leak, **kw), row("probe_r2", *probe, **kw))


@pytest.mark.parametrize(
    "leak, probe, expected",
    [
        ((0.05, 0.04, 0.06), (0.6, 0.5, 0.7), SUPPORTED),
        ((0.05, 0.04, 0.06), (-0.2, -0.3, 0.0), NOT_SUPPORTED),  # ci_high = 0 counts as <= 0
        ((-0.01, -0.02, -0.001), (0.6, 0.5, 0.7), NOT_SUPPORTED),
        ((0.05, 0.04, 0.06), (0.2, -0.1, 0.5), INCONCLUSIVE),
        ((0.01, 0.0, 0.02), (0.6, 0.5, 0.7), INCONCLUSIVE),  # ci_low = 0 is not > 0
    ],
)
def test_c1_three_verdicts(leak, probe, expected):
    rows = claim_c1(c1_table(leak, probe))
    assert len(rows) == 2
    assert only_verdict(rows) == expected
    assert [r["figure"] for r in rows] == [leak[0], probe[0]]
    assert all(r["statement"] == STATEMENTS["C1"] for r in rows)
    assert "ci_low > 0" in rows[0]["rule"] and "ci_high <= 0" in rows[0]["rule"]
    assert "leakage_pattern_heldout" in rows[0]["rule"] and "probe_r2" in rows[1]["rule"]
    assert [r["figure_name"] for r in rows] == ["leakage_pattern_heldout", "probe_r2"]
    for r in rows:  # both rows rest on both figures; the held-out leakage is the headline
        assert same(inputs(r), {"leakage_pattern_heldout": (*leak, "headline"), "probe_r2": (*probe, "decides")})


def test_c1_ignores_other_windows_and_interventions_and_splits_models():
    t = pd.concat(
        [
            c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7), model="a"),
            c1_table((-0.05, -0.06, -0.04), (0.6, 0.5, 0.7), model="b", variant="ntk:4"),
            c1_table((-1, -1, -1), (-1, -1, -1), model="a", query_window="early"),
            c1_table((-1, -1, -1), (-1, -1, -1), model="a", intervention="bos:zero"),
            c1_table((-1, -1, -1), (-1, -1, -1), model="a", layer=3),
        ]
    )
    rows = claim_c1(t)
    by_model = {r["model"]: r["verdict"] for r in rows}
    assert by_model == {"a": SUPPORTED, "b (ntk:4)": NOT_SUPPORTED}


def test_c1_nan_interval_is_inconclusive():
    assert only_verdict(claim_c1(c1_table((0.05, np.nan, np.nan), (0.6, 0.5, 0.7)))) == INCONCLUSIVE


def test_c1_missing_row_names_metric_layer_window():
    t = frame(row("leakage_pattern_heldout", 0.05, 0.04, 0.06))
    with pytest.raises(ValueError, match=r"probe_r2.*layer -1.*head -1.*window 'all'"):
        claim_c1(t)


def test_duplicate_row_is_an_error():
    t = c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7))
    with pytest.raises(ValueError, match="expected exactly one"):
        claim_c1(pd.concat([t, t.iloc[[1]]]))


def test_accepts_result_objects_and_rejects_other_types():
    t = c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7))
    assert only_verdict(claim_c1(Result(t, {}))) == SUPPORTED
    with pytest.raises(TypeError):
        claim_c1([1, 2, 3])
    with pytest.raises(ValueError, match="lacks column"):
        claim_c1(t.drop(columns=["ci_low"]))


# --------------------------------------------------------------------------- C2


C2_OK = dict(mask0=(0.02, 0.01, 0.03), mask_deep=(0.01, 0.005, 0.015), res0=(0.002, -0.001, 0.005), rho0=(0.9, 0.8, 1.0))


def c2_table(mask0=C2_OK["mask0"], mask_deep=C2_OK["mask_deep"], res0=C2_OK["res0"], rho0=C2_OK["rho0"], share=(0.9, 0.8, 1.0)) -> pd.DataFrame:
    return frame(
        row("c_mask", *mask0, layer=0),
        row("c_mask", *mask_deep, layer=-1),
        row("c_res", *res0, layer=0),
        row("rho_mask", *rho0, layer=0),
        row("count_share", *share, layer=0),
        row("c_mask", -1, -1, -1, layer=2),  # other layers, windows and interventions must not be used
        row("rho_mask", 0.1, 0.0, 0.2, layer=-1),
        row("c_mask", -1, -1, -1, layer=0, query_window="early"),
        row("rho_mask", 0.1, 0.0, 0.2, layer=0, intervention="bos:zero"),
    )


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({}, SUPPORTED),
        ({"res0": (0.05, 0.04, 0.06), "rho0": (0.6, 0.55, 0.65)}, SUPPORTED),  # C_res need not vanish, only be smaller
        ({"mask0": (-0.02, -0.03, -0.01)}, NOT_SUPPORTED),
        ({"mask0": (0.0, -0.01, 0.0)}, NOT_SUPPORTED),  # ci_high = 0 counts as <= 0
        ({"mask_deep": (-0.01, -0.02, 0.0)}, NOT_SUPPORTED),  # no mask source after layer 0
        ({"rho0": (0.3, 0.2, 0.45)}, NOT_SUPPORTED),  # C_res exceeds C_mask at layer 0
        ({"mask0": (0.02, -0.01, 0.05)}, INCONCLUSIVE),
        ({"mask_deep": (0.01, -0.005, 0.02)}, INCONCLUSIVE),
        ({"rho0": (0.7, 0.5, 0.9)}, INCONCLUSIVE),  # ci_low = 0.5 is not > 0.5
        ({"rho0": (0.5, 0.4, 0.5)}, INCONCLUSIVE),  # ci_high = 0.5 is not < 0.5
        ({"rho0": (0.9, np.nan, np.nan)}, INCONCLUSIVE),
        ({"res0": (0.0, -0.001, 0.001), "share": (np.nan, np.nan, np.nan)}, SUPPORTED),  # reported figures do not decide
    ],
)
def test_c2_three_verdicts(kw, expected):
    rows = claim_c2(c2_table(**kw))
    assert len(rows) == 5
    assert only_verdict(rows) == expected
    figures = {**C2_OK, "share": (0.9, 0.8, 1.0), **kw}
    assert [r["figure"] for r in rows][:4] == pytest.approx([figures[k][0] for k in ("mask0", "mask_deep", "res0", "rho0")], nan_ok=True)
    rule = rows[0]["rule"]
    assert "c_mask (layer 0) ci_low > 0 and c_mask (layers >= 1) ci_low > 0" in rule and "rho_mask (layer 0) ci_low > 0.5" in rule
    assert "rho_mask (layer 0) ci_high < 0.5" in rule and "tests/unit/measurement/test_leakage_controls.py" in rule
    got = inputs(rows[0])
    roles = {name: role for name, (*_, role) in got.items()}
    assert roles == {
        "c_mask (layer 0)": "headline",
        "c_mask (layers >= 1)": "decides",
        "c_res (layer 0)": "reported",
        "rho_mask (layer 0)": "decides",
        "count_share (layer 0)": "reported",
        "c_mask - c_res (layer 0)": "reported",
    }
    for key, name in [
        ("mask0", "c_mask (layer 0)"),
        ("mask_deep", "c_mask (layers >= 1)"),
        ("res0", "c_res (layer 0)"),
        ("rho0", "rho_mask (layer 0)"),
        ("share", "count_share (layer 0)"),
    ]:
        assert got[name][:3] == pytest.approx(figures[key], nan_ok=True), name
    difference = got["c_mask - c_res (layer 0)"]
    assert difference[0] == pytest.approx(figures["mask0"][0] - figures["res0"][0], nan_ok=True)
    assert np.isnan(difference[1]) and np.isnan(difference[2])  # a point value: no interval in the table
    where = sources(rows[0])
    assert (where["c_mask (layer 0)"].metric, where["c_mask (layer 0)"].layer) == ("c_mask", 0)
    assert (where["c_mask (layers >= 1)"].metric, where["c_mask (layers >= 1)"].layer) == ("c_mask", -1)
    assert (where["rho_mask (layer 0)"].metric, where["count_share (layer 0)"].metric) == ("rho_mask", "count_share")
    assert [r["figure_name"] for r in rows] == [
        "c_mask (layer 0)",
        "c_mask (layers >= 1)",
        "c_res (layer 0)",
        "rho_mask (layer 0)",
        "count_share (layer 0)",
    ]


@pytest.mark.parametrize("metric, layer", [("count_share", 0), ("rho_mask", 0), ("c_mask", -1), ("c_res", 0)])
def test_c2_missing_rows_are_errors(metric, layer):
    t = c2_table()
    t = t[~((t["metric"] == metric) & (t["layer"] == layer) & (t["query_window"] == "all") & (t["intervention"] == "none"))]
    with pytest.raises(ValueError, match=rf"{metric}.*layer {layer}.*window 'all'"):
        claim_c2(t)


def test_c2_rho_rule_matches_the_difference_when_leakage_is_positive():
    # C_mask − C_res = (2 ρ_mask − 1) L: on consistent figures, the rho_mask rule agrees with the sign of the difference.
    for leakage, rho in [(0.04, 0.8), (0.04, 0.3), (0.01, 0.55), (0.01, 0.45)]:
        mask, res = rho * leakage, (1 - rho) * leakage
        t = c2_table(mask0=(mask, mask * 0.9, mask * 1.1), res0=(res, res * 0.9, res * 1.1), rho0=(rho, rho - 0.01, rho + 0.01))
        assert only_verdict(claim_c2(t)) == (SUPPORTED if mask > res else NOT_SUPPORTED)


# --------------------------------------------------------------------------- C3


def c3_tables(res: tuple, red: tuple, label: str = "sink-ablation:0.3") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The leakage and ablation parts' rows C3 reports (C_res at early queries, its reduction by the ablation)."""
    leak = frame(row("c_res", *res, query_window="early"), row("c_res", -9, -9, -9, query_window="all"))
    abl = frame(row("reduction", *red, query_window="early", intervention=label))
    return leak, abl


def path_row(intervention: str, reference: str, metric: str, value: tuple, model: str = "m", layer: int = -1) -> dict:
    return dict(row(metric, *value, intervention=intervention, model=model, layer=layer), kind="difference", reference=reference, query_bin=-1)


def path_table(fall=(0.10, 0.06, 0.14), beyond=(0.05, 0.02, 0.08), model: str = "m") -> pd.DataFrame:
    """The path-specific tests' rows C3 reads: the changes (edited − reference) whose negation is the fall."""
    flip = lambda x: (-x[0], -x[2], -x[1])  # noqa: E731 (a fall is the negated change, its interval swapped)
    return pd.DataFrame(
        [
            path_row("key0-phase:D=64", "none", "resid_probe_r2_ge2", flip(fall), model),
            path_row("key0-phase:D=64", "key1-phase:D=64", "resid_probe_r2_ge2", flip(beyond), model),
            path_row("key0-phase:D=8", "none", "resid_probe_r2_ge2", (9.0, 9.0, 9.0), model),  # another offset: not read
            path_row("key0-phase:D=64", "none", "resid_probe_r2", (9.0, 9.0, 9.0), model, layer=3),  # a layer: not read
            path_row("sink-ablation", "sink-mask-only:1", "resid_probe_r2_ge2", (-0.2, -0.3, -0.1), model),
            path_row("sink-mask-only:1", "none", "resid_probe_r2_ge2", (-0.05, -0.08, -0.02), model),
            path_row("key0-phase:D=64", "none", "next_token_loss", (0.004, 0.001, 0.007), model),
        ]
    )


@pytest.mark.parametrize(
    "fall, beyond, expected",
    [
        ((0.10, 0.06, 0.14), (0.05, 0.02, 0.08), SUPPORTED),
        ((0.10, 0.06, 0.14), (0.00, -0.03, 0.03), INCONCLUSIVE),  # falls, but no more than under the sham
        ((0.00, -0.005, 0.008), (0.05, 0.02, 0.08), NOT_SUPPORTED),  # within ±0.01: equivalence
        ((0.00, -0.01, 0.01), (0.05, 0.02, 0.08), NOT_SUPPORTED),  # the band's bounds count as within
        ((-0.05, -0.08, -0.02), (0.05, 0.02, 0.08), NOT_SUPPORTED),  # the freeze raises it
        ((0.005, -0.02, 0.03), (0.05, 0.02, 0.08), INCONCLUSIVE),  # reaches past the band
        ((0.10, np.nan, 0.14), (0.05, 0.02, 0.08), INCONCLUSIVE),
    ],
)
def test_c3_three_verdicts(fall, beyond, expected):
    rows = claim_c3(path_table(fall, beyond))
    assert only_verdict(rows) == expected
    assert [r["figure_name"] for r in rows] == ["fall", "fall beyond sham"]
    assert [r["figure"] for r in rows] == [fall[0], beyond[0]]
    got = inputs(rows[0])
    assert same(got["fall"], (*fall, "headline")) and same(got["fall beyond sham"], (*beyond, "decides"))
    assert got["resid_probe_r2_ge2: sink-ablation − sink-mask-only:1"][3] == "reported"
    assert same(got["resid_probe_r2_ge2: sink-mask-only:1 − none"], (-0.05, -0.08, -0.02, "reported"))
    assert sources(rows[0])["fall"].intervention == "key0-phase:D=64"
    assert "fall ci_low > 0 and fall beyond sham ci_low > 0" in rows[0]["rule"] and "equivalence" in rows[0]["rule"]


def test_c3_reports_the_ablation_and_the_key0_relativization_without_deciding_by_them():
    leak, abl = c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))
    plain = claim_c3(path_table())
    for key0 in [(0.02, -0.05, 0.09), (-0.5, -0.6, -0.4), (0.5, 0.4, 0.6)]:  # null, negative, positive: C3's verdict stays
        rows = claim_c3(path_table(), leak, abl, attribution=attribution_summary(key0=key0))
        assert [r["verdict"] for r in rows] == [r["verdict"] for r in plain] == [SUPPORTED, SUPPORTED]
        got = inputs(rows[0])
        assert same(got["r (key0)"], (*key0, "reported")) and same(got["reduction"], (0.3, 0.1, 0.5, "reported"))
        assert same(got["c_res"], (0.01, 0.005, 0.015, "reported"))
    opposite = claim_c3(path_table(), *c3_tables((-0.01, -0.02, -0.005), (-0.3, -0.5, -0.1)))
    assert [r["verdict"] for r in opposite] == [SUPPORTED, SUPPORTED]  # the ablation does not decide C3 any more
    assert "Reported, not used" in C3_RULE.text() and "D = 64" in C3_RULE.text()


def test_c3_reports_the_smallest_fall_the_data_could_detect():
    from scipy import stats as scipy_stats

    rows = claim_c3(Result(path_table(), {"settings": {"groups": 8}}))
    got = inputs(rows[0])
    se = (0.14 - 0.06) / (2 * scipy_stats.t.ppf(0.975, 7))
    expected = (scipy_stats.t.ppf(0.975, 7) + scipy_stats.t.ppf(0.8, 7)) * se
    assert got["detectable |fall|"][0] == pytest.approx(expected, rel=1e-12) and got["detectable |fall|"][3] == "reported"
    assert "detectable |fall beyond sham|" in got
    assert "detectable |fall|" not in inputs(claim_c3(path_table())[0])  # a bare table records no groups: none claimed


def test_c3_missing_rows_are_errors():
    table = path_table()
    sham = table[table["reference"] == "key1-phase:D=64"].index
    with pytest.raises(ValueError, match="key0-phase:D=64 against key1-phase:D=64"):
        claim_c3(table.drop(index=sham))
    with pytest.raises(ValueError, match="lacks column"):
        claim_c3(table.drop(columns=["reference"]))
    with pytest.raises(ValueError, match="path-tests"):
        claim_c3(table[table["intervention"] != "key0-phase:D=64"])


# --------------------------------------------------------------------------- C4


STANDARD = ("smollm2-135m", "base")
STD_CI = (0.010, 0.008, 0.012)
RISING = [(1, 0.01), (2, 0.02), (3, 0.035), (4, 0.04), (5, 0.05)]


def c4_table(ntk: tuple, sliding: tuple, per_layer=RISING) -> pd.DataFrame:
    rows = [
        row("c_res", *STD_CI, model=STANDARD[0], variant=STANDARD[1], query_window="all"),
        row("c_res", *ntk, model="smollm2-135m", variant="ntk:4", query_window="all"),
        row("c_res", *sliding, model="gemma3-270m", variant="base", query_window="all"),
        row("c_res", 0.5, 0.5, 0.5, model="gemma3-270m", layer=0, query_window="all"),  # layer 0 is left out of the slope
    ]
    rows += [row("c_res", v, v - 0.005, v + 0.005, model="gemma3-270m", layer=layer, query_window="all") for layer, v in per_layer]
    rows += [row("c_res", 9, 9, 9, model="gemma3-270m", layer=layer, head=0, query_window="all") for layer, _ in per_layer]
    return label_cases(Result(frame(*rows), {"cases": CASES}))


CASES = [
    dict(model=STANDARD[0], variant=STANDARD[1], case="standard"),
    dict(model="smollm2-135m", variant="ntk:4", case="ntk"),
    dict(model="gemma3-270m", variant="base", case="sliding"),
]
"""The cases as :func:`poslens.mechanisms.architectures.compare` records them (``meta["cases"]``)."""


@pytest.mark.parametrize(
    "ntk, sliding, expected",
    [
        ((0.002, 0.001, 0.003), (0.03, 0.02, 0.04), SUPPORTED),
        ((0.02, 0.015, 0.025), (0.03, 0.02, 0.04), NOT_SUPPORTED),  # NTK wholly above the standard
        ((0.002, 0.001, 0.003), (0.003, 0.002, 0.004), NOT_SUPPORTED),  # sliding wholly below
        ((0.009, 0.005, 0.009), (0.03, 0.02, 0.04), INCONCLUSIVE),  # NTK overlaps
        ((0.002, 0.001, 0.003), (0.013, 0.012, 0.02), INCONCLUSIVE),  # touching at 0.012 is not "wholly above"
    ],
)
def test_c4_three_verdicts(ntk, sliding, expected):
    rows = claim_c4(c4_table(ntk, sliding))
    comparisons = [r for r in rows if " vs " in r["model"]]
    assert [r["model"] for r in comparisons] == ["smollm2-135m (ntk:4) vs smollm2-135m", "gemma3-270m vs smollm2-135m"]
    assert only_verdict(comparisons) == expected
    assert [r["figure"] for r in comparisons] == [ntk[0], sliding[0]]
    assert "wholly below" in comparisons[0]["rule"]
    assert same(inputs(comparisons[0]), {"c_res (ntk)": (*ntk, "headline"), "c_res (standard)": (*STD_CI, "decides")})
    assert same(inputs(comparisons[1]), {"c_res (sliding)": (*sliding, "headline"), "c_res (standard)": (*STD_CI, "decides")})
    assert [(r["group"], r["case"]) for r in comparisons] == [("smollm2-135m (ntk:4)", "ntk"), ("gemma3-270m", "sliding")]
    # each comparison's own verdict, and the joint one every comparison row carries
    own = [verdict(C4_RULES[r["case"]], [Estimate(n, *v[:3]) for n, v in inputs(r).items()]) for r in comparisons]
    assert [r["own_verdict"] for r in comparisons] == own and expected == joint(own)


def test_c4_window_parameter_selects_rows():
    t = c4_table((0.002, 0.001, 0.003), (0.03, 0.02, 0.04))
    with pytest.raises(ValueError, match="window 'early'"):
        claim_c4(t, query_window="early")
    flipped = t.assign(query_window="early")
    assert only_verdict([r for r in claim_c4(flipped, "early") if " vs " in r["model"]]) == SUPPORTED


@pytest.mark.parametrize(
    "per_layer, expected",
    [
        (RISING, SUPPORTED),
        ([(1, 0.05), (2, 0.04), (3, 0.035), (4, 0.02), (5, 0.01)], NOT_SUPPORTED),
        ([(1, 0.01), (2, 0.05), (3, 0.0), (4, 0.04), (5, 0.012)], INCONCLUSIVE),
    ],
)
def test_c4_depth_slope_three_verdicts(per_layer, expected):
    rows = claim_c4(c4_table((0.002, 0.001, 0.003), (0.03, 0.02, 0.04), per_layer))
    (slope,) = [r for r in rows if "slope" in r["model"]]
    layers, values = zip(*per_layer, strict=False)
    assert slope["figure"] == pytest.approx(np.polyfit(layers, values, 1)[0])
    assert slope["ci_low"] <= slope["figure"] <= slope["ci_high"]
    assert slope["verdict"] == expected
    assert "jackknife" in slope["rule"] and "95%" in slope["rule"]
    figure = sources(slope)["c_res slope per layer"]
    assert (figure.statistic, figure.layer_first, figure.layer_last, figure.metric) == ("slope over layers", 1, 5, "c_res")
    assert inputs(slope)["c_res slope per layer"][3] == "headline"
    assert (slope["group"], slope["case"], slope["own_verdict"]) == ("gemma3-270m", "sliding", expected)


def test_depth_slope_jackknife_matches_hand_formula():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    y = np.array([0.0, 0.3, 0.1, 0.5])
    s, lo, hi = depth_slope(x, y)
    reps = np.array([np.polyfit(np.delete(x, k), np.delete(y, k), 1)[0] for k in range(4)])
    se = np.sqrt(3 / 4 * np.sum((reps - reps.mean()) ** 2))
    from scipy import stats

    t = stats.t.ppf(0.975, 3)
    assert (s, lo, hi) == pytest.approx((np.polyfit(x, y, 1)[0], s - t * se, s + t * se))
    with pytest.raises(ValueError, match="at least 3"):
        depth_slope(x[:2], y[:2])


def test_c4_needs_every_case_and_enough_layers():
    t = c4_table((0.002, 0.001, 0.003), (0.03, 0.02, 0.04))
    with pytest.raises(ValueError, match="case 'ntk'"):
        claim_c4(t[t["case"] != "ntk"])
    with pytest.raises(ValueError, match="exactly one .* 'standard'"):
        claim_c4(t[t["case"] != "standard"])
    with pytest.raises(ValueError, match="case"):
        claim_c4(t.drop(columns=["case"]))
    few = t[~((t["model"] == "gemma3-270m") & (t["layer"] >= 3))]
    with pytest.raises(ValueError, match="at least 3"):
        claim_c4(few)


def test_label_cases_reads_the_cases_compare_recorded_not_the_variant_names():
    from poslens.mechanisms.architectures import Case

    pairs = [
        ("smollm2-135m", "base"),
        ("smollm2-135m", "ntk:2"),
        ("smollm2-135m", "window:64"),
        ("gemma3-270m", "base"),
        ("ntk-trained", "base"),
        ("other", "base"),
    ]
    t = frame(*[row("c_res", 0, 0, 0, model=m, variant=v) for m, v in pairs])
    # names that would mislead a parser: an NTK-trained model under variant "base", a "window:64" run compared as standard
    recorded = [
        Case("smollm2-135m", "window:64", "standard"),
        Case("smollm2-135m", "ntk:2", "ntk"),
        Case("gemma3-270m", "base", "sliding"),
        Case("ntk-trained", "base", "ntk"),
    ]
    result = Result(t, {"cases": [c.__dict__ | {"inference_time": c.inference_time} for c in recorded]})
    assert label_cases(result)["case"].tolist() == [None, "ntk", "standard", "sliding", "ntk", None]
    assert label_cases(t, recorded)["case"].tolist() == [None, "ntk", "standard", "sliding", "ntk", None]
    assert "case" not in t.columns  # a copy
    from poslens.errors import InputError

    with pytest.raises(InputError, match="no cases recorded"):
        label_cases(t)
    with pytest.raises(InputError, match="two cases"):
        label_cases(t, [*recorded, Case("gemma3-270m", "base", "standard")])
    assert label_cases(t.assign(case="ntk"))["case"].tolist() == ["ntk"] * len(pairs)  # a table labelled already


# --------------------------------------------------------------------------- C5


@pytest.mark.parametrize(
    "red, expected",
    [
        ((0.4, 0.35, 0.45), SUPPORTED),
        ((0.2, 0.1, 0.5), SUPPORTED),
        ((0.1, 0.05, 0.25), NOT_SUPPORTED),  # ci_high < 0.3
        ((0.7, 0.55, 0.8), NOT_SUPPORTED),  # ci_low > 0.5
        ((0.25, 0.2, 0.35), INCONCLUSIVE),  # below 0.4 but reaching into the band
        ((0.6, 0.45, 0.75), INCONCLUSIVE),
        ((0.4, -0.1, 0.9), INCONCLUSIVE),  # contains 0.4 but also 0
    ],
)
def test_c5_three_verdicts(red, expected):
    t = frame(row("reduction", *red, intervention="bos:mean", query_window="early"))
    (r,) = claim_c5(t)
    assert r["verdict"] == expected
    assert r["model"] == r["group"] == "m, bos:mean"
    for threshold in ("0.4", "0.1", "0.3", "0.5"):
        assert threshold in r["rule"]
    got = inputs(r)
    assert same(got["reduction"], (*red, "headline"))
    assert got["target"][0] == 0.4 and got["band"][0] == 0.1 and got["target"][3] == got["band"][3] == "decides"
    assert sources(r)["reduction"].intervention == "bos:mean" and sources(r)["target"].statistic == "threshold"


def test_c5_one_row_per_kind_and_custom_thresholds():
    kinds = ["bos:mean", "bos:zero", "bos:noise", "bos:token:the"]
    t = frame(*[row("reduction", 0.4, 0.35, 0.45, intervention=k, query_window="early") for k in kinds])
    t = pd.concat([t, frame(row("reduction", 9, 9, 9, intervention="sink-ablation:0.3", query_window="early"))])
    rows = claim_c5(t)
    assert sorted(r["model"].split(", ")[1] for r in rows) == sorted(kinds)
    assert verdicts(rows) == {SUPPORTED}
    moved = claim_c5(t, target=0.8, band=0.2)
    assert verdicts(moved) == {NOT_SUPPORTED}
    assert "0.8" in moved[0]["rule"] and "0.6" in moved[0]["rule"] and "1" in moved[0]["rule"]
    assert (inputs(moved[0])["target"][0], inputs(moved[0])["band"][0]) == (0.8, 0.2)
    with pytest.raises(ValueError, match="band"):
        claim_c5(t, band=-0.1)


def test_c5_missing_rows():
    with pytest.raises(ValueError, match="bos:"):
        claim_c5(frame(row("reduction", 0.4, 0.35, 0.45, query_window="early")))
    with pytest.raises(ValueError, match=r"reduction.*window 'early'.*bos:mean"):
        claim_c5(frame(row("reduction", 0.4, 0.35, 0.45, intervention="bos:mean", query_window="all")))


# --------------------------------------------------------------------------- C6


def c6_table(bos=(0.0, 0.0, 1e-7), none=(0.2, 0.1, 0.3), acc=(0.9, 0.8, 1.0), chance=0.125, p_value=0.005) -> pd.DataFrame:
    rows = [row("dispersion", v, v, v, intervention="position0:bos", layer=layer) for layer, v in enumerate(bos)]
    rows += [
        row("dispersion", 0.0, 0.0, 0.0, intervention="position0:bos", layer=-1),
        row("dispersion", *none, intervention="position0:none"),
        row("dispersion", 0.3, 0.2, 0.4, intervention="position0:none", layer=2),
        row("readout_accuracy", *acc, intervention="position0:varied"),
        row("readout_accuracy", 0.1, 0.0, 0.12, intervention="position0:varied", layer=1),  # per-layer rows are not judged
        row("readout_chance", chance, chance, chance, intervention="position0:varied"),
        row("readout_chance_permuted", 0.124, 0.09, 0.16, intervention="position0:varied"),
        row("readout_p_value", p_value, p_value, p_value, intervention="position0:varied"),
    ]
    return frame(*rows)


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({}, SUPPORTED),
        ({"bos": (0.0, 0.0, 1e-3)}, NOT_SUPPORTED),  # fingerprint not constant with BOS
        ({"none": (-0.01, -0.02, 0.0)}, NOT_SUPPORTED),
        ({"acc": (0.1, 0.05, 0.125)}, NOT_SUPPORTED),  # ci_high at chance 1/K
        ({"acc": (0.3, 0.2, 0.4), "chance": 0.5, "p_value": 0.6}, NOT_SUPPORTED),  # the same interval, K = 2
        ({"none": (0.05, -0.01, 0.1)}, INCONCLUSIVE),
        ({"acc": (0.2, 0.05, 0.4)}, INCONCLUSIVE),
        ({"acc": (0.2, 0.125, 0.4)}, INCONCLUSIVE),  # ci_low = 1/K is not > 1/K
        ({"p_value": 0.2}, INCONCLUSIVE),  # fold interval above 1/K, but the permutation null does not confirm it
        ({"p_value": 0.05}, SUPPORTED),  # p <= alpha
        ({"bos": (0.0, np.nan, 0.0)}, INCONCLUSIVE),
    ],
)
def test_c6_three_verdicts(kw, expected):
    rows = claim_c6(c6_table(**kw))
    assert len(rows) == 3
    assert only_verdict(rows) == expected
    chance = kw.get("chance", 0.125)
    rule = rows[0]["rule"]
    assert "1e-05" in rule and "readout_p_value <= 0.05" in rule
    got = inputs(rows[0])
    assert got["readout_chance"][0] == chance and np.isnan(got["readout_chance"][1])  # point values: no interval
    assert got["readout_p_value"][0] == kw.get("p_value", 0.005) and np.isnan(got["readout_p_value"][2])
    assert f"K = {round(1 / chance)}" in sources(rows[0])["readout_chance"].where
    assert same(got["readout_chance_permuted (null mean, central 95%)"], (0.124, 0.09, 0.16, "reported"))
    assert same(got["dispersion (none)"], (*kw.get("none", (0.2, 0.1, 0.3)), "headline"))
    assert {name: role for name, (*_, role) in got.items() if role == "decides"} == dict.fromkeys(
        ["max dispersion (bos)", "readout_accuracy", "readout_chance", "readout_p_value"], "decides"
    )
    assert [r["figure"] for r in rows][2] == kw.get("acc", (0.9,))[0]


def test_c6_alpha_is_a_parameter():
    assert only_verdict(claim_c6(c6_table(p_value=0.03), alpha=0.01)) == INCONCLUSIVE
    assert only_verdict(claim_c6(c6_table(p_value=0.03), alpha=0.05)) == SUPPORTED
    assert "readout_p_value <= 0.01" in claim_c6(c6_table(), alpha=0.01)[0]["rule"]
    assert evaluate(fingerprint=c6_table(p_value=0.03), claims=["C6"], c6_alpha=0.01).table["verdict"].tolist() == [INCONCLUSIVE] * 3
    with pytest.raises(ValueError, match="alpha"):
        claim_c6(c6_table(), alpha=0.0)


@pytest.mark.parametrize("chance", [0.0, 1.0, 0.3, np.nan, 0.7])
def test_c6_refuses_a_chance_level_that_is_not_one_over_k(chance):
    # 0 (majority class absent from training), 1 (one class), 0.3 (not 1/K): never judged.
    with pytest.raises(ValueError, match="not 1/K"):
        claim_c6(c6_table(chance=chance))


@pytest.mark.parametrize("k", [2, 3, 7, 8])
def test_c6_accepts_every_one_over_k(k):
    assert only_verdict(claim_c6(c6_table(chance=1 / k, acc=(0.95, 0.9, 1.0)))) == SUPPORTED


def test_c6_reports_the_maximum_bos_dispersion_and_tolerance_is_a_parameter():
    rows = claim_c6(c6_table(bos=(0.0, 3e-6, 1e-7)))
    bos = sources(rows[0])["max dispersion (bos)"]
    assert rows[0]["figure"] == 3e-6 and bos.layer == 1 and "at layer 1" in bos.where
    assert (bos.statistic, bos.layer_first, bos.layer_last) == ("max over layers", 0, 2)
    assert rows[1]["figure"] == 0.2 and rows[2]["figure"] == 0.9
    assert only_verdict(claim_c6(c6_table(bos=(0.0, 3e-6, 1e-7)), tolerance=1e-6)) == NOT_SUPPORTED
    assert "1e-06" in claim_c6(c6_table(), tolerance=1e-6)[0]["rule"]


@pytest.mark.parametrize("metric", ["readout_chance", "readout_p_value", "readout_chance_permuted"])
def test_c6_missing_readout_rows(metric):
    t = c6_table()
    with pytest.raises(ValueError, match=rf"{metric}.*layer -1.*position0:varied"):
        claim_c6(t[t["metric"] != metric])


def test_c6_missing_rows():
    t = c6_table()
    with pytest.raises(ValueError, match=r"readout_accuracy.*layer -1.*position0:varied"):
        claim_c6(t[~((t["metric"] == "readout_accuracy") & (t["layer"] == -1))])
    with pytest.raises(ValueError, match=r"dispersion.*position0:none"):
        claim_c6(t[~((t["intervention"] == "position0:none") & (t["layer"] == -1))])
    with pytest.raises(ValueError, match="per-layer"):
        claim_c6(t[~((t["intervention"] == "position0:bos") & (t["layer"] >= 0))])


# --------------------------------------------------------------------------- rules as data


RULE = Rule(supported_if=(Condition("r", "ci_low", ">", 0.0),), not_supported_if=(Condition("r", "ci_high", "<=", 0.0),))


@pytest.mark.parametrize(
    "figure, expected",
    [
        ((0.3, 0.1, 0.5), SUPPORTED),
        ((-0.3, -0.5, -0.1), NOT_SUPPORTED),
        ((0.0, -0.1, 0.0), NOT_SUPPORTED),  # ci_high = 0 is <= 0
        ((0.1, -0.1, 0.3), INCONCLUSIVE),
        ((0.1, 0.0, 0.3), INCONCLUSIVE),  # ci_low = 0 is not > 0
        ((0.3, np.nan, 0.5), INCONCLUSIVE),
        ((-0.3, -0.5, np.nan), INCONCLUSIVE),  # NaN never refutes either
        ((np.nan, np.nan, np.nan), INCONCLUSIVE),
    ],
)
def test_verdict_each_branch(figure, expected):
    assert verdict(RULE, [Estimate("r", *figure)]) == expected


def test_verdict_needs_every_condition_for_supported_and_one_for_not_supported():
    rule = Rule(
        supported_if=(Condition("a", "ci_low", ">", 0.0), Condition("b", "value", "<=", 0.05)),
        not_supported_if=(Condition("a", "ci_high", "<=", 0.0), Condition("b", "value", ">", 0.5)),
    )
    figs = lambda a, b: [Estimate("a", *a), Estimate("b", b, b, b)]  # noqa: E731
    assert verdict(rule, figs((1, 0.5, 2), 0.01)) == SUPPORTED
    assert verdict(rule, figs((1, 0.5, 2), 0.2)) == INCONCLUSIVE  # one supporting condition fails, none refutes
    assert verdict(rule, figs((1, 0.5, 2), 0.9)) == NOT_SUPPORTED  # one refuting condition is enough
    assert verdict(rule, figs((1, 0.5, 2), np.nan)) == INCONCLUSIVE


def test_condition_against_another_figure_and_nan_threshold():
    below = Condition("x", "ci_high", "<", Bound("std", "ci_low"), note="wholly below")
    assert below.text() == "x ci_high < std ci_low (wholly below)"
    std = Estimate("std", 0.01, 0.008, 0.012)
    assert below.holds({"x": Estimate("x", 0.002, 0.001, 0.003), "std": std})
    assert not below.holds({"x": Estimate("x", 0.002, 0.001, 0.009), "std": std})
    assert not below.holds({"x": Estimate("x", 0.002, 0.001, 0.003), "std": Estimate("std", 0.01, np.nan, 0.012)})


def test_verdict_and_rules_refuse_bad_input():
    with pytest.raises(ValueError, match=r"reads estimate\(s\) \['r'\].*\['s'\]"):
        verdict(RULE, [Estimate("s", 1, 1, 1)])
    with pytest.raises(ValueError, match="two estimates are named 'r'"):
        verdict(RULE, [Estimate("r", 1, 1, 1), Estimate("r", 1, 1, 1)])
    with pytest.raises(ValueError, match="op must be one of"):
        Condition("r", "ci_low", "=>", 0.0)
    with pytest.raises(ValueError, match="bound must be one of .*'ci_low'"):
        Condition("r", "low", ">", 0.0)
    with pytest.raises(ValueError, match="at least one condition"):
        Rule(supported_if=(), not_supported_if=RULE.not_supported_if)


def _with_threshold(rule: Rule, figure: str, threshold: float) -> Rule:
    def move(conditions):
        return tuple(replace(c, threshold=threshold) if c.estimate == figure else c for c in conditions)

    return Rule(move(rule.supported_if), move(rule.not_supported_if), rule.remark)


def test_a_threshold_changes_text_and_verdict_together():
    figs = [
        Estimate("c_mask (layer 0)", 0.02, 0.01, 0.03),
        Estimate("c_mask (layers >= 1)", 0.01, 0.005, 0.015),
        Estimate("rho_mask (layer 0)", 0.9, 0.8, 1.0),
    ]
    assert verdict(C2_RULE, figs) == SUPPORTED
    assert "rho_mask (layer 0) ci_low > 0.5" in C2_RULE.text() and "rho_mask (layer 0) ci_high < 0.5" in C2_RULE.text()
    strict = _with_threshold(C2_RULE, "rho_mask (layer 0)", 0.95)
    assert verdict(strict, figs) == INCONCLUSIVE
    assert "rho_mask (layer 0) ci_low > 0.95" in strict.text() and "rho_mask (layer 0) ci_high < 0.95" in strict.text()
    assert "> 0.5" not in strict.text()
    stricter = _with_threshold(C2_RULE, "rho_mask (layer 0)", 1.5)
    assert verdict(stricter, figs) == NOT_SUPPORTED and "ci_high < 1.5" in stricter.text()


def test_a_claim_reads_its_rule_object_for_text_and_verdict(monkeypatch):
    t = c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7))
    assert only_verdict(claim_c1(t)) == SUPPORTED
    monkeypatch.setattr(claims_leakage, "C1_RULE", _with_threshold(C1_RULE, "probe_r2", 0.55))
    rows = claim_c1(t)
    assert only_verdict(rows) == INCONCLUSIVE  # probe_r2 ci_low 0.5 is not > 0.55
    assert "probe_r2 ci_low > 0.55" in rows[0]["rule"] and "probe_r2 ci_high <= 0.55" in rows[1]["rule"]


def test_c5_and_c6_rules_carry_their_parameters():
    rule = c5_rule(0.8, 0.2)
    assert [c.threshold for c in rule.not_supported_if] == pytest.approx([0.6, 1.0])
    assert "reduction ci_low <= 0.8 and reduction ci_high >= 0.8" in rule.text()
    rule = c6_rule(tolerance=1e-6, alpha=0.01)
    assert "max dispersion (bos) <= 1e-06" in rule.text() and "readout_p_value <= 0.01" in rule.text()
    with pytest.raises(ValueError, match="band"):
        c5_rule(band=-0.1)
    with pytest.raises(ValueError, match="alpha"):
        c6_rule(alpha=1.0)


def test_joint():
    assert joint([SUPPORTED, SUPPORTED]) == SUPPORTED
    assert joint([SUPPORTED, INCONCLUSIVE]) == INCONCLUSIVE
    assert joint([INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED]) == NOT_SUPPORTED
    with pytest.raises(ValueError, match="no verdicts"):
        joint([])


def test_every_rule_text_in_the_table_is_its_rule_objects_text():
    leakage = pd.concat([c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), c2_table(), c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[0]])
    out = evaluate(
        leakage=leakage,
        ablation=c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[1],
        bos_swap=frame(row("reduction", 0.4, 0.35, 0.45, intervention="bos:mean", query_window="early")),
        comparison=c4_table((0.002, 0.001, 0.003), (0.03, 0.02, 0.04)),
        fingerprint=c6_table(),
        path=path_table(),
        c5_target=0.5,
        c6_alpha=0.01,
    )
    texts = {claim: set(part["rule"]) for claim, part in out.table.groupby("claim")}
    assert texts["C1"] == {C1_RULE.text()}
    assert texts["C2"] == {C2_RULE.text()}
    assert texts["C3"] == {C3_RULE.text()}
    assert texts["C5"] == {c5_rule(0.5, 0.1).text()}
    assert texts["C6"] == {c6_rule(1e-5, 0.01).text()}
    comparison, slope = sorted(texts["C4"], key=len, reverse=True)
    assert comparison == f"ntk case: {C4_RULES['ntk'].text()}. sliding case: {C4_RULES['sliding'].text()}. all comparisons together: {JOINT}"
    assert slope.endswith("; " + C4_SLOPE_RULE.text())


# --------------------------------------------------------------------------- C4 by differences (methodology §9.1)


RECORDED = [
    dict(model="smollm2-135m", variant="base", case="standard"),
    dict(model="smollm2-135m", variant="ntk:4", case="ntk"),
    dict(model="smollm2-135m", variant="window:64", case="sliding"),
    dict(model="gemma3-270m", variant="base", case="sliding"),
]


def comparison_rows(
    ntk=(-0.002, -0.003, -0.001),
    window=(0.002, 0.001, 0.003),
    window_depth=(0.01, 0.005, 0.015),
    slope=(0.02, 0.01, 0.03),
    gemma=(0.003, 0.001, 0.005),
    gemma_depth=(0.01, 0.002, 0.02),
    trend=(-0.001, -0.002, -0.0005),
) -> pd.DataFrame:
    """A comparison table as compare records it (the columns of poslens.mechanisms.comparison_rows.COMPARISON_COLUMNS)."""

    def one(model, variant, metric, figure, comparison, kind, ref=("", ""), parameter="", layer=-1, window="all"):
        return dict(
            model=model,
            variant=variant,
            intervention="none",
            metric=metric,
            query_window=window,
            layer=layer,
            head=-1,
            value=figure[0],
            ci_low=figure[1],
            ci_high=figure[2],
            comparison=comparison,
            kind=kind,
            reference_model=ref[0],
            reference_variant=ref[1],
            parameter=parameter,
            se=0.001,
            df=7.0,
            detectable=0.0031,
        )

    base = ("smollm2-135m", "base")
    rows = [
        one("smollm2-135m", "ntk:4", "c_res", ntk, "ntk:4 − base", "paired", base),
        one("smollm2-135m", "window:64", "c_res", window, "window:64 − base", "paired", base),
        one("smollm2-135m", "window:64", "c_res_depth_slope", window_depth, "window:64 − base", "paired", base),
        one("smollm2-135m", "window:64", "c_res_depth_slope", slope, "window:64", "depth-slope"),
        one("gemma3-270m", "base", "c_res", gemma, "gemma3-270m − smollm2-135m", "independent", base),
        one("gemma3-270m", "base", "c_res_depth_slope", gemma_depth, "gemma3-270m − smollm2-135m", "independent", base),
        one("smollm2-135m", "ntk", "c_res", trend, "slope on log2 α (base, ntk:4)", "trend", parameter="log2 alpha"),
        # rows C4 does not read: other layers, windows, metrics, the standard's own depth slope
        one("smollm2-135m", "ntk:4", "c_res", (9, 9, 9), "ntk:4 − base", "paired", base, layer=3),
        one("smollm2-135m", "ntk:4", "c_res", (9, 9, 9), "ntk:4 − base", "paired", base, window="early"),
        one("smollm2-135m", "ntk:4", "c_mask", (9, 9, 9), "ntk:4 − base", "paired", base),
        one("smollm2-135m", "base", "c_res_depth_slope", (-9, -9, -9), "base", "depth-slope"),
        one("smollm2-135m", "ntk:4", "c_res_depth_slope", (9, 9, 9), "ntk:4 − base", "paired", base),
    ]
    return pd.DataFrame(rows)


def test_c4_by_differences_reads_each_comparison_in_its_predicted_direction():
    rows = claims_compare.claim_c4_differences(comparison_rows(), RECORDED)
    assert [(r["model"], r["case"], r["own_verdict"]) for r in rows] == [
        ("smollm2-135m (ntk:4) − smollm2-135m: c_res, paired", "ntk", SUPPORTED),
        ("smollm2-135m (window:64) − smollm2-135m: c_res, paired", "sliding", SUPPORTED),
        ("smollm2-135m (window:64) − smollm2-135m: c_res_depth_slope, paired", "sliding", SUPPORTED),
        ("smollm2-135m (window:64): c_res_depth_slope", "sliding", SUPPORTED),
        ("gemma3-270m − smollm2-135m: c_res, independent", "sliding", SUPPORTED),
        ("gemma3-270m − smollm2-135m: c_res_depth_slope, independent", "sliding", SUPPORTED),
        ("smollm2-135m, ntk cases: trend of c_res on log2 alpha", "ntk", SUPPORTED),
    ]
    assert verdicts(rows) == {SUPPORTED}
    assert [r["group"] for r in rows][:2] == ["smollm2-135m (ntk:4)", "smollm2-135m (window:64)"]
    first = inputs(rows[0])
    assert same(first["c_res (ntk:4 − base)"], (-0.002, -0.003, -0.001, "headline"))
    detectable = first["detectable |c_res (ntk:4 − base)|"]
    assert detectable[0] == 0.0031 and np.isnan(detectable[1]) and detectable[3] == "reported"
    assert sources(rows[0])["c_res (ntk:4 − base)"].statistic == "paired difference"
    assert "c_res (ntk:4 − base) ci_high < 0" in rows[0]["rule"] and "all comparisons together" in rows[0]["rule"]


@pytest.mark.parametrize(
    "kw, own, expected",
    [
        ({"ntk": (0.002, 0.001, 0.003)}, NOT_SUPPORTED, NOT_SUPPORTED),  # NTK raises C_res: the opposite direction
        ({"ntk": (-0.001, -0.003, 0.001)}, INCONCLUSIVE, INCONCLUSIVE),  # the paired interval holds 0
        ({"ntk": (-0.001, -0.003, 0.0)}, INCONCLUSIVE, INCONCLUSIVE),  # ci_high = 0 does not exclude 0
        ({"ntk": (0.0, 0.0, 0.002)}, INCONCLUSIVE, INCONCLUSIVE),  # nor does ci_low = 0 the other way
        ({"trend": (0.001, 0.0005, 0.002)}, NOT_SUPPORTED, NOT_SUPPORTED),
        ({"ntk": (np.nan, np.nan, np.nan)}, INCONCLUSIVE, INCONCLUSIVE),
    ],
)
def test_c4_by_differences_three_verdicts(kw, own, expected):
    rows = claims_compare.claim_c4_differences(comparison_rows(**kw), RECORDED)
    changed = rows[0] if "ntk" in kw else rows[-1]
    assert changed["own_verdict"] == own
    assert verdicts(rows) == {expected}  # every row carries the joint verdict
    assert sum(r["own_verdict"] != SUPPORTED for r in rows) == 1


def test_c4_sliding_directions_and_what_is_left_out():
    rows = claims_compare.claim_c4_differences(comparison_rows(window_depth=(-0.01, -0.02, -0.005), gemma=(-0.003, -0.005, -0.001)), RECORDED)
    own = {r["model"]: r["own_verdict"] for r in rows}
    assert own["smollm2-135m (window:64) − smollm2-135m: c_res_depth_slope, paired"] == NOT_SUPPORTED
    assert own["gemma3-270m − smollm2-135m: c_res, independent"] == NOT_SUPPORTED
    # an independent comparison against a model that is not the standard is not read
    other = comparison_rows().assign(reference_model=lambda t: t["reference_model"].where(t["kind"] != "independent", "x"))
    assert not any("independent" in r["model"] for r in claims_compare.claim_c4_differences(other, RECORDED))
    # a trend needs its members' case: without an ntk case of the model, the NTK trend is not read
    recorded = [c for c in RECORDED if c["case"] != "ntk"] + [dict(model="smollm2-135m", variant="ntk:4", case="sliding")]
    with pytest.raises(ValueError, match="no ntk comparison"):
        claims_compare.claim_c4_differences(comparison_rows(), recorded)
    with pytest.raises(ValueError, match="no sliding comparison"):
        claims_compare.claim_c4_differences(comparison_rows()[lambda t: ~t["variant"].isin(["window:64"]) & (t["kind"] != "independent")], RECORDED)
    with pytest.raises(ValueError, match="direction"):
        claims_compare.c4_sign_rule("x", 0)


def test_evaluate_decides_c4_by_differences_when_compare_recorded_them():
    labelled = c4_table((0.009, 0.005, 0.009), (0.03, 0.02, 0.04))
    old = evaluate(comparison=labelled, claims=["C4"]).table
    assert "c_res (standard)" in set(evaluate(comparison=labelled, claims=["C4"]).inputs["name"])  # no table: the case intervals
    assert old["verdict"].iloc[0] == INCONCLUSIVE
    for empty in (None, comparison_rows().iloc[0:0]):
        assert evaluate(comparison=labelled, claims=["C4"], c4_comparisons=empty).table["verdict"].tolist() == old["verdict"].tolist()
    every = frame(*[row("c_res", 0.01, 0.0, 0.02, model=c["model"], variant=c["variant"]) for c in RECORDED])  # the cases' rows
    new = evaluate(comparison=label_cases(Result(every, {"cases": RECORDED})), claims=["C4"], c4_comparisons=comparison_rows(), c4_query_window="all")
    assert len(new.table) == 7 and set(new.table["verdict"]) == {SUPPORTED}
    _check_inputs(new)
    recorded = Result(every, {"cases": RECORDED})  # the compare Result itself: C4 reads the cases its meta records
    direct = evaluate(comparison=recorded, claims=["C4"], c4_comparisons=comparison_rows(), c4_query_window="all")
    pd.testing.assert_frame_equal(direct.table, new.table)
    pd.testing.assert_frame_equal(direct.inputs, new.inputs)


def test_c4_reads_the_cases_from_the_compare_result_or_its_labelled_table():
    result = Result(c4_table((0.009, 0.005, 0.009), (0.03, 0.02, 0.04)).drop(columns=["case"]), {"cases": CASES})
    direct = evaluate(comparison=result, claims=["C4"])
    pd.testing.assert_frame_equal(direct.table, evaluate(comparison=label_cases(result), claims=["C4"]).table)
    with pytest.raises(ValueError, match="no cases recorded"):
        claims_compare.c4_rows(result.table, "all", comparison_rows())


# --------------------------------------------------------------------------- C7 and C3's causal figure


def attribution_summary(
    r_all=(0.3, 0.2, 0.4), key0=(0.02, -0.05, 0.09), placebo=(0.01, -0.02, 0.04), small=(0.35, 0.2, 0.5), model="m", variant="base"
) -> pd.DataFrame:
    """The relativize part's rows of r: per edit and calibration size, in both windows (the early ones must not be read)."""
    rows = []
    for edit, size, figure in [
        ("relativize:all", 16, r_all),
        ("relativize:all", 8, small),
        ("relativize:key0", 16, key0),
        ("relativize:key0", 8, (9.0, 9.0, 9.0)),
        ("relativize:all-but-key0", 16, (9.0, 9.0, 9.0)),
        ("placebo:all", 16, placebo),
    ]:
        for window, shift in (("all", 0.0), ("early", 5.0)):
            rows.append(
                dict(
                    model=model,
                    variant=variant,
                    intervention=edit,
                    layer=-1,
                    head=-1,
                    kind="reduction",
                    calibration_size=size,
                    metric="reduction_ge2",
                    query_window=window,
                    value=figure[0] + shift,
                    ci_low=figure[1] + shift,
                    ci_high=figure[2] + shift,
                )
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "r, expected",
    [
        ((0.3, 0.2, 0.4), SUPPORTED),
        ((0.15, 0.1, 0.2), INCONCLUSIVE),  # ci_low = 0.10 is not > 0.10 (and ci_high > 0.10: not equivalent either)
        ((0.15, 0.11, 0.2), SUPPORTED),
        ((0.0, -0.05, 0.05), NOT_SUPPORTED),  # within [-0.1, 0.1]: equivalence
        ((0.0, -0.1, 0.1), NOT_SUPPORTED),  # the bounds count as within
        ((0.05, -0.02, 0.12), INCONCLUSIVE),  # reaches above 0.10
        ((-0.05, -0.15, 0.02), INCONCLUSIVE),  # reaches below -0.10
        ((-0.3, -0.4, -0.2), SUPPORTED),  # two-sided: wholly below -0.10, the absolute logits counteract position
        ((-0.3, -0.4, -0.1), INCONCLUSIVE),  # ci_high = -0.10 is not < -0.10
        ((0.0, np.nan, 0.05), INCONCLUSIVE),
    ],
)
def test_c7_three_verdicts_with_the_equivalence_test(r, expected):
    (row_,) = claim_c7(attribution_summary(r_all=r))
    assert row_["verdict"] == row_["own_verdict"] == expected
    assert row_["figure"] == r[0] and row_["figure_name"] == "r (all)"
    assert "(r (all) ci_low > 0.1 or r (all) ci_high < -0.1)" in row_["rule"]
    assert "r (all) ci_low >= -0.1 and r (all) ci_high <= 0.1" in row_["rule"]
    got = inputs(row_)
    assert same(got["r (all)"], (*r, "headline"))  # the largest calibration size, window "all"
    assert same(got["r (all, calibration size 8)"], (0.35, 0.2, 0.5, "reported"))  # the calibration's own noise
    assert same(got["r (placebo:all)"], (0.01, -0.02, 0.04, "reported"))
    assert set(got) == {"r (all)", "r (all, calibration size 8)", "r (placebo:all)"}  # no loss table given
    figure = sources(row_)["r (all)"]
    assert (figure.metric, figure.intervention, figure.query_window, figure.layer_first) == ("reduction_ge2", "relativize:all", "all", 2)


def test_c7_reads_the_relativize_result_with_its_loss_rows():
    loss = pd.DataFrame(
        [
            dict(
                model="m",
                variant="base",
                intervention=edit,
                layer=-1,
                head=-1,
                kind="difference",
                calibration_size=16,
                query_window="all",
                query_bin=b,
                query_low=1,
                query_high=64,
                metric="loss_change",
                value=v,
                ci_low=v - 0.01,
                ci_high=v + 0.01,
            )
            for edit, b, v in [("relativize:all", -1, 0.2), ("relativize:all", 0, 9.0), ("placebo:all", -1, 0.05), ("relativize:key0", -1, 9.0)]
        ]
    )
    (row_,) = claim_c7(Result(pd.concat([attribution_summary(), loss], ignore_index=True)))  # the part: one table
    got = inputs(row_)
    assert same(got["loss_change (relativize:all)"], (0.2, 0.2 - 0.01, 0.2 + 0.01, "reported"))  # the table's numbers, copied
    assert same(got["loss_change (placebo:all)"], (0.05, 0.05 - 0.01, 0.05 + 0.01, "reported"))
    assert row_["verdict"] == SUPPORTED
    two = pd.concat([attribution_summary(), attribution_summary(r_all=(0.0, -0.05, 0.05), model="other")])
    assert [(r["model"], r["verdict"]) for r in claim_c7(two)] == [("m", SUPPORTED), ("other", NOT_SUPPORTED)]
    with pytest.raises(ValueError, match="with intervention 'relativize:all'"):
        claim_c7(attribution_summary().query("intervention != 'relativize:all'"))
    with pytest.raises(ValueError, match="lacks column"):
        claim_c7(attribution_summary().drop(columns=["calibration_size"]))
    with pytest.raises(ValueError, match="2 rows"):
        claim_c7(pd.concat([attribution_summary(), attribution_summary().query("intervention == 'relativize:all' and calibration_size == 16")]))


def test_an_equivalence_rule_needs_all_its_refuting_conditions():
    rule = Rule(
        (Condition("r", "ci_low", ">", 0.1),), (Condition("r", "ci_low", ">=", -0.1), Condition("r", "ci_high", "<=", 0.1)), not_supported_when="all"
    )
    assert rule.text() == "supported if r ci_low > 0.1; not supported if r ci_low >= -0.1 and r ci_high <= 0.1; inconclusive otherwise"
    assert verdict(rule, [Estimate("r", 0.0, -0.05, 0.05)]) == NOT_SUPPORTED
    assert verdict(rule, [Estimate("r", 0.0, -0.05, 0.2)]) == INCONCLUSIVE  # one refuting condition alone is not enough
    anyone = replace(rule, not_supported_when="any")
    assert verdict(anyone, [Estimate("r", 0.0, -0.05, 0.2)]) == NOT_SUPPORTED and " or " in anyone.text()
    with pytest.raises(ValueError, match="not_supported_when"):
        replace(rule, not_supported_when="most")


# --------------------------------------------------------------------------- evaluate


def test_evaluate_columns_and_not_measured():
    claims_ = evaluate()
    out = claims_.table
    assert (
        list(out.columns)
        == CLAIM_COLUMNS
        == ["key", "claim", "statement", "model", "group", "case", "figure_name", "figure", "ci_low", "ci_high", "rule", "own_verdict", "verdict"]
    )
    assert list(claims_.inputs.columns) == INPUT_COLUMNS and claims_.inputs.empty
    assert out["key"].tolist() == ["C1.1", "C2.1", "C3.1", "C4.1", "C5.1", "C6.1", "C7.1", "C8.1"]
    assert out["claim"].tolist() == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8"]
    assert set(out["verdict"]) == {NOT_MEASURED} == {"not measured"} and set(out["rule"]) == {"not measured"}
    assert out["statement"].tolist() == list(STATEMENTS.values())


def test_only_leakage_leaves_c3_to_c6_not_measured_and_names_their_commands():
    leakage = pd.concat([c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), c2_table(), c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[0]])
    out = evaluate(leakage=leakage).table
    verdicts = out.groupby("claim")["verdict"].agg(set).to_dict()
    assert verdicts == {
        "C1": {SUPPORTED},
        "C2": {SUPPORTED},
        "C3": {NOT_MEASURED},
        "C4": {NOT_MEASURED},
        "C5": {NOT_MEASURED},
        "C6": {NOT_MEASURED},
        "C7": {NOT_MEASURED},
        "C8": {NOT_MEASURED},
    }
    assert INCONCLUSIVE not in set(out["verdict"])
    line = not_measured_summary(out, "results/x", present=["leakage"])
    assert line == (
        "not measured: C3 (run: poslens path-tests --out results/x), C4 (run: poslens compare --out results/x), "
        "C5 (run: poslens bos-swap --out results/x), C6 (run: poslens fingerprint --out results/x), "
        "C7 (run: poslens relativize --out results/x), C8 (run: poslens sink-split --out results/x)"
    )
    # with nothing present, C1 and C2 name the leakage command, C3 the path-specific tests (which measure the leakage part first)
    everything = not_measured_summary(evaluate(), "D")
    assert everything.startswith(
        "not measured: C1 (run: poslens leakage --out D), C2 (run: poslens leakage --out D), C3 (run: poslens path-tests --out D), "
    )
    assert not_measured_summary(out[out["claim"].isin(["C1", "C2"])], "D") == ""


def test_evaluate_everything():
    leakage = pd.concat([c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), c2_table(), c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[0]])
    ablation = c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[1]
    bos_swap = frame(row("reduction", 0.4, 0.35, 0.45, intervention="bos:mean", query_window="early"))
    comparison = c4_table((0.002, 0.001, 0.003), (0.03, 0.02, 0.04))
    both = evaluate(Result(leakage, {}), Result(ablation, {}), bos_swap, comparison, c6_table(), attribution_summary(), path_table(), split_table())
    out = both.table
    assert list(out.columns) == CLAIM_COLUMNS
    assert set(out["claim"]) == set(STATEMENTS)
    assert set(out["verdict"]) == {SUPPORTED}
    assert out["figure"].dtype == float and out["rule"].str.len().min() > 20
    # C3 without the path-specific tests is not measured; C1 and C2 still evaluate.
    partial = evaluate(leakage=leakage).table
    assert partial.set_index("claim").loc["C3", "rule"] == "not measured"
    assert partial.set_index("claim").loc["C3", "verdict"] == NOT_MEASURED
    assert set(partial[partial["claim"].isin(["C1", "C2"])]["verdict"]) == {SUPPORTED}
    # Thresholds pass through.
    moved = evaluate(bos_swap=bos_swap, claims=["C5"], c5_target=0.8).table
    assert moved["verdict"].tolist() == [NOT_SUPPORTED]


def test_evaluate_propagates_missing_rows_and_rejects_unknown_claims():
    with pytest.raises(ValueError, match="c_mask"):
        evaluate(leakage=c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)))
    with pytest.raises(ValueError, match="unknown claim"):
        evaluate(claims=["C9"])


@pytest.mark.parametrize(
    "module",
    [
        rules,
        claim_table,
        lookup,
        claims,
        claims_leakage,
        claims_mask,
        claims_path,
        claims_compare,
        claims_position0,
        claims_fingerprint,
        claims_relativize,
        claims_split,
    ],
)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3 and result.failed == 0


def test_each_claim_is_data_with_its_rules_and_headline():
    assert list(CLAIMS) == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8"]
    assert {name: claim.statement for name, claim in CLAIMS.items()} == STATEMENTS
    for claim in CLAIMS.values():
        assert claim.rules and all(isinstance(rule, Rule) for rule in claim.rules)
        assert not claim.headline or claim.headline in claim.rules[0].estimates(), claim.name
    assert CLAIMS["C7"].rules == (C7_RULE,) and CLAIMS["C5"].rules[0] == c5_rule()


# --------------------------------------------------------------------------- claims as data


def _everything(tmp_path=None):
    leakage = pd.concat([c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), c2_table(), c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[0]])
    return evaluate(
        leakage,
        c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[1],
        frame(
            *[
                row("reduction", v, lo, hi, intervention=k, query_window="early")
                for k, v, lo, hi in [("bos:mean", 0.4, 0.35, 0.45), ("bos:zero", 2.5, 1.6, 3.3)]
            ]
        ),
        c4_table((0.009, 0.005, 0.009), (0.03, 0.02, 0.04)),
        c6_table(),
        attribution_summary(),
        path_table(),
        split_table(),
    )


def _check_inputs(out: claim_table.Claims) -> None:
    """Every verdict row has its inputs in the inputs table: name, value, interval and role, one headline the rule reads."""
    table, found = out.table, out.inputs
    assert table["key"].is_unique and set(found["key"]) <= set(table["key"])
    assert set(found["role"]) <= set(claim_table.ROLES) and set(found["statistic"]) <= set(rules.STATISTICS)
    for _, r in table.iterrows():
        mine = found[found["key"] == r["key"]]
        if r["verdict"] == NOT_MEASURED:
            assert mine.empty
            continue
        assert len(mine) >= 1 and mine["name"].is_unique
        assert mine[["name", "value", "ci_low", "ci_high", "role"]].notna().any(axis=None)
        assert mine["name"].notna().all() and mine["role"].notna().all() and mine["value"].notna().all()
        assert (mine["role"] == "headline").sum() == 1, r["key"]
        shown = mine[mine["name"] == r["figure_name"]]
        assert len(shown) == 1, (r["key"], r["figure_name"])
        assert same(tuple(shown[["value", "ci_low", "ci_high"]].iloc[0]), (r["figure"], r["ci_low"], r["ci_high"]))


def test_the_inputs_table_has_name_value_interval_and_role_for_every_verdict_row(tmp_path):
    out = _everything()
    assert set(out.table["claim"]) == set(STATEMENTS)
    _check_inputs(out)
    _check_inputs(evaluate(leakage=c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), claims=["C1", "C3"]))
    # both tables survive the CSV files a study writes, one beside the other
    out.table.to_csv(tmp_path / claim_table.CLAIMS_FILE, index=False)
    out.inputs.to_csv(tmp_path / claim_table.INPUTS_FILE, index=False)
    back = claim_table.Claims.read(tmp_path)
    _check_inputs(back)
    assert back.table["verdict"].tolist() == out.table["verdict"].tolist() and back.table["key"].tolist() == out.table["key"].tolist()
    pd.testing.assert_frame_equal(back.inputs.reset_index(drop=True), out.inputs.reset_index(drop=True), check_dtype=False)
    assert back.table.loc[back.table["claim"] == "C1", "case"].isna().all()
    assert back.table.loc[back.table["claim"] == "C4", "case"].tolist() == ["ntk", "sliding", "sliding"]


def test_each_verdict_is_the_rule_applied_to_its_recorded_inputs():
    # the inputs table holds exactly the figures that decided: applying the rule to them again gives the row's own verdict
    out = _everything()
    rules = {"C1": C1_RULE, "C2": C2_RULE, "C3": C3_RULE, "C6": c6_rule(), "C7": C7_RULE, "C8": C8_RULE}
    for _, r in out.table.iterrows():
        mine = out.inputs[(out.inputs["key"] == r["key"]) & out.inputs["role"].isin(["headline", "decides"])]
        figures = [Estimate(i["name"], i["value"], i["ci_low"], i["ci_high"]) for _, i in mine.iterrows() if i["statistic"] != "threshold"]
        if r["claim"] == "C4":
            rule = C4_SLOPE_RULE if r["figure_name"] == "c_res slope per layer" else C4_RULES[r["case"]]
        elif r["claim"] == "C5":
            t = {i["name"]: i["value"] for _, i in mine.iterrows() if i["statistic"] == "threshold"}
            rule = c5_rule(t["target"], t["band"])
        else:
            rule = rules[r["claim"]]
        assert verdict(rule, figures) == r["own_verdict"], r["key"]
    c4 = out.table[out.table["claim"] == "C4"]
    assert c4["own_verdict"].tolist() == [INCONCLUSIVE, SUPPORTED, SUPPORTED]  # NTK overlaps; sliding above; slope rising
    assert set(c4.iloc[:2]["verdict"]) == {INCONCLUSIVE}  # the joint verdict of the comparisons


def test_inputs_and_claims_refuse_bad_shapes(tmp_path):
    with pytest.raises(ValueError, match="role must be one of"):
        claim_table.Input(Estimate("r", 1.0, 0.0, 2.0), "headlines")
    with pytest.raises(ValueError, match="statistic must be one of"):
        Estimate("r", 1.0, 0.0, 2.0, statistic="median")
    out = _everything()
    from poslens.errors import InputError, NotFoundError

    with pytest.raises(InputError, match="lacks column"):
        claim_table.Claims(out.table.drop(columns=["key"]), out.inputs)
    with pytest.raises(InputError, match="not in the claims table"):
        claim_table.Claims(out.table[out.table["claim"] != "C6"], out.inputs)
    with pytest.raises(NotFoundError, match="claim_inputs.csv"):
        out.table.to_csv(tmp_path / "claims.csv", index=False)
        claim_table.Claims.read(tmp_path)


def test_methodology_shows_the_rules_as_the_rule_objects_write_them():
    import importlib.util
    from types import SimpleNamespace

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("claim_rules", root / "docs" / "_hooks" / "claim_rules.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    text = (root / "docs" / "methodology.md").read_text(encoding="utf-8")
    assert hook.MARKER in text and "| claim | supported if | not supported if |" not in text  # no hand-written copy
    shown = hook.on_page_markdown(text, SimpleNamespace(file=SimpleNamespace(src_uri="methodology.md")), None, None)
    assert hook.MARKER not in shown and claims.rules_table() in shown
    for claim in CLAIMS.values():
        assert all(rule.text() in shown for rule in claim.rules), claim.name


@pytest.mark.parametrize(
    ("r1", "r2", "verdict_of_c8"),
    [((0.9, 0.85, 0.95), (0.92, 0.88, 0.96), SUPPORTED), ((0.6, 0.45, 0.75), (0.92, 0.88, 0.96), INCONCLUSIVE)],
)
def test_c8_reads_the_order_specific_shares(r1, r2, verdict_of_c8):
    out = evaluate(split=split_table(r1, r2), claims=["C8"])
    assert out.table["verdict"].tolist() == [verdict_of_c8]
    _check_inputs(out)


def test_c8_is_inconclusive_without_a_share_and_says_why():
    table = split_table()
    table.loc[(table["kind"] == "difference") & (table["intervention"] == "p"), ["value", "ci_low", "ci_high"]] = (0.05, 0.02, 0.08)
    out = evaluate(split=table, claims=["C8"])
    assert out.table["verdict"].tolist() == [INCONCLUSIVE] and out.table["own_verdict"].tolist() == [INCONCLUSIVE]
    reasons = out.inputs[out.inputs["name"].str.startswith("no share:")]["name"].tolist()
    assert reasons == ["no share: edit p raises f above the unedited run beyond its interval (position added, not removed)"]
