"""The comparisons that decide C4 (methodology §9.1) against closed forms and hand-written jackknifes.

Synthetic heads are measured with :func:`poslens.measurement.pipeline.measure_scores`:
a relative kernel plus an absolute term whose size varies from sequence to
sequence (content noise) and is scaled by each "variant". The references below
refit each case from its sums with ``all_metrics`` (the figure itself) but
write the jackknife, the slopes (``np.polyfit``), the depth fractions, the
Welch–Satterthwaite df and the t quantiles themselves.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

import poslens
from poslens.fit.metrics import all_metrics
from poslens.measurement.pipeline import measure_scores
from poslens.measurement.result import Result
from poslens.mechanisms import comparison_cases as cmp_cases
from poslens.mechanisms import comparison_rows as cmp_rows
from poslens.mechanisms import comparison_stats as cmp_stats
from poslens.mechanisms import comparisons as cmp
from poslens.mechanisms.architectures import Case, compare_cases

T, N, G, EARLY, H, LAYERS = 24, 8, 4, 8, 2, 3
NEG = torch.finfo(torch.float32).min


def _scores(scale: float, seed: int = 0) -> list[torch.Tensor]:
    """Per layer: a relative kernel, a shared absolute term of amplitude a_n that varies by sequence (content noise,
    the same in every variant), and a variant's own absolute term (a key-0 logit growing with i) scaled by ``scale``."""
    gen = torch.Generator().manual_seed(seed)
    amp = 1.0 + 0.8 * torch.randn(N, generator=gen, dtype=torch.float64)
    i = torch.arange(T, dtype=torch.float64)[:, None]
    j = torch.arange(T, dtype=torch.float64)[None, :]
    out = []
    for layer in range(LAYERS):
        relative = -0.15 * (i - j) + 0.5 * (j == 0)
        shared = (1 + layer) * 0.3 * torch.log1p(i) * (j > 0) * (j / (i + 1))
        own = (1 + layer) * 0.5 * torch.log1p(i) * (j == 0)
        s = relative[None, None] + amp[:, None, None, None] * shared[None, None] + scale * own[None, None]
        s = s * torch.tensor([1.0, 0.5], dtype=torch.float64)[None, :, None, None]  # H = 2 heads
        out.append(s.float().masked_fill((j > i)[None, None], NEG))
    return out


def _case(variant: str, scale: float, tokens: str = "same", seed: int = 0) -> Result:
    r = measure_scores(_scores(scale, seed), groups=G, early=EARLY, name="synthetic", row_sums="second-pass")
    r.meta["model"]["variant"] = variant
    r.meta["corpus"] = {"tokens_sha256": tokens}
    return r


@pytest.fixture(scope="module")
def ntk_cases() -> dict[float, Result]:
    return {alpha: _case("base" if alpha == 1 else f"ntk:{alpha:g}", 1.0 / (1 + 0.3 * np.log2(alpha))) for alpha in (1, 2, 4, 8)}


def _c_res(result: Result, window: str = "all") -> tuple[float, np.ndarray, np.ndarray]:
    """C_res over layers ≥ 1 (head mean) from the table, its per-layer values, and hand-made replicates [G, L + 1]."""
    sums = result.sums
    w = ("early", "all").index(window)
    cf = sums.counterfactual_cells
    replicates = np.stack([all_metrics(sums.leave_out(g), cf.leave_out(g), sums.binning, sums.layer_windows)["c_res"][w, :, -1] for g in range(G)])
    per_layer = np.array([result.value("c_res", window, layer=layer) for layer in range(LAYERS)])
    return result.value("c_res", window), per_layer, replicates


def _hand_jackknife(estimate: float, replicates: np.ndarray) -> tuple[float, float, float]:
    g = len(replicates)
    se = np.sqrt((g - 1) / g * ((replicates - replicates.mean()) ** 2).sum())
    t = stats.t.ppf(0.975, g - 1)
    return se, estimate - t * se, estimate + t * se


def _row(table: pd.DataFrame, **where) -> pd.Series:
    rows = table
    for column, value in where.items():
        rows = rows[rows[column] == value]
    assert len(rows) == 1, (where, len(rows))
    return rows.iloc[0]


