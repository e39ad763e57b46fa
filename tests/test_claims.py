"""Verdict rules of poslens.study.claims on small hand-built tidy tables.

The numbers below are constructed inputs, chosen to put each rule on each of
its three outcomes; no model runs here.
"""

from __future__ import annotations

import doctest
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import poslens.study.claims as claims
from poslens.fit.stats import depth_slope
from poslens.measurement.result import COLUMNS, Result
from poslens.study.claims import (
    C1_RULE,
    C2_RULE,
    C3_RULE,
    C4_RULES,
    C4_SLOPE_RULE,
    CLAIM_COLUMNS,
    INCONCLUSIVE,
    JOINT,
    NOT_MEASURED,
    NOT_SUPPORTED,
    STATEMENTS,
    SUPPORTED,
    Bound,
    Condition,
    Figure,
    Rule,
    c5_rule,
    c6_rule,
    claim_c1,
    claim_c2,
    claim_c3,
    claim_c4,
    claim_c5,
    claim_c6,
    evaluate,
    figure_row,
    joint,
    label_cases,
    not_measured_summary,
    verdict,
)

row = figure_row


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=COLUMNS)


def verdicts(rows: list[dict]) -> set[str]:
    return {r["verdict"] for r in rows}


def only_verdict(rows: list[dict]) -> str:
    found = verdicts(rows)
    assert len(found) == 1, found
    return found.pop()


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


def c2_table(mask0=C2_OK["mask0"], mask_deep=C2_OK["mask_deep"], res0=C2_OK["res0"], rho0=C2_OK["rho0"],
             share=(0.9, 0.8, 1.0)) -> pd.DataFrame:
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
    figures = {**C2_OK, **kw}
    assert [r["figure"] for r in rows][:4] == pytest.approx([figures[k][0] for k in ("mask0", "mask_deep", "res0", "rho0")], nan_ok=True)
    rule = rows[0]["rule"]
    assert "c_mask (layer 0) ci_low > 0 and c_mask (layers >= 1) ci_low > 0" in rule and "rho_mask (layer 0) ci_low > 0.5" in rule
    assert "rho_mask (layer 0) ci_high < 0.5" in rule and "tests/test_leakage_controls.py" in rule
    assert "c_mask (layers >= 1) = " in rule and "count_share (layer 0) = " in rule
    assert f"C_mask - C_res at layer 0 = {figures['mask0'][0] - figures['res0'][0]:.4g}" in rule
    assert "layer 0" in rows[0]["rule"].split(". rule:")[0] and "layer -1" in rows[1]["rule"].split(". rule:")[0]
    assert "metric 'rho_mask', layer 0" in rows[3]["rule"] and "metric 'count_share', layer 0" in rows[4]["rule"]


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
    leak = frame(row("c_res", *res, query_window="early"), row("c_res", -9, -9, -9, query_window="all"))
    abl = frame(row("reduction", *red, query_window="early", intervention=label))
    return leak, abl


@pytest.mark.parametrize(
    "res, red, expected",
    [
        ((0.01, 0.005, 0.015), (0.3, 0.1, 0.5), SUPPORTED),
        ((0.01, 0.005, 0.015), (-0.1, -0.2, -0.05), NOT_SUPPORTED),
        ((-0.01, -0.02, -0.005), (0.3, 0.1, 0.5), NOT_SUPPORTED),
        ((0.01, 0.005, 0.015), (0.1, -0.1, 0.3), INCONCLUSIVE),
        ((0.01, -0.005, 0.025), (0.3, 0.1, 0.5), INCONCLUSIVE),
    ],
)
def test_c3_three_verdicts(res, red, expected):
    rows = claim_c3(*c3_tables(res, red))
    assert len(rows) == 2
    assert only_verdict(rows) == expected
    assert [r["figure"] for r in rows] == [res[0], red[0]]
    assert "reduction ci_low > 0" in rows[0]["rule"] and "window 'early'" in rows[0]["rule"]
    assert "sink-ablation:0.3" in rows[1]["rule"]


def test_c3_one_evaluation_per_ablation_label():
    leak, abl = c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))
    abl = pd.concat([abl, frame(row("reduction", -0.1, -0.2, -0.05, query_window="early", intervention="sink-ablation:0.5"))])
    rows = claim_c3(leak, abl)
    assert [r["verdict"] for r in rows] == [SUPPORTED, SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED]


