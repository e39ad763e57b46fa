"""Power before training (issue 52): seeds needed per C4 zoo comparison, the cost model and the planned family."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from poslens.errors import NotFoundError
from poslens.study.claims.c4_compare import claim_c4_differences
from poslens.study.claims.c4_zoo import ZOO_COMPARISONS
from poslens.study.claims.table import Claims
from poslens.study.cli import app
from poslens.study.zoo_plan import PLANNED_SHAPE, RECORDED, RECORDED_SECONDS, estimate_cpu_seconds, plan_family
from poslens.study.zoo_power import per_seed_values, power_table, read_power_table, seeds_needed

ROOT = Path(__file__).resolve().parents[3]


def _detectable(sd: float, n: int) -> float:
    """The t-based minimum detectable difference written out from scipy, not from poslens."""
    return (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / np.sqrt(n)


@pytest.mark.parametrize("sd, target", [(1.0, 2.0), (0.00193, 0.000202), (0.5, 0.05), (3.0, 30.0)])
def test_seeds_needed_is_the_first_n_that_detects(sd, target):
    n = seeds_needed(sd, target)
    assert _detectable(sd, n) <= target
    assert n == 2 or _detectable(sd, n - 1) > target


def test_seeds_needed_none_when_out_of_reach():
    assert seeds_needed(1.0, 1e-6, max_seeds=1000) is None
    assert seeds_needed(1.0, float("nan")) is None
    assert seeds_needed(1.0, -2.0) == seeds_needed(1.0, 2.0)  # the size, either sign


def _figures(values: dict[str, list[float]], metric: str = "c_res") -> pd.DataFrame:
    rows = [
        dict(member=m, seed=s, part="leakage", metric=metric, layer=-1, query_window="all", intervention="none", value=v)
        for m, vs in values.items()
        for s, v in enumerate(vs)
    ]
    return pd.DataFrame(rows)


def test_per_seed_values_pair_by_seed():
    f = _figures({"standard": [1.0, 2.0, 3.0], "sliding": [1.5, 2.0]})  # seed 2 of sliding is missing
    f = pd.concat([f, _figures({"standard": [9.0]}).assign(layer=0)])  # a per-layer row is not read
    assert per_seed_values(f, ZOO_COMPARISONS[1]).tolist() == [0.5, 0.0]


def _inference() -> Claims:
    base = dict(intervention="none", query_window="all", layer=-1, head=-1, parameter="", se=0.001, df=7.0, detectable=0.003)
    base.update(kind="paired", reference_model="s", reference_variant="base", metric="c_res", model="s")
    table = pd.DataFrame(
        [
            dict(base, variant="ntk:2", value=-0.0001, ci_low=-0.0003, ci_high=0.0001, comparison="ntk:2 − base"),  # inconclusive
            dict(base, variant="ntk:4", value=-0.002, ci_low=-0.003, ci_high=-0.001, comparison="ntk:4 − base"),
            dict(base, variant="ntk:8", value=-0.004, ci_low=-0.005, ci_high=-0.003, comparison="ntk:8 − base"),
            dict(base, variant="window:64", value=0.004, ci_low=0.003, ci_high=0.005, comparison="window:64 − base"),
        ]
    )
    cases = [dict(model="s", variant="base", case="standard"), dict(model="s", variant="window:64", case="sliding")]
    cases += [dict(model="s", variant=f"ntk:{a}", case="ntk") for a in (2, 4, 8)]
    return Claims.from_rows(claim_c4_differences(table, cases))


def test_power_table_plans_the_smallest_target_the_inference_run_showed():
    f = _figures({"standard": [0.010, 0.012, 0.011, 0.013], "large-base-trained": [0.009, 0.012, 0.010, 0.010]})
    table = power_table(f, _inference())
    assert table["target"].round(6).tolist() == [0.0001, 0.002, 0.004]
    assert table["planned"].tolist() == [False, True, False]  # ntk:2 is inconclusive there: not a shown effect
    sd = float(np.std([-0.001, 0.0, -0.001, -0.003], ddof=1))
    assert table["sd"].iloc[0] == pytest.approx(sd)
    assert table["n_seeds"].iloc[0] == 4
    for row in table.itertuples():
        assert row.seeds_needed == seeds_needed(sd, row.target)
        assert row.seeds_needed_sd_upper >= row.seeds_needed  # the upper sd never asks for fewer seeds
    assert table["sd_upper"].iloc[0] == pytest.approx(sd * np.sqrt(3 / stats.chi2.ppf(0.2, 3)))


def test_estimate_scales_with_runs_steps_and_shape():
    assert estimate_cpu_seconds(RECORDED) == pytest.approx(RECORDED_SECONDS)
    assert estimate_cpu_seconds(replace(RECORDED, seeds=6, steps=3000)) == pytest.approx(RECORDED_SECONDS)
    wider = estimate_cpu_seconds(replace(RECORDED, width=64))
    assert 2 * RECORDED_SECONDS < wider < 4 * RECORDED_SECONDS  # between linear (read-out) and quadratic (layers) in width


def test_plan_is_capped_by_the_budget():
    power = pd.DataFrame(
        [
            dict(comparison="easy", planned=True, seeds_needed=3, seeds_needed_sd_upper=4),
            dict(comparison="hard", planned=True, seeds_needed=50, seeds_needed_sd_upper=200),
            dict(comparison="not planned", planned=False, seeds_needed=40, seeds_needed_sd_upper=40),
        ]
    )
    plan = plan_family(power)
    assert plan.shape.seeds == 4 and plan.robust == ("easy",) and plan.beyond == (("hard", 50),)
    assert plan.seconds <= plan.budget
    tight = plan_family(power, budget=estimate_cpu_seconds(replace(PLANNED_SHAPE, seeds=3)))
    assert tight.shape.seeds == 3 and tight.reachable == ("easy",) and tight.robust == ()


def test_read_power_table_needs_a_measured_family(tmp_path):
    with pytest.raises(NotFoundError, match="figures.csv is missing: --out must hold a measured family"):
        read_power_table(tmp_path, ROOT / "docs" / "findings_data")


def test_cli_power_on_the_recorded_family(tmp_path):
    data = tmp_path / "zoo_data"
    shutil.copytree(ROOT / "docs" / "zoo_data" / "first_family", data)  # the family the power table was computed from
    result = CliRunner().invoke(app, ["zoo-measure", "--power", "--out", str(data), "--findings", str(ROOT / "docs" / "findings_data")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(data / "power.csv")
    planned = table[table["planned"]].set_index("comparison")
    assert len(planned) == len(ZOO_COMPARISONS)
    assert planned.loc["c_res (large-base-trained − standard)", "seeds_needed"] > 100  # the trained large base is out of reach
    assert (planned.drop(index="c_res (large-base-trained − standard)")["seeds_needed"] <= 5).all()
    assert "The planned family" in result.output and "power.csv" in result.output


def _said(result) -> str:
    """The command's output with rich's box and line breaks taken out."""
    return " ".join(result.output.replace("│", " ").split())


def test_cli_power_refuses_a_folder_without_a_family(tmp_path):
    result = CliRunner().invoke(app, ["zoo-measure", "--power", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "figures.csvismissing" in _said(result).replace(" ", "")


def test_cli_without_power_needs_zoo_and_work(tmp_path):
    result = CliRunner().invoke(app, ["zoo-measure", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "--power" in _said(result)


def _zoo_claims(per_seed: dict[str, list[float]]):
    """A family whose paired differences (member − standard) are the given per-seed numbers."""
    from poslens.study.claims.c4_zoo import claim_c4_zoo
    from poslens.study.claims.table import Claims

    rows = []
    for member, diffs in per_seed.items():
        for s, d in enumerate(diffs):
            rows += [dict(member="standard", seed=s, metric="c_res", value=0.1), dict(member=member, seed=s, metric="c_res", value=0.1 + d)]
    return Claims.from_rows(claim_c4_zoo(pd.DataFrame(rows).drop_duplicates()))


def test_decisions_read_the_band_planned_before_training_and_say_equivalent_or_give_power():
    from scipy import stats

    from poslens.study.zoo_decisions import decide_family, decision_sentence

    power = pd.DataFrame(
        [
            dict(comparison="c_res (sliding − standard)", planned=True, target=0.01, target_row="window:64"),
            dict(comparison="c_res (sliding − standard)", planned=False, target=0.5, target_row="window:256"),
            dict(comparison="c_res (large-base-trained − standard)", planned=True, target=0.0002, target_row="ntk:4"),
        ]
    )
    tight = [0.001, -0.001, 0.0005, -0.0005, 0.0]  # interval well inside ±0.01: equivalent
    wide = [0.003, -0.002, 0.004, -0.003, 0.001]  # interval reaching past ±0.0002: inconclusive
    d = decide_family(_zoo_claims({"sliding": tight, "large-base-trained": wide}), power).set_index("comparison", drop=False)
    sliding, large = d.loc["c_res (sliding − standard)"], d.loc["c_res (large-base-trained − standard)"]
    half = stats.t.ppf(0.975, 4) * np.std(tight, ddof=1) / np.sqrt(5)  # the interval by hand
    assert sliding["ci_high"] == pytest.approx(np.mean(tight) + half) and sliding["band"] == 0.01  # the planned row, not 0.5
    assert sliding["equivalent"] and sliding["decision"] == "equivalent to 0 within ±0.01" and sliding["powered"]
    assert large["decision"] == "inconclusive" and not large["equivalent"] and not large["powered"]
    assert large["sd"] == pytest.approx(np.std(wide, ddof=1))
    assert large["seeds_for_band"] == seeds_needed(np.std(wide, ddof=1), 0.0002)
    sentence = decision_sentence(large)
    assert "inconclusive" in sentence and "above the band 0.0002" in sentence and f"{large['seeds_for_band']} seeds" in sentence
    # a clear effect is decided by the sign rule, band or not
    clear = decide_family(_zoo_claims({"sliding": [0.02, 0.021, 0.019]}), power).iloc[0]
    assert clear["decision"] == "supported" and not clear["equivalent"]


def test_a_comparison_whose_runs_formed_no_sink_is_not_read():
    from poslens.study.claims.c4_zoo import claim_c4_zoo
    from poslens.study.claims.table import Claims
    from poslens.study.zoo_decisions import NOT_READ, decide_family, decision_sentence

    rows = [dict(member=m, seed=s, metric="c_res", value=0.1 + 0.01 * s) for m in ("standard", "sliding") for s in range(3)]
    claims = Claims.from_rows(claim_c4_zoo(pd.DataFrame(rows), without_sinks=[("sliding", s) for s in range(3)]))
    power = pd.DataFrame([dict(comparison="c_res (sliding − standard)", planned=True, target=0.01, target_row="r")])
    row = decide_family(claims, power).iloc[0]
    assert row["n_seeds"] == 0 and row["decision"] == NOT_READ and not row["equivalent"]
    assert decision_sentence(row) == "c_res (sliding − standard): could not be read: no sink formed."