def test_paired_difference_is_the_difference_of_separate_figures(ntk_cases):
    base, variant = ntk_cases[1], ntk_cases[4]
    table = cmp_rows.paired_differences(cmp_cases.case_figures(variant), cmp_cases.case_figures(base))
    for window in ("early", "all"):
        b, b_layers, b_reps = _c_res(base, window)
        v, v_layers, v_reps = _c_res(variant, window)
        row = _row(table, metric="c_res", query_window=window, layer=-1)
        assert row["comparison"] == "ntk:4 − base" and row["kind"] == "paired" and row["reference_variant"] == "base"
        assert row["value"] == pytest.approx(v - b, rel=1e-10, abs=1e-14)
        se, low, high = _hand_jackknife(v - b, v_reps[:, -1] - b_reps[:, -1])
        assert row["se"] == pytest.approx(se, rel=1e-8)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), rel=1e-8)
        assert row["df"] == G - 1
        for layer in range(LAYERS):
            per_layer = _row(table, metric="c_res", query_window=window, layer=layer)
            assert per_layer["value"] == pytest.approx(v_layers[layer] - b_layers[layer], rel=1e-9, abs=1e-14)


def test_paired_interval_is_narrower_than_independent_under_shared_noise(ntk_cases):
    base, variant = cmp_cases.case_figures(ntk_cases[1]), cmp_cases.case_figures(ntk_cases[4])
    paired, independent = cmp_rows.paired_differences(variant, base), cmp_rows.independent_differences(variant, base)
    for window, ratio in (("early", 0.5), ("all", 1.0)):
        p = _row(paired, metric="c_res", query_window=window, layer=-1)
        i = _row(independent, metric="c_res", query_window=window, layer=-1)
        assert p["value"] == pytest.approx(i["value"], rel=1e-12)
        # a_n varies by sequence and both cases share it: the paired difference drops it, the independent one keeps it
        assert p["se"] < ratio * i["se"]
        assert p["ci_high"] - p["ci_low"] < i["ci_high"] - i["ci_low"]
        assert p["detectable"] < i["detectable"]


def test_shared_noise_cancels_exactly_on_figures():
    noise = np.array([0.3, -0.2, 0.1, -0.2])[:, None, None] * np.ones((G, 2, LAYERS + 1))
    small = np.array([0.01, -0.01, 0.0, 0.0])[:, None, None] * np.ones((G, 2, LAYERS + 1))
    a = cmp_cases.CaseFigures("m", "base", {"c_res": np.full((2, LAYERS + 1), 1.0)}, {"c_res": 1.0 + noise}, tokens="t")
    b = cmp_cases.CaseFigures("m", "ntk:2", {"c_res": np.full((2, LAYERS + 1), 0.8)}, {"c_res": 0.8 + noise + small}, tokens="t")
    paired = _row(cmp_rows.paired_differences(b, a), metric="c_res", query_window="all", layer=-1)
    independent = _row(cmp_rows.independent_differences(b, a), metric="c_res", query_window="all", layer=-1)
    expected_se = np.sqrt(3 / 4 * (small[:, 0, 0] ** 2).sum())
    assert paired["se"] == pytest.approx(expected_se, rel=1e-12)
    se_each = np.sqrt(3 / 4 * ((noise[:, 0, 0] - noise[:, 0, 0].mean()) ** 2).sum())
    assert independent["se"] > 10 * paired["se"] and independent["se"] > se_each