def test_c3_missing_rows_are_errors():
    leak, abl = c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))
    with pytest.raises(ValueError, match=r"leakage: no row for metric 'c_res', layer -1, head -1, window 'early'"):
        claim_c3(leak[leak["query_window"] == "all"], abl)
    with pytest.raises(ValueError, match="sink-ablation"):
        claim_c3(leak, abl.assign(intervention="none"))


# --------------------------------------------------------------------------- C4


STANDARD = ("smollm2-135m", "base")
STD_CI = (0.010, 0.008, 0.012)
RISING = [(1, 0.01), (2, 0.02), (3, 0.035), (4, 0.04), (5, 0.05)]


def c4_table(ntk: tuple, sliding: tuple, per_layer=RISING) -> pd.DataFrame:
    rows = [
        row("c_res", *STD_CI, model=STANDARD[0], variant=STANDARD[1], query_window="early"),
        row("c_res", *ntk, model="smollm2-135m", variant="ntk:4", query_window="early"),
        row("c_res", *sliding, model="gemma3-270m", variant="base", query_window="early"),
        row("c_res", 0.5, 0.5, 0.5, model="gemma3-270m", layer=0, query_window="early"),  # layer 0 is left out of the slope
    ]
    rows += [row("c_res", v, v - 0.005, v + 0.005, model="gemma3-270m", layer=layer, query_window="early") for layer, v in per_layer]
    rows += [row("c_res", 9, 9, 9, model="gemma3-270m", layer=layer, head=0, query_window="early") for layer, _ in per_layer]
    return label_cases(frame(*rows))


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
    assert "wholly below" in comparisons[0]["rule"] and "c_res (standard) = 0.01 [0.008, 0.012]" in comparisons[0]["rule"]
    assert "c_res (ntk) = " in comparisons[0]["rule"] and "c_res (sliding) = " in comparisons[1]["rule"]


def test_c4_window_parameter_selects_rows():
    t = c4_table((0.002, 0.001, 0.003), (0.03, 0.02, 0.04))
    with pytest.raises(ValueError, match="window 'all'"):
        claim_c4(t, query_window="all")
    flipped = t.assign(query_window="all")
    assert only_verdict([r for r in claim_c4(flipped, "all") if " vs " in r["model"]]) == SUPPORTED


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
    layers, values = zip(*per_layer)
    assert slope["figure"] == pytest.approx(np.polyfit(layers, values, 1)[0])
    assert slope["ci_low"] <= slope["figure"] <= slope["ci_high"]
    assert slope["verdict"] == expected
    assert "jackknife" in slope["rule"] and "95%" in slope["rule"] and "layers 1..5" in slope["rule"]


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


def test_label_cases():
    t = frame(
        *[
            row("c_res", 0, 0, 0, model=m, variant=v)
            for m, v in [
                ("smollm2-135m", "base"),
                ("smollm2-135m", "ntk:2"),
                ("smollm2-135m", "window:64"),
                ("smollm2-135m", "ntk:2+window:64"),
                ("gemma3-270m", "base"),
                ("other", "base"),
            ]
        ]
    )
    assert label_cases(t)["case"].tolist() == ["standard", "ntk", "sliding", None, "sliding", None]
    assert label_cases(t, standard=("other", "base"))["case"].tolist()[-1] == "standard"
    assert "case" not in t.columns  # a copy


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
    assert r["model"] == "m, bos:mean"
    for threshold in ("0.4", "0.1", "0.3", "0.5"):
        assert threshold in r["rule"]


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
    assert "1e-05" in rule and f"readout_chance = {chance:.4g} (1/K, K = {round(1 / chance)})" in rule
    assert "readout_p_value <= 0.05" in rule and f"readout_p_value = {kw.get('p_value', 0.005):.4g}" in rule
    assert "readout_chance_permuted (null mean, central 95%) = 0.124 [0.09, 0.16]" in rule
    assert [r["figure"] for r in rows][2] == kw.get("acc", (0.9,))[0]