def test_ntk_trend_is_polyfit_on_log_alpha(ntk_cases):
    alphas = sorted(ntk_cases)
    figures = [cmp_cases.case_figures(ntk_cases[a]) for a in alphas]
    table = cmp.compare_figures(figures)
    row = _row(table, kind="trend", variant="ntk", metric="c_res", query_window="all", layer=-1)
    x = np.log2(alphas)
    points = [_c_res(ntk_cases[a]) for a in alphas]
    assert row["value"] == pytest.approx(np.polyfit(x, [p[0] for p in points], 1)[0], rel=1e-9)
    assert row["value"] < 0  # the synthetic "NTK" shrinks the absolute term as α grows
    slopes = np.array([np.polyfit(x, [p[2][g, -1] for p in points], 1)[0] for g in range(G)])
    se, low, high = _hand_jackknife(row["value"], slopes)
    assert row["se"] == pytest.approx(se, rel=1e-7)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), rel=1e-7)
    assert row["parameter"] == "log2 alpha" and "base" in row["comparison"]
    for layer in range(LAYERS):
        per_layer = _row(table, kind="trend", variant="ntk", metric="c_res", query_window="all", layer=layer)
        assert per_layer["value"] == pytest.approx(np.polyfit(x, [p[1][layer] for p in points], 1)[0], rel=1e-8, abs=1e-14)
    paired = table[table["kind"] == "paired"]
    assert sorted(set(paired["comparison"])) == ["ntk:2 − base", "ntk:4 − base", "ntk:8 − base"]


def test_depth_slope_is_polyfit_over_fraction_of_depth(ntk_cases):
    result = ntk_cases[1]
    row = _row(cmp_rows.depth_slopes(cmp_cases.case_figures(result)), metric="c_res_depth_slope", query_window="all")
    _, per_layer, replicates = _c_res(result)
    x = np.array([1, 2]) / (LAYERS - 1)  # layers 1 … L − 1 over l / (L − 1)
    assert row["value"] == pytest.approx(np.polyfit(x, per_layer[1:], 1)[0], rel=1e-9)
    hand = np.array([np.polyfit(x, replicates[g, 1:LAYERS], 1)[0] for g in range(G)])
    se, low, high = _hand_jackknife(row["value"], hand)
    assert row["se"] == pytest.approx(se, rel=1e-7) and row["layer"] == -1 and row["kind"] == "depth-slope"
    assert row["value"] > 0  # the absolute term grows with the layer here


def test_window_trend_leaves_out_the_base_and_windows_past_t():
    figures = [
        cmp_cases.CaseFigures("m", v, {"c_res": np.full((2, LAYERS + 1), y)}, {"c_res": np.full((G, 2, LAYERS + 1), y)}, tokens="t", seq_len=T)
        for v, y in (("base", 9.0), ("window:4", 3.0), ("window:8", 2.0), ("window:16", 1.0), ("window:32", 7.0))
    ]
    row = _row(cmp.compare_figures(figures), kind="trend", variant="window", metric="c_res", query_window="all", layer=-1)
    assert row["value"] == pytest.approx(np.polyfit(np.log2([4, 8, 16]), [3.0, 2.0, 1.0], 1)[0])
    assert row["comparison"] == "slope on log2 window (window:4, window:8, window:16)"


def test_depth_slope_trend_over_windows():
    # depth slope of case W: per-layer c_res = k_W · l; with L = 3, x = l / 2, so the slope is 2 · k_W
    ks = {8: 3.0, 16: 2.0}
    figures = [
        cmp_cases.CaseFigures(
            "m",
            f"window:{w}",
            {"c_res": np.array([[0.0, k, 2 * k, 1.5 * k]] * 2)},
            {"c_res": np.array([[[0.0, k, 2 * k, 1.5 * k]] * 2] * G)},
            tokens="t",
            seq_len=T,
        )
        for w, k in ks.items()
    ]
    table = cmp.compare_figures(figures)
    row = _row(table, kind="trend", variant="window", metric="c_res_depth_slope", query_window="all")
    assert row["value"] == pytest.approx((2 * 2.0 - 2 * 3.0) / (np.log2(16) - np.log2(8)))