def test_c6_alpha_is_a_parameter():
    assert only_verdict(claim_c6(c6_table(p_value=0.03), alpha=0.01)) == INCONCLUSIVE
    assert only_verdict(claim_c6(c6_table(p_value=0.03), alpha=0.05)) == SUPPORTED
    assert "readout_p_value <= 0.01" in claim_c6(c6_table(), alpha=0.01)[0]["rule"]
    assert evaluate(fingerprint=c6_table(p_value=0.03), claims=["C6"], c6_alpha=0.01)["verdict"].tolist() == [INCONCLUSIVE] * 3
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
    assert rows[0]["figure"] == 3e-6 and "at layer 1" in rows[0]["rule"]
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
    assert verdict(RULE, [Figure("r", *figure)]) == expected


def test_verdict_needs_every_condition_for_supported_and_one_for_not_supported():
    rule = Rule(
        supported_if=(Condition("a", "ci_low", ">", 0.0), Condition("b", "value", "<=", 0.05)),
        not_supported_if=(Condition("a", "ci_high", "<=", 0.0), Condition("b", "value", ">", 0.5)),
    )
    figs = lambda a, b: [Figure("a", *a), Figure("b", b, b, b)]  # noqa: E731
    assert verdict(rule, figs((1, 0.5, 2), 0.01)) == SUPPORTED
    assert verdict(rule, figs((1, 0.5, 2), 0.2)) == INCONCLUSIVE  # one supporting condition fails, none refutes
    assert verdict(rule, figs((1, 0.5, 2), 0.9)) == NOT_SUPPORTED  # one refuting condition is enough
    assert verdict(rule, figs((1, 0.5, 2), np.nan)) == INCONCLUSIVE


def test_condition_against_another_figure_and_nan_threshold():
    below = Condition("x", "ci_high", "<", Bound("std", "ci_low"), note="wholly below")
    assert below.text() == "x ci_high < std ci_low (wholly below)"
    std = Figure("std", 0.01, 0.008, 0.012)
    assert below.holds({"x": Figure("x", 0.002, 0.001, 0.003), "std": std})
    assert not below.holds({"x": Figure("x", 0.002, 0.001, 0.009), "std": std})
    assert not below.holds({"x": Figure("x", 0.002, 0.001, 0.003), "std": Figure("std", 0.01, np.nan, 0.012)})


def test_verdict_and_rules_refuse_bad_input():
    with pytest.raises(ValueError, match=r"reads figure\(s\) \['r'\].*\['s'\]"):
        verdict(RULE, [Figure("s", 1, 1, 1)])
    with pytest.raises(ValueError, match="two figures are named 'r'"):
        verdict(RULE, [Figure("r", 1, 1, 1), Figure("r", 1, 1, 1)])
    with pytest.raises(ValueError, match="op must be one of"):
        Condition("r", "ci_low", "=>", 0.0)
    with pytest.raises(ValueError, match="bound must be one of .*'ci_low'"):
        Condition("r", "low", ">", 0.0)
    with pytest.raises(ValueError, match="at least one condition"):
        Rule(supported_if=(), not_supported_if=RULE.not_supported_if)


def _with_threshold(rule: Rule, figure: str, threshold: float) -> Rule:
    def move(conditions):
        return tuple(replace(c, threshold=threshold) if c.figure == figure else c for c in conditions)

    return Rule(move(rule.supported_if), move(rule.not_supported_if), rule.remark)


def test_a_threshold_changes_text_and_verdict_together():
    figs = [Figure("c_mask (layer 0)", 0.02, 0.01, 0.03), Figure("c_mask (layers >= 1)", 0.01, 0.005, 0.015),
            Figure("rho_mask (layer 0)", 0.9, 0.8, 1.0)]
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
    monkeypatch.setattr(claims, "C1_RULE", _with_threshold(C1_RULE, "probe_r2", 0.55))
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


def rule_part(text: str) -> str:
    return text.split(". rule: ", 1)[1].split(". inputs: ", 1)[0]


def test_every_rule_text_in_the_table_is_its_rule_objects_text():
    leakage = pd.concat([c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), c2_table(), c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[0]])
    out = evaluate(
        leakage,
        c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[1],
        frame(row("reduction", 0.4, 0.35, 0.45, intervention="bos:mean", query_window="early")),
        c4_table((0.002, 0.001, 0.003), (0.03, 0.02, 0.04)),
        c6_table(),
        c5_target=0.5,
        c6_alpha=0.01,
    )
    texts = {claim: set(part["rule"].map(rule_part)) for claim, part in out.groupby("claim")}
    assert texts["C1"] == {C1_RULE.text()}
    assert texts["C2"] == {C2_RULE.text()}
    assert texts["C3"] == {C3_RULE.text()}
    assert texts["C5"] == {c5_rule(0.5, 0.1).text()}
    assert texts["C6"] == {c6_rule(1e-5, 0.01).text()}
    comparison, slope = sorted(texts["C4"], key=len, reverse=True)
    assert comparison == f"ntk case: {C4_RULES['ntk'].text()}. sliding case: {C4_RULES['sliding'].text()}. all comparisons together: {JOINT}"
    assert slope.endswith("; " + C4_SLOPE_RULE.text())