def test_detectable_difference_formula_and_power():
    for se, df in ((0.5, 7), (2.0, 3), (1.0, np.inf)):
        expected = (stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * se
        assert float(cmp_stats.detectable_difference(se, df)) == pytest.approx(expected, rel=1e-12)
    assert float(cmp_stats.detectable_difference(1.0, np.inf)) == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    # a true difference of that size, measured with G = 8 groups, is found about 80% of the time
    rng = np.random.default_rng(0)
    sigma, groups, trials = 1.0, 8, 4000
    delta = float(cmp_stats.detectable_difference(sigma / np.sqrt(groups), groups - 1))
    draws = rng.normal(delta, sigma, size=(trials, groups))
    mean = draws.mean(1)
    loo = (draws.sum(1, keepdims=True) - draws) / (groups - 1)  # delete-one-group replicates of the mean
    se = np.sqrt((groups - 1) / groups * ((loo - loo.mean(1, keepdims=True)) ** 2).sum(1))
    found = (mean - stats.t.ppf(0.975, groups - 1) * se > 0).mean()
    assert 0.74 < found < 0.86


def test_independent_difference_uses_both_variances_and_welch_df():
    ra = np.array([0.2, -0.1, 0.0, -0.1])
    rb = np.array([0.5, -0.5, 0.3, -0.3, 0.0, 0.0])
    a = cmp_cases.CaseFigures("gemma", "base", {"c_res": np.full((2, 4), 2.0)}, {"c_res": 2.0 + ra[:, None, None] * np.ones((4, 2, 4))})
    b = cmp_cases.CaseFigures("smol", "base", {"c_res": np.full((2, 5), 1.0)}, {"c_res": 1.0 + rb[:, None, None] * np.ones((6, 2, 5))})
    row = _row(cmp_rows.independent_differences(a, b), metric="c_res", query_window="all")
    va = 3 / 4 * ((ra - ra.mean()) ** 2).sum()
    vb = 5 / 6 * ((rb - rb.mean()) ** 2).sum()
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 5)
    half = stats.t.ppf(0.975, df) * np.sqrt(va + vb)
    assert row["comparison"] == "gemma − smol" and row["layer"] == -1 and row["kind"] == "independent"
    assert row["value"] == pytest.approx(1.0)
    assert (row["se"], row["df"]) == pytest.approx((np.sqrt(va + vb), df), rel=1e-12)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((1.0 - half, 1.0 + half), rel=1e-12)
    assert row["detectable"] == pytest.approx((stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * np.sqrt(va + vb), rel=1e-12)
    # depth slopes per fraction of depth compare models of 3 and 4 layers (x = l/2 and l/3)
    slope = _row(cmp_rows.independent_differences(a, b), metric="c_res_depth_slope", query_window="all")
    assert slope["value"] == pytest.approx(0.0, abs=1e-12)


def test_compare_figures_pairs_the_independent_models():
    z = lambda v: ({"c_res": np.full((2, 4), v)}, {"c_res": np.full((G, 2, 4), v)})  # noqa: E731
    figures = [
        cmp_cases.CaseFigures("smol", "base", *z(1.0), tokens="s"),
        cmp_cases.CaseFigures("smol", "ntk:2", *z(0.5), tokens="s"),
        cmp_cases.CaseFigures("gemma", "base", *z(3.0), tokens="g"),
    ]
    table = cmp.compare_figures(figures)
    independent = table[table["kind"] == "independent"]
    assert set(independent["comparison"]) == {"gemma − smol"}
    assert _row(independent, metric="c_res", query_window="all")["value"] == pytest.approx(2.0)


def test_refuses_cases_measured_on_other_tokens_or_groups(ntk_cases):
    other = _case("ntk:2", 0.9, tokens="other")
    with pytest.raises(cmp_cases.UnpairedCasesError, match="different token ids"):
        cmp.compare_results([ntk_cases[1], other])
    z = ({"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((G, 2, 4))})
    with pytest.raises(cmp_cases.UnpairedCasesError, match="different groups"):
        cmp_cases.check_paired(
            cmp_cases.CaseFigures("m", "base", *z, tokens="t", group_sizes=(2, 2, 2, 2)),
            cmp_cases.CaseFigures("m", "window:8", *z, tokens="t", group_sizes=(1, 3, 2, 2)),
        )
    with pytest.raises(cmp_cases.UnpairedCasesError, match="unknown token ids"):
        cmp_cases.check_paired(cmp_cases.CaseFigures("m", "base", *z), cmp_cases.CaseFigures("m", "ntk:2", *z))
    with pytest.raises(poslens.errors.InputError, match="not refitted"):
        cmp_cases.case_figures(ntk_cases[1], metrics=("probe_r2",))
    with pytest.raises(poslens.errors.InputError, match="cell sums"):
        cmp_cases.case_figures(Result(ntk_cases[1].table, ntk_cases[1].meta, None))


def test_the_comparisons_are_a_result_that_saves_and_loads(ntk_cases, tmp_path):
    """The comparisons are a Result of their own (table format 2), saved and loaded like any part, every number kept."""
    figures = [cmp_cases.case_figures(r) for r in (ntk_cases[1], ntk_cases[2])]
    table = cmp.compare_figures(figures)
    result = cmp.comparisons_result(figures, {"cases": []})
    back = cmp.comparison_table(Result.load(result.save(tmp_path / "comparisons.parquet"), sums=False))
    assert back.columns.tolist() == cmp_rows.COMPARISON_COLUMNS
    pd.testing.assert_frame_equal(back, table.reset_index(drop=True), check_dtype=False)
    assert cmp.comparison_table(Result(pd.DataFrame())).empty


def test_a_compare_part_of_table_format_1_is_read_from_its_meta_and_one_of_format_2_is_refused(ntk_cases, tmp_path):
    """The compare part of table format 1 kept the comparisons in its meta (pandas' split form): read from there, every
    number kept; the cases' result of format 2 holds none, and comparison_table says where they are instead of
    giving an empty table."""
    table = cmp.compare_figures([cmp_cases.case_figures(r) for r in (ntk_cases[1], ntk_cases[2])])
    split = table.to_dict(orient="split")  # what table format 1 stored, written here without poslens
    old = Result(ntk_cases[1].table, {"comparisons": {"columns": list(split["columns"]), "data": [list(r) for r in split["data"]]}})
    back = cmp.comparison_table(Result.load(old.save(tmp_path / "compare.parquet"), sums=False))
    pd.testing.assert_frame_equal(back, table.reset_index(drop=True), check_dtype=False)
    cases = Result(ntk_cases[1].table, {"cases": [{"model": "m", "variant": "base", "case": "standard"}]})
    with pytest.raises(poslens.errors.InputError, match=r"compare\.parquet, table format 2.*comparisons\.parquet.*table format 1"):
        cmp.comparison_table(cases)


def test_compare_integration_tiny_llama(tiny_llama_dir, tmp_path):
    cases = [
        Case(str(tiny_llama_dir), "base", "standard"),
        Case(str(tiny_llama_dir), "ntk:2", "ntk"),
        Case(str(tiny_llama_dir), "window:8", "sliding"),
        Case(str(tiny_llama_dir), "window:16", "sliding"),
    ]
    result, comparisons = compare_cases(
        cases,
        n_seqs=8,
        seq_len=32,
        groups=4,
        early=8,
        source="random",
        progress=False,
        loader=lambda name, variant: poslens.load_model(name, variant=variant),
        row_sums="second-pass",
    )
    table = cmp.comparison_table(comparisons)
    assert set(table["kind"]) == {"paired", "trend", "depth-slope"}
    assert set(table.loc[table["kind"] == "paired", "comparison"]) == {"ntk:2 − base", "window:8 − base", "window:16 − base"}
    measured = result.table[(result.table["head"] == -1) & (result.table["metric"] == "c_res") & (result.table["query_window"] == "all")]
    overall = measured[measured["layer"] == -1]
    value = {v: float(overall[overall["variant"] == v]["value"].iloc[0]) for v in ("base", "ntk:2", "window:8", "window:16")}
    row = _row(table, kind="paired", comparison="ntk:2 − base", metric="c_res", query_window="all", layer=-1)
    assert row["value"] == pytest.approx(value["ntk:2"] - value["base"], rel=1e-9, abs=1e-15)
    assert row["ci_low"] <= row["value"] <= row["ci_high"] and row["detectable"] > 0
    slope = _row(table, kind="trend", variant="window", metric="c_res", query_window="all", layer=-1)
    assert slope["value"] == pytest.approx((value["window:16"] - value["window:8"]) / 1.0, rel=1e-9, abs=1e-15)
    assert result.sums is None
    # kept through save and load, as the study's comparisons part does; the cases' table holds none of them
    loaded = Result.load(comparisons.save(tmp_path / "comparisons.parquet"), sums=False)
    pd.testing.assert_frame_equal(cmp.comparison_table(loaded), table)
    assert "comparison" not in result.table.columns and "comparisons" not in result.meta