# --------------------------------------------------------------------------- evaluate


def test_evaluate_columns_and_not_measured():
    out = evaluate()
    assert list(out.columns) == CLAIM_COLUMNS == ["claim", "statement", "model", "figure", "ci_low", "ci_high", "rule", "verdict"]
    assert out["claim"].tolist() == ["C1", "C2", "C3", "C4", "C5", "C6"]
    assert set(out["verdict"]) == {NOT_MEASURED} == {"not measured"} and set(out["rule"]) == {"not measured"}
    assert out["statement"].tolist() == list(STATEMENTS.values())


def test_only_leakage_leaves_c3_to_c6_not_measured_and_names_their_commands():
    leakage = pd.concat([c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), c2_table(), c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[0]])
    out = evaluate(leakage=leakage)
    verdicts = out.groupby("claim")["verdict"].agg(set).to_dict()
    assert verdicts == {"C1": {SUPPORTED}, "C2": {SUPPORTED}, "C3": {NOT_MEASURED}, "C4": {NOT_MEASURED},
                        "C5": {NOT_MEASURED}, "C6": {NOT_MEASURED}}
    assert INCONCLUSIVE not in set(out["verdict"])
    line = not_measured_summary(out, "results/x", present=["leakage"])
    assert line == ("not measured: C3 (run: poslens ablate-sinks --out results/x), C4 (run: poslens compare --out results/x), "
                    "C5 (run: poslens bos-swap --out results/x), C6 (run: poslens fingerprint --out results/x)")
    # with nothing present, C3 names both of its commands, C1 and C2 the leakage command
    everything = not_measured_summary(evaluate(), "D")
    assert everything.startswith("not measured: C1 (run: poslens leakage --out D), C2 (run: poslens leakage --out D), "
                                 "C3 (run: poslens leakage --out D, poslens ablate-sinks --out D), ")
    assert not_measured_summary(out[out["claim"].isin(["C1", "C2"])], "D") == ""


def test_evaluate_everything():
    leakage = pd.concat([c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)), c2_table(), c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[0]])
    ablation = c3_tables((0.01, 0.005, 0.015), (0.3, 0.1, 0.5))[1]
    bos_swap = frame(row("reduction", 0.4, 0.35, 0.45, intervention="bos:mean", query_window="early"))
    comparison = c4_table((0.002, 0.001, 0.003), (0.03, 0.02, 0.04))
    out = evaluate(Result(leakage, {}), Result(ablation, {}), bos_swap, comparison, c6_table())
    assert list(out.columns) == CLAIM_COLUMNS
    assert set(out["claim"]) == set(STATEMENTS)
    assert set(out["verdict"]) == {SUPPORTED}
    assert out["figure"].dtype == float and out["rule"].str.len().min() > 20
    # C3 without its ablation table is not measured; C1 and C2 still evaluate.
    partial = evaluate(leakage=leakage)
    assert partial.set_index("claim").loc["C3", "rule"] == "not measured"
    assert partial.set_index("claim").loc["C3", "verdict"] == NOT_MEASURED
    assert set(partial[partial["claim"].isin(["C1", "C2"])]["verdict"]) == {SUPPORTED}
    # Thresholds pass through.
    moved = evaluate(bos_swap=bos_swap, claims=["C5"], c5_target=0.8)
    assert moved["verdict"].tolist() == [NOT_SUPPORTED]


def test_evaluate_propagates_missing_rows_and_rejects_unknown_claims():
    with pytest.raises(ValueError, match="c_mask"):
        evaluate(leakage=c1_table((0.05, 0.04, 0.06), (0.6, 0.5, 0.7)))
    with pytest.raises(ValueError, match="unknown claim"):
        evaluate(claims=["C7"])


def test_docstring_examples_run():
    result = doctest.testmod(claims, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 10 and result.failed == 0
